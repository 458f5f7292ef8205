#ifndef GDT_COMMON_MEMBER_TOKEN_H_
#define GDT_COMMON_MEMBER_TOKEN_H_

// Member tokens (docs/security.md "Member tokens"): what an executor shows a
// host's agent to use one member there. The coordinator mints them under a
// key only it holds, so neither a host token nor a job can make one; each
// names the member (gang, epoch, job), the host and an expiry, so it cannot
// be replayed for another gang, another host or after its time.

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace gdt {

// What a member token grants.
struct MemberClaims {
  std::string gang_id;
  uint32_t epoch = 0;
  int64_t job_id = 0;
  std::string host_name;
  int64_t expires_unix_ms = 0;

  // "<gang_id>/<job_id>", the agent's name for the member.
  std::string member_id() const;
  bool operator==(const MemberClaims&) const = default;
};

// "gdt-mt2.<claims, hex>.<HMAC-SHA256 of the claims under `key`, hex>".
std::string MintMemberToken(std::string_view key, const MemberClaims& claims);

// The claims of `token` when `key` signed it.
// Errors: InvalidArgument "member token is malformed" (not one of ours);
// PermissionDenied "member token was not issued by this coordinator" (wrong
// signature: forged, altered, or signed under another key).
absl::StatusOr<MemberClaims> VerifyMemberToken(std::string_view key,
                                               std::string_view token);

}  // namespace gdt

#endif  // GDT_COMMON_MEMBER_TOKEN_H_
