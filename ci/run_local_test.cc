#include "ci/run_local.h"

#include <filesystem>
#include <sstream>

#include "common/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/fake_executor.h"

namespace gdt::ci {
namespace {

using test::ReadTextFile;
using test::TempDir;
using test::WriteTextFile;
using ::testing::HasSubstr;

namespace fs = std::filesystem;

std::map<std::string, std::string> VariablesOf(
    const gitlab::JobPayload& payload) {
  std::map<std::string, std::string> vars;
  for (const gitlab::JobVariable& v : payload.variables) vars[v.key] = v.value;
  return vars;
}

// Two runs without --pipeline-id started in the same second are two
// pipelines (and two gangs), not one.
TEST(DefaultPipelineIdTest, RunsInTheSameSecondDiffer) {
  const auto second = std::chrono::system_clock::time_point(
      std::chrono::seconds(1'800'000'000));
  const int64_t first = DefaultPipelineId(second);
  const int64_t next = DefaultPipelineId(second + std::chrono::microseconds(1));
  EXPECT_NE(first, next);
  for (int64_t id : {first, next}) {
    EXPECT_GE(id, 1);
    EXPECT_LE(id, kMaxPipelineId);
    EXPECT_LT(id * 1000 + 999, int64_t{1} << 53);  // Exact in JSON doubles.
  }
}

TEST(BuildPayloadsTest, ParallelOneIsNumberedLikeGitLabDoes) {
  CiJob job;
  job.name = "train";
  job.parallel = 1;
  job.parallel_given = true;
  job.script = {"true"};
  LocalPipeline pipeline;
  pipeline.pipeline_id = 77;

  const std::vector<gitlab::JobPayload> payloads = BuildPayloads(job, pipeline);

  ASSERT_EQ(payloads.size(), 1u);
  EXPECT_EQ(payloads[0].name, "train 1/1");
  const std::map<std::string, std::string> vars = VariablesOf(payloads[0]);
  EXPECT_EQ(vars.at("CI_NODE_INDEX"), "1");
  EXPECT_EQ(vars.at("CI_NODE_TOTAL"), "1");

  job.parallel_given = false;  // No `parallel:` at all: a plain job.
  const std::vector<gitlab::JobPayload> plain = BuildPayloads(job, pipeline);
  EXPECT_EQ(plain[0].name, "train");
  EXPECT_EQ(VariablesOf(plain[0]).count("CI_NODE_INDEX"), 0u);
}

// With a signer, every member gets its own ID token for its job id, as
// GitLab issues them; the key's JWKS verifies them.
TEST(BuildPayloadsTest, IssuesEachMemberItsOwnIdToken) {
  CiJob job;
  job.name = "train";
  job.parallel = 2;
  job.script = {"true"};
  job.id_tokens = {{"GDT_ID_TOKEN", {"https://gdt.example.com"}}};
  LocalPipeline pipeline;
  pipeline.pipeline_id = 77;
  pipeline.now_unix = 1767225600;
  // Without a signer there are none.
  EXPECT_EQ(VariablesOf(BuildPayloads(job, pipeline)[0]).count("GDT_ID_TOKEN"),
            0u);

  absl::StatusOr<gitlab::IdTokenSigner> signer =
      gitlab::IdTokenSigner::Generate("local");
  ASSERT_TRUE(signer.ok());
  pipeline.id_token_signer =
      std::make_shared<const gitlab::IdTokenSigner>(*signer);
  const std::vector<gitlab::JobPayload> payloads = BuildPayloads(job, pipeline);
  absl::StatusOr<gitlab::JsonWebKeys> keys =
      gitlab::JsonWebKeys::Parse(signer->Jwks());
  ASSERT_TRUE(keys.ok()) << keys.status();
  gitlab::IdTokenPolicy policy;
  policy.issuer = pipeline.server_url;
  policy.audience = "https://gdt.example.com";
  for (const gitlab::JobPayload& payload : payloads) {
    absl::StatusOr<gitlab::IdTokenClaims> claims =
        gitlab::VerifyIdToken(VariablesOf(payload).at("GDT_ID_TOKEN"), *keys,
                              policy, pipeline.now_unix);
    ASSERT_TRUE(claims.ok()) << claims.status();
    EXPECT_EQ(claims->job_id, payload.id);
    EXPECT_EQ(claims->pipeline_id, 77);
    EXPECT_EQ(claims->project_id, pipeline.project_id);
  }
}

TEST(BuildPayloadsTest, MakesOneJobPerMemberOfTheGang) {
  CiJob job;
  job.name = "train";
  job.parallel = 2;
  job.before_script = {"source env.sh"};
  job.script = {"python train.py"};
  job.variables = {{"LR", "0.1"}};
  LocalPipeline pipeline;
  pipeline.pipeline_id = 77;
  pipeline.project_name = "model";
  pipeline.pipeline_variables = {{"LR", "0.2"}};

  const std::vector<gitlab::JobPayload> payloads = BuildPayloads(job, pipeline);

  ASSERT_EQ(payloads.size(), 2u);
  EXPECT_EQ(payloads[0].name, "train 1/2");
  EXPECT_EQ(payloads[1].name, "train 2/2");
  EXPECT_LT(payloads[0].id, payloads[1].id);
  EXPECT_NE(payloads[0].token, payloads[1].token);
  EXPECT_EQ(payloads[1].pipeline_id, 77);
  EXPECT_EQ(payloads[0].project_id, payloads[1].project_id);
  EXPECT_EQ(payloads[0].steps[0].script,
            (std::vector<std::string>{"source env.sh", "python train.py"}));
  const std::map<std::string, std::string> vars = VariablesOf(payloads[1]);
  EXPECT_EQ(vars.at("CI_NODE_INDEX"), "2");
  EXPECT_EQ(vars.at("CI_NODE_TOTAL"), "2");
  EXPECT_EQ(vars.at("CI_JOB_GROUP_NAME"), "train");
  EXPECT_EQ(vars.at("CI_JOB_NAME_SLUG"), "train-2-2");
  EXPECT_EQ(vars.at("CI_PIPELINE_ID"), "77");
  EXPECT_EQ(vars.at("CI_JOB_ID"), std::to_string(payloads[1].id));
  EXPECT_EQ(vars.at("CI_JOB_TOKEN"), payloads[1].token);
  EXPECT_EQ(vars.at("CI_SERVER_URL"), "http://gitlab.local");
  EXPECT_EQ(vars.at("CI_PROJECT_PATH"), "local/model");
  EXPECT_EQ(payloads[1].Variable("LR"), "0.2");  // Pipeline variables win.
  absl::StatusOr<gitlab::NodeSuffix> suffix =
      gitlab::ParseNodeSuffix(payloads[1].name);
  ASSERT_TRUE(suffix.ok());
  EXPECT_EQ(suffix->index, 2);
}

TEST(BuildPayloadsTest, SingleJobHasNoNodeIndex) {
  CiJob job;
  job.name = "lint";
  job.script = {"make lint"};
  LocalPipeline pipeline;
  pipeline.pipeline_id = 5;
  pipeline.project_name = "p";

  const std::vector<gitlab::JobPayload> payloads = BuildPayloads(job, pipeline);

  ASSERT_EQ(payloads.size(), 1u);
  EXPECT_EQ(payloads[0].name, "lint");
  EXPECT_FALSE(payloads[0].Variable("CI_NODE_INDEX").has_value());
  EXPECT_EQ(payloads[0].Variable("CI_NODE_TOTAL"), "1");
}

// `{value: ..., expand: false}` reaches the runner as a raw variable.
TEST(BuildPayloadsTest, UnexpandedVariablesAreSentRaw) {
  absl::StatusOr<CiJob> job = ParseCiJob(
      "train:\n"
      "  variables:\n"
      "    PLAIN: $HOME/x\n"
      "    KEPT: {value: $HOME/x, expand: false}\n"
      "  script: [run]\n",
      "train");
  ASSERT_TRUE(job.ok()) << job.status();
  LocalPipeline pipeline;
  pipeline.pipeline_id = 5;
  pipeline.project_name = "p";

  const std::vector<gitlab::JobPayload> payloads =
      BuildPayloads(*job, pipeline);

  ASSERT_EQ(payloads.size(), 1u);
  for (const gitlab::JobVariable& variable : payloads[0].variables) {
    if (variable.key == "PLAIN") EXPECT_FALSE(variable.raw);
    if (variable.key == "KEPT") EXPECT_TRUE(variable.raw);
  }
  EXPECT_EQ(payloads[0].Variable("KEPT"), "$HOME/x");
}

class RunLocalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    project_ = dir_.path() + "/project";
    fs::create_directories(project_);
    fs::create_directories(dir_.path() + "/rec");
    WriteTextFile(project_ + "/.gitlab-ci.yml", R"(
train:
  parallel: 2
  script:
    - echo "member $CI_NODE_INDEX of $CI_NODE_TOTAL says $GREETING"
    - mkdir -p out && echo $CI_NODE_INDEX > out/rank.txt
  artifacts:
    paths: [out/]
broken:
  script: exit 3
)");
    options_.ci_file = project_ + "/.gitlab-ci.yml";
    options_.project_dir = project_;
    options_.executor = test::WriteFakeExecutor(dir_.path());
    options_.pipeline_id = 42;
    options_.vars = {"GREETING=hi"};
    setenv("FAKE_REC", (dir_.path() + "/rec").c_str(), 1);
  }
  void TearDown() override {
    unsetenv("FAKE_REC");
    unsetenv("FAKE_BUILDS_ROOT");
  }

  TempDir dir_;
  std::string project_;
  RunLocalOptions options_;
};

TEST_F(RunLocalTest, RunsEveryMemberAndKeepsTheirLogs) {
  options_.job_name = "train";
  // Like gdt-executor, the fake's config_exec gives each job its own dir.
  const std::string builds = dir_.path() + "/builds";
  setenv("FAKE_BUILDS_ROOT", builds.c_str(), 1);
  std::ostringstream out;

  absl::StatusOr<RunLocalResult> result = RunLocal(options_, out, nullptr);

  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->success()) << out.str();
  ASSERT_EQ(result->members.size(), 2u);
  EXPECT_THAT(out.str(), HasSubstr("[train 1/2] member 1 of 2 says hi\n"));
  EXPECT_THAT(out.str(), HasSubstr("[train 2/2] member 2 of 2 says hi\n"));
  const std::string work =
      fs::path(project_ + "/.gdt-run/42").lexically_normal().string();
  EXPECT_EQ(result->work_dir, work);
  EXPECT_THAT(ReadTextFile(work + "/logs/train-2-2.log"),
              HasSubstr("member 2 of 2 says hi\n"));
  EXPECT_EQ(
      ReadTextFile(work + "/artifacts/" +
                   std::to_string(result->members[1].job_id) + "/out/rank.txt"),
      "2\n");
  // The work dir inside the project is not copied into the builds dir.
  const std::string copy = builds + "/" +
                           std::to_string(result->members[1].job_id) +
                           "/local/project";
  EXPECT_TRUE(fs::exists(copy + "/.gitlab-ci.yml"));
  EXPECT_FALSE(fs::exists(copy + "/.gdt-run"));

