#include "agent/dir_walk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gdt::agent {

DirWalk::DirWalk(DirWalkOptions options) : options_(std::move(options)) {
  for (const std::string& path : options_.keep) {
    struct stat info = {};
    if (stat(path.c_str(), &info) == 0) keep_.emplace(info.st_dev, info.st_ino);
  }
}

void DirWalk::Root(const std::string& path, bool own,
                   absl::FunctionRef<bool(const struct stat&)> enter,
                   Each each) {
  const int fd =
      open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
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
  const int child =
      openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (child < 0) {
    Failed("openat", name);
    return false;
  }
  List(child, own, depth + 1, each);
  return true;
}

void DirWalk::FindOwned(const std::string& root, uid_t uid, gid_t gid, bool own,
                        Each found) {
  Root(
      root, own, [](const struct stat&) { return true; },
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
  if (fstatat(fd, name, &info, AT_SYMLINK_NOFOLLOW) != 0) {
    Failed("fstatat", name);
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
  if (!result_.incomplete) {
    result_.incomplete = true;
    result_.error = absl::StrCat(call, " ", what, ": ", std::strerror(errno));
  }
}

bool DirWalk::Kept(const struct stat& info) const {
  return keep_.count({info.st_dev, info.st_ino}) != 0;
}

}  // namespace gdt::agent
