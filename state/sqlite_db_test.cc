#include "state/sqlite_db.h"

#include <sqlite3.h>

#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/temp_dir.h"

namespace gdt::state::sqlite {
namespace {

using ::testing::HasSubstr;

constexpr const char* kCreate =
    "CREATE TABLE t (name TEXT PRIMARY KEY, n INTEGER NOT NULL, "
    "flag INTEGER NOT NULL)";
constexpr const char* kInsert = "INSERT INTO t VALUES (?1, ?2, ?3)";
constexpr const char* kSelect = "SELECT name, n, flag FROM t ORDER BY name";

enum class Colour { kRed = 2 };

class SqliteDbTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<Db> db = Db::Open(":memory:");
    ASSERT_TRUE(db.ok()) << db.status();
    db_.emplace(std::move(*db));
    ASSERT_TRUE(db_->Exec(kCreate).ok());
  }

  std::vector<std::string> Names() {
    std::vector<std::string> names;
    absl::StatusOr<Statement> rows = db_->Query(kSelect);
    EXPECT_TRUE(rows.ok()) << rows.status();
    if (!rows.ok()) return names;
    EXPECT_TRUE(
        rows->ForEachRow([&](const Row& row) { names.push_back(row.Text(0)); })
            .ok());
    return names;
  }

  std::optional<Db> db_;
};

TEST_F(SqliteDbTest, BoundValuesReadBackWithTheirTypes) {
  ASSERT_TRUE(db_->Run(kInsert, std::string("a"), int64_t{1} << 40, true).ok());
  ASSERT_TRUE(db_->Run(kInsert, "b", uint32_t{7}, Colour::kRed).ok());
  absl::StatusOr<Statement> rows = db_->Query(kSelect);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->Step().value_or(false), true);
  EXPECT_EQ(rows->row().Text(0), "a");
  EXPECT_EQ(rows->row().Int64(1), int64_t{1} << 40);
  EXPECT_TRUE(rows->row().Bool(2));
  ASSERT_EQ(rows->Step().value_or(false), true);
  EXPECT_EQ(rows->row().Uint(1), 7u);
  EXPECT_EQ(rows->row().Int(2), 2);
  EXPECT_EQ(rows->Step().value_or(true), false);
}

TEST_F(SqliteDbTest, ACachedStatementStartsFreshOnEveryUse) {
  for (const char* name : {"a", "b", "c"}) {
    ASSERT_TRUE(db_->Run(kInsert, name, 1, false).ok());
  }
  {
    // Stopped after one row: the next use must still see every row.
    absl::StatusOr<Statement> rows = db_->Query(kSelect);
    ASSERT_TRUE(rows.ok());
    ASSERT_EQ(rows->Step().value_or(false), true);
  }
  EXPECT_EQ(Names(), (std::vector<std::string>{"a", "b", "c"}));
}

TEST_F(SqliteDbTest, ErrorsNameTheSqlAndSqlitesMessage) {
  ASSERT_TRUE(db_->Run(kInsert, "a", 1, false).ok());
  absl::Status duplicate = db_->Run(kInsert, "a", 2, false);
  EXPECT_EQ(duplicate.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(duplicate.message(), HasSubstr("UNIQUE constraint failed"));
  EXPECT_THAT(duplicate.message(), HasSubstr(kInsert));

  absl::StatusOr<Statement> bad = db_->Prepare("SELECT nope FROM t");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(bad.status().message(), HasSubstr("no such column: nope"));
  EXPECT_THAT(bad.status().message(), HasSubstr("SELECT nope FROM t"));
}

TEST_F(SqliteDbTest, AnUncommittedTransactionRollsBack) {
  {
    absl::StatusOr<Transaction> transaction = Transaction::Begin(*db_);
    ASSERT_TRUE(transaction.ok()) << transaction.status();
    ASSERT_TRUE(db_->Run(kInsert, "gone", 1, false).ok());
  }
  EXPECT_TRUE(Names().empty());
  {
    absl::StatusOr<Transaction> transaction = Transaction::Begin(*db_);
    ASSERT_TRUE(transaction.ok()) << transaction.status();
    ASSERT_TRUE(db_->Run(kInsert, "kept", 1, false).ok());
    ASSERT_TRUE(transaction->Commit().ok());
  }
  EXPECT_EQ(Names(), std::vector<std::string>{"kept"});
}

// What another connection to the same file sees: the committed rows.
std::vector<std::string> CommittedNames(const std::string& path) {
  std::vector<std::string> names;
  sqlite3* reader = nullptr;
  EXPECT_EQ(
      sqlite3_open_v2(path.c_str(), &reader, SQLITE_OPEN_READONLY, nullptr),
      SQLITE_OK);
  sqlite3_stmt* select = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(reader, kSelect, -1, &select, nullptr),
            SQLITE_OK);
  while (select != nullptr && sqlite3_step(select) == SQLITE_ROW) {
    names.emplace_back(
        reinterpret_cast<const char*>(sqlite3_column_text(select, 0)));
  }
  sqlite3_finalize(select);
  sqlite3_close(reader);
  return names;
}

