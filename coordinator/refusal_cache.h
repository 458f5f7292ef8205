#ifndef GDT_COORDINATOR_REFUSAL_CACHE_H_
#define GDT_COORDINATOR_REFUSAL_CACHE_H_

#include <chrono>
#include <cstddef>
#include <map>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "common/clock.h"

namespace gdt::coordinator {

// Refused member credentials by the SHA-256 of the credential (never the
// credential itself), each remembered for `ttl`: a flood of joins with one
// forged token costs one check, not one per join. At most `max_entries`
// (expired ones go first; when all are live, all go). Not thread-safe: the
// owner guards it.
class RefusalCache {
 public:
  RefusalCache(std::chrono::seconds ttl, size_t max_entries)
      : ttl_(ttl), max_entries_(max_entries) {}

  // The cached refusal of `key`, if one is live at `now`.
  std::optional<absl::Status> Find(const std::string& key,
                                   Clock::TimePoint now) {
    auto it = refused_.find(key);
    if (it == refused_.end()) return std::nullopt;
    if (now < it->second.expires) return it->second.status;
    refused_.erase(it);
    return std::nullopt;
  }

  void Add(const std::string& key, absl::Status status, Clock::TimePoint now) {
    if (max_entries_ == 0) return;
    if (refused_.size() >= max_entries_) {
      for (auto it = refused_.begin(); it != refused_.end();) {
        it = it->second.expires <= now ? refused_.erase(it) : std::next(it);
      }
      if (refused_.size() >= max_entries_) refused_.clear();
    }
    refused_[key] = Refused{std::move(status), now + ttl_};
  }

 private:
  struct Refused {
    absl::Status status;
    Clock::TimePoint expires;
  };
  const std::chrono::seconds ttl_;
  const size_t max_entries_;
  std::map<std::string, Refused> refused_;
};

}  // namespace gdt::coordinator

#endif  // GDT_COORDINATOR_REFUSAL_CACHE_H_
