#ifndef GDT_COMMON_FAKE_CLOCK_H_
#define GDT_COMMON_FAKE_CLOCK_H_

#include <atomic>
#include <chrono>

#include "common/clock.h"

namespace gdt {

// A Clock that only moves when a test calls Advance(). Thread-safe.
class FakeClock final : public Clock {
 public:
  TimePoint Now() const override {
    return TimePoint(std::chrono::nanoseconds(nanos_.load()));
  }
  int64_t UnixMillis() const override {
    return kEpochMillis + nanos_.load() / 1000000;
  }
  void Advance(std::chrono::nanoseconds delta) { nanos_ += delta.count(); }

 private:
  static constexpr int64_t kEpochMillis = 1767225600000;  // 2026-01-01.
  std::atomic<int64_t> nanos_{1000000000};
};

}  // namespace gdt

#endif  // GDT_COMMON_FAKE_CLOCK_H_
