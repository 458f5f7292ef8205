// End to end: nothing leaks across coordinator outages. The members'
// LeaveGang calls of `cleanup` are lost while gdt-coord is down: the
// restarted coordinator sees that no agent runs a stage for them and no
// executor watches, and lets them go after member_gone_after_seconds; the
// operator's escape hatch (`cancel --force`) frees the leases at once. And
// the root cause names the member whose rank died, not a victim.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>
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

using std::chrono::seconds;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;

// Leased GPUs and running members on every host, from `gdt-coord status`.
int LeasedMembers(GdtCluster& cluster) {
  absl::StatusOr<nlohmann::json> status = cluster.Status();
  if (!status.ok()) return -1;
  int leased = 0;
  for (const auto& host : (*status)["hosts"]) {
    leased += host.value("members_running", 0);
    leased += static_cast<int>(host["leased_gpus"].size());
  }
  return leased;
}

std::string GangIdOf(GdtCluster& cluster) {
  absl::StatusOr<nlohmann::json> status = cluster.Status();
  if (!status.ok() || (*status)["gangs"].empty()) return "";
  return (*status)["gangs"][0].value("gang_id", "");
}

class ReconcileTest : public OneHostGangTest {
 protected:
  // Runs the job, kills the coordinator while both members are in
  // after_script, lets them finish (their LeaveGang is lost) and starts the
  // coordinator again. Returns the gang id.
  std::string LoseTheLeaves() {
    // Both members exit 0; each after_script marks that it started and
    // waits for `go`, so that the coordinator can be stopped while both are
    // between their exit and their cleanup.
    const TempDir& dir = cluster_.dir();
    const std::string project =
        MakeShellProject(dir, "true",
                         absl::StrCat("touch ", dir.Sub("after-"),
                                      "$CI_NODE_INDEX; while [ ! -e ",
                                      dir.Sub("go"), " ]; do sleep 0.1; done"));
    std::unique_ptr<Subprocess> run = StartRunLocal(cluster_, project, "train");
    EXPECT_NE(run, nullptr);
    if (run == nullptr) return "";
    EXPECT_TRUE(WaitFor(
        [&] {
          return std::filesystem::exists(cluster_.dir().Sub("after-1")) &&
                 std::filesystem::exists(cluster_.dir().Sub("after-2"));
        },
        seconds(120)))
        << cluster_.Logs();
    const std::string gang_id = GangIdOf(cluster_);
    cluster_.StopCoordinator(SIGKILL);
    WriteFile(cluster_.dir().Sub("go"), "");
    CommandResult result = FinishRun(*run, seconds(120));
    EXPECT_TRUE(result.status.success()) << result.output << cluster_.Logs();
    EXPECT_TRUE(cluster_.StartCoordinator().ok()) << cluster_.Logs();
    EXPECT_TRUE(cluster_.WaitForHosts(1, seconds(20)).ok()) << cluster_.Logs();
    return gang_id;
  }
};

TEST_F(ReconcileTest, ForcedCancelFreesLeasesWhoseLeaveWasLost) {
  const std::string gang_id = LoseTheLeaves();
  ASSERT_FALSE(gang_id.empty()) << cluster_.Logs();
  // Every member exited 0, but none left: the gang still holds its slots.
  ASSERT_GT(LeasedMembers(cluster_), 0) << cluster_.Status()->dump();

  const std::vector<std::string> cancel = {
      BinaryPath("gdt-coord"), "cancel", "--coordinator",
      cluster_.coordinator_endpoint(), gang_id};
  CommandResult plain = RunProcess(cancel, {}, seconds(20));
  EXPECT_EQ(plain.status.exit_code, 1) << plain.output;
  std::vector<std::string> forced = cancel;
  forced.push_back("--force");
  CommandResult freed = RunProcess(forced, {}, seconds(20));
  EXPECT_EQ(freed.status.exit_code, 0) << freed.output;
  EXPECT_THAT(freed.output, HasSubstr("holds no leases"));

  EXPECT_EQ(LeasedMembers(cluster_), 0) << cluster_.Status()->dump();
  EXPECT_THAT(cluster_.Logs(), HasSubstr("event=gang_force_cancelled"));
  // No forming gang is left to collect either.
  CommandResult gc =
      RunProcess({BinaryPath("gdt-coord"), "gangs", "gc", "--coordinator",
                  cluster_.coordinator_endpoint()},
                 {}, seconds(20));
  EXPECT_EQ(gc.status.exit_code, 0) << gc.output;
  EXPECT_EQ(gc.output, "no abandoned forming gangs\n");
  EXPECT_TRUE(
      WaitFor([&] { return JobProcesses(cluster_).empty(); }, seconds(5)))
      << DescribeAll(JobProcesses(cluster_));
}

