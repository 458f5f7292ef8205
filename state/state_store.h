#ifndef GDT_COORDINATOR_STATE_STORE_H_
#define GDT_COORDINATOR_STATE_STORE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "state/model.h"

namespace gdt::state {

// Marks a store error that retrying does not cure: the file is damaged or
// not a database, the store's connection became read-only, a file it needs
// cannot be opened. A store error without it may pass by itself (a full
// disk, a lock another process holds, an I/O error, an unreachable etcd).
inline constexpr char kPermanentStoreErrorPayload[] =
    "gdt.dev/state-store-permanent";

// Whether `status` carries kPermanentStoreErrorPayload.
inline bool IsPermanentStoreError(const absl::Status& status) {
  return status.GetPayload(kPermanentStoreErrorPayload).has_value();
}

// Everything the store holds, as Load() returns it.
struct StoredState {
  std::vector<Host> hosts;  // By name.
  std::vector<Gang> gangs;  // By sequence; members come back not present.
  std::vector<GpuLease> gpu_leases;    // By host name, then GPU index.
  std::vector<PortLease> port_leases;  // By host name, then port.
};

// A gang's key-value store token for one epoch (see gang_kv.h).
struct KvToken {
  std::string gang_id;
  uint32_t epoch = 0;
  std::string token;
  // SHA-256 (lowercase hex) of the tokens of the gang's earlier epochs, by
  // epoch: a caller holding one learns that its epoch is over.
  std::map<uint32_t, std::string> earlier_sha256;
};

// Host tokens.
// An agent's credential: only its SHA-256 is stored (docs/security.md).
struct HostTokenRecord {
  std::string host_name;
  std::string sha256;  // Lowercase hex of the token.
  int64_t created_unix_ms = 0;
};

// Checkpoint manifest records.
// One checkpoint a gang member recorded (gdt-ckpt save): the manifest as the
// member wrote it (manifest.json), opaque to the coordinator.
struct CheckpointRecord {
  std::string gang_id;
  uint32_t epoch = 0;  // The epoch that recorded it.
  int64_t step = 0;
  uint32_t rank = 0;
  int64_t job_id = 0;
  std::string manifest_json;
  int64_t recorded_unix_ms = 0;
};

// The coordinator's durable state: hosts, gangs, members, GPU leases, port
// leases and gang key-value store tokens. Runtime-only fields (member
// presence, stream ids, heartbeat time points) are not stored.
//
// Two implementations: Store (SQLite, the embedded default, store.h) and
// EtcdStore (etcd v3, for several coordinator replicas, etcd_store.h). Every
// method is atomic: a multi-key change is written whole or not at all.
// Errors from every method: Internal (or Unavailable for a remote store)
// when the state cannot be written or read; FailedPrecondition when the
// store refuses the write because this process is no longer allowed to
// write (a deposed leader, see etcd_store.h).
//
// Not thread-safe; the scheduler that owns it serialises access.
class StateStore {
 public:
  virtual ~StateStore() = default;

  // Inserts or replaces the host (by name). Keeps its drained mark.
  virtual absl::Status SaveHost(const Host& host) = 0;

  // Marks the host drained or not (kept across SaveHost and restarts).
  virtual absl::Status SetHostDrained(const std::string& name,
                                      bool drained) = 0;

  // Deletes the host and its drained mark. Unknown names are fine.
  virtual absl::Status DeleteHost(const std::string& name) = 0;

  // Inserts or replaces the gang, its members and its leases in one
  // transaction: a RUNNING gang holds a GPU lease for every GPU of its
  // members and a port lease for its master port; other states hold none.
  virtual absl::Status SaveGang(const Gang& gang) = 0;

  // Inserts or replaces the gang's own record and one member's record (by
  // index) in one transaction, leaving the other members and the leases
  // alone: a join or a leave costs O(1) records instead of the whole gang.
  // The caller guarantees that the gang's leases are what its last SaveGang
  // wrote (a forming gang holds none; a member leaving a running gang that
  // others still run in changes none).
  virtual absl::Status SaveMember(const Gang& gang, const Member& member) = 0;

  // A member joining a forming gang: SaveMember's records, which the store
  // may commit later, together with its next change of any other kind or at
  // Flush(), so that a burst of joins shares one commit. A crash can lose the
  // joins since the last commit; their members' streams broke with the
  // coordinator, and each member joins again by job id. `gang_changed`
  // false says that the gang's own record is as last saved but for its
  // waiting reason (which a restart recomputes), so the store may write the
  // member's record only. A commit that fails loses no join: the store
  // keeps them and writes them again with its next change or Flush(). By
  // default the same as SaveMember.
  virtual absl::Status SaveJoin(const Gang& gang, const Member& member,
                                bool gang_changed) {
    (void)gang_changed;
    return SaveMember(gang, member);
  }

