// End to end: a host that drops off the network, or whose agent is killed,
// mid-training fails its gang within seconds, with a root cause naming it,
// and no process of the gang survives on any host. Hosts are network
// namespaces (label netns, root).
#include <signal.h>

#include <chrono>
#include <memory>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/cluster.h"
#include "tests/e2e_util.h"

namespace gdt::test {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

// A two-member training on two hosts. Host 0: coordinator and runner;
// hosts 1 and 2: one agent each.
struct TwoHostTraining {
  std::unique_ptr<NetworkNamespaces> hosts;
  std::unique_ptr<GdtCluster> cluster;
  std::unique_ptr<Subprocess> run;

  // Member `index`'s job log.
  std::string Log(int index) const {
    return ReadFile(
        absl::StrCat(cluster->run_dir(), "/logs/train-", index, "-2.log"));
  }
};

// Starts the training through run-local and returns once both members
// have made their first step, member 2 (node rank 1) on host2. Fails the
// test when any of it does not come.
void StartTwoHostTraining(TwoHostTraining& t) {
  absl::StatusOr<std::unique_ptr<NetworkNamespaces>> hosts =
      NetworkNamespaces::Create(3);
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  t.hosts = *std::move(hosts);
  t.cluster = std::make_unique<GdtCluster>(t.hosts.get(), /*control_host=*/0);
  GdtCluster& cluster = *t.cluster;
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  const absl::Status agents = cluster.StartHostAgents(2);
  ASSERT_TRUE(agents.ok()) << agents << cluster.Logs();
  const std::string project = MakeDdpProject(cluster.dir(), /*nodes=*/2,
                                             /*procs_per_node=*/1);
  t.run = StartRunLocal(
      cluster, project, "train",
      {"--var", "DDP_STEPS=100000", "--var", "DDP_STEP_SECONDS=0.05"});
  ASSERT_NE(t.run, nullptr);
  ASSERT_TRUE(WaitFor(
      [&] {
        return t.Log(1).find("first step done") != std::string::npos &&
               t.Log(2).find("first step done") != std::string::npos;
      },
      seconds(150)))
      << t.Log(1) << t.Log(2) << cluster.Logs();
  // Members are placed in index order on hosts by name.
  ASSERT_THAT(t.Log(2), HasSubstr("on host host2")) << t.Log(2);
}

TEST(LivenessTest, HostCutOffFromTheNetworkFailsItsGangWithinSeconds) {
  TwoHostTraining training;
  ASSERT_NO_FATAL_FAILURE(StartTwoHostTraining(training));
  GdtCluster& cluster = *training.cluster;
  Subprocess* run = training.run.get();
  auto log = [&](int index) { return training.Log(index); };

  std::vector<std::string> cut = training.hosts->Exec(2);
  for (const char* arg : {"ip", "link", "set", "eth0", "down"}) {
    cut.push_back(arg);
  }
  ASSERT_TRUE(RunProcess(cut, {}, seconds(10)).status.success());
  const auto cut_at = std::chrono::steady_clock::now();

  // Within 10 s the gang has failed naming host2, and the other host's
  // processes are gone.
  std::string reason;
  const bool failed = cluster.WaitForStatus(
      [&](const nlohmann::json& status) {
        if (status["gangs"].empty()) return false;
        const auto& gang = status["gangs"][0];
        reason = gang.value("reason", "");
        return gang.value("state", "") == "failed";
      },
      seconds(10));
  EXPECT_TRUE(failed) << reason << cluster.Logs();
  EXPECT_THAT(reason, ::testing::ContainsRegex(
                          "failed: member 2/2 \\(job [0-9]+ on host host2\\) "
                          "was lost: "));
  const auto deadline = cut_at + seconds(10);
  EXPECT_TRUE(
      WaitFor([&] { return JobProcesses(cluster, "GDT_NODE_RANK=0").empty(); },
              std::chrono::duration_cast<milliseconds>(
                  deadline - std::chrono::steady_clock::now())))
      << DescribeAll(JobProcesses(cluster, "GDT_NODE_RANK=0"));

  CommandResult result = FinishRun(*run, seconds(90));
  EXPECT_FALSE(result.status.success()) << result.output;
  const std::string log1 = log(1);
  EXPECT_THAT(log1, HasSubstr(absl::StrCat("gdt: ", reason, "\n"))) << log1;
  EXPECT_THAT(log1, HasSubstr(absl::StrCat("Job failed: exit status ",
                                           kPeerFailureExitCode, "\n")))
      << log1;
  EXPECT_THAT(log(2), HasSubstr(absl::StrCat("gdt: ", reason, "\n"))) << log(2);
  // The cut-off host's agent notices its executor is gone (missed pings)
  // and stops the stage there too: nothing of the gang is left anywhere.
  EXPECT_TRUE(
      WaitFor([&] { return JobProcesses(cluster).empty(); }, seconds(15)))
      << DescribeAll(JobProcesses(cluster));
}

TEST(LivenessTest, KilledAgentFailsItsGangAndLeavesNoProcess) {
  TwoHostTraining training;
  ASSERT_NO_FATAL_FAILURE(StartTwoHostTraining(training));
  GdtCluster& cluster = *training.cluster;
  Subprocess* run = training.run.get();
  auto log = [&](int index) { return training.Log(index); };

  cluster.StopAgent(1, SIGKILL);  // host2's agent.

  std::string reason;
  EXPECT_TRUE(cluster.WaitForStatus(
      [&](const nlohmann::json& status) {
        if (status["gangs"].empty()) return false;
        const auto& gang = status["gangs"][0];
        reason = gang.value("reason", "");
        return gang.value("state", "") == "failed";
      },
      seconds(10)))
      << reason << cluster.Logs();
  EXPECT_THAT(reason, ::testing::ContainsRegex(
                          "failed: member 2/2 \\(job [0-9]+ on host host2\\) "
                          "was lost: "));
  EXPECT_TRUE(
      WaitFor([&] { return JobProcesses(cluster, "GDT_NODE_RANK=0").empty(); },
              seconds(10)))
      << DescribeAll(JobProcesses(cluster, "GDT_NODE_RANK=0"));

  CommandResult result = FinishRun(*run, seconds(90));
  EXPECT_FALSE(result.status.success()) << result.output;
  EXPECT_THAT(log(1), HasSubstr(absl::StrCat("gdt: ", reason, "\n")));
  EXPECT_THAT(log(1), HasSubstr(absl::StrCat("Job failed: exit status ",
                                             kPeerFailureExitCode, "\n")));
  EXPECT_THAT(log(2), HasSubstr(absl::StrCat("gdt: ", reason, "\n")));
  // The dead agent's training loses its peer and ends: nothing is left.
  EXPECT_TRUE(
      WaitFor([&] { return JobProcesses(cluster).empty(); }, seconds(20)))
      << DescribeAll(JobProcesses(cluster));
}

// An agent that dies without ending its stages (SIGKILL, the OOM killer)
// leaves the training running with nobody to report it. The next agent
// started on the host ends what the dead one left before it serves.
TEST(LivenessTest, RestartedAgentEndsTheTrainingADeadAgentLeftRunning) {
  absl::StatusOr<std::unique_ptr<NetworkNamespaces>> hosts =
      NetworkNamespaces::Create(2);
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  GdtCluster cluster(hosts->get(), /*control_host=*/0);
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  const AgentSpec agent{.name = "host1",
                        .host = 1,
                        .cpu_slots = 1,
                        .network_interface = "eth0",
                        .member_uid_pool = MemberAccountsIfRoot()};
  ASSERT_TRUE(cluster.StartAgent(agent).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForHosts(1, seconds(20)).ok()) << cluster.Logs();
  // One member: no peer whose loss would end the training by itself.
  const std::string project = MakeDdpProject(cluster.dir(), /*nodes=*/1,
                                             /*procs_per_node=*/1);
  std::unique_ptr<Subprocess> run = StartRunLocal(
      cluster, project, "train",
      {"--var", "DDP_STEPS=100000", "--var", "DDP_STEP_SECONDS=0.05"});
  ASSERT_NE(run, nullptr);
  const std::string log_path =
      absl::StrCat(cluster.run_dir(), "/logs/train-1-1.log");
  ASSERT_TRUE(WaitFor(
      [&] {
        return ReadFile(log_path).find("first step done") != std::string::npos;
      },
      seconds(150)))
      << ReadFile(log_path) << cluster.Logs();

  cluster.StopAgent(0, SIGKILL);
  // The dead agent's training runs on: an orphan holding the host.
  ASSERT_FALSE(JobProcesses(cluster, "GDT_NODE_RANK=0").empty())
      << "the training ended with its agent";

  ASSERT_TRUE(cluster.StartAgent(agent).ok()) << cluster.Logs();
  // The new agent ends the training itself; the job (run-local and its
  // executor calls, which go on with the job's failure) is not its business.
  EXPECT_TRUE(
      WaitFor([&] { return JobProcesses(cluster, "GDT_NODE_RANK=0").empty(); },
              seconds(20)))
      << DescribeAll(JobProcesses(cluster, "GDT_NODE_RANK=0"));
  EXPECT_THAT(ReadFile(cluster.dir().Sub("agent-host1.log")),
              HasSubstr("left running by a previous gdt-agent"));

  CommandResult result = FinishRun(*run, seconds(90));
  EXPECT_FALSE(result.status.success()) << result.output;
  EXPECT_TRUE(JobProcesses(cluster).empty())
      << DescribeAll(JobProcesses(cluster));
}

}  // namespace
}  // namespace gdt::test
