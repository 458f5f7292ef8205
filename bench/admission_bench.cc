// Admission pass benchmarks. Targets: a full admission pass over
// 1,000 pending gangs and 10,000 runner slots on 1,000 hosts <= 10 ms p99;
// one incremental decision per event <= 100 us p99. Run and results:
// docs/benchmarks.md. Percentiles are computed from per-iteration times and
// reported as counters: wall clock (p50_us, p99_us, max_us) and this
// thread's CPU time (cpu_p50_us, cpu_p99_us), which other processes on a
// shared machine do not inflate. The means are Google Benchmark's.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "coordinator/placement.h"
#include "policy/admission_policy.h"

namespace {

constexpr uint32_t kHosts = 1000;
constexpr uint32_t kGpusPerHost = 8;
constexpr uint32_t kSlotsPerHost = 10;  // 10,000 runner slots.
constexpr uint32_t kPending = 1000;

std::string HostName(uint32_t h) { return "host-" + std::to_string(h); }
std::string Rack(uint32_t h) { return "rack-" + std::to_string(h / 25); }

// Busy GPUs on host h: 0..8, spread so that free capacity is fragmented.
uint32_t BusyOn(uint32_t h) { return (h * 7) % (kGpusPerHost + 1); }

// The shape of pending gang i: 1-4 members of 1, 2, 4 or 8 GPUs, three
// priorities, every fifth asking for "same rack" (preferred).
struct Shape {
  uint32_t members;
  uint32_t gpus;
  int32_t priority;
  bool same_rack;
  int64_t run_bound;
};
Shape ShapeOf(uint32_t i) {
  static constexpr uint32_t kGpus[] = {1, 2, 4, 8};
  return Shape{1 + (i % 4), kGpus[(i / 4) % 4], static_cast<int32_t>(i % 3),
               i % 5 == 0, 3600 * (1 + (i % 6))};
}

double ThreadCpuMicros() {
  timespec now = {};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) * 1e6 +
         static_cast<double>(now.tv_nsec) / 1e3;
}

// Times one iteration's measured part: Start(), then Stop().
class Percentiles {
 public:
  void Start() {
    wall_start_ = std::chrono::steady_clock::now();
    cpu_start_ = ThreadCpuMicros();
  }
  void Stop() {
    wall_.push_back(std::chrono::duration<double, std::micro>(
                        std::chrono::steady_clock::now() - wall_start_)
                        .count());
    cpu_.push_back(ThreadCpuMicros() - cpu_start_);
  }
  void Report(benchmark::State& state) {
    if (wall_.empty()) return;
    state.counters["p50_us"] = At(wall_, 0.50);
    state.counters["p99_us"] = At(wall_, 0.99);
    state.counters["max_us"] = At(wall_, 1.0);
    state.counters["cpu_p50_us"] = At(cpu_, 0.50);
    state.counters["cpu_p99_us"] = At(cpu_, 0.99);
  }

 private:
  static double At(std::vector<double>& samples, double q) {
    std::sort(samples.begin(), samples.end());
    return samples[std::min(samples.size() - 1,
                            static_cast<size_t>(q * samples.size()))];
  }

  std::chrono::steady_clock::time_point wall_start_;
  double cpu_start_ = 0;
  std::vector<double> wall_;
  std::vector<double> cpu_;
};

// The daemon's full pass: placement.h's PlanAdmissions builds a policy from
// the inventory, leases and waiting gangs, decides and explains every
// blocked gang. It is what gdt-coord runs on each event.
void BM_DaemonFullPass(benchmark::State& state) {
  using namespace gdt::coordinator;
  std::vector<PlacementHost> hosts;
  std::vector<RunningGang> running;
  for (uint32_t h = 0; h < kHosts; ++h) {
    PlacementHost host;
    host.name = HostName(h);
    for (uint32_t g = 0; g < kGpusPerHost; ++g) host.gpu_indices.push_back(g);
    host.cpu_slots = kSlotsPerHost;
    host.labels["rack"] = Rack(h);
    hosts.push_back(host);
    if (BusyOn(h) == 0) continue;
    RunningGang gang;
    gang.gang_id = "running-" + std::to_string(h);
    LeasedMember member;
    member.host = host.name;
    for (uint32_t g = 0; g < BusyOn(h); ++g) member.gpu_indices.push_back(g);
    gang.members.push_back(member);
    gang.end_bound_unix_s = 1000 + 60 * h;
    running.push_back(gang);
  }
  std::vector<WaitingGang> waiting;
  for (uint32_t i = 0; i < kPending; ++i) {
    const Shape shape = ShapeOf(i);
    WaitingGang gang;
    gang.gang_id = "pending-" + std::to_string(i);
    gang.members = shape.members;
    gang.gpus_per_member = shape.gpus;
    gang.priority = shape.priority;
    gang.sequence = i;
    gang.queue_time_unix_s = i;
    gang.run_bound_s = shape.run_bound;
    if (shape.same_rack) gang.same_label = "rack";
    for (uint32_t m = 1; m <= shape.members; ++m) {
      gang.arrival_hosts[m] = HostName((i * 13 + m) % kHosts);
    }
    waiting.push_back(gang);
  }
  Percentiles percentiles;
  size_t admitted = 0;
  for (auto _ : state) {
    percentiles.Start();
    PlanOutcome outcome = PlanAdmissions(hosts, running, waiting, 0);
    percentiles.Stop();
    admitted = outcome.admitted.size();
    benchmark::DoNotOptimize(outcome);
  }
  state.counters["admitted"] = static_cast<double>(admitted);
  percentiles.Report(state);
}
BENCHMARK(BM_DaemonFullPass)->Unit(benchmark::kMillisecond);

