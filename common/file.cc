#include "common/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace gdt {

namespace {

absl::Status ReadError(const std::string& path, absl::StatusCode code,
                       absl::string_view why) {
  return absl::Status(code, absl::StrCat("cannot read ", path, ": ", why));
}

// The error of an open(2) of `path` that failed with `e`.
absl::Status OpenError(const std::string& path, int e) {
  if (e == ENOENT) {
    return ReadError(path, absl::StatusCode::kNotFound, strerror(e));
  }
  if (e == EACCES || e == EPERM) {
    return ReadError(path, absl::StatusCode::kPermissionDenied, strerror(e));
  }
  return ReadError(path, absl::StatusCode::kUnavailable, strerror(e));
}

// Reads `fd` to its end; more than `max_bytes` is an InvalidArgument error
// saying "it is larger than <limit>".
absl::StatusOr<std::string> ReadToEnd(int fd, const std::string& path,
                                      size_t max_bytes,
                                      const std::string& limit) {
  std::string text;
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return ReadError(path, absl::StatusCode::kUnavailable, strerror(errno));
    }
    if (n == 0) break;
    if (static_cast<size_t>(n) > max_bytes - text.size()) {
      return ReadError(path, absl::StatusCode::kInvalidArgument,
                       absl::StrCat("it is larger than ", limit));
    }
    text.append(buffer, static_cast<size_t>(n));
  }
  return text;
}

}  // namespace

absl::StatusOr<std::string> ReadTextFile(const std::string& path,
                                         size_t max_bytes) {
  // Opened without blocking: opening a FIFO no one writes to would wait
  // for a writer for ever. Reads block again (a pipe's writer may be slow;
  // a FIFO without a writer reads as empty at once).
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return OpenError(path, errno);
  const auto closer = [](const int* f) { close(*f); };
  const std::unique_ptr<const int, decltype(closer)> closed(&fd, closer);
  struct stat info = {};
  if (fstat(fd, &info) != 0) {
    return ReadError(path, absl::StatusCode::kUnavailable, strerror(errno));
  }
  if (S_ISDIR(info.st_mode)) {
    return ReadError(path, absl::StatusCode::kInvalidArgument,
                     "it is a directory, not a file");
  }
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    return ReadError(path, absl::StatusCode::kUnavailable, strerror(errno));
  }
  return ReadToEnd(fd, path, max_bytes, absl::StrCat(max_bytes >> 20, " MiB"));
}

absl::StatusOr<std::string> ReadPlainFile(const std::string& path,
                                          size_t max_bytes, int dir_fd) {
  const int fd = openat(dir_fd, path.c_str(),
                        O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP) {
      return ReadError(path, absl::StatusCode::kFailedPrecondition,
                       "it is a symbolic link, which is not followed");
    }
    return OpenError(path, errno);
  }
  const auto closer = [](const int* f) { close(*f); };
  const std::unique_ptr<const int, decltype(closer)> closed(&fd, closer);
  struct stat info = {};
  if (fstat(fd, &info) != 0) {
    return ReadError(path, absl::StatusCode::kUnavailable, strerror(errno));
  }
  if (!S_ISREG(info.st_mode)) {
    return ReadError(path, absl::StatusCode::kFailedPrecondition,
                     "it is not a regular file");
  }
  if (info.st_nlink != 1) {
    return ReadError(path, absl::StatusCode::kFailedPrecondition,
                     absl::StrCat("it has ", info.st_nlink,
                                  " hard links; only a file of one is read"));
  }
  return ReadToEnd(fd, path, max_bytes, absl::StrCat(max_bytes, " bytes"));
}

namespace {

absl::Status Prefixed(const std::string& path, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat("cannot write ", path, ": ",
                                                  status.message()));
}

}  // namespace

absl::Status WriteFileAtomically(const std::string& path,
                                 std::string_view contents, mode_t mode,
                                 Env* env) {
  // Unique per process and call, so two writers of the same path never share
  // a temporary file; the last rename wins whole.
  static std::atomic<uint64_t> counter{0};
  const std::string temporary =
      absl::StrCat(path, ".tmp-", static_cast<int64_t>(getpid()), "-",
                   counter.fetch_add(1, std::memory_order_relaxed));
  absl::StatusOr<std::unique_ptr<WritableFile>> file =
      env->NewWritableFile(temporary, mode);
  if (!file.ok()) return Prefixed(path, file.status());
  absl::Status status = (*file)->Append(contents);
  if (status.ok()) status = (*file)->Sync();
  const absl::Status closed = (*file)->Close();
  if (status.ok()) status = closed;
  if (status.ok()) status = env->RenameFile(temporary, path);
  if (!status.ok()) {
    env->RemoveFile(temporary).IgnoreError();
    return Prefixed(path, status);
  }
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  if (absl::Status synced = env->SyncDir(dir); !synced.ok()) {
    return Prefixed(path, synced);
  }
  return absl::OkStatus();
}

