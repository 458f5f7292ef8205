#include "common/retry_after.h"

#include <algorithm>
#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"

namespace gdt {
namespace {

constexpr char kPayloadType[] = "gdt/retry-after-ms";

}  // namespace

absl::Status WithRetryAfter(absl::Status status,
                            std::chrono::milliseconds after) {
  if (status.ok()) return status;
  const int64_t ms = std::max<int64_t>(1, after.count());
  status.SetPayload(kPayloadType, absl::Cord(std::to_string(ms)));
  return status;
}

std::optional<std::chrono::milliseconds> RetryAfter(
    const absl::Status& status) {
  if (status.ok()) return std::nullopt;
  const auto payload = status.GetPayload(kPayloadType);
  if (!payload.has_value()) return std::nullopt;
  int64_t ms = 0;
  if (!absl::SimpleAtoi(std::string(*payload), &ms) || ms < 1) {
    return std::nullopt;
  }
  return std::chrono::milliseconds(ms);
}

}  // namespace gdt
