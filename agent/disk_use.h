// What a member holds on disk, measured by walking its directories (there
// are no disk quotas per member account), and a watch that stops a member
// holding more than the agent's bound (member_disk_max).
#ifndef GDT_AGENT_DISK_USE_H_
#define GDT_AGENT_DISK_USE_H_

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/log_throttle.h"
#include "common/mutex.h"

namespace gdt::agent {

// Where one member's files are.
struct DiskUseScope {
  // Directories that are the member's own (its builds and scratch dirs):
  // everything in them counts, whoever owns it.
  std::vector<std::string> dirs;
  // With a pool account: the entries this uid owns under `shared_roots`
  // (/tmp, /dev/shm, ...) count too, found as PurgeAccountLeftovers()
  // finds them (descending only into directories others may write to);
  // an owned directory counts with all it holds.
  std::optional<uid_t> owner;
  gid_t owner_gid = 0;
  std::vector<std::string> shared_roots;
  // Directories never entered (the agent's builds, cache and scratch
  // roots, should they lie under a shared root).
  std::vector<std::string> keep;
  // The member's cgroup (its directory; empty: none). Regular files its
  // processes hold open or map after they were deleted (no link left, so
  // no walk finds them) count too, where they lie on a file system of
  // `dirs` (and of `shared_roots`, with an owner): found through
  // /proc/PID/fd and /proc/PID/maps of each process in it, a mapped file
  // looked at through /proc/PID/map_files (which needs CAP_SYS_ADMIN;
  // without it, one no descriptor holds leaves the walk incomplete).
  std::string cgroup;
  // Bounds of one walk: entries looked at in all, and how deep; and the
  // descriptors and mapped deleted files of the cgroup's processes looked
  // at (each process counting as one more, each mapped file once).
  size_t max_entries = 1000000;
  int max_depth = 128;
  size_t max_descriptors = 100000;
};

// What MeasureDiskUse() found.
struct DiskUse {
  uint64_t bytes = 0;  // Allocated (st_blocks), each inode once.
  size_t entries = 0;  // The member's entries looked at.
  // Of `bytes`: in files its processes hold open or map after they were
  // deleted.
  uint64_t deleted_bytes = 0;
  // Its processes, their descriptors and the deleted files they map looked
  // at.
  size_t descriptors = 0;
  // The member's own entries reached a bound of the scope (max_entries of
  // them, or an own directory max_depth deep, or max_descriptors of its
  // processes'); the rest was not counted.
  bool truncated = false;
  // Part of the scope could not be looked at (an error other than an
  // entry going away, e.g. EMFILE; or others' entries in a shared root
  // reached a bound): `bytes` may be short. `error` says why.
  bool incomplete = false;
  std::string error;
  // The walk was cancelled; nothing in it counts.
  bool cancelled = false;
};

// Walks the scope with descriptors, without following links and without
// leaving the file system of each directory or root. Gives up (cancelled)
// soon after `*cancel` becomes true.
DiskUse MeasureDiskUse(const DiskUseScope& scope,
                       const std::atomic<bool>* cancel = nullptr);

// Bytes in use on the file systems that hold the scope's directories (and
// shared roots, with an owner), each counted once; a path that does not
// exist is skipped, and so is a directory of the member's own with a file
// system mounted on it: what statvfs() says, cheap.
uint64_t FileSystemsUsedBytes(const DiskUseScope& scope);

// Stops members whose disk use goes above a bound. Walking a big checkout
// takes a while, so a member is measured only when it may have crossed the
// bound: the watch keeps, for each member, an upper bound of what it holds
// (its last measurement plus whatever the file systems it uses grew by
// since), and walks its directories when that upper bound reaches the
// limit, or when `full_every` passed since its last walk (other members'
// deletions hide growth from the file systems' totals). Walks take at most
// about 1/`cost_factor` of the watch thread's time.
//
// A walk that reaches a bound of the scope (the member holds more entries
// than the agent measures) counts as above the limit. A walk that could not
// look at everything (incomplete) stops a member only when what it did
// count is above the limit, and never lowers the member's upper bound: a
// flood of descriptors on the agent must neither stop members nor let one
// write without bound.
//
// Thread-safe.
class DiskWatch {
 public:
  struct Member {
    std::string member_id;
    DiskUseScope scope;
  };
  struct Options {
    uint64_t member_max = 0;  // Bytes; must be > 0.
    std::chrono::milliseconds tick{1000};
    std::chrono::seconds full_every{60};
    int cost_factor = 10;
  };
  // `members` lists the members to watch now; `stop` stops one that holds
  // `use.bytes` (> member_max; or use.truncated) in `where`, `line` saying
  // so for the job's log (DiskLimitLine()); `first` on the first stop of
  // that member.
  using ListMembers = std::function<std::vector<Member>()>;
  using StopMember = std::function<void(
      const std::string& member_id, const DiskUse& use,
      const std::string& where, const std::string& line, bool first)>;
  DiskWatch(Options options, ListMembers members, StopMember stop);
  ~DiskWatch();
  DiskWatch(const DiskWatch&) = delete;
  DiskWatch& operator=(const DiskWatch&) = delete;

  // Runs CheckOnce() every tick on a thread of its own until Stop().
  void Start();
  // Returns soon, cancelling a walk under way.
  void Stop();
  // One round: measures the members that need it and stops those above
  // the bound.
  void CheckOnce();

  // How many walks were made; for the tests.
  size_t walks() const;

 private:
  struct Known {
    uint64_t upper_bound = 0;  // Of what the member holds.
    uint64_t used_then = 0;    // Its file systems' total at that time.
    std::chrono::steady_clock::time_point measured{};
    std::chrono::steady_clock::time_point next_walk{};
    bool stopped = false;  // Stopped for its disk use before.
  };

  const Options options_;
  const ListMembers members_;
  const StopMember stop_;

  // Held through one CheckOnce(): rounds never overlap.
  Mutex check_mu_;
  std::map<std::string, Known> known_ ABSL_GUARDED_BY(check_mu_);

  mutable Mutex mu_;
  CondVar changed_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> cancel_{false};  // Set by Stop(); read by walks.
  LogThrottle incomplete_log_ ABSL_GUARDED_BY(check_mu_){
      std::chrono::minutes(1)};
  size_t walks_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

// "in DIR, DIR and its account's files in ROOT ROOT": where the scope
// looks, for the job's log.
std::string DescribeDiskUseScope(const DiskUseScope& scope);

// The line that ends the job's log of a member stopped for `use` (above
// `member_max`, or more entries than `scope` lets the agent measure).
std::string DiskLimitLine(const DiskUse& use, const DiskUseScope& scope,
                          uint64_t member_max);

}  // namespace gdt::agent

#endif  // GDT_AGENT_DISK_USE_H_
