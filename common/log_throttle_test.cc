#include "common/log_throttle.h"

#include <chrono>

#include "gtest/gtest.h"

namespace gdt {
namespace {

using namespace std::chrono_literals;

TEST(LogThrottleTest, LogsTheFirstThenOnePerIntervalWithACount) {
  LogThrottle throttle(30s);
  const auto start = std::chrono::steady_clock::time_point() + 1h;
  // A reconnect every 2 s for 150 s.
  int lines = 0;
  uint64_t covered = 0;
  for (int i = 0; i < 75; ++i) {
    if (std::optional<uint64_t> count = throttle.Occur(start + i * 2s)) {
      ++lines;
      covered += *count;
      if (i == 0) EXPECT_EQ(*count, 1u);
    }
  }
  // 0, 30, 60, 90, 120 s: five lines instead of 75.
  EXPECT_EQ(lines, 5);
  // The last 14 attempts (122..148 s) wait for the next line.
  EXPECT_EQ(covered, 61u);
  std::optional<uint64_t> next = throttle.Occur(start + 150s);
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(*next, 15u);
}

}  // namespace
}  // namespace gdt
