#include "state/sqlite_store.h"

#include <sqlite3.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

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
constexpr const char* kUpsertGang =
    "INSERT OR REPLACE INTO gangs VALUES "
    "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)";
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
constexpr const char* kUpsertHostToken =
    "INSERT OR REPLACE INTO host_tokens VALUES (?1, ?2, ?3)";
constexpr const char* kDeleteHostToken =
    "DELETE FROM host_tokens WHERE host_name = ?1";
constexpr const char* kSelectHostTokens =
    "SELECT host_name, sha256, created_unix_ms FROM host_tokens "
    "ORDER BY host_name";

// Resets a cached statement when the caller is done with it.
class StatementUse {
 public:
  explicit StatementUse(sqlite3_stmt* statement) : statement_(statement) {}
  ~StatementUse() {
    sqlite3_reset(statement_);
    sqlite3_clear_bindings(statement_);
  }
  StatementUse(const StatementUse&) = delete;
  StatementUse& operator=(const StatementUse&) = delete;

 private:
  sqlite3_stmt* statement_;
};

void BindText(sqlite3_stmt* statement, int column, const std::string& text) {
  sqlite3_bind_text(statement, column, text.data(),
                    static_cast<int>(text.size()), SQLITE_TRANSIENT);
}

std::string ColumnText(sqlite3_stmt* statement, int column) {
  const unsigned char* text = sqlite3_column_text(statement, column);
  if (text == nullptr) return "";
  return std::string(
      reinterpret_cast<const char*>(text),
      static_cast<size_t>(sqlite3_column_bytes(statement, column)));
}

uint32_t ColumnUint(sqlite3_stmt* statement, int column) {
  return static_cast<uint32_t>(sqlite3_column_int64(statement, column));
}

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
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(
      path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  if (rc != SQLITE_OK) {
    std::string message =
        db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    return absl::InternalError(
        absl::StrCat("cannot open state database ", path, ": ", message));
  }
  std::unique_ptr<SqliteStore> store(new SqliteStore(db));
  // The state holds gang key-value store tokens: owner only. SQLite gives
  // its -wal and -shm files the same mode.
  if (path != ":memory:" && chmod(path.c_str(), 0600) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot chmod 0600 ", path, ": ", std::strerror(errno)));
  }
  absl::Status status = store->Init();
  if (!status.ok()) {
    return absl::Status(status.code(),
                        absl::StrCat(path, ": ", status.message()));
  }
  return store;
}

SqliteStore::~SqliteStore() {
  for (auto& [sql, statement] : statements_) sqlite3_finalize(statement);
  sqlite3_close(db_);
}

absl::Status SqliteStore::Error(const std::string& what) const {
  return absl::InternalError(absl::StrCat(what, ": ", sqlite3_errmsg(db_)));
}

absl::Status SqliteStore::Exec(const char* sql) {
  char* message = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &message) != SQLITE_OK) {
    std::string text = message != nullptr ? message : "unknown error";
    sqlite3_free(message);
    return absl::InternalError(absl::StrCat("sqlite: ", text));
  }
  return absl::OkStatus();
}

absl::StatusOr<sqlite3_stmt*> SqliteStore::Prepare(const char* sql) {
  auto it = statements_.find(sql);
  if (it != statements_.end()) return it->second;
  sqlite3_stmt* statement = nullptr;
  if (sqlite3_prepare_v2(db_, sql, -1, &statement, nullptr) != SQLITE_OK) {
    return Error(absl::StrCat("cannot prepare '", sql, "'"));
  }
  statements_[sql] = statement;
  return statement;
}

