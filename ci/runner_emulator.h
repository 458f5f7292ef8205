#ifndef GDT_GITLAB_RUNNER_EMULATOR_H_
#define GDT_GITLAB_RUNNER_EMULATOR_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gitlab/job_payload.h"

namespace gdt::ci {

// The longest timeout gdt-ci takes (ten years, like a job's `timeout:`):
// longer ones would overflow the clock's arithmetic.
inline constexpr int64_t kMaxTimeoutSeconds = int64_t{10} * 366 * 86400;

// The parts of a gitlab-runner `[[runners]]` entry with `executor =
// "custom"` that matter to one job (see docs/gitlab-runner-protocol.md),
// plus the knobs of the emulation itself. Durations <= 0 mean the runner's
// default, as in config.toml.
struct RunnerConfig {
  std::string name = "gdt-ci-local";
  std::string url = "http://gitlab.local";
  // `[[runners]] clone_url`: with a scheme, the repository's remote is
  // <clone_url>/<project path>.git (the job token added) and its git
  // rewrites are made for it instead of for the server's URL.
  std::string clone_url;
  std::string runner_short_token = "gdtlocal";
  // The "system ID" of the job log's header; empty: the one a runner on
  // this machine derives from its machine ID.
  std::string system_id;
  std::string builds_dir;  // Both may be overridden by config_exec.
  std::string cache_dir;
  std::string shell = "bash";            // Only bash is supported.
  std::vector<std::string> environment;  // "KEY=VALUE", as in config.toml.
  // [runners.feature_flags]: these win over the job's FF_ variables.
  std::map<std::string, bool, std::less<>> feature_flags;
  int concurrent_id = 0;          // CI_CONCURRENT_ID.
  int concurrent_project_id = 0;  // CI_CONCURRENT_PROJECT_ID.

  // [runners.custom]
  std::string config_exec;
  std::vector<std::string> config_args;
  std::string prepare_exec;
  std::vector<std::string> prepare_args;
  std::string run_exec;  // Required.
  std::vector<std::string> run_args;
  std::string cleanup_exec;
  std::vector<std::string> cleanup_args;
  std::chrono::milliseconds config_exec_timeout{0};    // Default 3600 s.
  std::chrono::milliseconds prepare_exec_timeout{0};   // Default 3600 s.
  std::chrono::milliseconds cleanup_exec_timeout{0};   // Default 3600 s.
  std::chrono::milliseconds graceful_kill_timeout{0};  // Default 600 s.
  std::chrono::milliseconds force_kill_timeout{0};     // Default 10 s.
  // `[[runners]] prepare_timeout`: one deadline for every preparation
  // attempt and the prepare_script stage together. Zero, or longer than the
  // job timeout: the job timeout.
  std::chrono::milliseconds prepare_timeout{0};
  // `[[runners]] get_sources_timeout`: one deadline for every get_sources
  // attempt (and clear_worktree) together. Zero, or longer than the job
  // timeout: the job timeout.
  std::chrono::milliseconds get_sources_timeout{0};
  // `[[runners]] clean_git_config`: get_sources (clone, fetch) and the
  // cleanup script remove the repository's .git/config and .git/hooks.
  // Unset, the custom executor's default: on, except that the cleanup
  // script leaves them for GIT_STRATEGY none; set, it holds for every
  // strategy.
  std::optional<bool> clean_git_config;
  // `[runners.custom_build_dir] enabled`: a job may choose its project dir
  // with GIT_CLONE_PATH (off by default for the custom executor).
  bool custom_build_dir_enabled = false;

  // [[runners]] hooks: a command script get_sources runs before fetching
  // the sources (before the job's own hook) and after them (after the job's
  // own), and one every user step runs before and after its commands.
  std::string pre_get_sources_script;
  std::string post_get_sources_script;
  std::string pre_build_script;
  std::string post_build_script;

  // `output_limit` (given in kilobytes): the job log's size; past it the
  // log says so and takes no more output, while the job goes on.
  int64_t output_limit_bytes = 4 * 1024 * 1024;

