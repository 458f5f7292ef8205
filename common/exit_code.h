#ifndef GDT_COMMON_EXIT_CODE_H_
#define GDT_COMMON_EXIT_CODE_H_

#include "absl/status/status.h"

namespace gdt {

// The exit codes gdt's command lines share. A tool documents which of them
// it uses and what each means for it; 0 and 2 mean the same everywhere.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;      // The thing asked for failed.
inline constexpr int kExitUsage = 2;        // Bad flags, input or config.
inline constexpr int kExitUnavailable = 3;  // A service could not be reached.
inline constexpr int kExitRefused = 4;      // A service refused the request.

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
