// End to end: an operator issues a host token with the admin
// token; the agent registers with it; a real run-local job then runs on
// that agent, which accepts only the member tokens the coordinator issued
// (the executor carries them from prepare to run and cleanup). gdt-ci
// run-local → gdt-executor → gdt-coord → gdt-agent on loopback.
#include <chrono>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gitlab/fake_id_token_issuer.h"
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

// A coordinator that verifies members by GitLab CI ID token against (a fake)
// GitLab's published keys: a job whose GDT_ID_TOKEN GitLab signed for it
// runs; tokens for another audience, expired, signed with another key,
// unsigned (alg none) or of another pipeline fail the member as a system
// failure with one line naming the reason, and no token reaches a log.
TEST(SecurityE2eTest, CoordinatorVerifiesMembersByIdToken) {
  std::unique_ptr<gitlab::FakeGitLabApi> gitlab = StartFakeGitLab({});
  ASSERT_NE(gitlab, nullptr);
  absl::StatusOr<gitlab::FakeIdTokenIssuer> keys =
      gitlab::FakeIdTokenIssuer::Create("gitlab-e2e");
  absl::StatusOr<gitlab::FakeIdTokenIssuer> impostor =
      gitlab::FakeIdTokenIssuer::Create("gitlab-e2e");
  ASSERT_TRUE(keys.ok() && impostor.ok());
  gitlab->SetJwks(keys->Jwks());

  GdtCluster cluster;
  cluster.SetCoordinatorExtraConfig(
      absl::StrCat("gitlab_url: ", gitlab->url(),
                   "\ngitlab_instance_url: http://gitlab.local"
                   "\nmember_verification: id_token\n"
                   "id_token_audience: https://gdt.e2e\n"));
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  AgentSpec agent;
  agent.name = "local";
  agent.cpu_slots = 2;
  ASSERT_TRUE(cluster.StartAgent(agent).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForHosts(1, seconds(20)).ok()) << cluster.Logs();
  // A gang of one: run-local's pipeline variables are the same for every
  // member, and a token names exactly one job.
  const std::string project = cluster.dir().Sub("project");
  std::filesystem::create_directories(project);
  WriteFile(project + "/.gitlab-ci.yml",
            "train:\n"
            "  timeout: 5 minutes\n"
            "  variables:\n"
            "    GDT_GPUS_PER_NODE: \"0\"\n"
            "    GDT_LAUNCHER: none\n"
            "  script:\n"
            "    - 'echo verified member ran'\n");
  const int64_t now = std::chrono::duration_cast<seconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  // Job 7001 of pipeline 7 (run-local: --first-job-id 7000), project 1.
  gitlab::FakeIdToken claims;
  claims.issuer = gitlab->url();
  claims.audience = "https://gdt.e2e";
  claims.project_id = 1;
  claims.pipeline_id = 7;
  claims.job_id = 7001;
  claims.issued_at = now - 5;
  claims.expires_at = now + 3600;
  // Runs the job with `token` as its GDT_ID_TOKEN (none when empty).
  const auto run = [&](const std::string& token) {
    // A refused member is a system failure, whose preparation the runner
    // tries three times; 0.2 s apart instead of its 3 s.
    std::vector<std::string> args = {"--pipeline-id",
                                     "7",
                                     "--first-job-id",
                                     "7000",
                                     "--preparation-retry-interval",
                                     "0.2"};
    if (!token.empty()) {
      args.push_back("--var");
      args.push_back(absl::StrCat("GDT_ID_TOKEN=", token));
    }
    CommandResult result =
        cluster.RunLocal(project, "train", args, seconds(90));
    const std::string log = ReadFile(cluster.run_dir() + "/logs/train.log");
    if (!token.empty()) {
      EXPECT_THAT(log, Not(HasSubstr(token)));
      EXPECT_THAT(cluster.Logs(), Not(HasSubstr(token)));
    }
    return std::make_pair(result, log);
  };
  const auto expect_refused = [&](const std::string& token,
                                  const std::string& line) {
    auto [result, log] = run(token);
    EXPECT_FALSE(result.status.success()) << result.output;
    EXPECT_THAT(log, HasSubstr(absl::StrCat("gdt: member rejected: ", line)))
        << log;
    EXPECT_THAT(log, HasSubstr("Job failed (system failure)")) << log;
    EXPECT_THAT(log, Not(HasSubstr("verified member ran")));
  };

  auto [good, good_log] = run(keys->Issue(claims));
  ASSERT_TRUE(good.status.success()) << good.output << cluster.Logs();
  EXPECT_THAT(good_log, HasSubstr("verified member ran\n"));
  // The keys were fetched once, not once per call of the member.
  EXPECT_EQ(gitlab->RequestCount("/oauth/discovery/keys"), 1);
  EXPECT_EQ(gitlab->RequestCount("/api/v4/job"), 0);

  gitlab::FakeIdToken other_audience = claims;
  other_audience.audience = "https://vault.example.com";
  expect_refused(keys->Issue(other_audience),
                 "ID token refused: aud 'https://vault.example.com' is not "
                 "'https://gdt.e2e'");
  gitlab::FakeIdToken expired = claims;
  expired.issued_at = now - 7200;
  expired.expires_at = now - 3600;
  expect_refused(keys->Issue(expired), "ID token refused: it expired ");
  expect_refused(impostor->Issue(claims),
                 "ID token refused: its signature does not verify with key "
                 "'gitlab-e2e'");
  expect_refused(gitlab::FakeIdTokenIssuer::Unsigned(
                     R"({"alg":"none","kid":"gitlab-e2e","typ":"JWT"})",
                     gitlab::FakeIdTokenIssuer::ClaimsJson(claims)),
                 "ID token refused: alg 'none' is not accepted (only RS256)");
  gitlab::FakeIdToken other_pipeline = claims;
  other_pipeline.pipeline_id = 9;
  expect_refused(keys->Issue(other_pipeline),
                 "CI_PIPELINE_ID 7 disagrees with the job's ID token, which "
                 "says 9 for job 7001");
  auto [missing, missing_log] = run("");
  EXPECT_FALSE(missing.status.success());
  EXPECT_THAT(missing_log,
              HasSubstr("gdt: member rejected: no ID token; this coordinator "
                        "verifies members by GitLab ID token: give the job "
                        "`id_tokens: GDT_ID_TOKEN: aud: https://gdt.e2e`"))
      << missing_log;
}

