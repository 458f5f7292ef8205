#include "common/env.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace gdt {

absl::Status ErrnoStatus(int error, std::string_view what) {
  std::string message =
      absl::StrCat(std::string(what), ": ", std::strerror(error));
  switch (error) {
    case ENOENT:
      return absl::NotFoundError(std::move(message));
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(std::move(message));
    default:
      return absl::UnavailableError(std::move(message));
  }
}

namespace {

class PosixWritableFile : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd)
      : path_(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) close(fd_);
  }

  absl::Status Append(std::string_view data) override {
    while (!data.empty()) {
      const ssize_t n = write(fd_, data.data(), data.size());
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus(errno, absl::StrCat("cannot write ", path_));
      }
      data.remove_prefix(static_cast<size_t>(n));
    }
    return absl::OkStatus();
  }

  absl::Status Sync() override {
    if (fsync(fd_) != 0) {
      return ErrnoStatus(errno, absl::StrCat("cannot sync ", path_));
    }
    return absl::OkStatus();
  }

  absl::Status Close() override {
    const int fd = fd_;
    fd_ = -1;
    if (fd >= 0 && close(fd) != 0) {
      return ErrnoStatus(errno, absl::StrCat("cannot write ", path_));
    }
    return absl::OkStatus();
  }

 private:
  const std::string path_;
  int fd_;
};

class PosixEnv : public Env {
 public:
  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path, mode_t mode) override {
    const int fd =
        open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0) return ErrnoStatus(errno, absl::StrCat("cannot create ", path));
    return std::make_unique<PosixWritableFile>(path, fd);
  }

  absl::Status RenameFile(const std::string& from,
                          const std::string& to) override {
    if (std::rename(from.c_str(), to.c_str()) != 0) {
      return ErrnoStatus(errno,
                         absl::StrCat("cannot rename ", from, " to ", to));
    }
    return absl::OkStatus();
  }

  absl::Status RemoveFile(const std::string& path) override {
    if (unlink(path.c_str()) != 0) {
      return ErrnoStatus(errno, absl::StrCat("cannot remove ", path));
    }
    return absl::OkStatus();
  }

  absl::Status SyncDir(const std::string& dir) override {
    const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus(errno, absl::StrCat("cannot open ", dir));
    absl::Status status;
    if (fsync(fd) != 0) {
      status = ErrnoStatus(errno, absl::StrCat("cannot sync ", dir));
    }
    close(fd);
    return status;
  }
};

}  // namespace

Env* Env::Default() {
  static Env* const env = new PosixEnv();
  return env;
}

}  // namespace gdt
