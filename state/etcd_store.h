#ifndef GDT_COORDINATOR_ETCD_STORE_H_
#define GDT_COORDINATOR_ETCD_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "state/etcd_client.h"
#include "state/state_store.h"

namespace gdt::state {

// The StateStore in etcd v3, for several gdt-coord replicas (docs/ha.md).
// Keys live under /gdt/<cluster>/ as JSON values:
//   hosts/<name>            the host (spec, heartbeat, runner slots)
//   drained/<name>          present while the host is drained
//   gangs/<id>              the gang's own record
//   rosters/<id>            the gang's members and leases as of its last
//                           SaveGang (one value: rows under named columns)
//   members/<id>/<index>    one member saved by SaveMember since then
//                           (index zero-padded to 10 digits); it replaces
//                           the roster's row of that index
//   leases/<id>             only in state an older gdt-coord wrote: a
//                           running gang's GPU and port leases (read, and
//                           removed by the gang's next SaveGang)
//   kv_tokens/<id>          the gang's key-value store token
//   host_tokens/<name>      the SHA-256 of the host's token
//   checkpoints/<id>/<step>/<recorded ms>-<rank>-<job>
//                           a checkpoint manifest record
// (names and ids with '/' or '%' are percent-escaped). Every method is one
// etcd transaction: a gang's admission (SaveGang) writes its record and its
// roster and drops its member records in four operations whatever its
// size, well within etcd's default 128 per transaction; its size is bounded
// by etcd's request limit (1.5 MiB by default; a roster costs about 120
// bytes per member, 0.5 MB at 4,096 members). Load() reads the kinds the
// state is made of in pages at one revision.
//
// Fencing: after SetFence(key, revision) every write transaction also
// compares the create revision of `key` (the leader key, see
// leader_election.h) with `revision`, so a coordinator that lost its
// leadership cannot write any more; such writes fail with
// FailedPrecondition.
//
// Not thread-safe; the scheduler that owns it serialises access.
class EtcdStore : public StateStore {
 public:
  // `cluster` names the key prefix: letters, digits, '-', '_', '.'.
  // Errors: InvalidArgument for a bad cluster name.
  static absl::StatusOr<std::unique_ptr<EtcdStore>> Open(
      std::shared_ptr<EtcdClient> client, const std::string& cluster);

  // The key prefix, "/gdt/<cluster>/".
  static std::string Prefix(const std::string& cluster);

  void SetFence(const std::string& key, int64_t create_revision);

  absl::Status SaveHost(const Host& host) override;
  absl::Status SetHostDrained(const std::string& name, bool drained) override;
  absl::Status DeleteHost(const std::string& name) override;
  absl::Status SaveGang(const Gang& gang) override;
  absl::Status SaveMember(const Gang& gang, const Member& member) override;
  // One fenced transaction: the gang's record, roster, member and lease
  // records, kv token and checkpoint records.
  absl::Status DeleteGang(const std::string& gang_id) override;
  absl::StatusOr<StoredState> Load() override;

  // Gang key-value store tokens.
  absl::Status SaveKvToken(const KvToken& token) override;
  absl::Status DeleteKvToken(const std::string& gang_id) override;
  absl::StatusOr<std::vector<KvToken>> LoadKvTokens() override;

  // Checkpoint manifest records.
  // Arrival order among records of one step is etcd's create revision.
  absl::Status SaveCheckpointRecord(const CheckpointRecord& record,
                                    size_t keep_per_gang) override;
  absl::StatusOr<std::vector<CheckpointRecord>> ListCheckpointRecords(
      const std::string& gang_id) override;
  absl::Status DeleteCheckpointRecords(const std::string& gang_id) override;

  // Host tokens.
  absl::Status SaveHostToken(const HostTokenRecord& record) override;
  absl::StatusOr<bool> DeleteHostToken(const std::string& host_name) override;
  absl::StatusOr<std::vector<HostTokenRecord>> LoadHostTokens() override;
  absl::Status SaveSecret(const std::string& name,
                          const std::string& value) override;
  absl::StatusOr<std::string> LoadSecret(const std::string& name) override;

 private:
  // The gang's records with their keys, newest first.
  absl::StatusOr<std::vector<std::pair<std::string, CheckpointRecord>>>
  CheckpointRecordsWithKeys(const std::string& gang_id);

  EtcdStore(std::shared_ptr<EtcdClient> client, std::string prefix)
      : client_(std::move(client)), prefix_(std::move(prefix)) {}
  // Runs `ops` as one transaction under the fence.
  absl::Status Write(const nlohmann::json& ops, const std::string& what);
  std::string Key(const char* kind, const std::string& name) const;
  std::string MemberKey(const std::string& gang_id, uint32_t index) const;

  std::shared_ptr<EtcdClient> client_;
  const std::string prefix_;
  std::string fence_key_;  // Empty: no fence.
  int64_t fence_revision_ = 0;
};

}  // namespace gdt::state

#endif  // GDT_COORDINATOR_ETCD_STORE_H_
