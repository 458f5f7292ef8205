// End to end: a gang fails or succeeds as a whole. gdt-ci run-local →
// gdt-executor → gdt-coord → gdt-agent on loopback, with plain shell jobs.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <regex>
#include <string>
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
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

class GangFailureTest : public OneHostGangTest {};

TEST_F(GangFailureTest, OneFailingMemberStopsTheWholeGangFast) {
  const std::string started = cluster_.dir().Sub("member-1-started");
  const std::string project = MakeShellProject(
      cluster_.dir(),
      absl::StrCat("if [ \"$CI_NODE_INDEX\" = 1 ]; then touch ", started,
                   "; sleep 120; else while [ ! -e ", started,
                   " ]; do sleep 0.1; done; echo member 2 fails; exit 3; fi"));

  const auto start = std::chrono::steady_clock::now();
  CommandResult run = cluster_.RunLocal(project, "train", {}, seconds(90));
  const auto elapsed = std::chrono::steady_clock::now() - start;

  EXPECT_FALSE(run.status.success()) << run.output;
  EXPECT_LT(elapsed, seconds(60)) << run.output << cluster_.Logs();
  const std::string log1 = MemberLog(1);
  const std::string log2 = MemberLog(2);
  EXPECT_THAT(log2, HasSubstr("member 2 fails"));
  EXPECT_THAT(log2, HasSubstr("Job failed: exit status 3\n")) << log2;
  EXPECT_THAT(log1, HasSubstr(absl::StrCat("Job failed: exit status ",
                                           kPeerFailureExitCode, "\n")))
      << log1;

  // The same root-cause line in every member's log, naming member 2.
  static const std::regex kRootCause(
      R"(gdt: (gang \S+ failed: member 2/2 \(job \d+ on host local\) exited 3 at \d\d:\d\d:\d\d UTC; stopping)\n)");
  std::smatch match;
  ASSERT_TRUE(std::regex_search(log2, match, kRootCause)) << log2;
  const std::string reason = match[1];
  EXPECT_THAT(log1, HasSubstr(absl::StrCat("gdt: ", reason, "\n"))) << log1;

  absl::StatusOr<nlohmann::json> status = cluster_.Status();
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_EQ((*status)["gangs"].size(), 1u) << status->dump();
  EXPECT_EQ((*status)["gangs"][0].value("state", ""), "failed")
      << status->dump();
  EXPECT_EQ((*status)["gangs"][0].value("reason", ""), reason);
  for (const auto& host : (*status)["hosts"]) {
    EXPECT_EQ(host.value("members_running", -1), 0) << host.dump();
  }
  // Member 1's `sleep 120` (and everything else of both jobs) is gone; the
  // process tree is scoped to this cluster, so other tests' processes on
  // the machine do not count.
  EXPECT_TRUE(
      WaitFor([&] { return JobProcesses(cluster_).empty(); }, seconds(2)))
      << DescribeAll(JobProcesses(cluster_));
}

// Member 2's CI_NODE_INDEX is forged (1, while its job is "train 2/2"): its
// config refuses the job, which no retry of member 1 could fix, and tells
// the gang. Member 1, waiting for member 2, fails within seconds with that
// reason instead of waiting out its join timeout ("no job picked up yet").
TEST_F(GangFailureTest, MemberRefusedAtConfigFailsItsPeersFast) {
  const std::string project = MakeShellProject(cluster_.dir(), "echo trained");
  const auto start = std::chrono::steady_clock::now();
  CommandResult run = cluster_.RunLocal(
      project, "train", {"--var", "CI_NODE_INDEX=1"}, seconds(90));
  const auto elapsed = std::chrono::steady_clock::now() - start;

  EXPECT_FALSE(run.status.success()) << run.output;
  EXPECT_LT(elapsed, seconds(60)) << run.output << cluster_.Logs();
  const std::string log1 = MemberLog(1);
  const std::string log2 = MemberLog(2);
  EXPECT_THAT(log2, HasSubstr("CI_NODE_INDEX/CI_NODE_TOTAL 1/2 disagree"))
      << log2;
  EXPECT_THAT(log1, Not(HasSubstr("trained"))) << log1;
  static const std::regex kRootCause(
      R"(gang \S+ failed: member 2/2 \(job \d+\) was refused: CI_NODE_INDEX/CI_NODE_TOTAL 1/2 disagree with the job name 'train 2/2' \(member 2/2\) at \d\d:\d\d:\d\d UTC)");
  EXPECT_TRUE(std::regex_search(log1, kRootCause)) << log1;
  EXPECT_TRUE(std::regex_search(log2, kRootCause)) << log2;
  // Nothing is left waiting or leased.
  absl::StatusOr<nlohmann::json> status = cluster_.Status();
  ASSERT_TRUE(status.ok()) << status.status();
  for (const auto& gang : (*status)["gangs"]) {
    EXPECT_NE(gang.value("state", ""), "forming") << gang.dump();
  }
  for (const auto& host : (*status)["hosts"]) {
    EXPECT_EQ(host.value("members_running", -1), 0) << host.dump();
  }
}

