// End to end: gdt under the runner behaviours that our older emulation did
// not reproduce. gdt-ci run-local (acting as the runner in question) →
// gdt-executor → gdt-coord → gdt-agent on loopback, with plain shell jobs.
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/cluster.h"
#include "testing/fake_gitlab_jobs.h"
#include "tests/e2e_util.h"

namespace gdt::test {
namespace {

using std::chrono::seconds;
using ::testing::HasSubstr;
using ::testing::Not;

class RunnerFidelityTest : public OneHostGangTest {};

// A runner that passes the script stage as step_script (the announced end
// of its rename to build_script): the member that finishes first still waits
// at the exit barrier and fails with the gang when its peer fails.
TEST_F(RunnerFidelityTest, StepScriptStageKeepsTheExitBarrier) {
  const std::string done = cluster_.dir().Sub("member-1-done");
  const std::string project = MakeShellProject(
      cluster_.dir(),
      absl::StrCat("if [ \"$CI_NODE_INDEX\" = 1 ]; then touch ", done,
                   "; echo member 1 done; else while [ ! -e ", done,
                   " ]; do sleep 0.1; done; sleep 1; echo member 2 fails; "
                   "exit 3; fi"));

  CommandResult run = cluster_.RunLocal(project, "train",
                                        {"--step-script-stage"}, seconds(120));

  EXPECT_FALSE(run.status.success()) << run.output;
  const std::string log1 = MemberLog(1);
  const std::string log2 = MemberLog(2);
  EXPECT_THAT(log2, HasSubstr("Job failed: exit status 3\n")) << log2;
  EXPECT_THAT(log1, HasSubstr("member 1 done")) << log1;
  EXPECT_THAT(log1, HasSubstr("gdt: waiting for 1 other member to finish"))
      << log1;
  EXPECT_THAT(log1, HasSubstr(absl::StrCat("Job failed: exit status ",
                                           kPeerFailureExitCode, "\n")))
      << log1;
}

// A runner >= 19 always sends job_info.pipeline_id, as 0 when GitLab left it
// unfilled: the gang is keyed by the job's CI_PIPELINE_ID, not by 0.
TEST_F(RunnerFidelityTest, ZeroPipelineIdFallsBackToCiPipelineId) {
  const std::string project =
      MakeShellProject(cluster_.dir(), "echo member $CI_NODE_INDEX done");

  CommandResult run = cluster_.RunLocal(
      project, "train", {"--zero-pipeline-id", "--pipeline-id", "4242"},
      seconds(120));

  ASSERT_TRUE(run.status.success()) << run.output << cluster_.Logs();
  for (int member = 1; member <= 2; ++member) {
    const std::string log = MemberLog(member);
    EXPECT_THAT(log, HasSubstr("gdt: joining gang train (pipeline 4242)"))
        << log;
    EXPECT_THAT(log, Not(HasSubstr("(pipeline 0)"))) << log;
  }
}

// The runner exports pipeline, project and group variables inside the stage
// script, after gdt's environment: one named like a variable gdt decides
// (here the leased GPUs) is refused before the member joins, naming it,
// instead of silently replacing gdt's value.
TEST_F(RunnerFidelityTest, JobVariableShadowingGdtsEnvironmentIsRefused) {
  const std::string project = MakeShellProject(
      cluster_.dir(),
      "echo member $CI_NODE_INDEX sees [$CUDA_VISIBLE_DEVICES]");

  CommandResult run = cluster_.RunLocal(
      project, "train", {"--var", "CUDA_VISIBLE_DEVICES=7"}, seconds(120));

  EXPECT_FALSE(run.status.success()) << run.output;
  EXPECT_THAT(run.output, Not(HasSubstr("sees [7]")));
  for (int member = 1; member <= 2; ++member) {
    const std::string log = MemberLog(member);
    EXPECT_THAT(log, HasSubstr("the job variable CUDA_VISIBLE_DEVICES would "
                               "override the value gdt sets"))
        << log;
    EXPECT_THAT(log, Not(HasSubstr("joining gang"))) << log;
  }
}

// A prepare that fails after admission (here the agent cannot create the
// builds dir) fails the gang and exits with the system-failure code; the
// runner then retries preparation with the same job id. That re-join is
// refused as a system failure too, so the job ends as runner_system_failure
// (which `retry: when: runner_system_failure` retries), not as a script
// failure.
TEST_F(RunnerFidelityTest, PreparationRetryOfAFailedGangIsASystemFailure) {
  // A file where the agent must create the builds dirs.
  WriteFile(cluster_.dir().Sub("builds"), "not a directory\n");
  const std::string project =
      MakeShellProject(cluster_.dir(), "echo member $CI_NODE_INDEX ran");

  CommandResult run = cluster_.RunLocal(project, "train", {}, seconds(120));

  EXPECT_FALSE(run.status.success()) << run.output;
  EXPECT_THAT(run.output, Not(HasSubstr("ran\n")));
  for (int member = 1; member <= 2; ++member) {
    const std::string log = MemberLog(member);
    EXPECT_THAT(log, HasSubstr("Will be retried in")) << log;
    EXPECT_THAT(log, HasSubstr("ERROR: Job failed (system failure)")) << log;
    EXPECT_THAT(log, Not(HasSubstr("Job failed: exit status"))) << log;
  }
}

// run-local reads the runner's own config.toml: the shipped example, with
// the binaries' and the executor config's paths of this build, runs a gang.
TEST_F(RunnerFidelityTest, ExampleConfigTomlRunsAGang) {
  std::string toml = ReadFile(SourceDir() + "/examples/config.toml");
  const auto replace_all = [&toml](const std::string& from,
                                   const std::string& to) {
    for (size_t at = toml.find(from); at != std::string::npos;
         at = toml.find(from, at + to.size())) {
      toml.replace(at, from.size(), to);
    }
  };
  replace_all("/usr/bin/gdt-executor", BinaryPath("gdt-executor"));
  // RunLocal() writes the cluster's executor config there.
  replace_all("/etc/gdt/executor.yaml", cluster_.dir().Sub("executor.yaml"));
  const std::string config = cluster_.dir().Sub("config.toml");
  WriteFile(config, toml);
  const std::string project =
      MakeShellProject(cluster_.dir(), "echo member $CI_NODE_INDEX done");

  CommandResult run = cluster_.RunLocal(
      project, "train", {"--runner-config", config}, seconds(120));

  ASSERT_TRUE(run.status.success()) << run.output << cluster_.Logs();
  EXPECT_THAT(run.output, HasSubstr("member 1 done"));
  EXPECT_THAT(run.output, HasSubstr("member 2 done"));
  EXPECT_THAT(MemberLog(1), HasSubstr("on gdt on gpu-07")) << MemberLog(1);
}

// Checkpoints are collected recursively; a nested file goes to GitLab's
// generic packages under a flat name GitLab accepts (the fake validates
// names as GitLab does) and comes back to its nested place on resume.
TEST(RunnerFidelityCheckpointTest, NestedCheckpointFilesRoundTripPackages) {
  // The agent (and so the job) finds gdt-ckpt on its PATH.
  const char* path = getenv("PATH");
  const std::string saved_path = path != nullptr ? path : "/usr/bin:/bin";
  setenv("PATH",
         (std::filesystem::path(GDT_CKPT_BIN).parent_path().string() + ":" +
          saved_path)
             .c_str(),
         1);
  GdtCluster cluster;
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.StartAgent({.name = "local", .cpu_slots = 2}).ok())
      << cluster.Logs();
  setenv("PATH", saved_path.c_str(), 1);
  ASSERT_TRUE(cluster.WaitForHosts(1, seconds(20)).ok()) << cluster.Logs();
  std::unique_ptr<gitlab::FakeGitLabApi> api =
      StartFakeGitLab(RunLocalPipelineJobs(6161, 2));
  ASSERT_NE(api, nullptr);
  // Each member saves a checkpoint with a nested file to the packages,
  // spoils its local copy and resumes: the copy must come from GitLab.
  const std::string project = MakeShellProject(
      cluster.dir(),
      "mkdir -p ck/step-1/shard && echo weights-$CI_NODE_INDEX > "
      "ck/step-1/shard/w.bin && gdt-ckpt save --step 1 --dir ck/step-1 "
      "--store packages --rank $((CI_NODE_INDEX-1)) --world-size 2 && echo "
      "spoilt > ck/step-1/shard/w.bin && gdt-ckpt resume --manifest "
      "ck/step-1/manifest.json --dest restored && echo \"restored "
      "[$(cat restored/step-1/shard/w.bin)]\"");

