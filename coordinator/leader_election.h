#ifndef GDT_COORDINATOR_LEADER_ELECTION_H_
#define GDT_COORDINATOR_LEADER_ELECTION_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "state/etcd_client.h"

namespace gdt::coordinator {

// Leader election among gdt-coord replicas through one etcd key:
// the leader key holds the leader's advertised address and is attached to
// an etcd lease of `ttl`. A replica becomes leader by creating the key in a
// transaction that requires it to be absent (create revision 0); the key's
// create revision then identifies this term, and EtcdStore fences every
// write on it. The leader renews the lease; when the leader dies its key
// goes with the lease, and a standby's next attempt wins.
//
// Step-down contract: the caller calls Renew() every renew_interval()
// (ttl/5) with an EtcdClient whose request timeout is at most ttl/5. Renew()
// returns false — and the caller must stop acting as leader — when etcd says
// the lease is gone, or when no renewal succeeded for 3/5 of the TTL,
// measured from when the last successful renewal was *sent* (no later than
// when etcd restarted the lease's TTL). So a leader cut off from etcd knows
// it has lost within 4/5 of the TTL, before etcd lets anyone else win; and
// fencing (EtcdStore::SetFence) refuses its writes in any case.
//
// Not thread-safe: one thread drives it.
class LeaderElection {
 public:
  LeaderElection(std::shared_ptr<state::EtcdClient> client, std::string key,
                 std::string address, std::chrono::seconds ttl);
  ~LeaderElection();  // Does not resign; see Resign().

  // One attempt to become leader. Returns true when this replica holds the
  // key now. Errors: those of EtcdClient (Unavailable when etcd cannot be
  // reached).
  absl::StatusOr<bool> TryAcquire();

  // The leader's address as last seen by TryAcquire() (this replica's own
  // once it leads); empty when there was none.
  const std::string& leader() const { return leader_; }

  // The create revision of the leader key of this term (valid once
  // TryAcquire() returned true).
  int64_t revision() const { return revision_; }

  // Renews the lease once; false when leadership is lost (see above).
  bool Renew();

  // Deletes the leader key by revoking the lease, so a standby takes over at
  // once. Best effort.
  void Resign();

  std::chrono::seconds ttl() const { return ttl_; }
  std::chrono::milliseconds renew_interval() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(ttl_) / 5;
  }

 private:
  std::chrono::steady_clock::duration StepDownAfter() const;

  std::shared_ptr<state::EtcdClient> client_;
  const std::string key_;
  const std::string address_;
  const std::chrono::seconds ttl_;
  int64_t lease_ = 0;
  int64_t revision_ = 0;
  std::string leader_;
  std::chrono::steady_clock::time_point renewed_at_{};
};

}  // namespace gdt::coordinator

#endif  // GDT_COORDINATOR_LEADER_ELECTION_H_
