// End to end: a gang fails or succeeds as a whole. gdt-ci run-local →
// gdt-executor → gdt-coord → gdt-agent on loopback, with plain shell jobs.
#include <dirent.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/e2e_util.h"
#include "tests/support/cluster.h"

namespace gdt::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;
using ::testing::Not;

// The executor's documented "stopped because a peer failed" code.
constexpr int kPeerFailureExitCode = 75;

// A project whose job `train` is a 2-member CPU gang running `script` (one
// shell line) without a launcher.
std::string MakeShellProject(const TempDir& dir, const std::string& script) {
  const std::string project = dir.Sub("project");
  std::filesystem::create_directories(project);
  WriteFile(project + "/.gitlab-ci.yml",
            absl::StrCat("train:\n"
                         "  parallel: 2\n"
                         "  timeout: 5 minutes\n"
                         "  variables:\n"
                         "    GDT_GPUS_PER_NODE: \"0\"\n"
                         "    GDT_LAUNCHER: none\n"
                         "  script:\n"
                         "    - '",
                         script, "'\n"));
  return project;
}

// Processes whose command line is exactly `argv`.
int CountProcesses(const std::vector<std::string>& argv) {
  std::string wanted;
  for (const std::string& arg : argv) wanted += arg + '\0';
  int count = 0;
  std::error_code ignored;
  for (const auto& entry :
       std::filesystem::directory_iterator("/proc", ignored)) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (ReadFile(entry.path().string() + "/cmdline") == wanted) ++count;
  }
  return count;
}

class GangFailureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartCoordinator().ok()) << cluster_.Logs();
    AgentSpec agent;
    agent.name = "local";
    agent.cpu_slots = 2;
    ASSERT_TRUE(cluster_.StartAgent(agent).ok()) << cluster_.Logs();
    ASSERT_TRUE(cluster_.WaitForHosts(1, seconds(20)).ok()) << cluster_.Logs();
  }

  std::string MemberLog(int index) {
    return ReadFile(
        absl::StrCat(cluster_.run_dir(), "/logs/train-", index, "-2.log"));
  }

  GdtCluster cluster_;
};

TEST_F(GangFailureTest, OneFailingMemberStopsTheWholeGangFast) {
  ASSERT_EQ(CountProcesses({"sleep", "120"}), 0)
      << "a stray `sleep 120` would make this test meaningless";
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
  EXPECT_THAT(log2, HasSubstr("Job failed: exit code 3\n")) << log2;
  EXPECT_THAT(log1, HasSubstr(absl::StrCat("Job failed: exit code ",
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
  EXPECT_TRUE(WaitFor(
      [] {
        return CountProcesses({"sleep", "120"}) == 0;
      },
      seconds(2)))
      << "member 1's `sleep 120` outlived its gang";
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

}  // namespace
}  // namespace gdt::testing
