#ifndef GDT_STATE_SQLITE_DB_H_
#define GDT_STATE_SQLITE_DB_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>

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
  Db& operator=(Db&&) = delete;
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;
  ~Db();

  void SetBusyTimeout(int milliseconds);
  // Runs one or more statements that take no parameters.
  absl::Status Exec(std::string_view sql);
  // The cached statement for `sql` (prepared on first use; the cache is
  // keyed by the text's address, so pass string constants).
  absl::StatusOr<Statement> Prepare(const char* sql);
  // Prepares `sql`, binds `args` and runs it to the end.
  template <typename... Args>
  absl::Status Run(const char* sql, const Args&... args) {
    absl::StatusOr<Statement> statement = Prepare(sql);
    if (!statement.ok()) return statement.status();
    GDT_RETURN_IF_ERROR(statement->Bind(args...));
    return statement->Run();
  }
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

  // Internal, naming `sql` and the connection's last error message.
  absl::Status Error(std::string_view sql) const;

 private:
  explicit Db(sqlite3* db) : db_(db) {}

  sqlite3* db_;
  std::map<const char*, sqlite3_stmt*> statements_;
};

// BEGIN IMMEDIATE on construction; ROLLBACK on destruction unless
// committed. Move-only; must not outlive its Db.
class Transaction {
 public:
  static absl::StatusOr<Transaction> Begin(Db& db);

  Transaction(Transaction&& other) noexcept
      : db_(other.db_), open_(other.open_) {
    other.open_ = false;
  }
  Transaction& operator=(Transaction&&) = delete;
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  ~Transaction();

  absl::Status Commit();

 private:
  explicit Transaction(Db* db) : db_(db), open_(true) {}

  Db* db_;
  bool open_;
};

}  // namespace gdt::state::sqlite

#endif  // GDT_STATE_SQLITE_DB_H_
