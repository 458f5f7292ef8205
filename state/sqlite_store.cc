#include "state/sqlite_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <system_error>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "state/sqlite_db.h"

namespace gdt::state {
namespace {

constexpr int kSchemaVersion = 1;

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS hosts (
  name TEXT PRIMARY KEY,
  address TEXT NOT NULL,
  agent_endpoint TEXT NOT NULL,
  gpus TEXT NOT NULL,
  labels TEXT NOT NULL,
  network_interface TEXT NOT NULL,
  cpu_slots INTEGER NOT NULL,
  last_heartbeat_unix_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS gangs (
  gang_id TEXT PRIMARY KEY,
  instance TEXT NOT NULL,
  project_id INTEGER NOT NULL,
  pipeline_id INTEGER NOT NULL,
  group_name TEXT NOT NULL,
  size INTEGER NOT NULL,
  state INTEGER NOT NULL,
  epoch INTEGER NOT NULL,
  reason TEXT NOT NULL,
  master_host TEXT NOT NULL,
  master_addr TEXT NOT NULL,
  master_port INTEGER NOT NULL,
  created_unix_ms INTEGER NOT NULL,
  sequence INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS members (
  gang_id TEXT NOT NULL,
  member_index INTEGER NOT NULL,
  job_id INTEGER NOT NULL,
  job_name TEXT NOT NULL,
  gpus_per_node INTEGER NOT NULL,
  procs_per_node INTEGER NOT NULL,
  launcher INTEGER NOT NULL,
  arrival_host TEXT NOT NULL,
  job_timeout_seconds INTEGER NOT NULL,
  left_gang INTEGER NOT NULL,
  node_rank INTEGER NOT NULL,
  host_name TEXT NOT NULL,
  gpu_indices TEXT NOT NULL,
  exit_code INTEGER NOT NULL,
  PRIMARY KEY (gang_id, member_index));
CREATE TABLE IF NOT EXISTS gpu_leases (
  host_name TEXT NOT NULL,
  gpu_index INTEGER NOT NULL,
  gang_id TEXT NOT NULL,
  member_index INTEGER NOT NULL,
  PRIMARY KEY (host_name, gpu_index));
CREATE TABLE IF NOT EXISTS drained_hosts (name TEXT PRIMARY KEY);
-- Added after schema 1: its own table, so older databases gain it as is.
CREATE TABLE IF NOT EXISTS host_runner_slots (
  name TEXT PRIMARY KEY,
  runner_slots INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS port_leases (
  host_name TEXT NOT NULL,
  port INTEGER NOT NULL,
  gang_id TEXT NOT NULL,
  PRIMARY KEY (host_name, port));
)sql";

constexpr const char* kUpsertHost =
    "INSERT OR REPLACE INTO hosts VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";
constexpr const char* kUpsertRunnerSlots =
    "INSERT OR REPLACE INTO host_runner_slots VALUES (?1, ?2)";
constexpr const char* kDrainHost =
    "INSERT OR IGNORE INTO drained_hosts VALUES (?1)";
constexpr const char* kUndrainHost =
    "DELETE FROM drained_hosts WHERE name = ?1";
constexpr const char* kDeleteHostRow = "DELETE FROM hosts WHERE name = ?1";
constexpr const char* kDeleteRunnerSlots =
    "DELETE FROM host_runner_slots WHERE name = ?1";
constexpr const char* kSelectHosts =
    "SELECT hosts.*, drained_hosts.name IS NOT NULL, "
    "IFNULL(host_runner_slots.runner_slots, 0) FROM hosts "
    "LEFT JOIN drained_hosts ON hosts.name = drained_hosts.name "
    "LEFT JOIN host_runner_slots ON hosts.name = host_runner_slots.name "
    "ORDER BY hosts.name";
constexpr const char* kSelectGangs = "SELECT * FROM gangs ORDER BY sequence";
constexpr const char* kSelectMembers =
    "SELECT * FROM members ORDER BY gang_id, member_index";
constexpr const char* kSelectGpuLeases =
    "SELECT * FROM gpu_leases ORDER BY host_name, gpu_index";
constexpr const char* kSelectPortLeases =
    "SELECT * FROM port_leases ORDER BY host_name, port";
constexpr const char* kUpsertGang =
    "INSERT OR REPLACE INTO gangs VALUES "
    "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)";
// A join's member row needs its gang's row: written by the gang's first
// join, and again here should a failed commit have lost it.
constexpr const char* kInsertGangIfAbsent =
    "INSERT OR IGNORE INTO gangs VALUES "
    "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)";
constexpr const char* kDeleteGangRow = "DELETE FROM gangs WHERE gang_id = ?1";
constexpr const char* kDeleteMembers = "DELETE FROM members WHERE gang_id = ?1";
constexpr const char* kUpsertMember =
    "INSERT OR REPLACE INTO members VALUES "
    "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)";
constexpr const char* kDeleteGpuLeases =
    "DELETE FROM gpu_leases WHERE gang_id = ?1";
constexpr const char* kInsertGpuLease =
    "INSERT OR REPLACE INTO gpu_leases VALUES (?1, ?2, ?3, ?4)";
constexpr const char* kDeletePortLeases =
    "DELETE FROM port_leases WHERE gang_id = ?1";
constexpr const char* kInsertPortLease =
    "INSERT OR REPLACE INTO port_leases VALUES (?1, ?2, ?3)";

// Gang key-value store tokens.
// One secret per gang and epoch; rows go when the gang has ended. A table of
// its own, so older state files gain it without a schema version bump.
constexpr const char* kKvTokenSchema = R"sql(
CREATE TABLE IF NOT EXISTS gang_kv_tokens (
  gang_id TEXT PRIMARY KEY,
  epoch INTEGER NOT NULL,
  token TEXT NOT NULL);
)sql";
constexpr const char* kUpsertKvToken =
    "INSERT OR REPLACE INTO gang_kv_tokens VALUES (?1, ?2, ?3)";
constexpr const char* kDeleteKvToken =
    "DELETE FROM gang_kv_tokens WHERE gang_id = ?1";
constexpr const char* kSelectKvTokens =
    "SELECT gang_id, epoch, token FROM gang_kv_tokens ORDER BY gang_id";
// The SHA-256 of the tokens of a gang's earlier epochs (KvToken's
// earlier_sha256); a table of its own for the same reason.
constexpr const char* kKvEarlierTokenSchema = R"sql(
CREATE TABLE IF NOT EXISTS gang_kv_earlier_tokens (
  gang_id TEXT NOT NULL,
  epoch INTEGER NOT NULL,
  sha256 TEXT NOT NULL,
  PRIMARY KEY (gang_id, epoch));
)sql";
constexpr const char* kInsertKvEarlierToken =
    "INSERT OR REPLACE INTO gang_kv_earlier_tokens VALUES (?1, ?2, ?3)";
constexpr const char* kDeleteKvEarlierTokens =
    "DELETE FROM gang_kv_earlier_tokens WHERE gang_id = ?1";
constexpr const char* kSelectKvEarlierTokens =
    "SELECT gang_id, epoch, sha256 FROM gang_kv_earlier_tokens";

// Checkpoint manifest records.
// A table of its own (no schema version bump); rows outlive epochs and go
// only when newer records of the same gang push them out.
constexpr const char* kCheckpointSchema = R"sql(
CREATE TABLE IF NOT EXISTS checkpoint_records (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  gang_id TEXT NOT NULL,
  epoch INTEGER NOT NULL,
  step INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  job_id INTEGER NOT NULL,
  manifest TEXT NOT NULL,
  recorded_unix_ms INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS checkpoint_records_by_gang
  ON checkpoint_records (gang_id, step);
)sql";
constexpr const char* kInsertCheckpoint =
    "INSERT INTO checkpoint_records (gang_id, epoch, step, rank, job_id, "
    "manifest, recorded_unix_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
constexpr const char* kSelectCheckpoints =
    "SELECT gang_id, epoch, step, rank, job_id, manifest, recorded_unix_ms "
    "FROM checkpoint_records WHERE gang_id = ?1 ORDER BY step DESC, seq DESC";
constexpr const char* kPruneCheckpoints =
    "DELETE FROM checkpoint_records WHERE gang_id = ?1 AND seq NOT IN ("
    "SELECT seq FROM checkpoint_records WHERE gang_id = ?1 "
    "ORDER BY step DESC, seq DESC LIMIT ?2)";
constexpr const char* kDeleteCheckpoints =
    "DELETE FROM checkpoint_records WHERE gang_id = ?1";
// Host tokens.
// SHA-256 of each host's token; a table of its own like gang_kv_tokens.
constexpr const char* kHostTokenSchema = R"sql(
CREATE TABLE IF NOT EXISTS host_tokens (
  host_name TEXT PRIMARY KEY,
  sha256 TEXT NOT NULL,
  created_unix_ms INTEGER NOT NULL);
)sql";
// Members that declared themselves preemptible (GDT_PREEMPTIBLE); a table
// of its own like gang_kv_tokens, so older state files gain it as is and
// their members read as not preemptible, the safe default.
constexpr const char* kPreemptibleSchema = R"sql(
CREATE TABLE IF NOT EXISTS preemptible_members (
  gang_id TEXT NOT NULL,
  member_index INTEGER NOT NULL,
  PRIMARY KEY (gang_id, member_index));
)sql";
constexpr const char* kInsertPreemptible =
    "INSERT OR REPLACE INTO preemptible_members VALUES (?1, ?2)";
