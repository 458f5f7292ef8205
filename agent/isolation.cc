#include "agent/isolation.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pwd.h>
#include <stdio.h>
#include <sys/ipc.h>
#include <sys/mount.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "agent/dir_walk.h"
#include "common/mount_info.h"

namespace gdt::agent {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// Live processes (not zombies: those hold nothing) whose real, effective,
// saved or file-system uid is `uid`.
size_t ProcessesOf(uid_t uid) {
  size_t count = 0;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return 0;
  while (const dirent* entry = readdir(proc)) {
    int pid = 0;
    if (!absl::SimpleAtoi(entry->d_name, &pid)) continue;
    bool dead = false;
    bool ours = false;
    for (absl::string_view line : absl::StrSplit(
             ReadAll(absl::StrCat("/proc/", pid, "/status")), '\n')) {
      if (absl::ConsumePrefix(&line, "State:")) {
        line = absl::StripLeadingAsciiWhitespace(line);
        dead = !line.empty() && (line[0] == 'Z' || line[0] == 'X');
      } else if (absl::ConsumePrefix(&line, "Uid:")) {
        for (absl::string_view field :
             absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty())) {
          uint32_t id = 0;
          if (absl::SimpleAtoi(field, &id) && id == uid) ours = true;
        }
        break;  // State comes before Uid.
      }
    }
    if (ours && !dead) ++count;
  }
  closedir(proc);
  return count;
}

// One removal of an entry the account owns, found in the directory `top`
// (`top_depth` levels below the root).
struct Removal {
  DirWalk& walk;
  PurgeCounts& counts;
  int top;
  int top_depth;
  // Directories too deep to enter where they were, moved into `top` under
  // these names; removed from there.
  std::vector<std::string> lifted;
};

// Moves the directory `name` in `dir` into the removal's top directory
// under a fresh name, to be removed from there: a chain of directories
// deeper than the walk goes is removed a stretch at a time, holding no more
// descriptors than max_depth. False when it cannot be moved (e.g. a mount
// point) or that gains no depth.
bool Lift(Removal& removal, int dir, const char* name) {
  if (removal.walk.TooDeep(removal.top_depth)) return false;
  for (int attempt = 0; attempt < 8; ++attempt) {
    const std::string fresh = absl::StrCat(".gdt-purge-", getpid(), "-",
                                           removal.lifted.size(), "-", attempt);
    if (renameat2(dir, name, removal.top, fresh.c_str(), RENAME_NOREPLACE) ==
        0) {
      removal.lifted.push_back(fresh);
      return true;
    }
    if (errno != EEXIST) return false;
  }
  return false;
}

// Removes `name` (`info`) in `dir`: a directory with everything in it,
// whoever owns that (the account made the directory).
bool RemoveEntry(Removal& removal, int dir, const char* name,
                 const struct stat& info, int depth) {
  PurgeCounts& counts = removal.counts;
  if (!S_ISDIR(info.st_mode)) {
    if (unlinkat(dir, name, 0) == 0) {
      ++counts.files;
    } else if (errno != ENOENT) {
      ++counts.failed;
    }
    return true;
  }
  if (removal.walk.TooDeep(depth) && removal.walk.OnRootFileSystem(info) &&
      Lift(removal, dir, name)) {
    return true;
  }
  // A mount point, one too deep, or one that cannot be opened stays.
  if (!removal.walk.Enter(dir, name, info, depth, /*own=*/true,
                          [&](int child, const char* inner,
                              const struct stat& inner_info, int inner_depth) {
                            return RemoveEntry(removal, child, inner,
                                               inner_info, inner_depth);
                          })) {
    ++counts.failed;
    return true;
  }
  if (unlinkat(dir, name, AT_REMOVEDIR) == 0) {
    ++counts.dirs;
  } else if (errno != ENOENT) {
    ++counts.failed;
  }
  return true;
}

// Removes the account's entry `name` (`info`) found in `dir`, `depth`
// levels below the root, and what was lifted out of it.
bool RemoveOwned(DirWalk& walk, PurgeCounts& counts, int dir, const char* name,
                 const struct stat& info, int depth) {
  Removal removal{walk, counts, dir, depth, {}};
  RemoveEntry(removal, dir, name, info, depth);
  // Each lifted directory was max_depth levels down: removing the lifted
  // ones looks at more entries each time, and ends at the entry bound.
  while (!removal.lifted.empty()) {
    const std::string lifted = std::move(removal.lifted.back());
    removal.lifted.pop_back();
    struct stat lifted_info = {};
    if (!StatNoWait(dir, lifted.c_str(), &lifted_info)) {
      if (errno != ENOENT) ++counts.failed;
      continue;
    }
    RemoveEntry(removal, dir, lifted.c_str(), lifted_info, depth);
  }
  return true;
}