// A policy holding the same cluster and `kPending` complete gangs.
void Fill(gdt::policy::AdmissionPolicy& policy, uint32_t& next_gang) {
  using namespace gdt::policy;
  for (uint32_t h = 0; h < kHosts; ++h) {
    HostSpec spec;
    spec.name = HostName(h);
    spec.gpus = kGpusPerHost;
    spec.runner_slots = kSlotsPerHost;
    spec.labels["rack"] = Rack(h);
    policy.AddHost(spec).IgnoreError();
  }
  for (uint32_t h = 0; h < kHosts; ++h) {
    if (BusyOn(h) == 0) continue;
    GangSpec spec;
    spec.id = "running-" + std::to_string(h);
    spec.members = 1;
    spec.gpus_per_member = BusyOn(h);
    spec.run_bound = 1;
    MemberPlacement member{1, HostName(h), {}};
    for (uint32_t g = 0; g < BusyOn(h); ++g) member.gpus.push_back(g);
    policy.AddRunning(spec, {member}, 1000 + 60 * h).IgnoreError();
  }
  for (; next_gang < kPending; ++next_gang) {
    const Shape shape = ShapeOf(next_gang);
    GangSpec spec;
    spec.id = "pending-" + std::to_string(next_gang);
    spec.members = shape.members;
    spec.gpus_per_member = shape.gpus;
    spec.priority = shape.priority;
    spec.queue_time = next_gang;
    spec.run_bound = shape.run_bound;
    if (shape.same_rack) spec.same_label = "rack";
    for (uint32_t m = 1; m <= shape.members; ++m) {
      policy.Join(spec, m, HostName((next_gang * 13 + m) % kHosts))
          .IgnoreError();
    }
  }
}

// The policy library's first pass over the filled cluster (it admits what
// fits, so every iteration starts from a fresh copy built untimed).
void BM_PolicyFullPass(benchmark::State& state) {
  using namespace gdt::policy;
  Percentiles percentiles;
  size_t admitted = 0;
  for (auto _ : state) {
    state.PauseTiming();
    AdmissionPolicy policy(PolicyOptions{Mode::kBackfill, 8});
    uint32_t next = 0;
    Fill(policy, next);
    state.ResumeTiming();
    percentiles.Start();
    Decisions decisions = policy.Schedule(0);
    percentiles.Stop();
    admitted = decisions.admitted.size();
    benchmark::DoNotOptimize(decisions);
  }
  state.counters["admitted"] = static_cast<double>(admitted);
  percentiles.Report(state);
}
BENCHMARK(BM_PolicyFullPass)->Unit(benchmark::kMillisecond)->Iterations(100);

