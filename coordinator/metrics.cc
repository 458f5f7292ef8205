#include "coordinator/metrics.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"

namespace gdt::coordinator {
namespace {

// Forgotten gangs (never admitted) are dropped beyond this many, oldest
// first, so the join table cannot grow without bound.
constexpr size_t kMaxTrackedGangs = 10000;

double Seconds(Clock::TimePoint from, Clock::TimePoint to) {
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace

Observer& NullObserver() {
  static Observer* const observer = new Observer();
  return *observer;
}

CoordinatorMetrics::CoordinatorMetrics(const Clock& clock) : clock_(clock) {
  registry_.DeclareGauge("gdt_gangs", "Live gangs by state.");
  registry_.DeclareCounter("gdt_gangs_admitted_total",
                           "Gangs admitted and placed since start.");
  registry_.DeclareHistogram(
      "gdt_gang_formation_seconds",
      "Time from the last member's join to the gang's admission.",
      {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
       5, 10});
  registry_.DeclareHistogram(
      "gdt_gang_admission_wait_seconds",
      "Time from a gang's first join to its admission (waiting for members "
      "and capacity).",
      {0.01, 0.1, 1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200});
  registry_.DeclareGauge("gdt_host_up", "1 when the host is up, else 0.");
  registry_.DeclareGauge("gdt_host_gpus",
                         "GPUs per host, leased or free (free counts only "
                         "up hosts).");
  registry_.DeclareGauge("gdt_host_cpu_slots",
                         "CPU-only member slots per host, used or free.");
  registry_.DeclareCounter("gdt_failures_total",
                           "Failures by class (exit_nonzero, signal, "
                           "cancelled, ...).");
  registry_.DeclareCounter(
      "gdt_deadlock_bounces_total",
      "Gangs bounced by the admission policy to break a runner-slot "
      "deadlock.");
  registry_.DeclareCounter(
      "gdt_preemptions_total",
      "Running gangs stopped to make room for a higher-priority gang.");
  registry_.DeclareCounter(
      "gdt_preempted_gpu_hours_total",
      "GPU-hours of work lost by preempted gangs since their last "
      "checkpoint.");
  registry_.DeclareHistogram(
      "gdt_rpc_duration_seconds",
      "Time from each RPC's arrival to its first answer (a stream's first "
      "event or refusal).",
      {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
       0.25, 1});
  registry_.DeclareCounter("gdt_rpcs_total",
                           "RPCs handled, by method and "
                           "status code.");
  registry_.DeclareCounter(
      "gdt_joins_refused_total",
      "Joins refused by a per-project bound, by limit "
      "(forming_gangs_per_pipeline, forming_gangs_per_project, instance).");
  registry_.DeclareCounter(
      "gdt_host_deadlines_extended_total",
      "Times the coordinator could not hear its hosts and extended their "
      "heartbeat deadlines instead of declaring them down, by reason "
      "(stalled: its own passes stopped; quiet: no host was heard).");
  registry_.DeclareCounter(
      "gdt_gangs_pruned_total",
      "Finished gangs forgotten after finished_gang_retention_hours.");
  registry_.Touch("gdt_gangs_admitted_total");
  registry_.Touch("gdt_gangs_pruned_total");
  registry_.Touch("gdt_deadlock_bounces_total");
  registry_.Touch("gdt_preemptions_total");
  registry_.Touch("gdt_preempted_gpu_hours_total");
}

void CoordinatorMetrics::MemberJoined(const std::string& gang_id) {
  const Clock::TimePoint now = clock_.Now();
  MutexLock lock(mu_);
  auto [entry, inserted] = joins_.try_emplace(gang_id, Joins{now, now});
  entry->second.last = now;
  if (inserted && joins_.size() > kMaxTrackedGangs) {
    auto oldest = std::min_element(joins_.begin(), joins_.end(),
                                   [](const auto& a, const auto& b) {
                                     return a.second.last < b.second.last;
                                   });
    joins_.erase(oldest);
  }
}

void CoordinatorMetrics::GangAdmitted(const std::string& gang_id) {
  const Clock::TimePoint now = clock_.Now();
  registry_.Increment("gdt_gangs_admitted_total");
  Joins joins{now, now};
  {
    MutexLock lock(mu_);
    auto found = joins_.find(gang_id);
    if (found == joins_.end()) return;  // Joined before a restart.
    joins = found->second;
    joins_.erase(found);
  }
  registry_.Observe("gdt_gang_formation_seconds", {}, Seconds(joins.last, now));
  registry_.Observe("gdt_gang_admission_wait_seconds", {},
                    Seconds(joins.first, now));
}

void CoordinatorMetrics::Failure(std::string_view failure_class) {
  registry_.Increment("gdt_failures_total",
                      {{"class", std::string(failure_class)}});
}

void CoordinatorMetrics::DeadlockBounce(const std::string& gang_id) {
  registry_.Increment("gdt_deadlock_bounces_total");
}

void CoordinatorMetrics::Preempted(const std::string& gang_id,
                                   double lost_gpu_hours) {
  registry_.Increment("gdt_preemptions_total");
  registry_.Increment("gdt_preempted_gpu_hours_total", {}, lost_gpu_hours);
}

void CoordinatorMetrics::JoinRefused(std::string_view limit) {
  registry_.Increment("gdt_joins_refused_total",
                      {{"limit", std::string(limit)}});
}

void CoordinatorMetrics::DeadlinesExtended(std::string_view reason,
                                           size_t /*hosts*/) {
  registry_.Increment("gdt_host_deadlines_extended_total",
                      {{"reason", std::string(reason)}});
}

void CoordinatorMetrics::GangPruned(const std::string& gang_id) {
  registry_.Increment("gdt_gangs_pruned_total");
  MutexLock lock(mu_);
  joins_.erase(gang_id);
}

void CoordinatorMetrics::RpcFinished(std::string_view method,
                                     std::string_view code, double seconds) {
  registry_.Observe("gdt_rpc_duration_seconds",
                    {{"method", std::string(method)}}, seconds);
  registry_.Increment("gdt_rpcs_total", {{"method", std::string(method)},
                                         {"code", std::string(code)}});
}

std::string CoordinatorMetrics::Render(const Snapshot& snapshot) {
  std::map<std::string, int> by_state = {
      {"forming", 0}, {"running", 0}, {"failed", 0}};
  for (const state::Gang& gang : snapshot.gangs) {
    if (gang.state == state::GangState::kDone) continue;
    ++by_state[state::GangStateName(gang.state)];
  }
  registry_.ClearGauge("gdt_gangs");
  for (const auto& [state, count] : by_state) {
    registry_.SetGauge("gdt_gangs", {{"state", state}}, count);
  }
  registry_.ClearGauge("gdt_host_up");
  registry_.ClearGauge("gdt_host_gpus");
  registry_.ClearGauge("gdt_host_cpu_slots");
  for (const HostView& view : snapshot.hosts) {
    const std::string& name = view.host.spec.name;
    const bool up = view.state == state::HostState::kUp;
    registry_.SetGauge("gdt_host_up", {{"host", name}}, up ? 1 : 0);
    const size_t total_gpus = view.host.spec.gpus.size();
    if (total_gpus > 0) {
      const size_t leased = view.leased_gpus.size();
      registry_.SetGauge("gdt_host_gpus", {{"host", name}, {"state", "leased"}},
                         static_cast<double>(leased));
      registry_.SetGauge(
          "gdt_host_gpus", {{"host", name}, {"state", "free"}},
          up ? static_cast<double>(total_gpus - std::min(total_gpus, leased))
             : 0);
    } else {
      const uint32_t slots = std::max<uint32_t>(1, view.host.spec.cpu_slots);
      const uint32_t used = std::min(slots, view.members_running);
      registry_.SetGauge("gdt_host_cpu_slots",
                         {{"host", name}, {"state", "used"}}, used);
      registry_.SetGauge("gdt_host_cpu_slots",
                         {{"host", name}, {"state", "free"}},
                         up ? slots - used : 0);
    }
  }
  return registry_.Render();
}

}  // namespace gdt::coordinator
