// cgroup v2 directories a process makes for the processes it starts, so
// that it can end all of them at once, including those that left their
// process group (setsid, daemons).
#ifndef GDT_COMMON_CGROUP_H_
#define GDT_COMMON_CGROUP_H_

#include <chrono>
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

  // The cgroup of `name` (one path component), created when missing.
  // Returns its directory. Errors: Internal naming the directory.
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
};

}  // namespace gdt

#endif  // GDT_COMMON_CGROUP_H_
