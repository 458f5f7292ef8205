#ifndef GDT_COORDINATOR_STORE_H_
#define GDT_COORDINATOR_STORE_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "state/model.h"
#include "state/sqlite_db.h"
#include "state/state_store.h"

namespace gdt::state {

// The StateStore in one SQLite file (WAL mode, a schema version table,
// prepared statements, one transaction per change except joins, which share
// one): the embedded default.
// The contract of every method is StateStore's (state_store.h).
//
// Not thread-safe; the scheduler that owns it serialises access.
class SqliteStore : public StateStore {
 public:
  // How long a write waits for the file's lock held by another process
  // before it fails (Internal, "database is locked").
  static constexpr int kBusyTimeoutMs = 250;

  // Opens or creates the database at `path` (":memory:" for a private
  // in-memory one), creating parent directories. The mode, owner and group
  // of the file's directory are noted then, for RestoreStorage.
  // Errors: Internal when the file cannot be created or opened;
  // FailedPrecondition when it has a newer schema version, or while another
  // store (in this or another process) has it open: the store holds an
  // advisory lock on `<path>.lock` until it is destroyed.
  static absl::StatusOr<std::unique_ptr<SqliteStore>> Open(
      const std::string& path);

  ~SqliteStore() override;
  SqliteStore(const SqliteStore&) = delete;
  SqliteStore& operator=(const SqliteStore&) = delete;

  // Inserts or replaces the host (by name). Keeps its drained mark.
  absl::Status SaveHost(const Host& host) override;

  // Marks the host drained or not (kept across SaveHost and restarts).
  absl::Status SetHostDrained(const std::string& name, bool drained) override;

  // Deletes the host and its drained mark. Unknown names are fine.
  absl::Status DeleteHost(const std::string& name) override;

  // Inserts or replaces the gang, its members and its leases: a RUNNING gang
  // holds a GPU lease for every GPU of its members and a port lease for its
  // master port; other states hold none.
  absl::Status SaveGang(const Gang& gang) override;

  // Inserts or replaces the gang's own row and one member's row (by index)
  // in one transaction, leaving the other members' rows and the leases
  // alone: a join or a leave costs O(1) rows instead of the whole gang. The
  // caller guarantees that the gang's leases are what its last SaveGang
  // wrote (a forming gang holds none; a member leaving a running gang that
  // others still run in changes none). Errors: Internal when it cannot be
  // written.
  absl::Status SaveMember(const Gang& gang, const Member& member) override;

  // SaveMember's rows in a transaction left open (sqlite::Db::Defer): they
  // are committed with the next change of any other kind, at Flush() or when
  // the store is closed; a commit that fails keeps them for the next one.
  absl::Status SaveJoin(const Gang& gang, const Member& member,
                        bool gang_changed) override;
  absl::Status Flush() override;
  // A held-back join is dropped when writing it again fails with an error
  // of its own statement (sqlite::Db::Defer).
  std::vector<DroppedJoin> TakeDroppedJoins() override;

  // Deletes the gang's rows from every table that holds rows by gang id.
  absl::Status DeleteGang(const std::string& gang_id) override;

  // Reads everything back.
  absl::StatusOr<StoredState> Load() override;

  // Gang key-value store tokens.
  // Inserts or replaces the gang's token (one per gang, for its epoch).
  absl::Status SaveKvToken(const KvToken& token) override;
  // Deletes the gang's token. Idempotent.
  absl::Status DeleteKvToken(const std::string& gang_id) override;
  // Every stored token, by gang id.
  absl::StatusOr<std::vector<KvToken>> LoadKvTokens() override;

