#ifndef GDT_COORDINATOR_CANCEL_COMMAND_H_
#define GDT_COORDINATOR_CANCEL_COMMAND_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "rendezvous/channel.h"

namespace gdt::ctl {

// `gdt-coord cancel GANG [--reason TEXT]`: asks the coordinator at `endpoint`
// to fail gang `gang_id` as "cancelled by operator" and returns the line to
// print, "gdt-coord: <root-cause line>".
// Errors: NotFound "unknown gang X"; FailedPrecondition "gang X already
// finished (...)"; InvalidArgument for an empty gang id; Unavailable
// "cannot reach coordinator at ADDR: <reason>"; Unauthenticated or
// PermissionDenied when `admin_token` is missing or wrong.
// `security`: TLS towards the coordinator; plaintext by default.
// `force` (`--force`): free the gang's leases whatever its state; never
// FailedPrecondition.
absl::StatusOr<std::string> RunCancelCommand(
    const std::string& endpoint, const std::string& gang_id,
    const std::string& reason, const rendezvous::ClientSecurity& security = {},
    const std::string& admin_token = "", bool force = false);

// `gdt-coord cancel --forming [--project ID] [--pipeline ID]`: cancels every
// forming gang of project `project_id` and pipeline `pipeline_id` (0 = any)
// as RunCancelCommand would, and returns the line to print, e.g.
// "cancelled 100 forming gangs of project 5". Running gangs are untouched.
// Errors as RunCancelCommand; InvalidArgument for a negative id.
absl::StatusOr<std::string> RunCancelFormingCommand(
    const std::string& endpoint, int64_t project_id, int64_t pipeline_id,
    const std::string& reason, const rendezvous::ClientSecurity& security = {},
    const std::string& admin_token = "");

// `gdt-coord gangs gc`: ends every forming gang none of whose members is
// present and returns the lines to print (one per gang, or "no abandoned
// forming gangs"). Errors as RunCancelCommand.
absl::StatusOr<std::string> RunGangsGcCommand(
    const std::string& endpoint, const rendezvous::ClientSecurity& security,
    const std::string& admin_token);

}  // namespace gdt::ctl

#endif  // GDT_COORDINATOR_CANCEL_COMMAND_H_
