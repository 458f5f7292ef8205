#include "agent/disk_use.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "agent/dir_walk.h"
#include "common/cgroup.h"
#include "common/logging.h"
#include "spdlog/spdlog.h"

namespace gdt::agent {
namespace {

using std::chrono::steady_clock;

// A line of /proc/PID/maps for a file no longer linked where it was
// mapped from.
struct DeletedMapping {
  uint64_t start = 0;
  uint64_t end = 0;
  dev_t dev = 0;
  ino_t ino = 0;
};

// The mapping a maps line (`START-END PERMS OFFSET MAJOR:MINOR INODE
// PATH`, hexadecimal but for the inode) describes, when its path ends in
// " (deleted)".
std::optional<DeletedMapping> ParseDeletedMapping(absl::string_view line) {
  absl::ConsumeSuffix(&line, "\n");
  if (!absl::EndsWith(line, " (deleted)")) return std::nullopt;
  const std::vector<absl::string_view> fields =
      absl::StrSplit(line, absl::MaxSplits(' ', 5));
  if (fields.size() < 6) return std::nullopt;
  const std::vector<absl::string_view> range =
      absl::StrSplit(fields[0], absl::MaxSplits('-', 1));
  const std::vector<absl::string_view> device =
      absl::StrSplit(fields[3], absl::MaxSplits(':', 1));
  DeletedMapping mapping;
  uint32_t major = 0;
  uint32_t minor = 0;
  uint64_t ino = 0;
  if (range.size() != 2 || device.size() != 2 ||
      !absl::SimpleHexAtoi(range[0], &mapping.start) ||
      !absl::SimpleHexAtoi(range[1], &mapping.end) ||
      !absl::SimpleHexAtoi(device[0], &major) ||
      !absl::SimpleHexAtoi(device[1], &minor) ||
      !absl::SimpleAtoi(fields[4], &ino) || ino == 0) {
    return std::nullopt;
  }
  mapping.dev = makedev(major, minor);
  mapping.ino = static_cast<ino_t>(ino);
  return mapping;
}

// The paths a scope's file systems are found by.
std::vector<std::string> PathsOf(const DiskUseScope& scope) {
  std::vector<std::string> paths = scope.dirs;
  if (scope.owner.has_value()) {
    paths.insert(paths.end(), scope.shared_roots.begin(),
                 scope.shared_roots.end());
  }
  return paths;
}

// The file systems a scope's walk covers: those of its directories (not
// links: the walk does not follow them).
std::set<dev_t> FileSystemsOf(const DiskUseScope& scope) {
  std::set<dev_t> devices;
  for (const std::string& path : PathsOf(scope)) {
    struct stat info = {};
    if (StatNoWait(AT_FDCWD, path.c_str(), &info) && S_ISDIR(info.st_mode)) {
      devices.insert(info.st_dev);
    }
  }
  return devices;
}

// Counts a scope's bytes over one DirWalk: the member's own directories
// whole, and what its account owns in the shared roots.
class Counter {
 public:
  Counter(const DiskUseScope& scope, const std::atomic<bool>* cancel)
      : scope_(scope),
        cancel_(cancel),
        walk_(DirWalkOptions{scope.keep, scope.max_entries, scope.max_depth,
                             cancel, /*list_first=*/false}) {}

  DiskUse Measure() {
    // Before the walk: a file found here is not counted again should it be
    // linked meanwhile (an O_TMPFILE file can be).
    CountDeletedOpenFiles();
    for (const std::string& dir : scope_.dirs) {
      walk_.Root(
          dir, /*own=*/true,
          [this](const struct stat& info) { return Add(info); },
          [this](int fd, const char* name, const struct stat& info, int depth) {
            return CountAll(fd, name, info, depth);
          });
    }
    if (scope_.owner.has_value()) {
      for (const std::string& root : scope_.shared_roots) {
        // Others' entries there are looked at as others'; the member's own
        // count as its own (so that its entries at the top of /tmp cannot
        // pass for others').
        walk_.FindOwned(root, *scope_.owner, scope_.owner_gid, /*own=*/false,
                        [this](int fd, const char* name,
                               const struct stat& info, int depth) {
                          if (!walk_.OnRootFileSystem(info)) return true;
                          return walk_.Claim() &&
                                 CountAll(fd, name, info, depth);
                        });
      }
    }
    const DirWalkResult& walked = walk_.result();
    use_.entries = walked.entries;
    use_.truncated = use_.truncated || walked.truncated;
    if (walked.incomplete) Incomplete(walked.error);
    use_.cancelled = use_.cancelled || walked.cancelled;
    return use_;
  }