absl::Status SqliteStore::Init() {
  sqlite3_busy_timeout(db_, 5000);
  GDT_RETURN_IF_ERROR(Exec("PRAGMA journal_mode=WAL"));
  GDT_RETURN_IF_ERROR(Exec("PRAGMA synchronous=NORMAL"));
  GDT_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  absl::Status status = Exec(kSchema);
  if (status.ok()) status = Exec(kKvTokenSchema);
  if (status.ok()) status = Exec(kCheckpointSchema);
  if (status.ok()) status = Exec(kHostTokenSchema);
  int version = -1;
  if (status.ok()) {
    sqlite3_stmt* statement = nullptr;
    if (sqlite3_prepare_v2(db_, "SELECT MAX(version) FROM schema_version", -1,
                           &statement, nullptr) != SQLITE_OK) {
      status = Error("cannot read the schema version");
    } else {
      if (sqlite3_step(statement) == SQLITE_ROW &&
          sqlite3_column_type(statement, 0) != SQLITE_NULL) {
        version = sqlite3_column_int(statement, 0);
      }
      sqlite3_finalize(statement);
    }
  }
  if (status.ok() && version == -1) {
    status = Exec(
        absl::StrCat("INSERT INTO schema_version VALUES (", kSchemaVersion, ")")
            .c_str());
  } else if (status.ok() && version > kSchemaVersion) {
    status = absl::FailedPreconditionError(absl::StrCat(
        "state has schema version ", version,
        " but this gdt-coord understands only up to ", kSchemaVersion));
  }
  if (!status.ok()) {
    Exec("ROLLBACK").IgnoreError();
    return status;
  }
  return Exec("COMMIT");
}

absl::Status SqliteStore::SaveHost(const Host& host) {
  absl::StatusOr<sqlite3_stmt*> statement = Prepare(kUpsertHost);
  if (!statement.ok()) return statement.status();
  sqlite3_stmt* s = *statement;
  StatementUse use(s);
  nlohmann::json labels(host.spec.labels);
  BindText(s, 1, host.spec.name);
  BindText(s, 2, host.spec.address);
  BindText(s, 3, host.spec.agent_endpoint);
  BindText(s, 4, GpusToJson(host.spec.gpus));
  BindText(s, 5, labels.dump());
  BindText(s, 6, host.spec.network_interface);
  sqlite3_bind_int64(s, 7, host.spec.cpu_slots);
  sqlite3_bind_int64(s, 8, host.last_heartbeat_unix_ms);
  if (sqlite3_step(s) != SQLITE_DONE) {
    return Error(absl::StrCat("cannot save host ", host.spec.name));
  }
  absl::StatusOr<sqlite3_stmt*> slots =
      Prepare("INSERT OR REPLACE INTO host_runner_slots VALUES (?1, ?2)");
  if (!slots.ok()) return slots.status();
  StatementUse slots_use(*slots);
  BindText(*slots, 1, host.spec.name);
  sqlite3_bind_int64(*slots, 2, host.spec.runner_slots);
  if (sqlite3_step(*slots) != SQLITE_DONE) {
    return Error(absl::StrCat("cannot save runner slots of ", host.spec.name));
  }
  return absl::OkStatus();
}

absl::Status SqliteStore::SaveGangHeader(const Gang& gang) {
  absl::StatusOr<sqlite3_stmt*> statement = Prepare(kUpsertGang);
  if (!statement.ok()) return statement.status();
  sqlite3_stmt* s = *statement;
  StatementUse use(s);
  BindText(s, 1, gang.id);
  BindText(s, 2, gang.key.instance);
  sqlite3_bind_int64(s, 3, gang.key.project_id);
  sqlite3_bind_int64(s, 4, gang.key.pipeline_id);
  BindText(s, 5, gang.key.group_name);
  sqlite3_bind_int64(s, 6, gang.key.size);
  sqlite3_bind_int64(s, 7, static_cast<int>(gang.state));
  sqlite3_bind_int64(s, 8, gang.epoch);
  BindText(s, 9, gang.reason);
  BindText(s, 10, gang.master_host);
  BindText(s, 11, gang.master_addr);
  sqlite3_bind_int64(s, 12, gang.master_port);
  sqlite3_bind_int64(s, 13, gang.created_unix_ms);
  sqlite3_bind_int64(s, 14, gang.sequence);
  if (sqlite3_step(s) != SQLITE_DONE) return Error("cannot save gang");
  return absl::OkStatus();
}