constexpr const char* kDeletePreemptible =
    "DELETE FROM preemptible_members WHERE gang_id = ?1 AND member_index = ?2";
constexpr const char* kDeleteGangPreemptible =
    "DELETE FROM preemptible_members WHERE gang_id = ?1";
constexpr const char* kSelectPreemptible =
    "SELECT gang_id, member_index FROM preemptible_members";
// How often each gang was preempted (across its epochs) and the last time;
// a table of its own, so older state files gain it as is and their gangs
// read as never preempted. Only gangs preempted at least once have a row.
constexpr const char* kPreemptionSchema = R"sql(
CREATE TABLE IF NOT EXISTS gang_preemptions (
  gang_id TEXT PRIMARY KEY,
  preemptions INTEGER NOT NULL,
  epoch INTEGER NOT NULL,
  preempted_by TEXT NOT NULL,
  lost_gpu_seconds INTEGER NOT NULL);
)sql";
constexpr const char* kUpsertPreemption =
    "INSERT OR REPLACE INTO gang_preemptions VALUES (?1, ?2, ?3, ?4, ?5)";
constexpr const char* kDeletePreemption =
    "DELETE FROM gang_preemptions WHERE gang_id = ?1";
constexpr const char* kSelectPreemptions =
    "SELECT gang_id, preemptions, epoch, preempted_by, lost_gpu_seconds "
    "FROM gang_preemptions";

// Elastic gangs (`nodes: min..max`): the fewest members a gang may start
// with and the members of its epoch it started without (JSON {index: job
// id}); a table of its own, so older state files gain it as is and their
// gangs read as fixed-size. Only elastic gangs have a row.
constexpr const char* kElasticSchema = R"sql(
CREATE TABLE IF NOT EXISTS elastic_gangs (
  gang_id TEXT PRIMARY KEY,
  nodes_min INTEGER NOT NULL,
  not_needed TEXT NOT NULL);
)sql";
constexpr const char* kUpsertElastic =
    "INSERT OR REPLACE INTO elastic_gangs VALUES (?1, ?2, ?3)";
constexpr const char* kDeleteElastic =
    "DELETE FROM elastic_gangs WHERE gang_id = ?1";
constexpr const char* kSelectElastic =
    "SELECT gang_id, nodes_min, not_needed FROM elastic_gangs";

// When a finished gang ended for good (Gang::ended_unix_ms): a table of its
// own, so older state files gain it as is and their gangs read as "not
// known". Only gangs that ended have a row.
constexpr const char* kEndedSchema = R"sql(
CREATE TABLE IF NOT EXISTS gang_ended (
  gang_id TEXT PRIMARY KEY,
  ended_unix_ms INTEGER NOT NULL);
)sql";
constexpr const char* kUpsertEnded =
    "INSERT OR REPLACE INTO gang_ended VALUES (?1, ?2)";