 private:
  // Regular files the cgroup's processes hold open or map with no link
  // left, on the file systems the walk covers, each once: what they write
  // there takes space no walk finds.
  void CountDeletedOpenFiles() {
    if (scope_.cgroup.empty()) return;
    absl::StatusOr<std::vector<pid_t>> pids = CgroupPids(scope_.cgroup);
    if (!pids.ok()) {
      // A member torn down meanwhile holds nothing.
      if (!absl::IsNotFound(pids.status())) {
        Incomplete(std::string(pids.status().message()));
      }
      return;
    }
    const std::set<dev_t> covered = FileSystemsOf(scope_);
    for (const pid_t pid : *pids) {
      if (!LookAt() || !CountOpenIn(pid, covered) ||
          !CountMappedIn(pid, covered)) {
        break;
      }
    }
    // A mapped file that could not be sized was not counted, unless a
    // descriptor holds it too.
    for (const auto& [file, error] : unsized_) {
      if (deleted_.count(file) == 0) {
        Incomplete(error);
        break;
      }
    }
  }

  // The files process `pid` holds open (/proc/PID/fd). False at the bound
  // or once cancelled.
  bool CountOpenIn(pid_t pid, const std::set<dev_t>& covered) {
    const std::string path = absl::StrCat("/proc/", pid, "/fd");
    const int dir = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) {
      Failed(path);  // Unless the process is gone.
      return true;
    }
    DIR* listing = fdopendir(dir);
    if (listing == nullptr) {
      Failed(path);
      close(dir);
      return true;
    }
    bool more = true;
    while (more) {
      errno = 0;
      const dirent* entry = readdir(listing);
      if (entry == nullptr) {
        if (errno != 0) Failed(path);
        break;
      }
      if (entry->d_name[0] == '.') continue;
      more = LookAt();
      if (more) CountIfDeleted(dir, entry->d_name, covered);
    }
    closedir(listing);
    return more;
  }

  // The files process `pid` maps with no link left (its /proc/PID/maps
  // lines ending in " (deleted)"): a file mapped, then closed and deleted
  // keeps its space with no descriptor to find it by. Each file is looked
  // at once however often it is mapped. False at the bound or once
  // cancelled.
  bool CountMappedIn(pid_t pid, const std::set<dev_t>& covered) {
    const std::string path = absl::StrCat("/proc/", pid, "/maps");
    FILE* maps = fopen(path.c_str(), "re");
    if (maps == nullptr) {
      Failed(path);
      return true;
    }
    const std::string files_path = absl::StrCat("/proc/", pid, "/map_files");
    int files = -1;  // Opened at the first file mapped without a link.
    char* line = nullptr;
    size_t capacity = 0;
    bool more = true;
    while (more) {
      errno = 0;
      const ssize_t length = getline(&line, &capacity, maps);
      if (length < 0) {
        if (errno != 0) Failed(path);
        break;
      }
      const std::optional<DeletedMapping> mapping =
          ParseDeletedMapping(absl::string_view(line, length));
      if (!mapping.has_value() ||
          !mapped_.emplace(mapping->dev, mapping->ino).second) {
        continue;
      }
      more = LookAt();
      if (!more) break;
      if (files < 0) {
        files = open(files_path.c_str(),
                     O_RDONLY | O_DIRECTORY | O_CLOEXEC);  // NOLINT
        if (files < 0) {
          if (errno == ENOENT || errno == ESRCH) break;  // It is gone.
          Unsized(*mapping, files_path, errno, covered);
          continue;
        }
      }
      if (!CountIfMapped(files, *mapping, files_path, covered)) {
        // Unmapped meanwhile: another process may still map it.
        mapped_.erase({mapping->dev, mapping->ino});
      }
    }
    free(line);  // NOLINT: getline's buffer.
    fclose(maps);
    if (files >= 0) close(files);
    return more;
  }