absl::Status SqliteStore::SaveMemberRow(const std::string& gang_id,
                                        const Member& member) {
  absl::StatusOr<sqlite3_stmt*> statement = Prepare(kUpsertMember);
  if (!statement.ok()) return statement.status();
  sqlite3_stmt* s = *statement;
  StatementUse use(s);
  BindText(s, 1, gang_id);
  sqlite3_bind_int64(s, 2, member.index);
  sqlite3_bind_int64(s, 3, member.job_id);
  BindText(s, 4, member.job_name);
  sqlite3_bind_int64(s, 5, member.gpus_per_node);
  sqlite3_bind_int64(s, 6, member.procs_per_node);
  sqlite3_bind_int64(s, 7, member.launcher);
  BindText(s, 8, member.arrival_host);
  sqlite3_bind_int64(s, 9, member.job_timeout_seconds);
  sqlite3_bind_int64(s, 10, member.left ? 1 : 0);
  sqlite3_bind_int64(s, 11, member.node_rank);
  BindText(s, 12, member.host_name);
  BindText(s, 13, nlohmann::json(member.gpu_indices).dump());
  sqlite3_bind_int64(s, 14, member.exit_code);
  if (sqlite3_step(s) != SQLITE_DONE) return Error("cannot save member");
  return absl::OkStatus();
}

absl::Status SqliteStore::SaveGangRows(const Gang& gang) {
  GDT_RETURN_IF_ERROR(SaveGangHeader(gang));
  for (const char* sql :
       {kDeleteMembers, kDeleteGpuLeases, kDeletePortLeases}) {
    absl::StatusOr<sqlite3_stmt*> statement = Prepare(sql);
    if (!statement.ok()) return statement.status();
    StatementUse use(*statement);
    BindText(*statement, 1, gang.id);
    if (sqlite3_step(*statement) != SQLITE_DONE) {
      return Error("cannot clear gang rows");
    }
  }
  const bool holds_leases = gang.state == GangState::kRunning;
  for (const auto& [index, member] : gang.members) {
    GDT_RETURN_IF_ERROR(SaveMemberRow(gang.id, member));
    if (!holds_leases) continue;
    for (uint32_t gpu : member.gpu_indices) {
      absl::StatusOr<sqlite3_stmt*> lease = Prepare(kInsertGpuLease);
      if (!lease.ok()) return lease.status();
      StatementUse lease_use(*lease);
      BindText(*lease, 1, member.host_name);
      sqlite3_bind_int64(*lease, 2, gpu);
      BindText(*lease, 3, gang.id);
      sqlite3_bind_int64(*lease, 4, member.index);
      if (sqlite3_step(*lease) != SQLITE_DONE) {
        return Error("cannot save GPU lease");
      }
    }
  }
  if (holds_leases && gang.master_port != 0) {
    absl::StatusOr<sqlite3_stmt*> lease = Prepare(kInsertPortLease);
    if (!lease.ok()) return lease.status();
    StatementUse use(*lease);
    BindText(*lease, 1, gang.master_host);
    sqlite3_bind_int64(*lease, 2, gang.master_port);
    BindText(*lease, 3, gang.id);
    if (sqlite3_step(*lease) != SQLITE_DONE) {
      return Error("cannot save port lease");
    }
  }
  return absl::OkStatus();
}

absl::Status SqliteStore::SaveGang(const Gang& gang) {
  GDT_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  absl::Status status = SaveGangRows(gang);
  if (!status.ok()) {
    Exec("ROLLBACK").IgnoreError();
    return absl::Status(status.code(),
                        absl::StrCat("gang ", gang.id, ": ", status.message()));
  }
  return Exec("COMMIT");
}

