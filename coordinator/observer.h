// The seam through which the coordinator reports what it does, for metrics.
// Scheduling code calls it; CoordinatorMetrics (metrics.h) implements it.
#ifndef GDT_COORDINATOR_OBSERVER_H_
#define GDT_COORDINATOR_OBSERVER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace gdt::coordinator {

// Every method has an empty default, so an implementation overrides what it
// needs and new events can be added without touching the others.
// Implementations must be thread-safe and fast, must not block and must not
// call back into the coordinator: they run under the coordinator's lock and
// on RPC threads.
class Observer {
 public:
  virtual ~Observer() = default;

  // A member joined (or rejoined) gang `gang_id`.
  virtual void MemberJoined(const std::string& gang_id) {}
  // Gang `gang_id` was admitted and placed.
  virtual void GangAdmitted(const std::string& gang_id) {}
  // Something failed; `failure_class` is a short snake_case word such as
  // "exit_nonzero", "signal", "cancelled" or "host_lost".
  virtual void Failure(std::string_view failure_class) {}
  // Gang `gang_id` was preempted (stopped for a higher-priority gang),
  // losing about `lost_gpu_hours` of work since its last checkpoint.
  virtual void Preempted(const std::string& gang_id, double lost_gpu_hours) {}
  // The admission policy bounced a gang to break a runner-slot deadlock.
  virtual void DeadlockBounce(const std::string& gang_id) {}
  // A join was refused by a bound on what one project or job may start:
  // `limit` is "forming_gangs_per_pipeline", "forming_gangs_per_project",
  // "join_rate_per_project" or "instance" (a GitLab instance the
  // coordinator does not trust).
  virtual void JoinRefused(std::string_view limit) {}
  // The coordinator could not hear its hosts (`reason`: "stalled" or
  // "quiet", see Scheduler::CheckHearing) and extended `hosts` hosts'
  // heartbeat deadlines instead of declaring them down.
  virtual void DeadlinesExtended(std::string_view reason, size_t hosts) {}
  // Finished gang `gang_id` was forgotten after its retention
  // (Scheduler::PruneFinishedGangs).
  virtual void GangPruned(const std::string& gang_id) {}
  // An RPC finished with `code` (e.g. "OK", "NOT_FOUND") after `seconds`.
  virtual void RpcFinished(std::string_view method, std::string_view code,
                           double seconds) {}
};

// The observer used when none is set: ignores everything.
Observer& NullObserver();

}  // namespace gdt::coordinator

#endif  // GDT_COORDINATOR_OBSERVER_H_