constexpr const char* kDeleteEnded =
    "DELETE FROM gang_ended WHERE gang_id = ?1";
constexpr const char* kSelectEnded =
    "SELECT gang_id, ended_unix_ms FROM gang_ended";

// A preemption under way (the checkpoint notice went out, the gang still
// runs): a table of its own, with a row only while the gang runs, so a
// restarted coordinator stops the gang at its checkpoint or deadline and
// sends the notice again. The estimate is kept in whole GPU-seconds.
constexpr const char* kPreemptingSchema = R"sql(
CREATE TABLE IF NOT EXISTS preemptions_under_way (
  gang_id TEXT PRIMARY KEY,
  notice_ms INTEGER NOT NULL,
  stop_by_ms INTEGER NOT NULL,
  checkpoint_ms INTEGER NOT NULL,
  preempt_by TEXT NOT NULL,
  by_priority INTEGER NOT NULL,
  estimate_gpu_seconds INTEGER NOT NULL);
)sql";
constexpr const char* kUpsertPreempting =
    "INSERT OR REPLACE INTO preemptions_under_way VALUES "
    "(?1, ?2, ?3, ?4, ?5, ?6, ?7)";
constexpr const char* kDeletePreempting =
    "DELETE FROM preemptions_under_way WHERE gang_id = ?1";
constexpr const char* kSelectPreempting =
    "SELECT gang_id, notice_ms, stop_by_ms, checkpoint_ms, preempt_by, "
    "by_priority, estimate_gpu_seconds FROM preemptions_under_way";

std::string NotNeededToJson(const std::map<uint32_t, int64_t>& not_needed) {
  nlohmann::json object = nlohmann::json::object();
  for (const auto& [index, job_id] : not_needed) {
    object[std::to_string(index)] = job_id;
  }
  return object.dump();
}

constexpr const char* kUpsertHostToken =
    "INSERT OR REPLACE INTO host_tokens VALUES (?1, ?2, ?3)";
constexpr const char* kDeleteHostToken =
    "DELETE FROM host_tokens WHERE host_name = ?1";
constexpr const char* kSelectHostTokens =
    "SELECT host_name, sha256, created_unix_ms FROM host_tokens "
    "ORDER BY host_name";
// Coordinator secrets; a table of its own like host_tokens.
constexpr const char* kSecretSchema = R"sql(
CREATE TABLE IF NOT EXISTS coordinator_secrets (
  name TEXT PRIMARY KEY,
  value TEXT NOT NULL);
)sql";
constexpr const char* kUpsertSecret =
    "INSERT OR REPLACE INTO coordinator_secrets VALUES (?1, ?2)";
constexpr const char* kSelectSecrets =
    "SELECT name, value FROM coordinator_secrets";

std::string GpusToJson(const std::vector<GpuInfo>& gpus) {
  nlohmann::json array = nlohmann::json::array();
  for (const GpuInfo& gpu : gpus) {
    array.push_back({{"index", gpu.index},
                     {"uuid", gpu.uuid},
                     {"model", gpu.model},
                     {"memory_bytes", gpu.memory_bytes}});
  }
  return array.dump();
}

// The columns were written by this file, so a parse failure is corruption.
absl::StatusOr<nlohmann::json> ParseColumn(const std::string& text,
                                           const std::string& what) {
  nlohmann::json parsed = nlohmann::json::parse(text, nullptr, false);
  if (parsed.is_discarded()) {
    return absl::DataLossError(absl::StrCat("corrupt ", what, ": ", text));
  }
  return parsed;
}

// Prefixes an error with what was being done.
absl::Status Annotated(absl::Status status, const std::string& what) {
  if (status.ok()) return status;
  absl::Status annotated(status.code(),
                         absl::StrCat(what, ": ", status.message()));
  status.ForEachPayload([&](absl::string_view type, const absl::Cord& payload) {
    annotated.SetPayload(type, payload);
  });
  return annotated;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SqliteStore>> SqliteStore::Open(
    const std::string& path) {
  if (path != ":memory:") {
    const std::filesystem::path parent =
        std::filesystem::path(path).parent_path();
    std::error_code error;
    if (!parent.empty()) std::filesystem::create_directories(parent, error);
    if (error) {
      return absl::InternalError(absl::StrCat("cannot create ", parent.string(),
                                              ": ", error.message()));
    }
  }
  // One process per state file: a second coordinator on it would keep its
  // own state in memory and overwrite the first's.
  int lock_fd = -1;
  if (path != ":memory:") {
    const std::string lock_path = path + ".lock";
    lock_fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock_fd < 0) {
      return absl::InternalError(
          absl::StrCat("cannot open ", lock_path, ": ", std::strerror(errno)));
    }
    if (flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
      const int error = errno;
      close(lock_fd);
      if (error == EWOULDBLOCK) {
        return absl::FailedPreconditionError(
            absl::StrCat("state file ", path,
                         " is in use by another process (another gdt-coord?)"));
      }
      return absl::InternalError(
          absl::StrCat("cannot lock ", lock_path, ": ", std::strerror(error)));
    }
  }
  absl::StatusOr<sqlite::Db> db = sqlite::Db::Open(path);
  if (!db.ok()) {
    if (lock_fd >= 0) close(lock_fd);
    return db.status();
  }
  std::unique_ptr<SqliteStore> store(new SqliteStore(std::move(*db)));
  store->lock_fd_ = lock_fd;
  // The state holds gang key-value store tokens: owner only. SQLite gives
  // its -wal and -shm files the same mode.
  if (path != ":memory:" && chmod(path.c_str(), 0600) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot chmod 0600 ", path, ": ", std::strerror(errno)));
  }
  if (path != ":memory:") {
    struct stat info = {};
    if (stat(path.c_str(), &info) != 0) {
      return absl::InternalError(
          absl::StrCat("cannot stat ", path, ": ", std::strerror(errno)));
    }
    store->path_ = path;
    store->dev_ = info.st_dev;
    store->ino_ = info.st_ino;
    const std::string dir = std::filesystem::path(path).parent_path().string();
    struct stat dir_info = {};
    if (stat(dir.empty() ? "." : dir.c_str(), &dir_info) == 0) {
      store->dir_mode_ = dir_info.st_mode & 07777;
      store->dir_uid_ = dir_info.st_uid;
      store->dir_gid_ = dir_info.st_gid;
    }
    store->file_.Reset(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  }
  GDT_RETURN_IF_ERROR(Annotated(store->Init(), path));
  return store;
}

absl::Status SqliteStore::CheckStorage() {
  if (path_.empty()) return absl::OkStatus();
  struct stat info = {};
  if (stat(path_.c_str(), &info) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "state file ", path_, ": ", std::strerror(errno),
        " (removed while gdt-coord holds it open: what it writes from now on "
        "goes to the removed file, which a restart does not read)"));
  }
  if (info.st_dev != dev_ || info.st_ino != ino_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "state file ", path_,
        " was replaced while gdt-coord holds the earlier one open: what it "
        "writes goes to that one, and a restart reads the new one"));
  }
  return absl::OkStatus();
}