// A 2-member gang whose jobs declare `id_tokens:`: run-local issues each
// member its own token as GitLab would (--id-token-key), the coordinator
// checks them against the keys the fake GitLab publishes, and the gang
// runs. Tokens signed with a key GitLab does not publish fail each member
// with one line.
TEST(SecurityE2eTest, GangWithIdTokensIssuedByRunLocal) {
  std::unique_ptr<gitlab::FakeGitLabApi> gitlab = StartFakeGitLab({});
  ASSERT_NE(gitlab, nullptr);
  absl::StatusOr<gitlab::FakeIdTokenIssuer> keys =
      gitlab::FakeIdTokenIssuer::Create("unused");
  absl::StatusOr<gitlab::FakeIdTokenIssuer> other =
      gitlab::FakeIdTokenIssuer::Create("unused");
  ASSERT_TRUE(keys.ok() && other.ok());

  GdtCluster cluster;
  const std::string published_key = cluster.dir().Sub("gitlab-key.pem");
  const std::string unpublished_key = cluster.dir().Sub("other-key.pem");
  WriteFile(published_key, keys->PrivateKeyPem());
  WriteFile(unpublished_key, other->PrivateKeyPem());
  absl::StatusOr<gitlab::IdTokenSigner> signer =
      gitlab::IdTokenSigner::FromPrivateKeyPem(keys->PrivateKeyPem());
  ASSERT_TRUE(signer.ok());
  gitlab->SetJwks(signer->Jwks());  // Published under run-local's kid.
  // run-local stands in for the GitLab at http://gitlab.local.
  cluster.SetCoordinatorExtraConfig(
      absl::StrCat("gitlab_url: http://gitlab.local\n"
                   "member_verification: id_token\n"
                   "id_token_audience: https://gdt.e2e\n"
                   "jwks_refresh_seconds: 2\n"
                   "jwks_url: ",
                   gitlab->url(), "/oauth/discovery/keys\n"));
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  AgentSpec agent;
  agent.name = "local";
  agent.cpu_slots = 2;
  ASSERT_TRUE(cluster.StartAgent(agent).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForHosts(1, seconds(20)).ok()) << cluster.Logs();
  const std::string project = cluster.dir().Sub("project");
  std::filesystem::create_directories(project);
  WriteFile(project + "/.gitlab-ci.yml",
            std::string("default:\n"
                        "  id_tokens:\n"
                        "    GDT_ID_TOKEN:\n"
                        "      aud: https://gdt.e2e\n") +
                GangJobYaml({.script = "echo member $CI_NODE_INDEX ran"}));
  const auto member_log = [&](int index) {
    return ReadFile(
        absl::StrCat(cluster.run_dir(), "/logs/train-", index, "-2.log"));
  };

  CommandResult good = cluster.RunLocal(
      project, "train", {"--id-token-key", published_key}, seconds(90));
  ASSERT_TRUE(good.status.success()) << good.output << cluster.Logs();
  for (int index = 1; index <= 2; ++index) {
    EXPECT_THAT(member_log(index),
                HasSubstr(absl::StrCat("member ", index, " ran\n")));
  }
  EXPECT_EQ(gitlab->RequestCount("/oauth/discovery/keys"), 1);

  // The unknown key id is retried until the keys may be fetched again (at
  // most every jwks_refresh_seconds); keys fetched after the tokens then
  // refuse them.
  CommandResult bad = cluster.RunLocal(
      project, "train", {"--id-token-key", unpublished_key}, seconds(180));
  EXPECT_FALSE(bad.status.success()) << bad.output;
  for (int index = 1; index <= 2; ++index) {
    const std::string log = member_log(index);
    EXPECT_THAT(log, HasSubstr("gdt: member rejected: ID token refused: no "
                               "key '"))
        << log;
    EXPECT_THAT(log, HasSubstr("Job failed (system failure)")) << log;
    EXPECT_THAT(log, Not(HasSubstr(" ran\n")));
  }
  EXPECT_THAT(cluster.Logs(), Not(HasSubstr("eyJ")));  // No token logged.
}

