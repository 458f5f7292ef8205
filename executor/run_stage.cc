#include <atomic>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "executor/env_contract.h"
#include "executor/member_state.h"
#include "executor/stages.h"
#include "rendezvous/agent_client.h"
#include "rendezvous/coordinator_client.h"
#include "spdlog/spdlog.h"

namespace gdt::executor {
namespace {

// The user's payload: before_script+script ("build_script") and further
// steps ("step_<name>"). Everything else (get_sources, artifacts, caches,
// after_script, unknown new stages) runs as the runner wrote it.
bool IsUserStage(const std::string& stage_name) {
  return stage_name == "build_script" || absl::StartsWith(stage_name, "step_");
}

void ReportExitQuietly(const StageContext& context, const MemberState& state,
                       int exit_code) {
  rendezvous::CoordinatorClient coordinator(context.config.coordinator);
  v1::ReportExitRequest request;
  request.set_gang_id(state.assignment.gang_id());
  request.set_epoch(state.assignment.epoch());
  request.set_member_index(static_cast<uint32_t>(state.member_index));
  request.set_job_id(state.job_id);
  request.set_exit_code(exit_code);
  if (absl::Status status = coordinator.ReportExit(
          request, std::chrono::milliseconds(context.config.rpc_timeout));
      !status.ok()) {
    spdlog::warn("cannot report exit gang={} job={} code={}: {}",
                 state.assignment.gang_id(), state.job_id, exit_code,
                 status.ToString());
  }
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

  std::ifstream file(script_path, std::ios::binary);
  if (!file) {
    return Outcome::SystemFailure(
        absl::StrCat("cannot read stage script ", script_path));
  }
  std::stringstream script;
  script << file.rdbuf();

  v1::StartStage start;
  start.set_member_id(state->member_id);
  start.set_stage(stage_name);
  start.set_script(script.str());
  start.set_working_dir(state->builds_dir);
  if (IsUserStage(stage_name)) {
    StageEnvironment contract = BuildEnvironmentContract(
        state->assignment,
        context.env.JobVariable("CI_PROJECT_DIR").value_or(""));
    start.mutable_env()->insert(contract.env.begin(), contract.env.end());
    for (v1::StageFile& stage_file : contract.files) {
      *start.add_files() = std::move(stage_file);
    }
  }

  rendezvous::AgentClient agent(state->agent_endpoint);
  // SetupMember is idempotent: it re-creates the member's directories after
  // an agent restart, and an unreachable agent is reported here with the
  // stage's name before any output was streamed.
  v1::SetupMemberRequest setup;
  setup.set_member_id(state->member_id);
  setup.set_builds_dir(state->builds_dir);
  if (!state->cache_dir.empty()) setup.add_extra_dirs(state->cache_dir);
  if (absl::Status status = agent.SetupMember(
          setup, std::chrono::milliseconds(context.config.rpc_timeout));
      !status.ok()) {
    return Outcome::SystemFailure(absl::StrCat(
        "agent ", state->agent_endpoint, " on host ",
        state->assignment.host_name(), " is unreachable for stage ", stage_name,
        ": ", status.ToString()));
  }

  std::atomic<bool> forwarded{false};
  absl::StatusOr<v1::StageExit> exit = agent.RunStage(
      start,
      [&context](v1::OutputStream stream, std::string_view data) {
        std::ostream& sink =
            stream == v1::OUTPUT_STREAM_STDERR ? context.err : context.out;
        sink.write(data.data(), static_cast<std::streamsize>(data.size()));
        sink.flush();
      },
      [&context, &forwarded]() -> std::optional<v1::Signal> {
        if (context.signal.load() != 0 && !forwarded.exchange(true)) {
          return v1::SIGNAL_TERM;
        }
        return std::nullopt;
      });
  if (!exit.ok()) {
    return Outcome::SystemFailure(
        absl::StrCat("agent ", state->agent_endpoint, " on host ",
                     state->assignment.host_name(), " failed stage ",
                     stage_name, ": ", exit.status().ToString()));
  }
  if (stage_name == "build_script") {
    ReportExitQuietly(context, *state, exit->exit_code());
  }
  if (exit->exit_code() == 0) return Outcome::Success();
  return Outcome::ScriptFailure(exit->exit_code());
}

}  // namespace gdt::executor
