#ifndef GDT_LAUNCH_LAUNCH_CLI_H_
#define GDT_LAUNCH_LAUNCH_CLI_H_

#include <functional>
#include <map>
#include <ostream>
#include <string>

namespace gdt::launch {

// gdt-launch's command line (docs/launchers/head-worker.md):
//   gdt-launch [--recipes-dir DIR]... [--print] RECIPE -- COMMAND...
// Rank 0 runs the recipe's head and then COMMAND; other ranks run its
// worker. `env` is the process environment; `default_dirs` are searched
// after --recipes-dir and $GDT_LAUNCHERS_DIR. Returns the exit code: 2 for
// usage, a bad recipe or a missing gdt environment (one line on `err`),
// otherwise RunHead's / RunWorker's.
int RunLaunchCli(int argc, char** argv,
                 const std::map<std::string, std::string>& env,
                 const std::vector<std::string>& default_dirs,
                 const std::function<int()>& stop_requested, std::ostream& out,
                 std::ostream& err);

}  // namespace gdt::launch

#endif  // GDT_LAUNCH_LAUNCH_CLI_H_
