#include "ctl/admin_token.h"

#include "absl/strings/str_cat.h"
#include "common/secret.h"
#include "rendezvous/metadata.h"

namespace gdt::ctl {

absl::StatusOr<std::string> LoadAdminToken(const std::string& flag_file,
                                           const char* env_file) {
  if (!flag_file.empty()) return ReadTokenFile(flag_file, "--admin-token-file");
  if (env_file != nullptr && env_file[0] != '\0') {
    return ReadTokenFile(env_file, "GDT_ADMIN_TOKEN_FILE");
  }
  return std::string();
}

void PresentAdminToken(rendezvous::CoordinatorClient& client,
                       const std::string& admin_token) {
  if (admin_token.empty()) return;
  client.AddMetadata(rendezvous::kAuthorizationMetadata,
                     absl::StrCat("Bearer ", admin_token));
}

bool IsAuthRefusal(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnauthenticated ||
         status.code() == absl::StatusCode::kPermissionDenied;
}

}  // namespace gdt::ctl
