// End to end: the hang watchdog. A member whose training stops touching
// $GDT_PROGRESS_FILE for GDT_HANG_TIMEOUT seconds fails its gang as hung;
// every member collects evidence into its artifacts before it is stopped.
#include <chrono>
#include <filesystem>
#include <regex>
#include <string>

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

constexpr int kPeerFailureExitCode = 75;

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
      R"(gdt: (gang \S+ failed: member 2/2 \(job \d+ on host local\) hung: no progress for 3 s \(GDT_HANG_TIMEOUT\) at \d\d:\d\d:\d\d UTC; stopping)\n)");
  std::smatch match;
  ASSERT_TRUE(std::regex_search(log2, match, kRootCause)) << log2;
  EXPECT_THAT(log1, HasSubstr(absl::StrCat("gdt: ", match[1].str(), "\n")))
      << log1;
  EXPECT_THAT(log1, HasSubstr(absl::StrCat("Job failed: exit code ",
                                           kPeerFailureExitCode, "\n")))
      << log1;
  EXPECT_THAT(log2, Not(HasSubstr(absl::StrCat("Job failed: exit code ",
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

}  // namespace
}  // namespace gdt::test
