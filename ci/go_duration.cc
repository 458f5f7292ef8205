#include "ci/go_duration.h"

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"

namespace gdt::ci {
namespace {

constexpr uint64_t kLimit = uint64_t{1} << 63;

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// The unit's length in nanoseconds, or 0 for an unknown unit.
uint64_t UnitNanos(std::string_view unit) {
  if (unit == "ns") return 1;
  if (unit == "us" || unit == "\xC2\xB5s" || unit == "\xCE\xBCs") return 1000;
  if (unit == "ms") return 1000000;
  if (unit == "s") return 1000000000;
  if (unit == "m") return 60 * uint64_t{1000000000};
  if (unit == "h") return 3600 * uint64_t{1000000000};
  return 0;
}

}  // namespace

absl::StatusOr<std::chrono::nanoseconds> ParseGoDuration(
    std::string_view text) {
  const auto invalid = [text](std::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid duration '", std::string(text), "': ", std::string(why)));
  };
  std::string_view s = text;
  bool negative = false;
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  if (s == "0") return std::chrono::nanoseconds(0);
  if (s.empty()) return invalid("no number");
  uint64_t total = 0;
  while (!s.empty()) {
    if (!(s[0] == '.' || IsDigit(s[0]))) return invalid("expected a number");
    // The whole part: an overflow is an error.
    uint64_t whole = 0;
    size_t i = 0;
    for (; i < s.size() && IsDigit(s[i]); ++i) {
      if (whole > kLimit / 10) return invalid("out of range");
      whole = whole * 10 + static_cast<uint64_t>(s[i] - '0');
      if (whole > kLimit) return invalid("out of range");
    }
    const bool pre = i > 0;
    s.remove_prefix(i);
    // The fraction: digits past what fits only lose precision.
    uint64_t fraction = 0;
    double scale = 1;
    bool post = false;
    if (!s.empty() && s[0] == '.') {
      s.remove_prefix(1);
      bool overflow = false;
      for (i = 0; i < s.size() && IsDigit(s[i]); ++i) {
        if (overflow) continue;
        if (fraction > (kLimit - 1) / 10) {
          overflow = true;
          continue;
        }
        const uint64_t next = fraction * 10 + static_cast<uint64_t>(s[i] - '0');
        if (next > kLimit) {
          overflow = true;
          continue;
        }
        fraction = next;
        scale *= 10;
      }
      post = i > 0;
      s.remove_prefix(i);
    }
    if (!pre && !post) return invalid("no digits");
    size_t unit_end = 0;
    while (unit_end < s.size() && s[unit_end] != '.' && !IsDigit(s[unit_end])) {
      ++unit_end;
    }
    if (unit_end == 0) return invalid("missing unit");
    const uint64_t unit = UnitNanos(s.substr(0, unit_end));
    if (unit == 0) {
      return invalid(absl::StrCat("unknown unit '",
                                  std::string(s.substr(0, unit_end)), "'"));
    }
    s.remove_prefix(unit_end);
    if (whole > kLimit / unit) return invalid("out of range");
    whole *= unit;
    if (fraction > 0) {
      whole += static_cast<uint64_t>(static_cast<double>(fraction) *
                                     (static_cast<double>(unit) / scale));
      if (whole > kLimit) return invalid("out of range");
    }
    total += whole;
    if (total > kLimit) return invalid("out of range");
  }
  if (negative) {
    // -2^63 is the one value whose magnitude does not fit the positive range.
    return std::chrono::nanoseconds(
        total == kLimit ? INT64_MIN : -static_cast<int64_t>(total));
  }
  if (total > kLimit - 1) return invalid("out of range");
  return std::chrono::nanoseconds(static_cast<int64_t>(total));
}

}  // namespace gdt::ci