TEST_F(GangFailureTest, ExitBarrierMakesTheGangSucceedAsAWhole) {
  const std::string project =
      MakeShellProject(cluster_.dir(),
                       "if [ \"$CI_NODE_INDEX\" = 2 ]; then sleep 3; fi; "
                       "echo member $CI_NODE_INDEX done");

  CommandResult run = cluster_.RunLocal(project, "train", {}, seconds(90));

  ASSERT_TRUE(run.status.success()) << run.output << cluster_.Logs();
  const std::string log1 = MemberLog(1);
  const std::string log2 = MemberLog(2);
  EXPECT_THAT(log1, HasSubstr("member 1 done"));
  EXPECT_THAT(log1, HasSubstr("gdt: waiting for 1 other member to finish\n"))
      << log1;
  EXPECT_THAT(log2, HasSubstr("member 2 done"));
  EXPECT_THAT(log2, Not(HasSubstr("failed:")));
  ExpectLeasesReleased(cluster_);
}

// Every host shows no member running and no leased GPU.
bool HostsFree(GdtCluster& cluster) {
  absl::StatusOr<nlohmann::json> status = cluster.Status();
  if (!status.ok()) return false;
  for (const auto& host : (*status)["hosts"]) {
    if (host.value("members_running", -1) != 0 ||
        !host["leased_gpus"].empty()) {
      return false;
    }
  }
  return true;
}

