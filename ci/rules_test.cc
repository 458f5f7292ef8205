#include "ci/rules.h"

#include <chrono>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/cpu_time.h"

namespace gdt::ci {
namespace {

using ::testing::HasSubstr;

const ExpressionVariables kVars = {
    {"CI_PIPELINE_SOURCE", "push"},
    {"CI_COMMIT_BRANCH", "main"},
    {"CI_COMMIT_REF_NAME", "main"},
    {"EMPTY", ""},
    {"BLANK", "  "},
    {"RELEASE", "release/1.2"},
    {"PATTERN", "/^release\\/[0-9.]+$/"},
    {"PLAIN", "release/1.2/notes"},
};

bool Holds(std::string_view expression) {
  EXPECT_TRUE(CheckExpression(expression).ok())
      << expression << ": " << CheckExpression(expression);
  return ExpressionHolds(expression, kVars);
}

TEST(ExpressionTest, ComparesVariablesWithStringsAndNull) {
  EXPECT_TRUE(Holds(R"($CI_PIPELINE_SOURCE == "push")"));
  EXPECT_TRUE(Holds(R"('push' == $CI_PIPELINE_SOURCE)"));
  EXPECT_FALSE(Holds(R"($CI_PIPELINE_SOURCE == "merge_request_event")"));
  EXPECT_TRUE(Holds(R"($CI_PIPELINE_SOURCE != "schedule")"));
  EXPECT_TRUE(Holds("$UNSET == null"));
  EXPECT_FALSE(Holds("$EMPTY == null"));  // Set, though empty.
  EXPECT_TRUE(Holds(R"($EMPTY == "")"));
  EXPECT_FALSE(Holds(R"($UNSET == "")"));
  EXPECT_TRUE(Holds("$EMPTY != null"));
}

TEST(ExpressionTest, ABareVariableHoldsWhenItHasText) {
  EXPECT_TRUE(Holds("$CI_COMMIT_BRANCH"));
  EXPECT_FALSE(Holds("$UNSET"));
  EXPECT_FALSE(Holds("$EMPTY"));
  EXPECT_FALSE(Holds("$BLANK"));  // Only blanks: not present, as in Ruby.
  EXPECT_TRUE(Holds("!$UNSET"));
  EXPECT_FALSE(Holds("!$CI_COMMIT_BRANCH"));
}

TEST(ExpressionTest, MatchesRegularExpressions) {
  EXPECT_TRUE(Holds(R"($RELEASE =~ /^release\/[0-9.]+$/)"));
  EXPECT_FALSE(Holds(R"($CI_COMMIT_BRANCH =~ /^release/)"));
  EXPECT_TRUE(Holds(R"($CI_COMMIT_BRANCH !~ /^release/)"));
  EXPECT_TRUE(Holds("$CI_COMMIT_BRANCH =~ /MAIN/i"));
  EXPECT_FALSE(Holds("$CI_COMMIT_BRANCH =~ /MAIN/"));
  EXPECT_FALSE(Holds("$UNSET =~ /main/"));
  EXPECT_TRUE(Holds("$UNSET =~ /^$/"));  // An unset variable matches as "".
  // The right side may be a variable holding a pattern...
  EXPECT_TRUE(Holds("$RELEASE =~ $PATTERN"));
  EXPECT_FALSE(Holds("$PLAIN =~ $PATTERN"));
  // ... or plain text, within which GitLab looks for the left side.
  EXPECT_TRUE(Holds("$RELEASE =~ $PLAIN"));
  EXPECT_FALSE(Holds("$PLAIN =~ $RELEASE"));
  EXPECT_FALSE(Holds("$RELEASE =~ $UNSET"));
  EXPECT_TRUE(Holds("$RELEASE !~ $UNSET"));
}

TEST(ExpressionTest, FollowsGitLabsPrecedenceAndOperandValues) {
  EXPECT_TRUE(
      Holds(R"($CI_COMMIT_BRANCH == "main" && $CI_PIPELINE_SOURCE == "push")"));
  EXPECT_FALSE(
      Holds(R"($CI_COMMIT_BRANCH == "dev" && $CI_PIPELINE_SOURCE == "push")"));
  // && before ||.
  EXPECT_TRUE(Holds(R"($CI_COMMIT_BRANCH == "main" || $UNSET && $UNSET2)"));
  EXPECT_FALSE(Holds(R"(($CI_COMMIT_BRANCH == "main" || $UNSET) && $UNSET2)"));
  // `!` binds tighter than a comparison: (!$UNSET) == "x" is false == "x".
  EXPECT_FALSE(Holds(R"(!$UNSET == "x")"));
  EXPECT_TRUE(Holds(R"(!($UNSET == "x"))"));
  // && and || give an operand: an empty variable is true to ||, so the
  // whole expression is its (empty) value.
  EXPECT_FALSE(Holds(R"($EMPTY || $CI_COMMIT_BRANCH)"));
  EXPECT_TRUE(Holds(R"($UNSET || $CI_COMMIT_BRANCH)"));
  EXPECT_TRUE(Holds(R"($EMPTY && $CI_COMMIT_BRANCH)"));
}

TEST(ExpressionTest, BadExpressionsAreRefusedWithTheReason) {
  EXPECT_THAT(CheckExpression("$A = \"x\"").message(),
              HasSubstr("unknown token at '= \"x\"'"));
  EXPECT_THAT(CheckExpression("($A == \"x\"").message(),
              HasSubstr("unmatched parenthesis"));
  EXPECT_THAT(CheckExpression("$A == \"x\")").message(),
              HasSubstr("unmatched parenthesis"));
  EXPECT_THAT(CheckExpression("$A ==").message(), HasSubstr("operand"));
  EXPECT_THAT(CheckExpression("$A $B").message(), HasSubstr("operator"));
  EXPECT_THAT(CheckExpression("$A =~ /a(b/").message(),
              HasSubstr("invalid regular expression /a(b/"));
  EXPECT_THAT(CheckExpression("\"open").message(),
              HasSubstr("unterminated string"));
  EXPECT_THAT(CheckExpression("").message(), HasSubstr("empty"));
  std::string long_one = "$A";
  for (int i = 0; i < 60; ++i) long_one += " || $A";
  EXPECT_THAT(CheckExpression(long_one).message(),
              HasSubstr("more than 100 tokens"));
  EXPECT_FALSE(ExpressionHolds("$CI_COMMIT_BRANCH ==", kVars));
}

TEST(ExistsGlobTest, MatchesLikeRubyFnmatchWithPathnameAndDotmatch) {
  EXPECT_TRUE(ExistsGlobMatches("Dockerfile", "Dockerfile"));
  EXPECT_FALSE(ExistsGlobMatches("Dockerfile", "docker/Dockerfile"));
  EXPECT_TRUE(ExistsGlobMatches("*.py", "train.py"));
  EXPECT_FALSE(ExistsGlobMatches("*.py", "src/train.py"));
  EXPECT_TRUE(ExistsGlobMatches("**/*.py", "train.py"));
  EXPECT_TRUE(ExistsGlobMatches("**/*.py", "src/models/train.py"));
  EXPECT_TRUE(ExistsGlobMatches("src/**/*.py", "src/a/b/c.py"));
  EXPECT_TRUE(ExistsGlobMatches("src/**/*.py", "src/c.py"));
  EXPECT_TRUE(ExistsGlobMatches("*", ".hidden"));
  EXPECT_TRUE(ExistsGlobMatches("config/*.{yml,yaml}", "config/a.yaml"));
  EXPECT_FALSE(ExistsGlobMatches("config/*.{yml,yaml}", "config/a.json"));
  EXPECT_TRUE(ExistsGlobMatches("data/file?.[ch]", "data/file1.c"));
  EXPECT_FALSE(ExistsGlobMatches("data/file?.[!ch]", "data/file1.c"));
  EXPECT_FALSE(ExistsGlobMatches("a?b", "a/b"));
  EXPECT_TRUE(ExistsGlobMatches("a\\*b", "a*b"));
  EXPECT_TRUE(ExistsGlobMatches("[x", "[x"));
}

// Stars that could each take any length must not make a pattern take
// exponential time (this one took minutes when every split was tried).
TEST(ExistsGlobTest, ManyStarsStayFast) {
  const std::string path(200, 'a');
  std::string pattern;
  for (int i = 0; i < 30; ++i) pattern += "*a";
  pattern += "*b";
  const auto start = gdt::testing::ThreadCpuTime();
  EXPECT_FALSE(ExistsGlobMatches(pattern, path));
  std::string deep;
  for (int i = 0; i < 60; ++i) deep += "d/";
  std::string stars;
  for (int i = 0; i < 20; ++i) stars += "**/";
  EXPECT_FALSE(ExistsGlobMatches(stars + "x", deep + "y"));
  EXPECT_TRUE(ExistsGlobMatches(stars + "y", deep + "y"));
  EXPECT_LT(gdt::testing::ThreadCpuTime() - start, std::chrono::seconds(2));
}

CiValue Yaml(std::string_view json) { return CiValue::parse(json); }

TEST(ReadRulesTest, ReadsEveryClauseAndOutcome) {
  absl::StatusOr<std::vector<CiRule>> rules = ReadRules(
      Yaml(R"([{"if": "$A == \"1\"", "when": "manual", "allow_failure": true,
               "variables": {"X": "1", "N": 2}, "needs": ["a", {"job": "b"}]},
              {"changes": ["src/*"], "exists": {"paths": ["*.py"]}},
              {"when": "never"}])"),
      "job train", /*job_rules=*/true);
  ASSERT_TRUE(rules.ok()) << rules.status();
  ASSERT_EQ(rules->size(), 3u);
  EXPECT_EQ((*rules)[0].when, "manual");
  EXPECT_EQ((*rules)[0].allow_failure, true);
  EXPECT_EQ((*rules)[0].variables[1].second, "2");
  EXPECT_EQ((*rules)[0].needs, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE((*rules)[1].has_changes);
  EXPECT_EQ((*rules)[1].exists, std::vector<std::string>{"*.py"});

  const std::vector<std::string> files = {"src/x.cc"};
  EXPECT_EQ(FirstMatchingRule(*rules, {{"A", "1"}}, files), 0u);
  EXPECT_EQ(FirstMatchingRule(*rules, {{"A", "2"}}, files), 2u);
  EXPECT_EQ(FirstMatchingRule(*rules, {}, {"train.py"}), 1u);

  // Like GitLab, a project too big to search matches any glob.
  std::vector<std::string> many;
  for (int i = 0; i < 10001; ++i) many.push_back("f" + std::to_string(i));
  EXPECT_EQ(FirstMatchingRule(*rules, {}, many), 1u);
  many.pop_back();
  EXPECT_EQ(FirstMatchingRule(*rules, {}, many), 2u);
}

TEST(ReadRulesTest, RefusesWhatGitLabRefuses) {
  const auto error = [](std::string_view json, bool job_rules = true) {
    return std::string(
        ReadRules(Yaml(json), "job train", job_rules).status().message());
  };
  EXPECT_EQ(error(R"({"if": "$A"})"), "job train: rules must be a list");
  EXPECT_EQ(error(R"([{"iff": "$A"}])"),
            "job train: rules[0]: unknown key 'iff'");
  EXPECT_EQ(error(R"(["$A"])"),
            "job train: rules[0]: must be a map (if:, when:, ...)");
  EXPECT_THAT(error(R"([{"when": "always"}, {"if": "$A = 1"}])"),
              HasSubstr("job train: rules[1]: if: invalid expression '$A = "
                        "1': unknown token"));
  EXPECT_THAT(error(R"([{"when": "sometimes"}])"),
              HasSubstr("when must be on_success"));
  EXPECT_EQ(error(R"([{"when": "manual"}])", /*job_rules=*/false),
            "job train: rules[0]: when must be always or never");
  EXPECT_EQ(error(R"([{"allow_failure": true}])", /*job_rules=*/false),
            "job train: rules[0]: unknown key 'allow_failure'");
}

TEST(RefPolicyTest, MatchesRefsSourcesAndVariablesAsGitLab) {
  const auto policy = [](std::string_view json) {
    absl::StatusOr<CiRefPolicy> read =
        ReadRefPolicy(CiValue::parse(json), "train", "only");
    EXPECT_TRUE(read.ok()) << read.status();
    return *read;
  };
  // kVars: a push to main.
  EXPECT_TRUE(RefPolicyMatches(policy(R"(["branches"])"), kVars));
  EXPECT_FALSE(RefPolicyMatches(policy(R"(["tags"])"), kVars));
  EXPECT_TRUE(RefPolicyMatches(policy(R"(["pushes"])"), kVars));
  EXPECT_FALSE(RefPolicyMatches(policy(R"(["merge_requests", "web"])"), kVars));
  EXPECT_TRUE(RefPolicyMatches(policy(R"(["main"])"), kVars));
  EXPECT_TRUE(RefPolicyMatches(policy(R"(["main@group/project"])"), kVars));
  EXPECT_FALSE(RefPolicyMatches(policy(R"(["/^release/"])"), kVars));
  EXPECT_TRUE(RefPolicyMatches(policy(R"(["/^MA/i"])"), kVars));
  // Every key must have a match.
  EXPECT_TRUE(RefPolicyMatches(
      policy(R"({"refs": ["main"], "variables": ["$UNSET", "$RELEASE"]})"),
      kVars));
  EXPECT_FALSE(RefPolicyMatches(
      policy(R"({"refs": ["main"], "variables": ["$UNSET"]})"), kVars));
  EXPECT_TRUE(RefPolicyMatches(policy(R"({"changes": ["src/*"]})"), kVars));
  EXPECT_FALSE(RefPolicyMatches(policy(R"({"kubernetes": "active"})"), kVars));

  ExpressionVariables tag = kVars;
  tag["CI_COMMIT_TAG"] = "v1";
  EXPECT_FALSE(RefPolicyMatches(policy(R"(["branches"])"), tag));
  EXPECT_TRUE(RefPolicyMatches(policy(R"(["tags"])"), tag));

  EXPECT_EQ(
      ReadRefPolicy(CiValue::parse(R"({"ref": ["main"]})"), "train", "except")
          .status()
          .message(),
      "job train: except: unknown key 'ref'");
  EXPECT_THAT(ReadRefPolicy(CiValue::parse(R"({"variables": ["$A = 1"]})"),
                            "train", "only")
                  .status()
                  .message(),
              HasSubstr("job train: only: variables: invalid expression"));
}

}  // namespace
}  // namespace gdt::ci
