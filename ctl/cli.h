#ifndef GDT_CTL_CLI_H_
#define GDT_CTL_CLI_H_

#include <functional>
#include <string>

#include "CLI/CLI.hpp"

namespace gdt::ctl {

// The flags of `gdt-coord serve`.
struct ServeFlags {
  std::string config;
  std::string listen;
  std::string state;
  std::string port_file;
  std::string metrics_port_file;
  std::string dashboard_port_file;
};

// What gdt-coord's main wires in: the commands that live in other
// components (the daemon, the simulator).
struct CoordCommands {
  std::string version;  // Printed by --version, e.g. "gdt-coord 1.2.3".
  // Runs `serve`; returns the exit code.
  std::function<int(const ServeFlags&)> serve;
  // Adds the options of `simulate` to its subcommand.
  std::function<void(CLI::App&)> add_simulate_options;
  // Runs `simulate` with the options parsed; returns the exit code.
  std::function<int()> simulate;
};

// gdt-coord's command line: parses argv, runs one command and returns the
// process's exit code (docs/operations.md). Errors are one line on stderr,
// `gdt-coord: ...`; results go to stdout.
int RunCoordCli(int argc, char** argv, const CoordCommands& commands);

}  // namespace gdt::ctl

#endif  // GDT_CTL_CLI_H_
