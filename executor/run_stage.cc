#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <variant>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/backoff.h"
#include "common/file.h"
#include "common/logging.h"
#include "common/peer_loss.h"
#include "executor/env_contract.h"
#include "executor/gang_watch.h"
#include "executor/member_state.h"
#include "executor/stage_support.h"
#include "executor/stages.h"
#include "rendezvous/agent_client.h"
#include "rendezvous/coordinator_client.h"
#include "rendezvous/grpc_status.h"
#include "spdlog/spdlog.h"

namespace gdt::executor {
namespace {

// The stage that runs the job's before_script+script. Runners up to now
// rename it from step_script to build_script before calling run_exec; the
// runner has announced that it will pass step_script as it is, so both
// names mean the same stage (the exit barrier and the exit report hang on
// it).
bool IsMainScriptStage(const std::string& stage_name) {
  return stage_name == "build_script" || stage_name == "step_script";
}

// The user's payload: the main script stage and further steps
// ("step_<name>"). Everything else (get_sources, artifacts, caches,
// after_script, unknown new stages) runs as the runner wrote it.
bool IsUserStage(const std::string& stage_name) {
  return IsMainScriptStage(stage_name) || absl::StartsWith(stage_name, "step_");
}

constexpr std::chrono::milliseconds kMaxReportBackoff(2000);

// Reports the member's exit, retrying transient failures with backoff for up
// to exit_report_retry_seconds (saying so once in the job log). `lost_reason`
// non-empty: the member was lost (its agent vanished) rather than exited;
// `hang` non-null: its agent's watchdog saw no progress (the report carries
// when the member last made progress, by its host's clock).
void ReportExitQuietly(const StageContext& context, const MemberState& state,
                       const JobCredentials& credentials, int exit_code,
                       bool cancelled, const std::string& lost_reason = "",
                       const v1::HangDetected* hang = nullptr,
                       bool peer_suspected = false) {
  rendezvous::CoordinatorClient coordinator(context.config.coordinator,
                                            context.security);
  PresentCredentials(coordinator, credentials);
  v1::ReportExitRequest request;
  request.set_gang_id(state.assignment.gang_id());
  request.set_epoch(state.assignment.epoch());
  request.set_member_index(static_cast<uint32_t>(state.member_index));
  request.set_job_id(state.job_id);
  request.set_exit_code(exit_code);
  request.set_cancelled(cancelled);
  request.set_lost_reason(lost_reason);
  if (hang != nullptr) {
    request.set_hung_seconds(hang->idle_seconds());
    request.set_last_progress_unix_ms(hang->last_progress_unix_ms());
    if (hang->has_step()) request.set_progress_step(hang->step());
  }
  request.set_peer_suspected(peer_suspected);
  request.set_exited_unix_ms(
      std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::system_clock::now().time_since_epoch())
          .count());
  const auto give_up =
      std::chrono::steady_clock::now() + context.config.exit_report_retry;
  Backoff backoff({std::chrono::milliseconds(200), kMaxReportBackoff,
                   Backoff::Jitter::kDecorrelated});
  std::chrono::milliseconds delay = backoff.Next();
  bool told = false;
  while (true) {
    absl::Status status = coordinator.ReportExit(
        request, std::chrono::milliseconds(context.config.rpc_timeout));
    if (status.ok()) return;
    const bool transient = status.code() == absl::StatusCode::kUnavailable ||
                           status.code() == absl::StatusCode::kDeadlineExceeded;
    if (!transient || std::chrono::steady_clock::now() + delay >= give_up) {
      spdlog::warn("event=exit_report_failed gang={} job={} code={} error={}",
                   LogValue(state.assignment.gang_id()), state.job_id,
                   exit_code, LogValue(status.ToString()));
      return;
    }
    if (!told) {
      context.err << "gdt: coordinator " << context.config.coordinator
                  << " is unreachable; retrying the exit report until it is "
                     "back ("
                  << status.message() << ")\n";
      context.err.flush();
      told = true;
    }
    std::this_thread::sleep_for(delay);
    delay = backoff.Next();
  }
}

v1::WatchGangRequest WatchRequestFor(const MemberState& state) {
  v1::WatchGangRequest request;
  request.set_gang_id(state.assignment.gang_id());
  request.set_epoch(state.assignment.epoch());
  request.set_member_index(static_cast<uint32_t>(state.member_index));
  request.set_job_id(state.job_id);
  return request;
}

// How long a member whose own script failed waits for the coordinator's
// root-cause line before it exits with its own code anyway.
std::chrono::steady_clock::time_point RootCauseDeadline(
    const StageContext& context) {
  return std::chrono::steady_clock::now() +
         std::min<std::chrono::steady_clock::duration>(
             context.config.rpc_timeout, std::chrono::seconds(10));
}

// The other members that had not exited 0 at the watch's last progress.
std::vector<uint32_t> OtherUnfinished(GangWatch& watch,
                                      const MemberState& state) {
  std::vector<uint32_t> others = watch.unfinished();
  others.erase(std::remove(others.begin(), others.end(),
                           static_cast<uint32_t>(state.member_index)),
               others.end());
  return others;
}

// The outcome of a member whose gang failed because of something else than
// its own script: preempted, or stopped for a peer.
Outcome FailedGangOutcome(GangWatch& watch) {
  return watch.preempted() ? Outcome::Preempted(watch.failure_reason())
                           : Outcome::PeerFailure(watch.failure_reason());
}

// The user stage ended with `exit_code` and the member reported it: decides
// the stage's outcome from the gang's fate. `stopped_for_peer`: the stage was
// terminated because the gang failed.
Outcome GangOutcome(const StageContext& context, const MemberState& state,
                    const JobCredentials& credentials,
                    const std::string& stage_name, GangWatch& watch,
                    int exit_code, bool stopped_for_peer) {
  if (stopped_for_peer && watch.preempted()) return FailedGangOutcome(watch);
  if (stopped_for_peer) {
    // A hung member is stopped by its own gang's failure but is its cause.
    if (watch.failed_job_id() == state.job_id) {
      Outcome outcome = Outcome::ScriptFailure(exit_code == 0 ? 1 : exit_code);
      outcome.message = watch.failure_reason();
      return outcome;
    }
    return FailedGangOutcome(watch);
  }
  const bool cancelled = context.signal.load() != 0;
  if (exit_code != 0 || cancelled) {
    // The member whose report failed the gang keeps its own code; one whose
    // script died because a peer had failed first (a broken collective) gets
    // the peer-failure code. Both logs get the same root-cause line.
    Outcome outcome = Outcome::ScriptFailure(exit_code == 0 ? 1 : exit_code);
    const GangWatch::Fate fate =
        IsMainScriptStage(stage_name)
            ? watch.WaitForFate(RootCauseDeadline(context), nullptr)
            : watch.fate();
    if (fate == GangWatch::Fate::kFailed) {
      const int64_t culprit = watch.failed_job_id();
      if (watch.preempted() || (culprit != 0 && culprit != state.job_id)) {
        return FailedGangOutcome(watch);
      }
      outcome.message = watch.failure_reason();
    }
    return outcome;
  }
  if (watch.fate() == GangWatch::Fate::kFailed) {
    return FailedGangOutcome(watch);
  }
  if (!IsMainScriptStage(stage_name)) return Outcome::Success();

  // The exit barrier: the gang succeeds or fails as a whole.
  if (watch.fate() == GangWatch::Fate::kUnknown) {
    const std::vector<uint32_t> others = OtherUnfinished(watch, state);
    const size_t waiting_for = watch.unfinished().empty()
                                   ? state.assignment.num_nodes() - 1
                                   : others.size();
    if (waiting_for > 0) {
      context.out << "gdt: waiting for " << waiting_for << " other member"
                  << (waiting_for == 1 ? "" : "s") << " to finish\n";
      context.out.flush();
    }
  }
  const GangWatch::Fate fate = watch.WaitForFate(
      std::chrono::steady_clock::now() + context.config.exit_barrier_timeout,
      [&context] { return context.signal.load() != 0; });
  switch (fate) {
    case GangWatch::Fate::kSucceeded:
      return Outcome::Success();
    case GangWatch::Fate::kFailed:
      return FailedGangOutcome(watch);
    case GangWatch::Fate::kUnknown:
      break;
  }
  if (context.signal.load() != 0) {
    // Cancelled while waiting: the gang cannot succeed without this member.
    ReportExitQuietly(context, state, credentials, 0, /*cancelled=*/true);
    Outcome outcome = Outcome::ScriptFailure(128 + context.signal.load());
    if (watch.WaitForFate(RootCauseDeadline(context), nullptr) ==
        GangWatch::Fate::kFailed) {
      outcome.message = watch.failure_reason();
    } else {
      outcome.message = "cancelled while waiting for the other members";
    }
    return outcome;
  }
  if (absl::Status error = watch.error(); !error.ok()) {
    return Outcome::SystemFailure(
        absl::StrCat("cannot learn whether gang ", state.assignment.gang_id(),
                     " succeeded: ", error.ToString()));
  }
  const std::vector<uint32_t> unfinished = OtherUnfinished(watch, state);
  Outcome outcome = Outcome::ScriptFailure(kPeerFailureExitCode);
  outcome.message = absl::StrCat(
      "gang ", state.assignment.gang_id(), ": exit barrier timed out after ",
      context.config.exit_barrier_timeout.count(), " s; member",
      unfinished.size() == 1 ? " " : "s ", absl::StrJoin(unfinished, ", "),
      " had not finished (exit_barrier_timeout_seconds)");
  return outcome;
}

// Why a member's stage could not run, for its gang's root cause: a live
// agent that answered the stage with a refusal (e.g. the member's set-up
// failed) says so; anything else is the agent lost mid-stage.
std::string LostReason(const MemberState& state, const std::string& stage_name,
                       const absl::Status& status) {
  const std::string agent =
      absl::StrCat("its agent on host ", state.assignment.host_name(), " (",
                   state.agent_endpoint, ")");
  if (rendezvous::IsPeerRefusal(status)) {
    return absl::StrCat(agent, " refused ", stage_name, ": ", status.message());
  }
  return absl::StrCat(agent, " became unreachable during ", stage_name);
}

}  // namespace

