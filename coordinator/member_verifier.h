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
#include "coordinator/refusal_cache.h"
#include "coordinator/scheduler.h"
#include "gitlab/gitlab_api.h"

namespace gdt::coordinator {

struct MemberVerifierOptions {
  // How long GitLab's positive answer for one job token is reused.
  std::chrono::seconds cache_ttl{60};
  // Answers kept at most; the oldest go first.
  size_t max_cached = 4096;
  // How long GitLab's refusal of a token is reused: a flood of joins with a
  // forged token costs one GitLab call, not one per join.
  std::chrono::seconds refusal_ttl{300};
  // GitLab calls in flight at once, and from one peer (an address). Beyond
  // them a call is refused at once with Unavailable (the member retries),
  // so a flood cannot tie up the coordinator's threads in GitLab calls.
  size_t max_in_flight = 8;
  size_t max_in_flight_per_peer = 4;
  // After this many GitLab calls in a row fail as unreachable or slow, no
  // call is made for `breaker_pause`: members wait and retry with a reason
  // in their log instead of piling up behind a GitLab that does not answer.
  int breaker_failures = 5;
  std::chrono::seconds breaker_pause{30};
};

// Checks a joining member's claims against what GitLab says about its job
// token (GET /api/v4/job, docs/security.md): the job id, project, pipeline
// and job name, and from the name's " i/N" suffix the group, member index
// and gang size. Only these verified fields decide which gang a member
// joins. Refusals are cached too (refusal_ttl), GitLab calls are bounded
// in number (max_in_flight, per peer) and paused while GitLab fails
// (breaker_*). Thread-safe; `lookup` may run on several threads at once and
// is called without any lock held.
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
  //   Unavailable: GitLab could not be asked, too many calls are in flight,
  //     or calls are paused after repeated failures (transient; the executor
  //     retries). The last two carry a retry hint (common/retry_after.h):
  //     about a second, or the rest of the pause.
  // `peer` (e.g. gRPC's "ipv4:10.0.0.7:51234") bounds calls per address.
  absl::Status Verify(const std::string& job_token, const JoinRequest& request,
                      const std::string& peer = "");

  // OK when `job_token` is the token of job `job_id`: what member calls
  // after the join (ReportExit, WatchGang, LeaveGang) must show, since the
  // coordinator identifies the member by its job id. Errors as Verify
  // (PermissionDenied naming both job ids).
  absl::Status VerifyJobId(const std::string& job_token, int64_t job_id,
                           const std::string& peer = "");

  // GitLab calls made so far (for tests and metrics).
  int64_t lookups() const {
    MutexLock lock(mu_);
    return lookups_;
  }

 private:
  struct Cached {
    gitlab::ApiJob job;
    Clock::TimePoint expires;
  };

  absl::StatusOr<gitlab::ApiJob> JobOf(const std::string& job_token,
                                       const std::string& peer);
  // JobOf with Verify's errors.
  absl::StatusOr<gitlab::ApiJob> VerifiedJob(const std::string& job_token,
                                             const std::string& peer);
  // Takes a GitLab call slot for `address`, or says why not.
  absl::Status AdmitCallLocked(const std::string& address)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RecordOutcomeLocked(const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Lookup lookup_;
  const Clock& clock_;
  const MemberVerifierOptions options_;
  mutable Mutex mu_;
  // By SHA-256 of the token, so that no token is kept in memory longer than
  // a call.
  std::map<std::string, Cached> cache_ ABSL_GUARDED_BY(mu_);
  RefusalCache refused_ ABSL_GUARDED_BY(mu_);
  size_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, size_t> in_flight_by_peer_ ABSL_GUARDED_BY(mu_);
  int failures_in_a_row_ ABSL_GUARDED_BY(mu_) = 0;
  Clock::TimePoint paused_until_ ABSL_GUARDED_BY(mu_){};
  int64_t lookups_ ABSL_GUARDED_BY(mu_) = 0;
};

// OK when `claimed` (a joining member's GangKey.instance, its CI_SERVER_URL)
// names the GitLab instance `trusted` (what the coordinator verifies members
// with). Scheme and host compare without regard to case and trailing slashes
// are ignored. A member may otherwise name any instance and so start gangs
// under keys that no per-project limit counts together. Errors:
// PermissionDenied naming both URLs (the claimed one cut to 128 bytes).
absl::Status CheckClaimedInstance(const std::string& trusted,
                                  const std::string& claimed);

// The Lookup of a coordinator configured with `gitlab_url` (e.g.
// https://gitlab.example.com): libcurl with `ca_file` (empty: the system's
// CAs) and `timeout` for the whole request.
MemberVerifier::Lookup CurlJobLookup(std::string gitlab_url,
                                     std::string ca_file,
                                     std::chrono::milliseconds timeout);

}  // namespace gdt::coordinator

#endif  // GDT_COORDINATOR_MEMBER_VERIFIER_H_
