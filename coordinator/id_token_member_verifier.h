#ifndef GDT_COORDINATOR_ID_TOKEN_MEMBER_VERIFIER_H_
#define GDT_COORDINATOR_ID_TOKEN_MEMBER_VERIFIER_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "coordinator/refusal_cache.h"
#include "coordinator/scheduler.h"
#include "gitlab/id_token.h"

namespace gdt::coordinator {

struct IdTokenMemberVerifierOptions {
  // The audience the jobs' tokens are issued for (`aud:` of `id_tokens:`).
  std::string audience;
  // How long a refused token is remembered, and how many at most.
  std::chrono::seconds refusal_ttl{300};
  size_t max_cached = 4096;
};

// Checks a joining member's claims against its GitLab CI ID token (a JWT
// GitLab signed; `member_verification: id_token`, docs/security.md): the
// signature with the instance's published keys, then issuer, audience and
// lifetime, then the job id, project id and pipeline id. No GitLab call per
// member: only the key set is fetched, cached and refreshed rarely. The
// token carries no job name, so the gang name, member index and gang size
// are the member's own claims, confined to its verified pipeline.
// Thread-safe.
class IdTokenMemberVerifier {
 public:
  // Keeps a reference to `clock`; `tokens` checks signatures and claims.
  IdTokenMemberVerifier(std::unique_ptr<gitlab::IdTokenVerifier> tokens,
                        const Clock& clock,
                        IdTokenMemberVerifierOptions options);

  // OK when the ID token is valid and its claims match `request`. Errors
  // (one line for the job log, never containing the token):
  //   Unauthenticated: no token, or a token refused ("member rejected: ID
  //     token refused: aud 'x' is not 'y'");
  //   PermissionDenied: a claim disagrees with the token, naming the
  //     variable (CI_JOB_ID, CI_PROJECT_ID, CI_PIPELINE_ID) and both values;
  //   Unavailable: GitLab's keys cannot be fetched (the member retries).
  absl::Status Verify(const std::string& id_token, const JoinRequest& request);

  // OK when `id_token` is job `job_id`'s: what member calls after the join
  // (ReportExit, WatchGang, LeaveGang) must show. Errors as Verify.
  absl::Status VerifyJobId(const std::string& id_token, int64_t job_id);

 private:
  absl::StatusOr<gitlab::IdTokenClaims> ClaimsOf(const std::string& id_token);

  const std::unique_ptr<gitlab::IdTokenVerifier> tokens_;
  const Clock& clock_;
  const IdTokenMemberVerifierOptions options_;
  Mutex mu_;
  RefusalCache refused_ ABSL_GUARDED_BY(mu_);
};

// The key set fetch of a coordinator whose members are verified by ID
// token: GET `jwks_url` (empty: <gitlab_url>/oauth/discovery/keys) with
// `ca_file` (empty: the system's CAs) and `timeout`.
gitlab::IdTokenVerifier::FetchKeys CurlJwksFetch(
    const std::string& gitlab_url, const std::string& jwks_url,
    std::string ca_file, std::chrono::milliseconds timeout);

}  // namespace gdt::coordinator

#endif  // GDT_COORDINATOR_ID_TOKEN_MEMBER_VERIFIER_H_
