#include "ci/run_local.h"

#include <filesystem>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/sha256.h"
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
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::Pair;

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

// The cache keys GitLab hands the runner: the string as written, or for
// `key:files` the prefix (else the entry's index) and the SHA-1 of the
// files' sorted blob ids at the commit ("default" when it has none), each
// with the suffix of a ref that is not protected, fallback keys too.
TEST(BuildPayloadsTest, CacheKeysAreComputedAsGitLabDoes) {
  TempDir dir;
  const std::string repo = dir.path();
  WriteTextFile(repo + "/Gemfile.lock", "gems\n");
  WriteTextFile(repo + "/yarn.lock", "yarn\n");
  std::string out;
  const auto git = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {"git",
                                     "-C",
                                     repo,
                                     "-c",
                                     "user.name=A",
                                     "-c",
                                     "user.email=a@example.com"};
    argv.insert(argv.end(), args.begin(), args.end());
    out.clear();
    absl::StatusOr<ExitStatus> status =
        RunCommand(argv, std::chrono::seconds(30), &out);
    return status.ok() && status->success();
  };
  ASSERT_TRUE(git({"init", "-q"})) << out;
  ASSERT_TRUE(git({"add", "-A"})) << out;
  ASSERT_TRUE(git({"commit", "-qm", "init"})) << out;
  ASSERT_TRUE(git({"rev-parse", "HEAD"})) << out;
  LocalPipeline pipeline;
  pipeline.sha = out.substr(0, 40);
  pipeline.checkout_dir = repo;
  ASSERT_TRUE(git({"rev-parse", "HEAD:Gemfile.lock"})) << out;
  const std::string gems = out.substr(0, 40);
  ASSERT_TRUE(git({"rev-parse", "HEAD:yarn.lock"})) << out;
  const std::string yarn = out.substr(0, 40);

  CiJob job;
  job.name = "build";
  job.script = {"true"};
  CiCache plain;  // key: default
  plain.paths = {"vendor/"};
  plain.fallback_keys = {"main", "$CI_DEFAULT_BRANCH"};
  CiCache files;
  files.key_files = std::vector<std::string>{"yarn.lock", "Gemfile.lock"};
  CiCache prefixed;
  prefixed.key_files = std::vector<std::string>{"*.lock"};
  prefixed.key_prefix = "deps";
  CiCache missing;
  missing.key_files = std::vector<std::string>{"no-such.lock"};
  missing.policy = "pull";
  missing.when = "always";
  missing.untracked = true;
  CiCache commits;
  commits.key_files = std::vector<std::string>{};
  commits.key_files_commits = {"yarn.lock"};
  commits.key_prefix = "c";
  job.caches = {plain, files, prefixed, missing, commits};

  const std::vector<gitlab::JobPayload> payloads = BuildPayloads(job, pipeline);

  ASSERT_EQ(payloads.size(), 1u);
  const std::vector<gitlab::JobCache>& caches = payloads[0].caches;
  ASSERT_EQ(caches.size(), 5u);
  const std::string digest =
      Sha1Hex(std::min(gems, yarn) + "-" + std::max(gems, yarn));
  EXPECT_EQ(caches[0].key, "default-non_protected");
  EXPECT_THAT(
      caches[0].fallback_keys,
      ElementsAre("main-non_protected", "$CI_DEFAULT_BRANCH-non_protected"));
  EXPECT_EQ(caches[1].key, "1-" + digest + "-non_protected");
  EXPECT_EQ(caches[2].key, "deps-" + digest + "-non_protected");
  EXPECT_EQ(caches[3].key, "3-default-non_protected");
  // key:files_commits: the last commit that changed each file.
  ASSERT_TRUE(git({"log", "-1", "--format=%H", "--", "yarn.lock"})) << out;
  EXPECT_EQ(caches[4].key,
            "c-" + Sha1Hex(out.substr(0, 40)) + "-non_protected");
  EXPECT_EQ(caches[3].policy, "pull");
  EXPECT_EQ(caches[3].when, "always");
  EXPECT_TRUE(caches[3].untracked);
  EXPECT_EQ(caches[0].policy, "pull-push");
  EXPECT_EQ(caches[0].when, "on_success");
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

// The job's `services:` go into every member's payload as GitLab sends
// them, and the response file the execs read holds them.
TEST(BuildPayloadsTest, ServicesAreSentAsGitLabSendsThem) {
  CiJob job;
  job.name = "train";
  job.parallel = 2;
  job.script = {"true"};
  job.services = {{"postgres:16", "db", {"run.sh"}, {"postgres"}, {{"A", "1"}}},
                  {"redis:7", "", {}, {}, {}}};
  LocalPipeline pipeline;

  const std::vector<gitlab::JobPayload> payloads = BuildPayloads(job, pipeline);

  ASSERT_EQ(payloads.size(), 2u);
  for (const gitlab::JobPayload& payload : payloads) {
    const std::string json = gitlab::SerializeJobPayload(payload);
    EXPECT_THAT(json, HasSubstr(R"("services":[{"name":"postgres:16",)"
                                R"("alias":"db","command":["postgres"],)"
                                R"("entrypoint":["run.sh"],)"
                                R"("variables":[{"key":"A","value":"1"}]},)"
                                R"({"name":"redis:7"}])"));
    absl::StatusOr<gitlab::JobPayload> back = gitlab::ParseJobPayload(json);
    ASSERT_TRUE(back.ok()) << back.status();
    ASSERT_EQ(back->services.size(), 2u);
    EXPECT_EQ(back->services[0].alias, "db");
    EXPECT_THAT(back->services[0].variables, ElementsAre(Pair("A", "1")));
    EXPECT_EQ(back->services[1].name, "redis:7");
  }
}

// `hooks:` go to the runner as GitLab sends them, and read back.
TEST(BuildPayloadsTest, HooksAreSentAsGitLabSendsThem) {
  CiJob job;
  job.name = "train";
  job.script = {"true"};
  job.pre_get_sources_script = {"echo pre"};
  job.post_get_sources_script = {"echo a", "echo b"};
  LocalPipeline pipeline;

  const gitlab::JobPayload payload = BuildPayloads(job, pipeline)[0];
  const std::string json = gitlab::SerializeJobPayload(payload);

  EXPECT_THAT(json, HasSubstr(R"("hooks":[{"name":"pre_get_sources_script",)"
                              R"("script":["echo pre"]},)"
                              R"({"name":"post_get_sources_script",)"
                              R"("script":["echo a","echo b"]}])"));
  absl::StatusOr<gitlab::JobPayload> back = gitlab::ParseJobPayload(json);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->hooks.size(), 2u);
  EXPECT_EQ(back->hooks[1].name, "post_get_sources_script");
  EXPECT_THAT(back->hooks[1].script, ElementsAre("echo a", "echo b"));
}

