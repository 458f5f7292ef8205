#include "executor/job_env.h"

#include <initializer_list>
#include <limits>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/gang_limits.h"
#include "common/terminal_text.h"
#include "executor/env_contract.h"

namespace gdt::executor {
namespace {

constexpr absl::string_view kJobVariablePrefix = "CUSTOM_ENV_";

std::string Get(const Environment& environment, const std::string& key) {
  auto it = environment.find(key);
  return it == environment.end() ? std::string() : it->second;
}

int ExitCodeFrom(const Environment& environment, const std::string& key,
                 int fallback, std::vector<std::string>& warnings) {
  auto it = environment.find(key);
  int code = 0;
  if (it != environment.end() && absl::SimpleAtoi(it->second, &code) &&
      code >= 0 && code <= 255) {
    return code;
  }
  warnings.push_back(absl::StrCat(
      key, it == environment.end() ? " is not set" : " is not an exit code",
      ", using ", fallback));
  return fallback;
}

// Parses an optional integer job variable in [min, max]; `fallback` when the
// variable is unset or empty.
absl::StatusOr<int64_t> IntVariable(const JobEnv& env, std::string_view key,
                                    int64_t fallback, int64_t min,
                                    int64_t max) {
  std::optional<std::string> value = env.JobVariable(key);
  if (!value.has_value() || value->empty()) return fallback;
  int64_t parsed = 0;
  if (!absl::SimpleAtoi(*value, &parsed) || parsed < min || parsed > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(key), " must be an integer from ", min, " to ",
                     max, ", not '", *value, "'"));
  }
  return parsed;
}

absl::StatusOr<int64_t> PipelineId(const JobEnv& env,
                                   const gitlab::JobPayload& payload) {
  // Runners from 19 on always send job_info.pipeline_id, as 0 when GitLab
  // did not fill it: 0 is "unknown", never a pipeline, or gangs of different
  // pipelines would share the key 0.
  if (payload.pipeline_id.has_value() && *payload.pipeline_id > 0) {
    return *payload.pipeline_id;
  }
  if (payload.pipeline_id.has_value() && *payload.pipeline_id < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("job_info.pipeline_id must be a positive integer (or 0 "
                     "for unknown), not ",
                     *payload.pipeline_id));
  }
  std::optional<std::string> value = payload.Variable("CI_PIPELINE_ID");
  std::string source = "the job payload's CI_PIPELINE_ID";
  if (!value.has_value()) {
    value = env.JobVariable("CI_PIPELINE_ID");
    source = "CI_PIPELINE_ID";
  }
  if (!value.has_value()) {
    return absl::InvalidArgumentError(
        "the job has no pipeline id (job_info.pipeline_id is absent or 0 "
        "and there is no CI_PIPELINE_ID)");
  }
  int64_t id = 0;
  if (!absl::SimpleAtoi(*value, &id) || id <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, " must be a positive integer, not '", *value, "'"));
  }
  return id;
}

}  // namespace

std::optional<std::string> JobEnv::JobVariable(std::string_view key) const {
  auto it = job_variables.find(std::string(key));
  if (it == job_variables.end()) return std::nullopt;
  return it->second;
}

std::string JobEnv::MemberStatePath() const {
  return absl::StrCat(tmpdir.empty() ? "/tmp" : tmpdir, "/gdt-member.json");
}

JobEnv ReadJobEnv(const Environment& environment) {
  JobEnv env;
  env.tmpdir = Get(environment, "TMPDIR");
  env.job_response_file = Get(environment, "JOB_RESPONSE_FILE");
  env.exit_codes.build_failure =
      ExitCodeFrom(environment, "BUILD_FAILURE_EXIT_CODE", 1, env.warnings);
  env.exit_codes.system_failure =
      ExitCodeFrom(environment, "SYSTEM_FAILURE_EXIT_CODE", 2, env.warnings);
  env.exit_codes.exit_code_file = Get(environment, "BUILD_EXIT_CODE_FILE");
  for (const auto& [key, value] : environment) {
    absl::string_view name = key;
    if (absl::ConsumePrefix(&name, kJobVariablePrefix)) {
      env.job_variables[std::string(name)] = value;
    }
  }
  return env;
}

