// End to end, HA: two gdt-coord replicas share their state in a
// real etcd started on loopback. The leader is killed while one gang trains
// (real torchrun DDP under run-local) and another waits for its slots; the
// standby takes over, the training completes, and the waiting gang is
// admitted by the new leader and completes too.
#include <signal.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/cluster.h"
#include "testing/etcd_test_server.h"
#include "tests/e2e_util.h"

namespace gdt::test {
namespace {

using std::chrono::seconds;
using ::testing::HasSubstr;

const nlohmann::json* GangOfPipeline(const nlohmann::json& status,
                                     int64_t pipeline) {
  for (const auto& gang : status["gangs"]) {
    if (gang.value("gang_id", "").find(absl::StrCat("-pl", pipeline, "-")) !=
        std::string::npos) {
      return &gang;
    }
  }
  return nullptr;
}

// gang id -> state, as one replica's `gdt-coord status --json` shows it.
std::map<std::string, std::string> GangStates(const nlohmann::json& status) {
  std::map<std::string, std::string> states;
  for (const auto& gang : status["gangs"]) {
    states[gang.value("gang_id", "")] = gang.value("state", "");
  }
  return states;
}

TEST(HaTest, LeaderKilledWhileAGangTrainsAndAnotherWaits) {
  absl::StatusOr<std::unique_ptr<test::EtcdTestServer>> etcd =
      test::EtcdTestServer::Start();
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  GdtCluster cluster;
  ASSERT_TRUE(cluster
                  .StartHaCoordinators(2, (*etcd)->joined_endpoints(),
                                       /*lease_ttl_s=*/3)
                  .ok())
      << cluster.Logs();
  ASSERT_TRUE(cluster.StartAgent({.name = "local", .cpu_slots = 2}).ok())
      << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForHosts(1, seconds(20)).ok()) << cluster.Logs();
  const std::string project = MakeDdpProject(cluster.dir(), /*nodes=*/2,
                                             /*procs_per_node=*/1);
  std::unique_ptr<Subprocess> first =
      StartRunLocal(cluster, project, "train",
                    {"--pipeline-id", "101", "--var", "DDP_STEPS=40", "--var",
                     "DDP_STEP_SECONDS=0.1"});
  ASSERT_NE(first, nullptr);
  auto log = [&](int index) {
    return ReadFile(
        absl::StrCat(cluster.run_dir(), "/logs/train-", index, "-2.log"));
  };
  ASSERT_TRUE(WaitFor(
      [&] {
        return log(1).find("first step done") != std::string::npos &&
               log(2).find("first step done") != std::string::npos;
      },
      seconds(150)))
      << log(1) << log(2) << cluster.Logs();

  // A second gang of the same shape waits for the slots the first holds.
  const std::string second_dir = cluster.dir().Sub("run-second");
  SpawnOptions options;
  options.argv = cluster.RunLocalArgv(
      project, "train", {"--pipeline-id", "202", "--var", "DDP_STEPS=4"});
  for (size_t i = 0; i + 1 < options.argv.size(); ++i) {
    if (options.argv[i] == "--work-dir") options.argv[i + 1] = second_dir;
  }
  options.env = CurrentEnvironment();
  options.die_with_parent = true;
  absl::StatusOr<std::unique_ptr<Subprocess>> second =
      Subprocess::Spawn(options);
  ASSERT_TRUE(second.ok()) << second.status();
  nlohmann::json waiting;
  ASSERT_TRUE(cluster.WaitForStatus(
      [&](const nlohmann::json& status) {
        waiting = status;
        const nlohmann::json* training = GangOfPipeline(waiting, 101);
        const nlohmann::json* gang = GangOfPipeline(waiting, 202);
        return training != nullptr &&
               training->value("state", "") == "running" && gang != nullptr &&
               gang->value("state", "") == "forming" &&
               MembersPresent(waiting) == 2;
      },
      seconds(60)))
      << waiting.dump(2) << cluster.Logs();
  const std::string second_id =
      GangOfPipeline(waiting, 202)->value("gang_id", "");

