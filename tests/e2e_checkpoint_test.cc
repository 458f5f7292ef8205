// End to end (issue 5): a 2-member gang with a short CI_JOB_TIMEOUT under
// gdt-ci run-local. `gdt-ckpt run` gives the training its checkpoint notice
// GDT_CHECKPOINT_NOTICE seconds before the deadline; examples/ddp
// checkpoints and stops, and the checkpoint (with its manifest) is in the
// job's artifacts.
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/e2e_util.h"
#include "tests/support/cluster.h"

namespace gdt::testing {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;
using ::testing::HasSubstr;

constexpr char kCiFile[] = R"(stages: [train]
train:
  stage: train
  tags: [gdt]
  parallel: 2
  timeout: 1 minute
  variables:
    GDT_GPUS_PER_NODE: "0"
    GDT_NPROC_PER_NODE: "1"
    GDT_LAUNCHER: torchrun
    DDP_STEPS: "100000"
    DDP_STEP_SECONDS: "0.05"
    GDT_CHECKPOINT_NOTICE: "50"
    GDT_CHECKPOINT_SIGNAL: none
  script:
    - gdt-ckpt run -- torchrun examples/ddp/train.py
  artifacts:
    paths: [checkpoints/]
    when: always
)";

// train is cut off after step 6 (checkpoints every 4 steps, in its
// artifacts); resume needs it and continues from step 4 to 12; train-full
// runs the 12 steps uninterrupted.
constexpr char kPipelineFile[] = R"yaml(stages: [train, resume]
train:
  stage: train
  tags: [gdt]
  parallel: 2
  variables:
    GDT_GPUS_PER_NODE: "0"
    GDT_NPROC_PER_NODE: "1"
    GDT_LAUNCHER: torchrun
    DDP_STEPS: "12"
    DDP_CKPT_EVERY: "4"
    DDP_STOP_AFTER: "6"
    DDP_OUT_DIR: out-cut
  script:
    - torchrun examples/ddp/train.py
  artifacts:
    paths: [checkpoints/, out-cut/]
    when: always
train-full:
  stage: train
  tags: [gdt]
  parallel: 2
  variables:
    GDT_GPUS_PER_NODE: "0"
    GDT_NPROC_PER_NODE: "1"
    GDT_LAUNCHER: torchrun
    DDP_STEPS: "12"
    DDP_OUT_DIR: out-full
  script:
    - torchrun examples/ddp/train.py
  artifacts:
    paths: [out-full/]
resume:
  stage: resume
  needs: [train]
  tags: [gdt]
  parallel: 2
  variables:
    GDT_GPUS_PER_NODE: "0"
    GDT_NPROC_PER_NODE: "1"
    GDT_LAUNCHER: torchrun
    DDP_STEPS: "12"
    DDP_OUT_DIR: out-resumed
  script:
    - eval "export $(gdt-ckpt resume --manifest checkpoints/*/manifest.json)"
    - echo "resuming from [$GDT_RESUME_FROM]"
    - torchrun examples/ddp/train.py
  artifacts:
    paths: [out-resumed/]
)yaml";

class CheckpointE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The agent (and so the job) finds gdt-ckpt on its PATH.
    const char* path = getenv("PATH");
    saved_path_ = path != nullptr ? path : "/usr/bin:/bin";
    setenv("PATH",
           (fs::path(GDT_CKPT_BIN).parent_path().string() + ":" + saved_path_)
               .c_str(),
           1);
    ASSERT_TRUE(cluster_.StartCoordinator().ok()) << cluster_.Logs();
    ASSERT_TRUE(cluster_.StartAgent({.name = "local", .cpu_slots = 2}).ok())
        << cluster_.Logs();
    ASSERT_TRUE(cluster_.WaitForHosts(1, seconds(20)).ok()) << cluster_.Logs();
  }
  void TearDown() override { setenv("PATH", saved_path_.c_str(), 1); }

  std::string saved_path_;
  GdtCluster cluster_;
};

