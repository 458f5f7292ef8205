// Benchmark (c): one admission pass of the gang policy
// (policy/admission_policy.h) with 1,000 pending gangs over 10,000 runner
// slots, next to strict-FIFO admission (which stops at the first gang that
// does not fit) over the same state in the same run.
//
// Cluster: 1,250 hosts x 8 GPUs x 8 runner slots = 10,000 slots, in pools of
// 7 hosts (label pool=pN). Each host runs a 6-GPU gang, leaving 2 GPUs free
// everywhere. Each pending gang (8 members x 2 GPUs, all joined: 8,000
// slots) must run in one pool: 7 of its members fit there, the 8th never
// does, so every pass tries to place all 1,000 of them (backfill behind the
// head's reservation) and admits nothing, and the state is the same for
// every pass measured.
// Usage: gdt-bench-admission [--quick]
#include <cstring>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "policy/admission_policy.h"

namespace gdt::bench {
namespace {

constexpr int kHosts = 1250;
constexpr int kPending = 1000;

// kNearFit: as described above. kNoRoom: hosts run 7-GPU gangs (1 GPU free
// per host), pending gangs are 8 x 2 GPUs in any pool: nothing fits
// anywhere, which the policy can tell quickly.
enum class Scenario { kNearFit, kNoRoom };

std::unique_ptr<policy::AdmissionPolicy> Build(policy::Mode mode,
                                               Scenario scenario) {
  policy::PolicyOptions options;
  options.mode = mode;
  options.max_nodes_per_job = 8;
  auto admission = std::make_unique<policy::AdmissionPolicy>(options);
  for (int h = 0; h < kHosts; ++h) {
    policy::HostSpec host;
    host.name = absl::StrCat("gpu-", h);
    host.gpus = 8;
    host.runner_slots = 8;
    host.labels["pool"] = absl::StrCat("p", h / 7);
    if (!admission->AddHost(host).ok()) std::abort();
  }
  for (int h = 0; h < kHosts; ++h) {
    policy::GangSpec running;
    running.id = absl::StrCat("running-", h);
    running.members = 1;
    running.gpus_per_member = scenario == Scenario::kNearFit ? 6 : 7;
    running.queue_time = h;
    running.run_bound = 3600 + h;
    if (!admission->Join(running, 1, absl::StrCat("gpu-", h)).ok()) {
      std::abort();
    }
  }
  const policy::Decisions first = admission->Schedule(kHosts);
  if (first.admitted.size() != static_cast<size_t>(kHosts)) std::abort();
  int slot = 0;
  for (int g = 0; g < kPending; ++g) {
    policy::GangSpec pending;
    pending.id = absl::StrCat("pending-", g);
    pending.members = 8;
    pending.gpus_per_member = 2;
    pending.queue_time = kHosts + g;
    pending.run_bound = 1800;
    if (scenario == Scenario::kNearFit) {
      pending.node_selector["pool"] = absl::StrCat("p", g % (kHosts / 7));
    }
    for (uint32_t index = 1; index <= 8; ++index) {
      if (!admission
               ->Join(pending, index, absl::StrCat("gpu-", slot++ % kHosts))
               .ok()) {
        std::abort();
      }
    }
  }
  return admission;
}

Stats Measure(policy::AdmissionPolicy& admission, int passes) {
  std::vector<double> ms;
  for (int pass = 0; pass < passes; ++pass) {
    const auto start = std::chrono::steady_clock::now();
    const policy::Decisions decisions = admission.Schedule(10000 + pass);
    ms.push_back(MillisSince(start, std::chrono::steady_clock::now()));
    if (!decisions.admitted.empty() || !decisions.bounced.empty()) {
      std::cerr << "the state changed during the benchmark\n";
      std::abort();
    }
  }
  return Summarize(ms);
}

}  // namespace
}  // namespace gdt::bench

int main(int argc, char** argv) {
  using namespace gdt::bench;
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const int passes = quick ? 20 : 200;
  for (Scenario scenario : {Scenario::kNearFit, Scenario::kNoRoom}) {
    auto backfill = Build(gdt::policy::Mode::kBackfill, scenario);
    auto fifo = Build(gdt::policy::Mode::kStrictFifo, scenario);
    if (backfill->waiting_gangs() != static_cast<size_t>(kPending)) return 1;
    const Stats b = Measure(*backfill, passes);
    const Stats f = Measure(*fifo, passes);
    std::printf(
        "admission pass (%s) pending=%d slots=%d passes=%zu backfill "
        "p50=%.3fms p99=%.3fms | strict-fifo p50=%.3fms p99=%.3fms | "
        "backfill/fifo p99=%.1fx | target p99<=10ms %s\n",
        scenario == Scenario::kNearFit ? "7 of 8 members fit" : "no room",
        kPending, kHosts * 8, b.n, b.p50, b.p99, f.p50, f.p99, b.p99 / f.p99,
        Verdict(b.p99, 10));
    std::fflush(stdout);
  }
  return 0;
}
