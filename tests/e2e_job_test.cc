// End to end: gdt-ci run-local → gdt-executor → gdt-coord → gdt-agent →
// torchrun (Debian's python3-torch, gloo on CPU) on loopback.
#include <signal.h>

#include <filesystem>
#include <regex>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/cluster.h"
#include "tests/e2e_util.h"

namespace gdt::test {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(EndToEndTest, TwoMemberDdpJobTrainsAndReleasesLeases) {
  GdtCluster cluster;
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.StartAgent({.name = "local", .cpu_slots = 2}).ok())
      << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForHosts(1, seconds(20)).ok()) << cluster.Logs();
  const std::string project = MakeDdpProject(cluster.dir(), /*nodes=*/2,
                                             /*procs_per_node=*/1);

  CommandResult run = cluster.RunLocal(project, "train", {}, seconds(180));

  ASSERT_TRUE(run.status.success()) << run.output << cluster.Logs();
  const std::vector<Admission> admissions =
      ReadAdmissions(cluster.run_dir(), 2);
  ASSERT_EQ(admissions.size(), 2u) << run.output;
  ExpectOneGangWithRanks(admissions, 2);
  ExpectAdmittedOnlyAfterAllJoined(run.output, 2);
  ExpectTrainedWithIdenticalParameters(cluster.run_dir(), /*world_size=*/2);
  ExpectLeasesReleased(cluster);
}

TEST(EndToEndTest, ThreeMembersWithTwoProcessesEach) {
  GdtCluster cluster;
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.StartAgent({.name = "local", .cpu_slots = 3}).ok())
      << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForHosts(1, seconds(20)).ok()) << cluster.Logs();
  const std::string project = MakeDdpProject(cluster.dir(), /*nodes=*/3,
                                             /*procs_per_node=*/2);

  CommandResult run = cluster.RunLocal(project, "train", {}, seconds(240));

  ASSERT_TRUE(run.status.success()) << run.output << cluster.Logs();
  const std::vector<Admission> admissions =
      ReadAdmissions(cluster.run_dir(), 3);
  ASSERT_EQ(admissions.size(), 3u) << run.output;
  ExpectOneGangWithRanks(admissions, 3);
  ExpectAdmittedOnlyAfterAllJoined(run.output, 3);
  ExpectTrainedWithIdenticalParameters(cluster.run_dir(), /*world_size=*/6);
  ExpectLeasesReleased(cluster);
}

TEST(EndToEndTest, GangFormsAfterCoordinatorRestartWhileMembersWait) {
  GdtCluster cluster;
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  const std::string project = MakeDdpProject(cluster.dir(), /*nodes=*/2,
                                             /*procs_per_node=*/1);
  // No host yet: both members join and wait.
  std::unique_ptr<Subprocess> run = StartRunLocal(cluster, project, "train");
  ASSERT_TRUE(cluster.WaitForStatus(
      [](const nlohmann::json& status) { return MembersPresent(status) == 2; },
      seconds(60)))
      << cluster.Logs();

  cluster.StopCoordinator(SIGKILL);
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.StartAgent({.name = "local", .cpu_slots = 2}).ok())
      << cluster.Logs();

  std::string output;
  std::optional<ExitStatus> status = run->WaitUntil(
      std::chrono::steady_clock::now() + seconds(180),
      [&](OutputSource, std::string_view data) { output.append(data); });
  ASSERT_TRUE(status.has_value()) << output << cluster.Logs();
  EXPECT_TRUE(status->success()) << output << cluster.Logs();
  EXPECT_THAT(output, ::testing::HasSubstr("retrying")) << output;
  ExpectOneGangWithRanks(ReadAdmissions(cluster.run_dir(), 2), 2);
  ExpectLeasesReleased(cluster);
}

}  // namespace
}  // namespace gdt::test
