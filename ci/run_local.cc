#include "ci/run_local.h"

#include <fnmatch.h>
#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "ci/dotenv.h"
#include "ci/expand.h"
#include "ci/job_file.h"
#include "ci/rules.h"
#include "ci/runner_config.h"
#include "common/file.h"
#include "common/sha256.h"
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

// The output of a git command in `dir`, or "" when it fails.
std::string GitText(const std::string& dir,
                    const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"git", "-C", dir};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string output;
  absl::StatusOr<ExitStatus> status =
      RunCommand(argv, std::chrono::seconds(10), &output);
  if (!status.ok() || !status->success()) return "";
  return output;
}

// First line of a git command's output in `dir`, or "".
std::string GitOutput(const std::string& dir,
                      const std::vector<std::string>& args) {
  const std::string output = GitText(dir, args);
  return output.substr(0, output.find('\n'));
}

// Job `job_name` of the CI file at `path` after `gdt-ci expand`, so jobs
// with parallel:distributed run as GitLab would run their expansion.
// The files it includes locally are read from `project_dir`, their rules
// seeing `known`.
absl::StatusOr<CiJob> LoadExpandedJob(const std::string& path,
                                      std::string_view job_name,
                                      const std::string& project_dir,
                                      const CiIncludeVariables& known) {
  absl::StatusOr<std::string> text = ReadTextFile(path);
  if (!text.ok()) return text.status();
  const CiIncludes includes =
      ReadLocalIncludes(path, *text, project_dir, known);
  CiExpandOptions options;
  options.includes = &includes;
  const CiExpansion expansion = ExpandCiYaml(*text, options);
  if (!expansion.ok()) {
    std::string message = FormatDiagnostic(path, expansion.errors[0]);
    if (expansion.errors.size() > 1) {
      absl::StrAppend(&message, " (and ", expansion.errors.size() - 1,
                      " more: gdt-ci lint --file ", path, ")");
    }
    return absl::InvalidArgumentError(message);
  }
  absl::StatusOr<CiJob> job = ParseCiJob(expansion.text, job_name, &includes);
  if (!job.ok()) {
    return absl::Status(job.status().code(),
                        absl::StrCat(path, ": ", job.status().message()));
  }
  return job;
}

// Sets `key` in `job`'s variables, replacing an earlier value in place as
// GitLab does; the value is expanded like any other.
void SetVariable(CiJob* job, const std::string& key, const std::string& value) {
  job->raw_variables.erase(key);
  for (auto& [existing_key, existing_value] : job->variables) {
    if (existing_key == key) {
      existing_value = value;
      return;
    }
  }
  job->variables.emplace_back(key, value);
}

// The files of the project as GitLab's `rules:exists` sees the commit: in a
// git checkout the tracked and untracked-but-not-ignored ones, otherwise
// every file (run directories and .git left out); at most kMaxFiles.
std::vector<std::string> ProjectFiles(const fs::path& dir) {
  constexpr size_t kMaxFiles = 200000;
  std::vector<std::string> files;
  std::string output;
  absl::StatusOr<ExitStatus> listed = RunCommand(
      {"git", "-c", absl::StrCat("safe.directory=", dir.string()), "-C",
       dir.string(), "ls-files", "-z", "-co", "--exclude-standard"},
      std::chrono::seconds(30), &output);
  if (listed.ok() && listed->success()) {
    for (size_t start = 0; start < output.size() && files.size() < kMaxFiles;) {
      const size_t end = std::min(output.find('\0', start), output.size());
      if (end > start) files.push_back(output.substr(start, end - start));
      start = end + 1;
    }
    return files;
  }
  std::error_code error;
  for (auto it = fs::recursive_directory_iterator(
           dir, fs::directory_options::skip_permission_denied, error);
       !error && it != fs::recursive_directory_iterator() &&
       files.size() < kMaxFiles;
       it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (it->is_directory(error) && (name == ".git" || name == ".gdt-run")) {
      it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file(error)) {
      files.push_back(it->path().lexically_relative(dir).generic_string());
    }
  }
  return files;
}

// The project and commit a local pipeline runs for: the directory's name,
// and in a git checkout its HEAD commit and branch.
LocalPipeline DescribeProject(const fs::path& dir) {
  LocalPipeline out;
  out.project_name = dir.filename().string();
  if (out.project_name.empty()) out.project_name = "project";
  if (std::string sha = GitOutput(dir, {"rev-parse", "HEAD"});
      sha.size() == 40) {
    out.sha = sha;
    out.checkout_dir = dir.string();
    std::string ref = GitOutput(dir, {"rev-parse", "--abbrev-ref", "HEAD"});
    if (!ref.empty() && ref != "HEAD") out.ref = ref;
    // The author, and the committer's time in the committer's own offset
    // (GitLab's commit timestamp: `+00:00`, not `Z`, for UTC).
    const std::string commit =
        GitText(dir, {"log", "-1", "--format=%an <%ae>%n%cI"});
    const size_t author_end = commit.find('\n');
    if (author_end != std::string::npos) {
      out.commit_author = commit.substr(0, author_end);
      out.commit_timestamp = commit.substr(
          author_end + 1, commit.find('\n', author_end + 1) - author_end - 1);
      // The message as stored, its final newline included: what comes
      // after the commit object's headers.
      const std::string object = GitText(dir, {"cat-file", "commit", sha});
      if (const size_t body = object.find("\n\n"); body != std::string::npos) {
        out.commit_message = object.substr(body + 2);
      }
    }
    out.user_name = GitOutput(dir, {"config", "user.name"});
    out.user_email = GitOutput(dir, {"config", "user.email"});
  }
  if (const char* user = getenv("USER"); user != nullptr && *user != '\0') {
    out.user = user;
  }
  return out;
}

// The variables GitLab gives the rules of `include:` entries: the
// predefined ones of the project, the pipeline and its commit (not the
// job's, the runner's, or the pipeline's id and URL, which do not exist
// yet), and the pipeline's own (--var).
CiIncludeVariables IncludeVariables(
    LocalPipeline pipeline,
    const std::vector<std::pair<std::string, std::string>>& vars) {
  pipeline.pipeline_variables.clear();
  pipeline.id_token_signer = nullptr;
  CiJob top;
  top.name = "include";
  CiIncludeVariables known;
  known.complete = true;
  const std::vector<gitlab::JobVariable> variables =
      BuildPayloads(top, pipeline).front().variables;
  for (const gitlab::JobVariable& v : variables) {
    const bool not_yet =
        absl::StartsWith(v.key, "CI_JOB_") ||
        absl::StartsWith(v.key, "CI_NODE_") ||
        absl::StartsWith(v.key, "CI_RUNNER_") ||
        absl::StartsWith(v.key, "CI_TRACE") ||
        absl::StartsWith(v.key, "GITLAB_USER_") || v.key == "CI_PIPELINE_ID" ||
        v.key == "CI_PIPELINE_IID" || v.key == "CI_PIPELINE_URL" ||
        v.key == "CI_REPOSITORY_URL";
    if (!not_yet) known.predefined[v.key] = v.value;
  }
  for (const auto& [key, value] : vars) known.pipeline[key] = value;
  return known;
}

// The variables GitLab hands to `job`'s `rules:if`: the predefined ones,
// the file's and the pipeline's, the later winning.
ExpressionVariables RuleVariables(const CiJob& job, LocalPipeline pipeline) {
  pipeline.id_token_signer = nullptr;
  ExpressionVariables variables;
  const std::vector<gitlab::JobPayload> payloads = BuildPayloads(job, pipeline);
  for (const gitlab::JobVariable& v : payloads.front().variables) {
    variables[v.key] = v.value;
  }
  return variables;
}

