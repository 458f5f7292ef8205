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

// --- Host tokens (issue 8) ---
// An agent's credential: only its SHA-256 is stored (docs/security.md).
struct HostTokenRecord {
  std::string host_name;
  std::string sha256;  // Lowercase hex of the token.
  int64_t created_unix_ms = 0;
};
// --- end host tokens ---

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

  // --- Host tokens (issue 8) ---
  // Inserts or replaces the host's token record (one per host name).
  absl::Status SaveHostToken(const HostTokenRecord& record);
  // Deletes the host's token; returns whether there was one.
  absl::StatusOr<bool> DeleteHostToken(const std::string& host_name);
  // Every stored record, by host name.
  absl::StatusOr<std::vector<HostTokenRecord>> LoadHostTokens();
  // --- end host tokens ---

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
