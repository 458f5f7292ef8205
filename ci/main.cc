// gdt-ci: CI-side tooling for gdt. `gdt-ci run-local` plays gitlab-runner
// locally: it runs every member of a `parallel: N` job of a .gitlab-ci.yml
// through the custom executor (gdt-executor) exactly as a runner would.
// `gdt-ci expand` turns `parallel: {distributed: ...}` blocks into plain
// GitLab YAML and `gdt-ci lint` validates both forms (ci/expand.h).
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "ci/cache_archive.h"
#include "ci/expand.h"
#include "ci/run_local.h"
#include "common/cli_parse.h"
#include "common/exit_code.h"
#include "common/file.h"
#include "common/logging.h"

namespace {

using gdt::kExitOk;
using gdt::kExitUsage;
constexpr int kExitJobFailed = gdt::kExitFailure;

// Stop signals received so far (gdt::ci::RunLocal acts on them): SIGINT,
// SIGTERM, SIGHUP (the terminal closed) and SIGQUIT. Each would otherwise
// end run-local on the spot and leave its executors running and their
// temporary dirs behind.
std::atomic<int> g_stop_signals{0};

void Say(const char* line) {
  ssize_t ignored = write(STDERR_FILENO, line, strlen(line));
  (void)ignored;
}

void OnSignal(int) {
  switch (g_stop_signals.fetch_add(1) + 1) {
    case 1:
      Say("gdt-ci run-local: stopping the jobs as an interrupted runner does "
          "(SIGTERM to their executors, then graceful_kill_timeout); "
          "interrupt again to kill them at once\n");
      break;
    case 2:
      Say("gdt-ci run-local: killing the jobs' executors (SIGKILL to their "
          "process groups); cleanup_exec still runs to tear the jobs down, "
          "interrupt again to kill it too\n");
      break;
    case 3:
      Say("gdt-ci run-local: killing cleanup_exec as well\n");
      break;
    default:
      break;
  }
}

// GitLab refuses CI files far smaller (2 MB once parsed, by default); past
// this gdt-ci stops reading rather than fill the memory (say --file
// /dev/zero).
constexpr size_t kMaxCiFileBytes = size_t{64} << 20;

// The CI file's text, or one line on stderr and nullopt.
std::optional<std::string> ReadCiFile(const char* command,
                                      const std::string& path) {
  absl::StatusOr<std::string> text = gdt::ReadTextFile(path, kMaxCiFileBytes);
  if (!text.ok()) {
    std::cerr << "gdt-ci " << command << ": " << text.status().message()
              << "\n";
    return std::nullopt;
  }
  return *std::move(text);
}

// Writes `text` and flushes; false after one line on stderr when the
// output took it not (a full disk, a closed pipe).
bool WriteOut(const char* command, std::ostream& out, const std::string& text) {
  out << text;
  out.flush();
  if (out) return true;
  std::cerr << "gdt-ci " << command
            << ": cannot write the output (disk full or output closed)\n";
  return false;
}

// The local files `text` includes, read from `project_dir`; nullopt after
// one line on stderr when the project directory is unusable.
std::optional<gdt::ci::CiIncludes> ReadIncludes(
    const char* command, const std::string& file, const std::string& text,
    const std::string& project_dir, const std::vector<std::string>& vars) {
  // The pipeline's variables (--var) are all that is known of it: a rule
  // naming any other one is left to the pipeline.
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> parsed =
      gdt::ci::ParsePipelineVars(vars);
  if (!parsed.ok()) {
    std::cerr << "gdt-ci " << command << ": " << parsed.status().message()
              << "\n";
    return std::nullopt;
  }
  const gdt::ci::CiIncludeVariables known =
      gdt::ci::PipelineVariablesOf(*parsed);
  gdt::ci::CiIncludes includes =
      gdt::ci::ReadLocalIncludes(file, text, project_dir, known);
  for (const gdt::ci::CiIncludes::Problem& problem : includes.errors) {
    if (problem.line == 0) {
      std::cerr << "gdt-ci " << command
                << ": --project-dir: " << problem.message << "\n";
      return std::nullopt;
    }
  }
  return includes;
}

int Expand(const std::string& file, const std::string& output,
           const std::string& project_dir, const std::vector<std::string>& vars,
           gdt::ci::CiExpandOptions options) {
  std::optional<std::string> text = ReadCiFile("expand", file);
  if (!text.has_value()) return gdt::ci::kCiUsageError;
  const std::optional<gdt::ci::CiIncludes> includes =
      ReadIncludes("expand", file, *text, project_dir, vars);
  if (!includes.has_value()) return gdt::ci::kCiUsageError;
  options.includes = &*includes;
  const gdt::ci::CiExpansion expansion = gdt::ci::ExpandCiYaml(*text, options);
  if (!expansion.ok()) {
    for (const gdt::ci::CiDiagnostic& d : expansion.errors) {
      std::cerr << gdt::ci::FormatDiagnostic(file, d) << "\n";
    }
    return gdt::ci::kCiFileInvalid;
  }
  if (output.empty() || output == "-") {
    return WriteOut("expand", std::cout, expansion.text)
               ? gdt::ci::kCiFileOk
               : gdt::ci::kCiUsageError;
  }
  // A file is replaced whole; anything else (a device, a pipe, a symbolic
  // link such as /dev/stdout) is written through, never renamed over.
  struct stat st;
  if (lstat(output.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    std::ofstream out(output, std::ios::binary | std::ios::trunc);
    if (!out) {
      std::cerr << "gdt-ci expand: cannot write " << output << ": "
                << std::strerror(errno) << "\n";
      return gdt::ci::kCiUsageError;
    }
    return WriteOut("expand", out, expansion.text) ? gdt::ci::kCiFileOk
                                                   : gdt::ci::kCiUsageError;
  }
  if (absl::Status written = gdt::WriteFileAtomically(output, expansion.text);
      !written.ok()) {
    std::cerr << "gdt-ci expand: " << written.message() << "\n";
    return gdt::ci::kCiUsageError;
  }
  return gdt::ci::kCiFileOk;
}

int Lint(const std::string& file, bool json, const std::string& project_dir,
         const std::vector<std::string>& vars,
         gdt::ci::CiExpandOptions options) {
  std::optional<std::string> text = ReadCiFile("lint", file);
  if (!text.has_value()) return gdt::ci::kCiUsageError;
  const std::optional<gdt::ci::CiIncludes> includes =
      ReadIncludes("lint", file, *text, project_dir, vars);
  if (!includes.has_value()) return gdt::ci::kCiUsageError;
  options.includes = &*includes;
  // A file that the project's .gitlab-ci.yml includes is linted as part of
  // that configuration: it may extend the templates of the others.
  gdt::ci::CiIncludeVariables known;
  if (absl::StatusOr<std::vector<std::pair<std::string, std::string>>> parsed =
          gdt::ci::ParsePipelineVars(vars);
      parsed.ok()) {
    known = gdt::ci::PipelineVariablesOf(*parsed);
  }
  const std::optional<gdt::ci::CiIncludingConfig> including =
      gdt::ci::FindIncludingConfig(file, project_dir, known);
  if (including.has_value()) options.including = &*including;
  const gdt::ci::CiExpansion lint = gdt::ci::LintCiYaml(*text, options);
  const std::string report = gdt::ci::FormatLintReport(file, lint, json);
  if (!WriteOut("lint", json || lint.ok() ? std::cout : std::cerr, report)) {
    return gdt::ci::kCiUsageError;
  }
  return lint.ok() ? gdt::ci::kCiFileOk : gdt::ci::kCiFileInvalid;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gdt-ci: GitLab CI tooling for gdt gangs"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "gdt-ci " GDT_VERSION);
  std::string log_level = "warn";
  app.add_option("--log-level", log_level, "trace..critical, off");

  gdt::ci::RunLocalOptions options;
  options.executor = gdt::ci::DefaultExecutor();
  bool json = false;
  int64_t pipeline_id = 0;
  int64_t timeout = 0;
  int64_t graceful_kill_timeout = 0;
  CLI::App* run_local = app.add_subcommand(
      "run-local",
      "run a job's members (or several jobs as one pipeline) through the "
      "custom executor locally");
  run_local->add_option("--file", options.ci_file, "the CI file")
      ->capture_default_str();
  std::vector<std::string> jobs;
  run_local
      ->add_option("--job", jobs,
                   "the job to run; repeat to run later stages' jobs after "
                   "it, in order, passing artifacts")
      ->required();
  run_local
      ->add_option("--executor", options.executor, "custom executor binary")
      ->capture_default_str();
  run_local->add_option("--executor-config", options.executor_config,
                        "passed as --config FILE to every exec");
  run_local
      ->add_option("--project-dir", options.project_dir,
                   "project to copy into the builds dir")
      ->capture_default_str();
  run_local->add_option("--work-dir", options.work_dir,
                        "default: <project-dir>/.gdt-run/<pipeline>");
  run_local->add_option("--pipeline-id", pipeline_id, "default: the clock")
      ->check(CLI::Range(int64_t{1}, gdt::ci::kMaxPipelineId));
  int64_t first_job_id = 0;
  run_local
      ->add_option("--first-job-id", first_job_id,
                   "member i gets job id FIRST+i (default: pipeline id "
                   "x 1000); a new value with the same --pipeline-id "
                   "emulates GitLab's Retry")
      ->check(CLI::Range(int64_t{1}, gdt::ci::kMaxFirstJobId));
  run_local->add_option("--var", options.vars,
                        "KEY=VALUE pipeline variable (repeatable)");
  run_local
      ->add_option("--timeout", timeout,
                   "the project's job timeout in seconds, for jobs "
                   "without timeout: (default 3600)")
      ->check(CLI::Range(int64_t{1}, gdt::ci::kMaxTimeoutSeconds));
  int64_t maximum_timeout = 0;
  run_local
      ->add_option("--maximum-timeout", maximum_timeout,
                   "the runner's maximum job timeout in seconds: a longer "
                   "one is cut to it")
      ->check(CLI::Range(int64_t{1}, gdt::ci::kMaxTimeoutSeconds));
  run_local
      ->add_option("--graceful-kill-timeout", graceful_kill_timeout,
                   "seconds between SIGTERM and SIGKILL (default 600)")
      ->check(CLI::Range(int64_t{1}, gdt::ci::kMaxGracefulKillTimeoutSeconds));
  run_local->add_option("--runner-config", options.runner_config,
                        "gitlab-runner config.toml whose custom runner "
                        "supplies the execs, args and timeouts");
  run_local->add_option("--runner-name", options.runner_name,
                        "which [[runners]] entry of --runner-config (default: "
                        "the first custom one)");
  run_local->add_flag("--step-script-stage", options.step_script_stage,
                      "name the script stage step_script, as runners after "
                      "the announced rename will");
  run_local->add_flag("--zero-pipeline-id", options.zero_pipeline_id,
                      "send job_info.pipeline_id 0, as a runner >= 19 does "
                      "when GitLab leaves it unfilled");
  run_local->add_option("--id-token-key", options.id_token_key,
                        "PEM RSA private key: issue the jobs' id_tokens: "
                        "signed with it, as GitLab would");
  double preparation_retry_interval = -1;
  run_local
      ->add_option("--preparation-retry-interval", preparation_retry_interval,
                   "seconds between the attempts of a preparation that "
                   "failed as a system failure (default 3, as gitlab-runner)")
      ->check(gdt::FiniteRange(0, 60));
  run_local->add_flag("--no-retry", options.no_retry,
                      "run each job once, ignoring its retry:");
  run_local->add_flag("--json", json, "print the summary as JSON");

  std::string ci_file = ".gitlab-ci.yml";
  std::string output;
  gdt::ci::CiExpandOptions expand_options;
  CLI::App* expand = app.add_subcommand(
      "expand",
      "rewrite parallel:distributed blocks as plain GitLab YAML "
      "(exit 0 ok, 1 invalid file, 2 usage or I/O error)");
  expand
      ->add_option("file,--file", ci_file,
                   "the CI file (also as the one positional argument)")
      ->capture_default_str();
  expand->add_option("-o,--output", output, "write here (default: stdout)");
  expand
      ->add_option("--max-nodes", expand_options.max_nodes,
                   "the cluster's max_nodes_per_job")
      ->capture_default_str()
      ->check(CLI::Range(1, 200));
  expand
      ->add_option("--tag", expand_options.runner_tag,
                   "runner tag added to gang jobs ('' for none)")
      ->capture_default_str();
  std::string project_dir = ".";
  expand
      ->add_option("--project-dir", project_dir,
                   "the project whose files include: local names")
      ->capture_default_str();
  std::vector<std::string> include_vars;
  const char* const kIncludeVarHelp =
      "KEY=VALUE pipeline variable that include: rules see, e.g. "
      "CI_COMMIT_BRANCH=main (repeatable; a rule naming a variable not "
      "given includes its file)";
  expand->add_option("--var", include_vars, kIncludeVarHelp);
  CLI::App* lint = app.add_subcommand(
      "lint",
      "validate parallel:distributed blocks and parallel + GDT_* jobs "
      "(exit 0 ok, 1 invalid file, 2 usage or I/O error)");
  lint->add_option("file,--file", ci_file,
                   "the CI file (also as the one positional argument)")
      ->capture_default_str();
  lint->add_flag("--json", json, "print the report as JSON");
  lint->add_option("--max-nodes", expand_options.max_nodes,
                   "the cluster's max_nodes_per_job")
      ->capture_default_str()
      ->check(CLI::Range(1, 200));
  lint->add_option("--tag", expand_options.runner_tag,
                   "runner tag that marks gang jobs ('' for none)")
      ->capture_default_str();
  lint->add_option("--project-dir", project_dir,
                   "the project whose files include: local names")
      ->capture_default_str();

  lint->add_option("--var", include_vars, kIncludeVarHelp);

  // The helper commands of the cache stages run-local's scripts call, as a
  // runner's scripts call `gitlab-runner cache-archiver` and
  // `cache-extractor`.
  gdt::ci::CacheArchiverArgs archiver_args;
  int cache_timeout = 0;  // Minutes for a cache server; there is none.
  CLI::App* cache_archiver = app.add_subcommand(
      "cache-archiver", "zip a job's cache paths into the local cache");
  cache_archiver->add_option("--file", archiver_args.file, "the zip");
  cache_archiver->add_option("--alternate-file", archiver_args.alternate_file,
                             "the zip under the other key naming");
  cache_archiver->add_option("--path", archiver_args.paths,
                             "a path or pattern (repeatable)");
  cache_archiver->add_flag("--untracked", archiver_args.untracked,
                           "add the files git does not track");
  cache_archiver->add_option("--timeout", cache_timeout, "ignored");
  std::string extractor_file;
  CLI::App* cache_extractor = app.add_subcommand(
      "cache-extractor", "unzip a local cache into the current directory");
  cache_extractor->add_option("--file", extractor_file, "the zip");
  cache_extractor->add_option("--timeout", cache_timeout, "ignored");

  if (std::optional<int> code = gdt::ParseCommandLine(app, argc, argv)) {
    return *code;
  }
  if (absl::Status logging = gdt::InitLogging("gdt-ci", log_level);
      !logging.ok()) {
    std::cerr << "gdt-ci: " << logging.message() << "\n";
    return kExitUsage;
  }
  if (cache_archiver->parsed()) {
    return gdt::ci::RunCacheArchiver(archiver_args, std::cout);
  }
  if (cache_extractor->parsed()) {
    return gdt::ci::RunCacheExtractor(extractor_file, std::cout);
  }
  if (expand->parsed() || lint->parsed()) {
    if (absl::Status tag = gdt::ci::CheckRunnerTag(expand_options.runner_tag);
        !tag.ok()) {
      std::cerr << "gdt-ci " << (expand->parsed() ? "expand" : "lint") << ": "
                << tag.message() << "\n";
      return gdt::ci::kCiUsageError;
    }
  }
  if (expand->parsed()) {
    return Expand(ci_file, output, project_dir, include_vars, expand_options);
  }
  if (lint->parsed()) {
    return Lint(ci_file, json, project_dir, include_vars, expand_options);
  }

  // The cache stages call this binary, as a runner's call its own.
  std::error_code self_error;
  options.runner_command =
      std::filesystem::read_symlink("/proc/self/exe", self_error).string();
  options.job_name = jobs.front();
  options.later_jobs.assign(jobs.begin() + 1, jobs.end());
  if (pipeline_id != 0) options.pipeline_id = pipeline_id;
  if (first_job_id != 0) options.first_job_id = first_job_id;
  if (timeout != 0) options.timeout_seconds = timeout;
  if (maximum_timeout != 0) options.maximum_timeout_seconds = maximum_timeout;
  if (graceful_kill_timeout != 0) {
    options.graceful_kill_timeout_seconds = graceful_kill_timeout;
  }
  if (preparation_retry_interval >= 0) {
    options.preparation_retry_interval = std::chrono::milliseconds(
        std::llround(preparation_retry_interval * 1000));
  }

  struct sigaction stop = {};
  stop.sa_handler = OnSignal;
  sigemptyset(&stop.sa_mask);
  stop.sa_flags = SA_RESTART;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) {
    sigaction(sig, &stop, nullptr);
  }
  // A closed output (a pipe whose reader went away with the terminal) is a
  // failed write, not the end of run-local: the jobs still get torn down.
  // The executors get the default disposition back (common/subprocess.cc).
  signal(SIGPIPE, SIG_IGN);
  absl::StatusOr<gdt::ci::RunLocalResult> result =
      gdt::ci::RunLocal(options, std::cout, &g_stop_signals);
  if (!result.ok()) {
    std::cerr << "gdt-ci run-local: " << result.status().message() << "\n";
    return kExitUsage;
  }
  std::cout << gdt::ci::FormatSummary(*result, json);
  return result->success() ? kExitOk : kExitJobFailed;
}