SqliteStore::HeldFd::~HeldFd() {
  if (fd >= 0) close(fd);
}

void SqliteStore::HeldFd::Reset(int held) {
  if (fd >= 0) close(fd);
  fd = held;
}

absl::StatusOr<StateStore::Restored> SqliteStore::RestoreStorage() {
  if (path_.empty()) {
    return absl::UnimplementedError("an in-memory state has no file");
  }
  struct stat info = {};
  if (stat(path_.c_str(), &info) == 0 || errno != ENOENT) {
    return absl::FailedPreconditionError(absl::StrCat(
        "state file ", path_, " was not deleted: there is a file there"));
  }
  struct stat held = {};
  if (file_.fd < 0 || fstat(file_.fd, &held) != 0 || held.st_nlink > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "state file ", path_, " was moved, not deleted: it can be moved back"));
  }
  // The backup copies what is committed.
  GDT_RETURN_IF_ERROR(db_.Flush());
  const std::string dir = std::filesystem::path(path_).parent_path().string();
  absl::StatusOr<bool> made = RemakeDirectory(dir);
  if (!made.ok()) return made.status();
  std::string temp = path_ + ".restore-XXXXXX";
  const int temp_fd = mkstemp(temp.data());  // Mode 0600.
  if (temp_fd < 0) {
    return absl::InternalError(absl::StrCat("cannot create a file next to ",
                                            path_, ": ", std::strerror(errno)));
  }
  close(temp_fd);
  const auto failed = [&](absl::Status status) {
    unlink(temp.c_str());
    unlink((temp + "-journal").c_str());
    return status;
  };
  if (absl::Status status = db_.BackupTo(temp); !status.ok()) {
    return failed(status);
  }
  if (const int fd = open(temp.c_str(), O_RDONLY | O_CLOEXEC);
      fd < 0 || fsync(fd) != 0) {
    const int error = errno;
    if (fd >= 0) close(fd);
    return failed(absl::InternalError(
        absl::StrCat("cannot sync ", temp, ": ", std::strerror(error))));
  } else {
    close(fd);
  }
  // The log and shared-memory files at the path are the deleted file's; a
  // connection to the new file must not read them, and closing the old
  // connection must not delete the new file's by name.
  db_.KeepLogOnClose();
  unlink((path_ + "-wal").c_str());
  unlink((path_ + "-shm").c_str());
  if (rename(temp.c_str(), path_.c_str()) != 0) {
    return failed(absl::InternalError(absl::StrCat(
        "cannot rename ", temp, " to ", path_, ": ", std::strerror(errno))));
  }
  if (const int fd =
          open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
      fd >= 0) {
    fsync(fd);  // Best effort: the file is in place either way.
    close(fd);
  }
  // Until the new file is open the old connection goes on, and a failure
  // leaves the path as it found it.
  const auto undo = [&](absl::Status status) {
    unlink(path_.c_str());
    return status;
  };
  absl::StatusOr<sqlite::Db> fresh = sqlite::Db::Open(path_);
  if (!fresh.ok()) return undo(fresh.status());
  const int fresh_fd = open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fresh_fd < 0 || fstat(fresh_fd, &info) != 0) {
    const int error = errno;
    if (fresh_fd >= 0) close(fresh_fd);
    return undo(absl::InternalError(
        absl::StrCat("cannot open ", path_, ": ", std::strerror(error))));
  }
  for (sqlite::Db::Dropped& dropped : db_.TakeDropped()) {
    dropped_.push_back(std::move(dropped));
  }
  db_ = std::move(*fresh);  // Closes the old connection.
  file_.Reset(fresh_fd);
  dev_ = info.st_dev;
  ino_ = info.st_ino;
  // One coordinator per state file: a lock file deleted with it is made
  // and taken again.
  const std::string lock_path = path_ + ".lock";
  struct stat lock_info = {};
  if (lock_fd_ >= 0 && stat(lock_path.c_str(), &lock_info) != 0) {
    const int lock_fd =
        open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock_fd >= 0 && flock(lock_fd, LOCK_EX | LOCK_NB) == 0) {
      close(lock_fd_);
      lock_fd_ = lock_fd;
    } else if (lock_fd >= 0) {
      close(lock_fd);
    }
  }
  GDT_RETURN_IF_ERROR(Annotated(Init(), path_));
  return Restored{path_, *made ? dir : std::string()};
}