  const std::string summary = FormatSummary(*result, /*json=*/false);
  EXPECT_THAT(summary, HasSubstr("train 2/2"));
  EXPECT_THAT(summary, HasSubstr("success"));
  const nlohmann::json json =
      nlohmann::json::parse(FormatSummary(*result, /*json=*/true));
  EXPECT_EQ(json["members"][1]["status"], "success");
  EXPECT_EQ(json["success"], true);
}

TEST_F(RunLocalTest, AFailingMemberFailsTheRun) {
  options_.job_name = "broken";
  std::ostringstream out;

  absl::StatusOr<RunLocalResult> result = RunLocal(options_, out, nullptr);

  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_FALSE(result->success());
  EXPECT_EQ(result->members[0].result.failure_reason, "script_failure");
  EXPECT_EQ(result->members[0].result.exit_code, 3);
  EXPECT_THAT(FormatSummary(*result, false), HasSubstr("script_failure"));
}

TEST_F(RunLocalTest, RunsAParallelDistributedJobAsItsExpansion) {
  WriteTextFile(project_ + "/.gitlab-ci.yml", R"(
dist:
  parallel:
    distributed: {nodes: 2, gpus_per_node: 0, launcher: env}
  script:
    - echo "member $CI_NODE_INDEX/$CI_NODE_TOTAL launcher=$GDT_LAUNCHER"
)");
  options_.job_name = "dist";
  std::ostringstream out;

  absl::StatusOr<RunLocalResult> result = RunLocal(options_, out, nullptr);

  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->success()) << out.str();
  EXPECT_THAT(out.str(), HasSubstr("[dist 1/2] member 1/2 launcher=env\n"));
  EXPECT_THAT(out.str(), HasSubstr("[dist 2/2] member 2/2 launcher=env\n"));
}

