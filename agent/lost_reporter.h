#ifndef GDT_AGENT_LOST_REPORTER_H_
#define GDT_AGENT_LOST_REPORTER_H_

#include <chrono>
#include <deque>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"
#include "gdt/v1/coordinator.pb.h"
#include "rendezvous/coordinator_client.h"

namespace gdt::agent {

// Tells the coordinator, from a background thread, that members whose
// executor went away mid-stage are lost (a lost executor counts as
// a lost member), so their gang fails at once with a root cause naming them.
// Reports are best effort: each gets one try within `timeout`.
//
// Thread-safe. Keeps a reference to `client`, which must outlive it.
class LostMemberReporter {
 public:
  LostMemberReporter(rendezvous::CoordinatorClient& client,
                     std::chrono::milliseconds timeout);
  // Sends what is queued, then stops.
  ~LostMemberReporter();
  LostMemberReporter(const LostMemberReporter&) = delete;
  LostMemberReporter& operator=(const LostMemberReporter&) = delete;

  // Queues `request` (its lost_reason set) and returns at once.
  void Report(v1::ReportExitRequest request);

 private:
  void Run();

  rendezvous::CoordinatorClient& client_;
  const std::chrono::milliseconds timeout_;
  Mutex mu_;
  CondVar changed_;
  std::deque<v1::ReportExitRequest> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // Last: starts after everything above exists.
};

}  // namespace gdt::agent

#endif  // GDT_AGENT_LOST_REPORTER_H_