  // The file mapped as `mapping`, counted when it is a regular file without
  // links on a covered file system; seen through its link in
  // /proc/PID/map_files (`files`, a descriptor of `files_path`), which
  // needs CAP_SYS_ADMIN. False when it was unmapped meanwhile.
  bool CountIfMapped(int files, const DeletedMapping& mapping,
                     const std::string& files_path,
                     const std::set<dev_t>& covered) {
    // map_files names its entries without leading zeros.
    const std::string name =
        absl::StrFormat("%x-%x", mapping.start, mapping.end);
    struct statx info = {};
    if (statx(files, name.c_str(), AT_STATX_DONT_SYNC,
              STATX_TYPE | STATX_NLINK | STATX_INO | STATX_BLOCKS,
              &info) != 0) {
      const int error = errno;
      const std::string what = absl::StrCat(files_path, "/", name);
      if (error == EPERM || error == EACCES) {
        Unsized(mapping, what, error, covered);
        return true;
      }
      errno = error;
      Failed(what);
      return error != ENOENT && error != ESRCH;
    }
    CountIfUnlinked(info, covered);
    return true;
  }

  // A mapped file the agent may not look at (it lacks CAP_SYS_ADMIN). The
  // dev:inode of its maps line name it: a descriptor that holds it counts
  // it; else it is not counted, and where that dev is a covered file
  // system's the walk is incomplete.
  void Unsized(const DeletedMapping& mapping, const std::string& what,
               int error, const std::set<dev_t>& covered) {
    if (covered.count(mapping.dev) == 0) return;
    unsized_.emplace(std::make_pair(mapping.dev, mapping.ino),
                     absl::StrCat(what, ": ", std::strerror(error)));
  }

  // The file the descriptor `name` in a /proc/PID/fd directory `dir` is
  // open on, counted when it is a regular file without links on a covered
  // file system.
  void CountIfDeleted(int dir, const char* name,
                      const std::set<dev_t>& covered) {
    // Through the link to the open file. From what the kernel holds of it
    // (AT_STATX_DONT_SYNC): never waiting on the server of a network or
    // FUSE file system, which a job may run.
    struct statx info = {};
    if (statx(dir, name, AT_STATX_DONT_SYNC,
              STATX_TYPE | STATX_NLINK | STATX_INO | STATX_BLOCKS,
              &info) != 0) {
      Failed(name);  // Unless it was closed meanwhile.
      return;
    }
    CountIfUnlinked(info, covered);
  }

  // Counts the file `info` describes, once, when it is a regular file
  // without links on a covered file system.
  void CountIfUnlinked(const struct statx& info,
                       const std::set<dev_t>& covered) {
    if (!S_ISREG(info.stx_mode) || info.stx_nlink != 0) return;
    const dev_t dev = makedev(info.stx_dev_major, info.stx_dev_minor);
    if (covered.count(dev) == 0 ||
        !deleted_.emplace(dev, info.stx_ino).second) {
      return;
    }
    const uint64_t bytes = info.stx_blocks * 512;
    use_.bytes += bytes;
    use_.deleted_bytes += bytes;
  }

  // One more process, descriptor or mapped file looked at; false at the
  // bound (truncated) or once cancelled.
  bool LookAt() {
    if (cancel_ != nullptr && cancel_->load(std::memory_order_relaxed)) {
      use_.cancelled = true;
      return false;
    }
    if (use_.descriptors >= scope_.max_descriptors) {
      use_.truncated = true;
      return false;
    }
    ++use_.descriptors;
    return true;
  }

