#include "coordinator/member_verifier.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/retry_after.h"
#include "common/secret.h"
#include "common/status_macros.h"
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

// The address part of a gRPC peer ("ipv4:10.0.0.7:51234" -> "ipv4:10.0.0.7"):
// calls from one machine share its bound whatever their source port.
std::string PeerAddress(const std::string& peer) {
  const size_t colon = peer.rfind(':');
  if (colon == std::string::npos || colon < peer.find(':') + 1) return peer;
  return peer.substr(0, colon);
}

// How long a member refused because too many checks are in flight waits
// before it asks again: a GitLab call takes well under a second when GitLab
// is healthy.
constexpr std::chrono::milliseconds kBusyRetryAfter{1000};

bool IsRefusal(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnauthenticated ||
         status.code() == absl::StatusCode::kPermissionDenied ||
         status.code() == absl::StatusCode::kNotFound;
}

// A failed GitLab call as the member's one line. CurlGitLabApi's messages
// name the URL, never the token.
absl::Status LookupError(const absl::Status& status) {
  if (IsRefusal(status)) {
    return absl::UnauthenticatedError(
        absl::StrCat("member rejected: GitLab refused the job token (",
                     status.message(), ")"));
  }
  return absl::UnavailableError(absl::StrCat(
      "cannot verify the job token with GitLab: ", status.message()));
}

}  // namespace

MemberVerifier::MemberVerifier(Lookup lookup, const Clock& clock,
                               MemberVerifierOptions options)
    : lookup_(std::move(lookup)),
      clock_(clock),
      options_(options),
      refused_(options.refusal_ttl, options.max_cached) {}

absl::Status MemberVerifier::AdmitCallLocked(const std::string& address) {
  const Clock::TimePoint now = clock_.Now();
  if (now < paused_until_) {
    return WithRetryAfter(
        absl::UnavailableError(absl::StrCat(
            "GitLab did not answer ", options_.breaker_failures,
            " member checks in a row: checks paused for ",
            std::chrono::duration_cast<std::chrono::seconds>(paused_until_ -
                                                             now)
                    .count() +
                1,
            " s; the member retries")),
        std::chrono::ceil<std::chrono::milliseconds>(paused_until_ - now));
  }
  size_t& mine = in_flight_by_peer_[address];
  if (mine >= options_.max_in_flight_per_peer ||
      in_flight_ >= options_.max_in_flight) {
    const bool own_bound = mine >= options_.max_in_flight_per_peer;
    if (mine == 0) in_flight_by_peer_.erase(address);
    if (own_bound) {
      return WithRetryAfter(absl::UnavailableError(absl::StrCat(
                                "too many member checks from ", address,
                                " at once (", options_.max_in_flight_per_peer,
                                " allowed); the member retries")),
                            kBusyRetryAfter);
    }
    return WithRetryAfter(absl::UnavailableError(absl::StrCat(
                              "member verification is busy (", in_flight_,
                              " GitLab calls in flight); the member retries")),
                          kBusyRetryAfter);
  }
  ++mine;
  ++in_flight_;
  ++lookups_;
  return absl::OkStatus();
}

void MemberVerifier::RecordOutcomeLocked(const absl::Status& status) {
  const bool unreachable = !status.ok() && !IsRefusal(status);
  if (!unreachable) {
    failures_in_a_row_ = 0;
    return;
  }
  if (++failures_in_a_row_ >= options_.breaker_failures) {
    paused_until_ = clock_.Now() + options_.breaker_pause;
    failures_in_a_row_ = 0;
  }
}

absl::StatusOr<gitlab::ApiJob> MemberVerifier::JobOf(
    const std::string& job_token, const std::string& peer) {
  const std::string key = SecretSha256Hex(job_token);
  const std::string address = PeerAddress(peer);
  {
    MutexLock lock(mu_);
    const Clock::TimePoint now = clock_.Now();
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      if (now < it->second.expires) return it->second.job;
      cache_.erase(it);
    }
    if (std::optional<absl::Status> refused = refused_.Find(key, now)) {
      return *refused;
    }
    GDT_RETURN_IF_ERROR(AdmitCallLocked(address));
  }
  absl::StatusOr<gitlab::ApiJob> job = lookup_(job_token);
  MutexLock lock(mu_);
  --in_flight_;
  if (auto mine = in_flight_by_peer_.find(address);
      mine != in_flight_by_peer_.end() && --mine->second == 0) {
    in_flight_by_peer_.erase(mine);
  }
  RecordOutcomeLocked(job.status());
  const Clock::TimePoint now = clock_.Now();
  if (!job.ok()) {
    const absl::Status error = LookupError(job.status());
    if (IsRefusal(job.status())) refused_.Add(key, error, now);
    return error;
  }
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
    const std::string& job_token, const std::string& peer) {
  if (job_token.empty()) {
    return absl::UnauthenticatedError(
        "member rejected: no job token; this coordinator verifies every "
        "member with GitLab (gdt-executor sends CI_JOB_TOKEN from "
        "JOB_RESPONSE_FILE; is it older than the coordinator?)");
  }
  return JobOf(job_token, peer);
}

absl::Status MemberVerifier::VerifyJobId(const std::string& job_token,
                                         int64_t job_id,
                                         const std::string& peer) {
  absl::StatusOr<gitlab::ApiJob> job = VerifiedJob(job_token, peer);
  if (!job.ok()) return job.status();
  if (job->id != job_id) {
    return absl::PermissionDeniedError(
        absl::StrCat("refused: the job token is job ", job->id, "'s, not job ",
                     job_id, "'s"));
  }
  return absl::OkStatus();
}

absl::Status MemberVerifier::Verify(const std::string& job_token,
                                    const JoinRequest& request,
                                    const std::string& peer) {
  absl::StatusOr<gitlab::ApiJob> job = VerifiedJob(job_token, peer);
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

namespace {

// "HTTPS://GitLab.example.com/" -> "https://gitlab.example.com": scheme and
// host lower case, no trailing slashes; a path (GitLab under a relative URL)
// keeps its case.
std::string NormalizedUrl(const std::string& url) {
  std::string out = url;
  while (!out.empty() && out.back() == '/') out.pop_back();
  const size_t scheme = out.find("://");
  const size_t host_end =
      scheme == std::string::npos ? out.size() : out.find('/', scheme + 3);
  const size_t end = host_end == std::string::npos ? out.size() : host_end;
  for (size_t i = 0; i < end; ++i) out[i] = absl::ascii_tolower(out[i]);
  return out;
}

}  // namespace

absl::Status CheckClaimedInstance(const std::string& trusted,
                                  const std::string& claimed) {
  if (NormalizedUrl(trusted) == NormalizedUrl(claimed)) {
    return absl::OkStatus();
  }
  constexpr size_t kShown = 128;
  const std::string shown =
      claimed.size() <= kShown ? claimed : claimed.substr(0, kShown) + "...";
  return absl::PermissionDeniedError(
      absl::StrCat("member rejected: the job names GitLab instance '", shown,
                   "' (CI_SERVER_URL) but this coordinator trusts only '",
                   trusted, "' (gitlab_instance_url, default gitlab_url)"));
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
