// gdt-coord: the gdt coordinator daemon (`serve`) and its operator CLI
// (`status`, `cancel`). Parses flags, loads config, wires the server, waits for
// a signal and maps results to exit codes; everything else lives in the
// coordinator libraries.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "CLI/CLI.hpp"
#include "common/clock.h"
#include "common/logging.h"
#include "coordinator/cancel_command.h"
#include "coordinator/config.h"
#include "coordinator/server.h"
#include "coordinator/status_command.h"
#include "spdlog/spdlog.h"

namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;      // State could not be opened; `cancel` of
                                     // an unknown or finished gang.
constexpr int kExitUsage = 2;        // Bad flags or config.
constexpr int kExitUnavailable = 3;  // Cannot bind, or cannot reach.

struct ServeFlags {
  std::string config;
  std::string listen;
  std::string state;
  std::string port_file;
};

int Fail(int code, const std::string& message) {
  std::fprintf(stderr, "gdt-coord: %s\n", message.c_str());
  return code;
}

int Serve(const ServeFlags& flags) {
  absl::StatusOr<gdt::coordinator::Config> config =
      gdt::coordinator::LoadConfig(flags.config);
  if (!config.ok()) {
    return Fail(kExitUsage,
                flags.config + ": " + std::string(config.status().message()));
  }
  if (!flags.listen.empty()) config->listen_address = flags.listen;
  if (!flags.state.empty()) config->state_path = flags.state;
  if (absl::Status valid = gdt::coordinator::ValidateConfig(*config);
      !valid.ok()) {
    return Fail(kExitUsage, std::string(valid.message()));
  }
  if (absl::Status logging = gdt::InitLogging("gdt-coord", config->log_level);
      !logging.ok()) {
    return Fail(kExitUsage, std::string(logging.message()));
  }
  // Block the signals before gRPC starts its threads, then wait for them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  gdt::SystemClock clock;
  absl::StatusOr<std::unique_ptr<gdt::coordinator::CoordinatorServer>> server =
      gdt::coordinator::CoordinatorServer::Start(*config, clock);
  if (!server.ok()) {
    return Fail(server.status().code() == absl::StatusCode::kUnavailable
                    ? kExitUnavailable
                    : kExitFailure,
                std::string(server.status().message()));
  }
  if (!flags.port_file.empty()) {
    if (absl::Status written = gdt::coordinator::WritePortFile(
            flags.port_file, (*server)->bound_address());
        !written.ok()) {
      return Fail(kExitFailure, std::string(written.message()));
    }
  }
  spdlog::info("gdt-coord listening on {} state={}", (*server)->bound_address(),
               config->state_path);
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  spdlog::info("signal {} received, shutting down", signal_number);
  (*server)->Shutdown();
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "gdt-coord: the gdt coordinator. `serve` runs the daemon that admits "
      "and places gangs of GitLab CI jobs on GPU hosts; `status` shows its "
      "hosts and gangs; `cancel` stops a gang."};
  app.require_subcommand(1);

  ServeFlags serve_flags;
  CLI::App* serve = app.add_subcommand("serve", "Run the coordinator daemon");
  serve
      ->add_option(
          "--config", serve_flags.config,
          "YAML config file (keys: listen_address, "
          "advertise_endpoint, state_path, master_port_range, "
          "max_nodes_per_job, heartbeat_interval_seconds, "
          "host_down_after_seconds, failed_gang_release_seconds, log_level)")
      ->required();
  serve->add_option("--listen", serve_flags.listen,
                    "Address to serve on, host:port (port 0 = any free port); "
                    "overrides listen_address");
  serve->add_option("--state", serve_flags.state,
                    "SQLite state file; overrides state_path");
  serve->add_option("--port-file", serve_flags.port_file,
                    "Write the bound host:port here once serving");

  std::string endpoint = "127.0.0.1:7070";
  if (const char* env = std::getenv("GDT_COORDINATOR"); env && *env) {
    endpoint = env;
  }
  bool json = false;
  bool all = false;
  CLI::App* status =
      app.add_subcommand("status", "Show hosts and gangs of a coordinator");
  status->add_option("--coordinator", endpoint,
                     "Coordinator host:port (default: $GDT_COORDINATOR, else "
                     "127.0.0.1:7070)");
  status->add_flag("--json", json, "Print JSON for scripts");
  status->add_flag("--all", all, "Include finished gangs");

  std::string cancel_gang;
  std::string cancel_reason;
  CLI::App* cancel = app.add_subcommand(
      "cancel",
      "Fail a forming or running gang as \"cancelled by operator\": every "
      "member's job stops and prints the same root-cause line. Exit codes: "
      "0 cancelled, 1 unknown or already finished gang, 2 usage, 3 "
      "coordinator unreachable");
  cancel
      ->add_option("GANG", cancel_gang,
                   "Gang id, as `gdt-coord status` "
                   "shows it")
      ->required();
  cancel->add_option("--reason", cancel_reason,
                     "Text appended to the root-cause line");
  cancel->add_option("--coordinator", endpoint,
                     "Coordinator host:port (default: $GDT_COORDINATOR, else "
                     "127.0.0.1:7070)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  }
  if (serve->parsed()) return Serve(serve_flags);
  if (cancel->parsed()) {
    absl::StatusOr<std::string> done = gdt::coordinator::RunCancelCommand(
        endpoint, cancel_gang, cancel_reason);
    if (!done.ok()) {
      const absl::StatusCode code = done.status().code();
      return Fail(code == absl::StatusCode::kUnavailable ? kExitUnavailable
                  : code == absl::StatusCode::kInvalidArgument ? kExitUsage
                                                               : kExitFailure,
                  std::string(done.status().message()));
    }
    std::cout << *done;
    return kExitOk;
  }
  absl::StatusOr<std::string> text =
      gdt::coordinator::RunStatusCommand(endpoint, json, all);
  if (!text.ok()) {
    return Fail(kExitUnavailable, std::string(text.status().message()));
  }
  std::cout << *text;
  return kExitOk;
}
