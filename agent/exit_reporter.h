#ifndef GDT_AGENT_EXIT_REPORTER_H_
#define GDT_AGENT_EXIT_REPORTER_H_

#include <chrono>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "agent/exit_outbox.h"
#include "common/mutex.h"
#include "gdt/v1/coordinator.pb.h"
#include "rendezvous/coordinator_client.h"

namespace gdt::agent {

// Delivers the exit outbox to the coordinator from a background thread:
// every record is sent as a ReportExit (a lost member's with its
// lost_reason) until the coordinator acknowledges it, retrying with backoff
// for as long as the coordinator stays unreachable; a record the coordinator
// refuses for good (an older epoch, a gang it does not know) is dropped
// with a warning. The coordinator counts the first report of a member's
// exit, whether the agent's or the executor's, and ignores the other.
//
// Thread-safe. Keeps references to `outbox` and `client`, which must
// outlive it.
class ExitReporter {
 public:
  struct Options {
    std::chrono::milliseconds rpc_timeout{5000};
    std::chrono::milliseconds initial_backoff{200};
    // Short: the delay after the coordinator is back before its exits are.
    std::chrono::milliseconds max_backoff{2000};
  };

  // Starts the thread, which sends what `outbox` holds already.
  ExitReporter(ExitOutbox& outbox, rendezvous::CoordinatorClient& client,
               Options options);
  // Tries once more what is kept (within the rpc timeout), then stops;
  // what is still undelivered stays on disk for the next agent.
  ~ExitReporter();
  ExitReporter(const ExitReporter&) = delete;
  ExitReporter& operator=(const ExitReporter&) = delete;

  // Keeps `record` in the outbox (on disk) and sends it soon. Returns at
  // once.
  void Report(const ExitRecord& record);

 private:
  void Run();
  // Sends every record kept; false when the coordinator was unreachable.
  bool SendAll();

  ExitOutbox& outbox_;
  rendezvous::CoordinatorClient& client_;
  const Options options_;
  Mutex mu_;
  CondVar changed_;
  bool pending_ ABSL_GUARDED_BY(mu_) = true;  // Load()ed records, if any.
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // Last: starts after everything above exists.
};

// The ReportExit request that delivers `record`.
v1::ReportExitRequest ToReportExit(const ExitRecord& record);

// Whether a refused report may succeed later (the coordinator is
// unreachable, restarting or busy) rather than never.
bool IsRetryable(const absl::Status& status);

}  // namespace gdt::agent

#endif  // GDT_AGENT_EXIT_REPORTER_H_
