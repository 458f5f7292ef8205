#include "coordinator/id_token_member_verifier.h"

#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/secret.h"
#include "gitlab/curl_gitlab_api.h"

namespace gdt::coordinator {
namespace {

absl::Status Disagree(const char* variable, int64_t claimed, int64_t verified,
                      int64_t job_id) {
  return absl::PermissionDeniedError(absl::StrCat(
      "member rejected: ", variable, " ", claimed,
      " disagrees with the job's ID token, which says ", verified, " for job ",
      job_id, " (job variables cannot change which gang a job joins)"));
}

}  // namespace

IdTokenMemberVerifier::IdTokenMemberVerifier(
    std::unique_ptr<gitlab::IdTokenVerifier> tokens, const Clock& clock,
    IdTokenMemberVerifierOptions options)
    : tokens_(std::move(tokens)),
      clock_(clock),
      options_(std::move(options)),
      refused_(options_.refusal_ttl, options_.max_cached) {}

absl::StatusOr<gitlab::IdTokenClaims> IdTokenMemberVerifier::ClaimsOf(
    const std::string& id_token) {
  if (id_token.empty()) {
    return absl::UnauthenticatedError(absl::StrCat(
        "member rejected: no ID token; this coordinator verifies members by "
        "GitLab ID token: give the job `id_tokens: GDT_ID_TOKEN: aud: ",
        options_.audience,
        "` (gdt-executor sends GDT_ID_TOKEN from JOB_RESPONSE_FILE)"));
  }
  const std::string key = SecretSha256Hex(id_token);
  {
    MutexLock lock(mu_);
    if (std::optional<absl::Status> refused =
            refused_.Find(key, clock_.Now())) {
      return *refused;
    }
  }
  absl::StatusOr<gitlab::IdTokenClaims> claims = tokens_->Verify(id_token);
  if (claims.ok()) return claims;
  if (claims.status().code() != absl::StatusCode::kUnauthenticated) {
    return absl::UnavailableError(absl::StrCat("cannot verify the ID token: ",
                                               claims.status().message()));
  }
  absl::Status error = absl::UnauthenticatedError(
      absl::StrCat("member rejected: ", claims.status().message()));
  MutexLock lock(mu_);
  refused_.Add(key, error, clock_.Now());
  return error;
}

absl::Status IdTokenMemberVerifier::Verify(const std::string& id_token,
                                           const JoinRequest& request) {
  absl::StatusOr<gitlab::IdTokenClaims> claims = ClaimsOf(id_token);
  if (!claims.ok()) return claims.status();
  if (claims->job_id != request.job_id) {
    return Disagree("CI_JOB_ID", request.job_id, claims->job_id,
                    claims->job_id);
  }
  if (claims->project_id != request.key.project_id) {
    return Disagree("CI_PROJECT_ID", request.key.project_id, claims->project_id,
                    claims->job_id);
  }
  if (claims->pipeline_id != request.key.pipeline_id) {
    return Disagree("CI_PIPELINE_ID", request.key.pipeline_id,
                    claims->pipeline_id, claims->job_id);
  }
  return absl::OkStatus();
}

absl::Status IdTokenMemberVerifier::VerifyJobId(const std::string& id_token,
                                                int64_t job_id) {
  absl::StatusOr<gitlab::IdTokenClaims> claims = ClaimsOf(id_token);
  if (!claims.ok()) return claims.status();
  if (claims->job_id != job_id) {
    return absl::PermissionDeniedError(
        absl::StrCat("refused: the ID token is job ", claims->job_id,
                     "'s, not job ", job_id, "'s"));
  }
  return absl::OkStatus();
}

gitlab::IdTokenVerifier::FetchKeys CurlJwksFetch(
    const std::string& gitlab_url, const std::string& jwks_url,
    std::string ca_file, std::chrono::milliseconds timeout) {
  std::string url = jwks_url;
  if (url.empty()) {
    std::string base = gitlab_url;
    while (absl::EndsWith(base, "/")) base.pop_back();
    url = absl::StrCat(base, "/oauth/discovery/keys");
  }
  gitlab::CurlGitLabApi::Options options;
  options.ca_file = std::move(ca_file);
  options.timeout = timeout;
  return [url, options]() { return gitlab::CurlGetPublic(url, options); };
}

}  // namespace gdt::coordinator