absl::StatusOr<v1::Launcher> ParseLauncher(std::string_view name) {
  if (name == "torchrun") return v1::LAUNCHER_TORCHRUN;
  if (name == "env") return v1::LAUNCHER_ENV;
  if (name == "nccl") return v1::LAUNCHER_NCCL;
  if (name == "none") return v1::LAUNCHER_NONE;
  return absl::InvalidArgumentError(
      absl::StrCat("GDT_LAUNCHER '", std::string(name),
                   "' is not a launcher (use torchrun, env, nccl or none)"));
}

JobCredentials CredentialsOf(const gitlab::JobPayload& payload) {
  return JobCredentials{
      .job_token = payload.token,
      .id_token = payload.Variable(kIdTokenVariable).value_or("")};
}

absl::StatusOr<JobInfo> ResolveJobIdentity(const JobEnv& env,
                                           const gitlab::JobPayload& payload) {
  JobInfo job;
  job.job_id = payload.id;
  job.job_name = payload.name;
  job.project_id = payload.project_id;
  job.credentials = CredentialsOf(payload);
  job.instance = env.JobVariable("CI_SERVER_URL").value_or("");
  job.project_dir = env.JobVariable("CI_PROJECT_DIR").value_or("");

  absl::StatusOr<int64_t> pipeline = PipelineId(env, payload);
  if (!pipeline.ok()) return pipeline.status();
  job.pipeline_id = *pipeline;

  // The trusted name decides the member's place; a name without " i/N" is a
  // job without `parallel`, i.e. a gang of one.
  if (absl::StatusOr<gitlab::NodeSuffix> suffix =
          gitlab::ParseNodeSuffix(payload.name);
      suffix.ok()) {
    job.group_name = suffix->group_name;
    job.member_index = suffix->index;
    job.member_total = suffix->total;
  } else {
    job.group_name = payload.name;
  }
  return job;
}