// With a signer, every member gets its own ID token for its job id, as
// GitLab issues them; the key's JWKS verifies them.
// The commit's variables as GitLab sets them: the description is the
// message without its title, unless the title is 100 characters or more.
TEST(BuildPayloadsTest, CommitVariablesFollowGitLab) {
  CiJob job;
  job.name = "train";
  job.script = {"true"};
  LocalPipeline pipeline;
  pipeline.pipeline_id = 77;
  EXPECT_EQ(
      VariablesOf(BuildPayloads(job, pipeline)[0]).count("CI_COMMIT_MESSAGE"),
      0u);  // Outside git: not set.
  pipeline.commit_message = "Tune the loader\n\nFaster by 2x.";
  pipeline.commit_author = "Ada <ada@example.com>";
  pipeline.commit_timestamp = "2026-11-30T08:00:00+00:00";
  std::map<std::string, std::string> vars =
      VariablesOf(BuildPayloads(job, pipeline)[0]);
  EXPECT_EQ(vars.at("CI_COMMIT_TITLE"), "Tune the loader");
  EXPECT_EQ(vars.at("CI_COMMIT_DESCRIPTION"), "\nFaster by 2x.");
  EXPECT_EQ(vars.at("CI_COMMIT_AUTHOR"), "Ada <ada@example.com>");
  EXPECT_EQ(vars.at("CI_COMMIT_TIMESTAMP"), "2026-11-30T08:00:00+00:00");
  pipeline.commit_message = std::string(100, 't') + "\nbody";
  vars = VariablesOf(BuildPayloads(job, pipeline)[0]);
  EXPECT_EQ(vars.at("CI_COMMIT_DESCRIPTION"), pipeline.commit_message);
}

// The server's, project's and commit's variables GitLab sends every job,
// from the server URL as GitLab splits it.
TEST(BuildPayloadsTest, ServerProjectAndCommitVariablesFollowGitLab) {
  CiJob job;
  job.name = "train";
  job.script = {"true"};
  LocalPipeline pipeline;
  pipeline.pipeline_id = 77;
  pipeline.project_name = "model";
  pipeline.namespace_path = "ml/vision";
  std::map<std::string, std::string> vars =
      VariablesOf(BuildPayloads(job, pipeline)[0]);
  EXPECT_EQ(vars.at("CI_SERVER_HOST"), "gitlab.local");
  EXPECT_EQ(vars.at("CI_SERVER_PORT"), "80");
  EXPECT_EQ(vars.at("CI_SERVER_PROTOCOL"), "http");
  EXPECT_EQ(vars.at("CI_SERVER_FQDN"), "gitlab.local");
  EXPECT_EQ(vars.at("CI_SERVER_NAME"), "GitLab");
  EXPECT_EQ(vars.at("CI_SERVER_SHELL_SSH_HOST"), "gitlab.local");
  EXPECT_EQ(vars.at("CI_SERVER_SHELL_SSH_PORT"), "22");
  EXPECT_EQ(vars.at("CI_PROJECT_ROOT_NAMESPACE"), "ml");
  EXPECT_EQ(vars.at("CI_PROJECT_TITLE"), "model");
  EXPECT_EQ(vars.at("CI_PROJECT_VISIBILITY"), "private");
  EXPECT_EQ(vars.at("CI_CONFIG_PATH"), ".gitlab-ci.yml");
  EXPECT_EQ(vars.at("CI_COMMIT_BEFORE_SHA"), std::string(40, '0'));
  EXPECT_EQ(vars.at("CI_COMMIT_REF_PROTECTED"), "false");

  // The job's image goes with the payload (image.name).
  EXPECT_EQ(BuildPayloads(job, pipeline)[0].image, "");
  job.image = "python:3.12";
  EXPECT_EQ(BuildPayloads(job, pipeline)[0].image, "python:3.12");

  pipeline.server_url = "https://gitlab.example.com:8443";
  vars = VariablesOf(BuildPayloads(job, pipeline)[0]);
  EXPECT_EQ(vars.at("CI_SERVER_HOST"), "gitlab.example.com");
  EXPECT_EQ(vars.at("CI_SERVER_PORT"), "8443");
  EXPECT_EQ(vars.at("CI_SERVER_PROTOCOL"), "https");
  EXPECT_EQ(vars.at("CI_SERVER_FQDN"), "gitlab.example.com:8443");
  EXPECT_EQ(vars.at("CI_SERVER_URL"), "https://gitlab.example.com:8443");
}

// The server's release and what every GitLab sends whatever it offers;
// run-local's server offers no registry, pages or dependency proxy, so
// their variables are not sent, as from a GitLab with them off.
TEST(BuildPayloadsTest, ServerVersionAndRegistryVariablesFollowGitLab) {
  CiJob job;
  job.name = "train";
  job.script = {"true"};
  LocalPipeline pipeline;
  pipeline.server_url = "https://gitlab.example.com:8443";

  const gitlab::JobPayload payload = BuildPayloads(job, pipeline)[0];

  const std::map<std::string, std::string> vars = VariablesOf(payload);
  EXPECT_EQ(vars.at("CI_SERVER_VERSION"), "19.3.0");
  EXPECT_EQ(vars.at("CI_SERVER_VERSION_MAJOR"), "19");
  EXPECT_EQ(vars.at("CI_SERVER_VERSION_MINOR"), "3");
  EXPECT_EQ(vars.at("CI_SERVER_VERSION_PATCH"), "0");
  EXPECT_EQ(vars.at("CI_SERVER_REVISION"), "gdtlocal");
  EXPECT_EQ(vars.at("CI_API_GRAPHQL_URL"),
            "https://gitlab.example.com:8443/api/graphql");
  EXPECT_EQ(vars.at("CI_TEMPLATE_REGISTRY_HOST"), "registry.gitlab.com");
  EXPECT_EQ(vars.at("CI_REGISTRY_USER"), "gitlab-ci-token");
  EXPECT_EQ(vars.at("CI_REGISTRY_PASSWORD"), payload.token);
  for (const gitlab::JobVariable& v : payload.variables) {
    if (v.key != "CI_REGISTRY_PASSWORD") continue;
    EXPECT_TRUE(v.masked);
    EXPECT_FALSE(v.is_public);
  }
  for (const char* absent :
       {"CI_REGISTRY", "CI_REGISTRY_IMAGE", "CI_PAGES_DOMAIN", "CI_PAGES_URL",
        "CI_PAGES_HOSTNAME", "CI_DEPENDENCY_PROXY_SERVER",
        "CI_DEPENDENCY_PROXY_USER", "CI_DEPENDENCY_PROXY_PASSWORD"}) {
    EXPECT_EQ(vars.count(absent), 0u) << absent;
  }
}

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

