#include "executor/job_env.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <string>
#include <variant>

#include "absl/strings/str_cat.h"
#include "common/gang_limits.h"
#include "executor/stage_support.h"
#include "gitlab/job_payload.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/temp_dir.h"

namespace gdt::executor {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

gitlab::JobPayload Payload(const std::string& name) {
  gitlab::JobPayload payload;
  payload.id = 1002;
  payload.token = "glcbt-TEST-1002";
  payload.name = name;
  payload.project_id = 5;
  payload.pipeline_id = 77;
  payload.timeout_seconds = 600;
  return payload;
}

JobEnv EnvWith(const Environment& extra) {
  Environment environment = {
      {"TMPDIR", "/tmp/custom-executor1"},
      {"BUILD_FAILURE_EXIT_CODE", "1"},
      {"SYSTEM_FAILURE_EXIT_CODE", "2"},
      {"BUILD_EXIT_CODE_FILE", "/tmp/custom-executor1/build_exit_code"},
      {"JOB_RESPONSE_FILE", "/tmp/custom-executor1/response.json"},
      {"CUSTOM_ENV_CI_SERVER_URL", "https://gitlab.test"},
      {"CUSTOM_ENV_CI_NODE_INDEX", "2"},
      {"CUSTOM_ENV_CI_NODE_TOTAL", "4"},
  };
  for (const auto& [key, value] : extra) environment[key] = value;
  return ReadJobEnv(environment);
}

TEST(ReadJobEnvTest, ReadsRunnerVariablesAndStripsPrefix) {
  JobEnv env = ReadJobEnv({{"TMPDIR", "/t"},
                           {"BUILD_FAILURE_EXIT_CODE", "7"},
                           {"SYSTEM_FAILURE_EXIT_CODE", "8"},
                           {"BUILD_EXIT_CODE_FILE", "/t/code"},
                           {"JOB_RESPONSE_FILE", "/t/response.json"},
                           {"CUSTOM_ENV_CI_JOB_ID", "1002"},
                           {"HOME", "/root"}});

  EXPECT_EQ(env.tmpdir, "/t");
  EXPECT_EQ(env.exit_codes.build_failure, 7);
  EXPECT_EQ(env.exit_codes.system_failure, 8);
  EXPECT_EQ(env.exit_codes.exit_code_file, "/t/code");
  EXPECT_EQ(env.job_response_file, "/t/response.json");
  EXPECT_EQ(env.JobVariable("CI_JOB_ID"), "1002");
  EXPECT_EQ(env.JobVariable("HOME"), std::nullopt);
  EXPECT_EQ(env.MemberStatePath(), "/t/gdt-member.json");
  EXPECT_THAT(env.warnings, IsEmpty());
}

TEST(ReadJobEnvTest, MissingExitCodesFallBackWithWarning) {
  JobEnv env = ReadJobEnv({{"BUILD_FAILURE_EXIT_CODE", "one"}});

  EXPECT_EQ(env.exit_codes.build_failure, 1);
  EXPECT_EQ(env.exit_codes.system_failure, 2);
  EXPECT_EQ(env.warnings.size(), 2u);
}

// The ID token comes from the payload's GDT_ID_TOKEN (declared under
// `id_tokens:`), never from CUSTOM_ENV_*; a job without one has none.
TEST(ResolveJobInfoTest, IdTokenComesFromThePayload) {
  gitlab::JobPayload payload = Payload("train 2/4");
  absl::StatusOr<JobInfo> without = ResolveJobInfo(
      EnvWith({{"CUSTOM_ENV_GDT_ID_TOKEN", "from-env"}}), payload);
  ASSERT_TRUE(without.ok()) << without.status();
  EXPECT_EQ(without->credentials.id_token, "");
  gitlab::JobVariable variable;
  variable.key = "GDT_ID_TOKEN";
  variable.value = "eyJhbGciOiJSUzI1NiJ9.e30.c2ln";
  payload.variables.push_back(variable);
  absl::StatusOr<JobInfo> job = ResolveJobInfo(EnvWith({}), payload);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->credentials.id_token, "eyJhbGciOiJSUzI1NiJ9.e30.c2ln");
}

