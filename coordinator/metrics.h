#ifndef GDT_COORDINATOR_METRICS_H_
#define GDT_COORDINATOR_METRICS_H_

#include <cstdint>
#include <map>
#include <string>

#include "common/clock.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "coordinator/observer.h"
#include "coordinator/scheduler.h"

namespace gdt::coordinator {

// The coordinator's Prometheus metrics (docs/operations.md lists them):
// counters and histograms fed through the Observer interface, plus gauges
// (gangs by state, GPUs and slots per host) computed from a Snapshot at
// scrape time.
//
// Formation latency is the time from the join of a gang's last member to
// its admission; admission wait is the time from its first join (as this
// coordinator process saw it) to admission.
//
// Thread-safe. Keeps a reference to `clock`.
class CoordinatorMetrics final : public Observer {
 public:
  explicit CoordinatorMetrics(const Clock& clock);

  void MemberJoined(const std::string& gang_id) override;
  void GangAdmitted(const std::string& gang_id) override;
  void Failure(std::string_view failure_class) override;
  void DeadlockBounce(const std::string& gang_id) override;
  void Preempted(const std::string& gang_id, double lost_gpu_hours) override;
  void JoinRefused(std::string_view limit) override;
  void DeadlinesExtended(std::string_view reason, size_t hosts) override;
  void GangPruned(const std::string& gang_id) override;
  void RpcFinished(std::string_view method, std::string_view code,
                   double seconds) override;

  // The text for a scrape: refreshes the gauges from `snapshot` (live gangs
  // only) and renders every family.
  std::string Render(const Snapshot& snapshot);

  const MetricRegistry& registry() const { return registry_; }

 private:
  struct Joins {
    Clock::TimePoint first;
    Clock::TimePoint last;
  };

  const Clock& clock_;
  MetricRegistry registry_;
  Mutex mu_;
  std::map<std::string, Joins> joins_ ABSL_GUARDED_BY(mu_);  // By gang id.
};

}  // namespace gdt::coordinator

#endif  // GDT_COORDINATOR_METRICS_H_
