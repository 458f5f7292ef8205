#include "executor/stage_support.h"

#include <algorithm>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/backoff.h"
#include "common/file.h"
#include "common/logging.h"
#include "gitlab/job_payload.h"
#include "rendezvous/metadata.h"
#include "spdlog/spdlog.h"

namespace gdt::executor {
namespace {

// Between tries of a leave that may pass.
constexpr std::chrono::milliseconds kMaxLeaveBackoff(2000);
// The most cleanup retries its leave for with HA replicas: an election
// takes about lease_ttl_s (5 s by default), far less than this.
constexpr std::chrono::milliseconds kMaxCleanupLeaveRetry(30000);

}  // namespace

std::variant<JobInfo, Outcome> LoadJob(const JobEnv& env) {
  if (env.job_response_file.empty()) {
    return Outcome::SystemFailure(
        "JOB_RESPONSE_FILE is not set: gdt-executor must be run by "
        "gitlab-runner's custom executor");
  }
  absl::StatusOr<gitlab::JobPayload> payload =
      gitlab::LoadJobPayload(env.job_response_file);
  if (!payload.ok()) {
    return Outcome::SystemFailure(std::string(payload.status().message()));
  }
  absl::StatusOr<JobInfo> job = ResolveJobInfo(env, *payload);
  if (!job.ok()) {
    return Outcome::UserError(std::string(job.status().message()));
  }
  return *std::move(job);
}

std::string BuildsDirOf(const Config& config, int64_t job_id) {
  return absl::StrCat(config.builds_root, "/", job_id);
}

JobCredentials CredentialsOf(const JobEnv& env) {
  if (env.job_response_file.empty()) return {};
  absl::StatusOr<gitlab::JobPayload> payload =
      gitlab::LoadJobPayload(env.job_response_file);
  return payload.ok() ? CredentialsOf(*payload) : JobCredentials{};
}

void PresentCredentials(rendezvous::CoordinatorClient& coordinator,
                        const JobCredentials& credentials) {
  if (!credentials.job_token.empty()) {
    coordinator.AddMetadata(rendezvous::kJobTokenMetadata,
                            credentials.job_token);
  }
  if (!credentials.id_token.empty()) {
    coordinator.AddMetadata(rendezvous::kIdTokenMetadata, credentials.id_token);
  }
}

void PresentMemberToken(rendezvous::AgentClient& agent,
                        const v1::Assignment& assignment) {
  if (!assignment.member_token().empty()) {
    agent.AddMetadata(rendezvous::kMemberTokenMetadata,
                      assignment.member_token());
  }
}

std::string ExecutorIdOf(const JobEnv& env, bool create) {
  if (env.tmpdir.empty()) return "";
  const std::string path = absl::StrCat(env.tmpdir, "/gdt-executor-id");
  constexpr size_t kDigits = 32;
  if (absl::StatusOr<std::string> kept = ReadTextFile(path, kDigits);
      kept.ok() && kept->size() == kDigits) {
    return *kept;
  }
  if (!create) return "";
  std::random_device random;
  std::string id;
  while (id.size() < kDigits) {
    absl::StrAppend(&id, absl::Hex(random(), absl::kZeroPad8));
  }
  if (absl::Status kept = WriteFileAtomically(path, id, 0600); !kept.ok()) {
    spdlog::warn("event=executor_id_unkept error={}",
                 LogValue(kept.ToString()));
    return "";
  }
  return id;
}

void PresentExecutorId(rendezvous::CoordinatorClient& coordinator,
                       const std::string& id) {
  if (!id.empty()) coordinator.AddMetadata(rendezvous::kExecutorMetadata, id);
}

void LeaveGangQuietly(rendezvous::CoordinatorClient& coordinator,
                      const v1::GangKey& key, int member_index, int64_t job_id,
                      std::chrono::milliseconds timeout,
                      std::chrono::milliseconds retry_for) {
  v1::LeaveGangRequest request;
  *request.mutable_key() = key;
  request.set_member_index(static_cast<uint32_t>(member_index));
  request.set_job_id(job_id);
  const auto give_up = std::chrono::steady_clock::now() + retry_for;
  Backoff backoff({std::chrono::milliseconds(200), kMaxLeaveBackoff,
                   Backoff::Jitter::kDecorrelated});
  int tries = 0;
  while (true) {
    const absl::Status status = coordinator.LeaveGang(request, timeout);
    ++tries;
    if (status.ok()) {
      spdlog::info("event=gang_left group={} pipeline={} job={} tries={}",
                   LogValue(key.group_name()), key.pipeline_id(), job_id,
                   tries);
      return;
    }
    const bool transient = status.code() == absl::StatusCode::kUnavailable ||
                           status.code() == absl::StatusCode::kDeadlineExceeded;
    const std::chrono::milliseconds delay = backoff.Next();
    if (!transient || std::chrono::steady_clock::now() + delay >= give_up) {
      spdlog::warn(
          "event=leave_failed group={} pipeline={} job={} tries={} error={}",
          LogValue(key.group_name()), key.pipeline_id(), job_id, tries,
          LogValue(status.ToString()));
      return;
    }
    std::this_thread::sleep_for(delay);
  }
}

std::chrono::milliseconds CleanupLeaveRetry(
    const rendezvous::CoordinatorClient& coordinator, const Config& config) {
  if (coordinator.endpoint_count() < 2) return std::chrono::milliseconds(0);
  return std::min<std::chrono::milliseconds>(config.exit_report_retry,
                                             kMaxCleanupLeaveRetry);
}

std::string NotNeededLine(const v1::Assignment& assignment, int member_total) {
  return absl::StrCat("not needed at this size (gang runs with ",
                      assignment.num_nodes(), " of ", member_total,
                      " members); nothing to run, the job succeeds");
}

}  // namespace gdt::executor
