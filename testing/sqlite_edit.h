#ifndef GDT_TESTING_SQLITE_EDIT_H_
#define GDT_TESTING_SQLITE_EDIT_H_

// Editing a SQLite database behind the store's back, as a damaged or
// future-version file would look (the test target links SQLite::SQLite3).

#include <sqlite3.h>

#include <string>

namespace gdt::test {

// Runs `sql` on the database at `path`; empty on success, else SQLite's
// message.
inline std::string ExecSql(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  std::string error;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) {
    error = db != nullptr ? sqlite3_errmsg(db) : "cannot open " + path;
  } else if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) !=
             SQLITE_OK) {
    error = sqlite3_errmsg(db);
  }
  sqlite3_close(db);
  return error;
}

}  // namespace gdt::test

#endif  // GDT_TESTING_SQLITE_EDIT_H_
