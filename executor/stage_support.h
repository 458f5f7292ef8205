#ifndef GDT_EXECUTOR_STAGE_SUPPORT_H_
#define GDT_EXECUTOR_STAGE_SUPPORT_H_

#include <chrono>
#include <string>
#include <variant>

#include "executor/config.h"
#include "executor/job_env.h"
#include "executor/outcome.h"
#include "rendezvous/agent_client.h"
#include "rendezvous/coordinator_client.h"

namespace gdt::executor {

// Loads JOB_RESPONSE_FILE and resolves the member's identity. Returns the
// job, or the outcome that ends the stage: a system failure for a missing or
// garbled payload, a user error for the job's own mistakes.
std::variant<JobInfo, Outcome> LoadJob(const JobEnv& env);

// The member's builds dir: <builds_root>/<job_id>.
std::string BuildsDirOf(const Config& config, int64_t job_id);

// Makes `agent` present the member token the coordinator issued for this
// member on that host (nothing when the assignment has none).
void PresentMemberToken(rendezvous::AgentClient& agent,
                        const v1::Assignment& assignment);

// The job token and the job's GitLab CI ID token (the GDT_ID_TOKEN variable,
// which the job declares under `id_tokens:`) from one read of
// JOB_RESPONSE_FILE; both empty when it cannot be read (a coordinator that
// verifies members then refuses the call with a clear message).
JobCredentials CredentialsOf(const JobEnv& env);

// Makes `coordinator` present the job token (metadata "gdt-job-token") and
// the ID token (metadata "gdt-id-token"), each only when it is not empty.
void PresentCredentials(rendezvous::CoordinatorClient& coordinator,
                        const JobCredentials& credentials);

// This preparation attempt's executor id (metadata "gdt-executor"): 32 hex
// digits kept in $TMPDIR/gdt-executor-id, which the runner gives each
// attempt afresh and shares with its cleanup. `create`: prepare makes it;
// other stages only read it. "" when there is none or it cannot be kept.
std::string ExecutorIdOf(const JobEnv& env, bool create);

// Makes `coordinator` present the executor id; nothing when `id` is empty.
void PresentExecutorId(rendezvous::CoordinatorClient& coordinator,
                       const std::string& id);

// Leaves the gang, logging (not returning) a failure. A failure that may
// pass (UNAVAILABLE, DEADLINE_EXCEEDED) is tried again with backoff until
// `retry_for` has passed (0: one try).
void LeaveGangQuietly(
    rendezvous::CoordinatorClient& coordinator, const v1::GangKey& key,
    int member_index, int64_t job_id, std::chrono::milliseconds timeout,
    std::chrono::milliseconds retry_for = std::chrono::milliseconds(0));

// How long cleanup retries its leave: with HA replicas, long enough for a
// new leader to be elected (a leave lost in the election would hold the
// member's slots until reconciliation), at most exit_report_retry_seconds;
// with one coordinator, no retry (its restart reconciles the member).
std::chrono::milliseconds CleanupLeaveRetry(
    const rendezvous::CoordinatorClient& coordinator, const Config& config);

// The job-log line of a member its elastic gang started without:
// "not needed at this size (gang runs with 1 of 2 members); nothing to run,
// the job succeeds".
std::string NotNeededLine(const v1::Assignment& assignment, int member_total);

}  // namespace gdt::executor

#endif  // GDT_EXECUTOR_STAGE_SUPPORT_H_
