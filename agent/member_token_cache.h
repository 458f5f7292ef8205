#ifndef GDT_AGENT_MEMBER_TOKEN_CACHE_H_
#define GDT_AGENT_MEMBER_TOKEN_CACHE_H_

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "common/member_token.h"
#include "common/mutex.h"
#include "common/rate_limiter.h"

namespace gdt::agent {

// The agent's view of member tokens (docs/security.md "Member tokens"). Only
// the coordinator can tell whether a token is still good (its gang may have
// ended, its host token been revoked), so every token is checked there; a
// good answer is kept for `ttl` so that a job's many stages do not each wait
// for the coordinator. A member's answers are forgotten when it is torn down,
// so a token is never accepted from the cache after its member's teardown.
//
// Refusals are remembered too, so that a job on the host repeating a forged
// or stale token cannot make the agent ask the coordinator for each call:
// the coordinator's refusal of a token (PermissionDenied, InvalidArgument:
// an answer about that token) is kept for kRefusalTtl, by the token itself,
// so a refusal never touches another token (a member admitted later has a
// token of its own); an error reaching the coordinator is not kept. And
// each caller (CallerOf) whose tokens the coordinator refused kRefusalBurst
// times gets its tokens checked at most once every kRefusalInterval: beyond
// that its new tokens are refused (ResourceExhausted) without asking. Tokens
// found good before are always asked about, so a member's own calls are
// never slowed by another caller's refusals.
//
// Thread-safe.
class MemberTokenCache {
 public:
  // Asks the coordinator; the claims of a good token, or why it is not.
  using Ask = std::function<absl::StatusOr<MemberClaims>(const std::string&)>;

  static constexpr std::chrono::seconds kRefusalTtl{10};
  static constexpr int kRefusalBurst = 10;
  static constexpr std::chrono::seconds kRefusalInterval{2};

  MemberTokenCache(Ask ask, std::chrono::steady_clock::duration ttl);

  // What `token` grants, from the cache or the coordinator. `caller` names
  // who presents it (CallerOf). Errors: those of `ask`; ResourceExhausted
  // when `caller`'s refused tokens are over the limit.
  absl::StatusOr<MemberClaims> Check(const std::string& token,
                                     const std::string& caller = "");

  // Drops every cached answer for member `member_id` ("<gang>/<job>").
  void Forget(const std::string& member_id);

 private:
  struct Entry {
    MemberClaims claims;
    std::chrono::steady_clock::time_point until;
  };
  struct Refusal {
    absl::Status status;
    std::chrono::steady_clock::time_point until;
  };
  // Bounds memory when many tokens are checked within one ttl.
  static constexpr size_t kMaxEntries = 4096;

  const Ask ask_;
  const std::chrono::steady_clock::duration ttl_;
  SystemClock clock_;
  KeyedRateLimiter refused_callers_;
  Mutex mu_;
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);     // By token.
  std::map<std::string, Refusal> refusals_ ABSL_GUARDED_BY(mu_);  // By token.
  // Tokens the coordinator found good, with their member ids, until the
  // member's teardown.
  std::map<std::string, std::string> known_good_ ABSL_GUARDED_BY(mu_);
};

// Who made a call, from its gRPC peer ("ipv4:127.0.0.1:41234"): "uid N"
// when the peer is a TCP connection from this host's network namespace
// (the uid that made the caller's socket: TcpSocketOwnerAt), else
// "address A" (its address without the port), or the peer as it is.
std::string CallerOf(std::string_view grpc_peer);

}  // namespace gdt::agent

#endif  // GDT_AGENT_MEMBER_TOKEN_CACHE_H_
