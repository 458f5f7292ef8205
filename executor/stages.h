#ifndef GDT_EXECUTOR_STAGES_H_
#define GDT_EXECUTOR_STAGES_H_

#include <atomic>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "executor/config.h"
#include "executor/job_env.h"
#include "executor/outcome.h"
#include "rendezvous/channel.h"

namespace gdt::executor {

// One call of gdt-executor as the runner makes it
// (docs/gitlab-runner-protocol.md): `[--config FILE] config|prepare|cleanup` or
// `[--config FILE] run <script_path> <stage_name>`.
struct Invocation {
  enum class Stage { kConfig, kPrepare, kRun, kCleanup };
  Stage stage = Stage::kConfig;
  std::string config_path;  // Resolved: --config, GDT_EXECUTOR_CONFIG, default.
  std::string script_path;  // kRun only.
  std::string stage_name;   // kRun only, e.g. "build_script".
};

// Parses the arguments after argv[0]. Errors: InvalidArgument with a usage
// line.
// The text `gdt-executor --help` prints: stages, config lookup, exit codes.
std::string HelpText();

absl::StatusOr<Invocation> ParseInvocation(const std::vector<std::string>& args,
                                           const Environment& environment);

// What every stage works with. `signal` is 0 until SIGTERM or SIGINT
// arrives, then the signal's number. `out` and `err` are the job log (for
// config, `out` is the JSON the runner parses). References must outlive the
// stage call.
struct StageContext {
  const Config& config;
  const JobEnv& env;
  const std::atomic<int>& signal;
  std::ostream& out;
  std::ostream& err;
  // From config.tls: how to reach the coordinator and agents.
  const rendezvous::ClientSecurity& security;
};

// Validates the job (payload, identity, gdt inputs) and prints the runner's
// JSON: builds_dir <builds_root>/<job_id>, cache_dir, hostname, driver.
Outcome ConfigStage(const StageContext& context);

// Joins the gang and waits for admission (printing waiting reasons), writes
// the member state file, has the placed host's agent set up the builds dir.
// A failure after joining leaves the gang again.
Outcome PrepareStage(const StageContext& context);

// Runs one runner stage script on the placed host's agent and streams its
// output. build_script and step_* get the environment contract; other stages
// run as they are. SIGTERM/SIGINT are forwarded as SIGNAL_TERM.
Outcome RunScriptStage(const StageContext& context,
                       const std::string& script_path,
                       const std::string& stage_name);

// Tears the member down on its agent and leaves the gang (or leaves by the
// payload's key when prepare never got admitted). Best effort: always
// succeeds, problems are logged.
Outcome CleanupStage(const StageContext& context);

// Dispatches to the stage named by `invocation`.
Outcome RunInvocation(const Invocation& invocation,
                      const StageContext& context);

// The outcome when the executor config cannot be loaded: a system failure,
// except for cleanup, which always succeeds.
Outcome ConfigLoadFailure(const Invocation& invocation,
                          const absl::Status& status);

}  // namespace gdt::executor

#endif  // GDT_EXECUTOR_STAGES_H_
