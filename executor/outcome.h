#ifndef GDT_EXECUTOR_OUTCOME_H_
#define GDT_EXECUTOR_OUTCOME_H_

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "common/exit_code.h"

namespace gdt::executor {

// The code written to BUILD_EXIT_CODE_FILE when a member's script was
// stopped, or its exit barrier failed, because another member of its gang
// failed: "stopped because a peer failed", distinct from any code the failing
// member's own script returns, so `retry:exit_codes` can tell them apart.
// Documented in docs/environment.md and docs/protocol.md.
inline constexpr int kPeerFailureExitCode = kPeerFailureJobExitCode;
// The code written when the member's gang was preempted: stopped, after its
// checkpoint notice, to make room for a higher-priority gang. A script
// failure like 75, so the default `retry:` of `gdt-ci expand` brings the
// gang back, and it resumes from its latest checkpoint. Documented with 75.
inline constexpr int kPreemptedExitCode = kPreemptedJobExitCode;

// What happened in one executor stage, as data. main() turns it into the
// runner's exit code with FinishOutcome(); nothing else picks exit codes.
enum class OutcomeKind {
  kSuccess,        // Exit 0.
  kScriptFailure,  // The user's script exited non-zero: BUILD_FAILURE with
                   // its real code in BUILD_EXIT_CODE_FILE.
  kUserError,      // The job is wrong (bad CI_NODE_INDEX, unknown launcher,
                   // infeasible gang): BUILD_FAILURE with code 1, no retry.
  kSystemFailure,  // Infrastructure (config, payload, coordinator or agent
                   // unreachable): SYSTEM_FAILURE, the runner may retry.
};

struct Outcome {
  OutcomeKind kind = OutcomeKind::kSuccess;
  int script_exit_code = 0;  // kScriptFailure and kUserError only.
  std::string message;       // One line for the job log; empty on success.
  // A helper thread may still be blocked in an RPC (an interrupted join):
  // the process must end without running static destructors.
  bool exit_immediately = false;

  static Outcome Success() { return Outcome{}; }
  static Outcome ScriptFailure(int code);
  // A build failure with kPeerFailureExitCode; `message` is the gang's
  // root-cause line.
  static Outcome PeerFailure(std::string message);
  // A build failure with kPreemptedExitCode; `message` is the gang's
  // root-cause line (who preempted it, the checkpoint, what was lost).
  static Outcome Preempted(std::string message);
  static Outcome UserError(std::string message);
  static Outcome SystemFailure(std::string message);
};

// The exit codes and file the runner hands to every stage
// (docs/gitlab-runner-protocol.md).
struct ExitCodes {
  int build_failure = 1;
  int system_failure = 2;
  std::string exit_code_file;  // BUILD_EXIT_CODE_FILE; may be empty.
};

// Classifies a failed JoinGang: the coordinator's verdicts on the job itself
// (InvalidArgument, FailedPrecondition, AlreadyExists: an infeasible or
// malformed gang) are user errors; everything else is a system failure that a
// retry may fix.
Outcome JoinFailureOutcome(const absl::Status& status);

// The job-log line (without "gdt: ") for a join attempt that failed and is
// tried again, standing for `attempts` such attempts: `status` as
// CoordinatorClient::JoinGang's on_reconnect sees it. A refusal that
// waiting can fix (one with a retry hint, common/retry_after.h: a
// per-project join rate limit, paused member checks) says that the
// coordinator refuses joins for now, its reason and when the member asks
// again; any other failure says the coordinator at `coordinator` is
// unreachable.
std::string JoinRetryLine(const absl::Status& status,
                          const std::string& coordinator, uint64_t attempts);

// A join that reached its deadline (after `waited`) while the coordinator
// still refused it for now, `refusal` being the last refusal: a system
// failure (the runner may retry the job) whose one line gives the
// coordinator's reason.
Outcome JoinRefusedUntilDeadline(const absl::Status& refusal,
                                 std::chrono::seconds waited);

// Prints the outcome's message as one "gdt: ..." line on `err`, writes
// BUILD_EXIT_CODE_FILE for build failures, and returns the process exit
// code. Never fails: a file that cannot be written is reported on `err`.
int FinishOutcome(const Outcome& outcome, const ExitCodes& codes,
                  std::ostream& err);

}  // namespace gdt::executor

#endif  // GDT_EXECUTOR_OUTCOME_H_
