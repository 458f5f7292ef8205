// Checkpoint-aware preemption against strict FIFO on the committed traces
// (sim/traces/), 32 hosts x 8 GPUs, with the preemption cost charged, each
// ratio taken against FIFO in the same run. The bounds are the ones
// docs/scheduling.md reports.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sim/simulator.h"

namespace gdt::sim {
namespace {

std::vector<TraceJob> Load(const std::string& name) {
  std::ifstream file(std::string(GDT_SIM_TRACES) + "/" + name);
  EXPECT_TRUE(file.good()) << name;
  std::stringstream text;
  text << file.rdbuf();
  absl::StatusOr<std::vector<TraceJob>> trace = ParseTrace(text.str());
  EXPECT_TRUE(trace.ok()) << name << ": " << trace.status();
  return trace.ok() ? *trace : std::vector<TraceJob>{};
}

SimResult Replay(const std::vector<TraceJob>& trace, policy::Mode mode,
                 uint64_t seed, bool elastic = false,
                 double preemptible_fraction = 1.0) {
  SimOptions options;  // 32 x 8 GPUs, 1,024 runner slots.
  options.mode = mode;
  options.seed = seed;
  options.elastic = elastic;
  options.preemptible_fraction = preemptible_fraction;
  absl::StatusOr<SimResult> result = Simulate(trace, options);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? *result : SimResult{};
}

// What preemption must hold on every trace: everything finishes, nothing
// deadlocks or stalls, nobody is preempted more than K times, no job that is
// not preemptible is stopped, and nobody waits longer than the longest FIFO
// wait.
void ExpectSafe(const SimResult& preempt, const SimResult& fifo) {
  EXPECT_EQ(preempt.finished, preempt.jobs);
  EXPECT_FALSE(preempt.stalled);
  EXPECT_EQ(preempt.deadlocks, 0u);
  EXPECT_LE(preempt.max_preemptions_per_job,
            policy::PreemptOptions{}.max_preemptions);
  EXPECT_EQ(preempt.non_preemptible_preempted, 0u);
  EXPECT_LE(preempt.max_wait, fifo.max_wait);
}

// The targets, against strict FIFO in the same run: safe, mean JCT at most
// 0.30 and mean wait at most 0.25 of FIFO's.
void ExpectTargets(const SimResult& preempt, const SimResult& fifo) {
  ExpectSafe(preempt, fifo);
  EXPECT_LE(preempt.mean_jct, 0.30 * fifo.mean_jct);
  EXPECT_LE(preempt.mean_wait, 0.25 * fifo.mean_wait);
}

double MeanDuration(const std::vector<TraceJob>& trace) {
  double sum = 0;
  for (const TraceJob& job : trace) sum += static_cast<double>(job.duration);
  return trace.empty() ? 0 : sum / static_cast<double>(trace.size());
}

class PhillyBoundsTest : public ::testing::TestWithParam<uint64_t> {};

TEST_P(PhillyBoundsTest, PreemptMeetsTheTargets) {
  const std::vector<TraceJob> trace = Load("philly-gavel-seed0.csv");
  ASSERT_EQ(trace.size(), 15264u);
  const SimResult fifo = Replay(trace, policy::Mode::kStrictFifo, GetParam());
  const SimResult preempt = Replay(trace, policy::Mode::kPreempt, GetParam());

  EXPECT_GT(preempt.preemptions, 0u);
  ExpectTargets(preempt, fifo);
}

TEST_P(PhillyBoundsTest, PreemptElasticMeetsTheTargets) {
  const std::vector<TraceJob> trace = Load("philly-gavel-seed0.csv");
  const SimResult fifo = Replay(trace, policy::Mode::kStrictFifo, GetParam());
  const SimResult elastic =
      Replay(trace, policy::Mode::kPreempt, GetParam(), /*elastic=*/true);

  EXPECT_GT(elastic.started_smaller, 0u);
  ExpectTargets(elastic, fifo);
}

INSTANTIATE_TEST_SUITE_P(Seeds, PhillyBoundsTest, ::testing::Values(0, 1, 2));

// Only a share of the jobs may be stopped: the few preemptible ones must not
// take every preemption and end up waiting longer than anybody under FIFO.
class PartlyPreemptibleTest : public ::testing::TestWithParam<double> {};

TEST_P(PartlyPreemptibleTest, MeetsTheTargetsAndTheLongestWait) {
  const std::vector<TraceJob> trace = Load("philly-gavel-seed0.csv");
  const SimResult fifo = Replay(trace, policy::Mode::kStrictFifo, 0);
  const SimResult preempt = Replay(trace, policy::Mode::kPreempt, 0,
                                   /*elastic=*/false, GetParam());

  EXPECT_GT(preempt.preemptions, 0u);
  EXPECT_LT(preempt.preemptible_jobs, trace.size());
  ExpectTargets(preempt, fifo);

  // With elastic gangs as well (at a quarter it missed the wait target
  // before preempting modes reserved for the first four gangs).
  const SimResult elastic = Replay(trace, policy::Mode::kPreempt, 0,
                                   /*elastic=*/true, GetParam());
  ExpectTargets(elastic, fifo);
}

INSTANTIATE_TEST_SUITE_P(Fractions, PartlyPreemptibleTest,
                         ::testing::Values(0.5, 0.25));

class SyntheticBoundsTest : public ::testing::TestWithParam<std::string> {};

// On every synthetic trace preemption must be safe and must not do worse
// than backfill alone; elastic starts lower the wait further.
TEST_P(SyntheticBoundsTest, PreemptIsSafeAndNoWorseThanBackfill) {
  const std::vector<TraceJob> trace = Load(GetParam());
  ASSERT_FALSE(trace.empty());
  const SimResult fifo = Replay(trace, policy::Mode::kStrictFifo, 0);
  const SimResult gdt = Replay(trace, policy::Mode::kBackfill, 0);
  const SimResult preempt = Replay(trace, policy::Mode::kPreempt, 0);

  ExpectSafe(preempt, fifo);
  EXPECT_LE(preempt.mean_wait, gdt.mean_wait * 1.01);
  EXPECT_LE(preempt.mean_jct, gdt.mean_jct * 1.01);

  const SimResult elastic =
      Replay(trace, policy::Mode::kPreempt, 0, /*elastic=*/true);
  ExpectSafe(elastic, fifo);
  EXPECT_GT(elastic.started_smaller, 0u);
  EXPECT_LE(elastic.mean_wait, preempt.mean_wait);
}

INSTANTIATE_TEST_SUITE_P(Traces, SyntheticBoundsTest,
                         ::testing::Values("synthetic-heavy-tail.csv",
                                           "synthetic-big-gangs.csv",
                                           "synthetic-bursty.csv"));

// Many 16- to 64-GPU gangs: both modes meet the targets.
TEST(BigGangsTest, PreemptAndElasticMeetTheTargets) {
  const std::vector<TraceJob> trace = Load("synthetic-big-gangs.csv");
  const SimResult fifo = Replay(trace, policy::Mode::kStrictFifo, 0);
  ExpectTargets(Replay(trace, policy::Mode::kPreempt, 0), fifo);
  ExpectTargets(Replay(trace, policy::Mode::kPreempt, 0, /*elastic=*/true),
                fifo);
}

// No policy's mean JCT goes below the mean run time (a job runs at least its
// trace duration), which is 0.33 of FIFO's mean JCT on heavy-tail and 0.86
// on bursty, above the 0.30 target. There the mean JCT must stay within 10 %
// of that floor, and both modes meet the wait target on both traces.
TEST(FloorTest, HeavyTailAndBurstyStayNearTheFloor) {
  for (const std::string name :
       {"synthetic-heavy-tail.csv", "synthetic-bursty.csv"}) {
    SCOPED_TRACE(name);
    const std::vector<TraceJob> trace = Load(name);
    const SimResult fifo = Replay(trace, policy::Mode::kStrictFifo, 0);
    const double floor = MeanDuration(trace);
    EXPECT_GT(floor, 0.30 * fifo.mean_jct);
    for (const bool elastic : {false, true}) {
      const SimResult preempt =
          Replay(trace, policy::Mode::kPreempt, 0, elastic);
      EXPECT_GE(preempt.mean_jct, floor);
      EXPECT_LE(preempt.mean_jct, 1.10 * floor) << "elastic " << elastic;
      EXPECT_LE(preempt.mean_wait, 0.25 * fifo.mean_wait)
          << "elastic " << elastic;
    }
  }
}

// Bursty with other pickup seeds: without elastic gangs the wait target held
// only once a gang stopped for one of its own priority stopped coming back
// first in line (at 0.27-0.29 of FIFO's wait before).
class BurstySeedsTest : public ::testing::TestWithParam<uint64_t> {};

TEST_P(BurstySeedsTest, BothModesMeetTheWaitTarget) {
  const std::vector<TraceJob> trace = Load("synthetic-bursty.csv");
  const SimResult fifo = Replay(trace, policy::Mode::kStrictFifo, GetParam());
  for (const bool elastic : {false, true}) {
    const SimResult preempt =
        Replay(trace, policy::Mode::kPreempt, GetParam(), elastic);
    ExpectSafe(preempt, fifo);
    EXPECT_LE(preempt.mean_wait, 0.25 * fifo.mean_wait)
        << "elastic " << elastic;
  }
}

INSTANTIATE_TEST_SUITE_P(Seeds, BurstySeedsTest, ::testing::Values(1, 2));

}  // namespace
}  // namespace gdt::sim