absl::StatusOr<bool> SqliteStore::RemakeDirectory(
    const std::string& dir) const {
  struct stat info = {};
  if (dir.empty() || stat(dir.c_str(), &info) == 0 || errno != ENOENT) {
    return false;
  }
  std::error_code error;
  const std::filesystem::path parent = std::filesystem::path(dir).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("cannot create ", parent.string(), ": ", error.message()));
  }
  // Made owner-only, then given its mode: nobody else may look in between.
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::InternalError(
        absl::StrCat("cannot create ", dir, ": ", std::strerror(errno)));
  }
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("cannot open ", dir, ": ", std::strerror(errno)));
  }
  if (fstat(fd, &info) == 0 &&
      (info.st_uid != dir_uid_ || info.st_gid != dir_gid_) &&
      fchown(fd, dir_uid_, dir_gid_) != 0) {
    // Best effort: only root may give a directory away; a member of the
    // group may still give it its group.
    [[maybe_unused]] const int ignored =
        fchown(fd, static_cast<uid_t>(-1), dir_gid_);
  }
  const int chmodded = fchmod(fd, dir_mode_);
  const int chmod_error = errno;
  close(fd);
  if (chmodded != 0) {
    return absl::InternalError(
        absl::StrCat("cannot chmod ", dir, ": ", std::strerror(chmod_error)));
  }
  return true;
}

SqliteStore::SqliteStore(sqlite::Db db) : db_(std::move(db)) {}

// Best effort: the coordinator flushes (and reports a failure) on Stop.
SqliteStore::~SqliteStore() {
  db_.Flush().IgnoreError();
  if (lock_fd_ >= 0) close(lock_fd_);
}

absl::Status SqliteStore::Init() {
  // Only another process can hold the file's write lock (the lock file keeps
  // out a second gdt-coord): an operator's sqlite3 in a write transaction, a
  // tool writing the file. The scheduler waits for the lock under its own
  // mutex, so a long wait would stall every call and heartbeat behind each
  // refused write: a write waits briefly, then fails and its caller retries.
  db_.SetBusyTimeout(kBusyTimeoutMs);
  GDT_RETURN_IF_ERROR(db_.Exec("PRAGMA journal_mode=WAL"));
  GDT_RETURN_IF_ERROR(db_.Exec("PRAGMA synchronous=NORMAL"));
  absl::StatusOr<sqlite::Transaction> transaction =
      sqlite::Transaction::Begin(db_);
  if (!transaction.ok()) return transaction.status();
  for (const char* schema :
       {kSchema, kKvTokenSchema, kKvEarlierTokenSchema, kCheckpointSchema,
        kHostTokenSchema, kPreemptibleSchema, kPreemptionSchema, kElasticSchema,
        kPreemptingSchema, kEndedSchema, kSecretSchema}) {
    GDT_RETURN_IF_ERROR(db_.Exec(schema));
  }
  int version = -1;
  {
    absl::StatusOr<sqlite::Statement> query =
        db_.Query("SELECT MAX(version) FROM schema_version");
    if (!query.ok()) return query.status();
    absl::StatusOr<bool> row = query->Step();
    if (!row.ok()) return row.status();
    if (*row && !query->row().IsNull(0)) version = query->row().Int(0);
  }
  if (version == -1) {
    GDT_RETURN_IF_ERROR(
        db_.Run("INSERT INTO schema_version VALUES (?1)", kSchemaVersion));
  } else if (version > kSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "state has schema version ", version,
        " but this gdt-coord understands only up to ", kSchemaVersion));
  }
  return transaction->Commit();
}

absl::Status SqliteStore::SaveHost(const Host& host) {
  GDT_RETURN_IF_ERROR(db_.Run(
      kUpsertHost, host.spec.name, host.spec.address, host.spec.agent_endpoint,
      GpusToJson(host.spec.gpus), nlohmann::json(host.spec.labels).dump(),
      host.spec.network_interface, host.spec.cpu_slots,
      host.last_heartbeat_unix_ms));
  return db_.Run(kUpsertRunnerSlots, host.spec.name, host.spec.runner_slots);
}

absl::Status SqliteStore::SaveGangRow(const char* sql, const Gang& gang) {
  return db_.Run(sql, gang.id, gang.key.instance, gang.key.project_id,
                 gang.key.pipeline_id, gang.key.group_name, gang.key.size,
                 gang.state, gang.epoch, gang.reason, gang.master_host,
                 gang.master_addr, gang.master_port, gang.created_unix_ms,
                 gang.sequence);
}

absl::Status SqliteStore::SaveGangHeader(const Gang& gang) {
  GDT_RETURN_IF_ERROR(SaveGangRow(kUpsertGang, gang));
  if (gang.state != GangState::kRunning || gang.preempt_notice_ms == 0) {
    GDT_RETURN_IF_ERROR(db_.Run(kDeletePreempting, gang.id));
  } else {
    GDT_RETURN_IF_ERROR(
        db_.Run(kUpsertPreempting, gang.id, gang.preempt_notice_ms,
                gang.preempt_stop_by_ms, gang.preempt_checkpoint_ms,
                gang.preempt_by, gang.preempt_by_priority,
                static_cast<int64_t>(
                    std::llround(gang.preempt_estimate_gpu_hours * 3600.0))));
  }
  if (gang.ended_unix_ms == 0) {
    GDT_RETURN_IF_ERROR(db_.Run(kDeleteEnded, gang.id));
  } else {
    GDT_RETURN_IF_ERROR(db_.Run(kUpsertEnded, gang.id, gang.ended_unix_ms));
  }
  if (gang.nodes_min == 0) {
    GDT_RETURN_IF_ERROR(db_.Run(kDeleteElastic, gang.id));
  } else {
    GDT_RETURN_IF_ERROR(db_.Run(kUpsertElastic, gang.id, gang.nodes_min,
                                NotNeededToJson(gang.not_needed)));
  }
  if (gang.preemptions == 0) return db_.Run(kDeletePreemption, gang.id);
  return db_.Run(kUpsertPreemption, gang.id, gang.preemptions,
                 gang.preempted_epoch, gang.preempted_by,
                 gang.preempted_lost_gpu_seconds);
}

absl::Status SqliteStore::SaveMemberRow(const std::string& gang_id,
                                        const Member& member) {
  GDT_RETURN_IF_ERROR(
      db_.Run(kUpsertMember, gang_id, member.index, member.job_id,
              member.job_name, member.gpus_per_node, member.procs_per_node,
              member.launcher, member.arrival_host, member.job_timeout_seconds,
              member.left, member.node_rank, member.host_name,
              nlohmann::json(member.gpu_indices).dump(), member.exit_code));
  if (member.preemptible) {
    return db_.Run(kInsertPreemptible, gang_id, member.index);
  }
  return db_.Run(kDeletePreemptible, gang_id, member.index);
}