// The acceptance case : SIGKILL to one member's training process
// (member 2's DDP worker, as the OOM killer would) mid-run. The survivor's
// collective breaks at once ("Connection reset by peer") and its torchrun
// may exit first; the root cause must still name member 2.
TEST_F(GangFailureTest, KilledTrainingStopsEveryMemberWithinSeconds) {
  const std::string project = MakeDdpProject(cluster_.dir(), /*nodes=*/2,
                                             /*procs_per_node=*/1);
  std::unique_ptr<Subprocess> run = StartRunLocal(
      cluster_, project, "train",
      {"--var", "DDP_STEPS=100000", "--var", "DDP_STEP_SECONDS=0.05"});
  ASSERT_NE(run, nullptr);
  ASSERT_TRUE(WaitFor(
      [&] {
        return MemberLog(1).find("first step done") != std::string::npos &&
               MemberLog(2).find("first step done") != std::string::npos;
      },
      seconds(150)))
      << MemberLog(1) << MemberLog(2) << cluster_.Logs();

  // Member 2 is node rank 1; its worker is `python3 -u train.py` under the
  // torchrun wrapper.
  const std::vector<ProcessInfo> workers =
      DdpWorkers(cluster_, "GDT_NODE_RANK=1");
  ASSERT_EQ(workers.size(), 1u)
      << DescribeAll(JobProcesses(cluster_, "GDT_NODE_RANK=1"));
  ASSERT_EQ(kill(workers[0].pid, SIGKILL), 0);
  const auto killed_at = std::chrono::steady_clock::now();

  // Member 1's processes (node rank 0) are gone within 10 s.
  EXPECT_TRUE(
      WaitFor([&] { return JobProcesses(cluster_, "GDT_NODE_RANK=0").empty(); },
              seconds(10)))
      << DescribeAll(JobProcesses(cluster_, "GDT_NODE_RANK=0"));
  CommandResult result = FinishRun(*run, seconds(60));
  EXPECT_FALSE(result.status.success()) << result.output;
  EXPECT_LT(std::chrono::steady_clock::now() - killed_at, seconds(30))
      << result.output;

  // GPUs and slots show free within 1 s of the jobs' end.
  EXPECT_TRUE(WaitFor([&] { return HostsFree(cluster_); }, seconds(1)))
      << (cluster_.Status().ok() ? cluster_.Status()->dump() : "");

  const std::string log1 = MemberLog(1);
  const std::string log2 = MemberLog(2);
  // torchrun exits 1 when its worker was killed.
  EXPECT_THAT(log2, HasSubstr("Job failed: exit status 1\n")) << log2;
  EXPECT_THAT(log1, HasSubstr(absl::StrCat("Job failed: exit status ",
                                           kPeerFailureExitCode, "\n")))
      << log1;
  static const std::regex kRootCause(
      R"(gdt: (gang \S+ failed: member 2/2 \(job \d+ on host local\) exited 1 at \d\d:\d\d:\d\d UTC; stopping)\n)");
  std::smatch match;
  ASSERT_TRUE(std::regex_search(log2, match, kRootCause)) << log2;
  EXPECT_THAT(log1, HasSubstr(absl::StrCat("gdt: ", match[1].str(), "\n")))
      << log1;
  EXPECT_TRUE(
      WaitFor([&] { return JobProcesses(cluster_).empty(); }, seconds(2)))
      << DescribeAll(JobProcesses(cluster_));
}

// The runner cancels one member's job (or its timeout hits): SIGTERM to the
// executor's process group, as gitlab-runner does.
TEST_F(GangFailureTest, CancelledMemberStopsTheGangAndLeavesNoProcess) {
  const std::string started = cluster_.dir().Sub("started-");
  const std::string project = MakeShellProject(
      cluster_.dir(),
      absl::StrCat("touch ", started, "$CI_NODE_INDEX; sleep 121"));
  std::unique_ptr<Subprocess> run = StartRunLocal(cluster_, project, "train");
  ASSERT_NE(run, nullptr);
  ASSERT_TRUE(WaitFor(
      [&] {
        return std::filesystem::exists(started + "1") &&
               std::filesystem::exists(started + "2");
      },
      seconds(90)))
      << cluster_.Logs();

  const std::vector<ProcessInfo> executors = MemberRunExecs(cluster_, 2);
  ASSERT_EQ(executors.size(), 1u) << DescribeAll(JobProcesses(cluster_));
  const pid_t group = getpgid(executors[0].pid);
  ASSERT_EQ(group, executors[0].pid)
      << "the runner starts every exec in its own process group";
  ASSERT_EQ(kill(-group, SIGTERM), 0);

  CommandResult result = FinishRun(*run, seconds(60));
  EXPECT_FALSE(result.status.success()) << result.output;
  const std::string log1 = MemberLog(1);
  const std::string log2 = MemberLog(2);
  EXPECT_THAT(log1, HasSubstr(absl::StrCat("Job failed: exit status ",
                                           kPeerFailureExitCode, "\n")))
      << log1;
  static const std::regex kRootCause(
      R"(gdt: (gang \S+ failed: member 2/2 \(job \d+ on host local\) was cancelled at \d\d:\d\d:\d\d UTC; stopping)\n)");
  std::smatch match;
  ASSERT_TRUE(std::regex_search(log1, match, kRootCause)) << log1;
  EXPECT_THAT(log2, HasSubstr(absl::StrCat("gdt: ", match[1].str(), "\n")))
      << log2;

  // Cleanup ran for both members (they left the gang, its leases are
  // free) and nothing of either job is left.
  absl::StatusOr<nlohmann::json> status = cluster_.Status();
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_EQ((*status)["gangs"].size(), 1u) << status->dump();
  for (const auto& member : (*status)["gangs"][0]["members"]) {
    EXPECT_TRUE(member.value("left", false)) << member.dump();
  }
  EXPECT_TRUE(HostsFree(cluster_)) << status->dump();
  EXPECT_TRUE(
      WaitFor([&] { return JobProcesses(cluster_).empty(); }, seconds(2)))
      << DescribeAll(JobProcesses(cluster_));
}

