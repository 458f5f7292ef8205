#include "common/exit_code.h"

#include <charconv>
#include <string>
#include <utility>

#include "absl/strings/cord.h"

namespace gdt {
namespace {

// The payload type URL of the exit code; never leaves the process.
constexpr char kExitCodePayload[] = "gdt.exit_code";

}  // namespace

absl::Status WithExitCode(absl::Status status, int exit_code) {
  if (status.ok()) return status;
  status.SetPayload(kExitCodePayload, absl::Cord(std::to_string(exit_code)));
  return status;
}

int ExitCodeFor(const absl::Status& status) {
  if (const auto payload = status.GetPayload(kExitCodePayload)) {
    const std::string text(*payload);
    int code = 0;
    const auto [end, error] =
        std::from_chars(text.data(), text.data() + text.size(), code);
    if (error == std::errc() && end == text.data() + text.size()) return code;
  }
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kInvalidArgument:
      return kExitUsage;
    case absl::StatusCode::kUnavailable:
      return kExitUnavailable;
    default:
      return kExitFailure;
  }
}

}  // namespace gdt
