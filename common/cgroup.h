// cgroup v2 directories a process makes for the processes it starts, so
// that it can end all of them at once, including those that left their
// process group (setsid, daemons).
#ifndef GDT_COMMON_CGROUP_H_
#define GDT_COMMON_CGROUP_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gdt {

// The cgroup v2 directory this process is in, from /proc/self/cgroup and
// the cgroup2 mount in /proc/self/mountinfo. Errors: NotFound when there is
// no cgroup v2 hierarchy.
absl::StatusOr<std::string> OwnCgroupDir();

// One child cgroup per name (e.g. per gang member) under a parent
// directory its user owns.
// Thread-safe: every call works on its own directory.
class CgroupTree {
 public:
  // Creates `parent` (with its parents) and checks that a child cgroup can
  // be made in it and a process moved into it. Errors: FailedPrecondition
  // naming the directory when cgroup v2 is not writable there.
  static absl::StatusOr<std::unique_ptr<CgroupTree>> Open(
      const std::string& parent);

  const std::string& parent() const { return parent_; }

  // From now on every cgroup Create() makes (or finds) gets `max` in its
  // pids.max: how many processes and threads it may hold at once. Makes
  // the pids controller available below the parent first (`+pids` in the
  // cgroup.subtree_control of the parent and of each ancestor below the
  // nearest one that has it; a threaded controller, so a cgroup holding
  // processes, like the agent's own, may pass it on). Call before sharing
  // the tree. Errors: FailedPrecondition naming why (the controller is
  // bound to a cgroup v1 hierarchy, or a file is not writable); the tree
  // then sets no limit.
  absl::Status LimitPids(uint64_t max);
  uint64_t pids_max() const { return pids_max_; }

  // The same for memory: every cgroup Create() makes gets `max` bytes in
  // memory.max, 0 in memory.swap.max (where the kernel has it: the limit is
  // not dodged by swapping) and 1 in memory.oom.group (an out-of-memory
  // kill takes all its processes, not one worker of many). Makes the memory
  // controller available below the parent first. Errors: FailedPrecondition
  // naming why; the tree then sets no memory limit.
  absl::Status LimitMemory(uint64_t max);
  uint64_t memory_max() const { return memory_max_; }

  // The cgroup of `name` (one path component), created when missing, with
  // the pids limit when one is set. Returns its directory. Errors: Internal
  // naming the directory or the file that could not be written.
  absl::StatusOr<std::string> Create(const std::string& name) const;

  // The directory `name` would have.
  std::string PathOf(const std::string& name) const;

  // Kills every process in the cgroup of `name` (cgroup.kill, or SIGKILL to
  // each pid in cgroup.procs where the kernel has no cgroup.kill), waits
  // until it is empty and removes it. Returns how many processes were in
  // it. Fine when it does not exist. Errors: DeadlineExceeded when it is
  // not empty by `deadline`.
  absl::StatusOr<size_t> Destroy(
      const std::string& name,
      std::chrono::steady_clock::time_point deadline) const;

  // The child cgroups present (e.g. left by a process that died).
  std::vector<std::string> Children() const;

  // Removes the parent when it is empty; for shutdown.
  void RemoveParent() const;

 private:
  explicit CgroupTree(std::string parent) : parent_(std::move(parent)) {}

  const std::string parent_;
  // Makes `controller` available in the parent (see LimitPids).
  absl::Status EnableController(const std::string& controller) const;

  uint64_t pids_max_ = 0;    // 0 = no limit.
  uint64_t memory_max_ = 0;  // 0 = no limit.
};

}  // namespace gdt

#endif  // GDT_COMMON_CGROUP_H_
