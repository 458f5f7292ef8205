#include "ci/run_local.h"

#include <limits.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ci/expand.h"
#include "ci/runner_config.h"
#include "common/file.h"
#include "common/subprocess.h"
#include "nlohmann/json.hpp"

namespace gdt::ci {
namespace {

namespace fs = std::filesystem;

bool IsVariableName(std::string_view key) {
  if (key.empty() || std::isdigit(static_cast<unsigned char>(key[0]))) {
    return false;
  }
  for (char c : key) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseVars(
    const std::vector<std::string>& vars) {
  std::vector<std::pair<std::string, std::string>> parsed;
  for (const std::string& var : vars) {
    const size_t eq = var.find('=');
    if (eq == std::string::npos || !IsVariableName(var.substr(0, eq))) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad --var '", var, "': expected KEY=VALUE"));
    }
    parsed.emplace_back(var.substr(0, eq), var.substr(eq + 1));
  }
  return parsed;
}

// First line of a git command's output in `dir`, or "".
std::string GitOutput(const std::string& dir,
                      const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"git", "-C", dir};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string output;
  absl::StatusOr<ExitStatus> status =
      RunCommand(argv, std::chrono::seconds(10), &output);
  if (!status.ok() || !status->success()) return "";
  const size_t nl = output.find('\n');
  return nl == std::string::npos ? output : output.substr(0, nl);
}

// Job `job_name` of the CI file at `path` after `gdt-ci expand`, so jobs
// with parallel:distributed run as GitLab would run their expansion.
absl::StatusOr<CiJob> LoadExpandedJob(const std::string& path,
                                      std::string_view job_name) {
  absl::StatusOr<std::string> text = ReadTextFile(path);
  if (!text.ok()) return text.status();
  const CiExpansion expansion = ExpandCiYaml(*text);
  if (!expansion.ok()) {
    std::string message = FormatDiagnostic(path, expansion.errors[0]);
    if (expansion.errors.size() > 1) {
      absl::StrAppend(&message, " (and ", expansion.errors.size() - 1,
                      " more: gdt-ci lint --file ", path, ")");
    }
    return absl::InvalidArgumentError(message);
  }
  absl::StatusOr<CiJob> job = ParseCiJob(expansion.text, job_name);
  if (!job.ok()) {
    return absl::Status(job.status().code(),
                        absl::StrCat(path, ": ", job.status().message()));
  }
  return job;
}

// A /proc/<pid>/ file of NUL-separated strings (cmdline, environ), or
// nothing when the process is gone or not ours to read.
std::vector<std::string> ReadProcStrings(const std::string& pid,
                                         const char* file) {
  std::ifstream in("/proc/" + pid + "/" + file, std::ios::binary);
  std::vector<std::string> strings;
  for (std::string item; std::getline(in, item, '\0');) {
    strings.push_back(std::move(item));
  }
  return strings;
}

// Whether a process's /proc command line runs `argv`: the same, or with
// the interpreter of a script before it (the kernel runs "bash SCRIPT
// ARGS..." for a script, naming it by its full path when found in PATH).
bool RunsArgv(const std::vector<std::string>& cmdline,
              const std::vector<std::string>& argv) {
  if (argv.empty() || cmdline.size() < argv.size()) return false;
  const size_t start = cmdline.size() - argv.size();
  if (!std::equal(argv.begin() + 1, argv.end(),
                  cmdline.begin() + static_cast<std::ptrdiff_t>(start) + 1)) {
    return false;
  }
  return cmdline[start] == argv[0] ||
         fs::path(cmdline[start]).filename() == fs::path(argv[0]).filename();
}

bool IsNumber(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return c >= '0' && c <= '9';
  });
}

