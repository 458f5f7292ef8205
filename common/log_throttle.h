#ifndef GDT_COMMON_LOG_THROTTLE_H_
#define GDT_COMMON_LOG_THROTTLE_H_

#include <chrono>
#include <cstdint>
#include <optional>

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

}  // namespace gdt

#endif  // GDT_COMMON_LOG_THROTTLE_H_