// One event on a long-lived policy (the simulator's way): the oldest
// running gang finishes, a new complete gang arrives, and one pass decides.
// About 1,000 gangs stay pending.
void BM_PolicyIncrementalEvent(benchmark::State& state) {
  using namespace gdt::policy;
  AdmissionPolicy policy(PolicyOptions{Mode::kBackfill, 8});
  uint32_t next = 0;
  Fill(policy, next);
  std::vector<std::string> running;
  for (uint32_t h = 0; h < kHosts; ++h) {
    if (BusyOn(h) != 0) running.push_back("running-" + std::to_string(h));
  }
  Seconds now = 0;
  for (const Admission& a : policy.Schedule(now).admitted) {
    running.push_back(a.gang_id);
  }
  size_t finished = 0;
  Percentiles percentiles;
  for (auto _ : state) {
    ++now;
    const Shape shape = ShapeOf(next);
    GangSpec spec;
    spec.id = "pending-" + std::to_string(next);
    spec.members = shape.members;
    spec.gpus_per_member = shape.gpus;
    spec.priority = shape.priority;
    spec.queue_time = now;
    spec.run_bound = shape.run_bound;
    if (shape.same_rack) spec.same_label = "rack";
    const std::string id = spec.id;
    percentiles.Start();
    if (finished < running.size()) {
      policy.Finish(running[finished++]).IgnoreError();
    }
    for (uint32_t m = 1; m <= shape.members; ++m) {
      policy.Join(spec, m, HostName((next * 13 + m) % kHosts)).IgnoreError();
    }
    Decisions decisions = policy.Schedule(now);
    percentiles.Stop();
    ++next;
    for (const Admission& a : decisions.admitted) running.push_back(a.gang_id);
    benchmark::DoNotOptimize(decisions);
  }
  state.counters["pending_at_end"] =
      static_cast<double>(policy.waiting_gangs());
  percentiles.Report(state);
}
BENCHMARK(BM_PolicyIncrementalEvent)->Unit(benchmark::kMicrosecond);

// One event under kPreempt with a long waiting queue (the simulator's way,
// as in a trace whose jobs all arrive at once): 32 hosts x 8 GPUs run
// preemptible single-GPU gangs, state.range(0) complete gangs of mixed
// shapes and run bounds wait, and each event finishes the oldest running
// gang, adds a gang and runs one pass. A pass should cost about the same
// whatever the length of the queue: compare the counters across the
// arguments of one run.
void BM_PreemptEventLongQueue(benchmark::State& state) {
  using namespace gdt::policy;
  constexpr uint32_t kSmallHosts = 32;
  const uint32_t waiting = static_cast<uint32_t>(state.range(0));
  AdmissionPolicy policy(PolicyOptions{Mode::kPreempt, 8});
  for (uint32_t h = 0; h < kSmallHosts; ++h) {
    HostSpec spec;
    spec.name = HostName(h);
    spec.gpus = kGpusPerHost;
    spec.runner_slots = 4 * waiting;  // Never the limit here.
    policy.AddHost(spec).IgnoreError();
  }
  std::vector<std::string> running;
  for (uint32_t h = 0; h < kSmallHosts; ++h) {
    for (uint32_t g = 0; g < kGpusPerHost; ++g) {
      GangSpec spec;
      spec.id = "running-" + std::to_string(h) + "-" + std::to_string(g);
      spec.members = 1;
      spec.gpus_per_member = 1;
      spec.run_bound = 4 * 3600;
      spec.preemptible = true;
      policy
          .AddRunning(spec, {MemberPlacement{1, HostName(h), {g}}},
                      spec.run_bound + 60 * (h * kGpusPerHost + g))
          .IgnoreError();
      running.push_back(spec.id);
    }
  }
  Seconds now = 0;
  uint32_t next = 0;
  auto add = [&] {
    static constexpr uint32_t kGpus[] = {1, 2, 4, 8};
    GangSpec spec;
    spec.id = "pending-" + std::to_string(next);
    spec.members = 1 + (next % 4);
    spec.gpus_per_member = kGpus[(next / 4) % 4];
    spec.queue_time = now;
    spec.run_bound = 3600 * (1 + (next * 7) % 48);
    spec.preemptible = true;
    for (uint32_t m = 1; m <= spec.members; ++m) {
      policy.Join(spec, m, HostName((next + m) % kSmallHosts)).IgnoreError();
    }
    ++next;
  };
  while (next < waiting) add();
  size_t finished = 0;
  Percentiles percentiles;
  for (auto _ : state) {
    now += 60;
    percentiles.Start();
    if (finished < running.size()) {
      policy.Finish(running[finished++]).IgnoreError();
    }
    add();
    Decisions decisions = policy.Schedule(now);
    percentiles.Stop();
    for (const Admission& a : decisions.admitted) running.push_back(a.gang_id);
    benchmark::DoNotOptimize(decisions);
  }
  state.counters["pending_at_end"] =
      static_cast<double>(policy.waiting_gangs());
  percentiles.Report(state);
}
BENCHMARK(BM_PreemptEventLongQueue)
    ->Arg(1000)
    ->Arg(10000)
    ->Arg(100000)
    ->Unit(benchmark::kMicrosecond)
    ->Iterations(500);

}  // namespace

BENCHMARK_MAIN();
