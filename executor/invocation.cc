#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "executor/stages.h"

namespace gdt::executor {
namespace {

constexpr const char* kUsage =
    "usage: gdt-executor [--config FILE] config|prepare|cleanup | "
    "gdt-executor [--config FILE] run <script_path> <stage_name> | "
    "gdt-executor --help | --version";

absl::Status Usage(const std::string& problem) {
  return absl::InvalidArgumentError(absl::StrCat(problem, "; ", kUsage));
}

}  // namespace

std::string HelpText() {
  return absl::StrCat(
      "gdt-executor: the GitLab Runner custom executor of gdt.\n", kUsage,
      "\n\n"
      "gitlab-runner calls it once per stage (see examples/config.toml):\n"
      "  config                  print the runner's JSON (unique builds dir)\n"
      "  prepare                 join the job's gang, wait for admission, set "
      "up the placed host\n"
      "  run <script> <stage>    run a stage script on the placed host's "
      "gdt-agent, streaming its output\n"
      "  cleanup                 tear the member down and leave the gang\n\n"
      "Config: --config FILE, else $GDT_EXECUTOR_CONFIG, else "
      "/etc/gdt/executor.yaml.\n"
      "Exit codes: 0 success; $BUILD_FAILURE_EXIT_CODE when the job's script "
      "or the job's own settings fail\n"
      "(the script's code in $BUILD_EXIT_CODE_FILE); $SYSTEM_FAILURE_EXIT_CODE "
      "for infrastructure failures.\n");
}

absl::StatusOr<Invocation> ParseInvocation(const std::vector<std::string>& args,
                                           const Environment& environment) {
  std::string config_flag;
  std::vector<std::string> positional;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    // --config may come before or after the stage name: runners are set up
    // with either `config_args = ["--config", F, "config"]` or
    // `["config", "--config", F]`.
    if (arg == "--config") {
      if (i + 1 >= args.size()) return Usage("--config needs a file");
      config_flag = args[++i];
    } else if (absl::StartsWith(arg, "--config=")) {
      config_flag = arg.substr(std::string("--config=").size());
    } else if (absl::StartsWith(arg, "-")) {
      return Usage(absl::StrCat("unknown option '", arg, "'"));
    } else {
      positional.push_back(arg);
    }
  }
  if (positional.empty()) return Usage("no stage given");

  Invocation invocation;
  invocation.config_path = ResolveConfigPath(config_flag, environment);
  const std::string& stage = positional[0];
  const size_t extra = positional.size() - 1;
  if (stage == "run") {
    if (extra != 2) {
      return Usage(absl::StrCat("run takes <script_path> <stage_name>, got ",
                                extra, " arguments"));
    }
    invocation.stage = Invocation::Stage::kRun;
    invocation.script_path = positional[1];
    invocation.stage_name = positional[2];
    return invocation;
  }
  if (stage == "config") {
    invocation.stage = Invocation::Stage::kConfig;
  } else if (stage == "prepare") {
    invocation.stage = Invocation::Stage::kPrepare;
  } else if (stage == "cleanup") {
    invocation.stage = Invocation::Stage::kCleanup;
  } else {
    return Usage(absl::StrCat("unknown stage '", stage, "'"));
  }
  if (extra != 0) {
    return Usage(absl::StrCat(stage, " takes no arguments"));
  }
  return invocation;
}

Outcome RunInvocation(const Invocation& invocation,
                      const StageContext& context) {
  switch (invocation.stage) {
    case Invocation::Stage::kConfig:
      return ConfigStage(context);
    case Invocation::Stage::kPrepare:
      return PrepareStage(context);
    case Invocation::Stage::kRun:
      return RunScriptStage(context, invocation.script_path,
                            invocation.stage_name);
    case Invocation::Stage::kCleanup:
      return CleanupStage(context);
  }
  return Outcome::SystemFailure("unknown stage");
}

Outcome ConfigLoadFailure(const Invocation& invocation,
                          const absl::Status& status) {
  Outcome outcome = invocation.stage == Invocation::Stage::kCleanup
                        ? Outcome::Success()
                        : Outcome::SystemFailure("");
  outcome.message =
      absl::StrCat("cannot load executor config: ", status.message());
  return outcome;
}

}  // namespace gdt::executor
