#include "common/retry_after.h"

#include <chrono>

#include "gtest/gtest.h"

namespace gdt {
namespace {

using namespace std::chrono_literals;

TEST(RetryAfterTest, AHintKeepsCodeAndMessage) {
  const absl::Status refused = WithRetryAfter(
      absl::ResourceExhaustedError("project 5 joins too fast"), 1500ms);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.message(), "project 5 joins too fast");
  EXPECT_EQ(RetryAfter(refused), 1500ms);
}

TEST(RetryAfterTest, RefusalsWithoutAHintAreFinal) {
  EXPECT_EQ(RetryAfter(absl::ResourceExhaustedError("message too large")),
            std::nullopt);
  EXPECT_EQ(RetryAfter(absl::OkStatus()), std::nullopt);
  EXPECT_TRUE(WithRetryAfter(absl::OkStatus(), 1s).ok());
  EXPECT_EQ(RetryAfter(WithRetryAfter(absl::OkStatus(), 1s)), std::nullopt);
}

TEST(RetryAfterTest, AHintIsAtLeastOneMillisecond) {
  EXPECT_EQ(RetryAfter(WithRetryAfter(absl::UnavailableError("busy"), 0ms)),
            1ms);
}

}  // namespace
}  // namespace gdt
