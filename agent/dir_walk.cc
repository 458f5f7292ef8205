#include "agent/dir_walk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gdt::agent {
namespace {

constexpr int kDirFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;

// Opens the directory `name` in `dir` unless a file system is mounted on
// it (EXDEV then; RESOLVE_NO_XDEV stops before the mount is entered, so one
// that never answers is not waited on). Kernels before 5.6 lack openat2,
// and older container seccomp profiles refuse it (EPERM): there, openat,
// after the caller has looked at the entry (a mount in place by then is
// seen by its device, unless it is a bind mount of the same file system).
int OpenDirHere(int dir, const char* name) {
  struct open_how how = {};
  how.flags = kDirFlags;
  how.resolve = RESOLVE_NO_XDEV;
  const int fd =
      static_cast<int>(syscall(SYS_openat2, dir, name, &how, sizeof(how)));
  if (fd >= 0 || (errno != ENOSYS && errno != EPERM)) return fd;
  return openat(dir, name, kDirFlags);
}

// Whether a file system is mounted on the entry `name` in `dir`, asked
// without entering it (so without waiting on it). False where openat2 is
// not to be had.
bool MountedHere(int dir, const char* name) {
  struct open_how how = {};
  how.flags = O_PATH | O_NOFOLLOW | O_CLOEXEC;
  how.resolve = RESOLVE_NO_XDEV;
  const int fd =
      static_cast<int>(syscall(SYS_openat2, dir, name, &how, sizeof(how)));
  if (fd >= 0) close(fd);
  return fd < 0 && errno == EXDEV;
}

}  // namespace

int OpenDirNotMounted(const std::string& path) {
  std::string trimmed = path;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  if (trimmed == "/") return open("/", kDirFlags);
  const size_t slash = trimmed.rfind('/');
  const std::string parent = slash == std::string::npos ? "."
                             : slash == 0               ? "/"
                                          : trimmed.substr(0, slash);
  const std::string name =
      slash == std::string::npos ? trimmed : trimmed.substr(slash + 1);
  const int at = open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (at < 0) return -1;
  // Seen by its device first, for where openat2 is not to be had.
  struct stat above = {};
  struct stat info = {};
  if (fstat(at, &above) == 0 && StatNoWait(at, name.c_str(), &info) &&
      S_ISDIR(info.st_mode) && info.st_dev != above.st_dev) {
    close(at);
    errno = EXDEV;
    return -1;
  }
  const int fd = OpenDirHere(at, name.c_str());
  const int error = errno;
  close(at);
  errno = error;
  return fd;
}

bool StatNoWait(int dir, const char* name, struct stat* info) {
  struct statx x = {};
  if (statx(dir, name, AT_SYMLINK_NOFOLLOW | AT_STATX_DONT_SYNC,
            STATX_BASIC_STATS, &x) != 0) {
    return false;
  }
  *info = {};
  info->st_dev = makedev(x.stx_dev_major, x.stx_dev_minor);
  info->st_ino = x.stx_ino;
  info->st_mode = x.stx_mode;
  info->st_nlink = x.stx_nlink;
  info->st_uid = x.stx_uid;
  info->st_gid = x.stx_gid;
  info->st_rdev = makedev(x.stx_rdev_major, x.stx_rdev_minor);
  info->st_size = static_cast<off_t>(x.stx_size);
  info->st_blksize = static_cast<blksize_t>(x.stx_blksize);
  info->st_blocks = static_cast<blkcnt_t>(x.stx_blocks);
  info->st_atim = {x.stx_atime.tv_sec, x.stx_atime.tv_nsec};
  info->st_mtim = {x.stx_mtime.tv_sec, x.stx_mtime.tv_nsec};
  info->st_ctim = {x.stx_ctime.tv_sec, x.stx_ctime.tv_nsec};
  return true;
}

DirWalk::DirWalk(DirWalkOptions options) : options_(std::move(options)) {
  for (const std::string& path : options_.keep) {
    struct stat info = {};
    if (stat(path.c_str(), &info) == 0) keep_.emplace(info.st_dev, info.st_ino);
  }
}

void DirWalk::Root(const std::string& path, bool own,
                   absl::FunctionRef<bool(const struct stat&)> enter,
                   Each each) {
  const int fd = OpenDirNotMounted(path);
  if (fd < 0 && errno == EXDEV) {
    return Incomplete(absl::StrCat(path, ": a file system is mounted there"));
  }
  ListRoot(fd, path, own, enter, each);
}

void DirWalk::ListRoot(int fd, const std::string& path, bool own,
                       absl::FunctionRef<bool(const struct stat&)> enter,
                       Each each) {
  if (fd < 0) return Failed("open", path);
  struct stat info = {};
  if (fstat(fd, &info) != 0) {
    Failed("fstat", path);
  } else if (!Kept(info) && enter(info)) {
    root_dev_ = info.st_dev;
    return List(fd, own, 0, each);
  }
  close(fd);
}

