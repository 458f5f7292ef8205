#include "executor/signals.h"

#include <csignal>

namespace gdt::executor {
namespace {

std::atomic<int> received_signal{0};
static_assert(std::atomic<int>::is_always_lock_free,
              "the signal handler needs a lock-free atomic");

void RecordSignal(int signal) { received_signal.store(signal); }

}  // namespace

const std::atomic<int>& InstallTerminationHandlers() {
  struct sigaction action = {};
  action.sa_handler = RecordSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  return received_signal;
}

}  // namespace gdt::executor