  // Emulation knobs (fixed in the real runner; shorter in tests).
  std::chrono::milliseconds preparation_retry_interval{3000};
  // The first pause between attempts of get_sources & co, doubling at
  // each attempt (the runner: 5 s up to 5 min, or 1 s up to 5 s without
  // FF_USE_EXPONENTIAL_BACKOFF_STAGE_RETRY); the cap scales with it. 0:
  // the runner's.
  std::chrono::milliseconds stage_retry_interval{0};
  // How long to wait for a killed stage before going on (runner: 5 min).
  std::chrono::milliseconds build_finish_timeout{300000};
  // The stage name run_exec gets for the job's script: today's runners
  // rename step_script to build_script for custom executors; the rename is
  // announced to go away, and then step_script arrives as it is.
  std::string main_script_stage = "build_script";
};

// How a job is stopped from outside (docs/gitlab-runner-protocol.md).
enum class CancelMode {
  kGraceful,   // Cancel from the UI with cancel_gracefully.
  kAbort,      // Remote state canceled/failed.
  kInterrupt,  // gitlab-runner got SIGTERM: runner_interrupted.
};

// What a local run supplies instead of a GitLab server.
struct LocalSources {
  // Directory copied into CI_PROJECT_DIR by get_sources (its `git ls-files
  // -co --exclude-standard` when it is a git work tree, else everything).
  // Empty: get_sources only creates the directory.
  std::string project_dir;
  // Paths relative to project_dir never copied (e.g. the run's work dir).
  std::vector<std::string> exclude;
  // upload_artifacts_* copy artifact paths into <artifact_store>/<job id>/
  // and a dotenv report into <artifact_store>/<job id>.dotenv/ (a report
  // GitLab would refuse fails the upload; ci/dotenv.h);
  // download_artifacts copies each dependency's directory there into the
  // project directory.
  // A real runner uploads them to GitLab instead. Empty: uploads only warn.
  std::string artifact_store;
};

// One invocation of an executable of the custom executor.
struct ExecCall {
  std::string exec;   // "config", "prepare", "run" or "cleanup".
  std::string stage;  // run_exec's stage name ("build_script", ...); else "".
  std::vector<std::string> argv;
  int attempt = 1;      // Preparation attempt it belongs to.
  int exit_code = 0;    // The shell's convention: 128+signal when signalled.
  bool killed = false;  // Stopped by the emulator (deadline or cancel).
};

enum class JobStatus { kSuccess, kFailed, kCanceled };
std::string_view JobStatusName(JobStatus status);

struct JobResult {
  JobStatus status = JobStatus::kFailed;
  // GitLab's failure reason: "" on success, script_failure,
  // runner_system_failure, job_execution_timeout, runner_interrupted,
  // runner_configuration_error; "" when canceled.
  std::string failure_reason;
  int exit_code = 0;  // The script's code for script_failure; else the exec's.
  std::string message;  // The "ERROR: Job failed..." text, "" on success.
  int attempts = 0;     // Preparation attempts made.
  std::vector<ExecCall> calls;  // In order.
  std::chrono::milliseconds duration{0};
};

// Emulates one gitlab-runner running one job through a custom executor,
// following the runner's source (docs/gitlab-runner-protocol.md): the
// preparation attempts (config_exec, prepare_exec, cleanup_exec between
// retries), the run_exec stages with generated bash scripts and the
// runner's failure routing, the kill sequence on timeouts and cancels, and
// cleanup_exec at the end. Each exec runs as its own process group.
//
// Job log lines (stage output, runner messages) go to `job_log` one complete
// line at a time (no newline); cleanup_exec's output goes to `diagnostics`
// (stdout as "debug", stderr as "warn"), never to the job log. Both sinks are
// called from the thread that calls Run().
//
// Run() once per object. Cancel() may be called from any thread.
class RunnerEmulator {
 public:
  using LogSink = std::function<void(std::string_view line)>;
  using DiagnosticSink =
      std::function<void(std::string_view level, std::string_view line)>;

  struct Options {
    RunnerConfig config;
    gitlab::JobPayload job;
    LocalSources sources;
    // The runner process's own environment (os.Environ()); the current
    // process's environment when unset.
    std::optional<std::map<std::string, std::string>> runner_environment;
    LogSink job_log;
    DiagnosticSink diagnostics;  // spdlog when unset.
    // The binary the cache stages' scripts call as `<it> cache-extractor`
    // and `<it> cache-archiver`, as a runner's call its own executable
    // (gdt-ci, ci/cache_archive.h); empty: those stages only say that
    // caching is not supported.
    std::string runner_command;
    // Scenario knob: cancel this long after Run() starts.
    std::optional<std::chrono::milliseconds> cancel_after;
    CancelMode cancel_after_mode = CancelMode::kGraceful;
  };

  explicit RunnerEmulator(Options options);
  RunnerEmulator(const RunnerEmulator&) = delete;
  RunnerEmulator& operator=(const RunnerEmulator&) = delete;

  // Runs the job to the end and returns its outcome. Problems of the executor
  // or the scripts are part of the result, never errors.
  JobResult Run();

  // Requests cancellation; the first request wins. Thread-safe.
  void Cancel(CancelMode mode);

  // Stops waiting for the executor (run-local's second and third Ctrl-C):
  // SIGKILLs the process group of the exec running now and of every exec
  // started after, at once, without the SIGTERM and graceful_kill_timeout
  // of the kill sequence; cleanup_exec is spared (it still runs: it tears
  // down what the job left) unless `cleanup_too`. Thread-safe; a later call
  // only widens it. It does not cancel the job: Cancel() does.
  void ForceKill(bool cleanup_too);

 private:
  class Job;
  Options options_;
  std::atomic<int> cancel_{-1};  // -1, or a CancelMode.
  // 0, 1 (all execs but cleanup_exec) or 2 (all); shared with execs whose
  // kill goes on in the background.
  std::shared_ptr<std::atomic<int>> force_kill_ =
      std::make_shared<std::atomic<int>>(0);
};

// Expands `$NAME` and `${NAME}` in `value` as gitlab-runner does (Go's
// os.Expand): `lookup` gives each name's value, and the result is not
// expanded again. `$$` and `$1` style names ask `lookup` for "$", "1", ...
// (the runner answers "$" for "$", "" for the others and unknown names). `$`
// before anything but a name, or at the end, stays; a bad `${...}` ("${}", an
// unclosed "${") is dropped.
std::string ExpandVariableValue(
    std::string_view value,
    const std::function<std::string(std::string_view name)>& lookup);

// Quotes `text` for bash as one word ('...'), safe for any bytes but NUL.
std::string ShellQuote(std::string_view text);

// GitLab's trace section marker, as gitlab-runner writes one at the start
// (`kind` "start") and end ("end") of each stage:
// "section_<kind>:<unix seconds now>:<name>\r\e[0K". GitLab folds the
// lines between a section's markers; a terminal, where \r\e[0K clears
// what came before on the line, hides the markers themselves.
std::string SectionMarker(std::string_view kind, std::string_view name);

// `line` without the section markers that lead it.
std::string_view WithoutSectionMarkers(std::string_view line);

}  // namespace gdt::ci

#endif  // GDT_GITLAB_RUNNER_EMULATOR_H_
