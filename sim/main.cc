// gdt-sim: replays a job trace through the gang admission policy in virtual
// time and prints the result. The same command as `gdt-coord simulate`
// (sim/sim_command.h), kept as an alias.
#include <cstdio>
#include <optional>

#include "CLI/CLI.hpp"
#include "common/cli_parse.h"
#include "common/exit_code.h"
#include "sim/sim_command.h"

int main(int argc, char** argv) {
  CLI::App app{
      "gdt-sim: replay a GPU job trace through gdt's gang admission policy "
      "(same as `gdt-coord simulate`)"};
  app.set_version_flag("--version", "gdt-sim " GDT_VERSION);
  gdt::sim::SimulateFlags flags;
  gdt::sim::AddSimulateOptions(app, flags);
  if (std::optional<int> code = gdt::ParseCommandLine(app, argc, argv)) {
    return *code;
  }
  const gdt::sim::SimulateReport report = gdt::sim::RunSimulate(flags);
  std::fputs(report.output.c_str(), stdout);
  if (!report.error.empty()) {
    std::fprintf(stderr, "gdt-sim: %s\n", report.error.c_str());
  }
  return report.exit_code;
}
