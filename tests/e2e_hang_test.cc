// End to end: the hang watchdog. A member whose training stops touching
// $GDT_PROGRESS_FILE for GDT_HANG_TIMEOUT seconds fails its gang as hung;
// every member collects evidence into its artifacts before it is stopped.
// The root cause names the member whose progress stopped first.
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/cluster.h"
#include "tests/e2e_util.h"

namespace gdt::test {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(HangWatchdogTest, MemberWithoutProgressFailsTheGangAsHungWithEvidence) {
  GdtCluster cluster;
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.StartAgent({.name = "local", .cpu_slots = 2}).ok())
      << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForHosts(1, seconds(20)).ok()) << cluster.Logs();
  // Member 1 keeps making progress; member 2 stops after its first touch.
  const std::string project = cluster.dir().Sub("project");
  fs::create_directories(project);
  WriteFile(project + "/.gitlab-ci.yml",
            "train:\n"
            "  parallel: 2\n"
            "  timeout: 5 minutes\n"
            "  variables:\n"
            "    GDT_GPUS_PER_NODE: \"0\"\n"
            "    GDT_LAUNCHER: none\n"
            "    GDT_HANG_TIMEOUT: \"3\"\n"
            "  script:\n"
            "    - echo \"progress file $GDT_PROGRESS_FILE\"\n"
            "    - 'if [ \"$CI_NODE_INDEX\" = 1 ]; then while true; do touch "
            "\"$GDT_PROGRESS_FILE\"; sleep 0.2; done; else touch "
            "\"$GDT_PROGRESS_FILE\"; echo member 2 stuck; sleep 122; fi'\n"
            "  artifacts:\n"
            "    paths: [gdt-evidence/]\n"
            "    when: always\n");

  const auto start = std::chrono::steady_clock::now();
  CommandResult run = cluster.RunLocal(project, "train", {}, seconds(120));
  const auto elapsed = std::chrono::steady_clock::now() - start;

  EXPECT_FALSE(run.status.success()) << run.output;
  EXPECT_LT(elapsed, seconds(60)) << run.output;
  auto log = [&](int index) {
    return ReadFile(
        absl::StrCat(cluster.run_dir(), "/logs/train-", index, "-2.log"));
  };
  const std::string log1 = log(1);
  const std::string log2 = log(2);
  EXPECT_THAT(log2, HasSubstr("progress file /")) << log2;
  static const std::regex kRootCause(
      R"(gdt: (gang \S+ failed: member 2/2 \(job \d+ on host local\) hung: no progress since \d\d:\d\d:\d\d UTC \(its host's clock; GDT_HANG_TIMEOUT 3 s\)(, peers' last progress \d+\.\d s later)?; detected at \d\d:\d\d:\d\d UTC; stopping)\n)");
  std::smatch match;
  ASSERT_TRUE(std::regex_search(log2, match, kRootCause)) << log2;
  EXPECT_THAT(log1, HasSubstr(absl::StrCat("gdt: ", match[1].str(), "\n")))
      << log1;
  EXPECT_THAT(log1, HasSubstr(absl::StrCat("Job failed: exit status ",
                                           kPeerFailureExitCode, "\n")))
      << log1;
  EXPECT_THAT(log2, Not(HasSubstr(absl::StrCat("Job failed: exit status ",
                                               kPeerFailureExitCode, "\n"))))
      << log2;

  // Both members' evidence was kept as artifacts.
  int summaries = 0;
  std::string stuck_lines;
  std::string trees;
  std::error_code ignored;
  for (const auto& entry :
       fs::recursive_directory_iterator(cluster.run_dir(), ignored)) {
    if (entry.path().parent_path().filename() != "gdt-evidence") continue;
    const std::string name = entry.path().filename().string();
    if (name == "summary.txt") {
      ++summaries;
      EXPECT_THAT(ReadFile(entry.path().string()), HasSubstr("py-spy"));
    }
    if (name == "processes.txt") trees += ReadFile(entry.path());
    if (name == "last-lines.txt") stuck_lines += ReadFile(entry.path());
  }
  EXPECT_EQ(summaries, 2) << run.output;
  EXPECT_THAT(stuck_lines, HasSubstr("member 2 stuck"));
  EXPECT_THAT(trees, HasSubstr("sleep 122"));
  EXPECT_TRUE(JobProcesses(cluster).empty())
      << DescribeAll(JobProcesses(cluster));
}