TEST_F(RunLocalTest, LaterJobsGetTheArtifactsOfEarlierOnes) {
  WriteTextFile(project_ + "/.gitlab-ci.yml", R"(
stages: [build, test, deploy]
make:
  stage: build
  parallel: 2
  script: mkdir -p out && echo "part $CI_NODE_INDEX" > out/part-$CI_NODE_INDEX
  artifacts: {paths: [out/]}
check:
  stage: test
  needs: [make]
  script: cat out/part-1 out/part-2
ship:
  stage: deploy
  dependencies: []
  script: test ! -e out
fail:
  stage: build
  script: exit 4
)");
  setenv("FAKE_BUILDS_ROOT", (dir_.path() + "/builds").c_str(), 1);
  options_.job_name = "make";
  options_.later_jobs = {"check", "ship"};
  std::ostringstream out;

  absl::StatusOr<RunLocalResult> result = RunLocal(options_, out, nullptr);

  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->success()) << out.str();
  ASSERT_EQ(result->members.size(), 4u);
  EXPECT_EQ(result->members[2].name, "check");
  EXPECT_THAT(out.str(), HasSubstr("[check] part 1\n[check] part 2\n"));
  EXPECT_THAT(out.str(), HasSubstr("[check] Downloading artifacts for make "
                                   "2/2"));
  // Distinct job ids across the pipeline's jobs.
  EXPECT_LT(result->members[1].job_id, result->members[2].job_id);
  EXPECT_LT(result->members[2].job_id, result->members[3].job_id);

  // A failed job skips the jobs after it.
  options_.job_name = "fail";
  options_.pipeline_id = 43;
  std::ostringstream failed_out;
  result = RunLocal(options_, failed_out, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_FALSE(result->success());
  ASSERT_EQ(result->members.size(), 1u);
  EXPECT_EQ(result->members[0].name, "fail");
}

