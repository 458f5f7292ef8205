#include "common/backoff.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gdt {
namespace {

using std::chrono::milliseconds;
using ::testing::ElementsAre;

std::vector<int64_t> Delays(Backoff& backoff, int n) {
  std::vector<int64_t> delays;
  for (int i = 0; i < n; ++i) delays.push_back(backoff.Next().count());
  return delays;
}

TEST(BackoffTest, WithoutJitterDoublesUpToTheCap) {
  Backoff backoff(
      {milliseconds(200), milliseconds(2000), Backoff::Jitter::kNone});

  EXPECT_THAT(Delays(backoff, 6), ElementsAre(200, 400, 800, 1600, 2000, 2000));
  backoff.Reset();
  EXPECT_EQ(backoff.Next(), milliseconds(200));
}

TEST(BackoffTest, FullJitterStaysUnderTheExponentialStep) {
  Backoff backoff(
      {milliseconds(100), milliseconds(1000), Backoff::Jitter::kFull},
      /*seed=*/7);
  const std::vector<int64_t> steps = {100, 200, 400, 800, 1000, 1000, 1000};

  const std::vector<int64_t> delays = Delays(backoff, steps.size());

  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_GE(delays[i], 0) << i;
    EXPECT_LE(delays[i], steps[i]) << i;
  }
}

TEST(BackoffTest, DecorrelatedJitterStaysBetweenInitialAndCap) {
  Backoff backoff(
      {milliseconds(200), milliseconds(5000), Backoff::Jitter::kDecorrelated},
      /*seed=*/42);

  const std::vector<int64_t> delays = Delays(backoff, 200);

  EXPECT_EQ(delays[0], 200);
  for (size_t i = 1; i < delays.size(); ++i) {
    EXPECT_GE(delays[i], 200) << i;
    EXPECT_LE(delays[i], std::min<int64_t>(5000, delays[i - 1] * 3)) << i;
  }
  // It reaches the cap rather than hovering near the start.
  EXPECT_EQ(*std::max_element(delays.begin(), delays.end()), 5000);
}

TEST(BackoffTest, TheSameSeedGivesTheSameDelays) {
  const Backoff::Options options{milliseconds(50), milliseconds(3000),
                                 Backoff::Jitter::kDecorrelated};
  Backoff a(options, 1234);
  Backoff b(options, 1234);
  Backoff c(options, 99);

  const std::vector<int64_t> delays = Delays(a, 20);

  EXPECT_EQ(delays, Delays(b, 20));
  EXPECT_NE(delays, Delays(c, 20));
}

TEST(BackoffTest, ClientsWithDifferentSeedsSpreadOut) {
  const Backoff::Options options{milliseconds(200), milliseconds(2000),
                                 Backoff::Jitter::kFull};
  std::vector<int64_t> third_delays;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    Backoff backoff(options, seed);
    third_delays.push_back(Delays(backoff, 3)[2]);
  }
  std::sort(third_delays.begin(), third_delays.end());

  EXPECT_LT(third_delays.front() + 100, third_delays.back());
}

}  // namespace
}  // namespace gdt
