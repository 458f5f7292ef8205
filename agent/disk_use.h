// What a member holds on disk, measured by walking its directories (there
// are no disk quotas per member account), and a watch that stops a member
// holding more than the agent's bound (member_disk_max).
#ifndef GDT_AGENT_DISK_USE_H_
#define GDT_AGENT_DISK_USE_H_

#include <sys/types.h>

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
  // Bounds of one walk: entries looked at in all, and how deep.
  size_t max_entries = 1000000;
  int max_depth = 128;
};

// What MeasureDiskUse() found.
struct DiskUse {
  uint64_t bytes = 0;      // Allocated (st_blocks), each inode once.
  size_t entries = 0;      // Entries looked at.
  bool truncated = false;  // A bound was reached; the rest was not counted.
};

// Walks the scope with descriptors, without following links and without
// leaving the file system of each directory or root.
DiskUse MeasureDiskUse(const DiskUseScope& scope);

// Bytes in use on the file systems that hold `paths` (each counted once;
// a path that does not exist is skipped): what statvfs() says, cheap.
uint64_t FileSystemsUsedBytes(const std::vector<std::string>& paths);

// Stops members whose disk use goes above a bound. Walking a big checkout
// takes a while, so a member is measured only when it may have crossed the
// bound: the watch keeps, for each member, an upper bound of what it holds
// (its last measurement plus whatever the file systems it uses grew by
// since), and walks its directories when that upper bound reaches the
// limit, or when `full_every` passed since its last walk (other members'
// deletions hide growth from the file systems' totals). Walks take at most
// about 1/`cost_factor` of the watch thread's time.
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
  // `use.bytes` (> member_max) in `where` (for the job's log).
  using ListMembers = std::function<std::vector<Member>()>;
  using StopMember =
      std::function<void(const std::string& member_id, const DiskUse& use,
                         const std::string& where)>;
  DiskWatch(Options options, ListMembers members, StopMember stop);
  ~DiskWatch();
  DiskWatch(const DiskWatch&) = delete;
  DiskWatch& operator=(const DiskWatch&) = delete;

  // Runs CheckOnce() every tick on a thread of its own until Stop().
  void Start();
  void Stop();
  // One round: measures the members that need it and stops those above
  // the bound.
  void CheckOnce();

  // How many walks were made, and how long they took in all; for the
  // agent's log and the tests.
  size_t walks() const;

 private:
  struct Known {
    uint64_t upper_bound = 0;  // Of what the member holds.
    uint64_t used_then = 0;    // Its file systems' total at that time.
    std::chrono::steady_clock::time_point measured{};
    std::chrono::steady_clock::time_point next_walk{};
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
  size_t walks_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

// "in DIR, DIR and its account's files in ROOT ROOT": where the scope
// looks, for the job's log.
std::string DescribeDiskUseScope(const DiskUseScope& scope);

}  // namespace gdt::agent

#endif  // GDT_AGENT_DISK_USE_H_
