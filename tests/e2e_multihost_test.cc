// End to end across simulated hosts: every party runs in its own network
// namespace on one bridge (10.200.0.0/24). Host 0 holds the coordinator and
// the emulated runner; hosts 1..3 each run a gdt-agent. Needs root (CI runs
// as root); run `ctest -LE netns` to leave these out elsewhere.
#include <filesystem>
#include <set>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/cluster.h"
#include "testing/test_certs.h"
#include "tests/e2e_util.h"

namespace gdt::test {
namespace {

using std::chrono::seconds;

TEST(MultiHostTest, MembersOfOneGangRunOnDifferentHosts) {
  absl::StatusOr<std::unique_ptr<NetworkNamespaces>> hosts =
      NetworkNamespaces::Create(4);
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  GdtCluster cluster(hosts->get(), /*control_host=*/0);
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  const absl::Status agents = cluster.StartHostAgents(3);
  ASSERT_TRUE(agents.ok()) << agents << cluster.Logs();
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

// Mutual TLS across hosts. The certificate names the namespace
// addresses, so the executor on host 0 and the coordinator verify the agents
// at 10.200.0.x and the agents verify the coordinator.
TEST(MultiHostTest, GangRunsOverMutualTlsAcrossHosts) {
  absl::StatusOr<std::unique_ptr<NetworkNamespaces>> hosts =
      NetworkNamespaces::Create(3);
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  GdtCluster cluster(hosts->get(), /*control_host=*/0);
  const std::string cert_dir = cluster.dir().Sub("certs");
  std::filesystem::create_directories(cert_dir);
  absl::StatusOr<TestCerts> certs = MakeTestCerts(
      cert_dir,
      {(*hosts)->Address(0), (*hosts)->Address(1), (*hosts)->Address(2)});
  ASSERT_TRUE(certs.ok()) << certs.status();
  cluster.UseTls(*certs);
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  const absl::Status agents = cluster.StartHostAgents(2);
  ASSERT_TRUE(agents.ok()) << agents << cluster.Logs();
  const std::string project = cluster.dir().Sub("project");
  std::filesystem::create_directories(project);
  WriteFile(project + "/.gitlab-ci.yml",
            "tls:\n  parallel: 2\n  timeout: 5 minutes\n"
            "  variables:\n    GDT_LAUNCHER: nccl\n  script:\n"
            "    - echo \"member $GDT_NODE_RANK of $GDT_NUM_NODES over "
            "tls\"\n");
  CommandResult run = cluster.RunLocal(project, "tls", {}, seconds(120));
  ASSERT_TRUE(run.status.success()) << run.output << cluster.Logs();
  EXPECT_THAT(run.output, ::testing::HasSubstr("member 0 of 2 over tls"));
  EXPECT_THAT(run.output, ::testing::HasSubstr("member 1 of 2 over tls"));
  EXPECT_THAT(cluster.Logs(),
              ::testing::Not(::testing::HasSubstr("WARNING: TLS is off")));
}

// The `env` launcher: a script that calls
// init_process_group("env://") itself, started as plain python3 on each of
// three hosts, trains with one DDP world.
TEST(MultiHostTest, EnvLauncherTrainsAcrossThreeHosts) {
  absl::StatusOr<std::unique_ptr<NetworkNamespaces>> hosts =
      NetworkNamespaces::Create(4);
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  GdtCluster cluster(hosts->get(), /*control_host=*/0);
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  const absl::Status agents = cluster.StartHostAgents(3);
  ASSERT_TRUE(agents.ok()) << agents << cluster.Logs();
  const std::string project = cluster.dir().Sub("project");
  std::filesystem::create_directories(project + "/examples/env_ddp");
  std::filesystem::copy_file(SourceDir() + "/examples/env_ddp/train.py",
                             project + "/examples/env_ddp/train.py");
  WriteFile(project + "/.gitlab-ci.yml",
            "train:\n"
            "  parallel: 3\n"
            "  timeout: 5 minutes\n"
            "  variables:\n"
            "    GDT_LAUNCHER: env\n"
            "    ENV_DDP_STEPS: \"3\"\n"
            "  script:\n"
            "    - echo \"rank $RANK of $WORLD_SIZE via "
            "$MASTER_ADDR:$MASTER_PORT\"\n"
            "    - /usr/bin/python3 examples/env_ddp/train.py\n"
            "  artifacts:\n"
            "    paths: [out/]\n"
            "    when: always\n");

  CommandResult run = cluster.RunLocal(project, "train", {}, seconds(240));

  ASSERT_TRUE(run.status.success()) << run.output << cluster.Logs();
  ExpectOneGangWithRanks(ReadAdmissions(cluster.run_dir(), 3), 3);
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_THAT(run.output, ::testing::HasSubstr(absl::StrCat(
                                "env_ddp[rank ", rank, "/3]: 3 steps")))
        << run.output;
  }
  ExpectTrainedWithIdenticalParameters(cluster.run_dir(), /*world_size=*/3);
  ExpectLeasesReleased(cluster);
}

}  // namespace
}  // namespace gdt::test
