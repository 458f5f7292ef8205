#include "common/tls_config.h"

#include "absl/strings/str_cat.h"

namespace gdt {

absl::Status ValidateServerTls(const TlsConfig& tls) {
  if (!tls.enabled) return absl::OkStatus();
  if (tls.cert_file.empty() || tls.key_file.empty()) {
    return absl::InvalidArgumentError(
        "tls.cert_file and tls.key_file are required to serve TLS");
  }
  return ValidateClientTls(tls);
}

absl::Status ValidateClientTls(const TlsConfig& tls) {
  if (!tls.enabled) return absl::OkStatus();
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return absl::InvalidArgumentError(
        "tls.cert_file and tls.key_file must be given together");
  }
  if (tls.require_client_cert && tls.ca_file.empty()) {
    return absl::InvalidArgumentError(
        "tls.require_client_cert needs tls.ca_file");
  }
  return absl::OkStatus();
}

std::string PlaintextWarning(const TlsConfig& tls, std::string_view program) {
  if (tls.enabled) return "";
  return absl::StrCat(
      std::string(program), ": WARNING: TLS is off (",
      tls.explicitly_off ? "tls: off" : "no tls section in the config",
      "): gRPC traffic is plaintext and unauthenticated; use it only on a "
      "trusted network (docs/security.md \"TLS\")");
}

}  // namespace gdt