// The executor takes as many GPUs per member as a host may have (the bound
// gdt-ci lint checks too), and refuses one more in one line.
TEST(ResolveJobInfoTest, GpusPerNodeGoUpToTheSharedBound) {
  absl::StatusOr<JobInfo> most = ResolveJobInfo(
      EnvWith(
          {{"CUSTOM_ENV_GDT_GPUS_PER_NODE", std::to_string(kMaxGpusPerNode)}}),
      Payload("train 2/4"));
  ASSERT_TRUE(most.ok()) << most.status();
  EXPECT_EQ(most->gpus_per_node, kMaxGpusPerNode);
  absl::StatusOr<JobInfo> more =
      ResolveJobInfo(EnvWith({{"CUSTOM_ENV_GDT_GPUS_PER_NODE",
                               std::to_string(kMaxGpusPerNode + 1)}}),
                     Payload("train 2/4"));
  EXPECT_EQ(more.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(more.status().message(), HasSubstr("GDT_GPUS_PER_NODE"));
  EXPECT_THAT(more.status().message(),
              HasSubstr(absl::StrCat(kMaxGpusPerNode)));
}

TEST(ResolveJobInfoTest, TrustedNameGivesIdentity) {
  absl::StatusOr<JobInfo> job =
      ResolveJobInfo(EnvWith({{"CUSTOM_ENV_GDT_GPUS_PER_NODE", "8"},
                              {"CUSTOM_ENV_GDT_NPROC_PER_NODE", "8"},
                              {"CUSTOM_ENV_GDT_LAUNCHER", "env"},
                              {"CUSTOM_ENV_GDT_PRIORITY", "-5"},
                              {"CUSTOM_ENV_GDT_TOPOLOGY_SAME", "rack"},
                              {"CUSTOM_ENV_GDT_TOPOLOGY_MODE", "required"},
                              {"CUSTOM_ENV_GDT_PREEMPTIBLE", "1"},
                              {"CUSTOM_ENV_GDT_PREEMPT_RETRIES", "2"},
                              {"CUSTOM_ENV_GDT_NODES_MIN", "2"},
                              {"CUSTOM_ENV_GDT_NODES_MAX", "4"}}),
                     Payload("train 2/4"));

  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->job_id, 1002);
  EXPECT_EQ(job->credentials.job_token,
            "glcbt-TEST-1002");  // From the payload only.
  EXPECT_EQ(job->group_name, "train");
  EXPECT_EQ(job->member_index, 2);
  EXPECT_EQ(job->member_total, 4);
  EXPECT_EQ(job->instance, "https://gitlab.test");
  EXPECT_EQ(job->project_id, 5);
  EXPECT_EQ(job->pipeline_id, 77);
  EXPECT_EQ(job->gpus_per_node, 8);
  EXPECT_EQ(job->procs_per_node, 8);
  EXPECT_EQ(job->launcher, v1::LAUNCHER_ENV);
  EXPECT_EQ(job->job_timeout, std::chrono::seconds(600));
  EXPECT_EQ(job->priority, -5);
  EXPECT_EQ(job->topology_same, "rack");
  EXPECT_TRUE(job->topology_required);
  EXPECT_TRUE(job->preemptible);
  EXPECT_EQ(job->preempt_retries, 2);
  EXPECT_EQ(job->nodes_min, 2);
}

TEST(ResolveJobInfoTest, DefaultsForGdtInputs) {
  absl::StatusOr<JobInfo> job = ResolveJobInfo(EnvWith({}), Payload("t 2/4"));

  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->gpus_per_node, 0);
  EXPECT_EQ(job->procs_per_node, 1);
  EXPECT_EQ(job->launcher, v1::LAUNCHER_TORCHRUN);
  EXPECT_EQ(job->priority, 0);
  EXPECT_EQ(job->topology_same, "");
  EXPECT_FALSE(job->topology_required);
  EXPECT_FALSE(job->preemptible);
  EXPECT_EQ(job->preempt_retries, std::nullopt);
  EXPECT_EQ(job->nodes_min, 0);
}

TEST(ResolveJobInfoTest, JobWithoutParallelIsAGangOfOne) {
  absl::StatusOr<JobInfo> job = ResolveJobInfo(
      ReadJobEnv({{"CUSTOM_ENV_CI_NODE_TOTAL", "1"}}), Payload("lint"));

  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->group_name, "lint");
  EXPECT_EQ(job->member_index, 1);
  EXPECT_EQ(job->member_total, 1);
}

