#ifndef GDT_STATE_SQLITE_DB_H_
#define GDT_STATE_SQLITE_DB_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/status_macros.h"

struct sqlite3;
struct sqlite3_stmt;

// A small RAII layer over the SQLite C API, so that the store reads as SQL
// and values instead of prepare/bind/step/reset runs. Every error is an
// absl::Status naming the SQL that failed and SQLite's own message.
namespace gdt::state::sqlite {

class Db;

// The current row of a statement being stepped; valid until the next step.
class Row {
 public:
  explicit Row(sqlite3_stmt* statement) : statement_(statement) {}

  std::string Text(int column) const;
  int64_t Int64(int column) const;
  int Int(int column) const;
  uint32_t Uint(int column) const;  // The low 32 bits, as stored.
  bool Bool(int column) const { return Int(column) != 0; }
  bool IsNull(int column) const;

 private:
  sqlite3_stmt* statement_;
};

// One use of a prepared statement that the Db caches. Destroying the use
// resets the statement and clears its bindings, so the next use starts
// fresh. Move-only; must not outlive its Db.
class Statement {
 public:
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&&) = delete;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement();

  // Binds `args` to ?1, ?2, ... in order: strings as TEXT, integers, bools
  // and enums as INTEGER.
  template <typename... Args>
  absl::Status Bind(const Args&... args) {
    int index = 0;
    absl::Status status;
    [[maybe_unused]] auto bind = [&](auto value) {
      if (status.ok()) status = BindOne(++index, value);
    };
    (bind(Value(args)), ...);
    return status;
  }

  // Steps once: true with a row (see row()), false when done.
  absl::StatusOr<bool> Step();
  // Steps to the end, expecting no row.
  absl::Status Run();
  // Calls `on_row(const Row&)` for every row; it may return void or an
  // absl::Status, whose first error stops the walk and is returned.
  template <typename OnRow>
  absl::Status ForEachRow(OnRow on_row) {
    while (true) {
      absl::StatusOr<bool> more = Step();
      if (!more.ok()) return more.status();
      if (!*more) return absl::OkStatus();
      if constexpr (std::is_void_v<decltype(on_row(row()))>) {
        on_row(row());
      } else {
        GDT_RETURN_IF_ERROR(on_row(row()));
      }
    }
  }
  Row row() const { return Row(statement_); }

 private:
  friend class Db;
  Statement(Db* db, sqlite3_stmt* statement, const char* sql)
      : db_(db), statement_(statement), sql_(sql) {}

  static std::string_view Value(std::string_view text) { return text; }
  template <typename T>
  requires std::is_integral_v<T> || std::is_enum_v<T>
  static int64_t Value(T number) { return static_cast<int64_t>(number); }
  absl::Status BindOne(int index, std::string_view text);
  absl::Status BindOne(int index, int64_t number);

  Db* db_;
  sqlite3_stmt* statement_;
  const char* sql_;
};

// An open database connection with a cache of prepared statements.
// Not thread-safe. Move-only.
class Db {
 public:
  // Opens or creates the database file at `path` (":memory:" for a private
  // in-memory one). Errors: Internal, with SQLite's message.
  static absl::StatusOr<Db> Open(const std::string& path);

  Db(Db&& other) noexcept;
  // Closes this connection (see ~Db) and takes over `other`'s.
  Db& operator=(Db&& other) noexcept;
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;
  ~Db();

  // Writes the database as committed (write-ahead log included) into a new
  // file at `path` with SQLite's online backup API; the file is complete
  // when this returns OK (not yet synced to disk).
  absl::Status BackupTo(const std::string& path);
  // Closing this connection leaves its write-ahead log and shared-memory
  // files where they are (SQLITE_FCNTL_PERSIST_WAL) instead of deleting
  // them by name, which would delete another connection's once those names
  // belong to a new database file.
  void KeepLogOnClose();

