// gdt-executor: the GitLab Runner custom executor of gdt. The runner calls it
// once per stage (config, prepare, run <script> <stage>, cleanup); it joins
// the job's gang, relays stage scripts to the placed host's gdt-agent and
// maps every outcome onto the runner's exit codes. Logs go to stderr only:
// the runner parses config's stdout as JSON.
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "common/logging.h"
#include "common/subprocess.h"
#include "executor/config.h"
#include "executor/job_env.h"
#include "executor/outcome.h"
#include "executor/signals.h"
#include "executor/stages.h"
#include "rendezvous/tls.h"
#include "spdlog/spdlog.h"

int main(int argc, char** argv) {
  using gdt::executor::FinishOutcome;
  using gdt::executor::Outcome;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      std::cout << gdt::executor::HelpText();
      return 0;
    }
    if (std::string(argv[i]) == "--version") {
      std::cout << "gdt-executor " GDT_VERSION "\n";
      return 0;
    }
  }
  const std::atomic<int>& signal = gdt::executor::InstallTerminationHandlers();
  const gdt::executor::Environment environment = gdt::CurrentEnvironment();
  const gdt::executor::JobEnv job_env = gdt::executor::ReadJobEnv(environment);

  absl::StatusOr<gdt::executor::Invocation> invocation =
      gdt::executor::ParseInvocation(
          std::vector<std::string>(argv + 1, argv + argc), environment);
  if (!invocation.ok()) {
    return FinishOutcome(
        Outcome::SystemFailure(std::string(invocation.status().message())),
        job_env.exit_codes, std::cerr);
  }
  absl::StatusOr<gdt::executor::Config> config =
      gdt::executor::LoadConfig(invocation->config_path);
  if (!config.ok()) {
    return FinishOutcome(
        gdt::executor::ConfigLoadFailure(*invocation, config.status()),
        job_env.exit_codes, std::cerr);
  }
  // The level was validated with the config; stdout stays free for JSON.
  gdt::InitLogging("gdt-executor", config->log_level).IgnoreError();
  for (const std::string& warning : job_env.warnings) {
    spdlog::warn("event=job_env_warning detail={}", gdt::LogValue(warning));
  }

  // TLS towards the coordinator and agents; a bad file is one line.
  absl::StatusOr<gdt::rendezvous::ClientSecurity> security =
      gdt::rendezvous::LoadClientSecurity(config->tls);
  if (!security.ok()) {
    return FinishOutcome(
        gdt::executor::ConfigLoadFailure(*invocation, security.status()),
        job_env.exit_codes, std::cerr);
  }
  if (invocation->stage == gdt::executor::Invocation::Stage::kPrepare) {
    if (const std::string warning =
            gdt::PlaintextWarning(config->tls, "gdt-executor");
        !warning.empty()) {
      std::cerr << warning << "\n";
    }
  }
  const gdt::executor::StageContext context{*config,   job_env,   signal,
                                            std::cout, std::cerr, *security};
  const Outcome outcome = gdt::executor::RunInvocation(*invocation, context);
  const int exit_code = FinishOutcome(outcome, job_env.exit_codes, std::cerr);
  if (outcome.exit_immediately) {
    // A join thread may still be blocked in gRPC; skip static destructors.
    std::cout.flush();
    spdlog::shutdown();
    std::_Exit(exit_code);
  }
  return exit_code;
}