TEST_F(ReconcileTest, LeasesWhoseLeaveWasLostAreFreedByReconciliation) {
  cluster_.SetCoordinatorExtraConfig("member_gone_after_seconds: 3\n");
  const std::string gang_id = LoseTheLeaves();
  ASSERT_FALSE(gang_id.empty()) << cluster_.Logs();

  // Nobody acts: the coordinator finds the members gone by itself.
  EXPECT_TRUE(
      WaitFor([&] { return LeasedMembers(cluster_) == 0; }, seconds(60)))
      << cluster_.Status()->dump() << cluster_.Logs();
  // The gang is done: every member left and its leases are free.
  ExpectLeasesReleased(cluster_);
  EXPECT_THAT(cluster_.Logs(), HasSubstr("event=member_reconciled_left"));
  EXPECT_TRUE(
      WaitFor([&] { return JobProcesses(cluster_).empty(); }, seconds(5)))
      << DescribeAll(JobProcesses(cluster_));
}

// The UTC time of day of `when`, as root-cause lines show it.
std::string TimeOfDay(std::chrono::system_clock::time_point when) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(when);
  std::tm parts = {};
  gmtime_r(&seconds, &parts);
  char text[16];
  std::snprintf(text, sizeof(text), "%02d:%02d:%02d", parts.tm_hour,
                parts.tm_min, parts.tm_sec);
  return text;
}