// The variables of `job` that GitLab sends raw (`expand: false`), after
// every override (a rule's or the pipeline's variable of the same name is
// not raw).
std::set<std::string> RawVariables(const CiJob& job, LocalPipeline pipeline) {
  pipeline.id_token_signer = nullptr;
  std::set<std::string> raw;
  const std::vector<gitlab::JobPayload> payloads = BuildPayloads(job, pipeline);
  for (const gitlab::JobVariable& v : payloads.front().variables) {
    if (v.raw) {
      raw.insert(v.key);
    } else {
      raw.erase(v.key);
    }
  }
  return raw;
}

// Why GitLab would not create a job or pipeline with these rules ("" when
// it would); `*matched` is the rule that decides.
std::string RulesVerdict(const std::vector<CiRule>& rules,
                         const ExpressionVariables& variables,
                         const std::vector<std::string>& files,
                         const CiRule** matched) {
  const std::optional<size_t> index =
      FirstMatchingRule(rules, variables, files);
  if (!index.has_value()) return "rules: no rule matched";
  *matched = &rules[*index];
  if ((*matched)->when == "never") {
    return absl::StrCat("rules[", *index, "] has when: never");
  }
  return "";
}

// GitLab's expansion of text it expands when it creates a pipeline
// (`workflow:name`): `$NAME`, `${NAME}` and `%NAME%` become the variable's
// value, an unknown name nothing. The variables are expanded among
// themselves first, the same way except that `$$` and `%%` stay as they
// are in their values; a reference that goes round in a circle stops there.
// A variable in `raw` (`expand: false`) is not expanded itself: its value
// goes in as written, `$OTHER` and all.
std::string GitLabExpand(std::string_view text,
                         const ExpressionVariables& variables,
                         const std::set<std::string>& raw,
                         bool in_value = false, int depth = 0) {
  const auto name_char = [](char c, bool first) {
    return std::isalpha(static_cast<unsigned char>(c)) || c == '_' ||
           (!first && std::isdigit(static_cast<unsigned char>(c)));
  };
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c != '$' && c != '%') {
      out.push_back(c);
      continue;
    }
    if (in_value && i + 1 < text.size() && text[i + 1] == c) {
      out.append(2, c);
      ++i;
      continue;
    }
    size_t start = i + 1;
    const bool braced = c == '$' && start < text.size() && text[start] == '{';
    if (braced) ++start;
    size_t end = start;
    while (end < text.size() && name_char(text[end], end == start)) ++end;
    bool matched = end > start;
    size_t next = end;
    if (matched && (braced || c == '%')) {
      const char close = braced ? '}' : '%';
      matched = end < text.size() && text[end] == close;
      next = end + 1;
    }
    if (!matched) {
      out.push_back(c);
      continue;
    }
    const auto found =
        variables.find(std::string(text.substr(start, end - start)));
    if (found != variables.end()) {
      out += depth < 10 && raw.count(found->first) == 0
                 ? GitLabExpand(found->second, variables, raw,
                                /*in_value=*/true, depth + 1)
                 : found->second;
    }
    i = next - 1;
  }
  return out;
}

// Applies the rule that creates `job` to it: its when, allow_failure,
// variables and needs.
void ApplyRule(const CiRule& rule, CiJob* job) {
  if (rule.when.has_value()) job->when = *rule.when;
  // Under rules a manual job may fail only when something says so.
  if (rule.allow_failure.has_value() || !job->allow_failure_given) {
    job->allow_failure = rule.allow_failure.value_or(false);
    job->allow_failure_exit_codes.clear();
  }
  for (const auto& [key, value] : rule.variables) SetVariable(job, key, value);
  if (rule.needs.has_value()) {
    if (job->artifact_sources == job->needs) job->artifact_sources = rule.needs;
    job->needs = rule.needs;
  }
}

// Ruby's String#to_i: leading white space, a sign, then digits (an
// underscore between two of them allowed); 0 when there are none.
int64_t RubyToI(std::string_view text) {
  size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) {
    ++i;
  }
  bool negative = false;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) {
    negative = text[i] == '-';
    ++i;
  }
  int64_t value = 0;
  for (; i < text.size(); ++i) {
    if (text[i] == '_' && i > 0 &&
        std::isdigit(static_cast<unsigned char>(text[i - 1])) &&
        i + 1 < text.size() &&
        std::isdigit(static_cast<unsigned char>(text[i + 1]))) {
      continue;
    }
    if (!std::isdigit(static_cast<unsigned char>(text[i]))) break;
    // A depth past a billion is the whole history anyway.
    value = std::min<int64_t>(value * 10 + (text[i] - '0'), 1'000'000'000);
  }
  return negative ? -value : value;
}

std::string FormatSeconds(std::chrono::milliseconds duration) {
  return absl::StrFormat("%.1fs", static_cast<double>(duration.count()) / 1000);
}

// What RunMembers needs besides the payloads.
struct MemberRunContext {
  const fs::path* work_dir = nullptr;
  const fs::path* cache_dir = nullptr;
  const LocalSources* sources = nullptr;
  std::string executor;
  std::function<std::vector<std::string>(const char*)> exec_args;
  const std::optional<RunnerConfig>* from_file = nullptr;
  const RunLocalOptions* options = nullptr;
  std::ostream* out = nullptr;
  std::mutex* out_mu = nullptr;
  const std::atomic<int>* interrupts = nullptr;
  std::set<std::string>* log_names = nullptr;
  // Per payload: its job's `retry:` (max 0 when run-local is told not to
  // retry), and the payload of its retry with the given job id and retry
  // count (1 for the first retry).
  std::vector<CiRetry> retry;
  std::vector<std::function<gitlab::JobPayload(int64_t, int)>> retry_payload;
  // The next job id of a retry (GitLab gives it a new, higher id).
  std::atomic<int64_t>* next_retry_id = nullptr;
};

// One attempt of one member: its runner, log and result.
struct Attempt {
  std::unique_ptr<RunnerEmulator> runner;
  std::unique_ptr<std::ofstream> log;
  MemberResult member;
};