// `gdt-coord cancel`: the operator's way to stop a gang.
TEST_F(GangFailureTest, OperatorCancelStopsEveryMember) {
  const std::string started = cluster_.dir().Sub("started-");
  const std::string project = MakeShellProject(
      cluster_.dir(),
      absl::StrCat("touch ", started, "$CI_NODE_INDEX; sleep 121"));
  std::unique_ptr<Subprocess> run = StartRunLocal(cluster_, project, "train");
  ASSERT_NE(run, nullptr);
  ASSERT_TRUE(WaitFor(
      [&] {
        return std::filesystem::exists(started + "1") &&
               std::filesystem::exists(started + "2");
      },
      seconds(90)))
      << cluster_.Logs();
  const std::string gang_id = cluster_.WaitForRunningGang(seconds(60));
  ASSERT_FALSE(gang_id.empty()) << cluster_.Logs();

  const std::vector<std::string> cancel = {BinaryPath("gdt-coord"), "cancel",
                                           "--coordinator",
                                           cluster_.coordinator_endpoint()};
  auto with = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = cancel;
    argv.insert(argv.end(), args.begin(), args.end());
    return RunProcess(argv, {}, seconds(20));
  };
  CommandResult unknown = with({"no-such-gang"});
  EXPECT_EQ(unknown.status.exit_code, 1) << unknown.output;
  EXPECT_EQ(unknown.output, "gdt-coord: unknown gang no-such-gang\n");

  CommandResult cancelled = with({gang_id, "--reason", "bad hyperparameters"});
  EXPECT_EQ(cancelled.status.exit_code, 0) << cancelled.output;
  const std::string reason =
      absl::StrCat("gang ", gang_id,
                   " failed: cancelled by operator: bad hyperparameters at ");
  EXPECT_THAT(cancelled.output, HasSubstr(reason));

  CommandResult result = FinishRun(*run, seconds(60));
  EXPECT_FALSE(result.status.success()) << result.output;
  for (int index : {1, 2}) {
    const std::string log = MemberLog(index);
    EXPECT_THAT(log, HasSubstr("gdt: " + reason)) << log;
    EXPECT_THAT(log, HasSubstr(absl::StrCat("Job failed: exit status ",
                                            kPeerFailureExitCode, "\n")))
        << log;
  }
  CommandResult again = with({gang_id});
  EXPECT_EQ(again.status.exit_code, 1) << again.output;
  EXPECT_THAT(again.output, ContainsRegex("^gdt-coord: gang .* already "
                                          "finished \\(failed\\)\n$"));
  EXPECT_TRUE(HostsFree(cluster_));
  EXPECT_TRUE(
      WaitFor([&] { return JobProcesses(cluster_).empty(); }, seconds(2)))
      << DescribeAll(JobProcesses(cluster_));
}

