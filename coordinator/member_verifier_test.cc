#include "coordinator/member_verifier.h"

#include <chrono>
#include <deque>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/fake_clock.h"
#include "common/mutex.h"
#include "common/retry_after.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/joined_thread.h"
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
    options.refusal_ttl = 60s;
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

TEST(CheckClaimedInstanceTest, SameInstanceWhateverCaseOfHostOrTrailingSlash) {
  EXPECT_TRUE(CheckClaimedInstance("https://gitlab.example.com",
                                   "https://gitlab.example.com")
                  .ok());
  EXPECT_TRUE(CheckClaimedInstance("https://gitlab.example.com/",
                                   "HTTPS://GitLab.Example.com")
                  .ok());
  EXPECT_TRUE(CheckClaimedInstance("https://example.com/gitlab",
                                   "https://EXAMPLE.com/gitlab/")
                  .ok());
}

TEST(CheckClaimedInstanceTest, AnotherInstanceIsRefusedNamingBoth) {
  for (const std::string claimed :
       {"https://gitlab.evil.example", "http://gitlab.example.com",
        "https://example.com/GitLab", "",
        "https://gitlab.example.com.evil.example"}) {
    const absl::Status status =
        CheckClaimedInstance("https://example.com/gitlab", claimed);
    EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << claimed;
    EXPECT_THAT(status.message(),
                HasSubstr(absl::StrCat("'", claimed, "' (CI_SERVER_URL)")));
    EXPECT_THAT(status.message(), HasSubstr("'https://example.com/gitlab'"));
  }
  // A huge claim is cut in the message.
  const absl::Status huge = CheckClaimedInstance("https://gitlab.example.com",
                                                 std::string(1 << 20, 'x'));
  EXPECT_EQ(huge.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_LT(huge.message().size(), 400u);
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
  // Refusals are cached too, for refusal_ttl: a flood of joins with a
  // refused token costs one GitLab call.
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(
        verifier_.Verify("token-1", test::Joining(test::TrainKey(2), 1)).code(),
        absl::StatusCode::kUnauthenticated);
  }
  EXPECT_EQ(lookup_.calls, 2);
  clock_.Advance(61s);

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

TEST(MemberVerifierLimitsTest, SlowGitLabCallsAreBoundedInNumberAndPerPeer) {
  // A GitLab that answers only when the test lets it.
  Mutex mu;
  CondVar released;
  bool open = false;
  int waiting = 0;
  FakeClock clock;
  MemberVerifierOptions options;
  options.max_in_flight = 3;
  options.max_in_flight_per_peer = 2;
  MemberVerifier verifier(
      [&](const std::string&) -> absl::StatusOr<gitlab::ApiJob> {
        MutexLock lock(mu);
        ++waiting;
        released.NotifyAll();
        const auto deadline = std::chrono::steady_clock::now() + 30s;
        while (!open && released.WaitUntil(mu, deadline)) {
        }
        return absl::UnauthenticatedError("HTTP 401");
      },
      clock, options);
  const auto let_go = [&] {
    MutexLock lock(mu);
    open = true;
    released.NotifyAll();
  };
  std::deque<test::JoinedThread> calls;
  for (int i = 0; i < 2; ++i) {
    calls.emplace_back(
        [&verifier, i] {
          (void)verifier.Verify(absl::StrCat("forged-", i),
                                test::Joining(test::TrainKey(2), 1),
                                "ipv4:10.0.0.9:4000" + std::to_string(i));
        },
        let_go);
  }
  calls.emplace_back(
      [&verifier] {
        (void)verifier.Verify("forged-x", test::Joining(test::TrainKey(2), 1),
                              "ipv4:10.0.0.8:5000");
      },
      let_go);
  {
    MutexLock lock(mu);
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (waiting < 3 && released.WaitUntil(mu, deadline)) {
    }
    ASSERT_EQ(waiting, 3);
  }
  // The same address is at its bound; then the whole verifier is.
  const absl::Status same_peer = verifier.Verify(
      "forged-3", test::Joining(test::TrainKey(2), 1), "ipv4:10.0.0.9:40009");
  EXPECT_EQ(same_peer.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(same_peer.message(),
              HasSubstr("too many member checks from ipv4:10.0.0.9"));
  const absl::Status anyone = verifier.Verify(
      "forged-4", test::Joining(test::TrainKey(2), 1), "ipv4:10.0.0.7:1");
  EXPECT_EQ(anyone.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(anyone.message(), HasSubstr("member verification is busy"));
  // Both are worth a retry after a moment.
  EXPECT_EQ(RetryAfter(same_peer), 1s);
  EXPECT_EQ(RetryAfter(anyone), 1s);
  EXPECT_EQ(verifier.lookups(), 3);
  let_go();
  for (test::JoinedThread& call : calls) call.Join();
  // Slots are free again.
  EXPECT_EQ(verifier
                .Verify("forged-5", test::Joining(test::TrainKey(2), 1),
                        "ipv4:10.0.0.9:1")
                .code(),
            absl::StatusCode::kUnauthenticated);
}

TEST(MemberVerifierLimitsTest, RepeatedGitLabFailuresPauseChecks) {
  FakeClock clock;
  MemberVerifierOptions options;
  options.breaker_failures = 3;
  options.breaker_pause = 30s;
  int calls = 0;
  MemberVerifier verifier(
      [&](const std::string&) -> absl::StatusOr<gitlab::ApiJob> {
        ++calls;
        return absl::DeadlineExceededError("GitLab API GET x: timed out");
      },
      clock, options);
  for (int i = 0; i < 3; ++i) {
    EXPECT_THAT(
        verifier.Verify("t", test::Joining(test::TrainKey(2), 1)).message(),
        HasSubstr("cannot verify the job token with GitLab"));
  }
  for (int i = 0; i < 20; ++i) {
    const absl::Status paused =
        verifier.Verify("t", test::Joining(test::TrainKey(2), 1));
    EXPECT_EQ(paused.code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(paused.message(),
                HasSubstr("GitLab did not answer 3 member checks in a row"));
  }
  EXPECT_EQ(calls, 3);
  // The member is told to come back when the pause ends.
  clock.Advance(10s);
  EXPECT_EQ(
      RetryAfter(verifier.Verify("t", test::Joining(test::TrainKey(2), 1))),
      20s);
  clock.Advance(21s);
  (void)verifier.Verify("t", test::Joining(test::TrainKey(2), 1));
  EXPECT_EQ(calls, 4);
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