namespace {

// The parts of `relative`, or nothing when it may not be used beneath a root.
std::optional<std::vector<std::string>> PartsBeneath(
    const std::string& relative) {
  if (relative.empty() || relative.front() == '/') return std::nullopt;
  std::vector<std::string> parts;
  for (absl::string_view part : absl::StrSplit(relative, '/')) {
    if (part.empty() || part == ".") continue;
    if (part == "..") return std::nullopt;
    parts.emplace_back(part);
  }
  if (parts.empty()) return std::nullopt;
  return parts;
}

absl::Status CreateError(const std::string& root, const std::string& relative,
                         int error) {
  const std::string message = absl::StrCat(
      "cannot create ", root, "/", relative, ": ", std::strerror(error));
  if (error == EACCES || error == EPERM) {
    return absl::PermissionDeniedError(message);
  }
  return absl::UnavailableError(message);
}

// Opens the directory `name` in `dir_fd`, replacing a link or another
// non-directory there with a new directory. Returns the descriptor or -1
// with errno set.
int OpenOrMakeDir(int dir_fd, const std::string& name) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    const int fd = openat(dir_fd, name.c_str(),
                          O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) return fd;
    if (errno == ENOTDIR || errno == ELOOP) {
      // A link (O_NOFOLLOW gives ELOOP) or a file: removed, not followed.
      if (unlinkat(dir_fd, name.c_str(), 0) != 0 && errno != ENOENT) {
        return -1;
      }
    } else if (errno != ENOENT) {
      return -1;
    }
    if (mkdirat(dir_fd, name.c_str(), 0755) != 0 && errno != EEXIST) {
      return -1;
    }
  }
  errno = ELOOP;  // Something keeps replacing it.
  return -1;
}

// Opens `root` and every directory of `parts` but the last `keep` ones;
// returns the innermost descriptor, or -1 with errno set.
int OpenDirsBeneath(const std::string& root,
                    const std::vector<std::string>& parts, size_t keep) {
  int fd = open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  for (size_t i = 0; fd >= 0 && i + keep < parts.size(); ++i) {
    const int next = OpenOrMakeDir(fd, parts[i]);
    const int error = errno;
    close(fd);
    errno = error;
    fd = next;
  }
  return fd;
}

}  // namespace

namespace {

// The directory `keep` parts above `relative` beneath `root` (made as
// needed, see OpenDirsBeneath); `parts` gets the parts of `relative`.
absl::StatusOr<int> OpenBeneath(const std::string& root,
                                const std::string& relative, size_t keep,
                                std::vector<std::string>* parts) {
  std::optional<std::vector<std::string>> split = PartsBeneath(relative);
  if (!split.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot create ", root, "/", relative,
                     ": not a relative path without '..'"));
  }
  const int fd = OpenDirsBeneath(root, *split, keep);
  if (fd < 0) return CreateError(root, relative, errno);
  if (parts != nullptr) *parts = std::move(*split);
  return fd;
}

// Makes the last part of `relative` anew with `make` (which returns what
// openat/symlinkat do, setting errno), removing what is there first
// (a link the job planted is replaced, never followed). Closes `dir_fd`.
// Returns make's result (-1 on error) and, on error, the status.
absl::StatusOr<int> ReplaceBeneath(const std::string& root,
                                   const std::string& relative, int dir_fd,
                                   const std::string& name,
                                   const std::function<int()>& make) {
  int made = -1;
  int error = 0;
  for (int attempt = 0; made < 0 && attempt < 3; ++attempt) {
    if (unlinkat(dir_fd, name.c_str(), 0) != 0 && errno != ENOENT) {
      error = errno;
      break;
    }
    made = make();
    error = errno;
    if (made < 0 && error != EEXIST) break;
  }
  close(dir_fd);
  if (made >= 0) return made;
  if (error == EISDIR) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot create ", root, "/", relative, ": it is a directory"));
  }
  return CreateError(root, relative, error);
}

}  // namespace

absl::Status MakeDirsBeneath(const std::string& root,
                             const std::string& relative) {
  absl::StatusOr<int> fd = OpenDirBeneath(root, relative);
  if (!fd.ok()) return fd.status();
  close(*fd);
  return absl::OkStatus();
}

absl::StatusOr<int> CreateFileBeneath(const std::string& root,
                                      const std::string& relative,
                                      mode_t mode) {
  std::vector<std::string> parts;
  const absl::StatusOr<int> dir = OpenBeneath(root, relative, 1, &parts);
  if (!dir.ok()) return dir.status();
  const int dir_fd = *dir;
  const std::string& name = parts.back();
  return ReplaceBeneath(root, relative, dir_fd, name, [&] {
    return openat(dir_fd, name.c_str(),
                  O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  });
}

absl::StatusOr<int> OpenDirBeneath(const std::string& root,
                                   const std::string& relative) {
  return OpenBeneath(root, relative, 0, nullptr);
}

absl::Status CreateSymlinkBeneath(const std::string& root,
                                  const std::string& relative,
                                  const std::string& target) {
  std::vector<std::string> parts;
  const absl::StatusOr<int> dir = OpenBeneath(root, relative, 1, &parts);
  if (!dir.ok()) return dir.status();
  const int dir_fd = *dir;
  const std::string& name = parts.back();
  absl::StatusOr<int> made = ReplaceBeneath(root, relative, dir_fd, name, [&] {
    return symlinkat(target.c_str(), dir_fd, name.c_str());
  });
  return made.status();
}

}  // namespace gdt
