// End to end through gdt-ci run-local with real torchrun: a low-priority
// preemptible DDP gang holds every GPU of the host (GPUs declared in the
// agent's config; the training itself runs on CPU with gloo), a
// high-priority gang arrives, the coordinator gives the low one its
// checkpoint notice, the training checkpoints and the gang is stopped as
// preempted (exit code 76); the high gang starts within the grace plus its
// formation, and the retried low gang resumes from the checkpoint and ends
// with exactly the parameters of an uninterrupted run.
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

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

constexpr int kGraceSeconds = 60;

// `low` (2 members × 1 GPU, preemptible; the test retries it by hand, as
// GitLab would once: GDT_PREEMPT_RETRIES 1) resumes from the coordinator's
// records of its gang and runs under `gdt-ckpt run`, which passes the
// notice on as a flag file (torchrun's agent would die of SIGUSR1);
// train.py checkpoints and stops on it. Its checkpoints (~5 KB) go to the
// package registry (GDT_CHECKPOINT_THRESHOLD). `high` needs both GPUs at
// priority 5. `low-full` is `low` uninterrupted.
constexpr char kCiFile[] = R"yaml(stages: [train]
low:
  stage: train
  tags: [gdt]
  parallel: 2
  timeout: 10 minutes
  variables:
    GDT_GPUS_PER_NODE: "1"
    GDT_NPROC_PER_NODE: "1"
    GDT_LAUNCHER: torchrun
    GDT_PREEMPTIBLE: "1"
    GDT_PREEMPT_RETRIES: "1"
    GDT_CHECKPOINT_SIGNAL: none
    GDT_CHECKPOINT_THRESHOLD: "1024"
    DDP_STEPS: "40"
    DDP_LOG_STEPS: "1"
    DDP_STEP_SECONDS: "0.5"
  script:
    - eval "export $(gdt-ckpt resume)"
    - gdt-ckpt run -- torchrun examples/ddp/train.py
  artifacts:
    paths: [checkpoints/, out/]
    when: always
low-full:
  stage: train
  tags: [gdt]
  parallel: 2
  variables:
    GDT_GPUS_PER_NODE: "1"
    GDT_NPROC_PER_NODE: "1"
    GDT_LAUNCHER: torchrun
    DDP_STEPS: "40"
  script:
    - torchrun examples/ddp/train.py
  artifacts:
    paths: [out/]
high:
  stage: train
  tags: [gdt]
  parallel: 1
  variables:
    GDT_GPUS_PER_NODE: "2"
    GDT_LAUNCHER: none
    GDT_PRIORITY: "5"
  script:
    - echo "high-priority work on GPUs $CUDA_VISIBLE_DEVICES"
)yaml";

// rank-0.json in the artifacts run-local kept for `job_id`.
nlohmann::json JobReport(const std::string& run_dir, int64_t job_id) {
  std::ifstream in(
      absl::StrCat(run_dir, "/artifacts/", job_id, "/out/rank-0.json"));
  return nlohmann::json::parse(in, nullptr, false);
}

class PreemptionE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The agent (and so the job) finds gdt-ckpt on its PATH.
    const char* path = getenv("PATH");
    saved_path_ = path != nullptr ? path : "/usr/bin:/bin";
    setenv("PATH",
           (fs::path(GDT_CKPT_BIN).parent_path().string() + ":" + saved_path_)
               .c_str(),
           1);
    cluster_.SetCoordinatorExtraConfig(absl::StrCat(
        "preemption:\n  enabled: true\n  grace_seconds: ", kGraceSeconds,
        "\n"));
    ASSERT_TRUE(cluster_.StartCoordinator().ok()) << cluster_.Logs();
    ASSERT_TRUE(
        cluster_.StartAgent({.name = "local", .cpu_slots = 2, .gpus = 2}).ok())
        << cluster_.Logs();
    ASSERT_TRUE(cluster_.WaitForHosts(1, seconds(20)).ok()) << cluster_.Logs();
  }
  void TearDown() override { setenv("PATH", saved_path_.c_str(), 1); }

  std::string saved_path_;
  GdtCluster cluster_;
};

