#include "common/rate_limiter.h"

#include <chrono>
#include <string>

#include "common/fake_clock.h"
#include "gtest/gtest.h"

namespace gdt {
namespace {

using namespace std::chrono_literals;

TEST(KeyedRateLimiterTest, EachKeyHasItsBurstThenItsRate) {
  FakeClock clock;
  KeyedRateLimiter limiter(clock, {.per_second = 2, .burst = 3});
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(limiter.TryTake("project-5")) << i;
  EXPECT_FALSE(limiter.TryTake("project-5"));
  // Another key is not slowed by the first.
  EXPECT_TRUE(limiter.TryTake("project-6"));
  clock.Advance(499ms);
  EXPECT_FALSE(limiter.TryTake("project-5"));
  clock.Advance(1ms);
  EXPECT_TRUE(limiter.TryTake("project-5"));
  EXPECT_FALSE(limiter.TryTake("project-5"));
  // Refills up to the burst, no further.
  clock.Advance(1h);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(limiter.TryTake("project-5")) << i;
  EXPECT_FALSE(limiter.TryTake("project-5"));
}

TEST(KeyedRateLimiterTest, ARefusalSaysHowLongUntilTheNextToken) {
  FakeClock clock;
  KeyedRateLimiter limiter(clock, {.per_second = 4, .burst = 1});
  EXPECT_TRUE(limiter.TryTake("project-5"));
  std::chrono::milliseconds wait{};
  EXPECT_FALSE(limiter.TryTake("project-5", &wait));
  EXPECT_EQ(wait, 250ms);
  clock.Advance(125ms);
  EXPECT_FALSE(limiter.TryTake("project-5", &wait));
  EXPECT_EQ(wait, 125ms);
  clock.Advance(125ms);
  EXPECT_TRUE(limiter.TryTake("project-5", &wait));
}

TEST(KeyedRateLimiterTest, ACallMayCostMoreOrLessThanOneToken) {
  FakeClock clock;
  KeyedRateLimiter limiter(clock, {.per_second = 2, .burst = 4});
  EXPECT_TRUE(limiter.TryTake("gang", nullptr, 3));
  std::chrono::milliseconds wait{};
  EXPECT_FALSE(limiter.TryTake("gang", &wait, 3));
  EXPECT_EQ(wait, 1000ms);  // 1 held, 2 more at 2 a second.
  EXPECT_TRUE(limiter.TryTake("gang", nullptr, 0.5));
  EXPECT_TRUE(limiter.TryTake("gang", nullptr, 0.5));
  EXPECT_FALSE(limiter.TryTake("gang", nullptr, 0.5));
  // A cost above the burst counts as the burst: it waits, never for ever.
  clock.Advance(1h);
  EXPECT_TRUE(limiter.TryTake("gang", nullptr, 100));
  EXPECT_FALSE(limiter.TryTake("gang", &wait, 100));
  EXPECT_EQ(wait, 2000ms);
}

TEST(KeyedRateLimiterTest, HasTokenLooksWithoutTaking) {
  FakeClock clock;
  KeyedRateLimiter limiter(clock, {.per_second = 2, .burst = 2});
  EXPECT_TRUE(limiter.HasToken("caller"));
  EXPECT_TRUE(limiter.HasToken("caller"));
  EXPECT_TRUE(limiter.TryTake("caller"));
  EXPECT_TRUE(limiter.HasToken("caller"));
  EXPECT_TRUE(limiter.TryTake("caller"));
  std::chrono::milliseconds wait{};
  EXPECT_FALSE(limiter.HasToken("caller", &wait));
  EXPECT_EQ(wait, 500ms);
  clock.Advance(500ms);
  EXPECT_TRUE(limiter.HasToken("caller"));
}

TEST(KeyedRateLimiterTest, ZeroRateMeansNoLimit) {
  FakeClock clock;
  KeyedRateLimiter limiter(clock, {.per_second = 0, .burst = 1});
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(limiter.TryTake("k"));
}

TEST(KeyedRateLimiterTest, ManyKeysStayBoundedAndBusyKeysStayLimited) {
  FakeClock clock;
  KeyedRateLimiter limiter(clock,
                           {.per_second = 1, .burst = 2, .max_keys = 100});
  EXPECT_TRUE(limiter.TryTake("busy"));
  EXPECT_TRUE(limiter.TryTake("busy"));
  // Thousands of one-off keys (each took one of its two tokens).
  for (int i = 0; i < 5000; ++i) {
    EXPECT_TRUE(limiter.TryTake("key-" + std::to_string(i)));
  }
  // The empty bucket is the last to be forgotten.
  EXPECT_FALSE(limiter.TryTake("busy"));
}

}  // namespace
}  // namespace gdt
