// End to end: a two-member job with GDT_LAUNCHER: nccl through gdt-ci
// run-local, gdt-executor, gdt-coord and gdt-agent on loopback. Its script
// uses gdt-kv (a counter and a wait make a barrier, a CAS elects a leader)
// and, when NCCL was found, exchanges a real ncclGetUniqueId through the
// store with the job's own environment.
#include <filesystem>
#include <regex>
#include <set>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/cluster.h"

namespace gdt::test {
namespace {

using std::chrono::seconds;
using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;

TEST(EndToEndKvTest, MembersShareTheGangStoreThroughTheirEnvironment) {
  GdtCluster cluster;
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.StartAgent({.name = "local", .cpu_slots = 2}).ok())
      << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForHosts(1, seconds(20)).ok()) << cluster.Logs();
  const std::string project = cluster.dir().Sub("project");
  const std::string tokens = cluster.dir().Sub("tokens");
  fs::create_directories(project);
  fs::create_directories(tokens);
  const std::string kv = GDT_KV_BIN;
  std::string script = absl::StrCat(
      "    - printf %s \"$GDT_KV_TOKEN\" > ", tokens, "/$GDT_NODE_RANK\n",
      "    - ", kv, " cas --absent leader \"$GDT_NODE_RANK\" || true\n",
      "    - n=$(", kv, " add arrived 1)\n",
      "    - if [ \"$n\" = \"$GDT_NUM_NODES\" ]; then ", kv,
      " set all-here yes; fi\n", "    - ", kv, " wait all-here --timeout 60\n",
      "    - echo \"kv barrier passed, leader $(", kv,
      " get leader), local rank $GDT_LOCAL_RANK\"\n");
#ifdef GDT_NCCL_ID_TOOL
  absl::StrAppend(&script, "    - echo \"nccl ids $(NCCL_SOCKET_IFNAME=lo ",
                  GDT_NCCL_ID_TOOL, ")\"\n");
#endif
  WriteFile(project + "/.gitlab-ci.yml", absl::StrCat("kv:\n"
                                                      "  parallel: 2\n"
                                                      "  timeout: 5 minutes\n"
                                                      "  variables:\n"
                                                      "    GDT_LAUNCHER: nccl\n"
                                                      "  script:\n",
                                                      script));

  CommandResult run = cluster.RunLocal(project, "kv", {}, seconds(120));

  ASSERT_TRUE(run.status.success()) << run.output << cluster.Logs();
  std::vector<std::string> logs;
  for (const auto& entry :
       fs::directory_iterator(cluster.run_dir() + "/logs")) {
    logs.push_back(ReadFile(entry.path().string()));
  }
  ASSERT_EQ(logs.size(), 2u);
  static const std::regex kBarrier(
      R"(kv barrier passed, leader ([01]), local rank 0)");
  std::set<std::string> leaders;
  for (const std::string& log : logs) {
    std::smatch match;
    ASSERT_TRUE(std::regex_search(log, match, kBarrier)) << log;
    leaders.insert(match[1]);
  }
  EXPECT_EQ(leaders.size(), 1u) << "both members must see the same leader";
#ifdef GDT_NCCL_ID_TOOL
  static const std::regex kIds(R"(nccl ids ([0-9a-f]{256})\b)");
  std::set<std::string> ids;
  for (const std::string& log : logs) {
    std::smatch match;
    ASSERT_TRUE(std::regex_search(log, match, kIds)) << log;
    ids.insert(match[1]);
  }
  EXPECT_EQ(ids.size(), 1u) << "both members must hold rank 0's id";
#endif

  // Both members got the same 64-hex-digit token, and it is in no log.
  const std::string token = ReadFile(tokens + "/0");
  EXPECT_EQ(token.size(), 64u);
  EXPECT_EQ(ReadFile(tokens + "/1"), token);
  EXPECT_THAT(run.output, Not(HasSubstr(token)));
  EXPECT_THAT(cluster.Logs(), Not(HasSubstr(token)));
  for (const std::string& log : logs) EXPECT_THAT(log, Not(HasSubstr(token)));
}

}  // namespace
}  // namespace gdt::test