absl::Status SqliteStore::SaveGangRows(const Gang& gang) {
  GDT_RETURN_IF_ERROR(SaveGangHeader(gang));
  for (const char* sql : {kDeleteMembers, kDeleteGangPreemptible,
                          kDeleteGpuLeases, kDeletePortLeases}) {
    GDT_RETURN_IF_ERROR(db_.Run(sql, gang.id));
  }
  const bool holds_leases = gang.state == GangState::kRunning;
  for (const auto& [index, member] : gang.members) {
    GDT_RETURN_IF_ERROR(SaveMemberRow(gang.id, member));
    if (!holds_leases) continue;
    for (uint32_t gpu : member.gpu_indices) {
      GDT_RETURN_IF_ERROR(db_.Run(kInsertGpuLease, member.host_name, gpu,
                                  gang.id, member.index));
    }
  }
  if (holds_leases && gang.master_port != 0) {
    GDT_RETURN_IF_ERROR(
        db_.Run(kInsertPortLease, gang.master_host, gang.master_port, gang.id));
  }
  return absl::OkStatus();
}

absl::Status SqliteStore::SaveGang(const Gang& gang) {
  absl::StatusOr<sqlite::Transaction> transaction =
      sqlite::Transaction::Begin(db_);
  if (!transaction.ok()) return transaction.status();
  GDT_RETURN_IF_ERROR(Annotated(SaveGangRows(gang), "gang " + gang.id));
  return transaction->Commit();
}

absl::Status SqliteStore::SaveMember(const Gang& gang, const Member& member) {
  absl::StatusOr<sqlite::Transaction> transaction =
      sqlite::Transaction::Begin(db_);
  if (!transaction.ok()) return transaction.status();
  absl::Status status = SaveGangHeader(gang);
  if (status.ok()) status = SaveMemberRow(gang.id, member);
  GDT_RETURN_IF_ERROR(Annotated(status, "gang " + gang.id));
  return transaction->Commit();
}

absl::Status SqliteStore::SaveJoin(const Gang& gang, const Member& member,
                                   bool gang_changed) {
  // The tag names the join should it be dropped (TakeDroppedJoins).
  return db_.Defer(
      [&] {
        absl::Status status = gang_changed
                                  ? SaveGangHeader(gang)
                                  : SaveGangRow(kInsertGangIfAbsent, gang);
        if (status.ok()) status = SaveMemberRow(gang.id, member);
        return Annotated(status, "gang " + gang.id);
      },
      absl::StrCat(member.index, " ", member.job_id, " ", gang.id));
}

std::vector<StateStore::DroppedJoin> SqliteStore::TakeDroppedJoins() {
  std::vector<sqlite::Db::Dropped> dropped = std::exchange(dropped_, {});
  for (sqlite::Db::Dropped& more : db_.TakeDropped()) {
    dropped.push_back(std::move(more));
  }
  std::vector<DroppedJoin> joins;
  for (sqlite::Db::Dropped& one : dropped) {
    const std::vector<std::string> parts =
        absl::StrSplit(one.tag, absl::MaxSplits(' ', 2));
    DroppedJoin join;
    if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &join.member_index) ||
        !absl::SimpleAtoi(parts[1], &join.job_id)) {
      continue;  // Not a join's.
    }
    join.gang_id = parts[2];
    join.error = std::move(one.error);
    joins.push_back(std::move(join));
  }
  return joins;
}

absl::Status SqliteStore::Flush() { return db_.Flush(); }

absl::Status SqliteStore::DeleteGang(const std::string& gang_id) {
  absl::StatusOr<sqlite::Transaction> transaction =
      sqlite::Transaction::Begin(db_);
  if (!transaction.ok()) return transaction.status();
  for (const char* sql :
       {kDeleteGangRow, kDeleteMembers, kDeleteGangPreemptible,
        kDeleteGpuLeases, kDeletePortLeases, kDeleteKvToken,
        kDeleteKvEarlierTokens, kDeletePreemption, kDeleteElastic,
        kDeletePreempting, kDeleteEnded, kDeleteCheckpoints}) {
    GDT_RETURN_IF_ERROR(
        Annotated(db_.Run(sql, gang_id), "removal of gang " + gang_id));
  }
  return transaction->Commit();
}

absl::Status SqliteStore::SetHostDrained(const std::string& name,
                                         bool drained) {
  return db_.Run(drained ? kDrainHost : kUndrainHost, name);
}

absl::Status SqliteStore::DeleteHost(const std::string& name) {
  absl::StatusOr<sqlite::Transaction> transaction =
      sqlite::Transaction::Begin(db_);
  if (!transaction.ok()) return transaction.status();
  for (const char* sql : {kDeleteHostRow, kUndrainHost, kDeleteRunnerSlots}) {
    GDT_RETURN_IF_ERROR(db_.Run(sql, name));
  }
  return transaction->Commit();
}

absl::StatusOr<StoredState> SqliteStore::Load() {
  try {
    return LoadRows();
  } catch (const nlohmann::json::exception& e) {
    // Only corrupt JSON columns make nlohmann throw here.
    return absl::DataLossError(absl::StrCat("corrupt state: ", e.what()));
  }
}

template <typename OnRow>
absl::Status SqliteStore::ForEachRow(const char* sql, OnRow on_row) {
  absl::StatusOr<sqlite::Statement> query = db_.Query(sql);
  if (!query.ok()) return query.status();
  return query->ForEachRow(on_row);
}

