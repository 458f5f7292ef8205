#include "agent/isolation.h"

#include <grp.h>
#include <pwd.h>

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace gdt::agent {

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

}  // namespace gdt::agent
