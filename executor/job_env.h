#ifndef GDT_EXECUTOR_JOB_ENV_H_
#define GDT_EXECUTOR_JOB_ENV_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "executor/outcome.h"
#include "gdt/v1/coordinator.pb.h"
#include "gitlab/job_payload.h"

namespace gdt::executor {

// The CI variable holding the job's GitLab CI ID token: the job declares it
// under `id_tokens:` with the coordinator's audience (docs/security.md).
inline constexpr char kIdTokenVariable[] = "GDT_ID_TOKEN";

// GDT_TEARDOWN_TIMEOUT when the job sets none: long enough for a rank's
// quiet last work (a checkpoint upload) after its siblings ended, short
// next to a job timeout.
inline constexpr uint32_t kDefaultTeardownTimeoutSeconds = 120;

using Environment = std::map<std::string, std::string>;

// Everything the runner passes to a stage through the environment
// (docs/gitlab-runner-protocol.md), read in this one place. Job variables
// arrive as CUSTOM_ENV_<KEY>; they are stored without the prefix. Remember that
// pipeline authors can override any job variable: trust JOB_RESPONSE_FILE
// for identity (ResolveJobInfo does).
struct JobEnv {
  std::string tmpdir;             // TMPDIR: the per-job temp dir.
  std::string job_response_file;  // JOB_RESPONSE_FILE.
  ExitCodes exit_codes;           // BUILD_/SYSTEM_FAILURE_EXIT_CODE, file.
  // Problems that were worked around, e.g. an unset exit code; main() logs
  // them as warnings.
  std::vector<std::string> warnings;
  std::map<std::string, std::string> job_variables;

  // The job variable `key` (without CUSTOM_ENV_), or nullopt.
  std::optional<std::string> JobVariable(std::string_view key) const;
  // Where prepare records the member's assignment for later stages.
  std::string MemberStatePath() const;
};

// Reads the runner's variables from `environment`. Never fails: a missing
// or non-numeric exit code falls back to 1 / 2 with a warning, other missing
// values stay empty and are reported by the stage that needs them.
JobEnv ReadJobEnv(const Environment& environment);

// Who this member is and what it asks for: the trusted identity from the
// payload checked against the job variables, plus the job's gdt inputs.
// What a member shows a coordinator that verifies members (docs/security.md),
// both from the job payload (never CUSTOM_ENV_*), sent as gRPC metadata and
// never logged or put on a command line. Either may be empty.
struct JobCredentials {
  std::string job_token;  // The payload's job token.
  // The job's GitLab CI ID token (kIdTokenVariable in the payload); empty
  // when the job declares none.
  std::string id_token;
};

struct JobInfo {
  int64_t job_id = 0;
  std::string job_name;  // "train 2/4".
  std::string instance;  // CI_SERVER_URL.
  int64_t project_id = 0;
  int64_t pipeline_id = 0;
  std::string group_name;  // "train".
  int member_index = 1;    // 1-based i of i/N.
  int member_total = 1;    // N.
  int gpus_per_node = 0;
  int procs_per_node = 1;
  v1::Launcher launcher = v1::LAUNCHER_TORCHRUN;
  std::chrono::seconds job_timeout{0};  // 0: unknown.
  // Scheduling inputs: GDT_PRIORITY (higher first, -1000..1000, default 0),
  // GDT_TOPOLOGY_SAME (a host label such as "rack"), GDT_TOPOLOGY_MODE
  // (required or preferred, the default).
  int priority = 0;
  std::string topology_same;
  bool topology_required = false;
  bool preemptible = false;  // GDT_PREEMPTIBLE=1.
  // GDT_PREEMPT_RETRIES: retries of the job's `retry:` that bring it back
  // after a preemption; nullopt when unset (never preempted then).
  std::optional<int> preempt_retries;
  // GDT_NODES_MIN (`nodes: min..max`): the gang may start with as few
  // members; 0 = all member_total of them.
  int nodes_min = 0;
  std::string project_dir;  // CI_PROJECT_DIR; may be empty.
  // GDT_HANG_TIMEOUT: seconds without progress before the gang fails as
  // hung; 0 = no watchdog.
  uint32_t hang_timeout_seconds = 0;
  // GDT_TEARDOWN_TIMEOUT: seconds a stage may stay idle after one of its
  // ranks ended before the agent ends it as stuck in teardown (and counts
  // it a success); 0 = never.
  uint32_t teardown_timeout_seconds = kDefaultTeardownTimeoutSeconds;
  JobCredentials credentials;
};

// Derives the member's identity and inputs. The job id, name, project and
// (from runner 19) pipeline come from the payload; the pipeline falls back to
// the payload's CI_PIPELINE_ID variable, then CUSTOM_ENV_CI_PIPELINE_ID. A
// name without an " i/N" suffix is a gang of one.
// Errors: InvalidArgument, one line naming the variable, for the job's own
// mistakes: CI_NODE_INDEX/CI_NODE_TOTAL not integers or disagreeing with the
// name, GDT_GPUS_PER_NODE/GDT_NPROC_PER_NODE/GDT_PRIORITY/GDT_HANG_TIMEOUT/
// GDT_TEARDOWN_TIMEOUT not integers in range, an unknown GDT_LAUNCHER or
// GDT_TOPOLOGY_MODE, no usable pipeline id.
absl::StatusOr<JobInfo> ResolveJobInfo(const JobEnv& env,
                                       const gitlab::JobPayload& payload);

// Only what the trusted payload says about who the member is (job id, name,
// token, project, pipeline, and the group, index and size from the name);
// the job's own variables are not read beyond the pipeline fallback.
// Errors: InvalidArgument for no usable pipeline id.
absl::StatusOr<JobInfo> ResolveJobIdentity(const JobEnv& env,
                                           const gitlab::JobPayload& payload);

// The payload's job token and the job's ID token.
JobCredentials CredentialsOf(const gitlab::JobPayload& payload);

// Parses a GDT_LAUNCHER value (torchrun, env, nccl, none).
// Errors: InvalidArgument naming the value.
absl::StatusOr<v1::Launcher> ParseLauncher(std::string_view name);

// The GangKey of a member.
v1::GangKey GangKeyOf(const JobInfo& job);

}  // namespace gdt::executor

#endif  // GDT_EXECUTOR_JOB_ENV_H_
