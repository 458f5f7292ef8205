#include "executor/outcome.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/retry_after.h"
#include "common/terminal_text.h"

namespace gdt::executor {

Outcome Outcome::ScriptFailure(int code) {
  Outcome outcome;
  outcome.kind = OutcomeKind::kScriptFailure;
  outcome.script_exit_code = code;
  return outcome;
}

Outcome Outcome::PeerFailure(std::string message) {
  Outcome outcome = ScriptFailure(kPeerFailureExitCode);
  outcome.message = std::move(message);
  return outcome;
}

Outcome Outcome::Preempted(std::string message) {
  Outcome outcome = ScriptFailure(kPreemptedExitCode);
  outcome.message = std::move(message);
  return outcome;
}

Outcome Outcome::UserError(std::string message) {
  Outcome outcome;
  outcome.kind = OutcomeKind::kUserError;
  outcome.script_exit_code = 1;
  outcome.message = std::move(message);
  return outcome;
}

Outcome Outcome::SystemFailure(std::string message) {
  Outcome outcome;
  outcome.kind = OutcomeKind::kSystemFailure;
  outcome.message = std::move(message);
  return outcome;
}

Outcome JoinFailureOutcome(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAlreadyExists:
      return Outcome::UserError(
          absl::StrCat("gang rejected: ", status.message()));
    case absl::StatusCode::kAborted:
      return Outcome::SystemFailure(
          absl::StrCat("gang aborted: ", status.message()));
    case absl::StatusCode::kDeadlineExceeded:
      return Outcome::SystemFailure(std::string(status.message()));
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      // The coordinator's reason ("member rejected: CI_PIPELINE_ID ...").
      return Outcome::SystemFailure(std::string(status.message()));
    default:
      return Outcome::SystemFailure(
          absl::StrCat("cannot join gang: ", status.ToString()));
  }
}

std::string JoinRetryLine(const absl::Status& status,
                          const std::string& coordinator, uint64_t attempts) {
  if (std::optional<std::chrono::milliseconds> wait = RetryAfter(status)) {
    return absl::StrCat(
        "coordinator refuses joins for now: ", status.message(),
        "; retrying in ", absl::StrFormat("%.1f", wait->count() / 1000.0), " s",
        attempts > 1 ? absl::StrCat(" (", attempts, " refusals)")
                     : std::string());
  }
  return absl::StrCat("coordinator unreachable at ", coordinator, " (",
                      status.message(), "), retrying",
                      attempts > 1 ? absl::StrCat(" (", attempts, " attempts)")
                                   : std::string());
}

Outcome JoinRefusedUntilDeadline(const absl::Status& refusal,
                                 std::chrono::seconds waited) {
  return Outcome::SystemFailure(
      absl::StrCat("coordinator refused this join for ", waited.count(),
                   " s, until the join deadline: ", refusal.message()));
}

int FinishOutcome(const Outcome& outcome, const ExitCodes& codes,
                  std::ostream& err) {
  // The message may quote a reason an operator or another job gave (a
  // cancel reason, a peer's failure): one line, nothing that steers the log.
  if (!outcome.message.empty()) {
    err << "gdt: " << TerminalSafe(outcome.message) << "\n";
  }
  switch (outcome.kind) {
    case OutcomeKind::kSuccess:
      err.flush();
      return 0;
    case OutcomeKind::kScriptFailure:
    case OutcomeKind::kUserError:
      if (!codes.exit_code_file.empty()) {
        std::ofstream file(codes.exit_code_file, std::ios::trunc);
        file << outcome.script_exit_code << "\n";
        file.close();
        if (!file) {
          err << "gdt: cannot write exit code to " << codes.exit_code_file
              << ": " << std::strerror(errno) << "\n";
        }
      }
      err.flush();
      return codes.build_failure;
    case OutcomeKind::kSystemFailure:
      err.flush();
      return codes.system_failure;
  }
  return codes.system_failure;
}

}  // namespace gdt::executor
