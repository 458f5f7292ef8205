// What keeps one member's stages apart from the agent and from other
// members on the same host: an unprivileged account to run them as (here),
// and a cgroup (v2) that holds every process they start (common/cgroup.h),
// so that teardown can end all of them, including those that left the
// stage's process group.
#ifndef GDT_AGENT_ISOLATION_H_
#define GDT_AGENT_ISOLATION_H_

#include <sys/types.h>

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/cgroup.h"

namespace gdt::agent {

// An account member stages run as.
struct MemberAccount {
  std::string name;  // As configured: a user name or "UID[:GID]".
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // Supplementary groups of a named user.
};

// Resolves a user name (its primary and supplementary groups from the
// system's databases) or a numeric "UID" / "UID:GID" (GID defaults to UID;
// no supplementary groups). Errors: InvalidArgument naming the entry when
// the user does not exist, the number does not parse, or it is root.
absl::StatusOr<MemberAccount> ResolveMemberAccount(const std::string& spec);

// The addresses at which a member reaches its gang's master `host` (its
// GDT_MASTER_ADDR, a name or an address): those it resolves to and, where
// one of them is this host's own (a loopback or unspecified address, or one
// of its interfaces'), also everything that reaches this host: loopback
// (127.0.0.0/8, ::1), the unspecified addresses (0.0.0.0 and ::, which the
// kernel takes to this host) and every address of its interfaces. IPv4
// ones cover their v4-mapped IPv6 forms (see PortGuard). Errors: NotFound
// with the resolver's reason.
absl::StatusOr<std::vector<IpPrefix>> MasterAddresses(const std::string& host);

// What a pooled account may leave behind outside the member's own
// directories, and where PurgeAccountLeftovers() looks for it.
// A GPU whose device node member cgroups are confined to: only members
// given it may open `device`, and they name it by `uuid` (the driver then
// shows a member only its own GPUs, numbered from 0, so an index would no
// longer mean the same GPU).
struct ConfinedGpu {
  DeviceNumber device;
  std::string uuid;
};

struct PurgeOptions {
  // Directories everyone may write to; entries in them (and in the
  // world-writable directories below them) owned by the account go. One
  // that does not exist is skipped.
  // /run/lock is the lock directory (often 1777; /var/lock links to it
  // on most systems, and is looked at where it is a directory of its own).
  std::vector<std::string> roots = {"/dev/shm",  "/tmp",      "/var/tmp",
                                    "/run/lock", "/var/lock", "/dev/mqueue"};
  // Directories never entered or removed (the agent's builds, cache and
  // scratch roots, should they lie under a root).
  std::vector<std::string> keep;
  // Bounds: entries looked at in all, and how many levels below a root a
  // walk descends (its own entries are the first). A chain of the
  // account's own directories deeper than that goes all the same (see
  // PurgeAccountLeftovers()).
  size_t max_entries = 200000;
  int max_depth = 32;
  // Also remove the account's System V IPC objects (shared memory,
  // semaphore sets, message queues) from this IPC namespace.
  bool sysv_ipc = true;
};

// What PurgeAccountLeftovers() did.
struct PurgeCounts {
  size_t files = 0;  // Files, links, sockets, pipes removed.
  size_t dirs = 0;   // Directories removed (with all in them).
  size_t shm = 0;
  size_t sem = 0;
  size_t msg = 0;
  size_t failed = 0;  // Entries or objects that could not be removed.
  // FUSE file systems the account had mounted under the roots, detached.
  size_t mounts = 0;
  // A bound was reached (max_entries looked at, or others' directory
  // max_depth levels below a root); the rest was not looked at.
  bool truncated = false;
  // Part of the roots could not be looked at (e.g. the agent ran out of
  // descriptors): some of the account's entries may be left. `error` says
  // why.
  bool incomplete = false;
  std::string error;
  // Processes of the account still alive: then nothing was removed.
  size_t live_processes = 0;
};

// Removes what `uid` (a pooled member account whose member is gone) left
// outside its member directories, so that the next member given the same
// account cannot read it or be tricked by it: under each root, every entry
// the account owns (a directory with all it holds), found without
// following symbolic links and without leaving the root's file system,
// descending only into directories others may write to (where an account
// can create entries it owns without owning the directory). Each
// directory's entries are read before any goes (removing entries while a
// listing is read makes some file systems skip others). A chain of the
// account's directories deeper than max_depth is moved up a stretch at a
// time (renamed to ".gdt-purge-PID-N-M" in the directory the account's
// entry was found in) and removed from there: no more than max_depth
// descriptors are held, and max_entries still bounds the whole. Also its
// System V IPC objects (by owner or creator uid). First, the FUSE file
// systems the account mounted under the roots (fusermount's user_id=) are
// detached: their daemons are gone with the account's processes, so they
// answer nothing and their mount points could not be removed. Does nothing
// while a process of `uid` still runs: that process is either another
// agent's member sharing the account or one that escaped teardown, and
// removing files under it protects nobody. Errors: InvalidArgument for root or
// the caller's own uid.
absl::StatusOr<PurgeCounts> PurgeAccountLeftovers(uid_t uid, gid_t gid,
                                                  const PurgeOptions& options);

// Detaches (umount2 with MNT_DETACH, never following a link) every file
// system mounted at or below the directory `dir` in this mount namespace,
// deepest first, and says how many. A member may mount one in its own
// directories (FUSE, through fusermount); once its processes are gone it
// answers nothing (ENOTCONN) and its mount point cannot be removed, so a
// member's directories are freed of them before they go. Errors: the
// first mount that could not be detached (e.g. without CAP_SYS_ADMIN),
// after trying the others.
absl::StatusOr<size_t> DetachMountsUnder(const std::string& dir);

// The pids.max each member cgroup gets: `configured` (member_pids_max),
// lowered so that `members` members at their limit together hold at most
// three quarters of `kernel_limit` (the least of the kernel's pid_max and
// threads-max): a host whose kernel allows 32768 pids in all would
// otherwise let one member's fork bomb take every pid, the agent's and the
// other members' included. 0 (the operator's "no limit") stays 0, and so
// does anything while the kernel limit is unknown (0); else at least 1.
uint64_t MemberPidsMax(uint64_t configured, uint64_t kernel_limit,
                       uint64_t members);

// The least of the kernel's limits on pids and threads in all
// (/proc/sys/kernel/pid_max, /proc/sys/kernel/threads-max); 0 when neither
// can be read.
uint64_t KernelPidsLimit();

// The environment a stage starts from: the names of `agent_env` that are
// safe and needed to run anything (PATH, HOME, USER, LOGNAME, SHELL, LANG,
// LANGUAGE, LC_*, TZ, TERM) plus those `passthrough` names (an entry
// ending in '*' is a prefix); nothing else of the agent's own
// environment, which may hold its secrets.
std::map<std::string, std::string> StageBaseEnvironment(
    const std::map<std::string, std::string>& agent_env,
    const std::vector<std::string>& passthrough);

}  // namespace gdt::agent

#endif  // GDT_AGENT_ISOLATION_H_
