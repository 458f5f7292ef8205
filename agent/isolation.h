// What keeps one member's stages apart from the agent and from other
// members on the same host: an unprivileged account to run them as (here),
// and a cgroup (v2) that holds every process they start (common/cgroup.h),
// so that teardown can end all of them, including those that left the
// stage's process group.
#ifndef GDT_AGENT_ISOLATION_H_
#define GDT_AGENT_ISOLATION_H_

#include <sys/types.h>

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

}  // namespace gdt::agent

#endif  // GDT_AGENT_ISOLATION_H_
