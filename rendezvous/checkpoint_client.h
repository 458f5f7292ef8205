#ifndef GDT_RENDEZVOUS_CHECKPOINT_CLIENT_H_
#define GDT_RENDEZVOUS_CHECKPOINT_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gdt/v1/coordinator.grpc.pb.h"
#include "rendezvous/kv_client.h"

namespace gdt::rendezvous {

// One recorded checkpoint as the coordinator returns it.
struct CheckpointRecordInfo {
  uint32_t epoch = 0;
  int64_t step = 0;
  uint32_t rank = 0;
  int64_t job_id = 0;
  std::string manifest_json;
  int64_t recorded_unix_ms = 0;
};

// The only class that calls the CheckpointRecords stub. The
// credential is the member's key-value target (KvTargetFromEnvironment).
// Every call has a deadline and waits for the connection until then; status
// codes are the coordinator's (proto/gdt/v1/coordinator.proto
// block), with the endpoint named for UNAVAILABLE and DEADLINE_EXCEEDED.
// Thread-safe.
class CheckpointClient {
 public:
  using Deadline = std::chrono::system_clock::time_point;

  explicit CheckpointClient(KvTarget target);

  absl::Status Record(int64_t step, uint32_t rank, int64_t job_id,
                      const std::string& manifest_json, Deadline deadline);
  // Every record of the gang, newest first.
  absl::StatusOr<std::vector<CheckpointRecordInfo>> List(Deadline deadline);

 private:
  void Fill(v1::CheckpointCaller* caller) const;

  KvTarget target_;
  std::unique_ptr<v1::CheckpointRecords::Stub> stub_;
};

}  // namespace gdt::rendezvous

#endif  // GDT_RENDEZVOUS_CHECKPOINT_CLIENT_H_
