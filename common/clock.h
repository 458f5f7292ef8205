#ifndef GDT_COMMON_CLOCK_H_
#define GDT_COMMON_CLOCK_H_

#include <chrono>
#include <cstdint>

namespace gdt {

// Source of time. Code that waits or expires things takes a Clock& instead of
// calling std::chrono directly, so tests can drive time. Thread-safe.
class Clock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  virtual ~Clock() = default;
  // Monotonic time, for deadlines and intervals.
  virtual TimePoint Now() const = 0;
  // Wall-clock milliseconds since the Unix epoch, for records and display.
  virtual int64_t UnixMillis() const = 0;
};

// The real clock.
class SystemClock final : public Clock {
 public:
  TimePoint Now() const override { return std::chrono::steady_clock::now(); }
  int64_t UnixMillis() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
};

// A gRPC call's deadline `timeout` from now (gRPC takes the wall clock).
inline std::chrono::system_clock::time_point DeadlineIn(
    std::chrono::milliseconds timeout) {
  return std::chrono::system_clock::now() + timeout;
}

}  // namespace gdt

#endif  // GDT_COMMON_CLOCK_H_