// Sets up the runner of one attempt at `payload`. Errors: InvalidArgument
// when its log cannot be written. It adds to ctx.log_names: callers beside
// other members' threads hold RunMembers' attempts_mu.
absl::StatusOr<Attempt> PrepareAttempt(const gitlab::JobPayload& payload,
                                       size_t slot,
                                       const MemberRunContext& ctx) {
  Attempt attempt;
  attempt.member.name = payload.name;
  attempt.member.job_id = payload.id;
  // Distinct names can share a slug (build:x, build-x), and a retry has its
  // job's name: the later ones get a number no slug has (slugs have no
  // dots).
  std::string slug = Slugify(payload.name);
  if (slug.empty()) slug = "job";
  std::string log_name = slug + ".log";
  for (int n = 2; !ctx.log_names->insert(log_name).second; ++n) {
    log_name = absl::StrCat(slug, ".", n, ".log");
  }
  attempt.member.log_path = (*ctx.work_dir / "logs" / log_name).string();
  attempt.log =
      std::make_unique<std::ofstream>(attempt.member.log_path, std::ios::trunc);
  if (!*attempt.log) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write ", attempt.member.log_path));
  }
  const RunLocalOptions& options = *ctx.options;
  RunnerEmulator::Options runner;
  if (ctx.from_file->has_value()) {
    runner.config = **ctx.from_file;
  } else {
    runner.config.config_exec = ctx.executor;
    runner.config.config_args = ctx.exec_args("config");
    runner.config.prepare_exec = ctx.executor;
    runner.config.prepare_args = ctx.exec_args("prepare");
    runner.config.run_exec = ctx.executor;
    runner.config.run_args = ctx.exec_args("run");
    runner.config.cleanup_exec = ctx.executor;
    runner.config.cleanup_args = ctx.exec_args("cleanup");
  }
  if (runner.config.builds_dir.empty()) {
    runner.config.builds_dir = (*ctx.work_dir / "builds").string();
  }
  if (runner.config.cache_dir.empty()) {
    runner.config.cache_dir = ctx.cache_dir->string();
  }
  runner.runner_command = options.runner_command;
  runner.config.concurrent_id = static_cast<int>(slot);
  runner.config.concurrent_project_id = static_cast<int>(slot);
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
  runner.job = payload;
  if (options.zero_pipeline_id) runner.job.pipeline_id = 0;
  runner.sources = *ctx.sources;
  const std::string prefix = absl::StrCat("[", payload.name, "] ");
  std::ofstream* log = attempt.log.get();
  std::ostream* out = ctx.out;
  std::mutex* out_mu = ctx.out_mu;
  runner.job_log = [out, out_mu, prefix, log](std::string_view line) {
    log->write(line.data(), static_cast<std::streamsize>(line.size()));
    log->put('\n');
    log->flush();
    std::lock_guard<std::mutex> lock(*out_mu);
    *out << prefix << WithoutSectionMarkers(line) << '\n';
    out->flush();
  };
  runner.diagnostics = [out, out_mu, prefix](std::string_view level,
                                             std::string_view line) {
    // Like a runner's own log: the cleanup stage, never the job log.
    if (level != "warn") return;
    std::lock_guard<std::mutex> lock(*out_mu);
    *out << prefix << "(runner warning) " << line << '\n';
  };
  attempt.runner = std::make_unique<RunnerEmulator>(std::move(runner));
  return attempt;
}

