// gdt-coord: the gdt coordinator daemon (`serve`), its operator commands
// (`status`, `hosts`, `cancel`) and the trace simulator (`simulate`). The
// command line lives in ctl/cli.h; this wires in the daemon and the
// simulator, which live in other components.
#include <cstdio>
#include <iostream>

#include "coordinator/serve.h"
#include "ctl/cli.h"
#include "ctl/dashboard.h"
#include "sim/sim_command.h"

int main(int argc, char** argv) {
  gdt::sim::SimulateFlags sim_flags;
  gdt::ctl::CoordCommands commands;
  commands.version = "gdt-coord " GDT_VERSION;
  commands.serve = [](const gdt::ctl::ServeFlags& flags) {
    gdt::coordinator::ServeOptions options;
    options.config = flags.config;
    options.listen = flags.listen;
    options.state = flags.state;
    options.port_file = flags.port_file;
    options.metrics_port_file = flags.metrics_port_file;
    options.dashboard_port_file = flags.dashboard_port_file;
    options.start_dashboard = [](gdt::coordinator::CoordinatorServer& server,
                                 const std::string& address)
        -> absl::StatusOr<gdt::coordinator::ServeOptions::Dashboard> {
      absl::StatusOr<std::unique_ptr<gdt::ctl::Dashboard>> dashboard =
          gdt::ctl::Dashboard::Start(
              address,
              {server.admin_token_sha256(), server.status_without_token()},
              [&server](uint32_t limit, const std::string& page_token)
                  -> absl::StatusOr<gdt::v1::GetStatusResponse> {
                return server.StatusPageOf(limit, page_token);
              });
      if (!dashboard.ok()) return dashboard.status();
      std::shared_ptr<gdt::ctl::Dashboard> kept = std::move(*dashboard);
      return gdt::coordinator::ServeOptions::Dashboard{
          kept, kept->bound_address(), kept->url()};
    };
    return gdt::coordinator::RunServe(options);
  };
  commands.add_simulate_options = [&sim_flags](CLI::App& simulate) {
    gdt::sim::AddSimulateOptions(simulate, sim_flags);
  };
  commands.simulate = [&sim_flags] {
    const gdt::sim::SimulateReport report = gdt::sim::RunSimulate(sim_flags);
    std::cout << report.output;
    if (!report.error.empty()) {
      std::fprintf(stderr, "gdt-coord: %s\n", report.error.c_str());
    }
    return report.exit_code;
  };
  return gdt::ctl::RunCoordCli(argc, argv, commands);
}
