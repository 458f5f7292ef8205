#include "agent/disk_use.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "spdlog/spdlog.h"

namespace gdt::agent {
namespace {

using std::chrono::steady_clock;

// Walks with descriptors (openat, O_NOFOLLOW), never leaving the file
// system it started on, within the scope's bounds.
class Walker {
 public:
  Walker(const DiskUseScope& scope, DiskUse& use,
         const std::atomic<bool>* cancel)
      : scope_(scope), use_(use), cancel_(cancel) {
    for (const std::string& path : scope.keep) {
      struct stat info = {};
      if (stat(path.c_str(), &info) == 0)
        keep_.emplace(info.st_dev, info.st_ino);
    }
  }

  // Everything under `dir`, `dir` included.
  void CountDir(const std::string& dir) {
    const int fd =
        open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return Failed("open", dir);
    struct stat info = {};
    if (fstat(fd, &info) == 0 && Add(info)) CountAll(fd, info.st_dev, 0);
    close(fd);
  }

  // What the owner holds under `root`.
  void CountOwned(const std::string& root) {
    const int fd =
        open(root.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return Failed("open", root);
    struct stat info = {};
    if (fstat(fd, &info) == 0 && !Kept(info)) ScanOwned(fd, info.st_dev, 0);
    close(fd);
  }

 private:
  bool Kept(const struct stat& info) const {
    return keep_.count({info.st_dev, info.st_ino}) != 0;
  }

  // A call failed (errno says why): unless the entry went away or was
  // replaced meanwhile, the walk missed part of the scope.
  void Failed(const char* call, const std::string& what) {
    if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP) return;
    if (!use_.incomplete) {
      use_.incomplete = true;
      use_.error = absl::StrCat(call, " ", what, ": ", strerror(errno));
    }
  }

  // Reached a bound: in the member's own files, the walk is truncated;
  // in others' (directories of a shared root), incomplete.
  void Bound(bool own, const char* which) {
    if (own) {
      use_.truncated = true;
    } else if (!use_.incomplete) {
      use_.incomplete = true;
      use_.error = absl::StrCat("more than the ", which,
                                " of a walk in others' entries");
    }
  }

  // Counts one entry looked at (the member's own, or another's in a
  // shared root); false once a bound is reached or the walk is cancelled.
  bool Visit(bool own) {
    if (cancel_ != nullptr && cancel_->load(std::memory_order_relaxed)) {
      use_.cancelled = true;
      return false;
    }
    size_t& entries = own ? use_.entries : others_;
    if (entries >= scope_.max_entries) {
      Bound(own, "max_entries");
      return false;
    }
    ++entries;
    return true;
  }

  // Adds the entry's blocks (an inode with several links once); false
  // for one counted before.
  bool Add(const struct stat& info) {
    if (info.st_nlink > 1 || S_ISDIR(info.st_mode)) {
      if (!seen_.emplace(info.st_dev, info.st_ino).second) return false;
    }
    use_.bytes += static_cast<uint64_t>(info.st_blocks) * 512;
    return true;
  }

  // Calls `each(name)` for the entries of the directory `fd` (read through
  // a duplicate, so that `fd` stays usable for the *at() calls) until it
  // returns false or the bound is reached; `own`: the entries are the
  // member's.
  template <typename Each>
  void ForEachName(int fd, bool own, Each each) {
    if (use_.cancelled) return;
    const int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (copy < 0) return Failed("dup", "a directory");
    DIR* dir = fdopendir(copy);
    if (dir == nullptr) {
      Failed("fdopendir", "a directory");
      close(copy);
      return;
    }
    while (true) {
      errno = 0;
      const dirent* entry = readdir(dir);
      if (entry == nullptr) {
        if (errno != 0) Failed("readdir", "a directory");
        break;
      }
      const char* name = entry->d_name;
      if ((name[0] == '.' && name[1] == '\0') ||
          (name[0] == '.' && name[1] == '.' && name[2] == '\0')) {
        continue;
      }
      if (!Visit(own) || !each(name)) break;
    }
    closedir(dir);
  }

  // The directory `name` in `fd`, or -1 (counted as failed).
  int OpenChild(int fd, const char* name) {
    const int child =
        openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (child < 0) Failed("openat", name);
    return child;
  }

