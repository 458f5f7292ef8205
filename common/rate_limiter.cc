#include "common/rate_limiter.h"

#include <algorithm>
#include <chrono>

namespace gdt {

KeyedRateLimiter::KeyedRateLimiter(const Clock& clock, Options options)
    : clock_(clock), options_(options) {}

double KeyedRateLimiter::Refilled(const Bucket& bucket,
                                  Clock::TimePoint now) const {
  const double seconds = std::chrono::duration<double>(now - bucket.at).count();
  return std::min(options_.burst,
                  bucket.tokens + std::max(0.0, seconds) * options_.per_second);
}

void KeyedRateLimiter::ForgetLocked(Clock::TimePoint now) {
  for (auto it = buckets_.begin(); it != buckets_.end();) {
    if (Refilled(it->second, now) >= options_.burst) {
      it = buckets_.erase(it);
    } else {
      ++it;
    }
  }
  while (buckets_.size() >= options_.max_keys && !buckets_.empty()) {
    auto fullest = std::max_element(
        buckets_.begin(), buckets_.end(), [&](const auto& a, const auto& b) {
          return Refilled(a.second, now) < Refilled(b.second, now);
        });
    buckets_.erase(fullest);
  }
}

bool KeyedRateLimiter::TryTake(const std::string& key,
                               std::chrono::milliseconds* wait, double cost) {
  if (options_.per_second <= 0) return true;
  cost = std::min(cost, options_.burst);
  const Clock::TimePoint now = clock_.Now();
  MutexLock lock(mu_);
  auto it = buckets_.find(key);
  if (it == buckets_.end()) {
    if (buckets_.size() >= options_.max_keys) ForgetLocked(now);
    it = buckets_.emplace(key, Bucket{options_.burst, now}).first;
  }
  Bucket& bucket = it->second;
  bucket.tokens = Refilled(bucket, now);
  bucket.at = now;
  if (bucket.tokens < cost) {
    if (wait != nullptr) {
      *wait = std::chrono::ceil<std::chrono::milliseconds>(
          std::chrono::duration<double>((cost - bucket.tokens) /
                                        options_.per_second));
    }
    return false;
  }
  bucket.tokens -= cost;
  return true;
}

bool KeyedRateLimiter::HasToken(const std::string& key,
                                std::chrono::milliseconds* wait) {
  if (options_.per_second <= 0) return true;
  const Clock::TimePoint now = clock_.Now();
  MutexLock lock(mu_);
  auto it = buckets_.find(key);
  if (it == buckets_.end()) return options_.burst >= 1;
  const double tokens = Refilled(it->second, now);
  if (tokens >= 1) return true;
  if (wait != nullptr) {
    *wait = std::chrono::ceil<std::chrono::milliseconds>(
        std::chrono::duration<double>((1 - tokens) / options_.per_second));
  }
  return false;
}

}  // namespace gdt