// A collective hang: member 2 stops first and member 1, blocked behind it,
// stops 2 s later. Member 2's host then stalls (its agent and executor are
// frozen) until member 1's hang report has reached the coordinator, so the
// first report names the wrong member. Every log still names member 2 and
// the time its progress stopped.
TEST(HangWatchdogTest, NamesTheMemberThatStoppedFirstNotTheFirstToReport) {
  GdtCluster cluster;
  // The stall must not count as a lost host.
  cluster.SetCoordinatorExtraConfig("host_down_after_seconds: 30\n");
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.StartAgent({.name = "a", .cpu_slots = 1}).ok())
      << cluster.Logs();
  ASSERT_TRUE(cluster.StartAgent({.name = "b", .cpu_slots = 1}).ok())
      << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForHosts(2, seconds(20)).ok()) << cluster.Logs();
  const std::string culprit_stopped = cluster.dir().Sub("culprit-stopped");
  const std::string frozen = cluster.dir().Sub("frozen");
  const std::string project = cluster.dir().Sub("project");
  fs::create_directories(project);
  WriteFile(project + "/.gitlab-ci.yml",
            absl::StrCat(
                "train:\n"
                "  parallel: 2\n"
                "  timeout: 5 minutes\n"
                "  variables:\n"
                "    GDT_GPUS_PER_NODE: \"0\"\n"
                "    GDT_LAUNCHER: none\n"
                "    GDT_HANG_TIMEOUT: \"3\"\n"
                "  script:\n"
                "    - 'if [ \"$CI_NODE_INDEX\" = 2 ]; then touch "
                "\"$GDT_PROGRESS_FILE\"; echo \"$GDT_AGENT_ENDPOINT\" > ",
                culprit_stopped, ".tmp; mv ", culprit_stopped, ".tmp ",
                culprit_stopped,
                "; echo member 2 stuck; sleep 123; else while [ ! -e ", frozen,
                " ]; do touch \"$GDT_PROGRESS_FILE\"; sleep 0.1; done; for i "
                "in $(seq 20); do touch \"$GDT_PROGRESS_FILE\"; sleep 0.1; "
                "done; echo member 1 blocked; sleep 123; fi'\n"));

  std::unique_ptr<Subprocess> run = StartRunLocal(cluster, project, "train");
  ASSERT_NE(run, nullptr);
  ASSERT_TRUE(WaitFor([&] { return fs::exists(culprit_stopped); }, seconds(90)))
      << cluster.Logs();
  // Member 2's host: the agent whose port member 2 was given.
  const std::string endpoint =
      std::string(absl::StripAsciiWhitespace(ReadFile(culprit_stopped)));
  const std::string port = endpoint.substr(endpoint.rfind(':') + 1);
  size_t culprit_agent = 0;
  for (size_t index = 0; index < 2; ++index) {
    const std::string agent = cluster.AgentEndpoint(index);
    if (agent.substr(agent.rfind(':') + 1) == port) culprit_agent = index;
  }
  const std::string culprit_host = culprit_agent == 0 ? "a" : "b";
  std::vector<int> stalled;
  for (const ProcessInfo& process : MemberRunExecs(cluster, 2)) {
    stalled.push_back(process.pid);
  }
  ASSERT_EQ(stalled.size(), 1u) << DescribeAll(JobProcesses(cluster));
  stalled.push_back(cluster.AgentPid(culprit_agent));
  // Whatever happens below, nothing stays frozen.
  struct Thaw {
    std::vector<int> pids;
    void Now() {
      for (auto it = pids.rbegin(); it != pids.rend(); ++it) {
        kill(*it, SIGCONT);
      }
      pids.clear();
    }
    ~Thaw() { Now(); }
  } thaw{stalled};
  for (int pid : stalled) ASSERT_EQ(kill(pid, SIGSTOP), 0);
  WriteFile(frozen, "");

  // Member 1 stops 2 s later and its watchdog reports first.
  ASSERT_TRUE(WaitFor(
      [&] {
        return cluster.Logs().find("member hung gang=") != std::string::npos;
      },
      seconds(60)))
      << cluster.Logs();
  // Member 2's agent first: it reports member 2 hung and the coordinator
  // decides. Member 2's executor only after that: frozen with a keepalive
  // ping to the frozen agent unanswered, it may find that ping timed out
  // the moment it runs again and report the agent unreachable, which
  // would race with the agent's report (on a loaded machine it won).
  ASSERT_EQ(kill(cluster.AgentPid(culprit_agent), SIGCONT), 0);
  ASSERT_TRUE(WaitFor(
      [&] {
        return cluster.Logs().find("event=gang_failed") != std::string::npos;
      },
      seconds(60)))
      << cluster.Logs();
  thaw.Now();

  CommandResult result = FinishRun(*run, seconds(120));
  EXPECT_FALSE(result.status.success()) << result.output;
  auto log = [&](int index) {
    return ReadFile(
        absl::StrCat(cluster.run_dir(), "/logs/train-", index, "-2.log"));
  };
  const std::string log1 = log(1);
  const std::string log2 = log(2);
  EXPECT_THAT(log1, HasSubstr("member 1 blocked")) << log1;
  const std::regex root_cause(absl::StrCat(
      R"(gdt: (gang \S+ failed: member 2/2 \(job \d+ on host )", culprit_host,
      R"(\) hung: no progress since \d\d:\d\d:\d\d UTC \(its host's clock; GDT_HANG_TIMEOUT 3 s\), peers' last progress (\d+\.\d) s later; detected at \d\d:\d\d:\d\d UTC; stopping)\n)"));
  std::smatch match;
  ASSERT_TRUE(std::regex_search(log1, match, root_cause))
      << log1 << cluster.Logs();
  EXPECT_GE(std::atof(match[2].str().c_str()), 1.9) << match[0];
  EXPECT_THAT(log2, HasSubstr(absl::StrCat("gdt: ", match[1].str(), "\n")))
      << log2;
  EXPECT_THAT(log1, HasSubstr(absl::StrCat("Job failed: exit status ",
                                           kPeerFailureExitCode, "\n")))
      << log1;
  EXPECT_TRUE(JobProcesses(cluster).empty())
      << DescribeAll(JobProcesses(cluster));
}

}  // namespace
}  // namespace gdt::test
