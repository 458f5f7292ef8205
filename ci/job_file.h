#ifndef GDT_GITLAB_CI_YAML_H_
#define GDT_GITLAB_CI_YAML_H_

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "ci/include.h"
#include "ci/rules.h"

namespace gdt::ci {

// A job's `artifacts:` block.
struct CiArtifacts {
  std::vector<std::string> paths;
  std::vector<std::string> exclude;
  std::string when = "on_success";  // on_success, on_failure, always.
  std::string expire_in;
  std::string name;
  bool untracked = false;
  // `reports:dotenv`: the files (one or a list) whose KEY=VALUE lines the
  // runner uploads as a report of their own, whatever `when:` says.
  std::vector<std::string> dotenv;

  // No archive to upload (a dotenv report is uploaded on its own).
  bool empty() const { return paths.empty() && !untracked; }
};

// One entry of a job's `cache:` (a map, or a list of up to four), as GitLab
// reads it: the defaults filled in, the key not yet computed.
struct CiCache {
  // `key:` as a string ("default" when not given); unless `key_files` is
  // set, then `key:files` and `key:prefix`.
  std::string key = "default";
  std::optional<std::vector<std::string>> key_files;
  // `key:files_commits`: hashed by the last commit of each file instead.
  std::vector<std::string> key_files_commits;
  std::string key_prefix;
  std::vector<std::string> paths;
  bool untracked = false;
  bool unprotect = false;
  std::string policy = "pull-push";  // May hold a variable: runner expands.
  std::string when = "on_success";   // on_success, on_failure, always.
  std::vector<std::string> fallback_keys;
};

// A job's `retry:` (an integer is `max:` alone).
struct CiRetry {
  int max = 0;  // 0..2.
  // GitLab's failure reasons to retry ("always": any). Unset: "always",
  // unless exit_codes is set (then only those codes).
  std::optional<std::vector<std::string>> when;
  std::optional<std::vector<int>> exit_codes;
};

// How many retries of `retry` bring back a job whose script failed with
// `exit_code`: its max when `when` (unset: always) has always or
// script_failure and `exit_codes`, if given, lists the code; else 0. Both
// must hold, the stricter reading of a `retry:` with both keys.
int RetriesForScriptExit(const CiRetry& retry, int exit_code);

// Reads a job's `retry:` value (`N` or `{max, when, exit_codes}`); an error
// names `job` and what is wrong.
absl::Status ReadCiRetry(const CiValue& node, std::string_view job,
                         CiRetry* out);

// One job of a `parallel: matrix:`: its name ("test: [a100, 2]") and the
// variables it sets, in the matrix's order.
struct CiMatrixJob {
  std::string name;
  std::vector<std::pair<std::string, std::string>> variables;
};

// Reads the list under `parallel: matrix:` into the jobs GitLab makes of
// it for job `job` (named "job: [v1, v2]", in GitLab's order); an error
// names `job` and what is wrong.
absl::Status ReadCiMatrix(const CiValue& node, std::string_view job,
                          std::vector<CiMatrixJob>* out);

// One entry of `services:`: a name alone, or a map with its name, alias,
// entrypoint, command and variables (the fields GitLab sends and a custom
// executor's execs are told about).
struct CiService {
  std::string name;
  std::string alias;
  std::vector<std::string> entrypoint;
  std::vector<std::string> command;
  std::vector<std::pair<std::string, std::string>> variables;
};

// One runnable job of a .gitlab-ci.yml, with the file's defaults applied.
struct CiJob {
  std::string name;
  std::string stage = "test";
  // From the job, else `default:`, else the top level.
  std::vector<std::string> before_script;
  std::vector<std::string> script;
  std::vector<std::string> after_script;
  // `hooks:` (the job's, else `default:`'s): commands get_sources runs
  // before and after fetching the sources.
  std::vector<std::string> pre_get_sources_script;
  std::vector<std::string> post_get_sources_script;
  // `image:`'s name (the job's, else `default:`'s, else the top level's);
  // empty: none. Only passed on (CI_JOB_IMAGE): run-local runs no image.
  std::string image;
  // `tags:` (the job's, else `default:`'s), in order; only passed on
  // (CI_JOB_TAGS): run-local's runner takes any job.
  std::vector<std::string> tags;
  // `services:` (the job's, else `default:`'s, else the top level's), in
  // order. Only passed on (CUSTOM_ENV_CI_JOB_SERVICES): run-local runs none.
  std::vector<CiService> services;
  // Top-level variables, then the job's; a job value replaces the top-level
  // entry of the same key in place. Values are strings, as GitLab sends them.
  std::vector<std::pair<std::string, std::string>> variables;
  // Variables written `{value: ..., expand: false}`: their values are
  // passed as they are, without expanding `$NAME` references.
  std::set<std::string> raw_variables;
  int parallel = 1;  // 1..200.
  // `parallel: matrix:`: the jobs it makes (parallel stays 1; each is run
  // as a job of its own, CI_NODE_INDEX its place among them).
  std::vector<CiMatrixJob> matrix;
  // A job made from a matrix: its name, and its place (1-based) and the
  // number of jobs of its matrix; empty and 0 otherwise.
  std::string matrix_name;
  int matrix_index = 0;
  int matrix_total = 0;
  // `parallel:` was given, even as 1: GitLab then numbers the job
  // ("name 1/1", CI_NODE_INDEX=1).
  bool parallel_given = false;
  std::optional<int64_t> timeout_seconds;  // The job's `timeout:`, if any.
  CiArtifacts artifacts;
  std::vector<CiCache> caches;  // `cache:`, in order.
  // Jobs whose artifacts this job downloads: `dependencies:` when given,
  // else the jobs of `needs:` (entries with `artifacts: false` left out);
  // nullopt when neither is set (GitLab: every job of earlier stages).
  std::optional<std::vector<std::string>> artifact_sources;
  // `id_tokens:` (the job's, else `default:`'s): variable name -> audiences
  // (`aud:`, one or a list), in file order.
  std::vector<std::pair<std::string, std::vector<std::string>>> id_tokens;
  // `when:`: on_success (default), on_failure, always, manual or delayed
  // (`never` is refused: GitLab never creates such a job).
  std::string when = "on_success";
  // `allow_failure:` true, or false; with `exit_codes:` (given as
  // allow_failure_exit_codes) only a script failure with one of those codes
  // is allowed. Default: true for `when: manual`, else false.
  bool allow_failure = false;
  std::vector<int> allow_failure_exit_codes;
  CiRetry retry;
  // The job names of `needs:` (all of them, `artifacts: false` included;
  // cross-pipeline entries left out); nullopt without `needs:`.
  std::optional<std::vector<std::string>> needs;
  // `rules:` (nullopt without them): GitLab creates the job only when one
  // matches, and that rule's when/allow_failure/variables/needs apply.
  std::optional<std::vector<CiRule>> rules;
  // `only:` and `except:` (nullopt when not given), for a job without
  // `rules:`. A job with neither is `only: [branches, tags]`.
  std::optional<CiRefPolicy> only;
  std::optional<CiRefPolicy> except;
  // The names in the job's own `variables:` (not the top-level ones), and
  // whether it set `allow_failure:` itself: both decide what a rule or
  // `workflow:rules` changes.
  std::set<std::string> own_variables;
  bool allow_failure_given = false;
};

// What a file's `workflow:` and top-level `variables:` give every job when
// GitLab creates a pipeline.
struct CiWorkflow {
  std::optional<std::vector<CiRule>> rules;  // `workflow:rules`.
  // Top-level variables (the values GitLab hands to `workflow:rules:if`).
  std::vector<std::pair<std::string, std::string>> variables;
  // Those of them written `{value: ..., expand: false}`.
  std::set<std::string> raw_variables;
  // `workflow:name` as written (at most 255 characters); none: no name.
  std::optional<std::string> name;
};

// Returns job `job_name` of the .gitlab-ci.yml text, with its configuration
// as GitLab computes it: YAML merge keys, `extends`, `default:` (and the
// deprecated top-level before_script/after_script), `inherit:` and
// `!reference` applied; top-level variables first (those `inherit:
// variables:` lets in), then the job's. Errors (InvalidArgument unless
// noted), each naming the job and key: bad YAML; NotFound for an unknown
// job; hidden (".x") or `trigger` jobs, which cannot be run; a job without
// `script`; `parallel` outside 1..200, or a `matrix` that is malformed or
// makes more than 200 jobs; an `extends` cycle or parent that is not in
// the file; a `!reference` that does not resolve; a bad `timeout`; unknown
// job keys (typos).
// With `includes` (ci/include.h), the files the text includes are read with
// it, as GitLab merges them: their templates, default:, variables and
// same-name jobs count.
absl::StatusOr<CiJob> ParseCiJob(std::string_view yaml_text,
                                 std::string_view job_name,
                                 const CiIncludes* includes = nullptr);

// Reads `path` and calls ParseCiJob. Errors: NotFound when the file cannot be
// read, otherwise as ParseCiJob; messages start with the path.
absl::StatusOr<CiJob> LoadCiJob(const std::string& path,
                                std::string_view job_name);

// Reads the `workflow:` of the .gitlab-ci.yml at `path` (merged with the
// files `includes` holds, when given, as GitLab merges them). Errors:
// NotFound when the file cannot be read; InvalidArgument for bad YAML, a bad
// `workflow:rules` (naming the entry) or top-level `variables`; messages
// start with the path.
absl::StatusOr<CiWorkflow> LoadCiWorkflow(const std::string& path,
                                          const CiIncludes* includes = nullptr);

// The keywords GitLab checks in depth in job `job`'s own entry `own` (as
// written, before extends): `retry` (0..2, or max/when/exit_codes), `only`
// and `except` (a list of refs, or refs/variables/changes/kubernetes),
// `parallel:matrix` (a list of maps of variables to a value or a list of
// values, at most 200 jobs), `release` (tag_name and its other keys) and
// `pages` (a boolean, or publish/path_prefix/expire_in). One (key, message)
// for each key GitLab refuses, the message naming the job.
std::vector<std::pair<std::string, std::string>> CheckJobKeywordValues(
    const CiValue& own, std::string_view job);

// Whether a top-level key of a .gitlab-ci.yml is a keyword (default,
// include, stages, variables, workflow, ...) rather than a job.
bool IsCiKeyword(std::string_view key);

// Parses a GitLab duration ("3600", "1h 30m", "90 minutes", "1 hour 30
// minutes", "2d", "1h30m") into seconds. Errors: InvalidArgument.
absl::StatusOr<int64_t> ParseDurationSeconds(std::string_view text);

// GitLab's slug of a name: lowercase, every byte outside [a-z0-9] becomes
// '-', at most 63 bytes, no leading or trailing '-' ("train 2/4" ->
// "train-2-4").
std::string Slugify(std::string_view text);

}  // namespace gdt::ci

#endif  // GDT_GITLAB_CI_YAML_H_