absl::Status SqliteStore::SaveMember(const Gang& gang, const Member& member) {
  GDT_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  absl::Status status = SaveGangHeader(gang);
  if (status.ok()) status = SaveMemberRow(gang.id, member);
  if (!status.ok()) {
    Exec("ROLLBACK").IgnoreError();
    return absl::Status(status.code(),
                        absl::StrCat("gang ", gang.id, ": ", status.message()));
  }
  return Exec("COMMIT");
}

absl::Status SqliteStore::SetHostDrained(const std::string& name,
                                         bool drained) {
  absl::StatusOr<sqlite3_stmt*> statement =
      Prepare(drained ? "INSERT OR IGNORE INTO drained_hosts VALUES (?1)"
                      : "DELETE FROM drained_hosts WHERE name = ?1");
  if (!statement.ok()) return statement.status();
  sqlite3_stmt* s = *statement;
  StatementUse use(s);
  BindText(s, 1, name);
  if (sqlite3_step(s) != SQLITE_DONE) {
    return Error(absl::StrCat("cannot save the drain of host ", name));
  }
  return absl::OkStatus();
}

absl::Status SqliteStore::DeleteHost(const std::string& name) {
  GDT_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  absl::Status status;
  for (const char* sql : {"DELETE FROM hosts WHERE name = ?1",
                          "DELETE FROM drained_hosts WHERE name = ?1",
                          "DELETE FROM host_runner_slots WHERE name = ?1"}) {
    absl::StatusOr<sqlite3_stmt*> statement = Prepare(sql);
    if (!statement.ok()) {
      status = statement.status();
      break;
    }
    sqlite3_stmt* s = *statement;
    StatementUse use(s);
    BindText(s, 1, name);
    if (sqlite3_step(s) != SQLITE_DONE) {
      status = Error(absl::StrCat("cannot remove host ", name));
      break;
    }
  }
  if (!status.ok()) {
    Exec("ROLLBACK").IgnoreError();
    return status;
  }
  return Exec("COMMIT");
}

absl::StatusOr<StoredState> SqliteStore::Load() {
  try {
    return LoadRows();
  } catch (const nlohmann::json::exception& e) {
    // Only corrupt JSON columns make nlohmann throw here.
    return absl::DataLossError(absl::StrCat("corrupt state: ", e.what()));
  }
}

