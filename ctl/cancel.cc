#include "ctl/cancel.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/terminal_text.h"
#include "ctl/admin_token.h"
#include "rendezvous/coordinator_client.h"
#include "rendezvous/grpc_status.h"
#include "rendezvous/operator_input.h"

namespace gdt::ctl {
namespace {

// The coordinator's answer as it is, or "cannot reach" for transport errors.
absl::Status CommandError(const std::string& endpoint,
                          const absl::Status& status) {
  if (rendezvous::IsPeerRefusal(status)) return status;
  return absl::UnavailableError(absl::StrCat("cannot reach coordinator at ",
                                             endpoint, ": ", status.message()));
}

}  // namespace

absl::StatusOr<std::string> RunCancelCommand(
    const std::string& endpoint, const std::string& gang_id,
    const std::string& reason, const rendezvous::ClientSecurity& security,
    const std::string& admin_token, bool force) {
  if (gang_id.empty()) {
    return absl::InvalidArgumentError(
        "gang id must not be empty (see `gdt-coord status`)");
  }
  if (absl::Status valid = rendezvous::CheckCancelReason(reason); !valid.ok()) {
    return valid;
  }
  rendezvous::CoordinatorClient client(endpoint, security);
  PresentAdminToken(client, admin_token);
  v1::CancelGangRequest request;
  request.set_gang_id(gang_id);
  request.set_reason(reason);
  request.set_force(force);
  absl::StatusOr<std::string> root_cause =
      client.CancelGang(request, std::chrono::seconds(5));
  if (root_cause.ok()) {
    // The root cause quotes the reason as given: one safe line.
    return absl::StrCat(
        force ? "forced: " : "cancelled: ", TerminalSafe(*root_cause), "\n");
  }
  return CommandError(endpoint, root_cause.status());
}

absl::StatusOr<std::string> RunCancelFormingCommand(
    const std::string& endpoint, int64_t project_id, int64_t pipeline_id,
    const std::string& reason, const rendezvous::ClientSecurity& security,
    const std::string& admin_token) {
  if (project_id < 0 || pipeline_id < 0) {
    return absl::InvalidArgumentError(
        "--project and --pipeline take a positive id");
  }
  if (absl::Status valid = rendezvous::CheckCancelReason(reason); !valid.ok()) {
    return valid;
  }
  rendezvous::CoordinatorClient client(endpoint, security);
  PresentAdminToken(client, admin_token);
  v1::CancelFormingGangsRequest request;
  request.set_project_id(project_id);
  request.set_pipeline_id(pipeline_id);
  request.set_reason(reason);
  // Each gang is persisted on its own: thousands take a while.
  absl::StatusOr<uint32_t> cancelled =
      client.CancelFormingGangs(request, std::chrono::seconds(120));
  if (!cancelled.ok()) return CommandError(endpoint, cancelled.status());
  std::string scope;
  if (project_id != 0) absl::StrAppend(&scope, " of project ", project_id);
  if (pipeline_id != 0) {
    absl::StrAppend(&scope, project_id != 0 ? "," : "", " of pipeline ",
                    pipeline_id);
  }
  return absl::StrCat("cancelled ", *cancelled, " forming gang",
                      *cancelled == 1 ? "" : "s", scope, "\n");
}

absl::StatusOr<std::string> RunGangsGcCommand(
    const std::string& endpoint, const rendezvous::ClientSecurity& security,
    const std::string& admin_token) {
  rendezvous::CoordinatorClient client(endpoint, security);
  PresentAdminToken(client, admin_token);
  absl::StatusOr<std::vector<std::string>> ended =
      client.CollectGangs(std::chrono::seconds(5));
  if (!ended.ok()) return CommandError(endpoint, ended.status());
  if (ended->empty()) return std::string("no abandoned forming gangs\n");
  std::string out;
  for (const std::string& id : *ended) {
    absl::StrAppend(&out, "ended forming gang ", TerminalSafe(id),
                    ": no member was present\n");
  }
  return out;
}

}  // namespace gdt::ctl
