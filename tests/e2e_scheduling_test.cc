// End to end for the gang scheduler: agents declaring GPUs in their
// configs run in network namespaces (no real GPU: the job scripts only look
// at CUDA_VISIBLE_DEVICES). Two gangs compete for the same GPUs; a gang that
// no host can hold fails at once. Needs root, like e2e_multihost_test.
#include <chrono>
#include <filesystem>
#include <optional>
#include <string>

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

// Jobs of 2 members × 2 GPUs. `first` holds its GPUs until `release` exists
// (bounded: it gives up after 60 s); `second` only reports its GPUs; `huge`
// asks for more GPUs per node than any host has.
std::string MakeProject(const TempDir& dir, const std::string& release) {
  const std::string project = dir.Sub("project");
  std::filesystem::create_directories(project);
  const std::string job_vars =
      "  parallel: 2\n"
      "  timeout: 5 minutes\n"
      "  variables:\n"
      "    GDT_GPUS_PER_NODE: \"2\"\n"
      "    GDT_LAUNCHER: none\n";
  WriteFile(
      project + "/.gitlab-ci.yml",
      absl::StrCat(
          "first:\n", job_vars,
          "  script:\n"
          "    - echo \"gpus=$CUDA_VISIBLE_DEVICES rank=$GDT_NODE_RANK\"\n"
          "    - for i in $(seq 600); do [ -f ",
          release,
          " ] && exit 0; sleep 0.1; done; exit 9\n"
          "second:\n",
          job_vars,
          "  script:\n"
          "    - echo \"gpus=$CUDA_VISIBLE_DEVICES rank=$GDT_NODE_RANK\"\n"
          "huge:\n"
          "  timeout: 5 minutes\n"
          "  variables:\n"
          "    GDT_GPUS_PER_NODE: \"4\"\n"
          "    GDT_LAUNCHER: none\n"
          "  script:\n"
          "    - echo should never run\n"));
  return project;
}

const nlohmann::json* GangOf(const nlohmann::json& status,
                             const std::string& group) {
  for (const auto& gang : status["gangs"]) {
    if (gang.value("group_name", "") == group) return &gang;
  }
  return nullptr;
}

TEST(SchedulingTest, CompetingGangsWaitWithAReasonThenRun) {
  absl::StatusOr<std::unique_ptr<NetworkNamespaces>> hosts =
      NetworkNamespaces::Create(3);
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  GdtCluster cluster(hosts->get(), /*control_host=*/0);
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  for (int i = 1; i <= 2; ++i) {
    ASSERT_TRUE(cluster
                    .StartAgent({.name = "gpu" + std::to_string(i),
                                 .host = i,
                                 .cpu_slots = 2,
                                 .gpus = 2,
                                 .network_interface = "eth0",
                                 .member_uid_pool = MemberAccountsIfRoot()})
                    .ok())
        << cluster.Logs();
  }
  ASSERT_TRUE(cluster.WaitForHosts(2, seconds(20)).ok()) << cluster.Logs();
  const std::string release = cluster.dir().Sub("release-first");
  const std::string project = MakeProject(cluster.dir(), release);

  // A gang that can never fit fails at once, naming the limit.
  const auto started = std::chrono::steady_clock::now();
  CommandResult huge =
      cluster.RunLocal(project, "huge", {"--pipeline-id", "300"}, seconds(60));
  EXPECT_FALSE(huge.status.success()) << huge.output;
  EXPECT_THAT(huge.output,
              HasSubstr("needs 4 GPUs per node but the largest registered "
                        "host has 2"));
  EXPECT_LT(std::chrono::steady_clock::now() - started, seconds(30));

  SpawnOptions first_options;
  first_options.argv =
      cluster.RunLocalArgv(project, "first", {"--pipeline-id", "100"});
  first_options.env = CurrentEnvironment();
  first_options.die_with_parent = true;
  absl::StatusOr<std::unique_ptr<Subprocess>> first =
      Subprocess::Spawn(first_options);
  ASSERT_TRUE(first.ok()) << first.status();
  nlohmann::json last;
  ASSERT_TRUE(cluster.WaitForStatus(
      [&](const nlohmann::json& status) {
        const nlohmann::json* gang = GangOf(status, "first");
        return gang != nullptr && gang->value("state", "") == "running";
      },
      seconds(60), &last))
      << last.dump() << cluster.Logs();

  SpawnOptions second_options = first_options;
  second_options.argv =
      cluster.RunLocalArgv(project, "second", {"--pipeline-id", "200"});
  absl::StatusOr<std::unique_ptr<Subprocess>> second =
      Subprocess::Spawn(second_options);
  ASSERT_TRUE(second.ok()) << second.status();
  // Status shows the running gang's placement and leases, and why the
  // second one waits.
  nlohmann::json during;
  ASSERT_TRUE(cluster.WaitForStatus(
      [&](const nlohmann::json& status) {
        during = status;
        const nlohmann::json* gang = GangOf(during, "second");
        return gang != nullptr && gang->value("state", "") == "forming" &&
               gang->value("reason", "").find("GPUs held by gang") !=
                   std::string::npos;
      },
      seconds(60)))
      << during.dump(2) << cluster.Logs();
  const nlohmann::json* running = GangOf(during, "first");
  ASSERT_NE(running, nullptr);
  const std::string first_id = running->value("gang_id", "");
  EXPECT_THAT(GangOf(during, "second")->value("reason", ""),
              HasSubstr(absl::StrCat("waiting for 2 × 2 free GPUs on up hosts "
                                     "(room for 0; GPUs held by gang ",
                                     first_id, ")")));
  for (const auto& member : (*running)["members"]) {
    EXPECT_EQ(member["gpus"], nlohmann::json::array({0, 1})) << member.dump();
  }
  for (const auto& host : during["hosts"]) {
    EXPECT_EQ(host["leased_gpus"], nlohmann::json::array({0, 1}))
        << host.dump();
  }

  WriteFile(release, "go\n");
  std::string output;
  auto collect = [&output](OutputSource, std::string_view chunk) {
    output += chunk;
  };
  const auto deadline = std::chrono::steady_clock::now() + seconds(120);
  std::optional<ExitStatus> first_exit = (*first)->WaitUntil(deadline, collect);
  std::optional<ExitStatus> second_exit =
      (*second)->WaitUntil(deadline, collect);
  ASSERT_TRUE(first_exit.has_value() && second_exit.has_value())
      << output << cluster.Logs();
  EXPECT_TRUE(first_exit->success()) << output << cluster.Logs();
  EXPECT_TRUE(second_exit->success()) << output << cluster.Logs();

  // Each member of the second gang logged what it waited for, then ran on
  // the GPUs the first one had.
  for (int i = 1; i <= 2; ++i) {
    const std::string log = ReadFile(cluster.run_dir() + "/logs/second-" +
                                     std::to_string(i) + "-2.log");
    EXPECT_THAT(log, HasSubstr("GPUs held by gang " + first_id)) << log;
    EXPECT_THAT(log, HasSubstr("gpus=0,1")) << log;
    EXPECT_LT(log.find("GPUs held by gang"), log.find("admitted: member"))
        << log;
  }
  ExpectLeasesReleased(cluster);
}

}  // namespace
}  // namespace gdt::test