TEST(SqliteDbDeferTest, DeferredWritesWaitForTheNextCommitOfAnyKind) {
  test::TempDir dir;
  const std::string path = dir.Sub("state.db");
  absl::StatusOr<Db> db = Db::Open(path);
  ASSERT_TRUE(db.ok()) << db.status();
  ASSERT_TRUE(db->Exec("PRAGMA journal_mode=WAL").ok());
  ASSERT_TRUE(db->Exec(kCreate).ok());
  using Names = std::vector<std::string>;

  // Two deferred writes: visible to this connection, not yet to others.
  for (const char* name : {"a", "b"}) {
    ASSERT_TRUE(
        db->Defer([&] { return db->Run(kInsert, name, 1, false); }).ok());
  }
  EXPECT_TRUE(db->HasPending());
  EXPECT_EQ(CommittedNames(path), Names{});
  // A plain write commits them with itself.
  ASSERT_TRUE(db->Run(kInsert, "c", 1, false).ok());
  EXPECT_FALSE(db->HasPending());
  EXPECT_EQ(CommittedNames(path), (Names{"a", "b", "c"}));

  // A transaction joins them; its commit commits all.
  ASSERT_TRUE(db->Defer([&] { return db->Run(kInsert, "d", 1, false); }).ok());
  {
    absl::StatusOr<Transaction> transaction = Transaction::Begin(*db);
    ASSERT_TRUE(transaction.ok()) << transaction.status();
    ASSERT_TRUE(db->Run(kInsert, "e", 1, false).ok());
    EXPECT_EQ(CommittedNames(path), (Names{"a", "b", "c"}));
    ASSERT_TRUE(transaction->Commit().ok());
  }
  EXPECT_EQ(CommittedNames(path), (Names{"a", "b", "c", "d", "e"}));

  // A transaction rolled back undoes its own rows only; a failed deferred
  // write undoes its own only; Flush commits the rest.
  ASSERT_TRUE(db->Defer([&] { return db->Run(kInsert, "f", 1, false); }).ok());
  {
    absl::StatusOr<Transaction> transaction = Transaction::Begin(*db);
    ASSERT_TRUE(transaction.ok()) << transaction.status();
    ASSERT_TRUE(db->Run(kInsert, "g", 1, false).ok());
  }
  absl::Status duplicate = db->Defer([&] {
    GDT_RETURN_IF_ERROR(db->Run(kInsert, "h", 1, false));
    return db->Run(kInsert, "a", 1, false);  // The name is taken.
  });
  EXPECT_THAT(duplicate.message(), HasSubstr("UNIQUE"));
  EXPECT_TRUE(db->HasPending());
  EXPECT_EQ(CommittedNames(path), (Names{"a", "b", "c", "d", "e"}));
  ASSERT_TRUE(db->Flush().ok());
  EXPECT_FALSE(db->HasPending());
  EXPECT_EQ(CommittedNames(path), (Names{"a", "b", "c", "d", "e", "f"}));
  EXPECT_TRUE(db->Flush().ok());  // Nothing pending: nothing to do.
}

TEST(SqliteDbOpenTest, AnUnopenableFileIsOneClearError) {
  absl::StatusOr<Db> db = Db::Open("/nonexistent-dir/state.db");
  ASSERT_FALSE(db.ok());
  EXPECT_EQ(db.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(
      db.status().message(),
      HasSubstr("cannot open state database /nonexistent-dir/state.db"));
}

}  // namespace
}  // namespace gdt::state::sqlite
