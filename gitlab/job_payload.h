#ifndef GDT_GITLAB_JOB_PAYLOAD_H_
#define GDT_GITLAB_JOB_PAYLOAD_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace gdt::gitlab {

// One entry of the payload's `variables` array.
struct JobVariable {
  std::string key;
  std::string value;
  bool is_public = true;
  bool file = false;
  bool masked = false;
  bool raw = false;
};

// One entry of `steps`: "script", "after_script", "release", ...
struct JobStep {
  std::string name;
  std::vector<std::string> script;
  int64_t timeout_seconds = 3600;
  std::string when = "on_success";
  bool allow_failure = false;
};

struct JobArtifact {
  std::string name;
  bool untracked = false;
  std::vector<std::string> paths;
  std::vector<std::string> exclude;
  std::string when = "on_success";  // on_success, on_failure, always.
  std::string artifact_type = "archive";
  std::string artifact_format = "zip";
  std::string expire_in;
};

// One entry of the job's `cache` as GitLab sends it: the key computed
// (`key:files` hashed, the protected/non_protected suffix added).
struct JobCache {
  std::string key;
  bool untracked = false;
  std::string policy = "pull-push";
  std::vector<std::string> paths;
  std::string when = "on_success";  // on_success, on_failure, always.
  std::vector<std::string> fallback_keys;
};

// One entry of `services`, as GitLab sends a job's `services:` entry (a
// name alone, or name, alias, entrypoint, command and variables). A custom
// executor runs no service; the runner describes them to its execs in
// CUSTOM_ENV_CI_JOB_SERVICES.
struct JobService {
  std::string name;
  std::string alias;
  std::vector<std::string> entrypoint;
  std::vector<std::string> command;
  // `variables:`, in file order, values as strings.
  std::vector<std::pair<std::string, std::string>> variables;
};

// One entry of `hooks`, as GitLab sends a job's `hooks:` (only
// pre_get_sources_script and post_get_sources_script exist): the runner runs
// its commands in get_sources, before and after fetching the sources.
struct JobHook {
  std::string name;
  std::vector<std::string> script;
};

struct JobDependency {
  int64_t id = 0;
  std::string token;
  std::string name;
  std::string artifacts_filename;  // Empty: the dependency has no artifacts.
  int64_t artifacts_size = 0;
};

// The job as gitlab-runner writes it to JOB_RESPONSE_FILE (the runner's
// re-encoding of GitLab's job request response, restricted to the fields the
// runner knows; see docs/gitlab-runner-protocol.md). This is the
// *trusted* job context: top-level id/token/job_info come from the server.
struct JobPayload {
  int64_t id = 0;
  std::string token;
  bool allow_git_fetch = true;
  // job_info
  std::string name;  // "train 2/4"
  std::string stage;
  int64_t project_id = 0;
  std::string project_name;
  std::optional<int64_t> pipeline_id;  // Only from runner >= 19.
  std::string project_full_path;       // Only from runner >= 19.
  // git_info
  std::string repo_url;
  std::string ref;
  std::string sha;
  std::string before_sha;
  std::string ref_type;
  std::vector<std::string> refspecs;
  int64_t depth = 0;
  bool ref_protected = false;
  // runner_info
  int64_t timeout_seconds = 0;
  // image.name: the job's `image:` (empty: none). The runner hands it to
  // the custom executor as CUSTOM_ENV_CI_JOB_IMAGE.
  std::string image;
  std::vector<JobVariable> variables;
  std::vector<JobStep> steps;
  std::vector<JobArtifact> artifacts;
  std::vector<JobCache> caches;  // "cache" in the JSON.
  std::vector<JobDependency> dependencies;
  std::vector<JobService> services;
  std::vector<JobHook> hooks;

  // The last value of variable `key` in `variables` (later entries win, as in
  // the runner), or nullopt.
  std::optional<std::string> Variable(std::string_view key) const;
};

// Parses JOB_RESPONSE_FILE text. Unknown fields are ignored (the runner adds
// fields over versions). Errors: InvalidArgument naming the problem, e.g.
// "JOB_RESPONSE_FILE is not valid JSON: ..." or "JOB_RESPONSE_FILE has no
// numeric 'id'". Required: id, token, job_info.name, job_info.project_id.
absl::StatusOr<JobPayload> ParseJobPayload(std::string_view json_text);

// Reads and parses the file. Errors: NotFound / PermissionDenied for an
// unreadable file, otherwise as ParseJobPayload.
absl::StatusOr<JobPayload> LoadJobPayload(const std::string& path);

// Encodes the payload as the runner does: one line of JSON with the fields
// gdt reads (job_info.pipeline_id only when set), plus a trailing newline.
std::string SerializeJobPayload(const JobPayload& payload);

// Splits "train 2/4" into ("train", 2, 4). Errors: InvalidArgument when the
// name has no " i/N" suffix with 1 <= i <= N.
struct NodeSuffix {
  std::string group_name;
  int index = 0;
  int total = 0;
};
absl::StatusOr<NodeSuffix> ParseNodeSuffix(std::string_view job_name);

}  // namespace gdt::gitlab

#endif  // GDT_GITLAB_JOB_PAYLOAD_H_
