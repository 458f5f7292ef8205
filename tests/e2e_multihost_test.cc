// End to end across simulated hosts: every party runs in its own network
// namespace on one bridge (10.200.0.0/24). Host 0 holds the coordinator and
// the emulated runner; hosts 1..3 each run a gdt-agent. Needs root (CI runs
// as root); run `ctest -LE netns` to leave these out elsewhere.
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/e2e_util.h"
#include "tests/support/cluster.h"

namespace gdt::testing {
namespace {

using std::chrono::seconds;

TEST(MultiHostTest, MembersOfOneGangRunOnDifferentHosts) {
  absl::StatusOr<std::unique_ptr<NetworkNamespaces>> hosts =
      NetworkNamespaces::Create(4);
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  GdtCluster cluster(hosts->get(), /*control_host=*/0);
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  for (int i = 1; i <= 3; ++i) {
    // gloo must use eth0 in a namespace, or it advertises 127.0.0.1.
    ASSERT_TRUE(cluster
                    .StartAgent({.name = "host" + std::to_string(i),
                                 .host = i,
                                 .cpu_slots = 1,
                                 .network_interface = "eth0"})
                    .ok())
        << cluster.Logs();
  }
  ASSERT_TRUE(cluster.WaitForHosts(3, seconds(20)).ok()) << cluster.Logs();
  const std::string project = MakeDdpProject(cluster.dir(), /*nodes=*/3,
                                             /*procs_per_node=*/1);

  CommandResult run = cluster.RunLocal(project, "train", {}, seconds(240));

  ASSERT_TRUE(run.status.success()) << run.output << cluster.Logs();
  const std::vector<Admission> admissions =
      ReadAdmissions(cluster.run_dir(), 3);
  ExpectOneGangWithRanks(admissions, 3);
  std::set<std::string> placed;
  for (const Admission& a : admissions) placed.insert(a.host);
  EXPECT_THAT(placed, ::testing::ElementsAre("host1", "host2", "host3"));
  ExpectTrainedWithIdenticalParameters(cluster.run_dir(), /*world_size=*/3);
  ExpectLeasesReleased(cluster);
}

}  // namespace
}  // namespace gdt::testing