// The ids of the System V IPC objects listed in /proc/sysvipc/<kind> whose
// owner or creator is `uid`; `id_column` names the id's column.
std::vector<int> IpcIdsOf(const std::string& kind, const std::string& id_column,
                          uid_t uid) {
  std::vector<int> ids;
  std::vector<std::string> lines =
      absl::StrSplit(ReadAll("/proc/sysvipc/" + kind), '\n', absl::SkipEmpty());
  if (lines.empty()) return ids;
  const std::vector<std::string> header =
      absl::StrSplit(lines[0], ' ', absl::SkipEmpty());
  auto column = [&](const std::string& name) -> int {
    for (size_t i = 0; i < header.size(); ++i) {
      if (header[i] == name) return static_cast<int>(i);
    }
    return -1;
  };
  const int id_at = column(id_column);
  const int uid_at = column("uid");
  const int cuid_at = column("cuid");
  if (id_at < 0 || uid_at < 0 || cuid_at < 0) return ids;
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::vector<std::string> fields =
        absl::StrSplit(lines[i], ' ', absl::SkipEmpty());
    if (fields.size() != header.size()) continue;
    uint32_t owner = 0;
    uint32_t creator = 0;
    int id = 0;
    if (!absl::SimpleAtoi(fields[static_cast<size_t>(id_at)], &id) ||
        !absl::SimpleAtoi(fields[static_cast<size_t>(uid_at)], &owner) ||
        !absl::SimpleAtoi(fields[static_cast<size_t>(cuid_at)], &creator)) {
      continue;
    }
    if (owner == uid || creator == uid) ids.push_back(id);
  }
  return ids;
}

void PurgeIpc(uid_t uid, PurgeCounts& counts) {
  for (int id : IpcIdsOf("shm", "shmid", uid)) {
    if (shmctl(id, IPC_RMID, nullptr) == 0) {
      ++counts.shm;
    } else if (errno != EINVAL && errno != EIDRM) {
      ++counts.failed;
    }
  }
  for (int id : IpcIdsOf("sem", "semid", uid)) {
    if (semctl(id, 0, IPC_RMID) == 0) {
      ++counts.sem;
    } else if (errno != EINVAL && errno != EIDRM) {
      ++counts.failed;
    }
  }
  for (int id : IpcIdsOf("msg", "msqid", uid)) {
    if (msgctl(id, IPC_RMID, nullptr) == 0) {
      ++counts.msg;
    } else if (errno != EINVAL && errno != EIDRM) {
      ++counts.failed;
    }
  }
}

// True when `path` is `dir` or lies below it (both absolute, normal).
bool AtOrBelow(const std::string& path, const std::string& dir) {
  if (dir == "/") return absl::StartsWith(path, "/");
  return path == dir || absl::StartsWith(path, dir + "/");
}

// A FUSE file system that `uid` mounted: fusermount records its caller as
// the `user_id` option, and an account without privileges cannot name
// another.
bool FuseMountedBy(const MountInfo& mount, uid_t uid) {
  if (!absl::StartsWith(mount.type, "fuse")) return false;
  const std::string owner = absl::StrCat("user_id=", uid);
  for (absl::string_view option :
       absl::StrSplit(mount.super_options, ',', absl::SkipEmpty())) {
    if (option == owner) return true;
  }
  return false;
}

// What DetachLastFirst() did.
struct Detached {
  size_t detached = 0;
  size_t failed = 0;
  absl::Status first;  // The first failure.
};

// Detaches `points` (in mountinfo's order) last first: one mounted later
// is on top of, or further down than, those before it.
Detached DetachLastFirst(const std::vector<std::string>& points) {
  Detached done;
  for (auto point = points.rbegin(); point != points.rend(); ++point) {
    if (umount2(point->c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) == 0) {
      ++done.detached;
    } else if (errno != EINVAL && errno != ENOENT) {
      // EINVAL, ENOENT: gone meanwhile (with the one it was mounted on).
      ++done.failed;
      if (done.first.ok()) {
        done.first = absl::InternalError(
            absl::StrCat("detach ", *point, ": ", std::strerror(errno)));
      }
    }
  }
  return done;
}

