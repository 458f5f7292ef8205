#include "gitlab/job_payload.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/temp_dir.h"

namespace gdt::gitlab {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// A payload as a runner of release 19 writes it (with job_info.pipeline_id).
constexpr char kPayload[] =
    R"({"id": 1002, "token": "glcbt-TEST-1002", "allow_git_fetch": true,
 "job_info": {"name": "train 2/4", "stage": "test", "pipeline_id": 77,
              "project_id": 5, "project_name": "model", "project_full_path": "ml/model",
              "time_in_queue_seconds": 3},
 "git_info": {"repo_url": "https://gitlab-ci-token:glcbt-TEST-1002@gitlab.test/ml/model.git",
              "ref": "main", "sha": "0123456789abcdef0123456789abcdef01234567",
              "before_sha": "0000000000000000000000000000000000000000", "ref_type": "branch",
              "refspecs": ["+refs/heads/main:refs/remotes/origin/main"], "depth": 20, "protected": false},
 "runner_info": {"timeout": 3600},
 "variables": [{"key": "CI_JOB_ID", "value": "1002", "public": true, "file": false, "masked": false, "raw": false},
               {"key": "CI_PIPELINE_ID", "value": "77", "public": true},
               {"key": "CI_NODE_INDEX", "value": "2", "public": true},
               {"key": "CI_NODE_INDEX", "value": "3", "public": true},
               {"key": "CI_JOB_TOKEN", "value": "glcbt-TEST-1002", "public": false, "masked": true}],
 "steps": [{"name": "script", "script": ["python train.py"], "timeout": 3600, "when": "on_success", "allow_failure": false},
           {"name": "after_script", "script": ["echo done"], "timeout": 3600, "when": "always", "allow_failure": false}],
 "artifacts": [{"name": "", "untracked": false, "paths": ["ckpt/"], "exclude": [], "when": "on_success",
                "artifact_type": "archive", "artifact_format": "zip", "expire_in": "1 day"}],
 "cache": [{"key": "deps-protected", "untracked": false, "policy": "pull", "paths": ["vendor/"],
            "when": "on_success", "fallback_keys": ["main-protected"]}],
 "dependencies": [{"id": 990, "token": "t", "name": "build",
                                "artifacts_file": {"filename": "artifacts.zip", "size": 12}}],
 "services": [], "features": {"trace_sections": true}, "new_field": {"x": 1}})";

TEST(JobPayloadTest, ParsesTheRunnerPayload) {
  absl::StatusOr<JobPayload> payload = ParseJobPayload(kPayload);

  ASSERT_TRUE(payload.ok()) << payload.status();
  EXPECT_EQ(payload->id, 1002);
  EXPECT_EQ(payload->token, "glcbt-TEST-1002");
  EXPECT_EQ(payload->name, "train 2/4");
  EXPECT_EQ(payload->project_id, 5);
  EXPECT_EQ(payload->pipeline_id, 77);
  EXPECT_EQ(payload->project_full_path, "ml/model");
  EXPECT_EQ(payload->depth, 20);
  EXPECT_EQ(payload->timeout_seconds, 3600);
  EXPECT_THAT(payload->refspecs,
              ElementsAre("+refs/heads/main:refs/remotes/origin/main"));
  ASSERT_EQ(payload->steps.size(), 2u);
  EXPECT_THAT(payload->steps[0].script, ElementsAre("python train.py"));
  EXPECT_EQ(payload->steps[1].when, "always");
  ASSERT_EQ(payload->artifacts.size(), 1u);
  EXPECT_EQ(payload->artifacts[0].expire_in, "1 day");
  ASSERT_EQ(payload->dependencies.size(), 1u);
  EXPECT_EQ(payload->dependencies[0].artifacts_filename, "artifacts.zip");
  EXPECT_FALSE(payload->variables[4].is_public);
  EXPECT_TRUE(payload->variables[4].masked);
}

TEST(JobPayloadTest, LaterVariablesWin) {
  absl::StatusOr<JobPayload> payload = ParseJobPayload(kPayload);
  ASSERT_TRUE(payload.ok()) << payload.status();

  EXPECT_EQ(payload->Variable("CI_NODE_INDEX"), "3");
  EXPECT_EQ(payload->Variable("NOPE"), std::nullopt);
}

