// gdt-coord: the gdt coordinator daemon (`serve`), its operator commands
// (`status`, `hosts`, `cancel`) and the trace simulator (`simulate`). The
// command line lives in ctl/cli.h; this wires in the daemon and the
// simulator, which live in other components.
#include <cstdio>
#include <iostream>

#include "coordinator/serve.h"
#include "ctl/cli.h"
#include "sim/sim_command.h"

int main(int argc, char** argv) {
  gdt::sim::SimulateFlags sim_flags;
  gdt::ctl::CoordCommands commands;
  commands.version = "gdt-coord " GDT_VERSION;
  commands.serve = [](const gdt::ctl::ServeFlags& flags) {
    return gdt::coordinator::RunServe({flags.config, flags.listen, flags.state,
                                       flags.port_file,
                                       flags.metrics_port_file});
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