// The FUSE file systems the account mounted under the purge's roots (not
// under a kept directory), detached: with the account's processes gone
// their daemons are too, so they answer nothing, and their mount points,
// and the directories holding them, could not be removed.
void DetachAccountMounts(uid_t uid, const PurgeOptions& options,
                         PurgeCounts& counts) {
  const auto resolved = [](const std::vector<std::string>& dirs) {
    std::vector<std::string> out;
    for (const std::string& dir : dirs) {
      std::error_code error;
      const std::filesystem::path real =
          std::filesystem::weakly_canonical(dir, error);
      if (!error && real.is_absolute()) out.push_back(real.string());
    }
    return out;
  };
  const std::vector<std::string> roots = resolved(options.roots);
  const std::vector<std::string> keep = resolved(options.keep);
  std::vector<std::string> points;
  for (const MountInfo& mount : ReadMountInfo()) {
    if (!FuseMountedBy(mount, uid)) continue;
    const auto under = [&](const std::string& dir) {
      return AtOrBelow(mount.mount_point, dir);
    };
    if (std::any_of(roots.begin(), roots.end(), under) &&
        std::none_of(keep.begin(), keep.end(), under)) {
      points.push_back(mount.mount_point);
    }
  }
  const Detached done = DetachLastFirst(points);
  counts.mounts += done.detached;
  counts.failed += done.failed;
  if (!done.first.ok() && counts.error.empty()) {
    counts.error = std::string(done.first.message());
  }
}

}  // namespace

absl::StatusOr<MemberAccount> ResolveMemberAccount(const std::string& spec) {
  MemberAccount account;
  account.name = spec;
  const std::vector<std::string> numbers = absl::StrSplit(spec, ':');
  uint32_t uid = 0;
  if (!spec.empty() && absl::SimpleAtoi(numbers[0], &uid)) {
    uint32_t gid = uid;
    if (numbers.size() > 2 ||
        (numbers.size() == 2 && !absl::SimpleAtoi(numbers[1], &gid))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "member account '", spec, "' is neither a user name nor UID[:GID]"));
    }
    account.uid = uid;
    account.gid = gid;
  } else {
    std::vector<char> buffer(16384);
    struct passwd entry = {};
    struct passwd* found = nullptr;
    if (getpwnam_r(spec.c_str(), &entry, buffer.data(), buffer.size(),
                   &found) != 0 ||
        found == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("member account '", spec, "' is not a user here"));
    }
    account.uid = found->pw_uid;
    account.gid = found->pw_gid;
    int count = 64;
    std::vector<gid_t> groups(static_cast<size_t>(count));
    if (getgrouplist(spec.c_str(), found->pw_gid, groups.data(), &count) < 0) {
      groups.resize(static_cast<size_t>(count));
      getgrouplist(spec.c_str(), found->pw_gid, groups.data(), &count);
    }
    groups.resize(static_cast<size_t>(std::max(count, 0)));
    account.groups = std::move(groups);
  }
  if (account.uid == 0 || account.gid == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "member account '", spec, "' is root: members must not run as root"));
  }
  return account;
}

absl::StatusOr<PurgeCounts> PurgeAccountLeftovers(uid_t uid, gid_t gid,
                                                  const PurgeOptions& options) {
  if (uid == 0 || uid == geteuid()) {
    return absl::InvalidArgumentError(
        absl::StrCat("uid ", uid,
                     " is root or this process's own: its files are not a "
                     "member's to purge"));
  }
  PurgeCounts counts;
  counts.live_processes = ProcessesOf(uid);
  if (counts.live_processes > 0) return counts;
  DetachAccountMounts(uid, options, counts);
  // Every entry looked at, the account's or another's, counts against the
  // one bound.
  // Each directory's entries are read before any goes.
  DirWalk walk(DirWalkOptions{options.keep, options.max_entries,
                              options.max_depth, nullptr,
                              /*list_first=*/true});
  for (const std::string& root : options.roots) {
    walk.FindOwned(
        root, uid, gid, /*own=*/true,
        [&](int dir, const char* name, const struct stat& info, int depth) {
          return RemoveOwned(walk, counts, dir, name, info, depth);
        });
    // Only the entry bound ends the purge: others' directories nested past
    // the depth bound (which a job can make, and which stay) must not keep
    // the roots after them from being purged.
    if (walk.result().entries >= options.max_entries) break;
  }
  counts.truncated = walk.result().truncated;
  counts.incomplete = walk.result().incomplete;
  counts.error = walk.result().error;
  if (options.sysv_ipc) PurgeIpc(uid, counts);
  return counts;
}

uint64_t MemberPidsMax(uint64_t configured, uint64_t kernel_limit,
                       uint64_t members) {
  if (configured == 0 || kernel_limit == 0) return configured;
  const uint64_t share = std::max<uint64_t>(
      1, kernel_limit / 4 * 3 / std::max<uint64_t>(members, 1));
  return std::min(configured, share);
}

uint64_t KernelPidsLimit() {
  uint64_t limit = 0;
  for (const char* file :
       {"/proc/sys/kernel/pid_max", "/proc/sys/kernel/threads-max"}) {
    std::ifstream in(file);
    uint64_t value = 0;
    if (in >> value && value > 0) {
      limit = limit == 0 ? value : std::min(limit, value);
    }
  }
  return limit;
}