// GitLab's Retry: the same pipeline's jobs come back with new job ids and
// join the gang's next epoch.
TEST_F(GangFailureTest, RetriedGangFormsTheNextEpochAndSucceeds) {
  const std::string project = MakeShellProject(
      cluster_.dir(),
      "echo \"member $CI_NODE_INDEX epoch $GDT_EPOCH\"; if [ \"$GDT_EPOCH\" = "
      "1 ] && [ \"$CI_NODE_INDEX\" = 2 ]; then exit 3; fi");

  CommandResult first = cluster_.RunLocal(
      project, "train", {"--pipeline-id", "4242"}, seconds(90));
  ASSERT_FALSE(first.status.success()) << first.output;
  EXPECT_THAT(MemberLog(2), HasSubstr("Job failed: exit status 3\n"));

  CommandResult retry = cluster_.RunLocal(
      project, "train", {"--pipeline-id", "4242", "--first-job-id", "4242500"},
      seconds(90));
  ASSERT_TRUE(retry.status.success()) << retry.output << cluster_.Logs();
  EXPECT_THAT(MemberLog(1), HasSubstr("member 1 epoch 2\n"));
  EXPECT_THAT(MemberLog(2), HasSubstr("member 2 epoch 2\n"));

  absl::StatusOr<nlohmann::json> status = cluster_.Status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_THAT(GangEpochStates(*status),
              ::testing::ElementsAre(
                  ::testing::Pair("train-p1-pl4242-n2 2", "done"),
                  ::testing::Pair("train-p1-pl4242-n2#1 1", "failed")))
      << status->dump();
  EXPECT_TRUE(HostsFree(cluster_)) << status->dump();
  EXPECT_TRUE(JobProcesses(cluster_).empty())
      << DescribeAll(JobProcesses(cluster_));
}

// A member whose executor vanishes (frozen, as on a partitioned runner
// host) is lost: its agent notices the missed pings, stops its stage and
// reports it, so the gang fails naming it. It stays alive while the retried
// gang runs its next epoch; when it wakes up the coordinator refuses it
// (fenced), and its cleanup still releases what its epoch held.
// The runner and the executor of member 1 die (SIGKILL: a host reboot, an
// OOM kill): no cleanup stage will come for it, so the agent tears the lost
// member down itself, and what its job left outside the stage's process
// group (a setsid child) does not outlive it.
TEST_F(GangFailureTest, ALostMemberIsTornDownWithWhatItsJobLeftRunning) {
  const std::string started = cluster_.dir().Sub("started-");
  const std::string project = MakeShellProject(
      cluster_.dir(),
      absl::StrCat("setsid sh -c \"exec sleep 301\" </dev/null >/dev/null 2>&1 "
                   "& touch ",
                   started, "$CI_NODE_INDEX; sleep 121"));
  std::unique_ptr<Subprocess> run = StartRunLocal(cluster_, project, "train");
  ASSERT_NE(run, nullptr);
  ASSERT_TRUE(WaitFor(
      [&] {
        return std::filesystem::exists(started + "1") &&
               std::filesystem::exists(started + "2");
      },
      seconds(90)))
      << cluster_.Logs();
  const auto orphans = [&] {
    int count = 0;
    for (const ProcessInfo& p : JobProcesses(cluster_, "CI_NODE_INDEX=1")) {
      if (p.cmdline.find("sleep 301") != std::string::npos) ++count;
    }
    return count;
  };
  ASSERT_TRUE(WaitFor([&] { return orphans() == 1; }, seconds(20)))
      << DescribeAll(JobProcesses(cluster_));
  const std::vector<ProcessInfo> executors = MemberRunExecs(cluster_, 1);
  ASSERT_EQ(executors.size(), 1u) << DescribeAll(JobProcesses(cluster_));
  ASSERT_EQ(kill(run->pid(), SIGKILL), 0);
  ASSERT_EQ(kill(executors[0].pid, SIGKILL), 0);

  EXPECT_TRUE(WaitFor([&] { return orphans() == 0; }, seconds(60)))
      << DescribeAll(JobProcesses(cluster_)) << cluster_.Logs();
  EXPECT_TRUE(WaitFor(
      [&] {
        return cluster_.Logs().find("event=lost_member_torn_down") !=
               std::string::npos;
      },
      seconds(30)))
      << cluster_.Logs();
  // Member 2's executor lives on without its runner; stop it and what it
  // runs, as a dead runner's host would.
  for (const ProcessInfo& process : JobProcesses(cluster_)) {
    kill(process.pid, SIGKILL);
  }
  FinishRun(*run, seconds(10));
}

