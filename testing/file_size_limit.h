#ifndef GDT_TESTING_FILE_SIZE_LIMIT_H_
#define GDT_TESTING_FILE_SIZE_LIMIT_H_

// A full disk for the current process only, without a file system of the
// test's own: RLIMIT_FSIZE.

#include <sys/resource.h>

#include <csignal>

#include "gtest/gtest.h"

namespace gdt::test {

// While alive, a write that would make any file of this process larger
// than `limit` bytes fails (EFBIG, which SQLite reports as an I/O error), as
// on a full disk.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t limit) {
    getrlimit(RLIMIT_FSIZE, &saved_);
    previous_signal_ = std::signal(SIGXFSZ, SIG_IGN);
    const rlimit limited{limit, saved_.rlim_max};
    EXPECT_EQ(setrlimit(RLIMIT_FSIZE, &limited), 0);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, previous_signal_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit saved_{};
  void (*previous_signal_)(int) = SIG_DFL;
};

}  // namespace gdt::test

#endif  // GDT_TESTING_FILE_SIZE_LIMIT_H_