// The processes this one started (every thread's children), or, where the
// kernel does not list children, every process.
std::vector<std::string> ChildrenOrAll() {
  std::vector<std::string> pids;
  std::error_code error;
  bool listed = false;
  for (const fs::directory_entry& task :
       fs::directory_iterator("/proc/self/task", error)) {
    std::ifstream children(task.path() / "children");
    if (!children) continue;
    listed = true;
    for (std::string pid; children >> pid;) pids.push_back(pid);
  }
  if (listed) return pids;
  for (const fs::directory_entry& entry :
       fs::directory_iterator("/proc", error)) {
    std::string pid = entry.path().filename().string();
    if (IsNumber(pid)) pids.push_back(std::move(pid));
  }
  return pids;
}

// SIGKILLs the process group of every exec the runners of one job run
// now: children whose environment holds CUSTOM_ENV_CI_JOB_TOKEN of one of
// `tokens` (the emulator starts each exec as its own group). A group whose
// leader runs one of `spare` (cleanup_exec) is left alone; never this
// process's own group.
void KillExecGroups(const std::set<std::string>& tokens,
                    const std::set<std::vector<std::string>>& spare) {
  std::set<pid_t> groups;
  for (const std::string& pid : ChildrenOrAll()) {
    if (!IsNumber(pid)) continue;
    bool ours = false;
    for (const std::string& variable : ReadProcStrings(pid, "environ")) {
      constexpr std::string_view kToken = "CUSTOM_ENV_CI_JOB_TOKEN=";
      if (variable.starts_with(kToken) &&
          tokens.count(variable.substr(kToken.size())) > 0) {
        ours = true;
        break;
      }
    }
    if (!ours) continue;
    const pid_t group = getpgid(static_cast<pid_t>(std::stol(pid)));
    if (group > 1 && group != getpgrp()) groups.insert(group);
  }
  for (const pid_t group : groups) {
    if (!spare.empty()) {
      const std::vector<std::string> cmdline =
          ReadProcStrings(std::to_string(group), "cmdline");
      if (std::any_of(spare.begin(), spare.end(),
                      [&](const std::vector<std::string>& argv) {
                        return RunsArgv(cmdline, argv);
                      })) {
        continue;
      }
    }
    killpg(group, SIGKILL);
  }
}

std::string FormatSeconds(std::chrono::milliseconds duration) {
  return absl::StrFormat("%.1fs", static_cast<double>(duration.count()) / 1000);
}