// The coordinator checks every member's CI job token with (a fake) GitLab:
// a pipeline GitLab confirms runs; a member whose claims disagree with
// GitLab's record, and one whose token GitLab refuses (401), fail as system
// failures with the reason in their job logs.
TEST(SecurityE2eTest, CoordinatorVerifiesMembersWithGitLab) {
  std::unique_ptr<gitlab::FakeGitLabApi> gitlab = StartFakeGitLab({
      RunLocalJob(7001, "train 1/2", 7), RunLocalJob(7002, "train 2/2", 7),
      RunLocalJob(8001, "train 1/2", 9),  // GitLab: pipeline 9, not 8.
      RunLocalJob(8002, "train 2/2", 8, /*running=*/false),  // Finished: 401.
  });
  ASSERT_NE(gitlab, nullptr);

  GdtCluster cluster;
  cluster.SetCoordinatorExtraConfig(
      absl::StrCat("gitlab_url: ", gitlab->url(),
                   "\ngitlab_instance_url: http://gitlab.local\n"));
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  AgentSpec agent;
  agent.name = "local";
  agent.cpu_slots = 2;
  ASSERT_TRUE(cluster.StartAgent(agent).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForHosts(1, seconds(20)).ok()) << cluster.Logs();
  const std::string project =
      MakeShellProject(cluster.dir(), "echo member $CI_NODE_INDEX ran");
  const auto member_log = [&](int index) {
    return ReadFile(
        absl::StrCat(cluster.run_dir(), "/logs/train-", index, "-2.log"));
  };

  CommandResult verified = cluster.RunLocal(
      project, "train", {"--pipeline-id", "7", "--first-job-id", "7000"},
      seconds(90));
  ASSERT_TRUE(verified.status.success()) << verified.output << cluster.Logs();
  EXPECT_THAT(member_log(2), HasSubstr("member 2 ran\n"));

  CommandResult rejected =
      cluster.RunLocal(project, "train",
                       {"--pipeline-id", "8", "--first-job-id", "8000",
                        "--preparation-retry-interval", "0.2"},
                       seconds(90));
  EXPECT_FALSE(rejected.status.success()) << rejected.output;
  const std::string log1 = member_log(1);
  EXPECT_THAT(log1,
              HasSubstr("gdt: member rejected: CI_PIPELINE_ID 8 disagrees with "
                        "GitLab, which says 9 for job 8001"))
      << log1;
  EXPECT_THAT(log1, HasSubstr("Job failed (system failure)")) << log1;
  EXPECT_THAT(log1, Not(HasSubstr("member 1 ran")));
  const std::string log2 = member_log(2);
  EXPECT_THAT(log2, HasSubstr("gdt: member rejected: GitLab refused the job "
                              "token"))
      << log2;
  EXPECT_THAT(log2, HasSubstr("HTTP 401")) << log2;
  EXPECT_THAT(log2, HasSubstr("Job failed (system failure)")) << log2;
  EXPECT_THAT(log2, Not(HasSubstr("glcbt-local-8002")));
  EXPECT_THAT(cluster.Logs(), Not(HasSubstr("glcbt-local-")));
}

