#ifndef GDT_COORDINATOR_STORE_H_
#define GDT_COORDINATOR_STORE_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/model.h"

struct sqlite3;
struct sqlite3_stmt;

namespace gdt::coordinator {

// Everything the store holds, as Load() returns it.
struct StoredState {
  std::vector<Host> hosts;  // By name.
  std::vector<Gang> gangs;  // By sequence; members come back not present.
  std::vector<GpuLease> gpu_leases;
  std::vector<PortLease> port_leases;
};

// A gang's key-value store token for one epoch (see gang_kv.h).
struct KvToken {
  std::string gang_id;
  uint32_t epoch = 0;
  std::string token;
};

// --- Checkpoint manifest records (issue 5) ---
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
// --- end checkpoint manifest records ---

// The coordinator's durable state in one SQLite file (WAL mode, a schema
// version table, prepared statements, one transaction per change): hosts,
// gangs, members, GPU leases and port leases. Runtime-only fields (member
// presence, stream ids, heartbeat time points) are not stored.
//
// Not thread-safe; the scheduler that owns it serialises access.
class Store {
 public:
  // Opens or creates the database at `path` (":memory:" for a private
  // in-memory one), creating parent directories.
  // Errors: Internal when the file cannot be created or opened;
  // FailedPrecondition when it has a newer schema version.
  static absl::StatusOr<std::unique_ptr<Store>> Open(const std::string& path);

  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Inserts or replaces the host (by name). Keeps its drained mark.
  absl::Status SaveHost(const Host& host);

  // Marks the host drained or not (kept across SaveHost and restarts).
  absl::Status SetHostDrained(const std::string& name, bool drained);

  // Deletes the host and its drained mark. Unknown names are fine.
  absl::Status DeleteHost(const std::string& name);

  // Inserts or replaces the gang, its members and its leases: a RUNNING gang
  // holds a GPU lease for every GPU of its members and a port lease for its
  // master port; other states hold none.
  absl::Status SaveGang(const Gang& gang);

  // Inserts or replaces the gang's own row and one member's row (by index)
  // in one transaction, leaving the other members' rows and the leases
  // alone: a join or a leave costs O(1) rows instead of the whole gang. The
  // caller guarantees that the gang's leases are what its last SaveGang
  // wrote (a forming gang holds none; a member leaving a running gang that
  // others still run in changes none). Errors: Internal when it cannot be
  // written.
  absl::Status SaveMember(const Gang& gang, const Member& member);

  // Reads everything back.
  absl::StatusOr<StoredState> Load();

  // --- Gang key-value store tokens (issue 6) ---
  // Inserts or replaces the gang's token (one per gang, for its epoch).
  absl::Status SaveKvToken(const KvToken& token);
  // Deletes the gang's token. Idempotent.
  absl::Status DeleteKvToken(const std::string& gang_id);
  // Every stored token, by gang id.
  absl::StatusOr<std::vector<KvToken>> LoadKvTokens();
  // --- end gang key-value store tokens ---

  // --- Checkpoint manifest records (issue 5) ---
  // Appends one record; keeps only the newest `keep_per_gang` (by step, then
  // arrival) of the gang. Records outlive epochs and restarts.
  absl::Status SaveCheckpointRecord(const CheckpointRecord& record,
                                    size_t keep_per_gang);
  // The gang's records, newest first (highest step, then latest recorded).
  absl::StatusOr<std::vector<CheckpointRecord>> ListCheckpointRecords(
      const std::string& gang_id);
  // Deletes every record of the gang. Idempotent.
  absl::Status DeleteCheckpointRecords(const std::string& gang_id);
  // --- end checkpoint manifest records ---

 private:
  explicit Store(sqlite3* db) : db_(db) {}
  absl::Status Init();
  absl::Status Exec(const char* sql);
  absl::StatusOr<sqlite3_stmt*> Prepare(const char* sql);
  absl::Status SaveGangRows(const Gang& gang);
  absl::Status SaveGangHeader(const Gang& gang);
  absl::Status SaveMemberRow(const std::string& gang_id, const Member& member);
  absl::StatusOr<StoredState> LoadRows();
  absl::Status Error(const std::string& what) const;

  sqlite3* db_;
  std::map<const char*, sqlite3_stmt*> statements_;  // Keyed by SQL text.
};

}  // namespace gdt::coordinator

#endif  // GDT_COORDINATOR_STORE_H_