// Runs every member of the jobs started together (their `payloads`)
// concurrently, each through its own emulated gitlab-runner, each member
// again (with a new job id) while its job's `retry:` allows, and gives each
// payload's attempts, in order, in `attempts_out` (one entry per payload).
// Errors: InvalidArgument when a member's log cannot be written (nothing
// ran).
absl::Status RunMembers(const std::vector<gitlab::JobPayload>& payloads,
                        const MemberRunContext& ctx,
                        std::vector<std::vector<MemberResult>>* attempts_out) {
  // Guards the attempts' runners and log_names.
  std::mutex attempts_mu;
  std::vector<std::vector<Attempt>> slots(payloads.size());
  const auto add = [&](size_t slot, Attempt attempt) {
    slots[slot].push_back(std::move(attempt));
  };
  for (size_t i = 0; i < payloads.size(); ++i) {
    absl::StatusOr<Attempt> attempt = PrepareAttempt(payloads[i], i, ctx);
    if (!attempt.ok()) return attempt.status();
    add(i, *std::move(attempt));
  }
  const auto interrupted = [&] {
    return ctx.interrupts != nullptr && ctx.interrupts->load() > 0;
  };

  std::mutex done_mu;
  std::condition_variable done_cv;
  size_t done = 0;
  std::vector<std::thread> threads;
  for (size_t i = 0; i < slots.size(); ++i) {
    threads.emplace_back([&, i] {
      for (int retries = 0;; ++retries) {
        RunnerEmulator* runner = nullptr;
        {
          std::lock_guard<std::mutex> lock(attempts_mu);
          runner = slots[i].back().runner.get();
        }
        JobResult result = runner->Run();
        std::lock_guard<std::mutex> lock(attempts_mu);
        Attempt& last = slots[i].back();
        last.member.result = std::move(result);
        const JobResult& ended = last.member.result;
        if (interrupted() || !ShouldRetry(ctx.retry[i], ended, retries)) {
          break;
        }
        const int64_t id = ctx.next_retry_id->fetch_add(1);
        absl::StatusOr<Attempt> next =
            PrepareAttempt(ctx.retry_payload[i](id, retries + 1), i, ctx);
        {
          std::lock_guard<std::mutex> out_lock(*ctx.out_mu);
          *ctx.out << "[" << last.member.name << "] "
                   << "Job " << last.member.job_id << " failed ("
                   << ended.failure_reason << "); retry " << retries + 1
                   << " of " << ctx.retry[i].max << " as job " << id << "\n";
          if (!next.ok()) {
            *ctx.out << "[" << last.member.name << "] "
                     << next.status().message() << ": not retried\n";
          }
          ctx.out->flush();
        }
        if (!next.ok()) break;
        last.member.retried = true;
        add(i, *std::move(next));
      }
      std::lock_guard<std::mutex> lock(done_mu);
      ++done;
      done_cv.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lock(done_mu);
    bool aborted = false;
    while (done < slots.size()) {
      const int signals =
          ctx.interrupts == nullptr ? 0 : ctx.interrupts->load();
      done_cv.wait_for(lock, std::chrono::milliseconds(100));
      if (!aborted && signals >= 1) {
        aborted = true;
        // A slot that starts a retry checks for the signal under this lock.
        std::lock_guard<std::mutex> attempts_lock(attempts_mu);
        for (auto& attempts : slots) {
          attempts.back().runner->Cancel(CancelMode::kInterrupt);
        }
      }
      if (signals >= 2) {
        // The runners kill their execs now, and any they start after
        // (cleanup_exec too after a third signal).
        std::lock_guard<std::mutex> attempts_lock(attempts_mu);
        for (auto& attempts : slots) {
          attempts.back().runner->ForceKill(/*cleanup_too=*/signals >= 3);
        }
      }
    }
  }
  for (std::thread& thread : threads) thread.join();
  attempts_out->assign(slots.size(), {});
  for (size_t i = 0; i < slots.size(); ++i) {
    for (Attempt& attempt : slots[i]) {
      (*attempts_out)[i].push_back(std::move(attempt.member));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::pair<std::string, std::string>>>
ParsePipelineVars(const std::vector<std::string>& vars) {
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

std::string MemberResult::StatusText() const {
  if (!skipped.empty()) return "skipped";
  if (result.status != JobStatus::kFailed) {
    return std::string(JobStatusName(result.status));
  }
  if (retried) return "failed (retried)";
  if (allowed_failure) return "failed (allowed)";
  return "failed";
}

std::string RunLocalResult::Status() const {
  bool ran = false;
  bool failed = false;
  bool canceled = false;
  bool warnings = false;
  for (const MemberResult& member : members) {
    if (!member.skipped.empty() || member.retried) continue;
    ran = true;
    if (member.result.status == JobStatus::kCanceled) canceled = true;
    if (member.result.status == JobStatus::kFailed) {
      (member.allowed_failure ? warnings : failed) = true;
    }
  }
  if (failed) return "failed";
  if (canceled) return "canceled";
  if (!ran) return "skipped";
  return warnings ? "passed with warnings" : "passed";
}

bool RunLocalResult::success() const {
  const std::string status = Status();
  return status == "passed" || status == "passed with warnings";
}

bool ShouldRetry(const CiRetry& retry, const JobResult& result,
                 int retries_done) {
  if (result.status != JobStatus::kFailed || retries_done >= retry.max) {
    return false;
  }
  const std::vector<std::string> when = retry.when.value_or(
      retry.exit_codes.has_value() ? std::vector<std::string>{}
                                   : std::vector<std::string>{"always"});
  for (const std::string& reason : when) {
    if (reason == "always" || reason == result.failure_reason) return true;
  }
  // The runner reports an exit code for script failures only.
  return retry.exit_codes.has_value() &&
         result.failure_reason == "script_failure" &&
         std::find(retry.exit_codes->begin(), retry.exit_codes->end(),
                   result.exit_code) != retry.exit_codes->end();
}

bool FailureAllowed(const CiJob& job, const JobResult& result) {
  if (result.status != JobStatus::kFailed) return false;
  if (job.allow_failure) return true;
  return result.failure_reason == "script_failure" &&
         std::find(job.allow_failure_exit_codes.begin(),
                   job.allow_failure_exit_codes.end(),
                   result.exit_code) != job.allow_failure_exit_codes.end();
}

// The `cache:` entries as GitLab hands them to a runner (see BuildPayloads).
std::vector<gitlab::JobCache> PayloadCaches(const CiJob& job,
                                            const LocalPipeline& pipeline) {
  std::vector<gitlab::JobCache> caches;
  // path -> blob id of the commit's files, read once.
  std::optional<std::map<std::string, std::string>> blobs;
  const auto files_digest = [&](const std::vector<std::string>& files) {
    if (!blobs.has_value()) {
      blobs.emplace();
      if (!pipeline.checkout_dir.empty()) {
        const std::string listing = GitText(
            pipeline.checkout_dir,
            {"-c", "safe.directory=*", "ls-tree", "-r", "-z", pipeline.sha});
        for (absl::string_view line : absl::StrSplit(listing, '\0')) {
          // "<mode> blob <id>\t<path>"
          const size_t tab = line.find('\t');
          const size_t space = line.rfind(' ', tab);
          if (tab == absl::string_view::npos ||
              space == absl::string_view::npos)
            continue;
          (*blobs)[std::string(line.substr(tab + 1))] =
              std::string(line.substr(space + 1, tab - space - 1));
        }
      }
    }
    std::vector<std::string> ids;
    for (const std::string& file : files) {
      if (file.empty()) continue;
      if (file.find('*') == std::string::npos) {
        if (const auto it = blobs->find(file); it != blobs->end()) {
          ids.push_back(it->second);
        }
        continue;
      }
      for (const auto& [path, id] : *blobs) {
        if (fnmatch(file.c_str(), path.c_str(), 0) == 0) ids.push_back(id);
      }
    }
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    return ids.empty() ? std::string("default")
                       : Sha1Hex(absl::StrJoin(ids, "-"));
  };
  // key:files_commits: the last commit of each file up to the commit.
  const auto commits_digest = [&](const std::vector<std::string>& files) {
    std::vector<std::string> ids;
    for (const std::string& file : files) {
      if (file.empty() || pipeline.checkout_dir.empty()) continue;
      const std::string id = GitOutput(
          pipeline.checkout_dir, {"-c", "safe.directory=*", "log", "-1",
                                  "--format=%H", pipeline.sha, "--", file});
      if (!id.empty()) ids.push_back(id);
    }
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    return ids.empty() ? std::string("default")
                       : Sha1Hex(absl::StrJoin(ids, "-"));
  };
  for (size_t index = 0; index < job.caches.size(); ++index) {
    const CiCache& entry = job.caches[index];
    gitlab::JobCache cache;
    cache.key = entry.key;
    if (entry.key_files.has_value()) {
      const std::string prefix =
          entry.key_prefix.empty() ? std::to_string(index) : entry.key_prefix;
      cache.key = absl::StrCat(prefix, "-",
                               !entry.key_files->empty()
                                   ? files_digest(*entry.key_files)
                                   : commits_digest(entry.key_files_commits));
    }
    // GitLab keeps the caches of protected refs apart ("-protected",
    // unless `unprotect`); run-local's refs are not protected.
    const std::string suffix = "-non_protected";
    cache.key += suffix;
    for (const std::string& key : entry.fallback_keys) {
      cache.fallback_keys.push_back(key + suffix);
    }
    cache.untracked = entry.untracked;
    cache.policy = entry.policy;
    cache.paths = entry.paths;
    cache.when = entry.when;
    caches.push_back(std::move(cache));
  }
  return caches;
}

namespace {

// A Unix time as GitLab writes a job's start and a pipeline's creation:
// ISO 8601 in UTC, whole seconds, `Z`.
std::string GitLabUtcTime(int64_t unix_seconds) {
  const time_t t = static_cast<time_t>(unix_seconds);
  struct tm utc {};
  gmtime_r(&t, &utc);
  char text[32];
  strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

// Ruby's String#length (characters, not bytes) of UTF-8 text.
size_t RubyLength(std::string_view text) {
  return static_cast<size_t>(std::count_if(
      text.begin(), text.end(),
      [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

// Ruby's String#blank?: empty or white space only.
bool RubyBlank(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) {
    return std::isspace(static_cast<unsigned char>(c)) != 0 || c == '\0';
  });
}

// Ruby's String#chomp: one final "\n", "\r\n" or "\r" removed.
std::string RubyChomp(std::string text) {
  if (absl::EndsWith(text, "\r\n")) {
    text.resize(text.size() - 2);
  } else if (absl::EndsWith(text, "\n") || absl::EndsWith(text, "\r")) {
    text.pop_back();
  }
  return text;
}

// GitLab's CI_COMMIT_TITLE and CI_COMMIT_DESCRIPTION of a commit message:
// the title is the message up to its first line break ("No commit message"
// for a blank one); the description the message after its first "\n",
// one final line break removed, or the whole message when the title is
// 100 characters or longer.
std::pair<std::string, std::string> CommitTitleAndDescription(
    const std::string& message) {
  static constexpr char kNoMessage[] = "No commit message";
  const std::string title =
      RubyBlank(message) ? kNoMessage
                         : message.substr(0, message.find_first_of("\r\n"));
  if (RubyLength(title) >= 100) return {title, message};
  if (RubyBlank(message)) return {title, kNoMessage};
  const size_t newline = message.find('\n');
  return {title, newline == std::string::npos
                     ? ""
                     : RubyChomp(message.substr(newline + 1))};
}

}  // namespace

std::vector<gitlab::JobPayload> BuildPayloads(const CiJob& job,
                                              const LocalPipeline& pipeline) {
  std::vector<gitlab::JobPayload> payloads;
  const std::vector<gitlab::JobCache> caches = PayloadCaches(job, pipeline);
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
    // GitLab numbers every job with `parallel:`, `parallel: 1` included; a
    // matrix job is named after its values and numbered among them.
    const bool matrix = !job.matrix_name.empty();
    const bool numbered = job.parallel > 1 || job.parallel_given;
    p.name = matrix     ? job.matrix_name
             : numbered ? absl::StrCat(job.name, " ", i, "/", job.parallel)
                        : job.name;
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
    p.image = job.image;
    for (const auto& [hook, script] :
         {std::pair{"pre_get_sources_script", &job.pre_get_sources_script},
          std::pair{"post_get_sources_script", &job.post_get_sources_script}}) {
      if (!script->empty()) p.hooks.push_back({hook, *script});
    }
    for (const CiService& service : job.services) {
      p.services.push_back({service.name, service.alias, service.entrypoint,
                            service.command, service.variables});
    }

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
    // GitLab's server variables: the host without its port, the port
    // (the scheme's default when the URL has none), the host with a port
    // that is not the default, and the SSH host and port it offers.
    const std::string scheme = scheme_prefix.substr(
        0, scheme_prefix.size() >= 3 ? scheme_prefix.size() - 3 : 0);
    const std::string default_port = scheme == "https" ? "443" : "80";
    const size_t colon = host.rfind(':');
    const std::string bare_host =
        colon == std::string::npos ? host : host.substr(0, colon);
    const std::string port =
        colon == std::string::npos ? default_port : host.substr(colon + 1);
    add("CI_SERVER_HOST", bare_host);
    add("CI_SERVER_PORT", port);
    add("CI_SERVER_PROTOCOL", scheme);
    add("CI_SERVER_FQDN",
        port == default_port ? bare_host : absl::StrCat(bare_host, ":", port));
    add("CI_SERVER_NAME", "GitLab");
    // The server's release: the GitLab release of the runner run-local
    // follows (19.3.0), its revision named as the runner's is.
    add("CI_SERVER_VERSION", "19.3.0");
    add("CI_SERVER_VERSION_MAJOR", "19");
    add("CI_SERVER_VERSION_MINOR", "3");
    add("CI_SERVER_VERSION_PATCH", "0");
    add("CI_SERVER_REVISION", "gdtlocal");
    add("CI_SERVER_SHELL_SSH_HOST", bare_host);
    add("CI_SERVER_SHELL_SSH_PORT", "22");
    add("CI_API_V4_URL", pipeline.server_url + "/api/v4");
    add("CI_API_GRAPHQL_URL", pipeline.server_url + "/api/graphql");
    // Sent by every GitLab, whatever it offers. The server run-local plays
    // has no container registry, no pages and no dependency proxy, so, as
    // from a GitLab with them off, CI_REGISTRY, CI_REGISTRY_IMAGE, CI_PAGES_*
    // and CI_DEPENDENCY_PROXY_* are not sent.
    add("CI_TEMPLATE_REGISTRY_HOST", "registry.gitlab.com");
    // The project: a private project of run-local's server in a namespace
    // of id 1, with no description, topics or classification label (GitLab
    // sends those empty), on a GitLab without a license (no features).
    // GitLab fills CI_PROJECT_REPOSITORY_LANGUAGES from its own language
    // detection of the repository (Linguist's rules, kept up to date as
    // commits come); run-local does not guess it from file names, so it is
    // empty, as GitLab sends it for a project whose languages it has not
    // detected. A pipeline variable (--var) of the name replaces it.
    const std::string root_namespace = pipeline.namespace_path.substr(
        0, std::min(pipeline.namespace_path.find('/'),
                    pipeline.namespace_path.size()));
    add("GITLAB_FEATURES", "");
    add("CI_PROJECT_ID", std::to_string(pipeline.project_id));
    add("CI_PROJECT_NAME", pipeline.project_name);
    add("CI_PROJECT_TITLE", pipeline.project_name);
    add("CI_PROJECT_DESCRIPTION", "");
    add("CI_PROJECT_NAMESPACE", pipeline.namespace_path);
    add("CI_PROJECT_NAMESPACE_SLUG", Slugify(pipeline.namespace_path));
    add("CI_PROJECT_NAMESPACE_ID", "1");
    add("CI_PROJECT_ROOT_NAMESPACE", root_namespace);
    add("CI_PROJECT_ROOT_NAMESPACE_SLUG", Slugify(root_namespace));
    add("CI_PROJECT_VISIBILITY", "private");
    add("CI_PROJECT_REPOSITORY_LANGUAGES", "");
    add("CI_PROJECT_TOPICS", "");
    add("CI_PROJECT_CLASSIFICATION_LABEL", "");
    add("CI_CONFIG_PATH", ".gitlab-ci.yml");
    // The full reference of the pipeline's configuration.
    add("CI_CONFIG_REF_URI",
        absl::StrCat(port == default_port ? bare_host
                                          : absl::StrCat(bare_host, ":", port),
                     "/", project_path, "//.gitlab-ci.yml@refs/heads/",
                     pipeline.ref));
    add("CI_PROJECT_PATH", project_path);
    add("CI_PROJECT_PATH_SLUG", Slugify(project_path));
    add("CI_PROJECT_URL", project_url);
    add("CI_DEFAULT_BRANCH", pipeline.ref);
    add("CI_DEFAULT_BRANCH_SLUG", ref_slug);
    add("CI_PIPELINE_ID", std::to_string(pipeline.pipeline_id));
    add("CI_PIPELINE_IID", std::to_string(pipeline.pipeline_id % 100000));
    add("CI_PIPELINE_SOURCE", "push");
    add("CI_PIPELINE_URL",
        absl::StrCat(project_url, "/-/pipelines/", pipeline.pipeline_id));
    // Times as GitLab writes them (UTC, whole seconds): the job starts when
    // its payload is made, the pipeline was created when run-local started.
    const int64_t started = pipeline.now_unix > 0
                                ? pipeline.now_unix
                                : static_cast<int64_t>(time(nullptr));
    const std::string started_at = GitLabUtcTime(started);
    add("CI_PIPELINE_CREATED_AT",
        GitLabUtcTime(pipeline.created_unix > 0 ? pipeline.created_unix
                                                : started));
    // GitLab sends the name empty when workflow:name gives none.
    add("CI_PIPELINE_NAME", pipeline.pipeline_name);
    add("CI_JOB_ID", std::to_string(p.id));
    add("CI_JOB_NAME", p.name);
    add("CI_JOB_NAME_SLUG", Slugify(p.name));
    add("CI_JOB_GROUP_NAME", job.name);
    add("CI_JOB_STAGE", job.stage);
    add("CI_JOB_STARTED_AT", started_at);
    add("CI_JOB_STARTED_AT_SLUG", Slugify(started_at));
    add("CI_JOB_RETRY_COUNT", std::to_string(pipeline.retry_count));
    // The job's `tags:` as a JSON array, written as GitLab writes the
    // runner's (`["a", "b"]`).
    std::vector<std::string> quoted_tags;
    for (const std::string& tag : job.tags) {
      quoted_tags.push_back(nlohmann::json(tag).dump());
    }
    add("CI_JOB_TAGS",
        absl::StrCat("[", absl::StrJoin(quoted_tags, ", "), "]"));
    // W3C trace context: the pipeline as a zero-padded 32-digit trace id;
    // the span a hash of the pipeline and job ids (GitLab's own hash is
    // not documented, so the span ids differ from GitLab's).
    add("CI_TRACEPARENT",
        absl::StrFormat("00-%032x-%s-01",
                        static_cast<uint64_t>(pipeline.pipeline_id),
                        Sha256Hex(absl::StrCat(pipeline.pipeline_id, ":", p.id))
                            .substr(0, 16)));
    add("CI_TRACESTATE",
        absl::StrCat("gitlab=pipeline:", pipeline.pipeline_id, ";job:", p.id));
    add("CI_JOB_TOKEN", p.token, /*is_public=*/false, /*masked=*/true);
    add("CI_REGISTRY_USER", "gitlab-ci-token");
    add("CI_REGISTRY_PASSWORD", p.token, /*is_public=*/false, /*masked=*/true);
    add("CI_JOB_URL", absl::StrCat(project_url, "/-/jobs/", p.id));
    if (matrix) {
      add("CI_NODE_INDEX", std::to_string(job.matrix_index));
      add("CI_NODE_TOTAL", std::to_string(job.matrix_total));
    } else {
      if (numbered) add("CI_NODE_INDEX", std::to_string(i));
      add("CI_NODE_TOTAL", std::to_string(job.parallel));
    }
    add("CI_COMMIT_SHA", pipeline.sha);
    add("CI_COMMIT_BEFORE_SHA", p.before_sha);
    add("CI_COMMIT_REF_PROTECTED", "false");  // As the cache keys say.
    add("CI_COMMIT_SHORT_SHA", pipeline.sha.substr(0, 8));
    add("CI_COMMIT_REF_NAME", pipeline.ref);
    add("CI_COMMIT_REF_SLUG", ref_slug);
    add("CI_COMMIT_BRANCH", pipeline.ref);
    if (!pipeline.commit_timestamp.empty()) {
      // GitLab cuts a message longer than 100,000 bytes (and the title and
      // description made from it) to that many bytes.
      static constexpr size_t kMaxMessageBytes = 100000;
      const bool truncated = pipeline.commit_message.size() > kMaxMessageBytes;
      const auto cut = [truncated](std::string text) {
        if (truncated && text.size() > kMaxMessageBytes) {
          text.resize(kMaxMessageBytes);
        }
        return text;
      };
      const auto [title, description] =
          CommitTitleAndDescription(pipeline.commit_message);
      add("CI_COMMIT_MESSAGE", cut(pipeline.commit_message));
      add("CI_COMMIT_MESSAGE_IS_TRUNCATED", truncated ? "true" : "false");
      add("CI_COMMIT_TITLE", cut(title));
      add("CI_COMMIT_DESCRIPTION", cut(description));
      add("CI_COMMIT_TIMESTAMP", pipeline.commit_timestamp);
      add("CI_COMMIT_AUTHOR", pipeline.commit_author);
      // Empty unless the author's public profile matches the commit's
      // email, which run-local's server has none of.
      add("CI_COMMIT_USER_LOGIN", "");
    }
    add("CI_RUNNER_ID", "1");
    add("CI_RUNNER_DESCRIPTION", "gdt-ci run-local");
    add("CI_RUNNER_TAGS", "[]");
    add("CI_REPOSITORY_URL", p.repo_url, /*is_public=*/false);
    add("GITLAB_USER_ID", "1");
    add("GITLAB_USER_EMAIL", pipeline.user_email.empty()
                                 ? absl::StrCat(pipeline.user, "@", bare_host)
                                 : pipeline.user_email);
    add("GITLAB_USER_LOGIN", pipeline.user);
    add("GITLAB_USER_NAME",
        pipeline.user_name.empty() ? pipeline.user : pipeline.user_name);
    for (const auto& [key, value] : job.variables) {
      add(key, value);
      // `expand: false`: GitLab sends the variable raw, and the runner
      // passes its value without expanding `$NAME` in it.
      p.variables.back().raw = job.raw_variables.count(key) != 0;
    }
    for (const auto& [key, value] : pipeline.dotenv_variables) {
      add(key, value);
    }
    for (const auto& [key, value] : pipeline.pipeline_variables) {
      add(key, value);
    }
    // GitLab's git depth: the job's GIT_DEPTH, as Ruby's to_i reads it (0,
    // or anything not a number, fetches the whole history), else the
    // project's default of 20.
    for (auto it = p.variables.rbegin(); it != p.variables.rend(); ++it) {
      if (it->key == "GIT_DEPTH") {
        p.depth = RubyToI(it->value);
        break;
      }
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
    if (!job.artifacts.dotenv.empty()) {
      gitlab::JobArtifact report;
      report.name = ".env";
      report.paths = job.artifacts.dotenv;
      report.when = "always";
      report.artifact_type = "dotenv";
      report.artifact_format = "gzip";
      report.expire_in = job.artifacts.expire_in;
      p.artifacts.push_back(std::move(report));
    }
    p.caches = caches;
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
      ParsePipelineVars(options.vars);
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
  // The project and commit, for the rules of include: entries now and the
  // jobs' variables later.
  std::error_code error;
  const fs::path project_dir = fs::canonical(options.project_dir, error);
  const bool project_dir_ok = !error && fs::is_directory(project_dir);
  const LocalPipeline described =
      project_dir_ok ? DescribeProject(project_dir) : LocalPipeline();
  const CiIncludeVariables include_variables =
      IncludeVariables(described, *vars);
  for (const std::string& name : job_names) {
    absl::StatusOr<CiJob> job = LoadExpandedJob(
        options.ci_file, name, options.project_dir, include_variables);
    if (!job.ok()) return job.status();
    // GitLab creates a job per matrix entry, each with its variables.
    const std::vector<CiMatrixJob> matrix = std::move(job->matrix);
    if (matrix.empty()) jobs.push_back(*std::move(job));
    for (size_t m = 0; m < matrix.size(); ++m) {
      CiJob one = *job;
      one.matrix_name = matrix[m].name;
      one.matrix_index = static_cast<int>(m) + 1;
      one.matrix_total = static_cast<int>(matrix.size());
      for (const auto& [key, value] : matrix[m].variables) {
        SetVariable(&one, key, value);
      }
      jobs.push_back(std::move(one));
    }
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
  if (!project_dir_ok) {
    return absl::NotFoundError(absl::StrCat(
        "project directory '", options.project_dir, "' does not exist"));
  }

  LocalPipeline pipeline = described;
  pipeline.created_unix = static_cast<int64_t>(time(nullptr));
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
  if (options.timeout_seconds.has_value() &&
      (*options.timeout_seconds <= 0 ||
       *options.timeout_seconds > kMaxTimeoutSeconds)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--timeout must be from 1 to ", kMaxTimeoutSeconds));
  }
  if (options.maximum_timeout_seconds.has_value() &&
      (*options.maximum_timeout_seconds <= 0 ||
       *options.maximum_timeout_seconds > kMaxTimeoutSeconds)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--maximum-timeout must be from 1 to ", kMaxTimeoutSeconds));
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

  // GitLab creates the pipeline only when `workflow:rules` lets it, and
  // each job only when its `rules:` do.
  absl::StatusOr<std::string> ci_text = ReadTextFile(options.ci_file);
  if (!ci_text.ok()) return ci_text.status();
  const CiIncludes includes = ReadLocalIncludes(
      options.ci_file, *ci_text, project_dir.string(), include_variables);
  absl::StatusOr<CiWorkflow> workflow =
      LoadCiWorkflow(options.ci_file, &includes);
  if (!workflow.ok()) return workflow.status();
  std::optional<std::vector<std::string>> files;
  const auto project_files = [&]() -> const std::vector<std::string>& {
    if (!files.has_value()) files = ProjectFiles(project_dir);
    return *files;
  };
  const auto needs_files = [](const std::vector<CiRule>& rules) {
    return std::any_of(rules.begin(), rules.end(),
                       [](const CiRule& rule) { return rule.has_exists; });
  };
  static const std::vector<std::string> kNoFiles;
  // The pipeline's variables (the predefined ones, the top-level ones, then
  // --var), none of a job's.
  CiJob top;
  top.name = "workflow";
  top.variables = workflow->variables;
  top.raw_variables = workflow->raw_variables;
  const auto pipeline_variables = [&pipeline, &top] {
    ExpressionVariables variables = RuleVariables(top, pipeline);
    for (auto it = variables.begin(); it != variables.end();) {
      const bool per_job = absl::StartsWith(it->first, "CI_JOB_") ||
                           absl::StartsWith(it->first, "CI_NODE_") ||
                           absl::StartsWith(it->first, "CI_TRACE");
      if (per_job) {
        variables.erase(it++);
      } else {
        ++it;
      }
    }
    return variables;
  };
  if (workflow->rules.has_value()) {
    ExpressionVariables variables = pipeline_variables();
    const CiRule* rule = nullptr;
    const std::string why = RulesVerdict(
        *workflow->rules, variables,
        needs_files(*workflow->rules) ? project_files() : kNoFiles, &rule);
    if (!why.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          options.ci_file, ": GitLab would not create this pipeline (workflow:",
          why, "; the pipeline's CI_PIPELINE_SOURCE is push, on branch ",
          pipeline.ref, "; --var NAME=VALUE sets variables)"));
    }
    for (CiJob& job : jobs) {
      for (const auto& [key, value] : rule->variables) {
        if (job.own_variables.count(key) == 0) SetVariable(&job, key, value);
      }
    }
    for (const auto& [key, value] : rule->variables) {
      SetVariable(&top, key, value);
    }
  }
  // GitLab names the pipeline from `workflow:name`, expanded against the
  // pipeline's variables (the workflow rule's included) and stripped; a
  // blank result leaves it unnamed.
  if (workflow->name.has_value()) {
    const std::string name = std::string(absl::StripAsciiWhitespace(
        GitLabExpand(*workflow->name, pipeline_variables(),
                     RawVariables(top, pipeline))));
    if (RubyLength(name) > 255) {
      return absl::InvalidArgumentError(absl::StrCat(
          options.ci_file,
          ": Failed to build pipeline metadata! Name is too long (maximum is "
          "255 characters)"));
    }
    pipeline.pipeline_name = name;
  }
  std::vector<std::string> not_created(jobs.size());
  for (size_t k = 0; k < jobs.size(); ++k) {
    CiJob& job = jobs[k];
    if (!job.rules.has_value()) {
      const ExpressionVariables variables = RuleVariables(job, pipeline);
      CiRefPolicy branches_and_tags;
      branches_and_tags.refs = {"branches", "tags"};
      if (!RefPolicyMatches(job.only.value_or(branches_and_tags), variables)) {
        not_created[k] = job.only.has_value()
                             ? "only: not this pipeline"
                             : "only: branches and tags (the default), and "
                               "this pipeline is for neither";
      } else if (job.except.has_value() &&
                 RefPolicyMatches(*job.except, variables)) {
        not_created[k] = "except: this pipeline";
      }
      continue;
    }
    const CiRule* rule = nullptr;
    not_created[k] = RulesVerdict(
        *job.rules, RuleVariables(job, pipeline),
        needs_files(*job.rules) ? project_files() : kNoFiles, &rule);
    if (not_created[k].empty()) ApplyRule(*rule, &job);
  }
  if (std::all_of(not_created.begin(), not_created.end(),
                  [](const std::string& why) { return !why.empty(); })) {
    std::vector<std::string> whys;
    for (size_t k = 0; k < jobs.size(); ++k) {
      const CiJob& job = jobs[k];
      whys.push_back(
          absl::StrCat(job.matrix_name.empty() ? job.name : job.matrix_name,
                       ": ", not_created[k]));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        options.ci_file, ": GitLab would create none of these jobs (",
        absl::StrJoin(whys, "; "), "; the pipeline's CI_PIPELINE_SOURCE is ",
        "push, on branch ", pipeline.ref,
        "; --var NAME=VALUE sets variables)"));
  }

  fs::path work_dir =
      options.work_dir.empty()
          ? project_dir / ".gdt-run" / std::to_string(pipeline.pipeline_id)
          : fs::path(options.work_dir);
  if (work_dir.is_relative()) work_dir = project_dir / work_dir;
  work_dir = work_dir.lexically_normal();
  // The runner's cache_dir outlives its jobs: by default it is shared by
  // the runs of the project (.gdt-run/cache), so that a later run finds
  // what an earlier one cached; with --work-dir it is the one there.
  const fs::path cache_dir = options.work_dir.empty()
                                 ? project_dir / ".gdt-run" / "cache"
                                 : work_dir / "cache";
  for (const fs::path& dir : {work_dir / "logs", work_dir / "builds", cache_dir,
                              work_dir / "artifacts"}) {
    fs::create_directories(dir, error);
    if (error) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot create ", dir.string(), ": ", error.message()));
    }
  }
  // The artifact store stands in for GitLab's artifact server. It is
  // run-local's alone: before each upload the emulated runner makes the
  // job's directories there and hands them to the job's account
  // (RunnerEmulator), so that no job can put files under another job's id.
  // (It was world-writable once; a store kept from then is closed.)
  fs::permissions(work_dir / "artifacts",
                  fs::perms::owner_all | fs::perms::group_read |
                      fs::perms::group_exec | fs::perms::others_read |
                      fs::perms::others_exec,
                  error);

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
    // Its dotenv report's variables (as GitLab took them).
    std::vector<std::pair<std::string, std::string>> dotenv;
    int stage = 0;  // Its place in stage_of.
  };
  std::vector<Ran> ran;
  std::set<std::string> log_names;  // Of the logs/ of this pipeline.
  // Every job's members get ids up front, as GitLab creates a pipeline's
  // jobs at once; retries get the ids after them.
  const int64_t first_id = pipeline.first_job_id > 0
                               ? pipeline.first_job_id
                               : pipeline.pipeline_id * 1000;
  int64_t all_members = 0;
  for (const CiJob& job : jobs) all_members += job.parallel;
  std::atomic<int64_t> next_retry_id{first_id + all_members + 1};
  // The stage of each job: consecutive jobs of the same stage share one.
  std::vector<int> stage_of(jobs.size(), 0);
  for (size_t k = 1; k < jobs.size(); ++k) {
    stage_of[k] = stage_of[k - 1] + (jobs[k].stage != jobs[k - 1].stage);
  }
  // Which job each entry of result.members belongs to.
  std::vector<size_t> job_of_member;
  int64_t job_id_base = 0;
  // GitLab starts the jobs of a stage together: each group of consecutive
  // jobs of one stage runs at once, except that a job which needs one of
  // the group's jobs waits for it (and starts the next group).
  for (size_t group_start = 0; group_start < jobs.size();) {
    size_t group_end = group_start + 1;
    const auto needs_in_group = [&](size_t j) {
      if (!jobs[j].needs.has_value()) return false;
      for (size_t g = group_start; g < j; ++g) {
        if (std::find(jobs[j].needs->begin(), jobs[j].needs->end(),
                      jobs[g].name) != jobs[j].needs->end()) {
          return true;
        }
      }
      return false;
    };
    while (group_end < jobs.size() &&
           stage_of[group_end] == stage_of[group_start] &&
           !needs_in_group(group_end)) {
      ++group_end;
    }

    // Each job of the group: skipped (with its members), or its payloads
    // among the group's.
    struct GroupJob {
      size_t k = 0;
      std::vector<MemberResult> skipped;
      size_t first_payload = 0;
      size_t payloads = 0;
    };
    std::vector<GroupJob> group;
    std::vector<gitlab::JobPayload> group_payloads;
    std::vector<CiRetry> group_retry;
    std::vector<std::function<gitlab::JobPayload(int64_t, int)>>
        group_retry_payload;
    for (size_t k = group_start; k < group_end; ++k) {
      const CiJob& job = jobs[k];
      // GitLab's job timeout: the job's `timeout:`, else the project's;
      // the runner's maximum timeout wins over a longer one.
      pipeline.timeout_seconds =
          job.timeout_seconds.value_or(options.timeout_seconds.value_or(3600));
      if (options.maximum_timeout_seconds.has_value()) {
        pipeline.timeout_seconds = std::min(pipeline.timeout_seconds,
                                            *options.maximum_timeout_seconds);
      }
      pipeline.job_id_base = job_id_base;
      job_id_base += job.parallel;
      // The jobs whose artifacts it downloads (without dependencies: or
      // needs:, every job of the earlier stages, not of its own) give it
      // their dotenv reports too, member after member.
      const auto downloads = [&job, stage = stage_of[k]](const Ran& earlier) {
        if (!job.artifact_sources.has_value()) return earlier.stage < stage;
        return std::find(job.artifact_sources->begin(),
                         job.artifact_sources->end(),
                         earlier.job) != job.artifact_sources->end();
      };
      pipeline.dotenv_variables.clear();
      for (const Ran& earlier : ran) {
        if (!downloads(earlier)) continue;
        pipeline.dotenv_variables.insert(pipeline.dotenv_variables.end(),
                                         earlier.dotenv.begin(),
                                         earlier.dotenv.end());
      }
      std::vector<gitlab::JobPayload> payloads = BuildPayloads(job, pipeline);
      for (gitlab::JobPayload& payload : payloads) {
        for (const Ran& earlier : ran) {
          if (downloads(earlier)) {
            payload.dependencies.push_back(earlier.dependency);
          }
        }
      }

      // GitLab's decision from the jobs before it: those of earlier
      // stages, or with `needs:` the needed ones (among those this run
      // has).
      bool earlier_failed = false;
      for (size_t m = 0; m < result.members.size(); ++m) {
        const MemberResult& member = result.members[m];
        const CiJob& earlier = jobs[job_of_member[m]];
        const bool relevant =
            job.needs.has_value()
                ? std::find(job.needs->begin(), job.needs->end(),
                            earlier.name) != job.needs->end()
                : stage_of[job_of_member[m]] < stage_of[k];
        if (relevant && member.skipped.empty() && !member.retried &&
            member.result.status != JobStatus::kSuccess &&
            !member.allowed_failure) {
          earlier_failed = true;
        }
      }
      const std::string before =
          job.needs.has_value() ? "a job it needs" : "an earlier stage";
      std::string skipped;
      if (!not_created[k].empty()) {
        skipped = absl::StrCat("not created: ", not_created[k]);
      } else if (job.when == "on_failure" && !earlier_failed) {
        skipped = absl::StrCat("when: on_failure: no failure in ", before);
      } else if (job.when != "on_failure" && job.when != "always" &&
                 earlier_failed) {
        skipped = absl::StrCat("when: ", job.when, ": ", before, " failed");
      }
      GroupJob entry;
      entry.k = k;
      if (!skipped.empty()) {
        for (const gitlab::JobPayload& payload : payloads) {
          MemberResult member;
          member.name = payload.name;
          member.job_id = payload.id;
          member.skipped = skipped;
          entry.skipped.push_back(std::move(member));
          std::lock_guard<std::mutex> lock(out_mu);
          out << "[" << payload.name << "] Skipped (" << skipped << ")\n";
        }
        group.push_back(std::move(entry));
        continue;
      }
      entry.first_payload = group_payloads.size();
      entry.payloads = payloads.size();
      for (size_t member = 0; member < payloads.size(); ++member) {
        group_retry.push_back(options.no_retry ? CiRetry{} : job.retry);
        // A retry is the same member as a new job: new id and token, the
        // same dependencies.
        group_retry_payload.push_back(
            [&jobs, k, member, first_id, again = pipeline,
             dependencies = payloads[member].dependencies](int64_t id,
                                                           int retry_count) {
              LocalPipeline pipeline_again = again;
              pipeline_again.retry_count = retry_count;
              pipeline_again.job_id_base =
                  id - first_id - static_cast<int64_t>(member) - 1;
              gitlab::JobPayload payload =
                  BuildPayloads(jobs[k], pipeline_again)[member];
              payload.dependencies = dependencies;
              return payload;
            });
        group_payloads.push_back(std::move(payloads[member]));
      }
      group.push_back(std::move(entry));
    }

    std::vector<std::vector<MemberResult>> attempts;
    if (!group_payloads.empty()) {
      MemberRunContext ctx;
      ctx.work_dir = &work_dir;
      ctx.cache_dir = &cache_dir;
      ctx.sources = &sources;
      ctx.executor = executor;
      ctx.exec_args = exec_args;
      ctx.from_file = &from_file;
      ctx.options = &options;
      ctx.out = &out;
      ctx.out_mu = &out_mu;
      ctx.interrupts = interrupts;
      ctx.log_names = &log_names;
      ctx.retry = std::move(group_retry);
      ctx.retry_payload = std::move(group_retry_payload);
      ctx.next_retry_id = &next_retry_id;
      if (absl::Status ran_members = RunMembers(group_payloads, ctx, &attempts);
          !ran_members.ok()) {
        return ran_members;
      }
    }

    // The group's members in job order.
    for (GroupJob& entry : group) {
      const CiJob& job = jobs[entry.k];
      for (MemberResult& member : entry.skipped) {
        result.members.push_back(std::move(member));
        job_of_member.push_back(entry.k);
      }
      for (size_t p = entry.first_payload;
           p < entry.first_payload + entry.payloads; ++p) {
        for (MemberResult& attempt : attempts[p]) {
          result.members.push_back(std::move(attempt));
          job_of_member.push_back(entry.k);
          MemberResult& member = result.members.back();
          if (member.retried) continue;
          member.allowed_failure = FailureAllowed(job, member.result);
          gitlab::JobDependency dependency;
          dependency.id = member.job_id;
          dependency.token = absl::StrCat("glcbt-local-", member.job_id);
          dependency.name = member.name;
          std::error_code ignored;
          if (fs::is_directory(
                  work_dir / "artifacts" / std::to_string(member.job_id),
                  ignored)) {
            dependency.artifacts_filename = "artifacts.zip";
          }
          Ran done{job.name, dependency, {}, stage_of[entry.k]};
          // The emulated runner's upload already refused a bad report.
          if (!job.artifacts.dotenv.empty()) {
            absl::StatusOr<std::vector<std::pair<std::string, std::string>>>
                dotenv = ReadDotenvReport(
                    DotenvReportDir(sources.artifact_store, member.job_id));
            if (dotenv.ok()) done.dotenv = *std::move(dotenv);
          }
          ran.push_back(std::move(done));
        }
      }
    }
    // A stopped pipeline starts nothing more.
    if (interrupts != nullptr && interrupts->load() > 0) break;
    group_start = group_end;
  }
  return result;
}

std::string FormatSummary(const RunLocalResult& result, bool json) {
  if (json) {
    nlohmann::ordered_json doc;
    doc["pipeline_id"] = result.pipeline_id;
    doc["work_dir"] = result.work_dir;
    doc["status"] = result.Status();
    doc["success"] = result.success();
    doc["members"] = nlohmann::ordered_json::array();
    for (const MemberResult& m : result.members) {
      const bool ran = m.skipped.empty();
      doc["members"].push_back(
          {{"name", m.name},
           {"job_id", m.job_id},
           {"status",
            ran ? std::string(JobStatusName(m.result.status)) : "skipped"},
           {"failure_reason", ran ? m.result.failure_reason : ""},
           {"exit_code", ran ? m.result.exit_code : 0},
           {"allowed_failure", m.allowed_failure},
           {"retried", m.retried},
           {"skipped_reason", m.skipped},
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
      &text, absl::StrFormat("%-*s  %-12s  %-16s  %-22s  %s\n",
                             static_cast<int>(name_width), "member", "job id",
                             "status", "failure reason", "duration"));
  for (const MemberResult& m : result.members) {
    std::string reason =
        m.skipped.empty() ? m.result.failure_reason : m.skipped;
    absl::StrAppend(
        &text,
        absl::StrFormat(
            "%-*s  %-12d  %-16s  %-22s  %s\n", static_cast<int>(name_width),
            m.name, m.job_id, m.StatusText(), reason.empty() ? "-" : reason,
            m.skipped.empty() ? FormatSeconds(m.result.duration) : "-"));
  }
  absl::StrAppend(&text, absl::StrFormat("pipeline %d %s\n", result.pipeline_id,
                                         result.Status()));
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