// Runs every member of one job (its `payloads`) concurrently through its own
// emulated gitlab-runner and appends their results to `result_out`. Errors:
// InvalidArgument when a member's log cannot be written (nothing ran).
absl::Status RunMembers(
    const std::vector<gitlab::JobPayload>& payloads, const fs::path& work_dir,
    const LocalSources& sources, const std::string& executor,
    const std::function<std::vector<std::string>(const char*)>& exec_args,
    const std::optional<RunnerConfig>& from_file,
    const RunLocalOptions& options, std::ostream& out, std::mutex& out_mu,
    const std::atomic<int>* interrupts, std::set<std::string>* log_names,
    RunLocalResult* result_out) {
  std::vector<std::unique_ptr<RunnerEmulator>> runners;
  std::vector<std::unique_ptr<std::ofstream>> logs;
  std::vector<MemberResult> members(payloads.size());
  std::set<std::string> tokens;
  std::set<std::vector<std::string>> cleanup_argvs;
  for (size_t i = 0; i < payloads.size(); ++i) {
    MemberResult& member = members[i];
    member.name = payloads[i].name;
    member.job_id = payloads[i].id;
    tokens.insert(payloads[i].token);
    // Distinct names can share a slug (build:x, build-x): the later ones
    // get a number no slug has (slugs have no dots).
    std::string slug = Slugify(payloads[i].name);
    if (slug.empty()) slug = "job";
    std::string log_name = slug + ".log";
    for (int n = 2; !log_names->insert(log_name).second; ++n) {
      log_name = absl::StrCat(slug, ".", n, ".log");
    }
    member.log_path = (work_dir / "logs" / log_name).string();
    logs.push_back(
        std::make_unique<std::ofstream>(member.log_path, std::ios::trunc));
    if (!*logs.back()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot write ", member.log_path));
    }

    RunnerEmulator::Options runner;
    if (from_file.has_value()) {
      runner.config = *from_file;
    } else {
      runner.config.config_exec = executor;
      runner.config.config_args = exec_args("config");
      runner.config.prepare_exec = executor;
      runner.config.prepare_args = exec_args("prepare");
      runner.config.run_exec = executor;
      runner.config.run_args = exec_args("run");
      runner.config.cleanup_exec = executor;
      runner.config.cleanup_args = exec_args("cleanup");
    }
    if (runner.config.builds_dir.empty()) {
      runner.config.builds_dir = (work_dir / "builds").string();
    }
    if (runner.config.cache_dir.empty()) {
      runner.config.cache_dir = (work_dir / "cache").string();
    }
    if (!runner.config.cleanup_exec.empty()) {
      std::vector<std::string> argv = {runner.config.cleanup_exec};
      argv.insert(argv.end(), runner.config.cleanup_args.begin(),
                  runner.config.cleanup_args.end());
      cleanup_argvs.insert(std::move(argv));
    }
    runner.config.concurrent_id = static_cast<int>(i);
    runner.config.concurrent_project_id = static_cast<int>(i);
    if (options.graceful_kill_timeout_seconds.has_value()) {
      runner.config.graceful_kill_timeout =
          std::chrono::seconds(*options.graceful_kill_timeout_seconds);
    }
    if (options.preparation_retry_interval.has_value()) {
      runner.config.preparation_retry_interval =
          *options.preparation_retry_interval;
    }
    if (options.step_script_stage) {
      runner.config.main_script_stage = "step_script";
    }
    runner.job = payloads[i];
    if (options.zero_pipeline_id) runner.job.pipeline_id = 0;
    runner.sources = sources;
    const std::string prefix = absl::StrCat("[", payloads[i].name, "] ");
    std::ofstream* log = logs.back().get();
    runner.job_log = [&out, &out_mu, prefix, log](std::string_view line) {
      log->write(line.data(), static_cast<std::streamsize>(line.size()));
      log->put('\n');
      log->flush();
      std::lock_guard<std::mutex> lock(out_mu);
      out << prefix << line << '\n';
      out.flush();
    };
    runner.diagnostics = [&out, &out_mu, prefix](std::string_view level,
                                                 std::string_view line) {
      // Like a runner's own log: the cleanup stage, never the job log.
      if (level != "warn") return;
      std::lock_guard<std::mutex> lock(out_mu);
      out << prefix << "(runner warning) " << line << '\n';
    };
    runners.push_back(std::make_unique<RunnerEmulator>(std::move(runner)));
  }

  std::mutex done_mu;
  std::condition_variable done_cv;
  size_t done = 0;
  std::vector<std::thread> threads;
  for (size_t i = 0; i < runners.size(); ++i) {
    threads.emplace_back([&, i] {
      members[i].result = runners[i]->Run();
      std::lock_guard<std::mutex> lock(done_mu);
      ++done;
      done_cv.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lock(done_mu);
    bool aborted = false;
    while (done < runners.size()) {
      const int signals = interrupts == nullptr ? 0 : interrupts->load();
      // After a second signal the execs are killed, and any the runners
      // start after them (but cleanup_exec) as soon as they appear.
      done_cv.wait_for(lock,
                       std::chrono::milliseconds(signals >= 2 ? 20 : 100));
      if (!aborted && signals >= 1) {
        aborted = true;
        for (auto& runner : runners) runner->Cancel(CancelMode::kInterrupt);
      }
      if (signals >= 2) {
        lock.unlock();
        KillExecGroups(tokens, signals >= 3
                                   ? std::set<std::vector<std::string>>{}
                                   : cleanup_argvs);
        lock.lock();
      }
    }
  }
  for (std::thread& thread : threads) thread.join();
  for (MemberResult& member : members) {
    result_out->members.push_back(std::move(member));
  }
  return absl::OkStatus();
}

}  // namespace

bool RunLocalResult::success() const {
  for (const MemberResult& member : members) {
    if (member.result.status != JobStatus::kSuccess) return false;
  }
  return !members.empty();
}

std::vector<gitlab::JobPayload> BuildPayloads(const CiJob& job,
                                              const LocalPipeline& pipeline) {
  std::vector<gitlab::JobPayload> payloads;
  const std::string project_path =
      absl::StrCat(pipeline.namespace_path, "/", pipeline.project_name);
  std::string host = pipeline.server_url;
  if (const size_t scheme = host.find("://"); scheme != std::string::npos) {
    host = host.substr(scheme + 3);
  }
  const std::string scheme_prefix =
      pipeline.server_url.substr(0, pipeline.server_url.size() - host.size());
  const std::string project_url =
      absl::StrCat(pipeline.server_url, "/", project_path);
  const std::string ref_slug = Slugify(pipeline.ref);

  for (int i = 1; i <= job.parallel; ++i) {
    gitlab::JobPayload p;
    p.id = (pipeline.first_job_id > 0 ? pipeline.first_job_id
                                      : pipeline.pipeline_id * 1000) +
           pipeline.job_id_base + i;
    p.token = absl::StrCat("glcbt-local-", p.id);
    // GitLab numbers every job with `parallel:`, `parallel: 1` included.
    const bool numbered = job.parallel > 1 || job.parallel_given;
    p.name =
        numbered ? absl::StrCat(job.name, " ", i, "/", job.parallel) : job.name;
    p.stage = job.stage;
    p.project_id = pipeline.project_id;
    p.project_name = pipeline.project_name;
    p.pipeline_id = pipeline.pipeline_id;
    p.project_full_path = project_path;
    p.repo_url = absl::StrCat(scheme_prefix, "gitlab-ci-token:", p.token, "@",
                              host, "/", project_path, ".git");
    p.ref = pipeline.ref;
    p.sha = pipeline.sha;
    p.before_sha = "0000000000000000000000000000000000000000";
    p.ref_type = "branch";
    p.refspecs = {absl::StrCat("+refs/heads/", pipeline.ref,
                               ":refs/remotes/origin/", pipeline.ref)};
    p.depth = 20;
    p.timeout_seconds = pipeline.timeout_seconds;

    const auto add = [&p](std::string key, std::string value,
                          bool is_public = true, bool masked = false) {
      gitlab::JobVariable v;
      v.key = std::move(key);
      v.value = std::move(value);
      v.is_public = is_public;
      v.masked = masked;
      p.variables.push_back(std::move(v));
    };
    add("CI", "true");
    add("GITLAB_CI", "true");
    add("CI_SERVER_URL", pipeline.server_url);
    add("CI_SERVER_HOST", host);
    add("CI_API_V4_URL", pipeline.server_url + "/api/v4");
    add("CI_PROJECT_ID", std::to_string(pipeline.project_id));
    add("CI_PROJECT_NAME", pipeline.project_name);
    add("CI_PROJECT_NAMESPACE", pipeline.namespace_path);
    add("CI_PROJECT_PATH", project_path);
    add("CI_PROJECT_PATH_SLUG", Slugify(project_path));
    add("CI_PROJECT_URL", project_url);
    add("CI_DEFAULT_BRANCH", pipeline.ref);
    add("CI_PIPELINE_ID", std::to_string(pipeline.pipeline_id));
    add("CI_PIPELINE_IID", std::to_string(pipeline.pipeline_id % 100000));
    add("CI_PIPELINE_SOURCE", "push");
    add("CI_PIPELINE_URL",
        absl::StrCat(project_url, "/-/pipelines/", pipeline.pipeline_id));
    add("CI_JOB_ID", std::to_string(p.id));
    add("CI_JOB_NAME", p.name);
    add("CI_JOB_NAME_SLUG", Slugify(p.name));
    add("CI_JOB_GROUP_NAME", job.name);
    add("CI_JOB_STAGE", job.stage);
    add("CI_JOB_TOKEN", p.token, /*is_public=*/false, /*masked=*/true);
    add("CI_JOB_URL", absl::StrCat(project_url, "/-/jobs/", p.id));
    if (numbered) add("CI_NODE_INDEX", std::to_string(i));
    add("CI_NODE_TOTAL", std::to_string(job.parallel));
    add("CI_COMMIT_SHA", pipeline.sha);
    add("CI_COMMIT_SHORT_SHA", pipeline.sha.substr(0, 8));
    add("CI_COMMIT_REF_NAME", pipeline.ref);
    add("CI_COMMIT_REF_SLUG", ref_slug);
    add("CI_COMMIT_BRANCH", pipeline.ref);
    add("CI_RUNNER_ID", "1");
    add("CI_RUNNER_DESCRIPTION", "gdt-ci run-local");
    add("CI_RUNNER_TAGS", "[]");
    add("CI_REPOSITORY_URL", p.repo_url, /*is_public=*/false);
    add("GITLAB_USER_ID", "1");
    add("GITLAB_USER_LOGIN", pipeline.user);
    for (const auto& [key, value] : job.variables) {
      add(key, value);
      // `expand: false`: GitLab sends the variable raw, and the runner
      // passes its value without expanding `$NAME` in it.
      p.variables.back().raw = job.raw_variables.count(key) != 0;
    }
    for (const auto& [key, value] : pipeline.pipeline_variables) {
      add(key, value);
    }
    if (pipeline.id_token_signer != nullptr) {
      const int64_t now = pipeline.now_unix > 0
                              ? pipeline.now_unix
                              : static_cast<int64_t>(time(nullptr));
      for (const auto& [variable, audiences] : job.id_tokens) {
        gitlab::IdTokenGrant grant;
        grant.issuer = pipeline.server_url;
        grant.audiences = audiences;
        grant.project_id = pipeline.project_id;
        grant.project_path = project_path;
        grant.pipeline_id = pipeline.pipeline_id;
        grant.job_id = p.id;
        grant.ref = pipeline.ref;
        grant.issued_at = now;
        // GitLab: valid for the job's timeout, plus five minutes.
        grant.expires_at = now + pipeline.timeout_seconds + 300;
        add(variable, pipeline.id_token_signer->Issue(grant),
            /*is_public=*/false, /*masked=*/true);
      }
    }

    gitlab::JobStep script;
    script.name = "script";
    script.script = job.before_script;
    script.script.insert(script.script.end(), job.script.begin(),
                         job.script.end());
    script.timeout_seconds = pipeline.timeout_seconds;
    p.steps.push_back(std::move(script));
    if (!job.after_script.empty()) {
      gitlab::JobStep after;
      after.name = "after_script";
      after.script = job.after_script;
      after.timeout_seconds = pipeline.timeout_seconds;
      after.when = "always";
      p.steps.push_back(std::move(after));
    }
    if (!job.artifacts.empty()) {
      gitlab::JobArtifact artifact;
      artifact.name = job.artifacts.name;
      artifact.untracked = job.artifacts.untracked;
      artifact.paths = job.artifacts.paths;
      artifact.exclude = job.artifacts.exclude;
      artifact.when = job.artifacts.when;
      artifact.expire_in = job.artifacts.expire_in;
      p.artifacts.push_back(std::move(artifact));
    }
    payloads.push_back(std::move(p));
  }
  return payloads;
}

int64_t DefaultPipelineId(std::chrono::system_clock::time_point now) {
  const int64_t micros = std::chrono::duration_cast<std::chrono::microseconds>(
                             now.time_since_epoch())
                             .count();
  return micros % (1'000'000'000'000 - 1) + 1;  // From 1 to 10^12 - 1.
}

absl::StatusOr<RunLocalResult> RunLocal(const RunLocalOptions& options,
                                        std::ostream& out,
                                        const std::atomic<int>* interrupts) {
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> vars =
      ParseVars(options.vars);
  if (!vars.ok()) return vars.status();
  // Every job is read (and must be good) before anything runs.
  std::vector<CiJob> jobs;
  std::vector<std::string> job_names = {options.job_name};
  job_names.insert(job_names.end(), options.later_jobs.begin(),
                   options.later_jobs.end());
  for (size_t i = 0; i < job_names.size(); ++i) {
    // GitLab's pipeline has each job once (their names are its keys).
    if (std::find(job_names.begin(), job_names.begin() + i, job_names[i]) !=
        job_names.begin() + i) {
      return absl::InvalidArgumentError(
          absl::StrCat("--job '", job_names[i],
                       "' is given twice: a pipeline runs each job once"));
    }
  }
  for (const std::string& name : job_names) {
    absl::StatusOr<CiJob> job = LoadExpandedJob(options.ci_file, name);
    if (!job.ok()) return job.status();
    jobs.push_back(*std::move(job));
  }
  std::optional<RunnerConfig> from_file;
  if (!options.runner_config.empty()) {
    absl::StatusOr<RunnerConfig> loaded =
        LoadRunnerConfigToml(options.runner_config, options.runner_name);
    if (!loaded.ok()) return loaded.status();
    from_file = *std::move(loaded);
  } else if (options.executor.empty() ||
             access(options.executor.c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat("executor '", options.executor,
                                            "' is not an executable file"));
  }
  if (!options.executor_config.empty() &&
      access(options.executor_config.c_str(), R_OK) != 0) {
    return absl::NotFoundError(absl::StrCat("cannot read executor config '",
                                            options.executor_config, "'"));
  }
  std::error_code error;
  const fs::path project_dir = fs::canonical(options.project_dir, error);
  if (error || !fs::is_directory(project_dir)) {
    return absl::NotFoundError(absl::StrCat(
        "project directory '", options.project_dir, "' does not exist"));
  }

  LocalPipeline pipeline;
  pipeline.pipeline_id = options.pipeline_id.value_or(
      DefaultPipelineId(std::chrono::system_clock::now()));
  if (pipeline.pipeline_id <= 0 || pipeline.pipeline_id > kMaxPipelineId) {
    return absl::InvalidArgumentError(
        absl::StrCat("--pipeline-id must be from 1 to ", kMaxPipelineId));
  }
  pipeline.first_job_id = options.first_job_id.value_or(0);
  if (options.first_job_id.has_value() &&
      (pipeline.first_job_id <= 0 || pipeline.first_job_id > kMaxFirstJobId)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--first-job-id must be from 1 to ", kMaxFirstJobId));
  }
  pipeline.project_name = project_dir.filename().string();
  if (pipeline.project_name.empty()) pipeline.project_name = "project";
  if (std::string sha = GitOutput(project_dir, {"rev-parse", "HEAD"});
      sha.size() == 40) {
    pipeline.sha = sha;
    std::string ref =
        GitOutput(project_dir, {"rev-parse", "--abbrev-ref", "HEAD"});
    if (!ref.empty() && ref != "HEAD") pipeline.ref = ref;
  }
  if (const char* user = getenv("USER"); user != nullptr && *user != '\0') {
    pipeline.user = user;
  }
  if (options.timeout_seconds.has_value() &&
      (*options.timeout_seconds <= 0 ||
       *options.timeout_seconds > kMaxTimeoutSeconds)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--timeout must be from 1 to ", kMaxTimeoutSeconds));
  }
  if (options.graceful_kill_timeout_seconds.has_value() &&
      (*options.graceful_kill_timeout_seconds <= 0 ||
       *options.graceful_kill_timeout_seconds >
           kMaxGracefulKillTimeoutSeconds)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--graceful-kill-timeout must be from 1 to ",
                     kMaxGracefulKillTimeoutSeconds));
  }
  pipeline.pipeline_variables = *vars;
  if (!options.id_token_key.empty()) {
    absl::StatusOr<std::string> pem = ReadTextFile(options.id_token_key);
    if (!pem.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--id-token-key: ", pem.status().message()));
    }
    absl::StatusOr<gitlab::IdTokenSigner> signer =
        gitlab::IdTokenSigner::FromPrivateKeyPem(*pem);
    if (!signer.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--id-token-key ", options.id_token_key, ": ",
                       signer.status().message()));
    }
    pipeline.id_token_signer =
        std::make_shared<const gitlab::IdTokenSigner>(*std::move(signer));
  }

  fs::path work_dir =
      options.work_dir.empty()
          ? project_dir / ".gdt-run" / std::to_string(pipeline.pipeline_id)
          : fs::path(options.work_dir);
  if (work_dir.is_relative()) work_dir = project_dir / work_dir;
  work_dir = work_dir.lexically_normal();
  for (const char* sub : {"logs", "builds", "cache", "artifacts"}) {
    fs::create_directories(work_dir / sub, error);
    if (error) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot create ", (work_dir / sub).string(), ": ", error.message()));
    }
  }
  // The artifact store stands in for GitLab's artifact server, which jobs
  // upload to whatever account runs them (an agent runs members as their
  // own accounts): anyone may add a job's directory, like /tmp.
  fs::permissions(work_dir / "artifacts",
                  fs::perms::all | fs::perms::sticky_bit, error);

  RunLocalResult result;
  result.pipeline_id = pipeline.pipeline_id;
  result.work_dir = work_dir.string();

  LocalSources sources;
  sources.project_dir = project_dir.string();
  sources.artifact_store = (work_dir / "artifacts").string();
  // Never copy run directories into the builds dir (all of .gdt-run by
  // default: earlier runs live there too).
  const fs::path relative_work = work_dir.lexically_relative(project_dir);
  if (options.work_dir.empty()) {
    sources.exclude.push_back(".gdt-run");
  } else if (!relative_work.empty() && *relative_work.begin() != "..") {
    sources.exclude.push_back(relative_work.string());
  }

  // Execs run in their temp dirs: a relative executor path must not be.
  const std::string executor =
      options.executor.find('/') == std::string::npos
          ? options.executor
          : fs::absolute(options.executor).lexically_normal().string();
  const auto exec_args = [&](const char* stage) {
    std::vector<std::string> args = {stage};
    if (!options.executor_config.empty()) {
      args.push_back("--config");
      args.push_back(fs::absolute(options.executor_config).string());
    }
    return args;
  };

  std::mutex out_mu;  // One whole line at a time on `out`.
  // Members of the jobs run so far: the dependencies of later jobs.
  struct Ran {
    std::string job;
    gitlab::JobDependency dependency;
  };
  std::vector<Ran> ran;
  std::set<std::string> log_names;  // Of the logs/ of this pipeline.
  int64_t job_id_base = 0;
  for (const CiJob& job : jobs) {
    pipeline.timeout_seconds =
        options.timeout_seconds.value_or(job.timeout_seconds.value_or(3600));
    pipeline.job_id_base = job_id_base;
    job_id_base += job.parallel;
    std::vector<gitlab::JobPayload> payloads = BuildPayloads(job, pipeline);
    for (gitlab::JobPayload& payload : payloads) {
      for (const Ran& earlier : ran) {
        if (!job.artifact_sources.has_value() ||
            std::find(job.artifact_sources->begin(),
                      job.artifact_sources->end(),
                      earlier.job) != job.artifact_sources->end()) {
          payload.dependencies.push_back(earlier.dependency);
        }
      }
    }
    const size_t first_member = result.members.size();
    if (absl::Status ran_members = RunMembers(
            payloads, work_dir, sources, executor, exec_args, from_file,
            options, out, out_mu, interrupts, &log_names, &result);
        !ran_members.ok()) {
      return ran_members;
    }
    bool job_ok = true;
    for (size_t i = first_member; i < result.members.size(); ++i) {
      const MemberResult& member = result.members[i];
      job_ok = job_ok && member.result.status == JobStatus::kSuccess;
      gitlab::JobDependency dependency;
      dependency.id = member.job_id;
      dependency.token = payloads[i - first_member].token;
      dependency.name = member.name;
      std::error_code ignored;
      if (fs::is_directory(
              work_dir / "artifacts" / std::to_string(member.job_id),
              ignored)) {
        dependency.artifacts_filename = "artifacts.zip";
      }
      ran.push_back(Ran{job.name, dependency});
    }
    // Like a pipeline: a failed stage skips the ones after it.
    if (!job_ok || (interrupts != nullptr && interrupts->load() > 0)) break;
  }
  return result;
}

