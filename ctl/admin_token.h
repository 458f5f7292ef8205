// How operator commands (`gdt-coord hosts`, `cancel`, `status`) present the
// admin token (docs/security.md): read from a file, sent as
// "authorization: Bearer <token>" metadata, never taken from argv.
#ifndef GDT_COORDINATOR_OPERATOR_AUTH_H_
#define GDT_COORDINATOR_OPERATOR_AUTH_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rendezvous/coordinator_client.h"

namespace gdt::ctl {

// The admin token from `flag_file` (--admin-token-file), else from the file
// named by `env_file` (GDT_ADMIN_TOKEN_FILE; may be null); empty when neither
// is given (the coordinator may not need one).
// Errors: those of ReadTokenFile, naming the flag or the variable.
absl::StatusOr<std::string> LoadAdminToken(const std::string& flag_file,
                                           const char* env_file);

// Makes `client` present `admin_token` with every call; nothing when empty.
void PresentAdminToken(rendezvous::CoordinatorClient& client,
                       const std::string& admin_token);

// True for a refusal of the caller's credentials (Unauthenticated,
// PermissionDenied): reported as is, not as "cannot reach".
bool IsAuthRefusal(const absl::Status& status);

}  // namespace gdt::ctl

#endif  // GDT_COORDINATOR_OPERATOR_AUTH_H_
