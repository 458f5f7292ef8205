// gdt-ci: CI-side tooling for gdt. `gdt-ci run-local` plays gitlab-runner
// locally: it runs every member of a `parallel: N` job of a .gitlab-ci.yml
// through the custom executor (gdt-executor) exactly as a runner would.
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <iostream>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "common/logging.h"
#include "gitlab/run_local.h"

namespace {

constexpr int kExitSuccess = 0;
constexpr int kExitJobFailed = 1;
constexpr int kExitBadInput = 2;

std::atomic<bool> g_interrupted{false};

void OnSignal(int) { g_interrupted.store(true); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gdt-ci: GitLab CI tooling for gdt gangs"};
  app.require_subcommand(1);
  std::string log_level = "warn";
  app.add_option("--log-level", log_level, "trace..critical, off");

  gdt::gitlab::RunLocalOptions options;
  options.executor = gdt::gitlab::SiblingExecutable("gdt-executor");
  bool json = false;
  int64_t pipeline_id = 0;
  int64_t timeout = 0;
  int64_t graceful_kill_timeout = 0;
  CLI::App* run_local = app.add_subcommand(
      "run-local", "run a job's members through the custom executor locally");
  run_local->add_option("--file", options.ci_file, "the CI file")
      ->capture_default_str();
  run_local->add_option("--job", options.job_name, "the job to run")
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
  run_local->add_option("--pipeline-id", pipeline_id, "default: the clock");
  int64_t first_job_id = 0;
  run_local->add_option("--first-job-id", first_job_id,
                        "member i gets job id FIRST+i (default: pipeline id "
                        "x 1000); a new value with the same --pipeline-id "
                        "emulates GitLab's Retry");
  run_local->add_option("--var", options.vars,
                        "KEY=VALUE pipeline variable (repeatable)");
  run_local->add_option("--timeout", timeout,
                        "job timeout in seconds (default: the job's, 3600)");
  run_local->add_option("--graceful-kill-timeout", graceful_kill_timeout,
                        "seconds between SIGTERM and SIGKILL (default 600)");
  run_local->add_flag("--json", json, "print the summary as JSON");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 reports by throwing; --help is a "successful" error.
    return app.exit(e) == 0 ? kExitSuccess : kExitBadInput;
  }
  if (absl::Status logging = gdt::InitLogging("gdt-ci", log_level);
      !logging.ok()) {
    std::cerr << "gdt-ci: " << logging.message() << "\n";
    return kExitBadInput;
  }
  if (pipeline_id != 0) options.pipeline_id = pipeline_id;
  if (first_job_id != 0) options.first_job_id = first_job_id;
  if (timeout != 0) options.timeout_seconds = timeout;
  if (graceful_kill_timeout != 0) {
    options.graceful_kill_timeout_seconds = graceful_kill_timeout;
  }

  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  absl::StatusOr<gdt::gitlab::RunLocalResult> result =
      gdt::gitlab::RunLocal(options, std::cout, &g_interrupted);
  if (!result.ok()) {
    std::cerr << "gdt-ci run-local: " << result.status().message() << "\n";
    return kExitBadInput;
  }
  std::cout << gdt::gitlab::FormatSummary(*result, json);
  return result->success() ? kExitSuccess : kExitJobFailed;
}