TEST_F(PreemptionE2eTest,
       PreemptedGangCheckpointsIsRetriedAndEndsAsAnUninterruptedRun) {
  const std::string project = MakeDdpExampleProject(cluster_.dir(), kCiFile);
  // The jobs of pipeline 6161 and of its retry.
  std::unique_ptr<gitlab::FakeGitLabApi> api =
      StartFakeGitLab(RunLocalPipelineJobs(6161, 2, 6161500));
  ASSERT_NE(api, nullptr);
  const std::string api_var = "CI_API_V4_URL=" + api->api_url();
  const std::string log1 = cluster_.run_dir() + "/logs/low-1-2.log";
  const std::string log2 = cluster_.run_dir() + "/logs/low-2-2.log";
  const std::string high_log = cluster_.run_dir() + "/logs/high-1-1.log";

  // The low gang trains on both GPUs.
  std::unique_ptr<Subprocess> low = StartRunLocal(
      cluster_, project, "low", {"--pipeline-id", "6161", "--var", api_var});
  ASSERT_NE(low, nullptr);
  ASSERT_TRUE(WaitFor(
      [&] { return ReadFile(log1).find("step 3 done") != std::string::npos; },
      seconds(180)))
      << ReadFile(log1) << cluster_.Logs();

  // The high-priority gang arrives: no GPU is free.
  const auto high_started = std::chrono::steady_clock::now();
  std::unique_ptr<Subprocess> high =
      StartRunLocal(cluster_, project, "high", {"--pipeline-id", "6262"});
  ASSERT_NE(high, nullptr);

  const CommandResult preempted = FinishRun(*low, seconds(120));
  EXPECT_FALSE(preempted.status.success()) << preempted.output;
  const CommandResult high_done = FinishRun(*high, seconds(120));
  ASSERT_TRUE(high_done.status.success())
      << high_done.output << cluster_.Logs();
  EXPECT_THAT(ReadFile(high_log), HasSubstr("high-priority work on GPUs 0,1"));
  // run-local ended well within the grace plus formation time after the
  // high gang's jobs were picked up (it includes the job itself).
  EXPECT_LT(std::chrono::steady_clock::now() - high_started,
            seconds(kGraceSeconds + 30));

  // Both members heard the notice, rank 0 checkpointed, and both logs say
  // who preempted the gang and why; both jobs end with the preemption code.
  const std::string epoch1 = ReadFile(log1);
  int64_t saved = 0;
  for (int64_t step = 1; step < 40; ++step) {
    if (epoch1.find(absl::StrCat("checkpoint at step ", step, " in")) !=
        std::string::npos) {
      saved = step;
    }
  }
  ASSERT_GE(saved, 3) << epoch1;
  for (const std::string& log : {epoch1, ReadFile(log2)}) {
    EXPECT_THAT(log, HasSubstr("gdt-ckpt run: checkpoint notice (preempted "
                               "by the coordinator for gang high-p1-pl6262-n1 "
                               "(priority 5)): the gang stops in "))
        << log;
    EXPECT_THAT(log, HasSubstr("gdt: gang low-p1-pl6161-n2 failed: preempted "
                               "by gang high-p1-pl6262-n1 (priority 5) after "
                               "checkpoint at "))
        << log;
    EXPECT_THAT(log, HasSubstr("GPU-hours (preemption 1 of at most 3)"));
    EXPECT_THAT(log, Not(HasSubstr("trained 40 steps")));
  }
  EXPECT_THAT(preempted.output, HasSubstr("Job failed: exit status 76"))
      << preempted.output;

  absl::StatusOr<nlohmann::json> status = cluster_.Status();
  ASSERT_TRUE(status.ok()) << status.status();
  bool counted = false;
  for (const auto& gang : (*status)["gangs"]) {
    if (gang.value("gang_id", "") == "low-p1-pl6161-n2") {
      counted = gang.value("preemptions", 0) == 1 &&
                gang.value("preempted_by", "") == "high-p1-pl6262-n1";
    }
  }
  EXPECT_TRUE(counted) << status->dump(2);

  // The retry (new job ids, epoch 2) resumes from that checkpoint.
  const CommandResult retry = cluster_.RunLocal(
      project, "low",
      {"--pipeline-id", "6161", "--first-job-id", "6161500", "--var", api_var},
      seconds(180));
  ASSERT_TRUE(retry.status.success()) << retry.output << cluster_.Logs();
  for (const std::string& log : {ReadFile(log1), ReadFile(log2)}) {
    EXPECT_THAT(log, HasSubstr(absl::StrCat("resumed from step ", saved, " (")))
        << log;
    EXPECT_THAT(log, HasSubstr("trained 40 steps"));
  }

  const CommandResult full = cluster_.RunLocal(
      project, "low-full", {"--pipeline-id", "6363"}, seconds(180));
  ASSERT_TRUE(full.status.success()) << full.output << cluster_.Logs();
  const nlohmann::json resumed = JobReport(cluster_.run_dir(), 6161501);
  const nlohmann::json uninterrupted = JobReport(cluster_.run_dir(), 6363001);
  ASSERT_TRUE(resumed.is_object() && uninterrupted.is_object())
      << retry.output << full.output;
  EXPECT_EQ(resumed["steps"], 40);
  // Tolerance 0: same seed, data order and reductions give the same bits.
  EXPECT_EQ(resumed["param_sha256"], uninterrupted["param_sha256"]);

  // The preempted epoch stays failed (archived), everything else is done,
  // and nothing holds the host any more.
  status = cluster_.Status();
  ASSERT_TRUE(status.ok()) << status.status();
  for (const auto& host : (*status)["hosts"]) {
    EXPECT_TRUE(host["leased_gpus"].empty()) << host.dump();
    EXPECT_EQ(host.value("members_running", -1), 0) << host.dump();
  }
  EXPECT_THAT(GangEpochStates(*status),
              ::testing::ElementsAre(
                  ::testing::Pair("high-p1-pl6262-n1 1", "done"),
                  ::testing::Pair("low-full-p1-pl6363-n2 1", "done"),
                  ::testing::Pair("low-p1-pl6161-n2 2", "done"),
                  ::testing::Pair("low-p1-pl6161-n2#1 1", "failed")));
}

