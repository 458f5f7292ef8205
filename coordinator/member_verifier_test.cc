#include "coordinator/member_verifier.h"

#include <map>

#include "common/fake_clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/scheduler_fixtures.h"

namespace gdt::coordinator {
namespace {

using namespace std::chrono_literals;
using test::Joining;
using test::TrainKey;
using ::testing::HasSubstr;

// GitLab's answers by token, and how often it was asked.
class FakeLookup {
 public:
  MemberVerifier::Lookup AsLookup() {
    return [this](const std::string& token) -> absl::StatusOr<gitlab::ApiJob> {
      ++calls;
      auto it = jobs.find(token);
      if (it == jobs.end()) {
        return absl::UnauthenticatedError(
            "GitLab API GET /api/v4/job: HTTP 401 (401 Unauthorized): the job "
            "token was rejected");
      }
      return it->second;
    };
  }
  std::map<std::string, gitlab::ApiJob> jobs;
  int calls = 0;
};

// Member `index` of TrainKey(2) as GitLab knows it.
gitlab::ApiJob TrainJob(uint32_t index) {
  gitlab::ApiJob job;
  job.id = 100 + index;
  job.name = "train " + std::to_string(index) + "/2";
  job.pipeline_id = 77;
  job.project_id = 5;
  return job;
}

class MemberVerifierTest : public ::testing::Test {
 protected:
  MemberVerifierTest() : verifier_(lookup_.AsLookup(), clock_, Options()) {
    lookup_.jobs["token-1"] = TrainJob(1);
    lookup_.jobs["token-2"] = TrainJob(2);
  }
  static MemberVerifierOptions Options() {
    MemberVerifierOptions options;
    options.cache_ttl = 30s;
    options.max_cached = 2;
    return options;
  }

