#include "agent/member_token_cache.h"

#include <utility>

namespace gdt::agent {

absl::StatusOr<MemberClaims> MemberTokenCache::Check(const std::string& token) {
  const auto now = std::chrono::steady_clock::now();
  {
    MutexLock lock(mu_);
    auto it = entries_.find(token);
    if (it != entries_.end()) {
      if (now < it->second.until) return it->second.claims;
      entries_.erase(it);
    }
  }
  // Without the lock: the coordinator may take a while.
  absl::StatusOr<MemberClaims> claims = ask_(token);
  if (!claims.ok()) return claims.status();
  MutexLock lock(mu_);
  if (entries_.size() >= kMaxEntries) {
    std::erase_if(entries_,
                  [&](const auto& entry) { return entry.second.until <= now; });
    if (entries_.size() >= kMaxEntries) entries_.clear();
  }
  entries_[token] = Entry{*claims, now + ttl_};
  return claims;
}

void MemberTokenCache::Forget(const std::string& member_id) {
  MutexLock lock(mu_);
  std::erase_if(entries_, [&](const auto& entry) {
    return entry.second.claims.member_id() == member_id;
  });
}

}  // namespace gdt::agent