// Two gangs on one host with 2 GPUs: `low` is preemptible and holds both
// GPUs until the test creates $RELEASE, never listening for the checkpoint
// notice (no gdt-ckpt run); `high` outranks it and needs both GPUs.
// `low_keys` are more keys of `low`.
std::string HoldAndOutrankCiFile(const std::string& low_keys) {
  return absl::StrCat(R"yaml(stages: [train]
low:
  stage: train
)yaml",
                      low_keys, R"yaml(  timeout: 10 minutes
  parallel:
    distributed: {nodes: 1, gpus_per_node: 2, launcher: none, preemptible: true}
  script:
    - until [ -e "$RELEASE" ]; do sleep 0.2; done; echo "low finished"
high:
  stage: train
  parallel:
    distributed: {nodes: 1, gpus_per_node: 2, launcher: none, priority: 5}
  script:
    - echo "high-priority work on GPUs $CUDA_VISIBLE_DEVICES"
)yaml");
}

// A preempted job whose retry: does not bring it back would fail for good:
// the coordinator leaves such a gang alone and the high-priority gang waits.
TEST_F(PreemptionE2eTest, AGangWithoutARetryLeftIsNotPreempted) {
  const std::string project = cluster_.dir().Sub("project");
  fs::create_directories(project);
  // `retry: 0`: a preemption would fail the job for good.
  WriteFile(project + "/.gitlab-ci.yml", HoldAndOutrankCiFile("  retry: 0\n"));
  const std::string release = cluster_.dir().Sub("release");
  const std::string low_log = cluster_.run_dir() + "/logs/low-1-1.log";
  const std::string high_log = cluster_.run_dir() + "/logs/high-1-1.log";

  std::unique_ptr<Subprocess> low =
      StartRunLocal(cluster_, project, "low",
                    {"--pipeline-id", "7171", "--var", "RELEASE=" + release});
  ASSERT_NE(low, nullptr);
  // The line follows the admission's in the job log, maybe in a later
  // write.
  ASSERT_TRUE(WaitFor(
      [&] {
        return ReadFile(low_log).find(
                   "gdt: not preemptible: its retry: does not bring a "
                   "preempted job back (exit code 76)") != std::string::npos;
      },
      seconds(60)))
      << ReadFile(low_log) << cluster_.Logs();

  std::unique_ptr<Subprocess> high =
      StartRunLocal(cluster_, project, "high", {"--pipeline-id", "7272"});
  ASSERT_NE(high, nullptr);
  ASSERT_TRUE(WaitFor(
      [&] {
        return ReadFile(high_log).find("waiting for 1 × 2 free GPUs") !=
               std::string::npos;
      },
      seconds(60)))
      << ReadFile(high_log) << cluster_.Logs();
  // A preemptible gang would get its notice on the next pass (a second); this
  // one never does.
  EXPECT_FALSE(cluster_.WaitForStatus(
      [&](const nlohmann::json& status) {
        for (const auto& gang : status["gangs"]) {
          if (gang.value("gang_id", "") == "low-p1-pl7171-n1" &&
              !gang.value("preemption_planned_by", "").empty()) {
            return true;
          }
        }
        return false;
      },
      seconds(5)));
  EXPECT_THAT(cluster_.Logs(), Not(HasSubstr("event=preemption_started")));

  WriteFile(release, "");
  const CommandResult low_done = FinishRun(*low, seconds(60));
  EXPECT_TRUE(low_done.status.success()) << low_done.output << cluster_.Logs();
  EXPECT_THAT(ReadFile(low_log), HasSubstr("low finished"));
  const CommandResult high_done = FinishRun(*high, seconds(60));
  EXPECT_TRUE(high_done.status.success())
      << high_done.output << cluster_.Logs();
  EXPECT_THAT(ReadFile(high_log), HasSubstr("high-priority work on GPUs 0,1"));
}

