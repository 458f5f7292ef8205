// gdt-agent: the daemon on every GPU host. It registers the host with
// gdt-coord, heartbeats, and runs the stages of the gang members placed here
// for gdt-executor. Logs go to stderr.
#include <signal.h>

#include <cstdio>
#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "agent/config.h"
#include "agent/daemon.h"
#include "common/cli_parse.h"
#include "common/exit_code.h"
#include "common/file.h"
#include "common/logging.h"
#include "common/stop_signals.h"
#include "spdlog/spdlog.h"

int main(int argc, char** argv) {
  CLI::App app{"gdt-agent: runs gang members' stages on this host"};
  std::string config_path;
  std::string listen;
  std::string port_file;
  app.set_version_flag("--version", "gdt-agent " GDT_VERSION);
  app.add_option("--config", config_path, "YAML config file")->required();
  app.add_option("--listen", listen,
                 "host:port to serve on (overrides config)");
  app.add_option("--port-file", port_file,
                 "write the bound host:port here once serving");
  if (std::optional<int> code = gdt::ParseCommandLine(app, argc, argv)) {
    return *code;
  }

  absl::StatusOr<gdt::agent::Config> config =
      gdt::agent::LoadConfig(config_path);
  if (config.ok() && !listen.empty()) {
    config->listen_address = listen;
    if (absl::Status valid = gdt::agent::ValidateConfig(*config); !valid.ok()) {
      config = valid;
    }
  }
  if (!config.ok()) {
    std::fprintf(stderr, "gdt-agent: %s\n",
                 std::string(config.status().message()).c_str());
    return gdt::kExitUsage;
  }
  if (absl::Status tls =
          gdt::CheckListenerTls(config->tls, config->listen_address);
      !tls.ok()) {
    std::fprintf(stderr, "gdt-agent: %s\n", std::string(tls.message()).c_str());
    return gdt::kExitUsage;
  }
  if (absl::Status logging = gdt::InitLogging("gdt-agent", config->log_level);
      !logging.ok()) {  // A bad $GDT_LOG_LEVEL (the config's was checked).
    std::fprintf(stderr, "gdt-agent: %s\n",
                 std::string(logging.message()).c_str());
    return gdt::kExitUsage;
  }

  if (const std::string warning =
          gdt::PlaintextWarning(config->tls, "gdt-agent");
      !warning.empty()) {
    std::fprintf(stderr, "%s\n", warning.c_str());
  }
  // Before gRPC starts its threads; sigwait() takes them.
  const sigset_t signals = gdt::BlockStopSignals();

  absl::StatusOr<std::unique_ptr<gdt::agent::Daemon>> daemon =
      gdt::agent::Daemon::Start(*config);
  if (!daemon.ok()) {
    spdlog::critical("event=start_failed error={}",
                     gdt::LogValue(daemon.status().ToString()));
    return gdt::kExitFailure;
  }
  if (!port_file.empty()) {
    absl::Status written =
        gdt::WriteFileAtomically(port_file, (*daemon)->bound_endpoint() + "\n");
    if (!written.ok()) {
      spdlog::critical("event=port_file_failed error={}",
                       gdt::LogValue(written.ToString()));
      return gdt::kExitFailure;
    }
  }
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  spdlog::info("event=shutting_down signal={}", signal_number);
  (*daemon)->Shutdown();
  return gdt::kExitOk;
}
