// End to end: a 2-member gang with a short CI_JOB_TIMEOUT under
// gdt-ci run-local. `gdt-ckpt run` gives the training its checkpoint notice
// GDT_CHECKPOINT_NOTICE seconds before the deadline (SIGUSR1 to torchrun's
// workers only: its agent would die of it); examples/ddp
// checkpoints and stops, and the checkpoint (with its manifest) is in the
// job's artifacts. A later job resumes from it; a gang with a killed member
// is retried (new job ids, epoch 2) and resumes through the coordinator's
// manifest records and the (fake) GitLab API.
#include <signal.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/cluster.h"
#include "testing/fake_gitlab_jobs.h"
#include "tests/e2e_util.h"

namespace gdt::test {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;
using ::testing::HasSubstr;
using ::testing::Not;

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
    GDT_CHECKPOINT_SIGNAL: USR1
    GDT_CHECKPOINT_SIGNAL_TO: workers
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
  const std::string project = MakeDdpExampleProject(cluster_.dir(), kCiFile);

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
  const std::string project =
      MakeDdpExampleProject(cluster_.dir(), kPipelineFile);

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

// `train` checkpoints every 4 steps (rank 0 = member 1) and resumes through
// `gdt-ckpt resume` without arguments (the coordinator's records of the
// gang); its checkpoints (~5 KB) are above GDT_CHECKPOINT_THRESHOLD, which
// stands in for an artifact limit, so they go to the package registry.
// `train-full` runs the same 12 steps uninterrupted.
constexpr char kRetryFile[] = R"yaml(stages: [train]
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
    DDP_LOG_STEPS: "1"
    DDP_STEP_SECONDS: "0.5"
    GDT_CHECKPOINT_THRESHOLD: "1024"
  script:
    - eval "export $(gdt-ckpt resume)"
    - torchrun examples/ddp/train.py
  artifacts:
    paths: [checkpoints/, out/]
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
  script:
    - torchrun examples/ddp/train.py
  artifacts:
    paths: [out/]
)yaml";

// rank-0.json in the artifacts run-local kept for `job_id`.
nlohmann::json JobReport(const std::string& run_dir, int64_t job_id) {
  std::ifstream in(
      absl::StrCat(run_dir, "/artifacts/", job_id, "/out/rank-0.json"));
  return nlohmann::json::parse(in, nullptr, false);
}

