// End to end: an elastic gang (`nodes: "1..2"` in a parallel:distributed
// block, expanded by gdt-ci run-local) under real torchrun. On a host set
// with room for one member it starts with one (the other job says it is not
// needed at this size and succeeds) and checkpoints; its retry, with room
// for two, grows to two members from that checkpoint and finishes.
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gitlab/fake_gitlab_api.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/cluster.h"
#include "tests/e2e_util.h"

namespace gdt::test {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;
using ::testing::HasSubstr;
using ::testing::Not;

// 12 steps, a checkpoint every 4 (to the package registry: above the
// threshold); the first run stops after step 6 (DDP_STOP_AFTER from the
// command line), the retry resumes through the coordinator's records.
constexpr char kElasticFile[] = R"yaml(stages: [train]
train:
  stage: train
  parallel:
    distributed:
      nodes: "1..2"
      gpus_per_node: 0
      launcher: torchrun
  variables:
    DDP_STEPS: "12"
    DDP_CKPT_EVERY: "4"
    DDP_LOG_STEPS: "1"
    GDT_CHECKPOINT_THRESHOLD: "1024"
  script:
    - eval "export $(gdt-ckpt resume)"
    - torchrun examples/ddp/train.py
  artifacts:
    paths: [checkpoints/, out/]
    when: always
)yaml";

nlohmann::json RankReport(const std::string& run_dir, int64_t job_id,
                          int rank) {
  std::ifstream in(absl::StrCat(run_dir, "/artifacts/", job_id, "/out/rank-",
                                rank, ".json"));
  return nlohmann::json::parse(in, nullptr, false);
}

class ElasticE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The agents (and so the jobs) find gdt-ckpt on their PATH.
    const char* path = getenv("PATH");
    saved_path_ = path != nullptr ? path : "/usr/bin:/bin";
    setenv("PATH",
           (fs::path(GDT_CKPT_BIN).parent_path().string() + ":" + saved_path_)
               .c_str(),
           1);
    ASSERT_TRUE(cluster_.StartCoordinator().ok()) << cluster_.Logs();
    // Room for one member.
    ASSERT_TRUE(cluster_.StartAgent({.name = "local", .cpu_slots = 1}).ok())
        << cluster_.Logs();
    ASSERT_TRUE(cluster_.WaitForHosts(1, seconds(20)).ok()) << cluster_.Logs();
  }
  void TearDown() override { setenv("PATH", saved_path_.c_str(), 1); }

  std::string saved_path_;
  GdtCluster cluster_;
};

TEST_F(ElasticE2eTest, StartsWithOneMemberAndGrowsToTwoOnItsRetry) {
  const std::string project =
      MakeDdpExampleProject(cluster_.dir(), kElasticFile);
  auto api = gitlab::FakeGitLabApi::Start({});
  ASSERT_TRUE(api.ok()) << api.status();
  for (int64_t id : {6161001, 6161002, 6161501, 6161502}) {
    (*api)->AddJob({.id = id, .token = absl::StrCat("glcbt-local-", id)});
  }
  const std::string api_var = "CI_API_V4_URL=" + (*api)->api_url();
  const std::string log1 = cluster_.run_dir() + "/logs/train-1-2.log";
  const std::string log2 = cluster_.run_dir() + "/logs/train-2-2.log";

  // Room for one: the gang runs with member 1, member 2 is not needed.
  const CommandResult small = cluster_.RunLocal(
      project, "train",
      {"--pipeline-id", "6161", "--var", api_var, "--var", "DDP_STOP_AFTER=6"},
      seconds(180));
  ASSERT_TRUE(small.status.success()) << small.output << cluster_.Logs();
  const std::string member1 = ReadFile(log1);
  const std::string member2 = ReadFile(log2);
  EXPECT_THAT(member1, HasSubstr("is node rank 0 of 1"));
  EXPECT_THAT(member1, HasSubstr("checkpoint at step 4 in"));
  EXPECT_THAT(member1, HasSubstr("trained 6 steps"));
  EXPECT_THAT(member2, HasSubstr("gdt: not needed at this size (gang runs "
                                 "with 1 of 2 members); nothing to run, the "
                                 "job succeeds"));
  EXPECT_THAT(member2, Not(HasSubstr("torchrun")));
  const nlohmann::json alone = RankReport(cluster_.run_dir(), 6161001, 0);
  ASSERT_TRUE(alone.is_object()) << small.output;
  EXPECT_EQ(alone["world_size"], 1);
  EXPECT_EQ(alone["steps"], 6);
  {
    absl::StatusOr<nlohmann::json> status = cluster_.Status();
    ASSERT_TRUE(status.ok()) << status.status();
    bool seen = false;
    for (const auto& gang : (*status)["gangs"]) {
      if (gang.value("gang_id", "") != "train-p1-pl6161-n2") continue;
      seen = true;
      EXPECT_EQ(gang.value("nodes_min", 0), 1) << gang.dump();
      EXPECT_EQ(gang["members"].size(), 1u) << gang.dump();
    }
    EXPECT_TRUE(seen) << status->dump();
  }

  // Room for two: the retry (new job ids, the gang's next epoch) starts
  // whole and resumes from the checkpoint of the one-member run.
  ASSERT_TRUE(cluster_.StartAgent({.name = "local-2", .cpu_slots = 1}).ok())
      << cluster_.Logs();
  ASSERT_TRUE(cluster_.WaitForHosts(2, seconds(20)).ok()) << cluster_.Logs();
  const CommandResult grown = cluster_.RunLocal(
      project, "train",
      {"--pipeline-id", "6161", "--first-job-id", "6161500", "--var", api_var},
      seconds(180));
  ASSERT_TRUE(grown.status.success()) << grown.output << cluster_.Logs();
  for (const std::string& log : {ReadFile(log1), ReadFile(log2)}) {
    EXPECT_THAT(log, HasSubstr("of 2 on host")) << log;
    EXPECT_THAT(log, HasSubstr("gdt-ckpt resume: resuming from step 4 (job "
                               "6161001, packages)"))
        << log;
    EXPECT_THAT(log, Not(HasSubstr("not needed")));
  }
  EXPECT_THAT(ReadFile(log1),
              HasSubstr("resumed at world size 2 from a checkpoint of world "
                        "size 1"));
  const nlohmann::json rank0 = RankReport(cluster_.run_dir(), 6161501, 0);
  const nlohmann::json rank1 = RankReport(cluster_.run_dir(), 6161502, 1);
  ASSERT_TRUE(rank0.is_object() && rank1.is_object()) << grown.output;
  for (const nlohmann::json& report : {rank0, rank1}) {
    EXPECT_EQ(report["world_size"], 2) << report.dump();
    EXPECT_EQ(report["steps"], 12) << report.dump();
    EXPECT_EQ(report["params_identical"], true) << report.dump();
    EXPECT_TRUE(report["loss"].is_number()) << report.dump();
  }
  EXPECT_EQ(rank0["param_sha256"], rank1["param_sha256"]);
  ExpectLeasesReleased(cluster_);
}

}  // namespace
}  // namespace gdt::test