TEST_F(RunLocalTest, ABadBlockIsOneLineWithItsPlace) {
  WriteTextFile(project_ + "/.gitlab-ci.yml",
                "dist:\n  parallel:\n    distributed: {nodes: 0}\n"
                "  script: [echo]\n");
  options_.job_name = "dist";
  std::ostringstream out;

  absl::StatusOr<RunLocalResult> result = RunLocal(options_, out, nullptr);

  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(result.status().message()),
            project_ +
                "/.gitlab-ci.yml:3:26: dist: parallel:distributed:nodes must "
                "be from 1 to 200 (GitLab's parallel limit), not 0");
  EXPECT_TRUE(out.str().empty());
}

// Distinct job names can share a slug: each member keeps its own log, and
// the summary points each at its own.
TEST_F(RunLocalTest, JobsWhoseNamesShareASlugKeepTheirOwnLogs) {
  WriteTextFile(project_ + "/.gitlab-ci.yml", R"(
"build:x":
  script: echo FIRST-JOB-OUTPUT
"build-x":
  script: echo SECOND-JOB-OUTPUT
"build x":
  script: echo THIRD-JOB-OUTPUT
)");
  options_.job_name = "build:x";
  options_.later_jobs = {"build-x", "build x"};
  std::ostringstream out;

  absl::StatusOr<RunLocalResult> result = RunLocal(options_, out, nullptr);

  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->success()) << out.str();
  ASSERT_EQ(result->members.size(), 3u);
  const std::string logs = result->work_dir + "/logs/";
  EXPECT_EQ(result->members[0].log_path, logs + "build-x.log");
  EXPECT_EQ(result->members[1].log_path, logs + "build-x.2.log");
  EXPECT_EQ(result->members[2].log_path, logs + "build-x.3.log");
  EXPECT_THAT(ReadTextFile(result->members[0].log_path),
              HasSubstr("FIRST-JOB-OUTPUT"));
  EXPECT_THAT(ReadTextFile(result->members[1].log_path),
              HasSubstr("SECOND-JOB-OUTPUT"));
  EXPECT_THAT(ReadTextFile(result->members[1].log_path),
              ::testing::Not(HasSubstr("FIRST-JOB-OUTPUT")));
  EXPECT_THAT(ReadTextFile(result->members[2].log_path),
              HasSubstr("THIRD-JOB-OUTPUT"));
  const nlohmann::json json =
      nlohmann::json::parse(FormatSummary(*result, /*json=*/true));
  EXPECT_EQ(json["members"][1]["log"], logs + "build-x.2.log");
}