TEST(ResolveJobInfoTest, PipelineIdPrefersTrustedSources) {
  gitlab::JobPayload payload = Payload("train 2/4");
  const JobEnv forged = EnvWith({{"CUSTOM_ENV_CI_PIPELINE_ID", "666"}});
  EXPECT_EQ(ResolveJobInfo(forged, payload)->pipeline_id, 77);

  payload.pipeline_id.reset();  // A runner older than 19.
  payload.variables.push_back({"CI_PIPELINE_ID", "78"});
  EXPECT_EQ(ResolveJobInfo(forged, payload)->pipeline_id, 78);

  payload.variables.clear();
  EXPECT_EQ(ResolveJobInfo(forged, payload)->pipeline_id, 666);

  absl::StatusOr<JobInfo> none = ResolveJobInfo(EnvWith({}), payload);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(none.status().message(), HasSubstr("pipeline"));
}

TEST(ResolveJobInfoTest, PipelineIdZeroMeansUnknown) {
  // A runner >= 19 sends 0 when GitLab did not fill the field.
  gitlab::JobPayload payload = Payload("train 2/4");
  payload.pipeline_id = 0;
  payload.variables.push_back({"CI_PIPELINE_ID", "78"});
  EXPECT_EQ(ResolveJobInfo(EnvWith({}), payload)->pipeline_id, 78);

  payload.variables.clear();
  absl::StatusOr<JobInfo> none = ResolveJobInfo(EnvWith({}), payload);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(none.status().message(), HasSubstr("absent or 0"));

  payload.pipeline_id = -3;
  EXPECT_THAT(ResolveJobInfo(EnvWith({}), payload).status().message(),
              HasSubstr("job_info.pipeline_id must be a positive integer"));
}

TEST(ResolveJobInfoTest, RefusesJobVariablesThatWouldOverrideTheContract) {
  absl::StatusOr<JobInfo> gpus = ResolveJobInfo(
      EnvWith({{"CUSTOM_ENV_CUDA_VISIBLE_DEVICES", "0"}}), Payload("t 2/4"));
  EXPECT_EQ(gpus.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      gpus.status().message(),
      HasSubstr("the job variable CUDA_VISIBLE_DEVICES would override"));
  // MASTER_PORT is gdt's only under the env launcher.
  EXPECT_TRUE(ResolveJobInfo(EnvWith({{"CUSTOM_ENV_MASTER_PORT", "1"}}),
                             Payload("t 2/4"))
                  .ok());
  EXPECT_FALSE(ResolveJobInfo(EnvWith({{"CUSTOM_ENV_MASTER_PORT", "1"},
                                       {"CUSTOM_ENV_GDT_LAUNCHER", "env"}}),
                              Payload("t 2/4"))
                   .ok());
  EXPECT_TRUE(ResolveJobInfo(EnvWith({{"CUSTOM_ENV_NCCL_DEBUG", "INFO"}}),
                             Payload("t 2/4"))
                  .ok());
}

struct BadInput {
  const char* key;
  const char* value;
  const char* named;  // What the one-line message must name.
};

void PrintTo(const BadInput& input, std::ostream* os) {
  *os << input.key << "=" << input.value;
}

class ResolveJobInfoBadInputTest : public ::testing::TestWithParam<BadInput> {};