TEST_F(CheckpointE2eTest, KilledGangIsRetriedAndResumesFromTheLastCheckpoint) {
  const std::string project = MakeDdpExampleProject(cluster_.dir(), kRetryFile);
  // The jobs of pipeline 5151 and of its retry.
  std::unique_ptr<gitlab::FakeGitLabApi> api =
      StartFakeGitLab(RunLocalPipelineJobs(5151, 2, 5151500));
  ASSERT_NE(api, nullptr);
  const std::string api_var = "CI_API_V4_URL=" + api->api_url();
  const std::string log1 = cluster_.run_dir() + "/logs/train-1-2.log";
  const std::string log2 = cluster_.run_dir() + "/logs/train-2-2.log";

  // Epoch 1: once rank 0 has recorded its step-4 checkpoint, member 2's
  // trainer is killed; the gang fails.
  std::unique_ptr<Subprocess> first = StartRunLocal(
      cluster_, project, "train", {"--pipeline-id", "5151", "--var", api_var});
  ASSERT_NE(first, nullptr);
  ASSERT_TRUE(WaitFor(
      [&] {
        return ReadFile(log1).find("checkpoint at step 4 in") !=
               std::string::npos;
      },
      seconds(120)))
      << ReadFile(log1) << cluster_.Logs();
  std::vector<int> killed;
  for (const ProcessInfo& p : JobProcesses(cluster_, "CI_NODE_INDEX=2")) {
    // torchrun's workers (LOCAL_RANK set by torchrun), not its agent.
    if (p.environ.find(std::string("\0LOCAL_RANK=", 12)) != std::string::npos &&
        p.cmdline.find("train.py") != std::string::npos) {
      killed.push_back(p.pid);
      kill(p.pid, SIGKILL);
    }
  }
  ASSERT_FALSE(killed.empty()) << DescribeAll(JobProcesses(cluster_));
  const CommandResult failed = FinishRun(*first, seconds(90));
  ASSERT_FALSE(failed.status.success()) << failed.output;
  const std::string epoch1 = ReadFile(log1);
  // The newest checkpoint epoch 1 completed (4, or 8 on a slow machine).
  int64_t last = 0;
  for (int64_t step : {4, 8, 12}) {
    if (epoch1.find(absl::StrCat("checkpoint at step ", step, " in")) !=
        std::string::npos) {
      last = step;
    }
  }
  ASSERT_GE(last, 4) << epoch1;
  ASSERT_LT(last, 12) << "the kill came too late: " << epoch1;

  // The bytes are in the package registry; the fake serves no artifacts,
  // so the retry can resume only from there.
  EXPECT_TRUE(api->PackageFile(1, "gdt-checkpoints",
                               absl::StrCat("job-5151001-rank-0-step-", last),
                               "model.pt")
                  .has_value());

  // Retry: new job ids, epoch 2; neither the script nor gdt-ckpt is told
  // the earlier job ids.
  const CommandResult retry = cluster_.RunLocal(
      project, "train",
      {"--pipeline-id", "5151", "--first-job-id", "5151500", "--var", api_var},
      seconds(150));
  ASSERT_TRUE(retry.status.success()) << retry.output << cluster_.Logs();
  for (const std::string& log : {ReadFile(log1), ReadFile(log2)}) {
    EXPECT_THAT(log,
                HasSubstr(absl::StrCat("gdt-ckpt resume: resuming from step ",
                                       last, " (job 5151001, packages)")))
        << log;
    EXPECT_THAT(log, HasSubstr(absl::StrCat("resumed from step ", last, " (")));
    // Step continuity: the first step of epoch 2 is the one after the
    // checkpoint, and no earlier step runs again.
    EXPECT_THAT(log, HasSubstr(absl::StrCat("step ", last + 1, " done")));
    EXPECT_THAT(log, Not(HasSubstr(absl::StrCat(" step ", last, " done"))));
    EXPECT_THAT(log, HasSubstr("trained 12 steps"));
  }

  const CommandResult full = cluster_.RunLocal(
      project, "train-full", {"--pipeline-id", "5252"}, seconds(120));
  ASSERT_TRUE(full.status.success()) << full.output << cluster_.Logs();
  const nlohmann::json resumed = JobReport(cluster_.run_dir(), 5151501);
  const nlohmann::json uninterrupted = JobReport(cluster_.run_dir(), 5252001);
  ASSERT_TRUE(resumed.is_object() && uninterrupted.is_object())
      << retry.output << full.output;
  EXPECT_EQ(resumed["steps"], 12);
  // Tolerance 0: same seed, data order and reductions give the same bits.
  EXPECT_EQ(resumed["param_sha256"], uninterrupted["param_sha256"]);

  // Epoch 1 stays failed (archived), epoch 2 and train-full are done, and
  // nothing is left holding the host.
  absl::StatusOr<nlohmann::json> status = cluster_.Status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_THAT(GangEpochStates(*status),
              ::testing::ElementsAre(
                  ::testing::Pair("train-full-p1-pl5252-n2 1", "done"),
                  ::testing::Pair("train-p1-pl5151-n2 2", "done"),
                  ::testing::Pair("train-p1-pl5151-n2#1 1", "failed")))
      << status->dump();
  for (const auto& host : (*status)["hosts"]) {
    EXPECT_TRUE(host["leased_gpus"].empty()) << host.dump();
    EXPECT_EQ(host.value("members_running", -1), 0) << host.dump();
  }
  EXPECT_TRUE(JobProcesses(cluster_).empty())
      << DescribeAll(JobProcesses(cluster_));
}

// The shared notice: member 1's own notice comes ~2 s in, member 2's not
// before 55 s; member 2 gets it through the gang's key-value store within
// about a second of member 1. Each member's command only waits for its
// flag file (10 s at most), so member 2 can succeed only by hearing.
constexpr char kSharedNoticeFile[] = R"yaml(train:
  tags: [gdt]
  parallel: 2
  timeout: 1 minute
  variables:
    GDT_GPUS_PER_NODE: "0"
    GDT_LAUNCHER: none
    GDT_CHECKPOINT_SIGNAL: none
  script:
    - if [ "$CI_NODE_INDEX" = 1 ]; then export GDT_CHECKPOINT_NOTICE=58; else export GDT_CHECKPOINT_NOTICE=5; fi
    - gdt-ckpt run -- bash -c 'for i in $(seq 1 100); do test -f "$GDT_CHECKPOINT_NOTICE_FILE" && exit 0; sleep 0.1; done; echo no notice; exit 3'
)yaml";

TEST_F(CheckpointE2eTest, FirstMembersNoticeReachesTheWholeGang) {
  const std::string project = cluster_.dir().Sub("project");
  fs::create_directories(project);
  std::ofstream(project + "/.gitlab-ci.yml") << kSharedNoticeFile;

  const CommandResult run =
      cluster_.RunLocal(project, "train", {}, seconds(60));

  ASSERT_TRUE(run.status.success()) << run.output << cluster_.Logs();
  const std::string log1 = ReadFile(cluster_.run_dir() + "/logs/train-1-2.log");
  const std::string log2 = ReadFile(cluster_.run_dir() + "/logs/train-2-2.log");
  EXPECT_THAT(log1, HasSubstr("gdt-ckpt run: checkpoint notice: the job "
                              "times out in"));
  EXPECT_THAT(log2, HasSubstr("gdt-ckpt run: checkpoint notice (announced by "
                              "another member of the gang): the job times "
                              "out in"));
  ExpectLeasesReleased(cluster_);
}

}  // namespace
}  // namespace gdt::test