Outcome RunScriptStage(const StageContext& context,
                       const std::string& script_path,
                       const std::string& stage_name) {
  absl::StatusOr<MemberState> state =
      ReadMemberState(context.env.MemberStatePath());
  if (!state.ok()) {
    if (state.status().code() == absl::StatusCode::kNotFound) {
      return Outcome::SystemFailure(absl::StrCat(
          "prepare did not complete: no member state at ",
          context.env.MemberStatePath(), " (stage ", stage_name, ")"));
    }
    return Outcome::SystemFailure(std::string(state.status().message()));
  }
  if (state->assignment.not_needed()) {
    if (IsMainScriptStage(stage_name)) {
      context.out << "gdt: "
                  << NotNeededLine(state->assignment,
                                   static_cast<int>(state->gang_key.size()))
                  << std::endl;
    }
    return Outcome::Success();
  }

  absl::StatusOr<std::string> script = ReadTextFile(script_path);
  if (!script.ok()) {
    return Outcome::SystemFailure(
        absl::StrCat("stage script: ", script.status().message()));
  }

  v1::StartStage start;
  // Read with the job for user stages, the only ones that talk to the
  // coordinator.
  JobCredentials credentials;
  start.set_member_id(state->member_id);
  start.set_stage(stage_name);
  start.set_script(*script);
  start.set_working_dir(state->builds_dir);
  start.set_kill_grace_seconds(
      static_cast<uint32_t>(context.config.kill_grace.count()));
  if (IsUserStage(stage_name)) {
    StageEnvironment contract = BuildEnvironmentContract(
        state->assignment,
        context.env.JobVariable("CI_PROJECT_DIR").value_or(""));
    start.mutable_env()->insert(contract.env.begin(), contract.env.end());
    // Validated by prepare; the job cannot have changed since.
    std::variant<JobInfo, Outcome> job = LoadJob(context.env);
    if (const Outcome* failure = std::get_if<Outcome>(&job)) return *failure;
    credentials = std::get<JobInfo>(job).credentials;
    start.set_hang_timeout_seconds(std::get<JobInfo>(job).hang_timeout_seconds);
    start.set_teardown_timeout_seconds(
        std::get<JobInfo>(job).teardown_timeout_seconds);
    // The agent reports the member lost if this executor goes away.
    start.set_gang_id(state->assignment.gang_id());
    start.set_epoch(state->assignment.epoch());
    start.set_member_index(static_cast<uint32_t>(state->member_index));
    start.set_job_id(state->job_id);
    // The agent keeps the script's exit until the coordinator has it, so
    // a failure is not lost when this executor cannot report it.
    start.set_agent_reports_exit(IsMainScriptStage(stage_name));
    if (std::optional<std::string> project_dir =
            context.env.JobVariable("CI_PROJECT_DIR");
        project_dir.has_value() && !project_dir->empty()) {
      start.set_evidence_dir(*project_dir + "/gdt-evidence");
    }
    for (v1::StageFile& stage_file : contract.files) {
      *start.add_files() = std::move(stage_file);
    }
  }

  rendezvous::AgentClient agent(state->agent_endpoint, context.security);
  PresentMemberToken(agent, state->assignment);
  // The agent sets the member up again (idempotent) before the stage
  // starts, so a restarted agent re-creates the member's directories; an
  // agent that stays unreachable is reported here with the stage's name,
  // before any output was streamed.
  v1::SetupMemberRequest* setup = start.mutable_setup();
  setup->set_member_id(state->member_id);
  setup->set_builds_dir(state->builds_dir);
  if (!state->cache_dir.empty()) setup->add_extra_dirs(state->cache_dir);
  if (absl::Status status = agent.WaitUntilReachable(
          std::chrono::milliseconds(context.config.rpc_timeout));
      !status.ok()) {
    return Outcome::SystemFailure(absl::StrCat(
        "agent ", state->agent_endpoint, " on host ",
        state->assignment.host_name(), " is unreachable for stage ", stage_name,
        ": ", status.ToString()));
  }

  // User stages follow the gang: a peer's failure stops them, and a
  // build_script that exits 0 waits for the rest of the gang.
  std::unique_ptr<GangWatch> watch;
  if (IsUserStage(stage_name)) {
    watch = std::make_unique<GangWatch>(context.config.coordinator,
                                        WatchRequestFor(*state),
                                        context.security, credentials);
  }
  std::atomic<bool> forwarded{false};
  std::atomic<bool> stopped_for_peer{false};
  std::atomic<bool> evidence_requested{false};
  PeerLossDetector peer_loss;  // Fed on this thread by RunStage's reader.
  absl::StatusOr<v1::StageExit> exit = agent.RunStage(
      start,
      [&context, &peer_loss](v1::OutputStream stream, std::string_view data) {
        peer_loss.Feed(data);
        std::ostream& sink =
            stream == v1::OUTPUT_STREAM_STDERR ? context.err : context.out;
        sink.write(data.data(), static_cast<std::streamsize>(data.size()));
        sink.flush();
      },
      [&context, &forwarded, &stopped_for_peer, &evidence_requested,
       &watch]() -> std::optional<v1::Signal> {
        if (context.signal.load() != 0 && !forwarded.exchange(true)) {
          return v1::SIGNAL_TERM;
        }
        if (watch != nullptr && watch->fate() == GangWatch::Fate::kFailed) {
          // A hung gang: evidence first, then the stop, in that order.
          if (watch->collect_evidence() && !evidence_requested.exchange(true)) {
            return v1::SIGNAL_COLLECT_EVIDENCE;
          }
          if (!forwarded.exchange(true)) {
            stopped_for_peer.store(true);
            return v1::SIGNAL_TERM;
          }
        }
        return std::nullopt;
      },
      [&context, &state, &credentials](const v1::HangDetected& hang) {
        context.err << "gdt: no progress for " << hang.idle_seconds()
                    << " s (GDT_HANG_TIMEOUT); evidence collected, failing "
                       "the gang as hung\n";
        context.err.flush();
        ReportExitQuietly(context, *state, credentials, 0, false, "", &hang);
      });
  if (!exit.ok()) {
    const std::string failure =
        absl::StrCat("agent ", state->agent_endpoint, " on host ",
                     state->assignment.host_name(), " failed stage ",
                     stage_name, ": ", exit.status().ToString());
    if (watch == nullptr) return Outcome::SystemFailure(failure);
    // The member is lost with its agent: the gang fails now rather than
    // when the host misses its heartbeats, and this log gets the same
    // root-cause line as every other member's.
    context.err << "gdt: " << failure << "\n";
    context.err.flush();
    ReportExitQuietly(context, *state, credentials, 0, false,
                      LostReason(*state, stage_name, exit.status()));
    if (watch->WaitForFate(RootCauseDeadline(context), nullptr) ==
        GangWatch::Fate::kFailed) {
      return Outcome::SystemFailure(watch->failure_reason());
    }
    return Outcome::SystemFailure(failure);
  }
  if (IsMainScriptStage(stage_name)) {
    ReportExitQuietly(context, *state, credentials, exit->exit_code(),
                      context.signal.load() != 0 && !stopped_for_peer.load(),
                      "", nullptr, peer_loss.detected());
  }
  if (watch != nullptr) {
    return GangOutcome(context, *state, credentials, stage_name, *watch,
                       exit->exit_code(), stopped_for_peer.load());
  }
  if (exit->exit_code() == 0) return Outcome::Success();
  return Outcome::ScriptFailure(exit->exit_code());
}

}  // namespace gdt::executor