// git_info.depth: GIT_DEPTH as GitLab reads it (Ruby's to_i), else 20.
TEST(BuildPayloadsTest, GitDepthComesFromGitDepthAsGitLabReadsIt) {
  CiJob job;
  job.name = "lint";
  job.script = {"make lint"};
  LocalPipeline pipeline;
  pipeline.pipeline_id = 5;
  pipeline.project_name = "p";
  EXPECT_EQ(BuildPayloads(job, pipeline)[0].depth, 20);

  for (const auto& [text, depth] : std::vector<std::pair<std::string, int64_t>>{
           {"5", 5}, {"0", 0}, {" 1_0x", 10}, {"none", 0}, {"-3", -3}}) {
    job.variables = {{"GIT_DEPTH", "50"}};
    pipeline.pipeline_variables = {{"GIT_DEPTH", text}};
    EXPECT_EQ(BuildPayloads(job, pipeline)[0].depth, depth) << text;
  }
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
    // The jobs of a stage run at once: like gdt-executor, the fake's
    // config_exec gives each job its own builds dir.
    setenv("FAKE_BUILDS_ROOT", (dir_.path() + "/builds").c_str(), 1);
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

// The runner's cache directory outlives a run: a second run-local of the
// job restores what the first one saved (`gdt-ci cache-archiver` and
// `cache-extractor`, called as a runner calls its own helper).
TEST_F(RunLocalTest, ASecondRunFindsTheCacheTheFirstMade) {
  WriteTextFile(project_ + "/.gitlab-ci.yml", R"(
deps:
  cache:
    key: deps
    paths: [vendor/]
  script:
    - cat vendor/dep.txt || echo empty cache
    - mkdir -p vendor && echo "from pipeline $CI_PIPELINE_ID" > vendor/dep.txt
)");
  options_.job_name = "deps";
  options_.runner_command = GDT_CI_BIN;
  std::ostringstream first;

  absl::StatusOr<RunLocalResult> result = RunLocal(options_, first, nullptr);

  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->success()) << first.str();
  EXPECT_THAT(first.str(), HasSubstr("[deps] empty cache\n"));
  EXPECT_THAT(first.str(), HasSubstr("[deps] Created cache\n"));
  EXPECT_TRUE(fs::exists(project_ + "/.gdt-run/cache/local/project/"
                                    "deps-non_protected/cache.zip"));

  options_.pipeline_id = 43;
  std::ostringstream second;
  result = RunLocal(options_, second, nullptr);

  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->success()) << second.str();
  EXPECT_THAT(second.str(), HasSubstr("[deps] Successfully extracted cache\n"));
  EXPECT_THAT(second.str(), HasSubstr("[deps] from pipeline 42\n"));
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
peer:
  stage: build
  script: test ! -e out
collect:
  stage: test
  script: cat out/part-2
)");
  setenv("FAKE_BUILDS_ROOT", (dir_.path() + "/builds").c_str(), 1);
  // A job of the same stage gets no artifacts (GitLab gives those of the
  // earlier stages); one of a later stage, without needs: or
  // dependencies:, gets them all.
  options_.job_name = "make";
  options_.later_jobs = {"peer", "collect"};
  std::ostringstream stages_out;
  absl::StatusOr<RunLocalResult> stages =
      RunLocal(options_, stages_out, nullptr);
  ASSERT_TRUE(stages.ok()) << stages.status();
  EXPECT_TRUE(stages->success()) << stages_out.str();
  EXPECT_THAT(stages_out.str(), HasSubstr("[collect] part 2\n"));
  options_.pipeline_id = 41;

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

  // A failed job skips the jobs of later stages.
  options_.job_name = "fail";
  options_.later_jobs = {"ship"};
  options_.pipeline_id = 43;
  std::ostringstream failed_out;
  result = RunLocal(options_, failed_out, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_FALSE(result->success());
  ASSERT_EQ(result->members.size(), 2u);
  EXPECT_EQ(result->members[0].name, "fail");
  EXPECT_EQ(result->members[1].StatusText(), "skipped");
}

// `artifacts:reports:dotenv`: the jobs that download a job's artifacts get
// its report's variables (every member's, in order, the later winning),
// over the YAML variables and under the pipeline's; `artifacts: false`
// gets none; a failed job's report is uploaded too.
TEST_F(RunLocalTest, DotenvReportsPassVariablesToLaterJobs) {
  WriteTextFile(project_ + "/.gitlab-ci.yml", R"(
stages: [prepare, train, report]
variables:
  DATASET_VERSION: from-yaml
  GREETING: from-yaml
prepare:
  stage: prepare
  parallel: 2
  script:
    - echo "DATASET_VERSION=v$CI_NODE_INDEX" > build.env
    - echo "MEMBER_$CI_NODE_INDEX=here" >> build.env
    - echo "GREETING=from-dotenv" >> build.env
  artifacts:
    reports:
      dotenv: build.env
flaky:
  stage: prepare
  allow_failure: true
  script:
    - echo "FLAKY=wrote it" > flaky.env
    - exit 1
  artifacts:
    reports: {dotenv: [flaky.env, missing.env]}
train:
  stage: train
  needs: [prepare, flaky]
  script:
    - echo "train sees $DATASET_VERSION $MEMBER_1 $MEMBER_2 $GREETING $FLAKY"
blind:
  stage: train
  needs: [{job: prepare, artifacts: false}]
  script:
    - echo "blind sees ${DATASET_VERSION} ${MEMBER_1:-nothing}"
)");
  // Each member builds in its own directory, as under gdt-executor.
  setenv("FAKE_BUILDS_ROOT", (dir_.path() + "/builds").c_str(), 1);
  options_.job_name = "prepare";
  options_.later_jobs = {"flaky", "train", "blind"};
  std::ostringstream out;

  absl::StatusOr<RunLocalResult> result = RunLocal(options_, out, nullptr);

  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->Status(), "passed with warnings") << out.str();
  EXPECT_THAT(out.str(),
              HasSubstr("[train] train sees v2 here here hi wrote it\n"));
  EXPECT_THAT(out.str(), HasSubstr("[blind] blind sees from-yaml nothing\n"));
  EXPECT_THAT(out.str(), HasSubstr("[flaky] WARNING: missing.env: no matching "
                                   "files"));
  // A report is not an archive: there is nothing to download.
  EXPECT_THAT(out.str(), Not(HasSubstr("Downloading artifacts")));
}

// A report GitLab would refuse fails the upload, and so the job, with one
// line saying why; the later jobs do not run.
TEST_F(RunLocalTest, ABadDotenvReportFailsTheJob) {
  WriteTextFile(project_ + "/.gitlab-ci.yml", R"(
stages: [prepare, train]
prepare:
  stage: prepare
  script:
    - printf 'A=1\nexport B=2\n' > build.env
  artifacts:
    reports:
      dotenv: build.env
train:
  stage: train
  script: echo "train ran"
)");
  options_.job_name = "prepare";
  options_.later_jobs = {"train"};
  std::ostringstream out;

  absl::StatusOr<RunLocalResult> result = RunLocal(options_, out, nullptr);

  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_FALSE(result->success());
  ASSERT_EQ(result->members.size(), 2u);
  EXPECT_EQ(result->members[0].result.failure_reason, "script_failure");
  EXPECT_THAT(out.str(),
              HasSubstr("[prepare] ERROR: Uploading artifacts as \"dotenv\" "
                        "to local store: GitLab would refuse it (400 Bad "
                        "Request): dotenv variable name 'export B' is not"));
  EXPECT_EQ(result->members[1].StatusText(), "skipped");
  EXPECT_THAT(out.str(), Not(HasSubstr("train ran")));
}

// The names, statuses and reasons of a run's members, in order.
std::vector<std::string> Rows(const RunLocalResult& result) {
  std::vector<std::string> rows;
  for (const MemberResult& m : result.members) {
    rows.push_back(m.name + ": " + m.StatusText() +
                   (m.skipped.empty() ? "" : " (" + m.skipped + ")"));
  }
  return rows;
}

