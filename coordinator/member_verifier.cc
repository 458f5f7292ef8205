#include "coordinator/member_verifier.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/secret.h"
#include "gitlab/curl_gitlab_api.h"
#include "gitlab/job_payload.h"

namespace gdt::coordinator {
namespace {

template <typename T>
absl::Status Disagree(const char* variable, const T& claimed, const T& verified,
                      int64_t job_id) {
  return absl::PermissionDeniedError(absl::StrCat(
      "member rejected: ", variable, " ", claimed,
      " disagrees with GitLab, which says ", verified, " for job ", job_id,
      " (job variables cannot change which gang a job joins)"));
}

}  // namespace

MemberVerifier::MemberVerifier(Lookup lookup, const Clock& clock,
                               MemberVerifierOptions options)
    : lookup_(std::move(lookup)), clock_(clock), options_(options) {}

absl::StatusOr<gitlab::ApiJob> MemberVerifier::JobOf(
    const std::string& job_token) {
  const std::string key = SecretSha256Hex(job_token);
  {
    MutexLock lock(mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      if (clock_.Now() < it->second.expires) return it->second.job;
      cache_.erase(it);
    }
  }
  absl::StatusOr<gitlab::ApiJob> job = lookup_(job_token);
  if (!job.ok()) return job.status();
  MutexLock lock(mu_);
  const Clock::TimePoint now = clock_.Now();
  if (cache_.size() >= options_.max_cached) {
    for (auto it = cache_.begin(); it != cache_.end();) {
      it = it->second.expires <= now ? cache_.erase(it) : std::next(it);
    }
  }
  while (!cache_.empty() && cache_.size() >= options_.max_cached) {
    auto oldest = cache_.begin();
    for (auto it = cache_.begin(); it != cache_.end(); ++it) {
      if (it->second.expires < oldest->second.expires) oldest = it;
    }
    cache_.erase(oldest);
  }
  if (options_.max_cached > 0) {
    cache_[key] = Cached{*job, now + options_.cache_ttl};
  }
  return job;
}

absl::StatusOr<gitlab::ApiJob> MemberVerifier::VerifiedJob(
    const std::string& job_token) {
  if (job_token.empty()) {
    return absl::UnauthenticatedError(
        "member rejected: no job token; this coordinator verifies every "
        "member with GitLab (gdt-executor sends CI_JOB_TOKEN from "
        "JOB_RESPONSE_FILE; is it older than the coordinator?)");
  }
  absl::StatusOr<gitlab::ApiJob> job = JobOf(job_token);
  if (!job.ok()) {
    // Messages of CurlGitLabApi name the URL, never the token.
    switch (job.status().code()) {
      case absl::StatusCode::kUnauthenticated:
      case absl::StatusCode::kPermissionDenied:
      case absl::StatusCode::kNotFound:
        return absl::UnauthenticatedError(
            absl::StrCat("member rejected: GitLab refused the job token (",
                         job.status().message(), ")"));
      default:
        return absl::UnavailableError(
            absl::StrCat("cannot verify the job token with GitLab: ",
                         job.status().message()));
    }
  }
  return job;
}

absl::Status MemberVerifier::VerifyJobId(const std::string& job_token,
                                         int64_t job_id) {
  absl::StatusOr<gitlab::ApiJob> job = VerifiedJob(job_token);
  if (!job.ok()) return job.status();
  if (job->id != job_id) {
    return absl::PermissionDeniedError(
        absl::StrCat("refused: the job token is job ", job->id, "'s, not job ",
                     job_id, "'s"));
  }
  return absl::OkStatus();
}

absl::Status MemberVerifier::Verify(const std::string& job_token,
                                    const JoinRequest& request) {
  absl::StatusOr<gitlab::ApiJob> job = VerifiedJob(job_token);
  if (!job.ok()) return job.status();
  if (job->id != request.job_id) {
    return Disagree("CI_JOB_ID", request.job_id, job->id, job->id);
  }
  if (job->project_id != request.key.project_id) {
    return Disagree("CI_PROJECT_ID", request.key.project_id, job->project_id,
                    job->id);
  }
  if (job->pipeline_id != request.key.pipeline_id) {
    return Disagree("CI_PIPELINE_ID", request.key.pipeline_id, job->pipeline_id,
                    job->id);
  }
  if (job->name != request.job_name) {
    return Disagree("CI_JOB_NAME", absl::StrCat("'", request.job_name, "'"),
                    absl::StrCat("'", job->name, "'"), job->id);
  }
  // A name without " i/N" is a job without `parallel`: a gang of one.
  std::string group = job->name;
  int64_t index = 1;
  int64_t total = 1;
  if (absl::StatusOr<gitlab::NodeSuffix> suffix =
          gitlab::ParseNodeSuffix(job->name);
      suffix.ok()) {
    group = suffix->group_name;
    index = suffix->index;
    total = suffix->total;
  }
  if (request.key.group_name != group) {
    return Disagree("the gang name",
                    absl::StrCat("'", request.key.group_name, "'"),
                    absl::StrCat("'", group, "'"), job->id);
  }
  if (static_cast<int64_t>(request.member_index) != index) {
    return Disagree("CI_NODE_INDEX", static_cast<int64_t>(request.member_index),
                    index, job->id);
  }
  if (static_cast<int64_t>(request.key.size) != total) {
    return Disagree("CI_NODE_TOTAL", static_cast<int64_t>(request.key.size),
                    total, job->id);
  }
  return absl::OkStatus();
}

MemberVerifier::Lookup CurlJobLookup(std::string gitlab_url,
                                     std::string ca_file,
                                     std::chrono::milliseconds timeout) {
  while (absl::EndsWith(gitlab_url, "/")) gitlab_url.pop_back();
  std::string api_url = absl::StrCat(gitlab_url, "/api/v4");
  return [api_url, ca_file,
          timeout](const std::string& token) -> absl::StatusOr<gitlab::ApiJob> {
    gitlab::CurlGitLabApi::Options options;
    options.ca_file = ca_file;
    options.timeout = timeout;
    absl::StatusOr<std::unique_ptr<gitlab::CurlGitLabApi>> api =
        gitlab::CurlGitLabApi::Create(api_url, token, options);
    if (!api.ok()) return api.status();
    return (*api)->CurrentJob();
  };
}

}  // namespace gdt::coordinator
