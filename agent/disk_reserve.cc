#include "agent/disk_reserve.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "spdlog/spdlog.h"

namespace gdt::agent {
namespace {

namespace fs = std::filesystem;

absl::Status Errno(const std::string& what, const std::string& path,
                   int error) {
  return absl::InternalError(
      absl::StrCat("cannot ", what, " ", path, ": ", std::strerror(error)));
}

}  // namespace

bool IsNoSpace(const absl::Status& status) {
  return absl::StrContains(status.message(), std::strerror(ENOSPC)) ||
         absl::StrContains(status.message(), std::strerror(EDQUOT));
}

void DiskReserve::Refill() {
  MutexLock lock(mu_);
  std::error_code error;
  if (fs::create_directories(dir_, error)) {
    fs::permissions(dir_, fs::perms::owner_all, error);
  }
  std::string failure;
  if (error)
    failure = absl::StrCat("cannot create ", dir_, ": ", error.message());
  // Slots a previous agent left are used again.
  if (slots_.empty() && failure.empty()) {
    for (const fs::directory_entry& entry :
         fs::directory_iterator(dir_, error)) {
      struct stat info = {};
      const std::string path = entry.path().string();
      if (lstat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) &&
          static_cast<size_t>(info.st_size) == kSlotBytes &&
          static_cast<int>(slots_.size()) < kSlots) {
        slots_.push_back(path);
      } else {
        fs::remove(entry.path(), error);
      }
    }
  }
  while (failure.empty() && static_cast<int>(slots_.size()) < kSlots) {
    const std::string path =
        absl::StrCat(dir_, "/slot-", getpid(), "-", next_++);
    const int fd =
        open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
             0600);
    if (fd < 0) {
      failure =
          absl::StrCat("cannot create ", path, ": ", std::strerror(errno));
      break;
    }
    const int allocated = posix_fallocate(fd, 0, kSlotBytes);
    close(fd);
    if (allocated != 0) {
      unlink(path.c_str());
      failure = absl::StrCat("cannot allocate ", kSlotBytes, " bytes for ",
                             path, ": ", std::strerror(allocated));
      break;
    }
    slots_.push_back(path);
  }
  if (!failure.empty() && !short_) {
    short_ = true;
    spdlog::warn("event=disk_reserve_short slots={} want={} error={}",
                 slots_.size(), kSlots, LogValue(failure));
  } else if (failure.empty() && short_) {
    short_ = false;
    spdlog::info("event=disk_reserve_full slots={}", slots_.size());
  }
}

absl::Status DiskReserve::WriteFrom(
    const std::string& path, std::string_view content, mode_t mode,
    std::optional<std::pair<uid_t, gid_t>> owner) {
  if (content.size() > kSlotBytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the agent's disk reserve holds at most ", kSlotBytes,
                     " bytes a file; ", path, " needs ", content.size()));
  }
  std::string slot;
  {
    MutexLock lock(mu_);
    if (slots_.empty()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the agent's disk reserve in ", dir_, " is used up"));
    }
    slot = std::move(slots_.back());
    slots_.pop_back();
  }
  const int fd = open(slot.c_str(), O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return Errno("open", slot, errno);
  size_t written = 0;
  int error = 0;
  while (written < content.size()) {
    const ssize_t n =
        pwrite(fd, content.data() + written, content.size() - written,
               static_cast<off_t>(written));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      error = errno;
      break;
    }
    written += static_cast<size_t>(n);
  }
  if (error == 0 && ftruncate(fd, static_cast<off_t>(content.size())) != 0) {
    error = errno;
  }
  if (error == 0 && fchmod(fd, mode) != 0) error = errno;
  if (error == 0 && owner.has_value() &&
      fchown(fd, owner->first, owner->second) != 0) {
    error = errno;
  }
  if (error == 0 && fsync(fd) != 0) error = errno;
  close(fd);
  if (error != 0) {
    unlink(slot.c_str());
    return Errno("write", slot, error);
  }
  // rename() replaces the entry itself: a link planted at `path` is
  // replaced, not followed.
  if (rename(slot.c_str(), path.c_str()) != 0) {
    const int failed = errno;
    unlink(slot.c_str());
    return Errno("move the reserved file to", path, failed);
  }
  spdlog::warn("event=disk_full path={} action=wrote_from_reserve bytes={}",
               LogValue(path), content.size());
  return absl::OkStatus();
}

size_t DiskReserve::slots() const {
  MutexLock lock(mu_);
  return slots_.size();
}

}  // namespace gdt::agent
