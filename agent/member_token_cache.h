#ifndef GDT_AGENT_MEMBER_TOKEN_CACHE_H_
#define GDT_AGENT_MEMBER_TOKEN_CACHE_H_

#include <chrono>
#include <functional>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "common/member_token.h"
#include "common/mutex.h"

namespace gdt::agent {

// The agent's view of member tokens (docs/security.md "Member tokens"). Only
// the coordinator can tell whether a token is still good (its gang may have
// ended, its host token been revoked), so every token is checked there; a
// good answer is kept for `ttl` so that a job's many stages do not each wait
// for the coordinator. A member's answers are forgotten when it is torn down,
// so a token is never accepted from the cache after its member's teardown.
//
// Thread-safe.
class MemberTokenCache {
 public:
  // Asks the coordinator; the claims of a good token, or why it is not.
  using Ask = std::function<absl::StatusOr<MemberClaims>(const std::string&)>;

  MemberTokenCache(Ask ask, std::chrono::steady_clock::duration ttl)
      : ask_(std::move(ask)), ttl_(ttl) {}

  // What `token` grants, from the cache or the coordinator. Errors: those of
  // `ask` (refusals are not cached).
  absl::StatusOr<MemberClaims> Check(const std::string& token);

  // Drops every cached answer for member `member_id` ("<gang>/<job>").
  void Forget(const std::string& member_id);

 private:
  struct Entry {
    MemberClaims claims;
    std::chrono::steady_clock::time_point until;
  };
  // Bounds memory when many tokens are checked within one ttl.
  static constexpr size_t kMaxEntries = 4096;

  const Ask ask_;
  const std::chrono::steady_clock::duration ttl_;
  Mutex mu_;
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);  // By token.
};

}  // namespace gdt::agent

#endif  // GDT_AGENT_MEMBER_TOKEN_CACHE_H_