  CommandResult run = cluster.RunLocal(
      project, "train",
      {"--pipeline-id", "6161", "--var", "CI_API_V4_URL=" + api->api_url()},
      seconds(120));

  ASSERT_TRUE(run.status.success()) << run.output << cluster.Logs();
  EXPECT_THAT(run.output, HasSubstr("restored [weights-1]"));
  EXPECT_THAT(run.output, HasSubstr("restored [weights-2]"));
  EXPECT_EQ(api->PackageFile(1, "gdt-checkpoints", "job-6161001-rank-0-step-1",
                             "shard+2Fw.bin"),
            "weights-1\n");
}

// A job stopped at its timeout gets the executor's kill_grace_seconds
// between SIGTERM and SIGKILL (the time to write a checkpoint), not the
// agent's 10 s default: its TERM handler needs 14 s here.
TEST(RunnerKillGraceTest, AStoppedScriptGetsTheConfiguredGrace) {
  GdtCluster cluster;
  cluster.SetExecutorExtraConfig("kill_grace_seconds: 30\n");
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.StartAgent({.name = "local", .cpu_slots = 1}).ok())
      << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForHosts(1, seconds(20)).ok()) << cluster.Logs();
  const std::string saved = cluster.dir().Sub("checkpoint-saved");
  const std::string project = cluster.dir().Sub("project");
  std::filesystem::create_directories(project);
  WriteFile(project + "/.gitlab-ci.yml",
            absl::StrCat("train:\n"
                         "  timeout: 4 seconds\n"
                         "  variables:\n"
                         "    GDT_GPUS_PER_NODE: \"0\"\n"
                         "    GDT_LAUNCHER: none\n"
                         "  script:\n"
                         "    - 'trap \"sleep 14; touch ",
                         saved, "; exit 0\" TERM; sleep 300 & wait'\n"));
  const auto start = std::chrono::steady_clock::now();
  const CommandResult run =
      cluster.RunLocal(project, "train", {}, std::chrono::milliseconds(120000));
  EXPECT_NE(run.status.exit_code, 0) << run.output;  // It timed out.
  EXPECT_TRUE(std::filesystem::exists(saved))
      << "the TERM handler was killed before it finished\n"
      << run.output << cluster.Logs();
  EXPECT_GT(std::chrono::steady_clock::now() - start, seconds(14));
}