bool DirWalk::Enter(int dir, const char* name, const struct stat& info,
                    int depth, bool own, Each each) {
  if (!OnRootFileSystem(info)) return false;
  if (depth + 1 >= options_.max_depth) {
    Bound(own, "max_depth");
    return false;
  }
  const int child = OpenDirHere(dir, name);
  if (child < 0) {
    // Mounted on since it was looked at: another file system, not entered.
    if (errno != EXDEV) Failed("openat", name);
    return false;
  }
  List(child, own, depth + 1, each);
  return true;
}

void DirWalk::FindOwned(const std::string& root, uid_t uid, gid_t gid, bool own,
                        Each found) {
  // Shared roots (/tmp, /dev/shm) are often file systems of their own.
  ListRoot(
      open(root.c_str(), kDirFlags), root, own,
      [](const struct stat&) { return true; },
      [&](int dir, const char* name, const struct stat& info, int depth) {
        return Search(uid, gid, own, found, dir, name, info, depth);
      });
}

bool DirWalk::Search(uid_t uid, gid_t gid, bool own, Each found, int dir,
                     const char* name, const struct stat& info, int depth) {
  if (info.st_uid == uid) return found(dir, name, info, depth);
  const bool others_may_write =
      (info.st_mode & S_IWOTH) != 0 ||
      ((info.st_mode & S_IWGRP) != 0 && info.st_gid == gid);
  if (S_ISDIR(info.st_mode) && others_may_write) {
    Enter(dir, name, info, depth, own,
          [&](int inner, const char* inner_name, const struct stat& inner_info,
              int inner_depth) {
            return Search(uid, gid, own, found, inner, inner_name, inner_info,
                          inner_depth);
          });
  }
  return true;
}

bool DirWalk::Claim() {
  --result_.others;
  return Visit(/*own=*/true);
}

void DirWalk::List(int fd, bool own, int depth, Each each) {
  if (result_.cancelled) {
    close(fd);
    return;
  }
  // The listing reads `fd` itself: the *at() calls below do not move its
  // offset, and a level holds one descriptor.
  DIR* listing = fdopendir(fd);
  if (listing == nullptr) {
    Failed("fdopendir", "a directory");
    close(fd);
    return;
  }
  // With list_first: the names read, shown once the listing is done (at
  // most max_entries in all, as each counts when read).
  std::vector<std::string> names;
  while (true) {
    errno = 0;
    const dirent* entry = readdir(listing);
    if (entry == nullptr) {
      if (errno != 0) Failed("readdir", "a directory");
      break;
    }
    const char* name = entry->d_name;
    if ((name[0] == '.' && name[1] == '\0') ||
        (name[0] == '.' && name[1] == '.' && name[2] == '\0')) {
      continue;
    }
    if (!Visit(own)) break;
    if (options_.list_first) {
      names.emplace_back(name);
    } else if (!Show(fd, name, depth, each)) {
      break;
    }
  }
  for (const std::string& name : names) {
    if (Cancelled() || !Show(fd, name.c_str(), depth, each)) break;
  }
  closedir(listing);
}

bool DirWalk::Show(int fd, const char* name, int depth, Each each) {
  struct stat info = {};
  if (!StatNoWait(fd, name, &info)) {
    // A file system mounted there that does not let the agent in (a
    // user's FUSE mount without allow_other answers Permission denied):
    // another file system, which no walk enters.
    const int error = errno;
    if (error == EACCES && MountedHere(fd, name)) return true;
    errno = error;
    Failed("statx", name);
    return true;
  }
  if (Kept(info)) return true;
  return each(fd, name, info, depth);
}

bool DirWalk::Cancelled() {
  if (options_.cancel != nullptr &&
      options_.cancel->load(std::memory_order_relaxed)) {
    result_.cancelled = true;
  }
  return result_.cancelled;
}

bool DirWalk::Visit(bool own) {
  if (Cancelled()) return false;
  size_t& entries = own ? result_.entries : result_.others;
  if (entries >= options_.max_entries) {
    Bound(own, "max_entries");
    return false;
  }
  ++entries;
  return true;
}

void DirWalk::Bound(bool own, const char* which) {
  if (own) {
    result_.truncated = true;
  } else if (!result_.incomplete) {
    result_.incomplete = true;
    result_.error =
        absl::StrCat("more than the ", which, " of a walk in others' entries");
  }
}

void DirWalk::Failed(const char* call, const std::string& what) {
  // Gone or replaced meanwhile (or a link where a directory was): nothing
  // was missed.
  if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP) return;
  Incomplete(absl::StrCat(call, " ", what, ": ", std::strerror(errno)));
}

void DirWalk::Incomplete(std::string error) {
  if (!result_.incomplete) {
    result_.incomplete = true;
    result_.error = std::move(error);
  }
}

bool DirWalk::Kept(const struct stat& info) const {
  return keep_.count({info.st_dev, info.st_ino}) != 0;
}

}  // namespace gdt::agent