TEST_F(GangFailureTest, VanishedExecutorIsLostAndFencedAfterTheRetry) {
  ASSERT_TRUE(cluster_.StartAgent({.name = "spare", .cpu_slots = 2}).ok())
      << cluster_.Logs();
  ASSERT_TRUE(cluster_.WaitForHosts(2, seconds(20)).ok()) << cluster_.Logs();
  const std::string started = cluster_.dir().Sub("started-");
  const std::string project = MakeShellProject(
      cluster_.dir(),
      absl::StrCat("echo \"member $CI_NODE_INDEX epoch $GDT_EPOCH\"; "
                   "[ \"$GDT_EPOCH\" = 1 ] || exit 0; touch ",
                   started,
                   "$CI_NODE_INDEX; if [ \"$CI_NODE_INDEX\" = 1 ]; "
                   "then sleep 121; else sleep 122; fi"));
  std::unique_ptr<Subprocess> first =
      StartRunLocal(cluster_, project, "train", {"--pipeline-id", "4343"});
  ASSERT_NE(first, nullptr);
  ASSERT_TRUE(WaitFor(
      [&] {
        return std::filesystem::exists(started + "1") &&
               std::filesystem::exists(started + "2");
      },
      seconds(90)))
      << cluster_.Logs();
  const std::vector<ProcessInfo> executors = MemberRunExecs(cluster_, 1);
  ASSERT_EQ(executors.size(), 1u) << DescribeAll(JobProcesses(cluster_));
  const int stale = executors[0].pid;
  ASSERT_EQ(kill(stale, SIGSTOP), 0);
  // Whatever happens below, the frozen executor must not stay frozen.
  struct Thaw {
    int pid;
    ~Thaw() { kill(pid, SIGCONT); }
  } thaw{stale};

  // The agent notices the frozen executor (missed pings), stops member 1's
  // stage and reports it lost: the gang fails naming it.
  EXPECT_TRUE(WaitFor(
      [&] {
        for (const ProcessInfo& p : JobProcesses(cluster_, "CI_NODE_INDEX=1")) {
          if (p.cmdline.find("sleep 121") != std::string::npos) return false;
        }
        return true;
      },
      seconds(15)))
      << DescribeAll(JobProcesses(cluster_));
  static const std::regex kLost(
      R"(gdt: gang \S+ failed: member 1/2 \(job 4343001 on host local\) was lost: its executor went away \(the build_script stream to the agent on host local broke\) at \d\d:\d\d:\d\d UTC; stopping\n)");
  ASSERT_TRUE(WaitFor(
      [&] {
        return MemberLog(2).find(absl::StrCat("Job failed: exit status ",
                                              kPeerFailureExitCode)) !=
               std::string::npos;
      },
      seconds(60)))
      << MemberLog(2) << cluster_.Logs();
  EXPECT_TRUE(std::regex_search(MemberLog(2), kLost)) << MemberLog(2);

  // GitLab retries both jobs: epoch 2 runs and succeeds beside the stale one.
  // Its own work dir, so the stale job's log stays where it is.
  std::vector<std::string> argv = cluster_.RunLocalArgv(
      project, "train", {"--pipeline-id", "4343", "--first-job-id", "4343500"});
  auto work_dir = std::find(argv.begin(), argv.end(), "--work-dir");
  ASSERT_NE(work_dir, argv.end());
  *(work_dir + 1) = cluster_.dir().Sub("retry");
  CommandResult retry = RunProcess(argv, {}, seconds(90));
  EXPECT_TRUE(retry.status.success()) << retry.output << cluster_.Logs();
  EXPECT_THAT(retry.output, HasSubstr("member 1 epoch 2"));

  // The stale member wakes up: refused as fenced, it fails and cleans up.
  kill(stale, SIGCONT);
  CommandResult result = FinishRun(*first, seconds(60));
  EXPECT_FALSE(result.status.success()) << result.output;
  EXPECT_THAT(MemberLog(1), HasSubstr("of an older attempt is fenced"))
      << MemberLog(1);
  EXPECT_TRUE(HostsFree(cluster_)) << cluster_.Status()->dump();
  EXPECT_TRUE(
      WaitFor([&] { return JobProcesses(cluster_).empty(); }, seconds(2)))
      << DescribeAll(JobProcesses(cluster_));
}

}  // namespace
}  // namespace gdt::test