// Member 2 fails while gdt-coord is down for longer than its executor
// retries the exit report (exit_report_retry_seconds, shortened here): the
// executor gives up and its cleanup cannot leave. The agent on member 2's
// host keeps the exit in its outbox and delivers it once the coordinator
// is back, so the gang fails with the true root cause (exit 3, at the time
// it happened on the host, not when the coordinator heard of it), member 1
// stops at once with the peer-failure code, and reconciliation frees the
// leases.
TEST_F(ReconcileTest, FailureDuringALongOutageIsNotLost) {
  cluster_.SetExecutorExtraConfig("exit_report_retry_seconds: 2\n");
  const std::string started = cluster_.dir().Sub("started-");
  const std::string go = cluster_.dir().Sub("go");
  const std::string project = MakeShellProject(
      cluster_.dir(),
      absl::StrCat("touch ", started,
                   "$CI_NODE_INDEX; if [ $CI_NODE_INDEX = 2 ]; then while [ ! "
                   "-e ",
                   go, " ]; do sleep 0.1; done; exit 3; fi; sleep 200"));
  std::unique_ptr<Subprocess> run = StartRunLocal(cluster_, project, "train");
  ASSERT_NE(run, nullptr);
  ASSERT_TRUE(WaitFor(
      [&] {
        return std::filesystem::exists(started + "1") &&
               std::filesystem::exists(started + "2");
      },
      seconds(90)))
      << cluster_.Logs();
  cluster_.StopCoordinator(SIGKILL);
  WriteFile(go, "");
  // Member 2's job ends: its report gave up, its cleanup could not leave.
  ASSERT_TRUE(WaitFor(
      [&] { return MemberLog(2).find("Job failed") != std::string::npos; },
      seconds(60)))
      << MemberLog(2);
  EXPECT_THAT(MemberLog(2), HasSubstr("retrying the exit report"));
  // The script exited by now; the coordinator hears of it from a later
  // second on, so the root cause shows which time it carries.
  const std::string exited_by = TimeOfDay(std::chrono::system_clock::now());
  ASSERT_TRUE(WaitFor(
      [&] { return TimeOfDay(std::chrono::system_clock::now()) != exited_by; },
      seconds(5)));
  // Longer than the agent needs to deliver the exit once the coordinator
  // is back: the root cause must come from the exit, not from finding
  // member 2 gone.
  cluster_.SetCoordinatorExtraConfig("member_gone_after_seconds: 20\n");
  ASSERT_TRUE(cluster_.StartCoordinator().ok()) << cluster_.Logs();

  CommandResult result = FinishRun(*run, seconds(60));
  EXPECT_FALSE(result.status.success()) << result.output;
  const std::string log1 = MemberLog(1);
  std::smatch cause;
  ASSERT_TRUE(std::regex_search(
      log1, cause,
      std::regex("gdt: gang \\S+ failed: member 2/2 \\(job [0-9]+ on host "
                 "local\\) exited 3 at ([0-9:]+) UTC")))
      << log1 << cluster_.Logs();
  EXPECT_LE(cause[1].str(), exited_by) << log1;
  EXPECT_THAT(log1, HasSubstr(absl::StrCat("Job failed: exit status ",
                                           kPeerFailureExitCode, "\n")))
      << log1;
  EXPECT_THAT(cluster_.Logs(), HasSubstr("event=exit_delivered"));
  EXPECT_TRUE(
      WaitFor([&] { return LeasedMembers(cluster_) == 0; }, seconds(60)))
      << cluster_.Status()->dump();
  EXPECT_TRUE(
      WaitFor([&] { return JobProcesses(cluster_).empty(); }, seconds(5)))
      << DescribeAll(JobProcesses(cluster_));
}

// Member 2 of 2 runs ranks 2 and 3 (2 local ranks per member); rank 2 is
// killed. Rank 3 and both ranks of member 1 then log gloo's lost-peer
// errors, but member 2's own torchrun names rank 2, killed, as its first
// failure: every log blames member 2, whatever report arrives first.
TEST_F(ReconcileTest, KilledLocalRankBlamesItsOwnMember) {
  const std::string project = MakeDdpProject(cluster_.dir(), /*nodes=*/2,
                                             /*procs_per_node=*/2);
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
  const std::vector<ProcessInfo> workers = DdpWorkers(cluster_, "RANK=2");
  ASSERT_EQ(workers.size(), 1u) << DescribeAll(JobProcesses(cluster_));
  ASSERT_EQ(kill(workers[0].pid, SIGKILL), 0);

  CommandResult result = FinishRun(*run, seconds(90));
  EXPECT_FALSE(result.status.success()) << result.output;
  const std::string log1 = MemberLog(1);
  const std::string log2 = MemberLog(2);
  for (const std::string* log : {&log1, &log2}) {
    EXPECT_THAT(*log, ContainsRegex("gdt: gang \\S+ failed: member 2/2 \\(job "
                                    "[0-9]+ on host local\\) exited "))
        << *log;
  }
  EXPECT_THAT(log1, HasSubstr(absl::StrCat("Job failed: exit status ",
                                           kPeerFailureExitCode, "\n")))
      << log1;
  EXPECT_EQ(LeasedMembers(cluster_), 0) << cluster_.Status()->dump();
  EXPECT_TRUE(
      WaitFor([&] { return JobProcesses(cluster_).empty(); }, seconds(5)))
      << DescribeAll(JobProcesses(cluster_));
}

}  // namespace
}  // namespace gdt::test