  // `gdt-coord status` from either replica shows the same gangs.
  const int leader = cluster.HaLeader();
  ASSERT_GE(leader, 0);
  const int standby = 1 - leader;
  absl::StatusOr<nlohmann::json> from_leader =
      CoordinatorStatus(cluster.ReplicaEndpoint(leader));
  absl::StatusOr<nlohmann::json> from_standby =
      CoordinatorStatus(cluster.ReplicaEndpoint(standby));
  ASSERT_TRUE(from_leader.ok()) << from_leader.status();
  ASSERT_TRUE(from_standby.ok()) << from_standby.status();
  EXPECT_EQ(GangStates(*from_leader), GangStates(*from_standby));
  EXPECT_EQ(GangStates(*from_leader).size(), 2u);

  cluster.StopReplica(leader, SIGKILL);
  ASSERT_TRUE(
      WaitFor([&] { return cluster.HaLeader() == standby; }, seconds(20)))
      << cluster.Logs();

  CommandResult first_result = FinishRun(*first, seconds(150));
  ASSERT_TRUE(first_result.status.success())
      << first_result.output << cluster.Logs();
  ExpectTrainedWithIdenticalParameters(cluster.run_dir(), /*world_size=*/2);
  CommandResult second_result = FinishRun(**second, seconds(150));
  ASSERT_TRUE(second_result.status.success())
      << second_result.output << cluster.Logs();
  ExpectTrainedWithIdenticalParameters(second_dir, /*world_size=*/2);
  // The waiting gang was admitted by the new leader.
  const std::string new_leader_log = ReadFile(
      cluster.dir().Sub(absl::StrCat("coord-replica-", standby, ".log")));
  EXPECT_THAT(new_leader_log,
              ::testing::HasSubstr(absl::StrCat("gang=", second_id)));
  ExpectLeasesReleased(cluster);
  EXPECT_TRUE(
      WaitFor([&] { return JobProcesses(cluster).empty(); }, seconds(2)))
      << DescribeAll(JobProcesses(cluster));
}

// A standby is as reachable as the leader: anyone on its network can open
// connections until it has no descriptor left, and gRPC's listener, once
// accept() failed with EMFILE, never accepts again. The standby checks its
// own endpoint as the leader does and restarts its listener once the flood
// ends: it redirects clients again, and when the leader dies it takes over
// and runs a gang.
TEST(HaTest, AStandbyFloodedAboveItsDescriptorLimitServesAgain) {
  absl::StatusOr<std::unique_ptr<test::EtcdTestServer>> etcd =
      test::EtcdTestServer::Start();
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  GdtCluster cluster;
  cluster.SetCoordinatorLauncher(
      GdtCluster::DescriptorStarvedLauncher("256:256"));
  ASSERT_TRUE(cluster
                  .StartHaCoordinators(2, (*etcd)->joined_endpoints(),
                                       /*lease_ttl_s=*/3)
                  .ok())
      << cluster.Logs();
  ASSERT_TRUE(cluster.StartAgent({.name = "local", .cpu_slots = 2}).ok())
      << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForHosts(1, seconds(20)).ok()) << cluster.Logs();
  const int leader = cluster.HaLeader();
  ASSERT_GE(leader, 0);
  const int standby = 1 - leader;
  const std::string standby_endpoint = cluster.ReplicaEndpoint(standby);
  // Asked alone, the standby names the leader and status follows it.
  ASSERT_TRUE(CoordinatorStatus(standby_endpoint).ok())
      << cluster.ReplicaLog(standby);

  {
    IdleConnections idle;
    ASSERT_NO_FATAL_FAILURE(idle.Open(standby_endpoint, 400));
    ASSERT_TRUE(WaitFor(
        [&] {
          return cluster.ReplicaLog(standby).find("Too many open files") !=
                 std::string::npos;
        },
        seconds(20)))
        << "the standby never ran out of descriptors\n"
        << cluster.ReplicaLog(standby);
  }  // The flood ends: every connection is closed.

  const bool redirects = WaitFor(
      [&] { return CoordinatorStatus(standby_endpoint).ok(); }, seconds(45));
  ASSERT_TRUE(redirects) << "the standby still does not answer 45 s after "
                            "the flood ended\n"
                         << cluster.ReplicaLog(standby);
  EXPECT_THAT(cluster.ReplicaLog(standby),
              HasSubstr("event=coordinator_listener_restarted"));