TEST(SecurityE2eTest, TokenProtectedAgentRunsTheAdmittedMembersJob) {
  GdtCluster cluster;
  const std::string admin = cluster.dir().Sub("admin.token");
  WriteFile(admin, "e2e-admin-secret\n");
  cluster.SetCoordinatorExtraConfig(absl::StrCat(
      "admin_token_file: ", admin, "\nrequire_host_tokens: true\n"));
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  const std::string gdt_coord = BinaryPath("gdt-coord");
  const std::string endpoint = cluster.coordinator_endpoint();

  // Without the admin token the operator gets one line and exit code 1.
  CommandResult refused = RunProcess({gdt_coord, "hosts", "token", "create",
                                      "local", "--coordinator", endpoint},
                                     {}, seconds(20));
  EXPECT_EQ(refused.status.code(), 1) << refused.output;
  EXPECT_EQ(refused.output,
            "gdt-coord: creating a host token needs the coordinator's admin "
            "token: pass --admin-token-file or set GDT_ADMIN_TOKEN_FILE\n");

  CommandResult created =
      RunProcess({gdt_coord, "hosts", "token", "create", "local",
                  "--coordinator", endpoint},
                 {{"GDT_ADMIN_TOKEN_FILE", admin}}, seconds(20));
  ASSERT_TRUE(created.status.success()) << created.output;
  const std::string host_token(absl::StripAsciiWhitespace(created.output));
  ASSERT_EQ(host_token.size(), 64u) << created.output;
  const std::string token_file = cluster.dir().Sub("host.token");
  WriteFile(token_file, created.output);

  AgentSpec agent;
  agent.name = "local";
  agent.cpu_slots = 2;
  agent.host_token_file = token_file;
  ASSERT_TRUE(cluster.StartAgent(agent).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForHosts(1, seconds(20)).ok()) << cluster.Logs();

  const std::string project = cluster.dir().Sub("project");
  std::filesystem::create_directories(project);
  WriteFile(project + "/.gitlab-ci.yml",
            GangJobYaml({.script = "echo member $CI_NODE_INDEX ran"}));
  CommandResult run = cluster.RunLocal(project, "train", {}, seconds(90));
  ASSERT_TRUE(run.status.success()) << run.output << cluster.Logs();
  for (int index = 1; index <= 2; ++index) {
    const std::string log = ReadFile(
        absl::StrCat(cluster.run_dir(), "/logs/train-", index, "-2.log"));
    EXPECT_THAT(log, HasSubstr(absl::StrCat("member ", index, " ran\n")))
        << log;
    EXPECT_THAT(log, Not(HasSubstr(host_token)));
  }
  EXPECT_THAT(cluster.Logs(), Not(HasSubstr(host_token)));
}

}  // namespace
}  // namespace gdt::test
