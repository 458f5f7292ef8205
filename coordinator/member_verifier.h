#ifndef GDT_COORDINATOR_MEMBER_VERIFIER_H_
#define GDT_COORDINATOR_MEMBER_VERIFIER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "coordinator/scheduler.h"
#include "gitlab/gitlab_api.h"

namespace gdt::coordinator {

struct MemberVerifierOptions {
  // How long GitLab's positive answer for one job token is reused.
  std::chrono::seconds cache_ttl{60};
  // Answers kept at most; the oldest go first.
  size_t max_cached = 4096;
};

// Checks a joining member's claims against what GitLab says about its job
// token (GET /api/v4/job, docs/security.md): the job id, project, pipeline
// and job name, and from the name's " i/N" suffix the group, member index
// and gang size. Only these verified fields decide which gang a member
// joins. Negative answers are never cached. Thread-safe; `lookup` may run
// on several threads at once and is called without any lock held.
class MemberVerifier {
 public:
  // Asks GitLab about `job_token`; errors as GitLabApi::CurrentJob.
  using Lookup =
      std::function<absl::StatusOr<gitlab::ApiJob>(const std::string&)>;

  // Keeps a reference to `clock`.
  MemberVerifier(Lookup lookup, const Clock& clock,
                 MemberVerifierOptions options = {});

  // OK when GitLab confirms every claim of `request`.
  // Errors (one line for the job log, never containing the token):
  //   Unauthenticated: no token, or GitLab refused it (401);
  //   PermissionDenied: a claim disagrees with GitLab, naming the variable
  //     (CI_PIPELINE_ID, CI_NODE_INDEX, CI_NODE_TOTAL, CI_JOB_NAME,
  //     CI_PROJECT_ID, CI_JOB_ID) and both values;
  //   Unavailable: GitLab could not be asked (transient; the executor retries).
  absl::Status Verify(const std::string& job_token, const JoinRequest& request);

  // OK when `job_token` is the token of job `job_id`: what member calls
  // after the join (ReportExit, WatchGang, LeaveGang) must show, since the
  // coordinator identifies the member by its job id. Errors as Verify
  // (PermissionDenied naming both job ids).
  absl::Status VerifyJobId(const std::string& job_token, int64_t job_id);

 private:
  struct Cached {
    gitlab::ApiJob job;
    Clock::TimePoint expires;
  };

  absl::StatusOr<gitlab::ApiJob> JobOf(const std::string& job_token);
  // JobOf with Verify's errors.
  absl::StatusOr<gitlab::ApiJob> VerifiedJob(const std::string& job_token);

  const Lookup lookup_;
  const Clock& clock_;
  const MemberVerifierOptions options_;
  Mutex mu_;
  // By SHA-256 of the token, so that no token is kept in memory longer than
  // a call.
  std::map<std::string, Cached> cache_ ABSL_GUARDED_BY(mu_);
};

// The Lookup of a coordinator configured with `gitlab_url` (e.g.
// https://gitlab.example.com): libcurl with `ca_file` (empty: the system's
// CAs) and `timeout` for the whole request.
MemberVerifier::Lookup CurlJobLookup(std::string gitlab_url,
                                     std::string ca_file,
                                     std::chrono::milliseconds timeout);

}  // namespace gdt::coordinator

#endif  // GDT_COORDINATOR_MEMBER_VERIFIER_H_