  cluster.StopReplica(leader, SIGKILL);
  ASSERT_TRUE(
      WaitFor([&] { return cluster.HaLeader() == standby; }, seconds(20)))
      << cluster.Logs();
  const std::string project = MakeShellProject(cluster.dir(), "echo trained");
  CommandResult run = cluster.RunLocal(project, "train", {}, seconds(90));
  EXPECT_TRUE(run.status.success()) << run.output << cluster.Logs();
  EXPECT_THAT(run.output, HasSubstr("trained"));
}

// The split-brain check: the leader's host loses its route to etcd
// (a blackhole route in its network namespace) while agents and runners can
// still reach it. It must stop leading within its lease and admit nothing;
// the other replica takes over and admits the job.
TEST(HaPartitionTest, LeaderCutOffFromEtcdStopsLeadingAndAdmitsNothing) {
  absl::StatusOr<std::unique_ptr<NetworkNamespaces>> hosts =
      NetworkNamespaces::Create(4);  // etcd, replica, replica, agent+runner.
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  absl::StatusOr<std::unique_ptr<test::EtcdTestServer>> etcd =
      test::EtcdTestServer::StartIn((*hosts)->Exec(0), (*hosts)->Address(0));
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  GdtCluster cluster(hosts->get(), /*control_host=*/3);
  constexpr int kTtl = 5;
  ASSERT_TRUE(cluster
                  .StartHaCoordinators(2, (*etcd)->joined_endpoints(), kTtl,
                                       /*hosts=*/{1, 2})
                  .ok())
      << cluster.Logs();
  const int leader = cluster.HaLeader();
  ASSERT_GE(leader, 0);
  const int standby = 1 - leader;
  ASSERT_TRUE(cluster
                  .StartAgent({.name = "worker",
                               .host = 3,
                               .cpu_slots = 1,
                               .network_interface = "eth0"})
                  .ok())
      << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForHosts(1, seconds(20)).ok()) << cluster.Logs();
  const std::string project = MakeDdpProject(cluster.dir(), /*nodes=*/1,
                                             /*procs_per_node=*/1);

  std::vector<std::string> cut = (*hosts)->Exec(1 + leader);
  for (const char* arg : {"ip", "route", "add", "blackhole"}) {
    cut.push_back(arg);
  }
  cut.push_back((*hosts)->Address(0) + "/32");
  CommandResult partitioned = RunProcess(cut, {}, seconds(10));
  ASSERT_TRUE(partitioned.status.success()) << partitioned.output;
  const auto cut_at = std::chrono::steady_clock::now();
  // A job arrives during the partition; its member tries the cut-off leader
  // first (replicas are listed in order).
  std::unique_ptr<Subprocess> run = StartRunLocal(cluster, project, "train");
  ASSERT_NE(run, nullptr);

  ASSERT_TRUE(WaitFor(
      [&] {
        return cluster.ReplicaLog(leader).find("event=leadership_lost") !=
               std::string::npos;
      },
      seconds(30)))
      << cluster.Logs();
  EXPECT_LT(std::chrono::steady_clock::now() - cut_at, seconds(kTtl));
  // It exits on its own (signal 0 only waits for that).
  const ExitStatus stopped = cluster.StopReplica(leader, 0);
  EXPECT_EQ(stopped.code(), 5) << cluster.ReplicaLog(leader);

  CommandResult result = FinishRun(*run, seconds(150));
  ASSERT_TRUE(result.status.success()) << result.output << cluster.Logs();
  ExpectTrainedWithIdenticalParameters(cluster.run_dir(), /*world_size=*/1);
  EXPECT_EQ(cluster.ReplicaLog(leader).find("event=gang_admitted"),
            std::string::npos)
      << cluster.ReplicaLog(leader);
  EXPECT_THAT(cluster.ReplicaLog(standby), HasSubstr("event=gang_admitted"));
}

}  // namespace
}  // namespace gdt::test
