// gdt-launch: head/worker frameworks across a gdt gang from recipe files.
// Everything lives in launch_cli.cc; this wires signals and the environment.
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <iostream>

#include "common/subprocess.h"
#include "common/version_flag.h"
#include "launch/launch_cli.h"

namespace {

std::atomic<int> stop_signal{0};

void OnSignal(int signal) { stop_signal.store(signal); }

}  // namespace

int main(int argc, char** argv) {
  if (gdt::PrintVersionIfAsked(argc, argv, "gdt-launch " GDT_VERSION,
                               std::cout)) {
    return 0;
  }
  for (int signal : {SIGTERM, SIGINT, SIGHUP}) std::signal(signal, OnSignal);
  std::vector<std::string> defaults;
  std::map<std::string, std::string> env = gdt::CurrentEnvironment();
  std::error_code error;
  const std::filesystem::path self =
      std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) {
    defaults.push_back(
        (self.parent_path().parent_path() / "share/gdt/launchers").string());
    // Where gdt-launch (and gdt-rsh beside it) is installed, for recipes.
    env.emplace("GDT_BIN_DIR", self.parent_path().string());
  }
  return gdt::launch::RunLaunchCli(
      argc, argv, env, defaults, [] { return stop_signal.load(); }, std::cout,
      std::cerr);
}