absl::StatusOr<StoredState> SqliteStore::LoadRows() {
  StoredState state;
  auto query = [&](const char* sql,
                   auto on_row) -> absl::Status {  // Steps every row.
    sqlite3_stmt* statement = nullptr;
    if (sqlite3_prepare_v2(db_, sql, -1, &statement, nullptr) != SQLITE_OK) {
      return Error(absl::StrCat("cannot prepare '", sql, "'"));
    }
    absl::Status status;
    int rc;
    while (status.ok() && (rc = sqlite3_step(statement)) == SQLITE_ROW) {
      status = on_row(statement);
    }
    if (status.ok() && rc != SQLITE_DONE) status = Error("cannot read state");
    sqlite3_finalize(statement);
    return status;
  };

  GDT_RETURN_IF_ERROR(query(
      "SELECT hosts.*, drained_hosts.name IS NOT NULL, "
      "IFNULL(host_runner_slots.runner_slots, 0) FROM hosts "
      "LEFT JOIN drained_hosts ON hosts.name = drained_hosts.name "
      "LEFT JOIN host_runner_slots ON hosts.name = host_runner_slots.name "
      "ORDER BY hosts.name",
      [&](sqlite3_stmt* s) -> absl::Status {
        Host host;
        host.spec.name = ColumnText(s, 0);
        host.spec.address = ColumnText(s, 1);
        host.spec.agent_endpoint = ColumnText(s, 2);
        absl::StatusOr<nlohmann::json> gpus =
            ParseColumn(ColumnText(s, 3), "gpus of host " + host.spec.name);
        if (!gpus.ok()) return gpus.status();
        for (const nlohmann::json& gpu : *gpus) {
          host.spec.gpus.push_back(
              GpuInfo{gpu.value("index", 0u), gpu.value("uuid", std::string()),
                      gpu.value("model", std::string()),
                      gpu.value("memory_bytes", uint64_t{0})});
        }
        absl::StatusOr<nlohmann::json> labels =
            ParseColumn(ColumnText(s, 4), "labels of host " + host.spec.name);
        if (!labels.ok()) return labels.status();
        for (const auto& [key, value] : labels->items()) {
          if (value.is_string())
            host.spec.labels[key] = value.get<std::string>();
        }
        host.spec.network_interface = ColumnText(s, 5);
        host.spec.cpu_slots = ColumnUint(s, 6);
        host.last_heartbeat_unix_ms = sqlite3_column_int64(s, 7);
        host.drained = sqlite3_column_int(s, 8) != 0;
        host.spec.runner_slots = ColumnUint(s, 9);
        state.hosts.push_back(std::move(host));
        return absl::OkStatus();
      }));

  std::map<std::string, size_t> gang_positions;
  GDT_RETURN_IF_ERROR(
      query("SELECT * FROM gangs ORDER BY sequence", [&](sqlite3_stmt* s) {
        Gang gang;
        gang.id = ColumnText(s, 0);
        gang.key.instance = ColumnText(s, 1);
        gang.key.project_id = sqlite3_column_int64(s, 2);
        gang.key.pipeline_id = sqlite3_column_int64(s, 3);
        gang.key.group_name = ColumnText(s, 4);
        gang.key.size = ColumnUint(s, 5);
        gang.state = static_cast<GangState>(sqlite3_column_int(s, 6));
        gang.epoch = ColumnUint(s, 7);
        gang.reason = ColumnText(s, 8);
        gang.master_host = ColumnText(s, 9);
        gang.master_addr = ColumnText(s, 10);
        gang.master_port = ColumnUint(s, 11);
        gang.created_unix_ms = sqlite3_column_int64(s, 12);
        gang.sequence = sqlite3_column_int64(s, 13);
        gang_positions[gang.id] = state.gangs.size();
        state.gangs.push_back(std::move(gang));
        return absl::OkStatus();
      }));

  GDT_RETURN_IF_ERROR(query(
      "SELECT * FROM members ORDER BY gang_id, member_index",
      [&](sqlite3_stmt* s) -> absl::Status {
        const std::string gang_id = ColumnText(s, 0);
        auto position = gang_positions.find(gang_id);
        if (position == gang_positions.end()) {
          return absl::DataLossError(
              absl::StrCat("member of unknown gang ", gang_id));
        }
        Member member;
        member.index = ColumnUint(s, 1);
        member.job_id = sqlite3_column_int64(s, 2);
        member.job_name = ColumnText(s, 3);
        member.gpus_per_node = ColumnUint(s, 4);
        member.procs_per_node = ColumnUint(s, 5);
        member.launcher = sqlite3_column_int(s, 6);
        member.arrival_host = ColumnText(s, 7);
        member.job_timeout_seconds = ColumnUint(s, 8);
        member.left = sqlite3_column_int(s, 9) != 0;
        member.node_rank = sqlite3_column_int(s, 10);
        member.host_name = ColumnText(s, 11);
        absl::StatusOr<nlohmann::json> gpus =
            ParseColumn(ColumnText(s, 12), "gpu indices of " + gang_id);
        if (!gpus.ok()) return gpus.status();
        for (const nlohmann::json& gpu : *gpus) {
          member.gpu_indices.push_back(gpu.get<uint32_t>());
        }
        member.exit_code = sqlite3_column_int(s, 13);
        state.gangs[position->second].members[member.index] = std::move(member);
        return absl::OkStatus();
      }));

  GDT_RETURN_IF_ERROR(query(
      "SELECT * FROM gpu_leases ORDER BY host_name, gpu_index",
      [&](sqlite3_stmt* s) {
        state.gpu_leases.push_back(GpuLease{ColumnText(s, 0), ColumnUint(s, 1),
                                            ColumnText(s, 2),
                                            ColumnUint(s, 3)});
        return absl::OkStatus();
      }));
  GDT_RETURN_IF_ERROR(
      query("SELECT * FROM port_leases ORDER BY host_name, port",
            [&](sqlite3_stmt* s) {
              state.port_leases.push_back(PortLease{
                  ColumnText(s, 0), ColumnUint(s, 1), ColumnText(s, 2)});
              return absl::OkStatus();
            }));
  return state;
}

