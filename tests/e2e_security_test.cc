// End to end (issue 8): an operator issues a host token with the admin
// token; the agent registers with it; a real run-local job then runs on
// that agent, which accepts only the member tokens the coordinator issued
// (the executor carries them from prepare to run and cleanup). gdt-ci
// run-local → gdt-executor → gdt-coord → gdt-agent on loopback.
#include <chrono>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/cluster.h"

namespace gdt::testing {
namespace {

using std::chrono::seconds;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(SecurityE2eTest, TokenProtectedAgentRunsTheAdmittedMembersJob) {
  GdtCluster cluster;
  const std::string admin = cluster.dir().Sub("admin.token");
  WriteFile(admin, "e2e-admin-secret\n");
  cluster.SetCoordinatorExtraConfig(absl::StrCat(
      "admin_token_file: ", admin, "\nrequire_host_tokens: true\n"));
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  const std::string gdt_coord = BinaryPath("gdt-coord");
  const std::string endpoint = cluster.coordinator_endpoint();

  // Without the admin token the operator gets one line and exit code 1.
  CommandResult refused = RunProcess({gdt_coord, "hosts", "token", "create",
                                      "local", "--coordinator", endpoint},
                                     {}, seconds(20));
  EXPECT_EQ(refused.status.code(), 1) << refused.output;
  EXPECT_EQ(refused.output,
            "gdt-coord: creating a host token needs the coordinator's admin "
            "token: pass --admin-token-file or set GDT_ADMIN_TOKEN_FILE\n");

  CommandResult created =
      RunProcess({gdt_coord, "hosts", "token", "create", "local",
                  "--coordinator", endpoint},
                 {{"GDT_ADMIN_TOKEN_FILE", admin}}, seconds(20));
  ASSERT_TRUE(created.status.success()) << created.output;
  const std::string host_token(absl::StripAsciiWhitespace(created.output));
  ASSERT_EQ(host_token.size(), 64u) << created.output;
  const std::string token_file = cluster.dir().Sub("host.token");
  WriteFile(token_file, created.output);

  AgentSpec agent;
  agent.name = "local";
  agent.cpu_slots = 2;
  agent.host_token_file = token_file;
  ASSERT_TRUE(cluster.StartAgent(agent).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForHosts(1, seconds(20)).ok()) << cluster.Logs();

  const std::string project = cluster.dir().Sub("project");
  std::filesystem::create_directories(project);
  WriteFile(project + "/.gitlab-ci.yml",
            "train:\n"
            "  parallel: 2\n"
            "  timeout: 5 minutes\n"
            "  variables:\n"
            "    GDT_GPUS_PER_NODE: \"0\"\n"
            "    GDT_LAUNCHER: none\n"
            "  script:\n"
            "    - 'echo member $CI_NODE_INDEX ran'\n");
  CommandResult run = cluster.RunLocal(project, "train", {}, seconds(90));
  ASSERT_TRUE(run.status.success()) << run.output << cluster.Logs();
  for (int index = 1; index <= 2; ++index) {
    const std::string log = ReadFile(
        absl::StrCat(cluster.run_dir(), "/logs/train-", index, "-2.log"));
    EXPECT_THAT(log, HasSubstr(absl::StrCat("member ", index, " ran\n")))
        << log;
    EXPECT_THAT(log, Not(HasSubstr(host_token)));
  }
  EXPECT_THAT(cluster.Logs(), Not(HasSubstr(host_token)));
}

}  // namespace
}  // namespace gdt::testing
