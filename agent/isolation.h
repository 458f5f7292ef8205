// What keeps one member's stages apart from the agent and from other
// members on the same host: an unprivileged account to run them as, and a
// cgroup (v2) that holds every process they start, so that teardown can end
// all of them, including those that left the stage's process group.
#ifndef GDT_AGENT_ISOLATION_H_
#define GDT_AGENT_ISOLATION_H_

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

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

// The cgroup v2 directory this process is in, from /proc/self/cgroup and
// the cgroup2 mount in /proc/self/mountinfo. Errors: NotFound when there is
// no cgroup v2 hierarchy.
absl::StatusOr<std::string> OwnCgroupDir();

// One cgroup per member under a parent directory the agent owns.
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

  // The member cgroups present (e.g. left by an agent that died).
  std::vector<std::string> Children() const;

  // Removes the parent when it is empty; for shutdown.
  void RemoveParent() const;

 private:
  explicit CgroupTree(std::string parent) : parent_(std::move(parent)) {}

  const std::string parent_;
};

}  // namespace gdt::agent

#endif  // GDT_AGENT_ISOLATION_H_