  void CountAll(int fd, dev_t dev, int depth) {
    ForEachName(fd, /*own=*/true, [&](const char* name) {
      struct stat info = {};
      if (fstatat(fd, name, &info, AT_SYMLINK_NOFOLLOW) != 0) {
        Failed("fstatat", name);
        return true;
      }
      if (info.st_dev != dev || !Add(info) || !S_ISDIR(info.st_mode)) {
        return true;
      }
      if (depth + 1 >= scope_.max_depth) {
        Bound(/*own=*/true, "max_depth");
        return true;
      }
      const int child = OpenChild(fd, name);
      if (child < 0) return true;
      CountAll(child, dev, depth + 1);
      close(child);
      return true;
    });
  }

  // A directory others may write to: the owner can have entries there.
  bool Writable(const struct stat& info) const {
    return (info.st_mode & S_IWOTH) != 0 ||
           ((info.st_mode & S_IWGRP) != 0 && info.st_gid == scope_.owner_gid);
  }

  void ScanOwned(int fd, dev_t dev, int depth) {
    ForEachName(fd, /*own=*/false, [&](const char* name) {
      struct stat info = {};
      if (fstatat(fd, name, &info, AT_SYMLINK_NOFOLLOW) != 0) {
        Failed("fstatat", name);
        return true;
      }
      if (Kept(info) || info.st_dev != dev) return true;
      const bool owned = info.st_uid == *scope_.owner;
      // The member's own, looked at as another's: counted as its own (so
      // that its entries at the top of /tmp cannot pass for others').
      if (owned) {
        --others_;
        if (!Visit(/*own=*/true)) return false;
      }
      if (!owned && !(S_ISDIR(info.st_mode) && Writable(info))) return true;
      if (owned && (!Add(info) || !S_ISDIR(info.st_mode))) return true;
      if (depth + 1 >= scope_.max_depth) {
        Bound(owned, "max_depth");
        return true;
      }
      const int child = OpenChild(fd, name);
      if (child < 0) return true;
      if (owned) {
        CountAll(child, dev, depth + 1);
      } else {
        ScanOwned(child, dev, depth + 1);
      }
      close(child);
      return true;
    });
  }

  const DiskUseScope& scope_;
  DiskUse& use_;
  const std::atomic<bool>* const cancel_;
  size_t others_ = 0;  // Others' entries looked at in shared roots.
  std::set<std::pair<dev_t, ino_t>> keep_;
  std::set<std::pair<dev_t, ino_t>> seen_;
};

// The paths a scope's file systems are found by.
std::vector<std::string> PathsOf(const DiskUseScope& scope) {
  std::vector<std::string> paths = scope.dirs;
  if (scope.owner.has_value()) {
    paths.insert(paths.end(), scope.shared_roots.begin(),
                 scope.shared_roots.end());
  }
  return paths;
}

}  // namespace

DiskUse MeasureDiskUse(const DiskUseScope& scope,
                       const std::atomic<bool>* cancel) {
  DiskUse use;
  Walker walker(scope, use, cancel);
  for (const std::string& dir : scope.dirs) walker.CountDir(dir);
  if (scope.owner.has_value()) {
    for (const std::string& root : scope.shared_roots) walker.CountOwned(root);
  }
  return use;
}

uint64_t FileSystemsUsedBytes(const std::vector<std::string>& paths) {
  std::set<dev_t> counted;
  uint64_t used = 0;
  for (const std::string& path : paths) {
    struct stat info = {};
    struct statvfs fs = {};
    if (stat(path.c_str(), &info) != 0 || !counted.insert(info.st_dev).second ||
        statvfs(path.c_str(), &fs) != 0) {
      continue;
    }
    used += static_cast<uint64_t>(fs.f_blocks - fs.f_bfree) * fs.f_frsize;
  }
  return used;
}

std::string DescribeDiskUseScope(const DiskUseScope& scope) {
  std::string text = absl::StrJoin(scope.dirs, ", ");
  if (scope.owner.has_value() && !scope.shared_roots.empty()) {
    absl::StrAppend(&text, text.empty() ? "" : " and ",
                    "its account's files in ",
                    absl::StrJoin(scope.shared_roots, ", "));
  }
  return text;
}

std::string DiskLimitLine(const DiskUse& use, const DiskUseScope& scope,
                          uint64_t member_max) {
  if (use.truncated) {
    return absl::StrCat(
        "gdt: disk limit: this member holds more than ", scope.max_entries,
        " entries (or directories deeper than ", scope.max_depth,
        " levels) in ", DescribeDiskUseScope(scope),
        ", more than the agent measures (member_disk_max is set); its "
        "processes were stopped\n");
  }
  return absl::StrCat("gdt: disk limit: this member holds ", use.bytes,
                      " bytes in ", DescribeDiskUseScope(scope),
                      ", above member_disk_max (", member_max,
                      " bytes, in the agent's config); its processes were "
                      "stopped\n");
}

DiskWatch::DiskWatch(Options options, ListMembers members, StopMember stop)
    : options_(options), members_(std::move(members)), stop_(std::move(stop)) {}

DiskWatch::~DiskWatch() { Stop(); }

void DiskWatch::Start() {
  thread_ = std::thread([this] {
    while (true) {
      CheckOnce();
      MutexLock lock(mu_);
      if (stopping_) return;
      changed_.WaitUntil(mu_, steady_clock::now() + options_.tick);
      if (stopping_) return;
    }
  });
}

void DiskWatch::Stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
    changed_.NotifyAll();
  }
  cancel_.store(true);
  if (thread_.joinable()) thread_.join();
}

