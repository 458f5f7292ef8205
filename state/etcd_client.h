#ifndef GDT_COORDINATOR_ETCD_CLIENT_H_
#define GDT_COORDINATOR_ETCD_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/http_client.h"
#include "common/mutex.h"
#include "nlohmann/json.hpp"

namespace gdt::state {

// One key of etcd's keyspace as a range read returns it.
struct EtcdKeyValue {
  std::string key;
  std::string value;  // Empty for keys-only reads.
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t lease = 0;
};

// What a paged range read returned.
struct EtcdRangePages {
  std::vector<EtcdKeyValue> kvs;  // Sorted by key.
  int64_t revision = 0;           // The store revision every page was read at.
};

// What a transaction returned.
struct EtcdTxnResult {
  bool succeeded = false;  // Whether every compare held (success branch ran).
  int64_t revision = 0;    // The store revision after the transaction.
  nlohmann::json responses = nlohmann::json::array();  // As the gateway sent.
};

// A small client of etcd v3 through its JSON gRPC gateway (`/v3/kv/range`,
// `/v3/kv/txn`, `/v3/lease/*`) over common/http_client: keys and values travel
// base64 encoded, 64-bit numbers as decimal strings. Tries the endpoints in
// order and sticks to the first that answers.
//
// Thread-safe (one request at a time per client).
class EtcdClient {
 public:
  // `endpoints`: "host:port" or "http://host:port"; at least one.
  // `timeout` bounds every request. Errors: InvalidArgument for an empty
  // list.
  static absl::StatusOr<std::unique_ptr<EtcdClient>> Create(
      const std::vector<std::string>& endpoints,
      std::chrono::milliseconds timeout);

  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // Every key equal to `key` (or, with `prefix`, starting with it), sorted
  // by key. Errors: Unavailable when no endpoint answers; Internal for an
  // answer that is not what the gateway sends.
  absl::StatusOr<std::vector<EtcdKeyValue>> Range(const std::string& key,
                                                  bool prefix, bool keys_only);

  // Every key starting with `prefix`, read in pages of at most `page_size`
  // keys (one request each, so no answer grows with the keyspace), every
  // page at one revision: `revision`, or when 0 the one the first page was
  // read at. Errors: as Range; InvalidArgument when etcd compacted that
  // revision away meanwhile (the message says "compacted").
  absl::StatusOr<EtcdRangePages> RangePages(const std::string& prefix,
                                            int64_t page_size,
                                            int64_t revision = 0);

  // Runs one transaction: if every compare holds, `success`, else `failure`.
  // Build the pieces with the helpers below. Errors: Unavailable as Range;
  // InvalidArgument when etcd refuses the request (too many operations,
  // a key twice).
  absl::StatusOr<EtcdTxnResult> Txn(const nlohmann::json& compare,
                                    const nlohmann::json& success,
                                    const nlohmann::json& failure);

  // Grants a lease of `ttl_s` seconds and returns its id.
  absl::StatusOr<int64_t> GrantLease(int64_t ttl_s);
  // Renews the lease once and returns the TTL it now has. Errors:
  // NotFound when the lease has expired or was revoked.
  absl::StatusOr<int64_t> KeepAlive(int64_t lease);
  // Revokes the lease, deleting every key attached to it.
  absl::Status RevokeLease(int64_t lease);

  // Transaction pieces.
  static nlohmann::json Put(const std::string& key, const std::string& value,
                            int64_t lease = 0);
  static nlohmann::json Delete(const std::string& key);
  static nlohmann::json DeletePrefix(const std::string& prefix);
  static nlohmann::json Get(const std::string& key);
  // Holds when the key's create revision is `revision` (0: it is absent).
  static nlohmann::json CreateRevisionIs(const std::string& key,
                                         int64_t revision);

  // The key just past every key starting with `prefix` (etcd's range_end).
  static std::string PrefixEnd(const std::string& prefix);

  // Parses one key-value object of a gateway answer.
  static absl::StatusOr<EtcdKeyValue> ParseKeyValue(const nlohmann::json& kv);

 private:
  EtcdClient(std::vector<std::string> endpoints,
             std::chrono::milliseconds timeout);
  // POSTs `body` to `path` and returns the parsed answer.
  absl::StatusOr<nlohmann::json> Post(const std::string& path,
                                      const nlohmann::json& body);

  const std::vector<std::string> endpoints_;  // With the http:// scheme.
  HttpClient http_;  // Keeps its connection between requests.
  Mutex mu_;
  size_t current_ ABSL_GUARDED_BY(mu_) = 0;  // The endpoint that answered.
};

}  // namespace gdt::state

#endif  // GDT_COORDINATOR_ETCD_CLIENT_H_