  FakeClock clock_;
  FakeLookup lookup_;
  MemberVerifier verifier_;
};

TEST_F(MemberVerifierTest, AcceptsClaimsGitLabConfirms) {
  EXPECT_TRUE(
      verifier_.Verify("token-1", test::Joining(test::TrainKey(2), 1)).ok());
  EXPECT_TRUE(
      verifier_.Verify("token-2", test::Joining(test::TrainKey(2), 2)).ok());
}

TEST_F(MemberVerifierTest, ForgedVariablesAreRejectedByName) {
  struct Case {
    const char* variable;
    std::function<void(JoinRequest&)> forge;
  };
  const std::vector<Case> cases = {
      {"CI_PIPELINE_ID 78", [](JoinRequest& r) { r.key.pipeline_id = 78; }},
      {"CI_PROJECT_ID 6", [](JoinRequest& r) { r.key.project_id = 6; }},
      {"CI_JOB_ID 102", [](JoinRequest& r) { r.job_id = 102; }},
      {"CI_JOB_NAME 'train 2/2'",
       [](JoinRequest& r) { r.job_name = "train 2/2"; }},
      // The executor derives index, size and group from CI_NODE_* / the name.
      {"CI_NODE_INDEX 2", [](JoinRequest& r) { r.member_index = 2; }},
      {"CI_NODE_TOTAL 3", [](JoinRequest& r) { r.key.size = 3; }},
      {"the gang name 'eval'",
       [](JoinRequest& r) { r.key.group_name = "eval"; }},
  };
  for (const Case& c : cases) {
    JoinRequest request = test::Joining(test::TrainKey(2), 1);
    c.forge(request);
    absl::Status status = verifier_.Verify("token-1", request);
    EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << c.variable;
    EXPECT_THAT(status.message(), HasSubstr(c.variable));
    EXPECT_THAT(status.message(), HasSubstr("disagrees with GitLab"));
    EXPECT_THAT(status.message(), ::testing::Not(HasSubstr("token-1")));
  }
}

TEST_F(MemberVerifierTest, AJobWithoutParallelIsAGangOfOne) {
  gitlab::ApiJob single = TrainJob(1);
  single.name = "lint";
  lookup_.jobs["token-lint"] = single;
  JoinRequest request = test::Joining(state::GangKey{"", 5, 77, "lint", 1}, 1);
  request.job_id = single.id;
  request.job_name = "lint";
  EXPECT_TRUE(verifier_.Verify("token-lint", request).ok());
  request.key.size = 2;
  EXPECT_THAT(verifier_.Verify("token-lint", request).message(),
              HasSubstr("CI_NODE_TOTAL 2 disagrees"));
}

TEST_F(MemberVerifierTest, MissingOrRefusedTokenIsUnauthenticated) {
  absl::Status none = verifier_.Verify("", test::Joining(test::TrainKey(2), 1));
  EXPECT_EQ(none.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(none.message(), HasSubstr("no job token"));
  EXPECT_EQ(lookup_.calls, 0);

  absl::Status refused =
      verifier_.Verify("stale", test::Joining(test::TrainKey(2), 1));
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(refused.message(), HasSubstr("GitLab refused the job token"));
  EXPECT_THAT(refused.message(), HasSubstr("401"));
}

TEST_F(MemberVerifierTest, GitLabDownIsTransient) {
  MemberVerifier down(
      [](const std::string&) -> absl::StatusOr<gitlab::ApiJob> {
        return absl::UnavailableError("GitLab API GET x: connection refused");
      },
      clock_);
  absl::Status status =
      down.Verify("token-1", test::Joining(test::TrainKey(2), 1));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr("cannot verify the job token"));
}

TEST_F(MemberVerifierTest, PositiveAnswersAreCachedBrieflyAndBounded) {
  ASSERT_TRUE(
      verifier_.Verify("token-1", test::Joining(test::TrainKey(2), 1)).ok());
  ASSERT_TRUE(
      verifier_.Verify("token-1", test::Joining(test::TrainKey(2), 1)).ok());
  EXPECT_EQ(lookup_.calls, 1);
  // A forged claim is still checked against the cached answer.
  JoinRequest forged = test::Joining(test::TrainKey(2), 1);
  forged.key.pipeline_id = 1;
  EXPECT_FALSE(verifier_.Verify("token-1", forged).ok());
  EXPECT_EQ(lookup_.calls, 1);

  clock_.Advance(31s);  // Expired: asks GitLab again (the job may be over).
  lookup_.jobs.erase("token-1");
  EXPECT_EQ(
      verifier_.Verify("token-1", test::Joining(test::TrainKey(2), 1)).code(),
      absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(lookup_.calls, 2);
  // Refusals are not cached.
  EXPECT_FALSE(
      verifier_.Verify("token-1", test::Joining(test::TrainKey(2), 1)).ok());
  EXPECT_EQ(lookup_.calls, 3);

  // At most two answers are kept: a third token pushes the oldest out.
  lookup_.jobs["token-1"] = TrainJob(1);
  lookup_.jobs["token-3"] = TrainJob(1);
  ASSERT_TRUE(
      verifier_.Verify("token-1", test::Joining(test::TrainKey(2), 1)).ok());
  clock_.Advance(1s);
  ASSERT_TRUE(
      verifier_.Verify("token-2", test::Joining(test::TrainKey(2), 2)).ok());
  clock_.Advance(1s);
  ASSERT_TRUE(
      verifier_.Verify("token-3", test::Joining(test::TrainKey(2), 1)).ok());
  const int before = lookup_.calls;
  ASSERT_TRUE(
      verifier_.Verify("token-2", test::Joining(test::TrainKey(2), 2)).ok());
  EXPECT_EQ(lookup_.calls, before);  // Still cached.
  ASSERT_TRUE(
      verifier_.Verify("token-1", test::Joining(test::TrainKey(2), 1)).ok());
  EXPECT_EQ(lookup_.calls, before + 1);  // Evicted.
}

TEST_F(MemberVerifierTest, LaterCallsAreBoundToTheTokensJob) {
  EXPECT_TRUE(verifier_.VerifyJobId("token-1", 101).ok());
  absl::Status other = verifier_.VerifyJobId("token-2", 101);
  EXPECT_EQ(other.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(other.message(), HasSubstr("job 102's, not job 101's"));
  EXPECT_EQ(verifier_.VerifyJobId("", 101).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(verifier_.VerifyJobId("stale", 101).code(),
            absl::StatusCode::kUnauthenticated);
}

}  // namespace
}  // namespace gdt::coordinator