// Gang key-value store tokens.

absl::Status SqliteStore::SaveKvToken(const KvToken& token) {
  absl::StatusOr<sqlite3_stmt*> statement = Prepare(kUpsertKvToken);
  if (!statement.ok()) return statement.status();
  sqlite3_stmt* s = *statement;
  StatementUse use(s);
  BindText(s, 1, token.gang_id);
  sqlite3_bind_int64(s, 2, token.epoch);
  BindText(s, 3, token.token);
  if (sqlite3_step(s) != SQLITE_DONE) {
    return Error(absl::StrCat("cannot save the kv token of ", token.gang_id));
  }
  return absl::OkStatus();
}

absl::Status SqliteStore::DeleteKvToken(const std::string& gang_id) {
  absl::StatusOr<sqlite3_stmt*> statement = Prepare(kDeleteKvToken);
  if (!statement.ok()) return statement.status();
  sqlite3_stmt* s = *statement;
  StatementUse use(s);
  BindText(s, 1, gang_id);
  if (sqlite3_step(s) != SQLITE_DONE) {
    return Error(absl::StrCat("cannot delete the kv token of ", gang_id));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<KvToken>> SqliteStore::LoadKvTokens() {
  absl::StatusOr<sqlite3_stmt*> statement = Prepare(kSelectKvTokens);
  if (!statement.ok()) return statement.status();
  sqlite3_stmt* s = *statement;
  StatementUse use(s);
  std::vector<KvToken> tokens;
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    tokens.push_back(
        KvToken{ColumnText(s, 0), ColumnUint(s, 1), ColumnText(s, 2)});
  }
  if (rc != SQLITE_DONE) return Error("cannot read kv tokens");
  return tokens;
}

// Checkpoint manifest records.

absl::Status SqliteStore::SaveCheckpointRecord(const CheckpointRecord& record,
                                               size_t keep_per_gang) {
  GDT_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  absl::Status status = [&]() -> absl::Status {
    absl::StatusOr<sqlite3_stmt*> insert = Prepare(kInsertCheckpoint);
    if (!insert.ok()) return insert.status();
    {
      sqlite3_stmt* s = *insert;
      StatementUse use(s);
      BindText(s, 1, record.gang_id);
      sqlite3_bind_int64(s, 2, record.epoch);
      sqlite3_bind_int64(s, 3, record.step);
      sqlite3_bind_int64(s, 4, record.rank);
      sqlite3_bind_int64(s, 5, record.job_id);
      BindText(s, 6, record.manifest_json);
      sqlite3_bind_int64(s, 7, record.recorded_unix_ms);
      if (sqlite3_step(s) != SQLITE_DONE) {
        return Error(
            absl::StrCat("cannot save a checkpoint of ", record.gang_id));
      }
    }
    absl::StatusOr<sqlite3_stmt*> prune = Prepare(kPruneCheckpoints);
    if (!prune.ok()) return prune.status();
    sqlite3_stmt* s = *prune;
    StatementUse use(s);
    BindText(s, 1, record.gang_id);
    sqlite3_bind_int64(s, 2, static_cast<int64_t>(keep_per_gang));
    if (sqlite3_step(s) != SQLITE_DONE) {
      return Error(
          absl::StrCat("cannot prune the checkpoints of ", record.gang_id));
    }
    return absl::OkStatus();
  }();
  if (!status.ok()) {
    Exec("ROLLBACK").IgnoreError();
    return status;
  }
  return Exec("COMMIT");
}

absl::StatusOr<std::vector<CheckpointRecord>>
SqliteStore::ListCheckpointRecords(const std::string& gang_id) {
  absl::StatusOr<sqlite3_stmt*> statement = Prepare(kSelectCheckpoints);
  if (!statement.ok()) return statement.status();
  sqlite3_stmt* s = *statement;
  StatementUse use(s);
  BindText(s, 1, gang_id);
  std::vector<CheckpointRecord> records;
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    CheckpointRecord r;
    r.gang_id = ColumnText(s, 0);
    r.epoch = ColumnUint(s, 1);
    r.step = sqlite3_column_int64(s, 2);
    r.rank = ColumnUint(s, 3);
    r.job_id = sqlite3_column_int64(s, 4);
    r.manifest_json = ColumnText(s, 5);
    r.recorded_unix_ms = sqlite3_column_int64(s, 6);
    records.push_back(std::move(r));
  }
  if (rc != SQLITE_DONE) {
    return Error(absl::StrCat("cannot read the checkpoints of ", gang_id));
  }
  return records;
}