// allow_failure: a failure it allows lets later stages run and the
// pipeline pass with warnings (exit 0); exit_codes allow only those codes.
TEST_F(RunLocalTest, AnAllowedFailureDoesNotStopThePipeline) {
  WriteTextFile(project_ + "/.gitlab-ci.yml", R"(
stages: [a, b]
flaky:
  stage: a
  allow_failure: true
  script: exit 1
coded:
  stage: a
  allow_failure: {exit_codes: [3]}
  script: exit $CODE
next:
  stage: b
  script: echo next ran
)");
  options_.job_name = "flaky";
  options_.later_jobs = {"coded", "next"};
  options_.vars = {"CODE=3"};
  std::ostringstream out;

  absl::StatusOr<RunLocalResult> result = RunLocal(options_, out, nullptr);

  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(Rows(*result),
              ElementsAre("flaky: failed (allowed)", "coded: failed (allowed)",
                          "next: success"));
  EXPECT_EQ(result->Status(), "passed with warnings");
  EXPECT_TRUE(result->success());
  EXPECT_THAT(out.str(), HasSubstr("[next] next ran\n"));
  const std::string summary = FormatSummary(*result, false);
  EXPECT_THAT(summary, HasSubstr("failed (allowed)  script_failure"));
  EXPECT_THAT(summary, HasSubstr("pipeline 42 passed with warnings\n"));
  EXPECT_EQ(nlohmann::json::parse(
                FormatSummary(*result, true))["members"][0]["allowed_failure"],
            true);

  // Another exit code is a failure: the next stage is skipped.
  options_.vars = {"CODE=4"};
  options_.pipeline_id = 43;
  std::ostringstream failed_out;
  result = RunLocal(options_, failed_out, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(Rows(*result),
              ElementsAre("flaky: failed (allowed)", "coded: failed",
                          "next: skipped (when: on_success: an earlier stage "
                          "failed)"));
  EXPECT_EQ(result->Status(), "failed");
  EXPECT_THAT(failed_out.str(),
              HasSubstr("[next] Skipped (when: on_success: an earlier stage "
                        "failed)\n"));
  EXPECT_THAT(failed_out.str(), Not(HasSubstr("next ran")));
}

// when: a later stage's on_success job is skipped after a failure,
// on_failure and always jobs run (in order); without a failure on_failure
// is skipped. A job with needs: looks only at the jobs it needs.
TEST_F(RunLocalTest, WhenDecidesWhichLaterJobsRun) {
  WriteTextFile(project_ + "/.gitlab-ci.yml", R"(
stages: [build, test, cleanup]
build:
  stage: build
  script: exit $BUILD_EXIT
docs:
  stage: build
  script: echo docs built
test:
  stage: test
  script: echo test ran
publish-docs:
  stage: test
  needs: [docs]
  script: echo docs published
notify:
  stage: cleanup
  when: on_failure
  script: echo notify ran
teardown:
  stage: cleanup
  when: always
  script: echo teardown ran
)");
  options_.job_name = "build";
  options_.later_jobs = {"docs", "test", "publish-docs", "notify", "teardown"};
  options_.vars = {"BUILD_EXIT=1"};
  std::ostringstream out;

  absl::StatusOr<RunLocalResult> result = RunLocal(options_, out, nullptr);

  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(
      Rows(*result),
      ElementsAre("build: failed", "docs: success",
                  "test: skipped (when: on_success: an earlier stage failed)",
                  "publish-docs: success", "notify: success",
                  "teardown: success"));
  EXPECT_EQ(result->Status(), "failed");
  const std::string text = out.str();
  // notify and teardown, one stage, start together after test's stage.
  EXPECT_LT(text.find("[test] Skipped"), text.find("[notify] notify ran"));
  EXPECT_LT(text.find("[test] Skipped"), text.find("[teardown] teardown ran"));
  // Skipped jobs keep their ids; the summary says why.
  EXPECT_EQ(result->members[2].job_id, result->members[1].job_id + 1);
  EXPECT_THAT(FormatSummary(*result, false),
              HasSubstr("skipped           when: on_success: an earlier "
                        "stage failed  -\n"));

  options_.vars = {"BUILD_EXIT=0"};
  options_.later_jobs = {"notify", "teardown"};
  options_.pipeline_id = 43;
  std::ostringstream passed_out;
  result = RunLocal(options_, passed_out, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(Rows(*result),
              ElementsAre("build: success",
                          "notify: skipped (when: on_failure: no failure in "
                          "an earlier stage)",
                          "teardown: success"));
  EXPECT_EQ(result->Status(), "passed");
}

// GitLab starts the jobs of a stage together: a job that waits for another
// job of its stage sees it run; a job that needs one of its stage starts
// once that one ended.
TEST_F(RunLocalTest, JobsOfAStageStartTogether) {
  WriteTextFile(project_ + "/.gitlab-ci.yml", R"(
stages: [build, test]
server:
  stage: test
  script:
    - for i in $(seq 200); do [ -e "$FLAGS/client" ] && break; sleep 0.05; done
    - test -e "$FLAGS/client"
    - touch "$FLAGS/server"
client:
  stage: test
  script:
    - touch "$FLAGS/client"
    - for i in $(seq 200); do [ -e "$FLAGS/server" ] && break; sleep 0.05; done
    - test -e "$FLAGS/server"
report:
  stage: test
  needs: [server]
  script: test -e "$FLAGS/server" && echo after the server
)");
  const std::string flags = dir_.path() + "/flags";
  fs::create_directories(flags);
  options_.vars = {"FLAGS=" + flags};
  options_.job_name = "server";
  options_.later_jobs = {"client", "report"};
  std::ostringstream out;

  absl::StatusOr<RunLocalResult> result = RunLocal(options_, out, nullptr);

  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(Rows(*result), ElementsAre("server: success", "client: success",
                                         "report: success"))
      << out.str();
  EXPECT_THAT(out.str(), HasSubstr("[report] after the server\n"));
  // Each job keeps its own id and log.
  EXPECT_LT(result->members[0].job_id, result->members[1].job_id);
  EXPECT_LT(result->members[1].job_id, result->members[2].job_id);
  EXPECT_THAT(ReadTextFile(result->members[1].log_path),
              HasSubstr("$ touch \"$FLAGS/client\""));
}

// rules: and workflow:rules decide which jobs GitLab creates, with the
// predefined variables of a push to the checkout's branch (run-local's
// pipeline) and the --var ones; the rule that matches sets when,
// allow_failure and variables.
TEST_F(RunLocalTest, RulesDecideWhichJobsGitLabCreates) {
  WriteTextFile(project_ + "/.gitlab-ci.yml", R"(
workflow:
  rules:
    - if: $CI_COMMIT_MESSAGE =~ /wip/
      when: never
    - when: always
      variables:
        FROM_WORKFLOW: wf
variables:
  MODE: full
train:
  script:
    - echo "train $MODE $FROM_WORKFLOW $EXTRA"
    - echo "title=$CI_COMMIT_TITLE by $CI_COMMIT_AUTHOR"
  rules:
    - if: $CI_PIPELINE_SOURCE == "merge_request_event"
      variables:
        MODE: quick
    - if: $CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH
      variables:
        EXTRA: on-default
mr-only:
  script: echo mr-only ran
  rules:
    - if: $CI_PIPELINE_SOURCE == "merge_request_event"
with-dockerfile:
  script: exit 4
  rules:
    - exists: [docker/**/Dockerfile]
      allow_failure: true
    - when: never
nightly:
  script: echo nightly ran
  rules:
    - if: $CI_PIPELINE_SOURCE == "schedule" || $FORCE_NIGHTLY
old-style:
  script: echo old-style ran
  only: [merge_requests]
  except:
    variables: [$SKIP_OLD]
)");
  options_.job_name = "train";
  options_.later_jobs = {"mr-only", "with-dockerfile", "nightly", "old-style"};
  options_.vars = {};
  std::ostringstream out;

  absl::StatusOr<RunLocalResult> result = RunLocal(options_, out, nullptr);

  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(
      Rows(*result),
      ElementsAre("train: success",
                  "mr-only: skipped (not created: rules: no rule matched)",
                  "with-dockerfile: skipped (not created: rules[1] has when: "
                  "never)",
                  "nightly: skipped (not created: rules: no rule matched)",
                  "old-style: skipped (not created: only: not this "
                  "pipeline)"));
  EXPECT_THAT(out.str(), HasSubstr("[train] train full wf on-default\n"));
  EXPECT_THAT(out.str(), HasSubstr("[mr-only] Skipped (not created: rules: "
                                   "no rule matched)\n"));
  EXPECT_EQ(result->Status(), "passed");

  // A merge request pipeline (set through --var), a Dockerfile in the
  // project (a git checkout now, whose ignored files a fetch would not
  // bring), and a variable that holds.
  fs::create_directories(project_ + "/docker/gpu");
  WriteTextFile(project_ + "/docker/gpu/Dockerfile", "FROM debian:12\n");
  std::string git_output;
  ASSERT_TRUE(RunCommand({"git", "init", "-q", project_},
                         std::chrono::seconds(30), &git_output)
                  .ok());
  WriteTextFile(project_ + "/.gitignore", ".gdt-run/\n");
  // A commit, whose message rules may test (CI_COMMIT_MESSAGE and friends).
  ASSERT_TRUE(
      RunCommand({"git", "-C", project_, "-c", "user.name=Ada", "-c",
                  "user.email=ada@example.com", "commit", "-q", "--allow-empty",
                  "-m", "Tune the loader", "-m", "No skip-train here."},
                 std::chrono::seconds(30), &git_output)
          .ok())
      << git_output;
  options_.vars = {"CI_PIPELINE_SOURCE=merge_request_event", "FORCE_NIGHTLY=1"};
  options_.pipeline_id = 43;
  std::ostringstream mr_out;
  result = RunLocal(options_, mr_out, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(Rows(*result),
              ElementsAre("train: success", "mr-only: success",
                          "with-dockerfile: failed (allowed)",
                          "nightly: success", "old-style: success"));
  EXPECT_THAT(mr_out.str(), HasSubstr("[train] train quick wf \n"));
  EXPECT_THAT(mr_out.str(), HasSubstr("[train] title=Tune the loader by Ada "
                                      "<ada@example.com>\n"));
  EXPECT_EQ(result->Status(), "passed with warnings");

  // workflow:rules that create no pipeline, and jobs none of which GitLab
  // would create: one line each, and nothing runs.
  options_.vars = {"CI_COMMIT_MESSAGE=wip: try"};
  options_.pipeline_id = 44;
  std::ostringstream none_out;
  result = RunLocal(options_, none_out, nullptr);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(result.status().message(),
              HasSubstr("GitLab would not create this pipeline "
                        "(workflow:rules[0] has when: never;"));
  options_.vars = {};
  options_.job_name = "mr-only";
  options_.later_jobs = {"nightly"};
  result = RunLocal(options_, none_out, nullptr);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(result.status().message(),
              HasSubstr("GitLab would create none of these jobs (mr-only: "
                        "rules: no rule matched; nightly: rules: no rule "
                        "matched;"));
  EXPECT_TRUE(none_out.str().empty());
  EXPECT_FALSE(fs::exists(project_ + "/.gdt-run/44"));
}

// parallel:matrix: one job per combination, named and numbered as GitLab
// does, each with its variables (which its rules see), all judged as one
// stage; a later job that needs the matrix job needs every one of them.
TEST_F(RunLocalTest, AMatrixRunsAJobPerCombination) {
  WriteTextFile(project_ + "/.gitlab-ci.yml", R"yaml(
stages: [eval, report]
evaluate:
  stage: eval
  script: echo "eval $DATASET at $SCALE ($CI_NODE_INDEX/$CI_NODE_TOTAL)"
  parallel:
    matrix:
      - DATASET: [wiki, code]
        SCALE: [1, 8]
  rules:
    - if: $DATASET == "code" && $SCALE == "8"
      when: never
    - when: on_success
report:
  stage: report
  needs: [evaluate]
  script: echo report ran
)yaml");
  options_.job_name = "evaluate";
  options_.later_jobs = {"report"};
  std::ostringstream out;

  absl::StatusOr<RunLocalResult> result = RunLocal(options_, out, nullptr);

  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(Rows(*result),
              ElementsAre("evaluate: [wiki, 1]: success",
                          "evaluate: [wiki, 8]: success",
                          "evaluate: [code, 1]: success",
                          "evaluate: [code, 8]: skipped (not created: rules[0] "
                          "has when: never)",
                          "report: success"));
  EXPECT_THAT(out.str(),
              HasSubstr("[evaluate: [code, 1]] eval code at 1 (3/4)\n"));
  EXPECT_TRUE(fs::exists(result->work_dir + "/logs/evaluate---wiki--8.log"));
}

// retry: a member that fails for a reason retry: names runs again as a new
// job (the next id after the pipeline's jobs), with its own log, until it
// passes or max is spent; --no-retry runs it once.
TEST_F(RunLocalTest, RetryRunsAFailedMemberAgainAsANewJob) {
  WriteTextFile(project_ + "/.gitlab-ci.yml", R"(
flaky:
  parallel: 2
  retry: {max: 2, when: [script_failure]}
  script:
    - echo "attempt as job $CI_JOB_ID"
    - f="$COUNTS/$CI_NODE_INDEX"; n=$(cat "$f" 2>/dev/null || echo 0)
    - echo $((n + 1)) > "$f"
    - test "$CI_NODE_INDEX" = 1 || test "$n" -ge 1
always-fails:
  retry: 1
  script: exit 1
system-only:
  retry: {max: 1, when: [runner_system_failure]}
  script: exit 1
)");
  const std::string counts = dir_.path() + "/counts";
  fs::create_directories(counts);
  options_.job_name = "flaky";
  options_.vars = {"COUNTS=" + counts};
  std::ostringstream out;

  absl::StatusOr<RunLocalResult> result = RunLocal(options_, out, nullptr);

  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(Rows(*result),
              ElementsAre("flaky 1/2: success", "flaky 2/2: failed (retried)",
                          "flaky 2/2: success"));
  EXPECT_EQ(result->Status(), "passed");
  EXPECT_EQ(result->members[1].job_id, 42002);
  EXPECT_EQ(result->members[2].job_id, 42003);  // After the pipeline's jobs.
  EXPECT_THAT(out.str(), HasSubstr("[flaky 2/2] Job 42002 failed "
                                   "(script_failure); retry 1 of 2 as job "
                                   "42003\n"));
  EXPECT_THAT(out.str(), HasSubstr("[flaky 2/2] attempt as job 42003\n"));
  EXPECT_THAT(ReadTextFile(result->members[2].log_path),
              HasSubstr("attempt as job 42003"));
  EXPECT_NE(result->members[1].log_path, result->members[2].log_path);

  // Never passing: max retries, then the last attempt's failure stands;
  // with no_retry it runs once.
  options_.job_name = "always-fails";
  options_.pipeline_id = 43;
  std::ostringstream spent_out;
  result = RunLocal(options_, spent_out, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(Rows(*result), ElementsAre("always-fails: failed (retried)",
                                         "always-fails: failed"));
  EXPECT_EQ(result->Status(), "failed");
  options_.no_retry = true;
  options_.pipeline_id = 44;
  std::ostringstream once_out;
  result = RunLocal(options_, once_out, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(Rows(*result), ElementsAre("always-fails: failed"));

  // A script failure is not a runner_system_failure.
  options_.no_retry = false;
  options_.job_name = "system-only";
  options_.pipeline_id = 45;
  std::ostringstream system_out;
  result = RunLocal(options_, system_out, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(Rows(*result), ElementsAre("system-only: failed"));
  // An executor whose prepare exits SYSTEM_FAILURE_EXIT_CODE (2) at every
  // attempt is a runner_system_failure: retried.
  setenv("FAKE_PREPARE_EXIT", "2", 1);
  options_.preparation_retry_interval = std::chrono::milliseconds(10);
  options_.pipeline_id = 46;
  std::ostringstream prepare_out;
  result = RunLocal(options_, prepare_out, nullptr);
  unsetenv("FAKE_PREPARE_EXIT");
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(Rows(*result), ElementsAre("system-only: failed (retried)",
                                         "system-only: failed"))
      << prepare_out.str();
  EXPECT_EQ(result->members.back().result.failure_reason,
            "runner_system_failure");
}

// GitLab's rule (Gitlab::Ci::Build::AutoRetry): fewer than max retries, and
// the failure reason in when (default always, or none when exit_codes is
// given), or the script's exit code in exit_codes.
TEST(ShouldRetryTest, FollowsGitLabsAutoRetry) {
  JobResult script;
  script.status = JobStatus::kFailed;
  script.failure_reason = "script_failure";
  script.exit_code = 137;
  JobResult system = script;
  system.failure_reason = "runner_system_failure";
  system.exit_code = 1;
  JobResult canceled;
  canceled.status = JobStatus::kCanceled;

  CiRetry gang;  // What expand gives a gang job.
  gang.max = 2;
  gang.when =
      std::vector<std::string>{"runner_system_failure", "script_failure"};
  EXPECT_TRUE(ShouldRetry(gang, script, 0));
  EXPECT_TRUE(ShouldRetry(gang, system, 1));
  EXPECT_FALSE(ShouldRetry(gang, system, 2));
  EXPECT_FALSE(ShouldRetry(gang, canceled, 0));

  CiRetry plain;
  plain.max = 1;  // `retry: 1`: any failure.
  EXPECT_TRUE(ShouldRetry(plain, system, 0));
  EXPECT_FALSE(ShouldRetry(CiRetry{}, system, 0));

  CiRetry codes;
  codes.max = 2;
  codes.exit_codes = std::vector<int>{137};
  EXPECT_TRUE(ShouldRetry(codes, script, 0));
  EXPECT_FALSE(ShouldRetry(codes, system, 0));
  script.exit_code = 1;
  EXPECT_FALSE(ShouldRetry(codes, script, 0));
  codes.when = std::vector<std::string>{"runner_system_failure"};
  EXPECT_TRUE(ShouldRetry(codes, system, 0));
}

// A job whose template, default: and variables are in a locally included
// file runs with them, as GitLab merges them; a missing include is one line
// with its place.
TEST_F(RunLocalTest, RunsAJobWithWhatItsLocalIncludesGiveIt) {
  fs::create_directories(project_ + "/ci/more");
  WriteTextFile(project_ + "/ci/templates.yml",
                "include: ci/more/vars.yml\n"
                ".base:\n  script:\n"
                "    - echo \"from=$FROM shared=$SHARED\"\n"
                "  variables: {FROM: template}\n");
  WriteTextFile(project_ + "/ci/more/vars.yml",
                "variables: {SHARED: \"yes\"}\n");
  WriteTextFile(project_ + "/.gitlab-ci.yml",
                "include: 'ci/*.yml'\n"
                "job:\n  extends: .base\n  parallel: 2\n");
  options_.job_name = "job";
  std::ostringstream out;

  absl::StatusOr<RunLocalResult> result = RunLocal(options_, out, nullptr);

  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->success()) << out.str();
  EXPECT_THAT(out.str(), HasSubstr("[job 2/2] from=template shared=yes\n"));

  // An included workflow:rules decides on the pipeline with the included
  // top-level variables.
  WriteTextFile(project_ + "/ci/more/vars.yml",
                "variables: {SHARED: \"no\"}\n"
                "workflow:\n  rules:\n    - if: $SHARED == \"yes\"\n");
  options_.pipeline_id = 43;
  std::ostringstream filtered;
  absl::StatusOr<RunLocalResult> none = RunLocal(options_, filtered, nullptr);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(none.status().message(),
              HasSubstr("GitLab would not create this pipeline "
                        "(workflow:rules: no rule matched;"));

  WriteTextFile(project_ + "/.gitlab-ci.yml",
                "include: ci/gone.yml\njob:\n  script: [x]\n");
  std::ostringstream quiet;
  absl::StatusOr<RunLocalResult> missing = RunLocal(options_, quiet, nullptr);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(missing.status().message()),
            absl::StrCat(project_,
                         "/.gitlab-ci.yml:1:10: include: 'ci/gone.yml' does "
                         "not exist in the project ",
                         fs::canonical(project_).string()));
  EXPECT_TRUE(quiet.str().empty());
}

// The rules of include: entries see the pipeline's predefined variables
// (a push to the branch checked out, main outside git) and --var.
TEST_F(RunLocalTest, IncludeRulesSeeThePipelinesBranchAndSource) {
  fs::create_directories(project_ + "/ci");
  WriteTextFile(project_ + "/ci/main.yml", "variables: {WHERE: main}\n");
  WriteTextFile(project_ + "/ci/mr.yml", "variables: {WHERE: mr}\n");
  WriteTextFile(project_ + "/ci/tag.yml", "variables: {WHERE: tag}\n");
  WriteTextFile(
      project_ + "/.gitlab-ci.yml",
      "include:\n"
      "  - local: ci/main.yml\n    rules:\n"
      "      - if: $CI_COMMIT_BRANCH == \"main\"\n"
      "  - local: ci/mr.yml\n    rules:\n"
      "      - if: $CI_PIPELINE_SOURCE == \"merge_request_event\"\n"
      "  - local: ci/tag.yml\n    rules:\n      - if: $CI_COMMIT_TAG\n"
      "job:\n  script: [echo \"where=$WHERE\"]\n"
      "  rules: [{when: always}]\n");
  options_.job_name = "job";
  std::ostringstream out;
  absl::StatusOr<RunLocalResult> result = RunLocal(options_, out, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(out.str(), HasSubstr("] where=main\n"));

  options_.vars = {"CI_PIPELINE_SOURCE=merge_request_event"};
  options_.pipeline_id = 44;
  std::ostringstream mr;
  result = RunLocal(options_, mr, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(mr.str(), HasSubstr("] where=mr\n"));
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
// A job's timeout as GitLab sets it: its own `timeout:`, else the
// project's (--timeout, default 1 h), whichever is longer than the
// runner's maximum timeout (--maximum-timeout) cut to it. The job sees it
// as CI_JOB_TIMEOUT.
TEST_F(RunLocalTest, JobTimeoutIsTheJobsOrTheProjectsCutToTheRunnersMaximum) {
  WriteTextFile(project_ + "/.gitlab-ci.yml", R"(
own:
  timeout: 10m
  script: echo "timeout $CI_JOB_TIMEOUT"
plain:
  script: echo "timeout $CI_JOB_TIMEOUT"
)");
  const auto timeouts = [&] {
    options_.job_name = "own";
    options_.later_jobs = {"plain"};
    std::ostringstream out;
    absl::StatusOr<RunLocalResult> result = RunLocal(options_, out, nullptr);
    EXPECT_TRUE(result.ok()) << result.status();
    std::string found;
    for (const char* job : {"own", "plain"}) {
      const std::string prefix = absl::StrCat("[", job, "] timeout ");
      const size_t at = out.str().find(prefix);
      if (at == std::string::npos) return out.str();
      const size_t begin = at + prefix.size();
      absl::StrAppend(
          &found, found.empty() ? "" : " ",
          out.str().substr(begin, out.str().find('\n', begin) - begin));
    }
    return found;
  };

  EXPECT_EQ(timeouts(), "600 3600");
  options_.timeout_seconds = 120;
  EXPECT_EQ(timeouts(), "600 120");
  options_.timeout_seconds = 7200;
  EXPECT_EQ(timeouts(), "600 7200");
  options_.maximum_timeout_seconds = 300;
  EXPECT_EQ(timeouts(), "300 300");
  options_.maximum_timeout_seconds = 9000;
  EXPECT_EQ(timeouts(), "600 7200");
}

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
  options_.maximum_timeout_seconds = 0;
  EXPECT_EQ(message(), "--maximum-timeout must be from 1 to 316224000");
  options_.maximum_timeout_seconds.reset();
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

// What GitLab sends a job of a branch pipeline besides the variables
// above: the times it started and its pipeline was created (UTC, whole
// seconds), the project's remaining variables (empty where a project has
// nothing to say), the user's name and email, the job's tags, retries and
// trace context, and the commit variables as GitLab makes them from the
// stored message.
TEST(BuildPayloadsTest, BranchPipelineVariablesFollowGitLab) {
  CiJob job;
  job.name = "train";
  job.script = {"true"};
  job.tags = {"gpu", "h100"};
  LocalPipeline pipeline;
  pipeline.pipeline_id = 77;
  pipeline.project_name = "Model";
  pipeline.namespace_path = "ML/Vision";
  pipeline.now_unix = 1767225600;      // 2026-01-01T00:00:00Z
  pipeline.created_unix = 1767225590;  // Ten seconds earlier.
  pipeline.retry_count = 2;
  pipeline.user = "ada";
  pipeline.commit_timestamp = "2026-11-30T09:00:00+01:00";
  pipeline.commit_author = "Ada <ada@example.com>";
  pipeline.commit_message = "Tune the loader\r\n\nFaster.\n";

  const gitlab::JobPayload payload = BuildPayloads(job, pipeline)[0];

  std::map<std::string, std::string> vars = VariablesOf(payload);
  EXPECT_EQ(vars.at("CI_JOB_STARTED_AT"), "2026-01-01T00:00:00Z");
  EXPECT_EQ(vars.at("CI_JOB_STARTED_AT_SLUG"), "2026-01-01t00-00-00z");
  EXPECT_EQ(vars.at("CI_PIPELINE_CREATED_AT"), "2025-12-31T23:59:50Z");
  EXPECT_EQ(vars.at("CI_PIPELINE_NAME"), "");
  EXPECT_EQ(vars.at("CI_JOB_RETRY_COUNT"), "2");
  EXPECT_EQ(vars.at("CI_JOB_TAGS"), "[\"gpu\", \"h100\"]");
  EXPECT_EQ(vars.at("CI_TRACESTATE"),
            absl::StrCat("gitlab=pipeline:77;job:", payload.id));
  EXPECT_THAT(vars.at("CI_TRACEPARENT"),
              ::testing::MatchesRegex(
                  "00-0000000000000000000000000000004d-[0-9a-f]{16}-01"));
  EXPECT_EQ(vars.at("CI_PROJECT_NAMESPACE_ID"), "1");
  EXPECT_EQ(vars.at("CI_PROJECT_NAMESPACE_SLUG"), "ml-vision");
  EXPECT_EQ(vars.at("CI_PROJECT_ROOT_NAMESPACE_SLUG"), "ml");
  EXPECT_EQ(vars.at("CI_DEFAULT_BRANCH_SLUG"), "main");
  EXPECT_EQ(vars.at("CI_CONFIG_REF_URI"),
            "gitlab.local/ML/Vision/Model//.gitlab-ci.yml@refs/heads/main");
  for (const char* empty :
       {"CI_PROJECT_DESCRIPTION", "CI_PROJECT_TOPICS",
        "CI_PROJECT_REPOSITORY_LANGUAGES", "CI_PROJECT_CLASSIFICATION_LABEL",
        "GITLAB_FEATURES", "CI_COMMIT_USER_LOGIN"}) {
    ASSERT_EQ(vars.count(empty), 1u) << empty;
    EXPECT_EQ(vars.at(empty), "") << empty;
  }
  // The languages GitLab would detect can be given as a pipeline variable,
  // which the job sees over the predefined (empty) one.
  pipeline.pipeline_variables = {
      {"CI_PROJECT_REPOSITORY_LANGUAGES", "python,c++,shell"}};
  const gitlab::JobPayload given = BuildPayloads(job, pipeline)[0];
  std::vector<std::string> languages;
  for (const gitlab::JobVariable& v : given.variables) {
    if (v.key == "CI_PROJECT_REPOSITORY_LANGUAGES")
      languages.push_back(v.value);
  }
  EXPECT_THAT(languages, ::testing::ElementsAre("", "python,c++,shell"));
  // GitLab sends CI_TRACEPARENT; the runner adds no TRACEPARENT of its own.
  EXPECT_EQ(vars.count("TRACEPARENT"), 0u);
  EXPECT_EQ(vars.at("GITLAB_USER_LOGIN"), "ada");
  EXPECT_EQ(vars.at("GITLAB_USER_NAME"), "ada");
  EXPECT_EQ(vars.at("GITLAB_USER_EMAIL"), "ada@gitlab.local");
  EXPECT_EQ(vars.at("CI_COMMIT_MESSAGE"), "Tune the loader\r\n\nFaster.\n");
  EXPECT_EQ(vars.at("CI_COMMIT_MESSAGE_IS_TRUNCATED"), "false");
  EXPECT_EQ(vars.at("CI_COMMIT_TITLE"), "Tune the loader");
  EXPECT_EQ(vars.at("CI_COMMIT_DESCRIPTION"), "\nFaster.");
  EXPECT_EQ(vars.at("CI_COMMIT_TIMESTAMP"), "2026-11-30T09:00:00+01:00");
  // No tags: an empty list; the checkout's git user names the user.
  job.tags.clear();
  pipeline.user_name = "Ada Lovelace";
  pipeline.user_email = "ada@example.com";
  vars = VariablesOf(BuildPayloads(job, pipeline)[0]);
  EXPECT_EQ(vars.at("CI_JOB_TAGS"), "[]");
  EXPECT_EQ(vars.at("GITLAB_USER_NAME"), "Ada Lovelace");
  EXPECT_EQ(vars.at("GITLAB_USER_EMAIL"), "ada@example.com");

  // A one-line message has no description; a blank one is GitLab's "No
  // commit message"; a title counts characters, not bytes.
  pipeline.commit_message = "One line\n";
  vars = VariablesOf(BuildPayloads(job, pipeline)[0]);
  EXPECT_EQ(vars.at("CI_COMMIT_TITLE"), "One line");
  EXPECT_EQ(vars.at("CI_COMMIT_DESCRIPTION"), "");
  pipeline.commit_message = " \n";
  vars = VariablesOf(BuildPayloads(job, pipeline)[0]);
  EXPECT_EQ(vars.at("CI_COMMIT_TITLE"), "No commit message");
  EXPECT_EQ(vars.at("CI_COMMIT_DESCRIPTION"), "No commit message");
  std::string accented;
  for (int i = 0; i < 60; ++i) accented += "\xc3\xa9";  // 60 × é, 120 bytes.
  pipeline.commit_message = accented + "\nbody\n";
  vars = VariablesOf(BuildPayloads(job, pipeline)[0]);
  EXPECT_EQ(vars.at("CI_COMMIT_DESCRIPTION"), "body");
  // Past 100,000 bytes the message is cut, and says so.
  pipeline.commit_message = "Big\n" + std::string(100000, 'x');
  vars = VariablesOf(BuildPayloads(job, pipeline)[0]);
  EXPECT_EQ(vars.at("CI_COMMIT_MESSAGE_IS_TRUNCATED"), "true");
  EXPECT_EQ(vars.at("CI_COMMIT_MESSAGE").size(), 100000u);
  EXPECT_EQ(vars.at("CI_COMMIT_TITLE"), "Big");
  EXPECT_EQ(vars.at("CI_COMMIT_DESCRIPTION").size(), 100000u);
}

// A job run from a git checkout sees the commit as GitLab describes it
// (the committer's time in its own offset, the message as stored), the
// checkout's git user as the pipeline's user, the pipeline's name from
// workflow:name expanded, and its retries counted.
TEST_F(RunLocalTest, JobsSeeThePipelineAndCommitAsGitLabDescribesThem) {
  WriteTextFile(project_ + "/.gitlab-ci.yml", R"(
variables:
  MODEL: resnet
  LABEL: "$MODEL-%CI_COMMIT_REF_NAME%"
workflow:
  name: '  Train $LABEL by ${GITLAB_USER_LOGIN}$UNKNOWN  '
show:
  tags: [gpu]
  retry: {max: 1, when: [script_failure]}
  script:
    - echo "name=[$CI_PIPELINE_NAME] tags=$CI_JOB_TAGS retry=$CI_JOB_RETRY_COUNT"
    - echo "time=$CI_COMMIT_TIMESTAMP title=$CI_COMMIT_TITLE"
    - printf 'message=[%s]\n' "$CI_COMMIT_MESSAGE"
    - echo "user=$GITLAB_USER_NAME <$GITLAB_USER_EMAIL>"
    - echo "started=$CI_JOB_STARTED_AT created=$CI_PIPELINE_CREATED_AT"
    - test "$CI_JOB_RETRY_COUNT" = 1
)");
  const auto git = [this](std::vector<std::string> args) {
    std::vector<std::string> argv = {
        "env",
        "GIT_AUTHOR_DATE=2026-11-29T08:00:00+00:00",
        "GIT_COMMITTER_DATE=2026-11-30T09:30:00+02:00",
        "git",
        "-C",
        project_,
        "-c",
        "user.name=Ada Lovelace",
        "-c",
        "user.email=ada@example.com"};
    argv.insert(argv.end(), args.begin(), args.end());
    std::string output;
    absl::StatusOr<ExitStatus> status =
        RunCommand(argv, std::chrono::seconds(30), &output);
    return status.ok() && status->success() ? "" : output + "failed";
  };
  ASSERT_EQ(git({"init", "-q", "-b", "main"}), "");
  ASSERT_EQ(git({"config", "user.name", "Ada Lovelace"}), "");
  ASSERT_EQ(git({"config", "user.email", "ada@example.com"}), "");
  ASSERT_EQ(git({"add", "-A"}), "");
  ASSERT_EQ(git({"commit", "-q", "-m", "Train it\n\nWith care."}), "");
  options_.job_name = "show";
  options_.vars = {};
  std::ostringstream out;

  absl::StatusOr<RunLocalResult> result = RunLocal(options_, out, nullptr);

  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->success()) << out.str();
  const std::string user = getenv("USER") != nullptr ? getenv("USER") : "";
  EXPECT_THAT(out.str(),
              HasSubstr(absl::StrCat("[show] name=[Train resnet-main by ",
                                     user.empty() ? "local" : user,
                                     "] tags=[\"gpu\"] retry=1\n")));
  EXPECT_THAT(out.str(), HasSubstr("[show] name=[Train resnet-main by "));
  EXPECT_THAT(out.str(),
              HasSubstr("[show] time=2026-11-30T09:30:00+02:00 title=Train "
                        "it\n"));
  EXPECT_THAT(out.str(), HasSubstr("[show] message=[Train it\n"));
  EXPECT_THAT(out.str(), HasSubstr("[show] With care.\n[show] ]\n"));
  EXPECT_THAT(out.str(),
              HasSubstr("[show] user=Ada Lovelace <ada@example.com>\n"));
  EXPECT_THAT(
      out.str(),
      ::testing::ContainsRegex(
          "started=[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z "
          "created=[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z"));

  // A name that expands past 255 characters is GitLab's error.
  WriteTextFile(project_ + "/.gitlab-ci.yml",
                "variables: {LONG: " + std::string(250, 'n') +
                    "}\nworkflow: {name: \"$LONG $LONG\"}\n"
                    "show:\n  script: [\"true\"]\n");
  std::ostringstream refused;
  absl::StatusOr<RunLocalResult> too_long =
      RunLocal(options_, refused, nullptr);
  EXPECT_EQ(too_long.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_long.status().message(),
              HasSubstr("Name is too long (maximum is 255 characters)"));

  // GitLab does not expand a variable written with `expand: false`, in the
  // name nor in another variable that refers to it: `$JOB_VAR` reaches the
  // name as written (the runner then expands it in CI_PIPELINE_NAME with
  // the job's variables), where expanding it against the pipeline's
  // variables would have left nothing. An empty name is accepted.
  WriteTextFile(project_ + "/.gitlab-ci.yml", R"(
variables:
  RAW: {value: "$JOB_VAR", expand: false}
  VIA: "<$RAW>"
workflow:
  name: "$RAW $VIA"
show:
  variables: {JOB_VAR: jv}
  script: ['echo "raw name=[$CI_PIPELINE_NAME]"']
)");
  std::ostringstream raw_out;
  absl::StatusOr<RunLocalResult> raw = RunLocal(options_, raw_out, nullptr);
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_THAT(raw_out.str(), HasSubstr("[show] raw name=[jv <jv>]\n"));
  WriteTextFile(project_ + "/.gitlab-ci.yml",
                "workflow: {name: ''}\nshow:\n"
                "  script: ['echo \"empty name=[$CI_PIPELINE_NAME]\"']\n");
  std::ostringstream empty_out;
  absl::StatusOr<RunLocalResult> empty = RunLocal(options_, empty_out, nullptr);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_THAT(empty_out.str(), HasSubstr("[show] empty name=[]\n"));
}

}  // namespace
}  // namespace gdt::ci
