#ifndef GDT_COMMON_EXIT_CODE_H_
#define GDT_COMMON_EXIT_CODE_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"

namespace gdt {

// The exit codes gdt's command lines share. A tool documents which of them
// it uses and what each means for it; 0 and 2 mean the same everywhere.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;      // The thing asked for failed.
inline constexpr int kExitUsage = 2;        // Bad flags, input or config.
inline constexpr int kExitUnavailable = 3;  // A service could not be reached.
inline constexpr int kExitRefused = 4;      // A service refused the request.

// The codes a gang member's job ends with (BUILD_EXIT_CODE_FILE) when gdt,
// not its own script, stopped it; docs/environment.md lists them. 75: it was
// stopped because a peer of its gang failed. 76: its gang was preempted
// (stopped after its checkpoint notice to make room for a higher-priority
// gang); a `retry:` that brings back 76 resumes it from its checkpoint.
inline constexpr int kPeerFailureJobExitCode = 75;
inline constexpr int kPreemptedJobExitCode = 76;

// The retries a member whose job's `retry:` brings back
// kPreemptedJobExitCode `declared` times has left in `epoch` (1-based) of its
// gang: each earlier epoch was an attempt of the job (the first, or a retry),
// so it used one. 0 when the job does not say (nullopt): not knowing, gdt
// assumes a preemption would end it for good.
inline int64_t PreemptRetriesLeft(std::optional<int64_t> declared,
                                  uint32_t epoch) {
  if (!declared.has_value()) return 0;
  const int64_t used = epoch > 0 ? static_cast<int64_t>(epoch) - 1 : 0;
  return *declared > used ? *declared - used : 0;
}

// Marks `status` with the exit code it should end a command with, for the
// cases its code alone does not say it (an unknown host is a refusal, an
// unknown gang a failure). An OK status is returned unchanged.
absl::Status WithExitCode(absl::Status status, int exit_code);

// The one mapping from a command's result to its exit code: the code set by
// WithExitCode, else 0 for OK, kExitUsage for InvalidArgument,
// kExitUnavailable for Unavailable and kExitFailure for everything else.
int ExitCodeFor(const absl::Status& status);

}  // namespace gdt

#endif  // GDT_COMMON_EXIT_CODE_H_