// A pipeline has each job once: naming one twice is refused before
// anything runs.
TEST_F(RunLocalTest, AJobNamedTwiceIsRefused) {
  options_.job_name = "train";
  options_.later_jobs = {"broken", "train"};
  std::ostringstream out;

  absl::StatusOr<RunLocalResult> result = RunLocal(options_, out, nullptr);

  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(result.status().message(),
            "--job 'train' is given twice: a pipeline runs each job once");
  EXPECT_TRUE(out.str().empty());
  EXPECT_FALSE(fs::exists(project_ + "/.gdt-run"));
}

// Ids and timeouts past what the job-id and clock arithmetic holds are
// refused, whoever calls RunLocal.
TEST_F(RunLocalTest, IdsAndTimeoutsOutOfRangeAreRefused) {
  options_.job_name = "train";
  std::ostringstream out;
  const auto message = [&] {
    return std::string(RunLocal(options_, out, nullptr).status().message());
  };
  options_.pipeline_id = kMaxPipelineId + 1;
  EXPECT_EQ(message(), "--pipeline-id must be from 1 to 1000000000000000");
  options_.pipeline_id = 42;
  options_.first_job_id = 0;
  EXPECT_EQ(message(), "--first-job-id must be from 1 to 1000000000000000000");
  options_.first_job_id = kMaxFirstJobId + 1;
  EXPECT_THAT(message(), HasSubstr("--first-job-id must be from 1"));
  options_.first_job_id.reset();
  options_.timeout_seconds = kMaxTimeoutSeconds + 1;
  EXPECT_EQ(message(), "--timeout must be from 1 to 316224000");
  options_.timeout_seconds.reset();
  options_.graceful_kill_timeout_seconds = -5;
  EXPECT_EQ(message(), "--graceful-kill-timeout must be from 1 to 86400");
  EXPECT_TRUE(out.str().empty());
}

TEST(DefaultExecutorTest, TakesTheFirstExecutableCandidate) {
  TempDir dir;
  const std::string beside = dir.path() + "/bin/gdt-executor";
  const std::string built = dir.path() + "/executor/gdt-executor";
  fs::create_directories(dir.path() + "/bin");
  fs::create_directories(dir.path() + "/executor");
  // Neither exists: the first, so that the error names it.
  EXPECT_EQ(FirstExecutable({beside, built}), beside);
  WriteTextFile(built, "#!/bin/sh\n", 0755);
  EXPECT_EQ(FirstExecutable({beside, built}), built);
  WriteTextFile(beside, "not executable\n", 0644);
  EXPECT_EQ(FirstExecutable({beside, built}), built);
  fs::permissions(beside, fs::perms::owner_all);
  EXPECT_EQ(FirstExecutable({beside, built}), beside);
  // A directory is no executable.
  EXPECT_EQ(FirstExecutable({dir.path() + "/bin", built}), built);
}

TEST_F(RunLocalTest, BadInputIsOneClearError) {
  std::ostringstream out;
  options_.job_name = "nope";
  EXPECT_EQ(RunLocal(options_, out, nullptr).status().code(),
            absl::StatusCode::kNotFound);

  options_.job_name = "train";
  options_.vars = {"NOT A VAR"};
  absl::StatusOr<RunLocalResult> bad_var = RunLocal(options_, out, nullptr);
  EXPECT_EQ(bad_var.status().message(),
            "bad --var 'NOT A VAR': expected KEY=VALUE");

  options_.vars.clear();
  options_.executor = dir_.path() + "/missing";
  EXPECT_EQ(RunLocal(options_, out, nullptr).status().code(),
            absl::StatusCode::kNotFound);

  options_.ci_file = dir_.path() + "/missing.yml";
  EXPECT_EQ(RunLocal(options_, out, nullptr).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(out.str().empty());
}

}  // namespace
}  // namespace gdt::ci
