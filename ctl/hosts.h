// `gdt-coord hosts list|drain|undrain|remove`: the operator's view and
// control of the host inventory, through the coordinator's RPCs.
#ifndef GDT_COORDINATOR_HOSTS_COMMAND_H_
#define GDT_COORDINATOR_HOSTS_COMMAND_H_

#include <string>

#include "absl/status/statusor.h"
#include "gdt/v1/coordinator.pb.h"
#include "rendezvous/channel.h"

namespace gdt::ctl {

// One row per host: name, address, state (up, down, drained), GPUs used of
// total with their models, labels, members running. At most `limit` rows
// (0 = all), then "... and K more (use --limit 0 or --json)".
std::string RenderHostsText(const v1::GetStatusResponse& status,
                            size_t limit = 0);

// {"hosts":[{"name":..., "state":..., "gpus":[{"index", "uuid", "model",
// "memory_bytes", "leased"}], ...}]} for scripts.
std::string RenderHostsJson(const v1::GetStatusResponse& status);

// `hosts list`: the text to print.
// Errors: Unavailable "cannot reach coordinator at ADDR: <reason>".
// `security`: TLS towards the coordinator; plaintext by default.
// `admin_token` (may be empty) is presented as operator credentials; a
// refused one is returned as Unauthenticated/PermissionDenied.
// Text shows at most `limit` hosts (0 = all); JSON every host.
absl::StatusOr<std::string> RunHostsList(
    const std::string& endpoint, bool json,
    const rendezvous::ClientSecurity& security = {},
    const std::string& admin_token = "", size_t limit = 0);

// `hosts drain|undrain|remove HOST` (`action` is one of those words): the
// line to print on success, e.g. "host gpu-07 drained: it takes no new
// gangs; running gangs finish".
// Errors: NotFound "unknown host NAME"; FailedPrecondition while members run
// on a host to remove; Unavailable when the coordinator cannot be reached;
// InvalidArgument for another action.
absl::StatusOr<std::string> RunHostsAction(
    const std::string& endpoint, const std::string& action,
    const std::string& host, const rendezvous::ClientSecurity& security = {},
    const std::string& admin_token = "");

// `hosts token create HOST | list | revoke HOST` (`action` is one
// of those words). create: the new token and a newline, nothing else (so
// that `... > host.token` stores it; it is shown only this once). list: one
// line per host with a token and when it was issued (never the tokens).
// revoke: a line saying so.
// Errors: NotFound for revoking a host without a token; Unauthenticated or
// PermissionDenied for a missing or wrong admin token; Unavailable when the
// coordinator cannot be reached; InvalidArgument for another action or an
// empty host.
absl::StatusOr<std::string> RunHostTokenCommand(
    const std::string& endpoint, const std::string& action,
    const std::string& host, const rendezvous::ClientSecurity& security = {},
    const std::string& admin_token = "");

}  // namespace gdt::ctl

#endif  // GDT_COORDINATOR_HOSTS_COMMAND_H_
