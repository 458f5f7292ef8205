// gdt-rsh: a remote shell into gang members through their gdt-agents, for
// mpirun / deepspeed / horovod. Everything lives in rsh_cli.cc.
#include <atomic>
#include <csignal>
#include <iostream>

#include "common/subprocess.h"
#include "common/version_flag.h"
#include "launch/rsh_cli.h"

namespace {

std::atomic<int> stop_signal{0};

void OnSignal(int signal) { stop_signal.store(signal); }

}  // namespace

int main(int argc, char** argv) {
  if (gdt::PrintVersionIfAsked(argc, argv, "gdt-rsh " GDT_VERSION, std::cout)) {
    return 0;
  }
  for (int signal : {SIGTERM, SIGINT, SIGHUP}) std::signal(signal, OnSignal);
  return gdt::launch::RunRshCli(
      argc, argv, gdt::CurrentEnvironment(), [] { return stop_signal.load(); },
      std::cout, std::cerr);
}