std::map<std::string, std::string> StageBaseEnvironment(
    const std::map<std::string, std::string>& agent_env,
    const std::vector<std::string>& passthrough) {
  static const std::set<std::string> kAlways = {"PATH",     "HOME",  "USER",
                                                "LOGNAME",  "SHELL", "LANG",
                                                "LANGUAGE", "TZ",    "TERM"};
  std::map<std::string, std::string> env;
  for (const auto& [name, value] : agent_env) {
    bool pass = kAlways.count(name) != 0 || absl::StartsWith(name, "LC_");
    for (const std::string& wanted : passthrough) {
      if (pass) break;
      if (!wanted.empty() && wanted.back() == '*') {
        pass = absl::StartsWith(
            name, absl::string_view(wanted).substr(0, wanted.size() - 1));
      } else {
        pass = name == wanted;
      }
    }
    if (pass) env[name] = value;
  }
  return env;
}

absl::StatusOr<std::vector<IpPrefix>> MasterAddresses(const std::string& host) {
  auto prefix_of = [](const sockaddr* address) -> std::optional<IpPrefix> {
    IpPrefix prefix;
    if (address == nullptr) return std::nullopt;
    if (address->sa_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(address);
      std::memcpy(prefix.bytes.data(), &in->sin_addr, 4);
      prefix.length = 32;
    } else if (address->sa_family == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(address);
      std::memcpy(prefix.bytes.data(), &in6->sin6_addr, 16);
      prefix.ipv6 = true;
      prefix.length = 128;
    } else {
      return std::nullopt;
    }
    return prefix;
  };
  std::vector<IpPrefix> found;
  auto add = [&found](const IpPrefix& prefix) {
    if (std::find(found.begin(), found.end(), prefix) == found.end()) {
      found.push_back(prefix);
    }
  };
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* resolved = nullptr;
  if (const int error = getaddrinfo(host.c_str(), nullptr, &hints, &resolved);
      error != 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot resolve \"", host, "\": ", gai_strerror(error)));
  }
  for (const addrinfo* a = resolved; a != nullptr; a = a->ai_next) {
    if (std::optional<IpPrefix> prefix = prefix_of(a->ai_addr)) add(*prefix);
  }
  freeaddrinfo(resolved);
  if (found.empty()) {
    return absl::NotFoundError(
        absl::StrCat("\"", host, "\" resolves to no IPv4 or IPv6 address"));
  }
  std::vector<IpPrefix> local;
  for (const char* text : {"127.0.0.0/8", "::1", "0.0.0.0", "::"}) {
    local.push_back(*ParseIpPrefix(text));
  }
  ifaddrs* interfaces = nullptr;
  if (getifaddrs(&interfaces) == 0) {
    for (const ifaddrs* i = interfaces; i != nullptr; i = i->ifa_next) {
      if (std::optional<IpPrefix> prefix = prefix_of(i->ifa_addr)) {
        local.push_back(*prefix);
      }
    }
    freeifaddrs(interfaces);
  }
  auto covers = [](const IpPrefix& prefix, const IpPrefix& address) {
    if (prefix.ipv6 != address.ipv6) return false;
    for (int bit = 0; bit < prefix.length; ++bit) {
      const size_t byte = static_cast<size_t>(bit / 8);
      const int mask = 0x80 >> (bit % 8);
      if ((prefix.bytes[byte] & mask) != (address.bytes[byte] & mask)) {
        return false;
      }
    }
    return true;
  };
  const bool here =
      std::any_of(found.begin(), found.end(), [&](const IpPrefix& address) {
        return std::any_of(
            local.begin(), local.end(),
            [&](const IpPrefix& prefix) { return covers(prefix, address); });
      });
  if (here) {
    for (const IpPrefix& prefix : local) add(prefix);
  }
  return found;
}

absl::StatusOr<size_t> DetachMountsUnder(const std::string& dir) {
  // The parent (the agent's) resolved, the directory itself as named: a
  // link put in its place must not lead elsewhere.
  std::string trimmed = dir;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  const std::filesystem::path named =
      std::filesystem::path(trimmed).lexically_normal();
  std::error_code error;
  const std::filesystem::path parent =
      std::filesystem::weakly_canonical(named.parent_path(), error);
  const std::string leaf = named.filename().string();
  if (error || !named.is_absolute() || leaf.empty() || leaf == "." ||
      leaf == "..") {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot detach the mounts under ", dir));
  }
  const std::string real = (parent / leaf).string();
  std::vector<std::string> points;
  for (const MountInfo& mount : ReadMountInfo()) {
    if (AtOrBelow(mount.mount_point, real)) points.push_back(mount.mount_point);
  }
  const Detached done = DetachLastFirst(points);
  if (!done.first.ok()) return done.first;
  return done.detached;
}

}  // namespace gdt::agent
