#include <chrono>
#include <cstdio>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/exit_code.h"
#include "common/log_throttle.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "common/retry_after.h"
#include "common/sha256.h"
#include "common/terminal_text.h"
#include "executor/member_state.h"
#include "executor/stage_support.h"
#include "executor/stages.h"
#include "rendezvous/agent_client.h"
#include "rendezvous/coordinator_client.h"
#include "spdlog/spdlog.h"

namespace gdt::executor {
namespace {

using std::chrono::milliseconds;

// What the thread blocked in JoinGang hands to the stage's thread. Shared
// ownership: when a signal interrupts the join, the stage returns and the
// thread finishes on its own (JoinGang cannot be cancelled from outside).
struct JoinProgress {
  Mutex mu;
  CondVar changed;
  std::deque<std::string> lines ABSL_GUARDED_BY(mu);  // For the job log.
  std::optional<absl::StatusOr<v1::Assignment>> result ABSL_GUARDED_BY(mu);
  bool reached ABSL_GUARDED_BY(mu) = false;  // Any waiting event arrived.
  // The coordinator's refusal for now (common/retry_after.h) when that was
  // the last thing the join heard; OK otherwise.
  absl::Status refusal ABSL_GUARDED_BY(mu);
};

std::string WaitingLine(const v1::WaitingEvent& waiting) {
  if (!waiting.reason().empty()) return waiting.reason();
  return absl::StrCat("waiting: ", waiting.members_present(), "/",
                      waiting.members_total(), " members present");
}

// Fills in the peer list a compact assignment leaves out: one GetPeers call,
// checked against the digest the assignment carries (so the list is the one
// of this admission) and against the gang's size.
absl::Status FetchPeers(rendezvous::CoordinatorClient& coordinator,
                        const JobInfo& job, milliseconds timeout,
                        v1::Assignment& assignment) {
  if (!assignment.peers().empty() || assignment.peers_sha256().empty()) {
    return absl::OkStatus();  // A full assignment (an older coordinator).
  }
  v1::GetPeersRequest request;
  request.set_gang_id(assignment.gang_id());
  request.set_epoch(assignment.epoch());
  request.set_member_index(static_cast<uint32_t>(job.member_index));
  request.set_job_id(job.job_id);
  absl::StatusOr<v1::GetPeersResponse> peers =
      coordinator.GetPeers(request, timeout);
  if (!peers.ok()) return peers.status();
  if (static_cast<uint32_t>(peers->peers_size()) != assignment.num_nodes() ||
      Sha256Hex(absl::StrJoin(peers->peers(), "\n")) !=
          assignment.peers_sha256()) {
    return absl::DataLossError(
        absl::StrCat("the coordinator's peer list (", peers->peers_size(),
                     " hosts) is not the one admitted with this member (",
                     assignment.num_nodes(), " hosts, sha256 ",
                     assignment.peers_sha256(), ")"));
  }
  *assignment.mutable_peers() = std::move(*peers->mutable_peers());
  return absl::OkStatus();
}

std::string GpuList(const v1::Assignment& assignment) {
  if (assignment.gpu_indices().empty()) return "none";
  return absl::StrJoin(assignment.gpu_indices(), ",");
}

// Whether the coordinator may preempt this member in `epoch`, and why not:
// only while its `retry:` would bring it back (GDT_PREEMPT_RETRIES).
std::string PreemptibleLine(const JobInfo& job, uint32_t epoch) {
  if (!job.preempt_retries.has_value()) {
    return "GDT_PREEMPTIBLE is set but GDT_PREEMPT_RETRIES is not, so gdt "
           "cannot tell whether a retry would bring this job back after a "
           "preemption; the gang is not preempted";
  }
  const int64_t left = PreemptRetriesLeft(*job.preempt_retries, epoch);
  if (*job.preempt_retries == 0) {
    return absl::StrCat(
        "not preemptible: its retry: does not bring a preempted job back "
        "(exit code ",
        kPreemptedExitCode, "), so a preemption would end it for good");
  }
  if (left == 0) {
    return absl::StrCat(
        "not preemptible in this attempt: its retry: brings a preempted job "
        "back ",
        *job.preempt_retries, *job.preempt_retries == 1 ? " time" : " times",
        " and the gang already had ", epoch - 1,
        epoch == 2 ? " earlier attempt" : " earlier attempts",
        ", so a preemption would end it for good");
  }
  return absl::StrCat(
      "preemptible: a higher-priority gang may stop it after a checkpoint "
      "notice; ",
      left, left == 1 ? " retry" : " retries",
      " left to bring it back (exit code ", kPreemptedExitCode, ")");
}

}  // namespace

Outcome PrepareStage(const StageContext& context) {
  const Config& config = context.config;
  std::variant<JobInfo, Outcome> loaded = LoadJob(context.env);
  if (Outcome* failure = std::get_if<Outcome>(&loaded)) return *failure;
  const JobInfo& job = std::get<JobInfo>(loaded);
  if (context.env.tmpdir.empty()) {
    return Outcome::SystemFailure("TMPDIR is not set: nowhere to keep state");
  }
  const milliseconds rpc_timeout(config.rpc_timeout);

  v1::JoinGangRequest request;
  *request.mutable_key() = GangKeyOf(job);
  request.set_member_index(static_cast<uint32_t>(job.member_index));
  request.set_job_id(job.job_id);
  request.set_job_name(job.job_name);
  request.set_gpus_per_node(static_cast<uint32_t>(job.gpus_per_node));
  request.set_procs_per_node(static_cast<uint32_t>(job.procs_per_node));
  request.set_launcher(job.launcher);
  request.set_arrival_host(config.arrival_host);
  request.set_job_timeout_seconds(
      static_cast<uint32_t>(job.job_timeout.count()));
  request.set_priority(job.priority);
  request.set_preemptible(job.preemptible);
  if (job.preempt_retries.has_value()) {
    request.set_preempt_retries(static_cast<uint32_t>(*job.preempt_retries));
  }
  request.set_nodes_min(static_cast<uint32_t>(job.nodes_min));
  request.set_topology_same(job.topology_same);
  request.set_topology_required(job.topology_required);
  // The peer list comes with one GetPeers call after admission (FetchPeers):
  // formation then sends each member O(1) bytes instead of the whole list.
  request.set_compact_assignment(true);
  std::chrono::seconds wait = config.join_timeout;
  if (job.job_timeout.count() > 0 && job.job_timeout < wait) {
    wait = job.job_timeout;
  }
  const auto deadline = std::chrono::system_clock::now() + wait;

  auto coordinator = std::make_shared<rendezvous::CoordinatorClient>(
      config.coordinator, context.security);
  // The coordinator checks it with GitLab when it verifies members.
  PresentCredentials(*coordinator, job.credentials);
  // Another executor of the same job id is refused by it, and this one's
  // calls (its leave as well) never end that one's member.
  PresentExecutorId(*coordinator, ExecutorIdOf(context.env, /*create=*/true));
  context.out << "gdt: joining gang " << job.group_name << " (pipeline "
              << job.pipeline_id << ") as member " << job.member_index << "/"
              << job.member_total << " via coordinator " << config.coordinator
              << std::endl;
  if (int signal = context.signal.load(); signal != 0) {
    return Outcome::SystemFailure(
        absl::StrCat("prepare interrupted by signal ", signal));
  }

  auto progress = std::make_shared<JoinProgress>();
  std::thread joiner([progress, coordinator, request, deadline] {
    absl::StatusOr<v1::Assignment> result = coordinator->JoinGang(
        request, deadline,
        [&progress](const v1::WaitingEvent& waiting) {
          MutexLock lock(progress->mu);
          progress->reached = true;
          progress->refusal = absl::OkStatus();
          progress->lines.push_back(WaitingLine(waiting));
          progress->changed.NotifyAll();
        },
        [&progress, &coordinator,
         unreachable = LogThrottle(std::chrono::seconds(30)),
         refused = LogThrottle(std::chrono::seconds(30))](
            const absl::Status& status) mutable {
          // Of each kind (coordinator unreachable, refusing for now): the
          // first attempt, then one line per 30 s with the count.
          const bool for_now = RetryAfter(status).has_value();
          std::optional<uint64_t> attempts =
              (for_now ? refused : unreachable)
                  .Occur(std::chrono::steady_clock::now());
          MutexLock lock(progress->mu);
          progress->refusal = for_now ? status : absl::OkStatus();
          if (!attempts.has_value()) return;
          progress->lines.push_back(
              JoinRetryLine(status, coordinator->endpoint(), *attempts));
          progress->changed.NotifyAll();
        });
    MutexLock lock(progress->mu);
    progress->result = std::move(result);
    progress->changed.NotifyAll();
  });

  std::optional<absl::StatusOr<v1::Assignment>> result;
  bool reached = false;
  absl::Status refusal;
  std::string last_line;
  while (!result.has_value()) {
    std::deque<std::string> lines;
    {
      MutexLock lock(progress->mu);
      if (progress->lines.empty() && !progress->result.has_value()) {
        // Wakes up now and then to notice a signal.
        progress->changed.WaitUntil(
            progress->mu, std::chrono::steady_clock::now() + milliseconds(100));
      }
      lines.swap(progress->lines);
      result = progress->result;
      reached = progress->reached;
      refusal = progress->refusal;
    }
    for (const std::string& line : lines) {
      if (line == last_line) continue;
      // The coordinator's waiting reasons quote names others chose.
      context.out << "gdt: " << TerminalSafe(line) << std::endl;
      last_line = line;
    }
    if (int signal = context.signal.load(); signal != 0 && !result) {
      joiner.detach();
      LeaveGangQuietly(*coordinator, request.key(), job.member_index,
                       job.job_id, rpc_timeout);
      Outcome outcome = Outcome::SystemFailure(
          absl::StrCat("prepare interrupted by signal ", signal,
                       " while joining gang ", job.group_name));
      outcome.exit_immediately = true;
      return outcome;
    }
  }
  joiner.join();

  if (!result->ok()) {
    // Whatever the reason, never stay half-joined.
    LeaveGangQuietly(*coordinator, request.key(), job.member_index, job.job_id,
                     rpc_timeout);
    if (result->status().code() == absl::StatusCode::kDeadlineExceeded &&
        !refusal.ok()) {
      return JoinRefusedUntilDeadline(refusal, wait);
    }
    if (result->status().code() == absl::StatusCode::kDeadlineExceeded &&
        !reached) {
      return Outcome::SystemFailure(
          absl::StrCat("coordinator ", config.coordinator, " unreachable for ",
                       wait.count(), " s: ", result->status().message()));
    }
    return JoinFailureOutcome(result->status());
  }
  v1::Assignment assignment = std::move(**result);
  if (assignment.not_needed()) {
    // The elastic gang started without this member: nothing runs here, and
    // later stages only repeat the line (the job succeeds).
    MemberState state;
    state.assignment = assignment;
    state.gang_key = request.key();
    state.member_index = job.member_index;
    state.job_id = job.job_id;
    if (absl::Status status =
            WriteMemberState(context.env.MemberStatePath(), state);
        !status.ok()) {
      return Outcome::SystemFailure(std::string(status.message()));
    }
    context.out << "gdt: " << NotNeededLine(assignment, job.member_total)
                << std::endl;
    spdlog::info("event=member_not_needed gang={} job={} size={}/{}",
                 LogValue(assignment.gang_id()), job.job_id,
                 assignment.num_nodes(), job.member_total);
    return Outcome::Success();
  }
  if (assignment.agent_endpoint().empty()) {
    LeaveGangQuietly(*coordinator, request.key(), job.member_index, job.job_id,
                     rpc_timeout);
    return Outcome::SystemFailure(absl::StrCat(
        "coordinator placed gang ", assignment.gang_id(), " on host ",
        assignment.host_name(), " without an agent endpoint"));
  }
  if (absl::Status status =
          FetchPeers(*coordinator, job, rpc_timeout, assignment);
      !status.ok()) {
    LeaveGangQuietly(*coordinator, request.key(), job.member_index, job.job_id,
                     rpc_timeout);
    return Outcome::SystemFailure(
        absl::StrCat("cannot fetch the peer list of gang ",
                     assignment.gang_id(), ": ", status.ToString()));
  }

  MemberState state;
  state.assignment = assignment;
  state.gang_key = request.key();
  state.member_index = job.member_index;
  state.job_id = job.job_id;
  state.member_id = absl::StrCat(assignment.gang_id(), "/", job.job_id);
  state.agent_endpoint = assignment.agent_endpoint();
  state.builds_dir = BuildsDirOf(config, job.job_id);
  state.cache_dir = config.cache_root;
  const std::string state_path = context.env.MemberStatePath();
  if (absl::Status status = WriteMemberState(state_path, state); !status.ok()) {
    LeaveGangQuietly(*coordinator, request.key(), job.member_index, job.job_id,
                     rpc_timeout);
    return Outcome::SystemFailure(std::string(status.message()));
  }

  rendezvous::AgentClient agent(state.agent_endpoint, context.security);
  PresentMemberToken(agent, assignment);
  v1::SetupMemberRequest setup;
  setup.set_member_id(state.member_id);
  setup.set_builds_dir(state.builds_dir);
  setup.add_extra_dirs(state.cache_dir);
  if (absl::Status status = agent.SetupMember(setup, rpc_timeout);
      !status.ok()) {
    std::remove(state_path.c_str());
    LeaveGangQuietly(*coordinator, request.key(), job.member_index, job.job_id,
                     rpc_timeout);
    return Outcome::SystemFailure(absl::StrCat(
        "cannot set up member on agent ", state.agent_endpoint, " (host ",
        assignment.host_name(), "): ", status.ToString()));
  }

  context.out << "gdt: gang " << assignment.gang_id() << " admitted: member "
              << job.member_index << "/" << job.member_total << " is node rank "
              << assignment.node_rank() << " of " << assignment.num_nodes()
              << " on host " << assignment.host_name()
              << " (GPUs: " << GpuList(assignment) << "), master "
              << assignment.master_addr() << ":" << assignment.master_port()
              << std::endl;
  if (job.preemptible) {
    context.out << "gdt: " << PreemptibleLine(job, assignment.epoch())
                << std::endl;
  }
  spdlog::info("event=member_admitted gang={} job={} rank={} host={}",
               LogValue(assignment.gang_id()), job.job_id,
               assignment.node_rank(), LogValue(assignment.host_name()));
  return Outcome::Success();
}

}  // namespace gdt::executor