  // Commits what SaveJoin left pending, if anything. Errors: what the commit
  // returned; the pending joins are then kept for the next change or
  // Flush().
  virtual absl::Status Flush() { return absl::OkStatus(); }

  // Forgets the gang (a finished one, see the scheduler's retention) in one
  // transaction: its record, members, leases, key-value store token,
  // preemption and elastic records and the checkpoint records stored under
  // its id. Load() no longer returns it. Unknown ids are fine.
  virtual absl::Status DeleteGang(const std::string& gang_id) = 0;

  // Reads everything back.
  virtual absl::StatusOr<StoredState> Load() = 0;

  // Gang key-value store tokens.
  // Inserts or replaces the gang's token (one per gang, for its epoch).
  virtual absl::Status SaveKvToken(const KvToken& token) = 0;
  // Deletes the gang's token. Idempotent.
  virtual absl::Status DeleteKvToken(const std::string& gang_id) = 0;
  // Every stored token, by gang id.
  virtual absl::StatusOr<std::vector<KvToken>> LoadKvTokens() = 0;

  // Checkpoint manifest records.
  // Appends one record; keeps only the newest `keep_per_gang` (by step, then
  // arrival) of the gang. Records outlive epochs and restarts.
  virtual absl::Status SaveCheckpointRecord(const CheckpointRecord& record,
                                            size_t keep_per_gang) = 0;
  // The gang's records, newest first (highest step, then latest recorded).
  virtual absl::StatusOr<std::vector<CheckpointRecord>> ListCheckpointRecords(
      const std::string& gang_id) = 0;
  // Deletes every record of the gang. Idempotent.
  virtual absl::Status DeleteCheckpointRecords(const std::string& gang_id) = 0;

  // Host tokens.
  // Inserts or replaces the host's token record (one per host name).
  virtual absl::Status SaveHostToken(const HostTokenRecord& record) = 0;
  // Deletes the host's token; returns whether there was one.
  virtual absl::StatusOr<bool> DeleteHostToken(
      const std::string& host_name) = 0;
  // Every stored record, by host name.
  virtual absl::StatusOr<std::vector<HostTokenRecord>> LoadHostTokens() = 0;

  // Coordinator secrets: keys only the coordinator (and its standbys, which
  // share the store) may know, such as the one member tokens are signed
  // with. Inserts or replaces the secret called `name`.
  virtual absl::Status SaveSecret(const std::string& name,
                                  const std::string& value) = 0;
  // The secret called `name`; empty when there is none.
  virtual absl::StatusOr<std::string> LoadSecret(const std::string& name) = 0;

  // Whether what the store writes still goes where a restart reads it back
  // (cheap; touches no record). FailedPrecondition names what changed, e.g.
  // a state file removed or replaced while the store holds it open.
  virtual absl::Status CheckStorage() { return absl::OkStatus(); }

  // A join SaveJoin held back that the store dropped: when its commit had
  // failed and it was written again, it failed with an error that writing
  // it again cannot cure (`error`), and it would have kept every later
  // write from being committed.
  struct DroppedJoin {
    std::string gang_id;
    uint32_t member_index = 0;
    int64_t job_id = 0;
    absl::Status error;
  };
  // The joins dropped since the last call (none for a store that holds no
  // join back).
  virtual std::vector<DroppedJoin> TakeDroppedJoins() { return {}; }

  // What RestoreStorage wrote.
  struct Restored {
    std::string path;
    // The file's directory when it was deleted too and made again; "" when
    // it was there.
    std::string made_directory;
  };

  // After CheckStorage found the store's file deleted while the store holds
  // it open: writes what the store holds to a new file where a restart
  // reads it (making its directory again, should that be gone too) and
  // goes on with that file.
  // Errors: FailedPrecondition when there is nothing to restore (the file
  // is where it was, was moved rather than deleted, or another file is in
  // its place); Unimplemented for a store without a file; others when the
  // restore failed, leaving the store as it was.
  virtual absl::StatusOr<Restored> RestoreStorage() {
    return absl::UnimplementedError("the state store has no file to restore");
  }
};

}  // namespace gdt::state

#endif  // GDT_COORDINATOR_STATE_STORE_H_
