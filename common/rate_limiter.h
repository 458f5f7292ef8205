#ifndef GDT_COMMON_RATE_LIMITER_H_
#define GDT_COMMON_RATE_LIMITER_H_

#include <chrono>
#include <cstddef>
#include <string>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "common/clock.h"
#include "common/mutex.h"

namespace gdt {

// Token buckets by key (a project, a client): each key may take `burst`
// at once and then `per_second` a second. A key whose bucket is full again
// is forgotten, and at most `max_keys` are kept (when more are busy at
// once, the fullest are forgotten first, which errs towards letting calls
// through). Thread-safe. Keeps a reference to `clock`.
class KeyedRateLimiter {
 public:
  struct Options {
    double per_second = 0;  // 0: no limit, TryTake always succeeds.
    double burst = 1;
    size_t max_keys = 10000;
  };
  KeyedRateLimiter(const Clock& clock, Options options);

  // Takes `cost` tokens (one by default; more than the burst counts as
  // the burst) from `key`'s bucket; false (taking nothing) when it holds
  // fewer. Then, when `wait` is not null, sets it to how long until the
  // bucket holds them again, rounded up to the millisecond.
  bool TryTake(const std::string& key,
               std::chrono::milliseconds* wait = nullptr, double cost = 1);

  // Whether `key`'s bucket holds a whole token now, taking nothing (for a
  // bucket that pays only for some outcomes: look first, TryTake() after).
  // When it does not and `wait` is not null, sets it as TryTake() does.
  bool HasToken(const std::string& key,
                std::chrono::milliseconds* wait = nullptr);

  const Options& options() const { return options_; }

 private:
  struct Bucket {
    double tokens = 0;
    Clock::TimePoint at{};
  };
  // `bucket`'s tokens at `now`, capped at the burst.
  double Refilled(const Bucket& bucket, Clock::TimePoint now) const;
  void ForgetLocked(Clock::TimePoint now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Clock& clock_;
  const Options options_;
  Mutex mu_;
  std::unordered_map<std::string, Bucket> buckets_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gdt

#endif  // GDT_COMMON_RATE_LIMITER_H_