std::string FormatSummary(const RunLocalResult& result, bool json) {
  if (json) {
    nlohmann::ordered_json doc;
    doc["pipeline_id"] = result.pipeline_id;
    doc["work_dir"] = result.work_dir;
    doc["success"] = result.success();
    doc["members"] = nlohmann::ordered_json::array();
    for (const MemberResult& m : result.members) {
      doc["members"].push_back(
          {{"name", m.name},
           {"job_id", m.job_id},
           {"status", std::string(JobStatusName(m.result.status))},
           {"failure_reason", m.result.failure_reason},
           {"exit_code", m.result.exit_code},
           {"duration_seconds",
            static_cast<double>(m.result.duration.count()) / 1000},
           {"log", m.log_path}});
    }
    return doc.dump(2, ' ', false,
                    nlohmann::ordered_json::error_handler_t::replace) +
           "\n";
  }
  size_t name_width = 6;
  for (const MemberResult& m : result.members) {
    name_width = std::max(name_width, m.name.size());
  }
  std::string text = absl::StrFormat("pipeline %d (%s)\n", result.pipeline_id,
                                     result.work_dir);
  absl::StrAppend(
      &text, absl::StrFormat("%-*s  %-12s  %-8s  %-22s  %s\n",
                             static_cast<int>(name_width), "member", "job id",
                             "status", "failure reason", "duration"));
  for (const MemberResult& m : result.members) {
    absl::StrAppend(
        &text,
        absl::StrFormat(
            "%-*s  %-12d  %-8s  %-22s  %s\n", static_cast<int>(name_width),
            m.name, m.job_id, std::string(JobStatusName(m.result.status)),
            m.result.failure_reason.empty() ? "-" : m.result.failure_reason,
            FormatSeconds(m.result.duration)));
  }
  return text;
}

std::string SiblingExecutable(const std::string& name) {
  char buffer[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  if (n <= 0) return name;
  return (fs::path(std::string(buffer, static_cast<size_t>(n))).parent_path() /
          name)
      .string();
}

std::string FirstExecutable(const std::vector<std::string>& candidates) {
  for (const std::string& candidate : candidates) {
    std::error_code error;
    if (fs::is_regular_file(candidate, error) &&
        access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return candidates.empty() ? "" : candidates.front();
}

std::string DefaultExecutor() {
  const fs::path beside = SiblingExecutable("gdt-executor");
  if (!beside.has_parent_path()) return beside.string();
  return FirstExecutable({beside.string(), (beside.parent_path().parent_path() /
                                            "executor" / "gdt-executor")
                                               .string()});
}

}  // namespace gdt::ci
