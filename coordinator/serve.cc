#include "coordinator/serve.h"

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/clock.h"
#include "common/exit_code.h"
#include "common/heap_trim.h"
#include "common/logging.h"
#include "common/open_files.h"
#include "common/stop_signals.h"
#include "common/tls_config.h"
#include "coordinator/config.h"
#include "coordinator/ha_server.h"
#include "coordinator/server.h"
#include "spdlog/spdlog.h"

namespace gdt::coordinator {
namespace {

// How much memory a burst must have left resident but unused before the
// daemon hands it back (see HeapTrimmer), checked once a second.
constexpr size_t kTrimAfterBytes = 8u * 1024 * 1024;

// Called about once a second by the serving loops.
void TrimHeap(HeapTrimmer& trimmer) {
  const auto start = std::chrono::steady_clock::now();
  if (const size_t released = trimmer.MaybeTrim(); released > 0) {
    spdlog::debug("event=heap_trimmed released_kib={} took_us={}",
                  released / 1024,
                  std::chrono::duration_cast<std::chrono::microseconds>(
                      std::chrono::steady_clock::now() - start)
                      .count());
  }
}

int Fail(int code, const std::string& message) {
  std::fprintf(stderr, "gdt-coord: %s\n", message.c_str());
  return code;
}

// One replica of several sharing state in etcd (docs/ha.md). Returns when
// signalled, or with kExitLostLeadership once it led and lost its lease.
int ServeHa(const ServeOptions& flags, const Config& config,
            const sigset_t& signals) {
  if (!flags.metrics_port_file.empty()) {
    return Fail(kExitUsage,
                "--metrics-port-file is not supported with state_store: etcd "
                "(only the leader serves metrics_address)");
  }
  if (!config.dashboard_address.empty() || !flags.dashboard_port_file.empty()) {
    return Fail(kExitUsage,
                "dashboard_address is not served with state_store: etcd yet "
                "(use `gdt-coord status --watch` against the replicas)");
  }
  SystemClock clock;
  absl::StatusOr<std::unique_ptr<HaServer>> server =
      HaServer::Start(config, clock);
  if (!server.ok()) {
    return Fail(server.status().code() == absl::StatusCode::kUnavailable
                    ? kExitUnavailable
                    : kExitUsage,
                std::string(server.status().message()));
  }
  if (!flags.port_file.empty()) {
    if (absl::Status written =
            WritePortFile(flags.port_file, (*server)->bound_address());
        !written.ok()) {
      return Fail(kExitFailure, std::string(written.message()));
    }
  }
  spdlog::info("event=listening address={} state=etcd etcd={} cluster={}",
               (*server)->bound_address(),
               absl::StrJoin(config.etcd_endpoints, ","), config.etcd_cluster);
  HeapTrimmer trimmer(kTrimAfterBytes);
  const timespec tick{0, 100 * 1000 * 1000};
  for (int ticks = 1;; ++ticks) {
    if (ticks % 10 == 0) TrimHeap(trimmer);
    const int signal_number = sigtimedwait(&signals, nullptr, &tick);
    if (signal_number > 0) {
      spdlog::info("event=shutting_down signal={}", signal_number);
      (*server)->Shutdown();
      return kExitOk;
    }
    if ((*server)->lost()) {
      (*server)->Shutdown();
      return Fail(kExitLostLeadership,
                  "lost the etcd leader lease; stopped serving (restart to "
                  "rejoin as a standby)");
    }
  }
}

}  // namespace

int RunServe(const ServeOptions& flags) {
  absl::StatusOr<Config> config = LoadConfig(flags.config);
  if (!config.ok()) {
    return Fail(kExitUsage, std::string(config.status().message()));
  }
  if (!flags.listen.empty()) config->listen_address = flags.listen;
  if (!flags.state.empty()) config->state_path = flags.state;
  if (absl::Status valid = ValidateConfig(*config); !valid.ok()) {
    return Fail(kExitUsage, std::string(valid.message()));
  }
  if (absl::Status tls = CheckListenerTls(config->tls, config->listen_address);
      !tls.ok()) {
    return Fail(kExitUsage, std::string(tls.message()));
  }
  // The liveness server serves with the same credentials: the same rule
  // (its message names "listen_address", hence the prefix).
  if (!config->liveness_listen_address.empty() &&
      config->liveness_listen_address != "off") {
    if (absl::Status tls =
            CheckListenerTls(config->tls, config->liveness_listen_address);
        !tls.ok()) {
      return Fail(kExitUsage, absl::StrCat("liveness_", tls.message()));
    }
  }
  if (absl::Status logging = InitLogging("gdt-coord", config->log_level);
      !logging.ok()) {
    return Fail(kExitUsage, std::string(logging.message()));
  }
  // Every job (and anyone on the network) can connect to the coordinator.
  RaiseOpenFilesLimit("anyone who reaches the coordinator (any job)");
  if (const std::string warning = PlaintextWarning(config->tls, "gdt-coord");
      !warning.empty()) {
    std::fprintf(stderr, "%s\n", warning.c_str());
  }
  // Before gRPC starts its threads; the server waits for them below.
  const sigset_t signals = BlockStopSignals();

  SystemClock clock;
  if (config->state_store == "etcd") return ServeHa(flags, *config, signals);
  absl::StatusOr<std::unique_ptr<CoordinatorServer>> server =
      CoordinatorServer::Start(*config, clock);
  if (!server.ok()) {
    return Fail(server.status().code() == absl::StatusCode::kUnavailable
                    ? kExitUnavailable
                    : kExitFailure,
                std::string(server.status().message()));
  }
  // The metrics port file first: once the port file exists, both do.
  if (!flags.metrics_port_file.empty()) {
    if ((*server)->metrics_address().empty()) {
      return Fail(kExitUsage,
                  "--metrics-port-file needs metrics_address in the config");
    }
    if (absl::Status written = WritePortFile(flags.metrics_port_file,
                                             (*server)->metrics_address());
        !written.ok()) {
      return Fail(kExitFailure, std::string(written.message()));
    }
  }
  std::optional<ServeOptions::Dashboard> dashboard;
  if (!config->dashboard_address.empty()) {
    if (!flags.start_dashboard) {
      return Fail(kExitUsage, "this gdt-coord has no web dashboard built in");
    }
    absl::StatusOr<ServeOptions::Dashboard> started =
        flags.start_dashboard(**server, config->dashboard_address);
    if (!started.ok()) {
      return Fail(started.status().code() == absl::StatusCode::kUnavailable
                      ? kExitUnavailable
                      : kExitUsage,
                  std::string(started.status().message()));
    }
    dashboard = *std::move(started);
  }
  if (!flags.dashboard_port_file.empty()) {
    if (!dashboard.has_value()) {
      return Fail(kExitUsage,
                  "--dashboard-port-file needs dashboard_address in the "
                  "config");
    }
    if (absl::Status written =
            WritePortFile(flags.dashboard_port_file, dashboard->bound_address);
        !written.ok()) {
      return Fail(kExitFailure, std::string(written.message()));
    }
  }
  if (!flags.port_file.empty()) {
    if (absl::Status written =
            WritePortFile(flags.port_file, (*server)->bound_address());
        !written.ok()) {
      return Fail(kExitFailure, std::string(written.message()));
    }
  }
  spdlog::info("event=listening address={} metrics={} dashboard={} state={}",
               (*server)->bound_address(),
               (*server)->metrics_address().empty()
                   ? "off"
                   : (*server)->metrics_address(),
               dashboard.has_value() ? dashboard->url : "off",
               LogValue(config->state_path));
  HeapTrimmer trimmer(kTrimAfterBytes);
  const timespec second{1, 0};
  int signal_number = 0;
  while ((signal_number = sigtimedwait(&signals, nullptr, &second)) <= 0) {
    TrimHeap(trimmer);
  }
  spdlog::info("event=shutting_down signal={}", signal_number);
  dashboard.reset();
  (*server)->Shutdown();
  return kExitOk;
}

}  // namespace gdt::coordinator
