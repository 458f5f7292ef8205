#include <cstdio>
#include <variant>

#include "common/logging.h"
#include "executor/member_state.h"
#include "executor/stage_support.h"
#include "executor/stages.h"
#include "rendezvous/agent_client.h"
#include "rendezvous/coordinator_client.h"
#include "spdlog/spdlog.h"

namespace gdt::executor {

Outcome CleanupStage(const StageContext& context) {
  const std::chrono::milliseconds rpc_timeout(context.config.rpc_timeout);
  rendezvous::CoordinatorClient coordinator(context.config.coordinator,
                                            context.security);
  PresentCredentials(coordinator, CredentialsOf(context.env));
  PresentExecutorId(coordinator, ExecutorIdOf(context.env, /*create=*/false));
  const std::string state_path = context.env.MemberStatePath();

  absl::StatusOr<MemberState> state = ReadMemberState(state_path);
  if (state.ok() && state->assignment.not_needed()) {
    // Never placed: nothing to tear down, and the coordinator holds nothing
    // for it.
    std::remove(state_path.c_str());
    return Outcome::Success();
  }
  if (state.ok()) {
    rendezvous::AgentClient agent(state->agent_endpoint, context.security);
    PresentMemberToken(agent, state->assignment);
    v1::TeardownMemberRequest teardown;
    teardown.set_member_id(state->member_id);
    teardown.set_remove_builds_dir(true);
    if (absl::StatusOr<uint32_t> killed =
            agent.TeardownMember(teardown, rpc_timeout);
        !killed.ok()) {
      spdlog::warn("event=teardown_failed member={} agent={} error={}",
                   LogValue(state->member_id), LogValue(state->agent_endpoint),
                   LogValue(killed.status().ToString()));
    } else if (*killed > 0) {
      spdlog::warn("event=leftover_process_groups_killed member={} count={}",
                   LogValue(state->member_id), *killed);
    }
    LeaveGangQuietly(coordinator, state->gang_key, state->member_index,
                     state->job_id, rpc_timeout,
                     CleanupLeaveRetry(coordinator, context.config));
    std::remove(state_path.c_str());
    return Outcome::Success();
  }
  if (state.status().code() != absl::StatusCode::kNotFound) {
    spdlog::warn("event=state_unreadable error={}",
                 LogValue(state.status().ToString()));
  }

  // Prepare never got admitted (or never ran): leave by the payload's key in
  // case the coordinator still counts this member as present.
  std::variant<JobInfo, Outcome> job = LoadJob(context.env);
  if (const Outcome* failure = std::get_if<Outcome>(&job)) {
    spdlog::warn("event=cleanup_member_unknown error={}",
                 LogValue(failure->message));
    return Outcome::Success();
  }
  const JobInfo& info = std::get<JobInfo>(job);
  LeaveGangQuietly(coordinator, GangKeyOf(info), info.member_index, info.job_id,
                   rpc_timeout, CleanupLeaveRetry(coordinator, context.config));
  return Outcome::Success();
}

}  // namespace gdt::executor
