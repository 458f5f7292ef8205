#include "coordinator/id_token_member_verifier.h"

#include <chrono>
#include <memory>
#include <string>

#include "common/fake_clock.h"
#include "gitlab/fake_id_token_issuer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/scheduler_fixtures.h"

namespace gdt::coordinator {
namespace {

using test::Joining;
using test::TrainKey;
using ::testing::HasSubstr;

constexpr char kIssuer[] = "https://gitlab.example.com";
constexpr char kAudience[] = "gdt-coord";

class IdTokenMemberVerifierTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto issuer = gitlab::FakeIdTokenIssuer::Create("key-1");
    ASSERT_TRUE(issuer.ok());
    gitlab_ = new gitlab::FakeIdTokenIssuer(*issuer);
  }
  static void TearDownTestSuite() { delete gitlab_; }

  IdTokenMemberVerifierTest() {
    gitlab::IdTokenVerifier::Options token_options;
    token_options.policy.issuer = kIssuer;
    token_options.policy.audience = kAudience;
    IdTokenMemberVerifierOptions options;
    options.audience = kAudience;
    verifier_ = std::make_unique<IdTokenMemberVerifier>(
        std::make_unique<gitlab::IdTokenVerifier>(
            [this]() -> absl::StatusOr<std::string> {
              ++fetches_;
              if (!keys_available_) {
                return absl::UnavailableError(
                    "GitLab API GET https://gitlab.example.com/oauth/"
                    "discovery/keys: Connection refused");
              }
              return gitlab_->Jwks();
            },
            clock_, token_options),
        clock_, options);
  }

  // Member `index` of TrainKey(2)'s token (job 100 + index, project 5,
  // pipeline 77, like test::Joining).
  std::string TokenOf(uint32_t index, int64_t pipeline = 77) {
    gitlab::FakeIdToken token;
    token.issuer = kIssuer;
    token.audience = kAudience;
    token.project_id = 5;
    token.pipeline_id = pipeline;
    token.job_id = 100 + index;
    token.issued_at = clock_.UnixMillis() / 1000;
    token.expires_at = token.issued_at + 3600;
    return gitlab_->Issue(token);
  }

  static gitlab::FakeIdTokenIssuer* gitlab_;
  FakeClock clock_;
  int fetches_ = 0;
  bool keys_available_ = true;
  std::unique_ptr<IdTokenMemberVerifier> verifier_;
};

gitlab::FakeIdTokenIssuer* IdTokenMemberVerifierTest::gitlab_ = nullptr;

TEST_F(IdTokenMemberVerifierTest, AcceptsClaimsTheTokenConfirmsWithoutGitLab) {
  for (uint32_t index : {1u, 2u}) {
    EXPECT_TRUE(
        verifier_->Verify(TokenOf(index), Joining(TrainKey(2), index)).ok());
  }
  EXPECT_TRUE(verifier_->VerifyJobId(TokenOf(1), 101).ok());
  EXPECT_EQ(fetches_, 1);  // The key set, once; no call per member.
}

TEST_F(IdTokenMemberVerifierTest, ClaimsThatDisagreeWithTheTokenAreNamed) {
  absl::Status other_pipeline =
      verifier_->Verify(TokenOf(1, /*pipeline=*/78), Joining(TrainKey(2), 1));
  EXPECT_EQ(other_pipeline.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(other_pipeline.message(),
              HasSubstr("member rejected: CI_PIPELINE_ID 77 disagrees with the "
                        "job's ID token, which says 78 for job 101"));
  // Another job's token.
  absl::Status other_job =
      verifier_->Verify(TokenOf(2), Joining(TrainKey(2), 1));
  EXPECT_THAT(other_job.message(),
              HasSubstr("CI_JOB_ID 101 disagrees with the job's ID token, "
                        "which says 102"));
  absl::Status later = verifier_->VerifyJobId(TokenOf(2), 101);
  EXPECT_EQ(later.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(later.message(),
              HasSubstr("refused: the ID token is job 102's, not job 101's"));
}

TEST_F(IdTokenMemberVerifierTest, MissingOrBadTokenIsUnauthenticated) {
  absl::Status none = verifier_->Verify("", Joining(TrainKey(2), 1));
  EXPECT_EQ(none.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(none.message(),
              HasSubstr("member rejected: no ID token; this coordinator "
                        "verifies members by GitLab ID token: give the job "
                        "`id_tokens: GDT_ID_TOKEN: aud: gdt-coord`"));
  const std::string forged = gitlab::FakeIdTokenIssuer::Unsigned(
      R"({"alg":"none","kid":"key-1"})",
      gitlab::FakeIdTokenIssuer::ClaimsJson({.issuer = kIssuer,
                                             .audience = kAudience,
                                             .project_id = 5,
                                             .pipeline_id = 77,
                                             .job_id = 101}));
  absl::Status refused = verifier_->Verify(forged, Joining(TrainKey(2), 1));
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(refused.message(),
              HasSubstr("member rejected: ID token refused: alg 'none' is not "
                        "accepted (only RS256)"));
  EXPECT_THAT(refused.message(), ::testing::Not(HasSubstr(forged)));
  // The refusal is remembered: the same answer again.
  EXPECT_EQ(verifier_->Verify(forged, Joining(TrainKey(2), 1)), refused);
}

TEST_F(IdTokenMemberVerifierTest, UnreachableKeysAreTransient) {
  keys_available_ = false;
  absl::Status status = verifier_->Verify(TokenOf(1), Joining(TrainKey(2), 1));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(),
              HasSubstr("cannot verify the ID token: cannot get GitLab's ID "
                        "token keys: GitLab API GET "
                        "https://gitlab.example.com/oauth/discovery/keys: "
                        "Connection refused; the member retries"));
  // Not cached as a refusal: once GitLab answers again, the member joins.
  keys_available_ = true;
  clock_.Advance(std::chrono::seconds(31));
  EXPECT_TRUE(verifier_->Verify(TokenOf(1), Joining(TrainKey(2), 1)).ok());
}

}  // namespace
}  // namespace gdt::coordinator