// The terminal run-local ran in closes while a gang trains: SIGHUP stops
// the run as Ctrl-C does. Both members' jobs end as runner_interrupted,
// the gang fails, nothing of the jobs keeps running, the custom-executor
// temporary dirs are gone and so is what the members wrote in their own
// TMPDIR (where torchrun keeps its torchelastic_* dirs). Before, run-local
// died at once and left its execs, the members and those dirs behind.
TEST_F(RunnerFidelityTest, ClosedTerminalStopsTheGangAndLeavesNothing) {
  const std::string marks = cluster_.dir().Sub("marks");
  std::filesystem::create_directories(marks);
  const std::string project = MakeShellProject(
      cluster_.dir(),
      absl::StrCat("mkdir $TMPDIR/torchelastic_probe && echo $TMPDIR > ", marks,
                   "/tmpdir-$CI_NODE_INDEX && sleep 600"));
  std::unique_ptr<Subprocess> run =
      StartRunLocal(cluster_, project, "train", {"--pipeline-id", "6363"});
  ASSERT_NE(run, nullptr);
  std::string early;
  const auto started = [&] {
    run->WaitUntil(
        std::chrono::steady_clock::now() + std::chrono::milliseconds(50),
        [&early](OutputSource, std::string_view data) { early.append(data); });
    return std::filesystem::exists(marks + "/tmpdir-1") &&
           std::filesystem::exists(marks + "/tmpdir-2");
  };
  ASSERT_TRUE(WaitFor(started, seconds(120))) << early << cluster_.Logs();
  const std::string tmpdir1 = ReadFile(marks + "/tmpdir-1");
  const std::string tmpdir2 = ReadFile(marks + "/tmpdir-2");

  ASSERT_EQ(kill(run->pid(), SIGHUP), 0);
  CommandResult result = FinishRun(*run, seconds(120));
  result.output = early + result.output;
  EXPECT_EQ(result.status.code(), 1) << result.output << cluster_.Logs();
  EXPECT_THAT(result.output, HasSubstr("runner_interrupted"));
  EXPECT_THAT(result.output, Not(HasSubstr("killed at its deadline")));
  EXPECT_TRUE(
      WaitFor([&] { return JobProcesses(cluster_).empty(); }, seconds(60)))
      << DescribeAll(JobProcesses(cluster_));
  EXPECT_TRUE(std::filesystem::is_empty(cluster_.dir().Sub("runner-tmp")));
  for (const std::string& tmpdir : {tmpdir1, tmpdir2}) {
    const std::string dir = tmpdir.substr(0, tmpdir.find('\n'));
    EXPECT_FALSE(dir.empty());
    EXPECT_FALSE(std::filesystem::exists(dir + "/torchelastic_probe")) << dir;
  }
  std::map<std::string, std::string> gangs;
  EXPECT_TRUE(cluster_.WaitForStatus(
      [&](const nlohmann::json& status) {
        gangs = GangEpochStates(status);
        return gangs.size() == 1 && gangs.begin()->second == "failed";
      },
      seconds(30)))
      << ::testing::PrintToString(gangs);
}

}  // namespace
}  // namespace gdt::test
