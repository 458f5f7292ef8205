#include "state/sqlite_db.h"

#include <sqlite3.h>

#include <string>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "state/state_store.h"

namespace gdt::state::sqlite {
namespace {

// SQLite's error `code` (primary or extended) as Internal with `message`,
// marked permanent (state_store.h) for the codes that retrying does not
// cure; the others (a full disk, a busy or locked file, an I/O error) may
// pass by themselves.
absl::Status SqliteError(int code, std::string message) {
  absl::Status status = absl::InternalError(std::move(message));
  switch (code & 0xff) {
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
    case SQLITE_READONLY:  // A connection opened read-only stays so.
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
      status.SetPayload(kPermanentStoreErrorPayload,
                        absl::Cord(sqlite3_errstr(code)));
      break;
    default:
      break;
  }
  return status;
}

// Whether SQLite's error `code` belongs to one statement and its values,
// so that running the same statement again cannot cure it (a constraint, a
// value too big or of the wrong type), as opposed to an error of the file
// or the moment (a full disk, a lock, a damaged file).
bool IsStatementError(int code) {
  switch (code & 0xff) {
    case SQLITE_CONSTRAINT:
    case SQLITE_MISMATCH:
    case SQLITE_TOOBIG:
    case SQLITE_RANGE:
      return true;
    default:
      return false;
  }
}

// Schema scripts are long; an error names their start.
std::string Abbreviated(std::string_view sql) {
  constexpr size_t kMax = 120;
  while (!sql.empty() && (sql.front() == '\n' || sql.front() == ' ')) {
    sql.remove_prefix(1);
  }
  return std::string(sql.substr(0, kMax));
}

}  // namespace

std::string Row::Text(int column) const {
  const unsigned char* text = sqlite3_column_text(statement_, column);
  if (text == nullptr) return "";
  return std::string(
      reinterpret_cast<const char*>(text),
      static_cast<size_t>(sqlite3_column_bytes(statement_, column)));
}

int64_t Row::Int64(int column) const {
  return sqlite3_column_int64(statement_, column);
}

int Row::Int(int column) const {
  return sqlite3_column_int(statement_, column);
}

uint32_t Row::Uint(int column) const {
  return static_cast<uint32_t>(sqlite3_column_int64(statement_, column));
}

bool Row::IsNull(int column) const {
  return sqlite3_column_type(statement_, column) == SQLITE_NULL;
}

Statement::Statement(Statement&& other) noexcept
    : db_(other.db_), statement_(other.statement_), sql_(other.sql_) {
  other.statement_ = nullptr;
}

Statement::~Statement() {
  if (statement_ == nullptr) return;
  sqlite3_reset(statement_);
  sqlite3_clear_bindings(statement_);
}

absl::Status Statement::BindOne(int index, std::string_view text) {
  if (sqlite3_bind_text(statement_, index, text.data(),
                        static_cast<int>(text.size()),
                        SQLITE_TRANSIENT) != SQLITE_OK) {
    return db_->Error(sql_);
  }
  return absl::OkStatus();
}

absl::Status Statement::BindOne(int index, int64_t number) {
  if (sqlite3_bind_int64(statement_, index, number) != SQLITE_OK) {
    return db_->Error(sql_);
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> Statement::Step() {
  switch (sqlite3_step(statement_)) {
    case SQLITE_ROW:
      return true;
    case SQLITE_DONE:
      return false;
    default:
      return db_->Error(sql_);
  }
}

absl::Status Statement::Run() {
  absl::StatusOr<bool> row = Step();
  if (!row.ok()) return row.status();
  if (*row) {
    return absl::InternalError(
        absl::StrCat("sqlite: unexpected row from '", sql_, "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Db> Db::Open(const std::string& path) {
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(
      path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  if (rc != SQLITE_OK) {
    std::string message =
        db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    const int code = db != nullptr ? sqlite3_extended_errcode(db) : rc;
    sqlite3_close(db);
    return SqliteError(
        code, absl::StrCat("cannot open state database ", path, ": ", message));
  }
  return Db(db);
}

Db::Db(Db&& other) noexcept
    : db_(other.db_),
      statements_(std::move(other.statements_)),
      pending_(other.pending_),
      depth_(other.depth_),
      in_defer_(other.in_defer_),
      deferred_(std::move(other.deferred_)),
      groups_(other.groups_),
      defer_group_(other.defer_group_),
      defer_tag_(std::move(other.defer_tag_)),
      dropped_(std::move(other.dropped_)) {
  other.db_ = nullptr;
  other.statements_.clear();
}

Db::~Db() {
  for (auto& [sql, statement] : statements_) sqlite3_finalize(statement);
  if (db_ != nullptr) sqlite3_close(db_);
}

Db& Db::operator=(Db&& other) noexcept {
  if (this == &other) return *this;
  for (auto& [sql, statement] : statements_) sqlite3_finalize(statement);
  if (db_ != nullptr) sqlite3_close(db_);
  db_ = other.db_;
  statements_ = std::move(other.statements_);
  pending_ = other.pending_;
  depth_ = other.depth_;
  in_defer_ = other.in_defer_;
  deferred_ = std::move(other.deferred_);
  groups_ = other.groups_;
  defer_group_ = other.defer_group_;
  defer_tag_ = std::move(other.defer_tag_);
  dropped_ = std::move(other.dropped_);
  other.db_ = nullptr;
  other.statements_.clear();
  return *this;
}

absl::Status Db::BackupTo(const std::string& path) {
  sqlite3* destination = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &destination,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  if (rc != SQLITE_OK) {
    absl::Status status = SqliteError(
        destination != nullptr ? sqlite3_extended_errcode(destination) : rc,
        absl::StrCat("cannot create ", path, ": ",
                     destination != nullptr ? sqlite3_errmsg(destination)
                                            : sqlite3_errstr(rc)));
    sqlite3_close(destination);
    return status;
  }
  sqlite3_backup* backup =
      sqlite3_backup_init(destination, "main", db_, "main");
  if (backup == nullptr) {
    absl::Status status =
        SqliteError(sqlite3_extended_errcode(destination),
                    absl::StrCat("cannot back up to ", path, ": ",
                                 sqlite3_errmsg(destination)));
    sqlite3_close(destination);
    return status;
  }
  rc = sqlite3_backup_step(backup, -1);
  sqlite3_backup_finish(backup);
  absl::Status status;
  if (rc != SQLITE_DONE) {
    status = SqliteError(
        rc, absl::StrCat("cannot back up to ", path, ": ", sqlite3_errstr(rc)));
  }
  if (sqlite3_close(destination) != SQLITE_OK && status.ok()) {
    status = absl::InternalError(absl::StrCat("cannot close ", path));
  }
  return status;
}

void Db::KeepLogOnClose() {
  int keep = 1;
  sqlite3_file_control(db_, "main", SQLITE_FCNTL_PERSIST_WAL, &keep);
}

void Db::SetBusyTimeout(int milliseconds) {
  sqlite3_busy_timeout(db_, milliseconds);
}

absl::Status Db::Exec(std::string_view sql) {
  const std::string text(sql);
  char* message = nullptr;
  if (sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &message) !=
      SQLITE_OK) {
    std::string error = message != nullptr ? message : "unknown error";
    sqlite3_free(message);
    return SqliteError(
        sqlite3_extended_errcode(db_),
        absl::StrCat("sqlite: ", error, " in '", Abbreviated(sql), "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Statement> Db::Prepare(const char* sql) {
  auto it = statements_.find(sql);
  if (it == statements_.end()) {
    sqlite3_stmt* statement = nullptr;
    if (sqlite3_prepare_v2(db_, sql, -1, &statement, nullptr) != SQLITE_OK) {
      return Error(sql);
    }
    it = statements_.emplace(sql, statement).first;
  }
  return Statement(this, it->second, sql);
}

int Db::Changes() const { return sqlite3_changes(db_); }

absl::Status Db::Error(std::string_view sql) const {
  return SqliteError(sqlite3_extended_errcode(db_),
                     absl::StrCat("sqlite: ", sqlite3_errmsg(db_), " in '",
                                  Abbreviated(sql), "'"));
}

absl::Status Db::Control(const char* sql) {
  absl::StatusOr<Statement> statement = Prepare(sql);
  if (!statement.ok()) return statement.status();
  return statement->Run();
}

absl::Status Db::ResumeDeferred() {
  // An error can make SQLite roll the whole transaction back (a full disk,
  // an I/O error), the deferred writes with it.
  if (pending_ && sqlite3_get_autocommit(db_) != 0) pending_ = false;
  // Each round that fails for good drops one deferred write, so this ends.
  while (!pending_ && !deferred_.empty()) {
    GDT_RETURN_IF_ERROR(Control("BEGIN IMMEDIATE"));
    absl::Status status;
    int code = SQLITE_OK;
    auto failed = deferred_.begin();
    for (; failed != deferred_.end(); ++failed) {
      {
        absl::StatusOr<Statement> statement = Prepare(failed->sql);
        status = statement.status();
        for (size_t i = 0; status.ok() && i < failed->args.size(); ++i) {
          const int index = static_cast<int>(i) + 1;
          status = std::visit(
              [&](const auto& value) {
                return statement->BindOne(index, value);
              },
              failed->args[i]);
        }
        if (status.ok()) status = statement->Run();
      }
      if (!status.ok()) {
        code = sqlite3_extended_errcode(db_);
        break;
      }
    }
    if (status.ok()) {
      pending_ = true;
      break;
    }
    Control("ROLLBACK").IgnoreError();
    if (!IsStatementError(code)) return status;
    // Running it again cannot cure this error (it would fail each later
    // write as well): the write it belongs to is dropped, the others
    // written again without it.
    const uint64_t group = failed->group;
    dropped_.push_back(Dropped{failed->tag, status});
    std::erase_if(deferred_, [group](const LoggedStatement& logged) {
      return logged.group == group;
    });
  }
  return absl::OkStatus();
}

absl::Status Db::CommitPending() {
  pending_ = false;
  absl::Status status = Control("COMMIT");
  if (status.ok()) {
    deferred_.clear();
    return status;
  }
  if (sqlite3_get_autocommit(db_) == 0) Control("ROLLBACK").IgnoreError();
  return status;
}

absl::StatusOr<Transaction> Transaction::Begin(Db& db) {
  if (db.depth_ == 0) GDT_RETURN_IF_ERROR(db.ResumeDeferred());
  const bool joined = db.pending_;
  GDT_RETURN_IF_ERROR(
      db.Control(joined ? "SAVEPOINT gdt_transaction" : "BEGIN IMMEDIATE"));
  ++db.depth_;
  return Transaction(&db, joined);
}

Transaction::~Transaction() {
  if (!open_) return;
  --db_->depth_;
  if (joined_) {
    db_->Control("ROLLBACK TO gdt_transaction").IgnoreError();
    db_->Control("RELEASE gdt_transaction").IgnoreError();
  } else {
    db_->Control("ROLLBACK").IgnoreError();
  }
}

absl::Status Transaction::Commit() {
  open_ = false;
  --db_->depth_;
  if (joined_) GDT_RETURN_IF_ERROR(db_->Control("RELEASE gdt_transaction"));
  return db_->CommitPending();
}

}  // namespace gdt::state::sqlite
