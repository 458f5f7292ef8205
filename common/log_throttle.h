#ifndef GDT_COMMON_LOG_THROTTLE_H_
#define GDT_COMMON_LOG_THROTTLE_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"

namespace gdt {

// Decides which occurrences of a repeating condition (a reconnect attempt
// every 2 s during an outage) get a log line: the first, then at most one
// per `interval`, each saying how many occurrences it stands for. Keeps job
// logs readable through long outages without hiding that they went on.
//
// Not thread-safe; one per condition.
class LogThrottle {
 public:
  explicit LogThrottle(std::chrono::steady_clock::duration interval)
      : interval_(interval) {}

  // Counts one occurrence at `now`. Returns nullopt when it is not to be
  // logged, else how many occurrences the line stands for: itself plus the
  // ones not logged since the previous line.
  std::optional<uint64_t> Occur(std::chrono::steady_clock::time_point now) {
    ++pending_;
    if (last_.has_value() && now - *last_ < interval_) return std::nullopt;
    last_ = now;
    const uint64_t count = pending_;
    pending_ = 0;
    return count;
  }

 private:
  const std::chrono::steady_clock::duration interval_;
  std::optional<std::chrono::steady_clock::time_point> last_;
  uint64_t pending_ = 0;
};

// Which refusals of callers get a log line. Refusals answer anyone who can
// reach a daemon (every job on an agent's host, anyone on the coordinator's
// network), and one who repeats them thousands of times a second must not
// flood the daemon's log, nor use up the journal's rate limit, which would
// drop the daemon's other lines: per event, the first refusal is logged,
// then at most one every kInterval, saying how many it stands for.
// Thread-safe.
class RefusalLog {
 public:
  static constexpr std::chrono::seconds kInterval{10};
  // Counts one refusal of `event`: the count the line to log stands for
  // (itself and those not logged since the last line), or nullopt.
  std::optional<uint64_t> Occur(const std::string& event) {
    MutexLock lock(mu_);
    auto it = throttles_.find(event);
    if (it == throttles_.end()) {
      it = throttles_.emplace(event, LogThrottle(kInterval)).first;
    }
    return it->second.Occur(std::chrono::steady_clock::now());
  }

 private:
  Mutex mu_;
  std::map<std::string, LogThrottle> throttles_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gdt

#endif  // GDT_COMMON_LOG_THROTTLE_H_