TEST_P(ResolveJobInfoBadInputTest, IsAUserErrorNamingTheVariable) {
  const BadInput& input = GetParam();
  absl::StatusOr<JobInfo> job =
      ResolveJobInfo(EnvWith({{input.key, input.value}}), Payload("train 2/4"));

  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(job.status().message(), HasSubstr(input.named));
  EXPECT_EQ(job.status().message().find('\n'), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ResolveJobInfoBadInputTest,
    ::testing::Values(
        BadInput{"CUSTOM_ENV_CI_NODE_INDEX", "5", "CI_NODE_INDEX"},
        BadInput{"CUSTOM_ENV_CI_NODE_INDEX", "0", "CI_NODE_INDEX"},
        BadInput{"CUSTOM_ENV_CI_NODE_INDEX", "3", "disagree"},
        BadInput{"CUSTOM_ENV_CI_NODE_INDEX", "two", "CI_NODE_INDEX"},
        BadInput{"CUSTOM_ENV_CI_NODE_TOTAL", "four", "CI_NODE_TOTAL"},
        BadInput{"CUSTOM_ENV_CI_NODE_TOTAL", "8", "disagree"},
        BadInput{"CUSTOM_ENV_GDT_GPUS_PER_NODE", "-1", "GDT_GPUS_PER_NODE"},
        BadInput{"CUSTOM_ENV_GDT_GPUS_PER_NODE", "8x", "GDT_GPUS_PER_NODE"},
        BadInput{"CUSTOM_ENV_GDT_NPROC_PER_NODE", "0", "GDT_NPROC_PER_NODE"},
        BadInput{"CUSTOM_ENV_GDT_LAUNCHER", "mpirun", "mpirun"},
        BadInput{"CUSTOM_ENV_GDT_PRIORITY", "high", "GDT_PRIORITY"},
        BadInput{"CUSTOM_ENV_GDT_PRIORITY", "5000", "GDT_PRIORITY"},
        BadInput{"CUSTOM_ENV_GDT_TOPOLOGY_MODE", "strict", "strict"},
        BadInput{"CUSTOM_ENV_GDT_PREEMPTIBLE", "yes", "GDT_PREEMPTIBLE"},
        BadInput{"CUSTOM_ENV_GDT_PREEMPT_RETRIES", "3", "GDT_PREEMPT_RETRIES"},
        BadInput{"CUSTOM_ENV_GDT_NODES_MIN", "5", "GDT_NODES_MIN"},
        BadInput{"CUSTOM_ENV_GDT_NODES_MIN", "0", "GDT_NODES_MIN"},
        BadInput{"CUSTOM_ENV_GDT_NODES_MAX", "8", "GDT_NODES_MAX"},
        BadInput{"CUSTOM_ENV_GDT_TOPOLOGY_SAME", "rack\xff",
                 "GDT_TOPOLOGY_SAME is not valid UTF-8: 'rack\\xff'"},
        BadInput{"CUSTOM_ENV_CI_SERVER_URL", "https://gitlab.\xc3",
                 "CI_SERVER_URL is not valid UTF-8"}));

// LoadJob decides the outcome kind: a broken payload is the runner's
// problem (system failure), a bad job the user's (build failure).
class LoadJobTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(dir_.empty()); }

  std::string WriteFile(const std::string& text) {
    const std::string path = dir_ + "/response.json";
    std::ofstream(path) << text;
    return path;
  }

  test::TempDir temp_;
  const std::string dir_ = temp_.path();
};

TEST_F(LoadJobTest, MissingResponseFileIsSystemFailure) {
  std::variant<JobInfo, Outcome> job =
      LoadJob(EnvWith({{"JOB_RESPONSE_FILE", dir_ + "/nonexistent.json"}}));

  ASSERT_TRUE(std::holds_alternative<Outcome>(job));
  EXPECT_EQ(std::get<Outcome>(job).kind, OutcomeKind::kSystemFailure);
}

TEST_F(LoadJobTest, UnsetResponseFileIsSystemFailure) {
  std::variant<JobInfo, Outcome> job = LoadJob(ReadJobEnv({}));

  ASSERT_TRUE(std::holds_alternative<Outcome>(job));
  EXPECT_EQ(std::get<Outcome>(job).kind, OutcomeKind::kSystemFailure);
  EXPECT_THAT(std::get<Outcome>(job).message, HasSubstr("JOB_RESPONSE_FILE"));
}

TEST_F(LoadJobTest, GarbledResponseFileIsSystemFailure) {
  std::variant<JobInfo, Outcome> job =
      LoadJob(EnvWith({{"JOB_RESPONSE_FILE", WriteFile("{\"id\": ")}}));

  ASSERT_TRUE(std::holds_alternative<Outcome>(job));
  EXPECT_EQ(std::get<Outcome>(job).kind, OutcomeKind::kSystemFailure);
}

TEST_F(LoadJobTest, BadNodeIndexIsUserError) {
  const std::string path =
      WriteFile(gitlab::SerializeJobPayload(Payload("train 2/4")));

  std::variant<JobInfo, Outcome> job = LoadJob(EnvWith(
      {{"JOB_RESPONSE_FILE", path}, {"CUSTOM_ENV_CI_NODE_INDEX", "9"}}));

  ASSERT_TRUE(std::holds_alternative<Outcome>(job));
  EXPECT_EQ(std::get<Outcome>(job).kind, OutcomeKind::kUserError);
  EXPECT_THAT(std::get<Outcome>(job).message, HasSubstr("CI_NODE_INDEX"));
}

TEST_F(LoadJobTest, GoodPayloadGivesJob) {
  const std::string path =
      WriteFile(gitlab::SerializeJobPayload(Payload("train 2/4")));

  std::variant<JobInfo, Outcome> job =
      LoadJob(EnvWith({{"JOB_RESPONSE_FILE", path}}));

  ASSERT_TRUE(std::holds_alternative<JobInfo>(job));
  EXPECT_EQ(std::get<JobInfo>(job).member_index, 2);
}

}  // namespace
}  // namespace gdt::executor
