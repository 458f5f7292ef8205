#ifndef GDT_TESTING_TEMP_DIR_H_
#define GDT_TESTING_TEMP_DIR_H_

// Test-only file helpers: a self-removing temp dir, whole-file read and write.

#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace gdt::test {

// A fresh directory under `parent` (testing::TempDir() unless given, e.g.
// "/dev/shm" for one on tmpfs), removed with its contents.
class TempDir {
 public:
  explicit TempDir(const std::string& parent = ::testing::TempDir()) {
    std::string pattern = parent + "/gdt-test-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      ADD_FAILURE() << "cannot create a temp dir from " << pattern;
      return;
    }
    // TempDir() may end in '/': tests compare paths, so no "//".
    path_ = std::filesystem::path(pattern).lexically_normal().string();
  }
  ~TempDir() {
    std::error_code error;
    if (!path_.empty()) std::filesystem::remove_all(path_, error);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline void WriteTextFile(const std::string& path, const std::string& text,
                          mode_t mode = 0644) {
  std::ofstream(path) << text;
  chmod(path.c_str(), mode);
}

inline std::string ReadTextFile(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace gdt::test

#endif  // GDT_TESTING_TEMP_DIR_H_
