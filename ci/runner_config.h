#ifndef GDT_CI_RUNNER_CONFIG_H_
#define GDT_CI_RUNNER_CONFIG_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "ci/runner_emulator.h"

namespace gdt::ci {

// Reads the `[[runners]]` entry with `executor = "custom"` of a
// gitlab-runner config.toml (the first one, or the one named `name` when
// not empty): name, token (its short form, for the log and
// CI_RUNNER_SHORT_TOKEN), url, builds_dir, cache_dir, shell, environment, and
// `[runners.custom]` with the four execs, their args and the timeouts
// (config_exec_timeout, prepare_exec_timeout, cleanup_exec_timeout,
// graceful_kill_timeout, force_kill_timeout, in seconds as in the file).
// A key of the wrong type, or no such runner, is one InvalidArgument line
// naming the file and the key.
absl::StatusOr<RunnerConfig> ParseRunnerConfigToml(std::string_view text,
                                                   const std::string& source,
                                                   const std::string& name);
// Reads the file at `path` as ParseRunnerConfigToml does; the system ID is
// the one the runner saved in `.runner_system_id` beside it, when that file
// holds a valid one (run-local never writes it).
absl::StatusOr<RunnerConfig> LoadRunnerConfigToml(const std::string& path,
                                                  const std::string& name);

// A runner token as the runner shows it: its known prefix (glrt- with an
// optional t1_/t2_/t3_ partition, a bare partition, glrtr-, glcbt-, or an
// old GR registration prefix) dropped, then its first 9 characters.
std::string ShortenRunnerToken(std::string_view token);

}  // namespace gdt::ci

#endif  // GDT_CI_RUNNER_CONFIG_H_
