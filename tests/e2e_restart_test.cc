// End to end: gdt-coord restarts while a gang trains. Running members keep
// running without it; their exit reports wait for it; the gang succeeds
// and its leases are released once it is back (state from SQLite).
#include <signal.h>

#include <chrono>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/cluster.h"
#include "tests/e2e_util.h"

namespace gdt::test {
namespace {

using std::chrono::seconds;

TEST(CoordinatorRestartTest,
     TrainingThatEndsWhileTheCoordinatorIsDownSucceeds) {
  GdtCluster cluster;
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.StartAgent({.name = "local", .cpu_slots = 2}).ok())
      << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForHosts(1, seconds(20)).ok()) << cluster.Logs();
  const std::string project = MakeDdpProject(cluster.dir(), /*nodes=*/2,
                                             /*procs_per_node=*/1);
  std::unique_ptr<Subprocess> run =
      StartRunLocal(cluster, project, "train",
                    {"--var", "DDP_STEPS=20", "--var", "DDP_STEP_SECONDS=0.1"});
  ASSERT_NE(run, nullptr);
  auto log = [&](int index) {
    return ReadFile(
        absl::StrCat(cluster.run_dir(), "/logs/train-", index, "-2.log"));
  };
  auto both_say = [&](const std::string& text) {
    return log(1).find(text) != std::string::npos &&
           log(2).find(text) != std::string::npos;
  };
  ASSERT_TRUE(
      WaitFor([&] { return both_say("first step done"); }, seconds(150)))
      << log(1) << log(2) << cluster.Logs();

  cluster.StopCoordinator(SIGKILL);
  // The training ends during the outage; both exit reports wait for it.
  ASSERT_TRUE(WaitFor([&] { return both_say("retrying the exit report"); },
                      seconds(120)))
      << log(1) << log(2);
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();

  CommandResult result = FinishRun(*run, seconds(120));
  ASSERT_TRUE(result.status.success()) << result.output << cluster.Logs();
  ExpectTrainedWithIdenticalParameters(cluster.run_dir(), /*world_size=*/2);
  ExpectLeasesReleased(cluster);
  EXPECT_TRUE(
      WaitFor([&] { return JobProcesses(cluster).empty(); }, seconds(2)))
      << DescribeAll(JobProcesses(cluster));
}

}  // namespace
}  // namespace gdt::test
