#ifndef GDT_GITLAB_RUN_LOCAL_H_
#define GDT_GITLAB_RUN_LOCAL_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ci/job_file.h"
#include "ci/runner_emulator.h"
#include "gitlab/id_token.h"
#include "gitlab/job_payload.h"

namespace gdt::ci {

// The largest values run-local takes. Job ids are the pipeline id × 1000
// (or the first job id) plus the members' numbers, and stay well inside
// GitLab's 64-bit ids; a timeout is at most kMaxTimeoutSeconds
// (runner_emulator.h); the kill grace at most a day.
inline constexpr int64_t kMaxPipelineId = 1'000'000'000'000'000;      // 1e15
inline constexpr int64_t kMaxFirstJobId = 1'000'000'000'000'000'000;  // 1e18
inline constexpr int64_t kMaxGracefulKillTimeoutSeconds = 86400;

// What `gdt-ci run-local` was asked to do. Relative paths are resolved
// against the current directory, except work_dir (see below).
struct RunLocalOptions {
  std::string ci_file = ".gitlab-ci.yml";
  std::string job_name;
  // Jobs run after job_name, in this order, in the same pipeline (list them
  // in stage order): each runs or is skipped by its `when:` and the jobs
  // before it (see RunLocal), and downloads the artifacts of its earlier
  // jobs (all of them, or those of its `dependencies:` / `needs:`).
  std::vector<std::string> later_jobs;
  // Run each job once, ignoring its `retry:` (as if it said `retry: 0`).
  bool no_retry = false;
  std::string executor;         // Required: the custom executor binary.
  std::string executor_config;  // Passed as `--config FILE` to every exec.
  std::string project_dir = ".";
  // Default <project_dir>/.gdt-run/<pipeline id>; relative paths are taken
  // from project_dir.
  std::string work_dir;
  std::optional<int64_t> pipeline_id;  // Default: from the wall clock.
  // Job ids are first_job_id + i for member i (default pipeline id × 1000).
  // GitLab gives retried jobs new ids: a retry of a pipeline's job passes a
  // new base with the same --pipeline-id.
  std::optional<int64_t> first_job_id;
  std::vector<std::string> vars;  // "KEY=VALUE" pipeline variables.
  // As GitLab times a job: its `timeout:`, else the project's timeout
  // (timeout_seconds, default 3600); the runner's maximum timeout, when
  // set, cuts a longer one to it.
  std::optional<int64_t> timeout_seconds;
  std::optional<int64_t> maximum_timeout_seconds;
  std::optional<int64_t> graceful_kill_timeout_seconds;
  // A gitlab-runner config.toml: its custom `[[runners]]` entry (named
  // runner_name, else the first) supplies the execs, their args, the
  // builds and cache dirs, the shell, the environment and the timeouts, in
  // place of `executor`/`executor_config`.
  std::string runner_config;
  std::string runner_name;
  // Act as a newer runner: pass the job's script stage as step_script
  // instead of build_script.
  bool step_script_stage = false;
  // Act as a runner >= 19 talking to a GitLab that leaves the job's
  // pipeline id unfilled: job_info.pipeline_id is sent as 0.
  bool zero_pipeline_id = false;
  // A PEM RSA private key: with it, the jobs' `id_tokens:` are issued as
  // GitLab would, signed with this key (issuer: the local server URL);
  // without it, jobs get no ID tokens.
  std::string id_token_key;
  // The binary the cache stages call for `cache-extractor` and
  // `cache-archiver` (gdt-ci itself; RunnerEmulator::Options).
  std::string runner_command;
  // Between preparation attempts (gitlab-runner: 3 s); run-local's
  // --preparation-retry-interval.
  std::optional<std::chrono::milliseconds> preparation_retry_interval;
};

// What a local pipeline needs to invent in place of a GitLab server.
struct LocalPipeline {
  int64_t pipeline_id = 0;
  int64_t first_job_id = 0;  // 0: pipeline_id × 1000.
  int64_t project_id = 1;
  std::string project_name;  // Last component of the project directory.
  std::string namespace_path = "local";
  std::string server_url = "http://gitlab.local";
  std::string sha = "0000000000000000000000000000000000000000";
  std::string ref = "main";
  // The commit's message as stored (its final newline included), author
  // ("Name <email>") and committer time (ISO 8601 in the committer's offset,
  // as GitLab writes it), for GitLab's CI_COMMIT_* variables; the time is
  // empty outside git (then none of them is set).
  std::string commit_message;
  std::string commit_author;
  std::string commit_timestamp;
  // The user who started the pipeline: login, full name and email (the
  // checkout's git user.name and user.email; empty: the login, and
  // <login>@<server host>).
  std::string user = "local";
  std::string user_name;
  std::string user_email;
  // `workflow:name` with its variables expanded (GitLab's pipeline name);
  // empty: the pipeline has none.
  std::string pipeline_name;
  // Unix seconds the pipeline was created at (0: when the job starts).
  int64_t created_unix = 0;
  // How many times this job was retried before (CI_JOB_RETRY_COUNT).
  int retry_count = 0;
  // The git checkout whose commit `cache:key:files` hashes; empty outside
  // git (such keys then end in "default", as GitLab's do for files the
  // commit lacks).
  std::string checkout_dir;
  int64_t timeout_seconds = 3600;
  // Job ids are pipeline_id * 1000 + job_id_base + member index (1-based);
  // later jobs of a pipeline start after the members of earlier ones.
  int64_t job_id_base = 0;
  std::vector<std::pair<std::string, std::string>> pipeline_variables;
  // The dotenv report variables of the jobs whose artifacts the job
  // downloads, in their job order: after the YAML variables, before the
  // pipeline's (GitLab's precedence).
  std::vector<std::pair<std::string, std::string>> dotenv_variables;
  // Issues the jobs' `id_tokens:`; null: none are issued.
  std::shared_ptr<const gitlab::IdTokenSigner> id_token_signer;
  // Unix seconds the job starts and its tokens are issued at (0: now).
  int64_t now_unix = 0;
};

// `--var KEY=VALUE` arguments as (key, value) pairs, in order. Errors:
// InvalidArgument ("bad --var 'x': expected KEY=VALUE") for one without `=`
// or whose key is not a variable name.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>>
ParsePipelineVars(const std::vector<std::string>& vars);

// Builds the N job payloads of `job` as GitLab would hand them to runners
// (docs/gitlab-runner-protocol.md): the same project and pipeline, distinct
// increasing job ids and tokens, names "<job> i/N" (just "<job>" when N is
// 1), and GitLab's predefined variables followed by the YAML, dotenv and
// pipeline variables, then the job's `id_tokens:` when the pipeline has a
// signer. A `reports:dotenv` is an artifact of its own (type dotenv, gzip,
// uploaded `when: always`), as GitLab sends it. Each `cache:` entry gets its
// key as GitLab computes it: the string, or for `key:files` its prefix
// (else the entry's index) and the SHA-1 of the files' sorted blob ids
// joined by '-' ("default" when the commit has none of them), then
// "-non_protected" (run-local's refs are not protected), also on the
// fallback keys.
std::vector<gitlab::JobPayload> BuildPayloads(const CiJob& job,
                                              const LocalPipeline& pipeline);

// One member's outcome (one attempt of it, when it was retried).
struct MemberResult {
  std::string name;
  int64_t job_id = 0;
  std::string log_path;  // "" when it did not run.
  JobResult result;
  // Not run, and why ("when: on_success: an earlier stage failed"); then
  // `result` means nothing.
  std::string skipped;
  // Failed, and `retry:` ran it again as a new job (listed next).
  bool retried = false;
  // Failed, and its job's `allow_failure:` lets it: the pipeline goes on
  // as if it had succeeded, with a warning.
  bool allowed_failure = false;