absl::StatusOr<StoredState> SqliteStore::LoadRows() {
  StoredState state;
  GDT_RETURN_IF_ERROR(
      ForEachRow(kSelectHosts, [&](const sqlite::Row& row) -> absl::Status {
        Host host;
        host.spec.name = row.Text(0);
        host.spec.address = row.Text(1);
        host.spec.agent_endpoint = row.Text(2);
        absl::StatusOr<nlohmann::json> gpus =
            ParseColumn(row.Text(3), "gpus of host " + host.spec.name);
        if (!gpus.ok()) return gpus.status();
        for (const nlohmann::json& gpu : *gpus) {
          host.spec.gpus.push_back(
              GpuInfo{gpu.value("index", 0u), gpu.value("uuid", std::string()),
                      gpu.value("model", std::string()),
                      gpu.value("memory_bytes", uint64_t{0})});
        }
        absl::StatusOr<nlohmann::json> labels =
            ParseColumn(row.Text(4), "labels of host " + host.spec.name);
        if (!labels.ok()) return labels.status();
        for (const auto& [key, value] : labels->items()) {
          if (value.is_string())
            host.spec.labels[key] = value.get<std::string>();
        }
        host.spec.network_interface = row.Text(5);
        host.spec.cpu_slots = row.Uint(6);
        host.last_heartbeat_unix_ms = row.Int64(7);
        host.drained = row.Bool(8);
        host.spec.runner_slots = row.Uint(9);
        state.hosts.push_back(std::move(host));
        return absl::OkStatus();
      }));

  std::map<std::string, size_t> gang_positions;
  GDT_RETURN_IF_ERROR(
      ForEachRow(kSelectGangs, [&](const sqlite::Row& row) -> absl::Status {
        Gang gang;
        gang.id = row.Text(0);
        gang.key.instance = row.Text(1);
        gang.key.project_id = row.Int64(2);
        gang.key.pipeline_id = row.Int64(3);
        gang.key.group_name = row.Text(4);
        gang.key.size = row.Uint(5);
        absl::StatusOr<GangState> gang_state =
            GangStateFromStored(row.Int(6), gang.id);
        if (!gang_state.ok()) return gang_state.status();
        gang.state = *gang_state;
        gang.epoch = row.Uint(7);
        gang.reason = row.Text(8);
        gang.master_host = row.Text(9);
        gang.master_addr = row.Text(10);
        gang.master_port = row.Uint(11);
        gang.created_unix_ms = row.Int64(12);
        gang.sequence = row.Int64(13);
        gang_positions[gang.id] = state.gangs.size();
        state.gangs.push_back(std::move(gang));
        return absl::OkStatus();
      }));

  GDT_RETURN_IF_ERROR(
      ForEachRow(kSelectMembers, [&](const sqlite::Row& row) -> absl::Status {
        const std::string gang_id = row.Text(0);
        auto position = gang_positions.find(gang_id);
        if (position == gang_positions.end()) {
          return absl::DataLossError(
              absl::StrCat("member of unknown gang ", gang_id));
        }
        Member member;
        member.index = row.Uint(1);
        member.job_id = row.Int64(2);
        member.job_name = row.Text(3);
        member.gpus_per_node = row.Uint(4);
        member.procs_per_node = row.Uint(5);
        member.launcher = row.Int(6);
        member.arrival_host = row.Text(7);
        member.job_timeout_seconds = row.Uint(8);
        member.left = row.Bool(9);
        member.node_rank = row.Int(10);
        member.host_name = row.Text(11);
        absl::StatusOr<nlohmann::json> gpus =
            ParseColumn(row.Text(12), "gpu indices of " + gang_id);
        if (!gpus.ok()) return gpus.status();
        for (const nlohmann::json& gpu : *gpus) {
          member.gpu_indices.push_back(gpu.get<uint32_t>());
        }
        member.exit_code = row.Int(13);
        state.gangs[position->second].members[member.index] = std::move(member);
        return absl::OkStatus();
      }));
  GDT_RETURN_IF_ERROR(
      ForEachRow(kSelectPreemptible, [&](const sqlite::Row& row) {
        auto position = gang_positions.find(row.Text(0));
        if (position == gang_positions.end()) return;
        auto& members = state.gangs[position->second].members;
        if (auto member = members.find(row.Uint(1)); member != members.end()) {
          member->second.preemptible = true;
        }
      }));

  GDT_RETURN_IF_ERROR(ForEachRow(kSelectEnded, [&](const sqlite::Row& row) {
    auto position = gang_positions.find(row.Text(0));
    if (position == gang_positions.end()) return;
    state.gangs[position->second].ended_unix_ms = row.Int64(1);
  }));
  GDT_RETURN_IF_ERROR(
      ForEachRow(kSelectPreemptions, [&](const sqlite::Row& row) {
        auto position = gang_positions.find(row.Text(0));
        if (position == gang_positions.end()) return;
        Gang& gang = state.gangs[position->second];
        gang.preemptions = row.Uint(1);
        gang.preempted_epoch = row.Uint(2);
        gang.preempted_by = row.Text(3);
        gang.preempted_lost_gpu_seconds = row.Int64(4);
      }));

  absl::Status elastic_status;
  GDT_RETURN_IF_ERROR(ForEachRow(kSelectElastic, [&](const sqlite::Row& row) {
    auto position = gang_positions.find(row.Text(0));
    if (position == gang_positions.end()) return;
    Gang& gang = state.gangs[position->second];
    gang.nodes_min = row.Uint(1);
    absl::StatusOr<nlohmann::json> not_needed =
        ParseColumn(row.Text(2), "elastic gang " + gang.id);
    if (!not_needed.ok() || !not_needed->is_object()) {
      elastic_status = absl::DataLossError(
          absl::StrCat("corrupt elastic gang record of ", gang.id));
      return;
    }
    for (const auto& [index, job_id] : not_needed->items()) {
      uint32_t member_index = 0;
      if (!absl::SimpleAtoi(index, &member_index) ||
          !job_id.is_number_integer()) {
        elastic_status = absl::DataLossError(
            absl::StrCat("corrupt elastic gang record of ", gang.id));
        return;
      }
      gang.not_needed[member_index] = job_id.get<int64_t>();
    }
  }));
  GDT_RETURN_IF_ERROR(elastic_status);
  GDT_RETURN_IF_ERROR(
      ForEachRow(kSelectPreempting, [&](const sqlite::Row& row) {
        auto position = gang_positions.find(row.Text(0));
        if (position == gang_positions.end()) return;
        Gang& gang = state.gangs[position->second];
        gang.preempt_notice_ms = row.Int64(1);
        gang.preempt_stop_by_ms = row.Int64(2);
        gang.preempt_checkpoint_ms = row.Int64(3);
        gang.preempt_by = row.Text(4);
        gang.preempt_by_priority = row.Int(5);
        gang.preempt_estimate_gpu_hours =
            static_cast<double>(row.Int64(6)) / 3600.0;
      }));

  GDT_RETURN_IF_ERROR(ForEachRow(kSelectGpuLeases, [&](const sqlite::Row& row) {
    state.gpu_leases.push_back(
        GpuLease{row.Text(0), row.Uint(1), row.Text(2), row.Uint(3)});
  }));
  GDT_RETURN_IF_ERROR(
      ForEachRow(kSelectPortLeases, [&](const sqlite::Row& row) {
        state.port_leases.push_back(
            PortLease{row.Text(0), row.Uint(1), row.Text(2)});
      }));
  return state;
}

