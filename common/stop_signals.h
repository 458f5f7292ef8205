#ifndef GDT_COMMON_STOP_SIGNALS_H_
#define GDT_COMMON_STOP_SIGNALS_H_

#include <pthread.h>
#include <signal.h>

namespace gdt {

// Blocks SIGTERM and SIGINT in the calling thread, and so in every thread
// it starts afterwards, and returns that set. Call it before any thread is
// started (gRPC starts its own): the signals then arrive only where the
// caller waits for them (sigwait, sigtimedwait on the set), never in a
// thread that does not expect them.
inline sigset_t BlockStopSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

}  // namespace gdt

#endif  // GDT_COMMON_STOP_SIGNALS_H_