TEST(JobPayloadTest, SerialiseRoundTripsAsOneLine) {
  absl::StatusOr<JobPayload> payload = ParseJobPayload(kPayload);
  ASSERT_TRUE(payload.ok()) << payload.status();

  const std::string text = SerializeJobPayload(*payload);
  absl::StatusOr<JobPayload> again = ParseJobPayload(text);

  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(text.find('\n'), text.size() - 1);
  EXPECT_THAT(text, StartsWith(R"({"id":1002,"token":"glcbt-TEST-1002")"));
  EXPECT_EQ(SerializeJobPayload(*again), text);
  EXPECT_EQ(again->pipeline_id, 77);
  EXPECT_EQ(again->repo_url, payload->repo_url);
  EXPECT_EQ(again->variables.size(), payload->variables.size());
  EXPECT_EQ(again->dependencies[0].artifacts_size, 12);
  ASSERT_EQ(again->caches.size(), 1u);
  EXPECT_EQ(again->caches[0].key, "deps-protected");
  EXPECT_EQ(again->caches[0].policy, "pull");
  EXPECT_THAT(again->caches[0].paths, ElementsAre("vendor/"));
  EXPECT_THAT(again->caches[0].fallback_keys, ElementsAre("main-protected"));

  // The job's image, when it has one.
  EXPECT_EQ(text.find("\"image\""), std::string::npos);
  again->image = "python:3.12";
  absl::StatusOr<JobPayload> with_image =
      ParseJobPayload(SerializeJobPayload(*again));
  ASSERT_TRUE(with_image.ok()) << with_image.status();
  EXPECT_EQ(with_image->image, "python:3.12");
}

TEST(JobPayloadTest, PipelineIdIsWrittenOnlyWhenKnown) {
  JobPayload payload;
  payload.id = 1;
  payload.token = "t";
  payload.name = "a";
  payload.project_id = 2;

  const std::string text = SerializeJobPayload(payload);

  EXPECT_THAT(text, ::testing::Not(HasSubstr("pipeline_id")));
  absl::StatusOr<JobPayload> again = ParseJobPayload(text);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->pipeline_id.has_value());
}

TEST(JobPayloadTest, GoNullsAreEmpty) {
  absl::StatusOr<JobPayload> payload = ParseJobPayload(
      R"({"id": 1, "token": "t", "job_info": {"name": "a", "project_id": 2},
          "variables": null, "steps": null, "git_info": {"refspecs": null}})");

  ASSERT_TRUE(payload.ok()) << payload.status();
  EXPECT_TRUE(payload->variables.empty());
  EXPECT_TRUE(payload->refspecs.empty());
}

TEST(JobPayloadTest, BadInputNamesTheProblem) {
  struct Case {
    const char* json;
    const char* message;
  };
  const Case cases[] = {
      {"{not json", "JOB_RESPONSE_FILE is not valid JSON: "},
      {"[1]", "JOB_RESPONSE_FILE is not a JSON object"},
      {R"({"token": "t"})", "JOB_RESPONSE_FILE has no numeric 'id'"},
      {R"({"id": "7", "token": "t"})", "JOB_RESPONSE_FILE has no numeric 'id'"},
      {R"({"id": 7})", "JOB_RESPONSE_FILE has no string 'token'"},
      {R"({"id": 7, "token": "t", "job_info": {"project_id": 1}})",
       "JOB_RESPONSE_FILE has no string 'job_info.name'"},
      {R"({"id": 7, "token": "t", "job_info": {"name": "a"}})",
       "JOB_RESPONSE_FILE has no numeric 'job_info.project_id'"},
      {R"({"id": 7, "token": "t", "job_info": {"name": "a", "project_id": 1},
           "steps": [{"script": "x"}]})",
       "JOB_RESPONSE_FILE field 'steps[0].script' is not an array of strings"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<JobPayload> payload = ParseJobPayload(c.json);

    ASSERT_FALSE(payload.ok()) << c.json;
    EXPECT_EQ(payload.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(payload.status().message()), StartsWith(c.message))
        << c.json;
  }
}

TEST(JobPayloadTest, LoadReportsAMissingFile) {
  test::TempDir dir;
  const std::string path = dir.path() + "/response.json";

  absl::StatusOr<JobPayload> missing = LoadJobPayload(path);

  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(
      missing.status().message(),
      "cannot read JOB_RESPONSE_FILE " + path + ": No such file or directory");
}

TEST(JobPayloadTest, LoadParsesAFile) {
  test::TempDir dir;
  const std::string path = dir.path() + "/response.json";
  test::WriteTextFile(path, kPayload);

  absl::StatusOr<JobPayload> payload = LoadJobPayload(path);

  ASSERT_TRUE(payload.ok()) << payload.status();
  EXPECT_EQ(payload->id, 1002);
}

TEST(NodeSuffixTest, SplitsGroupIndexAndTotal) {
  absl::StatusOr<NodeSuffix> suffix = ParseNodeSuffix("train model 2/4");

  ASSERT_TRUE(suffix.ok()) << suffix.status();
  EXPECT_EQ(suffix->group_name, "train model");
  EXPECT_EQ(suffix->index, 2);
  EXPECT_EQ(suffix->total, 4);
}

TEST(NodeSuffixTest, RejectsNamesWithoutAValidSuffix) {
  for (const char* name : {"train", "train 5/4", "train 0/4", "train 1/0",
                           "train 1/x", " 1/2", "train 01/4", "train 1/4 "}) {
    absl::StatusOr<NodeSuffix> suffix = ParseNodeSuffix(name);

    EXPECT_EQ(suffix.status().code(), absl::StatusCode::kInvalidArgument)
        << name;
  }
}

}  // namespace
}  // namespace gdt::gitlab