size_t DiskWatch::walks() const {
  MutexLock lock(mu_);
  return walks_;
}

void DiskWatch::CheckOnce() {
  MutexLock check(check_mu_);
  const std::vector<Member> members = members_();
  std::map<std::string, Known> known;
  for (const Member& member : members) {
    if (cancel_.load()) return;  // Stopping: the rest waits for no walk.
    const steady_clock::time_point now = steady_clock::now();
    const uint64_t used = FileSystemsUsedBytes(PathsOf(member.scope));
    Known entry;
    if (auto it = known_.find(member.member_id); it != known_.end()) {
      entry = it->second;
      // Whatever its file systems grew by, it may have written.
      if (used > entry.used_then) entry.upper_bound += used - entry.used_then;
      entry.used_then = used;
    } else {
      // It holds no more than is in use there.
      entry.upper_bound = used;
      entry.used_then = used;
      entry.measured = now;
    }
    const bool may_be_above = entry.upper_bound > options_.member_max;
    const bool due = now - entry.measured >= options_.full_every;
    if ((may_be_above || due) && now >= entry.next_walk) {
      const DiskUse use = MeasureDiskUse(member.scope, &cancel_);
      if (use.cancelled) return;
      const steady_clock::time_point done = steady_clock::now();
      const uint64_t used_now = FileSystemsUsedBytes(PathsOf(member.scope));
      if (use.incomplete && !use.truncated) {
        // What it did not count may be anywhere below the old bound (and
        // what was written meanwhile on top of it).
        entry.upper_bound = std::max(use.bytes, entry.upper_bound);
        if (used_now > entry.used_then) {
          entry.upper_bound += used_now - entry.used_then;
        }
        if (std::optional<uint64_t> count = incomplete_log_.Occur(done)) {
          spdlog::warn(
              "event=member_disk_walk_incomplete member={} counted_bytes={} "
              "error={} count={}",
              LogValue(member.member_id), use.bytes, LogValue(use.error),
              *count);
        }
      } else {
        entry.upper_bound = use.bytes;
        entry.measured = done;
      }
      entry.used_then = used_now;
      // The next walk waits cost_factor times as long as this one took.
      entry.next_walk = done + (done - now) * options_.cost_factor;
      {
        MutexLock lock(mu_);
        ++walks_;
      }
      spdlog::debug(
          "event=member_disk_measured member={} bytes={} entries={} "
          "truncated={} incomplete={} ms={}",
          LogValue(member.member_id), use.bytes, use.entries, use.truncated,
          use.incomplete,
          std::chrono::duration_cast<std::chrono::milliseconds>(done - now)
              .count());
      if (use.truncated || use.bytes > options_.member_max) {
        stop_(member.member_id, use, DescribeDiskUseScope(member.scope),
              DiskLimitLine(use, member.scope, options_.member_max),
              !entry.stopped);
        entry.stopped = true;
      }
    }
    known[member.member_id] = entry;
  }
  known_ = std::move(known);  // Members gone are forgotten.
}

}  // namespace gdt::agent
