// GitLab's `rules:` (a job's, and `workflow:rules`) and the CI/CD variable
// expressions of `rules:if`, evaluated the way GitLab does when it creates a
// pipeline, so that `run-local` runs the jobs GitLab would create.
//
// Expressions: `$NAME` (null when unset), "string" and 'string' (no
// escapes), /regex/ with flags i, m, s, U (RE2 syntax, `\/` for a slash),
// `null`, `true`, `false`, `==`, `!=`, `=~`, `!~`, `&&`, `||`, unary `!` and
// parentheses; at most 100 tokens. Precedence and values follow GitLab: `!`
// binds tightest, then the comparisons, then `&&`, then `||`; `&&` and `||`
// give one of their operands (an empty string counts as true there), and the
// whole expression holds when its value is present: not null, not false and
// not a string of blanks. The right side of `=~` may be a variable holding
// "/regex/"; one that holds no pattern matches as a plain substring.
#ifndef GDT_CI_RULES_H_
#define GDT_CI_RULES_H_

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ci/inheritance.h"

namespace gdt::ci {

// Variable name -> value, as GitLab hands them to an expression (values are
// not expanded).
using ExpressionVariables = absl::flat_hash_map<std::string, std::string>;

// Whether `expression` is one GitLab accepts. Errors: InvalidArgument saying
// what is wrong ("unknown token at '...'", "unmatched parenthesis", "invalid
// regular expression /.../", "more than 100 tokens", ...).
absl::Status CheckExpression(std::string_view expression);

// Evaluates `expression` against `variables`. A bad expression is false, as
// in GitLab (CheckExpression refuses it when the file is read).
bool ExpressionHolds(std::string_view expression,
                     const ExpressionVariables& variables);

// Whether `path` (relative to the project, '/'-separated) matches `pattern`
// as GitLab's `rules:exists` matches: `*` and `?` within one path element,
// `**/` any number of directories, `[...]` sets, `{a,b}` alternatives, dot
// files included.
bool ExistsGlobMatches(std::string_view pattern, std::string_view path);

// One entry of `rules:`.
struct CiRule {
  std::optional<std::string> if_expression;
  // `changes:` is present. run-local's pipeline has no earlier commit to
  // compare with, like a push of a new branch, for which GitLab takes every
  // `changes:` as matched.
  bool has_changes = false;
  // `exists:` patterns; has_exists with no pattern never matches.
  bool has_exists = false;
  std::vector<std::string> exists;
  std::optional<std::string> when;
  std::optional<bool> allow_failure;
  std::vector<std::pair<std::string, std::string>> variables;
  std::optional<std::vector<std::string>> needs;  // Job names.
};

// A job's `only:` or `except:` (the older way to choose jobs).
struct CiRefPolicy {
  // `refs:` (or the plain list): keywords (branches, tags, pushes, web,
  // api, schedules, triggers, pipelines, merge_requests, chat, external,
  // external_pull_requests), ref names, or /regex/ on the ref name.
  std::optional<std::vector<std::string>> refs;
  std::optional<std::vector<std::string>> variables;  // Expressions.
  bool has_changes = false;                           // Always matched.
  bool kubernetes = false;  // `kubernetes: active`: never matched here.
};

// Reads `only:` or `except:` (`key`) of job `job`. Errors: InvalidArgument
// naming the job and what is wrong.
absl::StatusOr<CiRefPolicy> ReadRefPolicy(const CiValue& node,
                                          std::string_view job,
                                          std::string_view key);

// Whether every key `policy` sets has an entry that holds for a pipeline
// with `variables` (CI_PIPELINE_SOURCE, CI_COMMIT_REF_NAME and
// CI_COMMIT_TAG among them), as GitLab decides `only:` and `except:`.
bool RefPolicyMatches(const CiRefPolicy& policy,
                      const ExpressionVariables& variables);

// Reads a `rules:` list. `where` names it in errors ("job train",
// "workflow"). `job_rules`: a job's rules, whose `when` may also be manual or
// delayed and which may have `allow_failure` and `needs`; workflow rules
// take `when: always` or `never` only. Errors: InvalidArgument naming the
// entry (from 0) and what is wrong.
absl::StatusOr<std::vector<CiRule>> ReadRules(const CiValue& node,
                                              std::string_view where,
                                              bool job_rules);

// The first rule whose clauses all hold (`if` against `variables`, `exists`
// against `files`, the project's files), or nullopt when none does. As in
// GitLab, a pattern without glob characters is looked up, and after 10,000
// comparisons of glob patterns with files an `exists:` counts as matched.
std::optional<size_t> FirstMatchingRule(const std::vector<CiRule>& rules,
                                        const ExpressionVariables& variables,
                                        const std::vector<std::string>& files);

}  // namespace gdt::ci

#endif  // GDT_CI_RULES_H_