constexpr int kShortGraceSeconds = 5;

// A coordinator with a short grace, one agent with 2 GPUs.
class ShortGracePreemptionE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_.SetCoordinatorExtraConfig(absl::StrCat(
        "preemption:\n  enabled: true\n  grace_seconds: ", grace_s_, "\n"));
    ASSERT_TRUE(cluster_.StartCoordinator().ok()) << cluster_.Logs();
    ASSERT_TRUE(
        cluster_.StartAgent({.name = "local", .cpu_slots = 2, .gpus = 2}).ok())
        << cluster_.Logs();
    ASSERT_TRUE(cluster_.WaitForHosts(1, seconds(20)).ok()) << cluster_.Logs();
    project_ = cluster_.dir().Sub("project");
    fs::create_directories(project_);
    // The retry: expand adds (2) brings `low` back; a retry that finds
    // $RELEASE ends at once.
    WriteFile(project_ + "/.gitlab-ci.yml", HoldAndOutrankCiFile(""));
    release_ = cluster_.dir().Sub("release");
  }

  // Starts `low` and waits for its first attempt to run.
  std::unique_ptr<Subprocess> StartLow(const std::string& pipeline) {
    std::unique_ptr<Subprocess> low = StartRunLocal(
        cluster_, project_, "low",
        {"--pipeline-id", pipeline, "--var", "RELEASE=" + release_});
    EXPECT_NE(low, nullptr);
    EXPECT_TRUE(WaitFor(
        [&] {
          return cluster_.Logs().find("stage=build_script") !=
                 std::string::npos;
        },
        seconds(60)))
        << cluster_.Logs();
    return low;
  }

  int grace_s_ = kShortGraceSeconds;
  GdtCluster cluster_;
  std::string project_;
  std::string release_;
};

// The same with a grace longer than the time the coordinator takes to
// call a silent host down (5 s in the test cluster).
class HostLostPreemptionE2eTest : public ShortGracePreemptionE2eTest {
 protected:
  HostLostPreemptionE2eTest() { grace_s_ = 60; }
};

// The victim's host dies during the grace: the gang fails at once as a lost
// member (a system failure, as for any lost host), not at the deadline and
// not as a preemption (nothing is counted against max_preemptions).
TEST_F(HostLostPreemptionE2eTest, AVictimWhoseHostDiesFailsAsAHostLoss) {
  std::unique_ptr<Subprocess> low = StartLow("7373");
  ASSERT_NE(low, nullptr);
  std::unique_ptr<Subprocess> high =
      StartRunLocal(cluster_, project_, "high", {"--pipeline-id", "7474"});
  ASSERT_NE(high, nullptr);
  ASSERT_TRUE(WaitFor(
      [&] {
        return cluster_.Logs().find("event=preemption_notice_sent") !=
               std::string::npos;
      },
      seconds(60)))
      << cluster_.Logs();
  const auto killed = std::chrono::steady_clock::now();
  cluster_.StopAgent(0, SIGKILL);
  const CommandResult low_done = FinishRun(*low, seconds(90));
  EXPECT_LT(std::chrono::steady_clock::now() - killed, seconds(grace_s_));
  EXPECT_FALSE(low_done.status.success());
  EXPECT_THAT(low_done.output,
              HasSubstr("gdt: gang low-p1-pl7373-n1 failed: member 1/1 (job "
                        "7373001 on host local) was lost"))
      << low_done.output;
  EXPECT_THAT(low_done.output, HasSubstr("Job failed (system failure)"));
  EXPECT_THAT(low_done.output, Not(HasSubstr("preempted by gang")));
  absl::StatusOr<nlohmann::json> status = cluster_.Status();
  ASSERT_TRUE(status.ok()) << status.status();
  for (const auto& gang : (*status)["gangs"]) {
    if (gang.value("gang_id", "") == "low-p1-pl7373-n1") {
      EXPECT_EQ(gang.value("state", ""), "failed") << gang.dump();
      EXPECT_EQ(gang.value("preemptions", -1), 0) << gang.dump();
    }
  }
  high->SignalGroup(SIGTERM);
  FinishRun(*high, seconds(60));
}

