#ifndef GDT_CI_GO_DURATION_H_
#define GDT_CI_GO_DURATION_H_

#include <chrono>
#include <string_view>

#include "absl/status/statusor.h"

namespace gdt::ci {

// Parses a duration the way Go's time.ParseDuration does, which is how
// gitlab-runner reads `prepare_timeout` and the RUNNER_SCRIPT_TIMEOUT /
// RUNNER_AFTER_SCRIPT_TIMEOUT variables: an optional sign, then one or more
// decimal numbers (a fraction allowed) each followed by a unit among ns, us
// (or µs, μs), ms, s, m, h: "1500ms", "1h2m3.5s", "-1.5h". "0" alone needs no
// unit. No spaces, no "inf", nothing beyond about 292 years. Errors:
// InvalidArgument naming the text.
absl::StatusOr<std::chrono::nanoseconds> ParseGoDuration(std::string_view text);

}  // namespace gdt::ci

#endif  // GDT_CI_GO_DURATION_H_
