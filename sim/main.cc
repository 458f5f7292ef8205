// gdt-sim: replays a job trace through the gang admission policy in virtual
// time and prints the result. The same command as `gdt-coord simulate`
// (sim/sim_command.h), kept as an alias.
#include <cstdio>

#include "CLI/CLI.hpp"
#include "common/exit_code.h"
#include "sim/sim_command.h"

int main(int argc, char** argv) {
  CLI::App app{
      "gdt-sim: replay a GPU job trace through gdt's gang admission policy "
      "(same as `gdt-coord simulate`)"};
  app.set_version_flag("--version", "gdt-sim " GDT_VERSION);
  gdt::sim::SimulateFlags flags;
  gdt::sim::AddSimulateOptions(app, flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version end with 0; bad flags with gdt's usage code.
    const int code = app.exit(e);
    return code == 0 ? gdt::kExitOk : gdt::kExitUsage;
  }
  const gdt::sim::SimulateReport report = gdt::sim::RunSimulate(flags);
  std::fputs(report.output.c_str(), stdout);
  if (!report.error.empty()) {
    std::fprintf(stderr, "gdt-sim: %s\n", report.error.c_str());
  }
  return report.exit_code;
}