  // "success", "failed", "failed (allowed)", "failed (retried)",
  // "canceled" or "skipped".
  std::string StatusText() const;
};

struct RunLocalResult {
  int64_t pipeline_id = 0;
  std::string work_dir;
  std::vector<MemberResult> members;
  // GitLab's pipeline status from its jobs' last attempts: "failed" when
  // one failed (and may not), else "canceled" when one was canceled, else
  // "skipped" when none ran, else "passed" ("passed with warnings" when a
  // job failed that may fail).
  std::string Status() const;
  bool success() const;  // Status() is "passed" or "passed with warnings".
};

// Whether GitLab retries a job that ended with `result` after
// `retries_done` retries of it: it failed (not canceled), fewer than
// retry.max retries so far, and its failure reason is in `retry:when`
// ("always": any; unset: always, unless `exit_codes` is set) or its script
// exited with one of `retry:exit_codes`.
bool ShouldRetry(const CiRetry& retry, const JobResult& result,
                 int retries_done);

// Whether a job ended with `result` failed in a way its `allow_failure:`
// allows: true, or the script's exit code is one of its `exit_codes:`.
bool FailureAllowed(const CiJob& job, const JobResult& result);

// The pipeline id of a run without --pipeline-id: the time `now` in
// microseconds, taken into 1 .. 10^12 - 1 (so job ids, the id times 1000 plus
// the member's number, stay below 2^53). Two runs started in the same second
// get different ids and so different gangs.
int64_t DefaultPipelineId(std::chrono::system_clock::time_point now);

// Runs every member of the job concurrently, each through its own emulated
// gitlab-runner, then those of `later_jobs` as GitLab would in one
// pipeline: consecutive jobs of the same stage form a stage, whose jobs
// start together (a job that needs one of them waits for it, and the jobs
// after it start with it); a job runs or is skipped by its `when:` and the
// outcome of the earlier stages (or, with `needs:`, of the jobs it needs among
// those that ran), a failure its `allow_failure:` allows counts as a success,
// and a failed member is run again as a new job while its `retry:` allows
// (unless `no_retry`). Each log line is written to `out` as "[<name>] <line>"
// (whole lines, never interleaved) and to <work_dir>/logs/<job-name-slug>.log.
// The CI file is expanded first (`gdt-ci expand`), so jobs with
// parallel:distributed run as their expansion. `interrupts` counts the stop
// signals (SIGINT, SIGTERM, SIGHUP, SIGQUIT) the caller got. The first aborts
// every running member like a runner that got SIGINT (its executor gets SIGTERM
// and graceful_kill_timeout to wind down) and runs no later job. The second
// SIGKILLs the process groups of the members' execs at once, sparing a
// cleanup_exec, which still runs (it tears down what the job left on the
// hosts); the third kills cleanup_exec as well, and no member is retried after
// the first. `members` of the result lists the members of the jobs reached, in
// order: skipped ones too (each with its job id), and a retried member's
// attempts one after the other. Each attempt's log is
// <work_dir>/logs/<job-name-slug>.log, or <slug>.<n>.log for the n-th attempt
// or member of the pipeline with that slug (a retry, or build:x beside
// build-x). Errors (bad input, reported before anything runs, as one line and
// exit code 2): InvalidArgument / NotFound for a missing or bad CI file
// ("file:line:column: message" for a bad block), an unknown job, a job named
// twice (a pipeline has each job once), a bad --var, an id or timeout out of
// range, a missing executor or an unusable work directory.
absl::StatusOr<RunLocalResult> RunLocal(const RunLocalOptions& options,
                                        std::ostream& out,
                                        const std::atomic<int>* interrupts);

// The summary table, or one JSON document when `json`.
std::string FormatSummary(const RunLocalResult& result, bool json);

// The path of `name` in the directory of the running executable.
std::string SiblingExecutable(const std::string& name);

// The first of `candidates` that is an executable file; the first when
// none is.
std::string FirstExecutable(const std::vector<std::string>& candidates);

// The default --executor: gdt-executor beside the running binary (an
// installed package, /usr/bin), else in the build tree's executor/ folder
// next to the binary's own (build/ci/gdt-ci, build/executor/gdt-executor).
std::string DefaultExecutor();

}  // namespace gdt::ci

#endif  // GDT_GITLAB_RUN_LOCAL_H_
