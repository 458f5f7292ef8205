#ifndef GDT_EXECUTOR_GANG_WATCH_H_
#define GDT_EXECUTOR_GANG_WATCH_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "common/mutex.h"
#include "executor/job_env.h"
#include "gdt/v1/coordinator.pb.h"
#include "rendezvous/coordinator_client.h"

namespace gdt::executor {

// Follows the member's gang through a WatchGang stream on a helper thread,
// from construction until destruction, so a stage can stop as soon as a
// peer fails and wait for the gang at its exit barrier.
//
// Thread-safe. The destructor cancels the stream and joins the thread.
class GangWatch {
 public:
  enum class Fate { kUnknown, kFailed, kSucceeded };

  // Starts watching through the coordinator at `endpoint`, presenting
  // `credentials` for coordinators that verify members.
  GangWatch(const std::string& endpoint, const v1::WatchGangRequest& request,
            const rendezvous::ClientSecurity& security = {},
            const JobCredentials& credentials = {});
  ~GangWatch();
  GangWatch(const GangWatch&) = delete;
  GangWatch& operator=(const GangWatch&) = delete;

  Fate fate();
  // The root-cause line once the fate is kFailed, else empty.
  std::string failure_reason();
  // The job whose failure failed the gang; 0 while unknown.
  int64_t failed_job_id();
  // Whether the gang failed as hung: collect evidence before stopping.
  bool collect_evidence();
  // Whether the gang was preempted (stopped for a higher-priority gang).
  bool preempted();
  // Members that had not reported exit 0 at the last progress event; empty
  // before the first one.
  std::vector<uint32_t> unfinished();
  // Why the watch ended without a fate (rejected, deadline); OK while it
  // runs or once the fate is known.
  absl::Status error();

  // Waits until the fate is known, the watch ended without one, `deadline`
  // passes, or `stop()` returns true (polled every 50 ms with the watch's
  // lock held: it must not call into the watch). Returns the fate.
  Fate WaitForFate(std::chrono::steady_clock::time_point deadline,
                   const std::function<bool()>& stop);

 private:
  void Run(const std::string& endpoint, const v1::WatchGangRequest& request,
           const rendezvous::ClientSecurity& security,
           const JobCredentials& credentials);

  rendezvous::CallCanceller canceller_;
  Mutex mu_;
  CondVar changed_;
  Fate fate_ ABSL_GUARDED_BY(mu_) = Fate::kUnknown;
  std::string failure_reason_ ABSL_GUARDED_BY(mu_);
  int64_t failed_job_id_ ABSL_GUARDED_BY(mu_) = 0;
  bool collect_evidence_ ABSL_GUARDED_BY(mu_) = false;
  bool preempted_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<uint32_t> unfinished_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // Last: starts after everything above exists.
};

}  // namespace gdt::executor

#endif  // GDT_EXECUTOR_GANG_WATCH_H_
