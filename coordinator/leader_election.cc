#include "coordinator/leader_election.h"

#include <utility>

#include "spdlog/spdlog.h"

namespace gdt::coordinator {

using std::chrono::steady_clock;

LeaderElection::LeaderElection(std::shared_ptr<state::EtcdClient> client,
                               std::string key, std::string address,
                               std::chrono::seconds ttl)
    : client_(std::move(client)),
      key_(std::move(key)),
      address_(std::move(address)),
      ttl_(ttl) {}

LeaderElection::~LeaderElection() = default;

absl::StatusOr<bool> LeaderElection::TryAcquire() {
  const steady_clock::time_point sent = steady_clock::now();
  absl::StatusOr<int64_t> lease = client_->GrantLease(ttl_.count());
  if (!lease.ok()) return lease.status();
  absl::StatusOr<state::EtcdTxnResult> result = client_->Txn(
      nlohmann::json::array({state::EtcdClient::CreateRevisionIs(key_, 0)}),
      nlohmann::json::array({state::EtcdClient::Put(key_, address_, *lease)}),
      nlohmann::json::array({state::EtcdClient::Get(key_)}));
  if (!result.ok() || !result->succeeded) {
    // Nobody will renew it; revoke rather than wait for it to expire.
    client_->RevokeLease(*lease).IgnoreError();
    if (!result.ok()) return result.status();
    leader_.clear();
    for (const nlohmann::json& response : result->responses) {
      const nlohmann::json range =
          response.value("response_range", nlohmann::json::object());
      for (const nlohmann::json& kv :
           range.value("kvs", nlohmann::json::array())) {
        absl::StatusOr<state::EtcdKeyValue> parsed =
            state::EtcdClient::ParseKeyValue(kv);
        if (parsed.ok()) leader_ = parsed->value;
      }
    }
    return false;
  }
  lease_ = *lease;
  revision_ = result->revision;  // The put created the key at this revision.
  leader_ = address_;
  renewed_at_ = sent;
  return true;
}

steady_clock::duration LeaderElection::StepDownAfter() const {
  return ttl_ * 3 / 5;
}

bool LeaderElection::Renew() {
  if (lease_ == 0) return false;
  const steady_clock::time_point sent = steady_clock::now();
  if (sent - renewed_at_ >= StepDownAfter()) return false;
  absl::StatusOr<int64_t> ttl = client_->KeepAlive(lease_);
  if (ttl.ok()) {
    renewed_at_ = sent;
    return true;
  }
  if (ttl.status().code() == absl::StatusCode::kNotFound) {
    spdlog::error("event=leader_lease_expired lease={}", lease_);
    return false;
  }
  spdlog::warn("event=leader_lease_renewal_failed error={}",
               std::string(ttl.status().message()));
  return steady_clock::now() - renewed_at_ < StepDownAfter();
}

void LeaderElection::Resign() {
  if (lease_ == 0) return;
  client_->RevokeLease(lease_).IgnoreError();
  lease_ = 0;
}

}  // namespace gdt::coordinator