TEST_F(CheckpointE2eTest, NoticeBeforeTimeoutPutsACheckpointInTheArtifacts) {
  const std::string project = cluster_.dir().Sub("project");
  fs::create_directories(project + "/examples");
  fs::copy(SourceDir() + "/examples/ddp", project + "/examples/ddp",
           fs::copy_options::recursive);
  std::ofstream(project + "/.gitlab-ci.yml") << kCiFile;

  const auto start = std::chrono::steady_clock::now();
  const CommandResult run =
      cluster_.RunLocal(project, "train", {}, seconds(120));
  const auto elapsed = std::chrono::steady_clock::now() - start;

  ASSERT_TRUE(run.status.success()) << run.output << cluster_.Logs();
  EXPECT_THAT(
      run.output,
      HasSubstr("gdt-ckpt run: checkpoint notice: the job times out in"));
  EXPECT_THAT(run.output, HasSubstr("checkpoint notice: stopping after step"));
  // Well before the 60 s deadline: the notice came ~10 s in.
  EXPECT_LT(elapsed, seconds(60));

  std::vector<fs::path> manifests;
  std::error_code ignored;
  for (const auto& entry : fs::recursive_directory_iterator(
           cluster_.run_dir() + "/artifacts", ignored)) {
    if (entry.path().filename() == "manifest.json") {
      manifests.push_back(entry.path());
    }
  }
  ASSERT_EQ(manifests.size(), 1u) << run.output;
  std::ifstream in(manifests[0]);
  const auto manifest = nlohmann::json::parse(in, nullptr, false);
  ASSERT_TRUE(manifest.is_object());
  EXPECT_GE(manifest["step"].get<int>(), 1);
  EXPECT_EQ(manifest["world_size"], 2);
  EXPECT_EQ(manifest["store"], "artifacts");
  ASSERT_EQ(manifest["files"].size(), 1u);
  EXPECT_EQ(manifest["files"][0]["path"], "model.pt");
  EXPECT_TRUE(fs::exists(manifests[0].parent_path() / "model.pt"));
  ExpectLeasesReleased(cluster_);
}

// The final parameters of rank 0 in the artifact directory `dir`.
nlohmann::json Report(const std::string& run_dir, const std::string& dir) {
  std::error_code ignored;
  for (const auto& entry :
       fs::recursive_directory_iterator(run_dir + "/artifacts", ignored)) {
    if (entry.path().filename() == "rank-0.json" &&
        entry.path().parent_path().filename() == dir) {
      std::ifstream in(entry.path());
      return nlohmann::json::parse(in, nullptr, false);
    }
  }
  return nullptr;
}

TEST_F(CheckpointE2eTest, LaterJobResumesToTheUninterruptedParameters) {
  const std::string project = cluster_.dir().Sub("project");
  fs::create_directories(project + "/examples");
  fs::copy(SourceDir() + "/examples/ddp", project + "/examples/ddp",
           fs::copy_options::recursive);
  std::ofstream(project + "/.gitlab-ci.yml") << kPipelineFile;

  const CommandResult run = cluster_.RunLocal(
      project, "train", {"--job", "train-full", "--job", "resume"},
      seconds(240));

  ASSERT_TRUE(run.status.success()) << run.output << cluster_.Logs();
  EXPECT_THAT(run.output, HasSubstr("resumed from step 4"));
  const nlohmann::json cut = Report(cluster_.run_dir(), "out-cut");
  const nlohmann::json full = Report(cluster_.run_dir(), "out-full");
  const nlohmann::json resumed = Report(cluster_.run_dir(), "out-resumed");
  ASSERT_TRUE(cut.is_object() && full.is_object() && resumed.is_object())
      << run.output;
  EXPECT_EQ(cut["steps"], 6);
  EXPECT_EQ(resumed["steps"], 12);
  // Tolerance 0: same seed, data order and reductions give the same bits.
  EXPECT_EQ(resumed["param_sha256"], full["param_sha256"]);
  EXPECT_NE(cut["param_sha256"], full["param_sha256"]);
  ExpectLeasesReleased(cluster_);
}

}  // namespace
}  // namespace gdt::testing
