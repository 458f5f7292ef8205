#ifndef GDT_COMMON_ENV_H_
#define GDT_COMMON_ENV_H_

// The few file-system operations gdt's durable writes need, behind an
// interface so tests can make any one of them fail (a full disk, a rename
// across devices) and check what the caller leaves behind. Env::Default()
// is the real, POSIX one; it is thread-safe and never destroyed.

#include <sys/types.h>

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gdt {

// A file open for writing. Not thread-safe. The destructor closes it if
// Close() was not called (and drops the error).
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual absl::Status Append(std::string_view data) = 0;
  // Flushes the data to stable storage (fsync).
  virtual absl::Status Sync() = 0;
  virtual absl::Status Close() = 0;
};

class Env {
 public:
  virtual ~Env() = default;

  // The real file system.
  static Env* Default();

  // Creates (or truncates) `path` with permission bits `mode` (before the
  // umask) and opens it for writing.
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path, mode_t mode) = 0;
  // Replaces `to` with `from` in one step (rename(2)).
  virtual absl::Status RenameFile(const std::string& from,
                                  const std::string& to) = 0;
  virtual absl::Status RemoveFile(const std::string& path) = 0;
  // Makes the directory's entries (a rename into it) durable.
  virtual absl::Status SyncDir(const std::string& dir) = 0;
};

// Errors of the operating system as a status: "<what>: <strerror>", with
// NotFound for ENOENT, PermissionDenied for EACCES/EPERM, Unavailable else.
absl::Status ErrnoStatus(int error, std::string_view what);

}  // namespace gdt

#endif  // GDT_COMMON_ENV_H_
