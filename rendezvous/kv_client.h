#ifndef GDT_RENDEZVOUS_KV_CLIENT_H_
#define GDT_RENDEZVOUS_KV_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "gdt/v1/kv.grpc.pb.h"
#include "rendezvous/channel.h"

namespace gdt::rendezvous {

// Where a member's gang key-value store is and the credential for it.
struct KvTarget {
  std::string endpoint;  // GDT_COORDINATOR, host:port.
  std::string gang_id;   // GDT_GANG_ID.
  uint32_t epoch = 0;    // GDT_EPOCH.
  std::string token;     // GDT_KV_TOKEN.
  // GDT_TLS_CA_FILE / GDT_TLS_CERT_FILE / GDT_TLS_KEY_FILE: TLS
  // when set; plaintext by default.
  ClientSecurity security;
};

// Reads GDT_COORDINATOR, GDT_GANG_ID, GDT_EPOCH and GDT_KV_TOKEN through
// `getenv` (returns nullptr for unset variables), and the TLS variables
// (ClientSecurityFromEnvironment in rendezvous/tls.h).
// Errors: FailedPrecondition naming the first variable that is missing or
// empty, or GDT_EPOCH when it is not a positive integer; InvalidArgument
// naming a TLS variable whose file cannot be read.
absl::StatusOr<KvTarget> KvTargetFromEnvironment(
    const std::function<const char*(const char*)>& getenv);

struct KvCasOutcome {
  bool swapped = false;
  std::optional<std::string> current;  // The value after the call.
};

// The only class that calls the GangKv stub. Every call has a deadline and
// waits for the connection until then (a coordinator that is restarting is
// found again); the status codes are GangKv's (see kv/gang_kv.h and
// docs/kv.md). Thread-safe (gRPC stubs are).
class KvClient {
 public:
  using Deadline = std::chrono::system_clock::time_point;

  // Connects lazily to `target.endpoint`, over TLS when `target.security`
  // says so.
  explicit KvClient(KvTarget target);
  // Shares `channel` (e.g. many members in one benchmark process).
  KvClient(KvTarget target, std::shared_ptr<grpc::Channel> channel);

  const KvTarget& target() const { return target_; }

  absl::Status Set(const std::string& key, const std::string& value,
                   Deadline deadline);
  // Errors: NotFound when the key does not exist.
  absl::StatusOr<std::string> Get(const std::string& key, Deadline deadline);
  // Blocks until the key exists. Errors: DeadlineExceeded naming the key at
  // `deadline`.
  // Every call: Unavailable when the coordinator was never reached before
  // the deadline (refused, no route), DeadlineExceeded when it was but did
  // not answer in time.
  absl::StatusOr<std::string> Wait(const std::string& key, Deadline deadline);
  // `expected` unset: only when the key does not exist.
  absl::StatusOr<KvCasOutcome> CompareAndSet(
      const std::string& key, const std::optional<std::string>& expected,
      const std::string& desired, Deadline deadline);
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta,
                              Deadline deadline);

 private:
  void Fill(v1::KvScope* scope) const;
  // `status` of call `op` on `key` as this client's error.
  absl::Status Failure(const grpc::Status& status, const char* op,
                       const std::string& key) const;

  KvTarget target_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::GangKv::Stub> stub_;
};

}  // namespace gdt::rendezvous

#endif  // GDT_RENDEZVOUS_KV_CLIENT_H_