// A victim that ignores its notice is stopped when the grace runs out; its
// job log says it lost everything since the notice (no checkpoint), and its
// retry comes back after the high-priority gang.
TEST_F(ShortGracePreemptionE2eTest,
       AVictimThatIgnoresTheNoticeStopsAtTheGrace) {
  std::unique_ptr<Subprocess> low = StartLow("8181");
  ASSERT_NE(low, nullptr);
  const auto high_started = std::chrono::steady_clock::now();
  std::unique_ptr<Subprocess> high =
      StartRunLocal(cluster_, project_, "high", {"--pipeline-id", "8282"});
  ASSERT_NE(high, nullptr);
  const CommandResult high_done = FinishRun(*high, seconds(60));
  ASSERT_TRUE(high_done.status.success())
      << high_done.output << cluster_.Logs();
  EXPECT_LT(std::chrono::steady_clock::now() - high_started,
            seconds(kShortGraceSeconds + 30));
  EXPECT_THAT(cluster_.Logs(),
              HasSubstr("event=preemption_started gang=low-p1-pl8181-n1"));

  const CommandResult low_done = FinishRun(*low, seconds(60));
  EXPECT_FALSE(low_done.status.success()) << low_done.output;
  EXPECT_THAT(low_done.output, HasSubstr("Job failed: exit status 76"))
      << low_done.output;
  EXPECT_THAT(low_done.output,
              HasSubstr(absl::StrCat("preempted by gang high-p1-pl8282-n1 "
                                     "(priority 5) at ")))
      << low_done.output;
  EXPECT_THAT(low_done.output,
              HasSubstr(absl::StrCat("without a checkpoint within the ",
                                     kShortGraceSeconds, " s grace; lost ~")))
      << low_done.output;
  EXPECT_THAT(low_done.output, HasSubstr("(preemption 1 of at most 3)"));

  // Its retry (as GitLab's: new job id, the gang's epoch 2) runs to the end.
  WriteFile(release_, "");
  const CommandResult retry =
      cluster_.RunLocal(project_, "low",
                        {"--pipeline-id", "8181", "--first-job-id", "8181500",
                         "--var", "RELEASE=" + release_},
                        seconds(60));
  ASSERT_TRUE(retry.status.success()) << retry.output << cluster_.Logs();
  EXPECT_THAT(retry.output, HasSubstr("1 retry left to bring it back"));
  EXPECT_THAT(retry.output, HasSubstr("low finished"));
  absl::StatusOr<nlohmann::json> status = cluster_.Status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_THAT(GangEpochStates(*status),
              ::testing::ElementsAre(
                  ::testing::Pair("high-p1-pl8282-n1 1", "done"),
                  ::testing::Pair("low-p1-pl8181-n1 2", "done"),
                  ::testing::Pair("low-p1-pl8181-n1#1 1", "failed")));
}

// The high-priority gang is cancelled after the notice: the victim is not
// stopped at the deadline for it and runs on.
TEST_F(ShortGracePreemptionE2eTest,
       AVictimRunsOnWhenTheWaitingGangIsCancelled) {
  std::unique_ptr<Subprocess> low = StartLow("9191");
  ASSERT_NE(low, nullptr);
  std::unique_ptr<Subprocess> high =
      StartRunLocal(cluster_, project_, "high", {"--pipeline-id", "9292"});
  ASSERT_NE(high, nullptr);
  ASSERT_TRUE(WaitFor(
      [&] {
        return cluster_.Logs().find("event=preemption_notice_sent") !=
               std::string::npos;
      },
      seconds(60)))
      << cluster_.Logs();
  high->SignalGroup(SIGTERM);  // The pipeline is cancelled.
  FinishRun(*high, seconds(60));
  // At the deadline the coordinator finds nobody waiting.
  ASSERT_TRUE(WaitFor(
      [&] {
        return cluster_.Logs().find(
                   "event=preemption_withdrawn "
                   "gang=low-p1-pl9191-n1") != std::string::npos;
      },
      seconds(kShortGraceSeconds + 30)))
      << cluster_.Logs();
  absl::StatusOr<nlohmann::json> status = cluster_.Status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_THAT(GangEpochStates(*status), ::testing::Contains(::testing::Pair(
                                            "low-p1-pl9191-n1 1", "running")))
      << status->dump(2);
  // It ends after the notice, which may be why it ends: counted as
  // preempted (76), never as succeeded, so a retry would finish the work.
  WriteFile(release_, "");
  const CommandResult low_done = FinishRun(*low, seconds(60));
  EXPECT_FALSE(low_done.status.success()) << low_done.output;
  EXPECT_THAT(low_done.output, HasSubstr("Job failed: exit status 76"))
      << low_done.output;
}

}  // namespace
}  // namespace gdt::test