  void SetBusyTimeout(int milliseconds);
  // Runs one or more statements that take no parameters.
  absl::Status Exec(std::string_view sql);
  // The cached statement for `sql` (prepared on first use; the cache is
  // keyed by the text's address, so pass string constants).
  absl::StatusOr<Statement> Prepare(const char* sql);
  // Prepares `sql`, binds `args` and runs it to the end. Run outside any
  // Transaction or Defer while deferred writes are pending, it commits them
  // together with this statement.
  template <typename... Args>
  absl::Status Run(const char* sql, const Args&... args) {
    if (depth_ == 0) GDT_RETURN_IF_ERROR(ResumeDeferred());
    {
      absl::StatusOr<Statement> statement = Prepare(sql);
      if (!statement.ok()) return statement.status();
      GDT_RETURN_IF_ERROR(statement->Bind(args...));
      GDT_RETURN_IF_ERROR(statement->Run());
    }  // Reset before a commit.
    if (in_defer_) {
      deferred_.push_back(
          LoggedStatement{sql,
                          {LoggedValue(Statement::Value(args))...},
                          defer_group_,
                          defer_tag_});
    }
    if (pending_ && depth_ == 0) return CommitPending();
    return absl::OkStatus();
  }
  // Deferred writes: runs `write` (returning absl::Status) inside a
  // transaction that stays open when it returns, so that many small writes
  // share one commit. What is pending is committed by the next Transaction
  // (it joins the open one), by the next Run outside both, or by Flush().
  // When `write` fails, its own statements are undone and those pending from
  // earlier calls are kept.
  // A commit that fails does not lose them: the Db keeps the statements
  // that `write` ran through Run (only those: a deferred write uses Run
  // alone) until a commit succeeds, and runs them again, in their order,
  // at the start of the next transaction, Run or Flush.
  // A statement that fails when run again with an error that running it
  // again cannot cure (SQLite's CONSTRAINT, MISMATCH, TOOBIG or RANGE: an
  // error of the statement and its values, not of the file or the moment)
  // would keep every later write from being committed: the whole deferred
  // write it belongs to is dropped instead, and named by `tag` in
  // TakeDropped().
  template <typename Write>
  absl::Status Defer(Write write, std::string tag = {}) {
    GDT_RETURN_IF_ERROR(ResumeDeferred());
    if (!pending_) {
      GDT_RETURN_IF_ERROR(Control("BEGIN IMMEDIATE"));
      pending_ = true;
    }
    GDT_RETURN_IF_ERROR(Control("SAVEPOINT gdt_deferred"));
    ++depth_;
    in_defer_ = true;
    defer_group_ = ++groups_;
    defer_tag_ = std::move(tag);
    const size_t logged = deferred_.size();
    absl::Status status = write();
    in_defer_ = false;
    --depth_;
    if (status.ok()) return Control("RELEASE gdt_deferred");
    deferred_.resize(logged);
    Control("ROLLBACK TO gdt_deferred").IgnoreError();
    Control("RELEASE gdt_deferred").IgnoreError();
    return status;
  }
  // Commits the deferred writes, if any, and those a failed commit left to
  // write again. A failed commit rolls them back and says so; they are kept
  // for the next try.
  absl::Status Flush() {
    if (depth_ != 0) return absl::OkStatus();
    GDT_RETURN_IF_ERROR(ResumeDeferred());
    return pending_ ? CommitPending() : absl::OkStatus();
  }
  // Whether deferred writes wait for a commit (or, after a failed one, to be
  // written again).
  bool HasPending() const { return pending_ || !deferred_.empty(); }
  // A deferred write dropped because one of its statements failed for good
  // when it was run again: its Defer tag and that error.
  struct Dropped {
    std::string tag;
    absl::Status error;
  };
  // The deferred writes dropped since the last call.
  std::vector<Dropped> TakeDropped() { return std::exchange(dropped_, {}); }
  // Prepares `sql` and binds `args`, ready to step.
  template <typename... Args>
  absl::StatusOr<Statement> Query(const char* sql, const Args&... args) {
    absl::StatusOr<Statement> statement = Prepare(sql);
    if (!statement.ok()) return statement.status();
    GDT_RETURN_IF_ERROR(statement->Bind(args...));
    return statement;
  }
  // Rows changed by the last INSERT, UPDATE or DELETE.
  int Changes() const;

  // Internal, naming `sql` and the connection's last error message; marked
  // permanent (IsPermanentStoreError) when retrying does not cure it (a
  // corrupt file, not a database, read-only, cannot be opened).
  absl::Status Error(std::string_view sql) const;

 private:
  friend class Transaction;
  explicit Db(sqlite3* db) : db_(db) {}
  // A statement a deferred write ran, with its values, kept until the
  // commit that stores it succeeds.
  using Value = std::variant<std::string, int64_t>;
  struct LoggedStatement {
    const char* sql;
    std::vector<Value> args;
    uint64_t group;   // The Defer call that ran it.
    std::string tag;  // That call's tag.
  };
  static Value LoggedValue(std::string_view text) { return std::string(text); }
  static Value LoggedValue(int64_t number) { return number; }

  // Runs a cached statement without parameters (transaction control).
  absl::Status Control(const char* sql);
  // Outside any Transaction or Defer: when no deferred transaction is open
  // but deferred writes wait to be written again (their commit failed, or
  // SQLite rolled their transaction back after an error), opens one and
  // runs them again. On failure nothing is open and they still wait.
  absl::Status ResumeDeferred();
  // COMMIT of the open transaction; on failure, ROLLBACK if SQLite left it
  // open. Either way no transaction is pending afterwards; on failure the
  // deferred writes wait to be written again.
  absl::Status CommitPending();

  sqlite3* db_;
  std::map<const char*, sqlite3_stmt*> statements_;
  bool pending_ = false;   // A transaction opened by Defer is open.
  int depth_ = 0;          // Transactions and Defer calls in progress.
  bool in_defer_ = false;  // Run logs what it runs into deferred_.
  // The deferred writes since the last successful commit.
  std::vector<LoggedStatement> deferred_;
  uint64_t groups_ = 0;       // Defer calls so far.
  uint64_t defer_group_ = 0;  // The Defer call in progress, and its tag.
  std::string defer_tag_;
  std::vector<Dropped> dropped_;
};

// BEGIN IMMEDIATE on construction; ROLLBACK on destruction unless
// committed. With deferred writes pending (Db::Defer) it is a savepoint in
// their transaction instead: Commit commits them with it, a rollback undoes
// its own statements only. Not nested. Move-only; must not outlive its Db.
class Transaction {
 public:
  static absl::StatusOr<Transaction> Begin(Db& db);

  Transaction(Transaction&& other) noexcept
      : db_(other.db_), open_(other.open_), joined_(other.joined_) {
    other.open_ = false;
  }
  Transaction& operator=(Transaction&&) = delete;
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  ~Transaction();

  absl::Status Commit();

 private:
  Transaction(Db* db, bool joined) : db_(db), open_(true), joined_(joined) {}

  Db* db_;
  bool open_;
  bool joined_;  // A savepoint in the deferred writes' transaction.
};

}  // namespace gdt::state::sqlite

#endif  // GDT_STATE_SQLITE_DB_H_
