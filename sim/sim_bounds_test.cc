// Checkpoint-aware preemption against strict FIFO on the committed traces
// (sim/traces/), 32 hosts x 8 GPUs, with the preemption cost charged. The
// bounds are the ones docs/scheduling.md reports.
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
                 uint64_t seed, bool elastic = false) {
  SimOptions options;  // 32 x 8 GPUs, 1,024 runner slots.
  options.mode = mode;
  options.seed = seed;
  options.elastic = elastic;
  absl::StatusOr<SimResult> result = Simulate(trace, options);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? *result : SimResult{};
}

// What preemption must hold on every trace: everything finishes, nothing
// deadlocks or stalls, nobody is preempted more than K times, and nobody
// waits longer than the longest FIFO wait.
void ExpectSafe(const SimResult& preempt, const SimResult& fifo) {
  EXPECT_EQ(preempt.finished, preempt.jobs);
  EXPECT_FALSE(preempt.stalled);
  EXPECT_EQ(preempt.deadlocks, 0u);
  EXPECT_LE(preempt.max_preemptions_per_job,
            policy::PreemptOptions{}.max_preemptions);
  EXPECT_LE(preempt.max_wait, fifo.max_wait);
}

class PhillyBoundsTest : public ::testing::TestWithParam<uint64_t> {};

TEST_P(PhillyBoundsTest, PreemptCutsJctAndWaitAgainstFifo) {
  const std::vector<TraceJob> trace = Load("philly-gavel-seed0.csv");
  ASSERT_EQ(trace.size(), 15264u);
  const SimResult fifo = Replay(trace, policy::Mode::kStrictFifo, GetParam());
  const SimResult preempt = Replay(trace, policy::Mode::kPreempt, GetParam());

  ExpectSafe(preempt, fifo);
  EXPECT_GT(preempt.preemptions, 0u);
  EXPECT_LE(preempt.mean_jct, 0.30 * fifo.mean_jct);
  EXPECT_LE(preempt.mean_wait, 0.25 * fifo.mean_wait);
}

INSTANTIATE_TEST_SUITE_P(Seeds, PhillyBoundsTest, ::testing::Values(0, 1, 2));

// Elastic starts on this trace are safe, but their slower runs cost more
// than they gain: the ratios are above preemption's and miss the targets
// on seed 2 (docs/scheduling.md), so only safety is asserted.
TEST(PhillyElasticTest, PreemptElasticIsSafe) {
  const std::vector<TraceJob> trace = Load("philly-gavel-seed0.csv");
  const SimResult fifo = Replay(trace, policy::Mode::kStrictFifo, 0);
  const SimResult elastic =
      Replay(trace, policy::Mode::kPreempt, 0, /*elastic=*/true);
  ExpectSafe(elastic, fifo);
  EXPECT_GT(elastic.started_smaller, 0u);
}

class SyntheticBoundsTest : public ::testing::TestWithParam<std::string> {};

// The synthetic traces reach the JCT and wait ratios only where FIFO's waits
// dominate the run times (see docs/scheduling.md); on all of them preemption
// must be safe and must not do worse than backfill alone.
TEST_P(SyntheticBoundsTest, PreemptIsSafeAndNoWorseThanBackfill) {
  const std::vector<TraceJob> trace = Load(GetParam());
  ASSERT_FALSE(trace.empty());
  const SimResult fifo = Replay(trace, policy::Mode::kStrictFifo, 0);
  const SimResult gdt = Replay(trace, policy::Mode::kBackfill, 0);
  const SimResult preempt = Replay(trace, policy::Mode::kPreempt, 0);

  ExpectSafe(preempt, fifo);
  EXPECT_LE(preempt.mean_wait, gdt.mean_wait * 1.01);
  EXPECT_LE(preempt.mean_jct, gdt.mean_jct * 1.01);

  // Elastic starts lower the wait further; the slower runs may cost JCT.
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

}  // namespace
}  // namespace gdt::sim
