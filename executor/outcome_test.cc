#include "executor/outcome.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "common/retry_after.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/temp_dir.h"

namespace gdt::executor {
namespace {

using ::testing::HasSubstr;

class FinishOutcomeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.empty());
    // Deliberately not 1 and 2: the codes come from the runner.
    codes_.build_failure = 11;
    codes_.system_failure = 12;
    codes_.exit_code_file = dir_ + "/build_exit_code";
  }

  std::string ExitCodeFile() {
    std::ifstream file(codes_.exit_code_file);
    std::stringstream text;
    text << file.rdbuf();
    return text.str();
  }

  test::TempDir temp_;
  const std::string dir_ = temp_.path();
  ExitCodes codes_;
  std::ostringstream err_;
};

TEST_F(FinishOutcomeTest, SuccessExitsZeroSilently) {
  EXPECT_EQ(FinishOutcome(Outcome::Success(), codes_, err_), 0);
  EXPECT_EQ(err_.str(), "");
  EXPECT_FALSE(std::filesystem::exists(codes_.exit_code_file));
}

TEST_F(FinishOutcomeTest, ScriptFailureWritesRealCode) {
  EXPECT_EQ(FinishOutcome(Outcome::ScriptFailure(3), codes_, err_), 11);
  EXPECT_EQ(ExitCodeFile(), "3\n");
}

TEST_F(FinishOutcomeTest, UserErrorIsBuildFailureWithCodeOne) {
  EXPECT_EQ(
      FinishOutcome(Outcome::UserError("CI_NODE_INDEX is bad"), codes_, err_),
      11);
  EXPECT_EQ(ExitCodeFile(), "1\n");
  EXPECT_EQ(err_.str(), "gdt: CI_NODE_INDEX is bad\n");
}

TEST_F(FinishOutcomeTest, SystemFailureUsesSystemCodeAndNoFile) {
  EXPECT_EQ(
      FinishOutcome(Outcome::SystemFailure("coordinator down"), codes_, err_),
      12);
  EXPECT_FALSE(std::filesystem::exists(codes_.exit_code_file));
  EXPECT_EQ(err_.str(), "gdt: coordinator down\n");
}

// A peer failure quotes the gang's root cause, and with it an operator's
// cancel reason: it reaches the job log as one line with no escape codes.
TEST_F(FinishOutcomeTest, AQuotedReasonCannotSteerTheJobLog) {
  EXPECT_EQ(FinishOutcome(
                Outcome::PeerFailure("gang g failed: cancelled by operator: "
                                     "\x1b]0;pwned\x07\x1b[2Jdone\nFAKE line"),
                codes_, err_),
            11);
  EXPECT_EQ(err_.str(),
            "gdt: gang g failed: cancelled by operator: "
            "\\x1b]0;pwned\\x07\\x1b[2Jdone\\nFAKE line\n");
}

TEST(JoinFailureOutcomeTest, CoordinatorVerdictsOnTheJobAreUserErrors) {
  for (absl::Status status : {absl::FailedPreconditionError("9 nodes > 8"),
                              absl::InvalidArgumentError("size 0"),
                              absl::AlreadyExistsError("job 7 joined")}) {
    Outcome outcome = JoinFailureOutcome(status);
    EXPECT_EQ(outcome.kind, OutcomeKind::kUserError) << status;
    EXPECT_THAT(outcome.message, HasSubstr(status.message()));
  }
}

TEST(JoinFailureOutcomeTest, EverythingElseIsSystemFailure) {
  for (absl::Status status :
       {absl::UnavailableError("down"), absl::DeadlineExceededError("late"),
        absl::AbortedError("deadlock breaker"),
        absl::ResourceExhaustedError("full")}) {
    EXPECT_EQ(JoinFailureOutcome(status).kind, OutcomeKind::kSystemFailure)
        << status;
  }
}

TEST(JoinFailureOutcomeTest, RejectedMembersFailWithTheCoordinatorsReason) {
  for (absl::Status status :
       {absl::PermissionDeniedError(
            "member rejected: CI_PIPELINE_ID 78 disagrees with GitLab"),
        absl::UnauthenticatedError(
            "member rejected: GitLab refused the job token (HTTP 401)")}) {
    Outcome outcome = JoinFailureOutcome(status);
    EXPECT_EQ(outcome.kind, OutcomeKind::kSystemFailure) << status;
    EXPECT_EQ(outcome.message, status.message());
  }
}

TEST(JoinRetryLineTest, ARefusalForNowSaysWhyAndWhenTheMemberAsksAgain) {
  const absl::Status refused = WithRetryAfter(
      absl::ResourceExhaustedError(
          "project 5 joins faster than 1 members a second (bursts of 1) "
          "(join_rate_per_project, join_burst_per_project); member 2 of gang "
          "train is refused for now"),
      std::chrono::milliseconds(1440));
  EXPECT_EQ(JoinRetryLine(refused, "coord:7070", 1),
            "coordinator refuses joins for now: project 5 joins faster than 1 "
            "members a second (bursts of 1) (join_rate_per_project, "
            "join_burst_per_project); member 2 of gang train is refused for "
            "now; retrying in 1.4 s");
  EXPECT_THAT(JoinRetryLine(refused, "coord:7070", 7),
              ::testing::EndsWith("; retrying in 1.4 s (7 refusals)"));
  // Paused member checks are refused for now too.
  EXPECT_THAT(
      JoinRetryLine(WithRetryAfter(absl::UnavailableError(
                                       "GitLab did not answer 5 member checks "
                                       "in a row: checks paused for 30 s"),
                                   std::chrono::seconds(30)),
                    "coord:7070", 1),
      HasSubstr("coordinator refuses joins for now: GitLab did not answer"));
}

TEST(JoinRetryLineTest, AnythingElseIsAnUnreachableCoordinator) {
  EXPECT_EQ(
      JoinRetryLine(absl::UnavailableError("failed to connect"), "coord:7070",
                    1),
      "coordinator unreachable at coord:7070 (failed to connect), retrying");
  EXPECT_EQ(JoinRetryLine(absl::UnavailableError("failed to connect"),
                          "coord:7070", 3),
            "coordinator unreachable at coord:7070 (failed to connect), "
            "retrying (3 attempts)");
}

TEST(JoinRefusedUntilDeadlineTest, FailsTheJobWithTheCoordinatorsReason) {
  Outcome outcome = JoinRefusedUntilDeadline(
      absl::ResourceExhaustedError("project 5 joins faster than 1 members a "
                                   "second"),
      std::chrono::seconds(600));
  EXPECT_EQ(outcome.kind, OutcomeKind::kSystemFailure);
  EXPECT_EQ(outcome.message,
            "coordinator refused this join for 600 s, until the join "
            "deadline: project 5 joins faster than 1 members a second");
}

}  // namespace
}  // namespace gdt::executor
