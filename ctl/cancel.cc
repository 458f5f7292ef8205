#include "ctl/cancel.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "ctl/admin_token.h"
#include "rendezvous/coordinator_client.h"

namespace gdt::ctl {

absl::StatusOr<std::string> RunCancelCommand(
    const std::string& endpoint, const std::string& gang_id,
    const std::string& reason, const rendezvous::ClientSecurity& security,
    const std::string& admin_token) {
  if (gang_id.empty()) {
    return absl::InvalidArgumentError(
        "gang id must not be empty (see `gdt-coord status`)");
  }
  rendezvous::CoordinatorClient client(endpoint, security);
  PresentAdminToken(client, admin_token);
  v1::CancelGangRequest request;
  request.set_gang_id(gang_id);
  request.set_reason(reason);
  absl::StatusOr<std::string> root_cause =
      client.CancelGang(request, std::chrono::seconds(5));
  if (root_cause.ok()) return absl::StrCat("cancelled: ", *root_cause, "\n");
  switch (root_cause.status().code()) {
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      return root_cause.status();
    default:
      return absl::UnavailableError(
          absl::StrCat("cannot reach coordinator at ", endpoint, ": ",
                       root_cause.status().message()));
  }
}

}  // namespace gdt::ctl