absl::StatusOr<JobInfo> ResolveJobInfo(const JobEnv& env,
                                       const gitlab::JobPayload& payload) {
  absl::StatusOr<JobInfo> identity = ResolveJobIdentity(env, payload);
  if (!identity.ok()) return identity.status();
  JobInfo job = *std::move(identity);
  constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();
  absl::StatusOr<int64_t> total =
      IntVariable(env, "CI_NODE_TOTAL", job.member_total, 1, kMaxInt);
  if (!total.ok()) return total.status();
  absl::StatusOr<int64_t> index =
      IntVariable(env, "CI_NODE_INDEX", job.member_index, 1, *total);
  if (!index.ok()) return index.status();
  if (*total != job.member_total || *index != job.member_index) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CI_NODE_INDEX/CI_NODE_TOTAL ", *index, "/", *total,
        " disagree with the job name '", payload.name, "' (member ",
        job.member_index, "/", job.member_total, ")"));
  }

  absl::StatusOr<int64_t> gpus =
      IntVariable(env, "GDT_GPUS_PER_NODE", 0, 0, kMaxGpusPerNode);
  if (!gpus.ok()) return gpus.status();
  job.gpus_per_node = static_cast<int>(*gpus);
  absl::StatusOr<int64_t> procs =
      IntVariable(env, "GDT_NPROC_PER_NODE", 1, 1, kMaxProcsPerNode);
  if (!procs.ok()) return procs.status();
  job.procs_per_node = static_cast<int>(*procs);
  // 0 = no hang watchdog; at most a week.
  absl::StatusOr<int64_t> hang =
      IntVariable(env, "GDT_HANG_TIMEOUT", 0, 0, 7 * 24 * 3600);
  if (!hang.ok()) return hang.status();
  job.hang_timeout_seconds = static_cast<uint32_t>(*hang);
  // 0 = no teardown watch; at most a day.
  absl::StatusOr<int64_t> teardown =
      IntVariable(env, "GDT_TEARDOWN_TIMEOUT", kDefaultTeardownTimeoutSeconds,
                  0, 24 * 3600);
  if (!teardown.ok()) return teardown.status();
  job.teardown_timeout_seconds = static_cast<uint32_t>(*teardown);
  if (std::optional<std::string> launcher = env.JobVariable("GDT_LAUNCHER");
      launcher.has_value() && !launcher->empty()) {
    absl::StatusOr<v1::Launcher> parsed = ParseLauncher(*launcher);
    if (!parsed.ok()) return parsed.status();
    job.launcher = *parsed;
  }
  // The runner exports job variables after the agent's environment: one
  // named like a variable gdt decides would silently replace the leased
  // GPUs or the rendezvous (IsGdtOwnedVariable), so the job is refused
  // before it joins, naming the variable.
  for (const auto& [name, value] : env.job_variables) {
    if (IsGdtOwnedVariable(name, job.launcher)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the job variable ", name,
          " would override the value gdt sets for the gang (the runner "
          "exports job, project, group and runner variables after gdt's "
          "environment); remove it from the job's variables"));
    }
  }

  absl::StatusOr<int64_t> priority =
      IntVariable(env, "GDT_PRIORITY", 0, -1000, 1000);
  if (!priority.ok()) return priority.status();
  job.priority = static_cast<int>(*priority);
  job.topology_same = env.JobVariable("GDT_TOPOLOGY_SAME").value_or("");
  const std::string mode =
      env.JobVariable("GDT_TOPOLOGY_MODE").value_or("preferred");
  if (mode != "required" && mode != "preferred" && !mode.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("GDT_TOPOLOGY_MODE '", mode,
                     "' is not a mode (use required or "
                     "preferred)"));
  }
  job.topology_required = mode == "required";
  // `gdt-ci expand` writes 1 for `preemptible: true`; true/false are
  // accepted for the plain form, anything else is refused rather than read
  // as "no".
  const std::string preemptible =
      env.JobVariable("GDT_PREEMPTIBLE").value_or("");
  if (preemptible == "1" || preemptible == "true") {
    job.preemptible = true;
  } else if (preemptible != "0" && preemptible != "false" &&
             !preemptible.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GDT_PREEMPTIBLE '", preemptible, "' is not a boolean (use 1 or 0)"));
  }
  // `gdt-ci expand` writes it from the job's `retry:`; GitLab retries a job
  // at most twice.
  absl::StatusOr<int64_t> preempt_retries =
      IntVariable(env, "GDT_PREEMPT_RETRIES", -1, 0, 2);
  if (!preempt_retries.ok()) return preempt_retries.status();
  if (*preempt_retries >= 0) {
    job.preempt_retries = static_cast<int>(*preempt_retries);
  }

  // An elastic gang (`nodes: min..max`): `gdt-ci expand` writes max as
  // `parallel` and both ends of the range.
  absl::StatusOr<int64_t> nodes_min =
      IntVariable(env, "GDT_NODES_MIN", 0, 1, job.member_total);
  if (!nodes_min.ok()) return nodes_min.status();
  job.nodes_min = static_cast<int>(*nodes_min);
  absl::StatusOr<int64_t> nodes_max =
      IntVariable(env, "GDT_NODES_MAX", job.member_total, 1, kMaxInt);
  if (!nodes_max.ok()) return nodes_max.status();
  if (*nodes_max != job.member_total) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GDT_NODES_MAX ", *nodes_max, " disagrees with the job's ",
        job.member_total, " members (parallel: N is the elastic maximum)"));
  }

  // What goes to the coordinator as protobuf strings must be UTF-8; a name
  // that is not would fail every call with an empty error.
  for (const auto& [what, text] :
       std::initializer_list<std::pair<const char*, const std::string*>>{
           {"the job name", &job.job_name},
           {"CI_SERVER_URL", &job.instance},
           {"CI_PROJECT_DIR", &job.project_dir},
           {"GDT_TOPOLOGY_SAME", &job.topology_same}}) {
    if (!IsValidUtf8(*text)) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " is not valid UTF-8: '", TerminalSafe(*text), "'"));
    }
  }

  // The runner's runner_info.timeout is trusted; CI_JOB_TIMEOUT is the same
  // number as a job variable, used when the payload has none.
  if (payload.timeout_seconds > 0) {
    job.job_timeout = std::chrono::seconds(payload.timeout_seconds);
  } else if (std::optional<std::string> timeout =
                 env.JobVariable("CI_JOB_TIMEOUT");
             timeout.has_value()) {
    int64_t seconds = 0;
    if (absl::SimpleAtoi(*timeout, &seconds) && seconds > 0) {
      job.job_timeout = std::chrono::seconds(seconds);
    }
  }
  return job;
}

v1::GangKey GangKeyOf(const JobInfo& job) {
  v1::GangKey key;
  key.set_instance(job.instance);
  key.set_project_id(job.project_id);
  key.set_pipeline_id(job.pipeline_id);
  key.set_group_name(job.group_name);
  key.set_size(static_cast<uint32_t>(job.member_total));
  return key;
}

}  // namespace gdt::executor