absl::Status SqliteStore::DeleteCheckpointRecords(const std::string& gang_id) {
  absl::StatusOr<sqlite3_stmt*> statement = Prepare(kDeleteCheckpoints);
  if (!statement.ok()) return statement.status();
  sqlite3_stmt* s = *statement;
  StatementUse use(s);
  BindText(s, 1, gang_id);
  if (sqlite3_step(s) != SQLITE_DONE) {
    return Error(absl::StrCat("cannot delete the checkpoints of ", gang_id));
  }
  return absl::OkStatus();
}

// Host tokens.

absl::Status SqliteStore::SaveHostToken(const HostTokenRecord& record) {
  absl::StatusOr<sqlite3_stmt*> statement = Prepare(kUpsertHostToken);
  if (!statement.ok()) return statement.status();
  sqlite3_stmt* s = *statement;
  StatementUse use(s);
  BindText(s, 1, record.host_name);
  BindText(s, 2, record.sha256);
  sqlite3_bind_int64(s, 3, record.created_unix_ms);
  if (sqlite3_step(s) != SQLITE_DONE) {
    return Error(
        absl::StrCat("cannot save the host token of ", record.host_name));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> SqliteStore::DeleteHostToken(
    const std::string& host_name) {
  absl::StatusOr<sqlite3_stmt*> statement = Prepare(kDeleteHostToken);
  if (!statement.ok()) return statement.status();
  sqlite3_stmt* s = *statement;
  StatementUse use(s);
  BindText(s, 1, host_name);
  if (sqlite3_step(s) != SQLITE_DONE) {
    return Error(absl::StrCat("cannot delete the host token of ", host_name));
  }
  return sqlite3_changes(db_) > 0;
}

absl::StatusOr<std::vector<HostTokenRecord>> SqliteStore::LoadHostTokens() {
  absl::StatusOr<sqlite3_stmt*> statement = Prepare(kSelectHostTokens);
  if (!statement.ok()) return statement.status();
  sqlite3_stmt* s = *statement;
  StatementUse use(s);
  std::vector<HostTokenRecord> records;
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    records.push_back(HostTokenRecord{ColumnText(s, 0), ColumnText(s, 1),
                                      sqlite3_column_int64(s, 2)});
  }
  if (rc != SQLITE_DONE) return Error("cannot read host tokens");
  return records;
}

}  // namespace gdt::state
