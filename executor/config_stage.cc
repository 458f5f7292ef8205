#include <algorithm>
#include <chrono>
#include <string>
#include <variant>

#include "absl/status/statusor.h"
#include "common/logging.h"
#include "executor/stage_support.h"
#include "executor/stages.h"
#include "gitlab/job_payload.h"
#include "nlohmann/json.hpp"
#include "rendezvous/coordinator_client.h"
#include "spdlog/spdlog.h"

namespace gdt::executor {
namespace {

// How long a refused member tries to tell its gang before its job ends
// anyway (the peers then wait for their join timeout, as before).
constexpr std::chrono::seconds kRefusalTimeout(10);

// The job cannot take part for `reason`, which no peer can fix: tells the
// coordinator, so the other members of its gang stop waiting for it. Best
// effort: says in the job log whether they were told.
void TellTheGang(const StageContext& context, const std::string& reason) {
  if (context.env.job_response_file.empty()) return;
  absl::StatusOr<gitlab::JobPayload> payload =
      gitlab::LoadJobPayload(context.env.job_response_file);
  if (!payload.ok()) return;
  absl::StatusOr<JobInfo> who = ResolveJobIdentity(context.env, *payload);
  // A job without `parallel` has no peers to tell.
  if (!who.ok() || who->member_total < 2) return;
  v1::RefuseMemberRequest request;
  v1::JoinGangRequest* member = request.mutable_member();
  *member->mutable_key() = GangKeyOf(*who);
  member->set_member_index(static_cast<uint32_t>(who->member_index));
  member->set_job_id(who->job_id);
  member->set_job_name(who->job_name);
  request.set_reason(reason);
  rendezvous::CoordinatorClient coordinator(context.config.coordinator,
                                            context.security);
  PresentCredentials(coordinator, who->credentials);
  absl::StatusOr<std::string> root_cause = coordinator.RefuseMember(
      request, std::min<std::chrono::milliseconds>(
                   std::chrono::milliseconds(context.config.rpc_timeout),
                   kRefusalTimeout));
  if (root_cause.ok()) {
    context.err << "gdt: the other members of gang " << who->group_name
                << " stop too: " << *root_cause << "\n";
  } else {
    spdlog::warn("event=refusal_not_told group={} job={} error={}",
                 LogValue(who->group_name), who->job_id,
                 LogValue(root_cause.status().ToString()));
  }
  context.err.flush();
}

}  // namespace

Outcome ConfigStage(const StageContext& context) {
  std::variant<JobInfo, Outcome> job = LoadJob(context.env);
  if (Outcome* failure = std::get_if<Outcome>(&job)) {
    // The job's own mistake (a forged CI_NODE_INDEX, a bad setting): no
    // retry of a peer can fix it.
    if (failure->kind == OutcomeKind::kUserError) {
      TellTheGang(context, failure->message);
    }
    return *failure;
  }
  const JobInfo& info = std::get<JobInfo>(job);

  nlohmann::ordered_json output = {
      {"builds_dir", BuildsDirOf(context.config, info.job_id)},
      {"cache_dir", context.config.cache_root},
      {"builds_dir_is_shared", false},
      {"hostname", context.config.arrival_host},
      {"driver", {{"name", "gdt"}, {"version", "0.1.0"}}},
  };
  context.out << output.dump() << std::endl;
  return Outcome::Success();
}

}  // namespace gdt::executor