  // A call on `what` failed with errno: a process or descriptor that went
  // away meanwhile held nothing; anything else was not looked at.
  void Failed(const std::string& what) {
    if (errno == ENOENT || errno == ESRCH) return;
    Incomplete(absl::StrCat(what, ": ", std::strerror(errno)));
  }

  void Incomplete(const std::string& error) {
    if (use_.incomplete) return;
    use_.incomplete = true;
    use_.error = error;
  }

  // Adds the entry's blocks (an inode with several links once); false
  // for one counted before.
  bool Add(const struct stat& info) {
    // Counted as held open after it was deleted, and linked since.
    if (!deleted_.empty() && deleted_.count({info.st_dev, info.st_ino}) != 0) {
      return false;
    }
    if (info.st_nlink > 1 || S_ISDIR(info.st_mode)) {
      if (!seen_.emplace(info.st_dev, info.st_ino).second) return false;
    }
    use_.bytes += static_cast<uint64_t>(info.st_blocks) * 512;
    return true;
  }

  // One of the member's entries, a directory with all it holds.
  bool CountAll(int fd, const char* name, const struct stat& info, int depth) {
    if (!walk_.OnRootFileSystem(info) || !Add(info) || !S_ISDIR(info.st_mode)) {
      return true;
    }
    walk_.Enter(fd, name, info, depth, /*own=*/true,
                [this](int child, const char* inner,
                       const struct stat& inner_info, int inner_depth) {
                  return CountAll(child, inner, inner_info, inner_depth);
                });
    return true;
  }

  const DiskUseScope& scope_;
  const std::atomic<bool>* const cancel_;
  DirWalk walk_;
  DiskUse use_;
  std::set<std::pair<dev_t, ino_t>> seen_;
  // Files held open or mapped without a link, counted.
  std::set<std::pair<dev_t, ino_t>> deleted_;
  // Mapped files without a link looked at, by their maps lines' dev:inode.
  std::set<std::pair<dev_t, ino_t>> mapped_;
  // Of those, the ones on a covered file system the agent could not look
  // at, with why.
  std::map<std::pair<dev_t, ino_t>, std::string> unsized_;
};

}  // namespace

DiskUse MeasureDiskUse(const DiskUseScope& scope,
                       const std::atomic<bool>* cancel) {
  return Counter(scope, cancel).Measure();
}

uint64_t FileSystemsUsedBytes(const DiskUseScope& scope) {
  std::set<dev_t> counted;
  uint64_t used = 0;
  const std::vector<std::string> paths = PathsOf(scope);
  for (size_t i = 0; i < paths.size(); ++i) {
    // A file system mounted on a member's own directory (PathsOf lists
    // those first) is the member's: statfs would ask it, and it may never
    // answer (its walk says so).
    const int fd = i < scope.dirs.size()
                       ? OpenDirNotMounted(paths[i])
                       : open(paths[i].c_str(),
                              O_RDONLY | O_DIRECTORY | O_CLOEXEC);  // NOLINT
    if (fd < 0) continue;
    struct stat info = {};
    struct statvfs fs = {};
    if (fstat(fd, &info) == 0 && counted.insert(info.st_dev).second &&
        fstatvfs(fd, &fs) == 0) {
      used += static_cast<uint64_t>(fs.f_blocks - fs.f_bfree) * fs.f_frsize;
    }
    close(fd);
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
        scope.cgroup.empty()
            ? ""
            : absl::StrCat(", or more than ", scope.max_descriptors,
                           " processes, open descriptors and mapped "
                           "deleted files in its cgroup"),
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
    const uint64_t used = FileSystemsUsedBytes(member.scope);
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
      const uint64_t used_now = FileSystemsUsedBytes(member.scope);
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
          "deleted_open_bytes={} descriptors={} truncated={} incomplete={} "
          "ms={}",
          LogValue(member.member_id), use.bytes, use.entries, use.deleted_bytes,
          use.descriptors, use.truncated, use.incomplete,
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