  // Checkpoint manifest records.
  // Appends one record; keeps only the newest `keep_per_gang` (by step, then
  // arrival) of the gang. Records outlive epochs and restarts.
  absl::Status SaveCheckpointRecord(const CheckpointRecord& record,
                                    size_t keep_per_gang) override;
  // The gang's records, newest first (highest step, then latest recorded).
  absl::StatusOr<std::vector<CheckpointRecord>> ListCheckpointRecords(
      const std::string& gang_id) override;
  // Deletes every record of the gang. Idempotent.
  absl::Status DeleteCheckpointRecords(const std::string& gang_id) override;

  // Host tokens.
  // Inserts or replaces the host's token record (one per host name).
  absl::Status SaveHostToken(const HostTokenRecord& record) override;
  // Deletes the host's token; returns whether there was one.
  absl::StatusOr<bool> DeleteHostToken(const std::string& host_name) override;
  // Every stored record, by host name.
  absl::StatusOr<std::vector<HostTokenRecord>> LoadHostTokens() override;
  absl::Status SaveSecret(const std::string& name,
                          const std::string& value) override;
  absl::StatusOr<std::string> LoadSecret(const std::string& name) override;

  // FailedPrecondition when the file at the store's path is gone or is
  // another file than the one it opened (SQLite writes on to the file it
  // holds open, which a restart does not read).
  absl::Status CheckStorage() override;

  // A deleted state file (no file at the path, and the one held open has
  // no name left) is written anew: the open database, as committed, is
  // copied with SQLite's online backup API into a temporary file in the
  // same directory, which is synced and renamed to the path; the store then
  // reopens on it (and takes `<path>.lock` again should that be gone too).
  // A directory deleted with the file is made again first, with the mode it
  // had when the store was opened (and its owner and group, where the
  // process may set them; parents it had to make get the default mode).
  // The old write-ahead log and shared-memory files at the path belong to
  // the deleted file and are removed first. Joins held back are committed
  // before; while their commit fails nothing is restored.
  absl::StatusOr<Restored> RestoreStorage() override;

 private:
  // An open descriptor, closed on destruction.
  struct HeldFd {
    int fd = -1;
    HeldFd() = default;
    explicit HeldFd(int held) : fd(held) {}
    HeldFd(const HeldFd&) = delete;
    HeldFd& operator=(const HeldFd&) = delete;
    ~HeldFd();
    void Reset(int held);
  };

  explicit SqliteStore(sqlite::Db db);
  absl::Status Init();
  absl::Status SaveGangRows(const Gang& gang);
  // The gang's own row alone, by `sql` (an upsert or an insert if absent).
  absl::Status SaveGangRow(const char* sql, const Gang& gang);
  absl::Status SaveGangHeader(const Gang& gang);
  absl::Status SaveMemberRow(const std::string& gang_id, const Member& member);
  absl::StatusOr<StoredState> LoadRows();
  // Makes `dir` again, as it was when the store was opened, if it is gone;
  // returns whether it did.
  absl::StatusOr<bool> RemakeDirectory(const std::string& dir) const;
  // Calls `on_row(const sqlite::Row&)` for every row of `sql`.
  template <typename OnRow>
  absl::Status ForEachRow(const char* sql, OnRow on_row);

  // The state file opened read-only (-1 for ":memory:"): whether the file
  // the store writes still has a name. Declared before db_ so that it is
  // closed after the connection (closing any descriptor of a file drops
  // the process's POSIX locks on it, SQLite's included).
  HeldFd file_;
  sqlite::Db db_;
  // `<path>.lock`, held (flock) while this store is open: one coordinator
  // per state file. -1 for ":memory:".
  int lock_fd_ = -1;
  // The file it opened (empty path for ":memory:").
  std::string path_;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  // The file's directory when the store was opened.
  mode_t dir_mode_ = 0700;
  // Dropped by a connection since replaced (RestoreStorage).
  std::vector<sqlite::Db::Dropped> dropped_;
  uid_t dir_uid_ = 0;
  gid_t dir_gid_ = 0;
};

}  // namespace gdt::state

#endif  // GDT_COORDINATOR_STORE_H_