// Gang key-value store tokens.

absl::Status SqliteStore::SaveKvToken(const KvToken& token) {
  absl::StatusOr<sqlite::Transaction> transaction =
      sqlite::Transaction::Begin(db_);
  if (!transaction.ok()) return transaction.status();
  GDT_RETURN_IF_ERROR(
      db_.Run(kUpsertKvToken, token.gang_id, token.epoch, token.token));
  GDT_RETURN_IF_ERROR(db_.Run(kDeleteKvEarlierTokens, token.gang_id));
  for (const auto& [epoch, sha256] : token.earlier_sha256) {
    GDT_RETURN_IF_ERROR(
        db_.Run(kInsertKvEarlierToken, token.gang_id, epoch, sha256));
  }
  return transaction->Commit();
}

absl::Status SqliteStore::DeleteKvToken(const std::string& gang_id) {
  absl::StatusOr<sqlite::Transaction> transaction =
      sqlite::Transaction::Begin(db_);
  if (!transaction.ok()) return transaction.status();
  GDT_RETURN_IF_ERROR(db_.Run(kDeleteKvToken, gang_id));
  GDT_RETURN_IF_ERROR(db_.Run(kDeleteKvEarlierTokens, gang_id));
  return transaction->Commit();
}

absl::StatusOr<std::vector<KvToken>> SqliteStore::LoadKvTokens() {
  std::vector<KvToken> tokens;
  GDT_RETURN_IF_ERROR(ForEachRow(kSelectKvTokens, [&](const sqlite::Row& row) {
    tokens.push_back(KvToken{row.Text(0), row.Uint(1), row.Text(2), {}});
  }));
  std::map<std::string, std::map<uint32_t, std::string>> earlier;
  GDT_RETURN_IF_ERROR(
      ForEachRow(kSelectKvEarlierTokens, [&](const sqlite::Row& row) {
        earlier[row.Text(0)][row.Uint(1)] = row.Text(2);
      }));
  for (KvToken& token : tokens) {
    auto it = earlier.find(token.gang_id);
    if (it != earlier.end()) token.earlier_sha256 = std::move(it->second);
  }
  return tokens;
}

// Checkpoint manifest records.

absl::Status SqliteStore::SaveCheckpointRecord(const CheckpointRecord& record,
                                               size_t keep_per_gang) {
  absl::StatusOr<sqlite::Transaction> transaction =
      sqlite::Transaction::Begin(db_);
  if (!transaction.ok()) return transaction.status();
  GDT_RETURN_IF_ERROR(db_.Run(kInsertCheckpoint, record.gang_id, record.epoch,
                              record.step, record.rank, record.job_id,
                              record.manifest_json, record.recorded_unix_ms));
  GDT_RETURN_IF_ERROR(db_.Run(kPruneCheckpoints, record.gang_id,
                              static_cast<int64_t>(keep_per_gang)));
  return transaction->Commit();
}

absl::StatusOr<std::vector<CheckpointRecord>>
SqliteStore::ListCheckpointRecords(const std::string& gang_id) {
  absl::StatusOr<sqlite::Statement> query =
      db_.Query(kSelectCheckpoints, gang_id);
  if (!query.ok()) return query.status();
  std::vector<CheckpointRecord> records;
  GDT_RETURN_IF_ERROR(query->ForEachRow([&](const sqlite::Row& row) {
    CheckpointRecord r;
    r.gang_id = row.Text(0);
    r.epoch = row.Uint(1);
    r.step = row.Int64(2);
    r.rank = row.Uint(3);
    r.job_id = row.Int64(4);
    r.manifest_json = row.Text(5);
    r.recorded_unix_ms = row.Int64(6);
    records.push_back(std::move(r));
  }));
  return records;
}

absl::Status SqliteStore::DeleteCheckpointRecords(const std::string& gang_id) {
  return db_.Run(kDeleteCheckpoints, gang_id);
}

// Host tokens.

absl::Status SqliteStore::SaveHostToken(const HostTokenRecord& record) {
  return db_.Run(kUpsertHostToken, record.host_name, record.sha256,
                 record.created_unix_ms);
}

absl::StatusOr<bool> SqliteStore::DeleteHostToken(
    const std::string& host_name) {
  GDT_RETURN_IF_ERROR(db_.Run(kDeleteHostToken, host_name));
  return db_.Changes() > 0;
}

absl::StatusOr<std::vector<HostTokenRecord>> SqliteStore::LoadHostTokens() {
  std::vector<HostTokenRecord> records;
  GDT_RETURN_IF_ERROR(ForEachRow(kSelectHostTokens, [&](const sqlite::Row&
                                                            row) {
    records.push_back(HostTokenRecord{row.Text(0), row.Text(1), row.Int64(2)});
  }));
  return records;
}

// Coordinator secrets.

absl::Status SqliteStore::SaveSecret(const std::string& name,
                                     const std::string& value) {
  return db_.Run(kUpsertSecret, name, value);
}

absl::StatusOr<std::string> SqliteStore::LoadSecret(const std::string& name) {
  std::string value;
  GDT_RETURN_IF_ERROR(ForEachRow(kSelectSecrets, [&](const sqlite::Row& row) {
    if (row.Text(0) == name) value = row.Text(1);
  }));
  return value;
}

}  // namespace gdt::state
