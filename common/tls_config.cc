#include "common/tls_config.h"

#include "absl/strings/str_cat.h"
#include "common/host_port.h"

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

bool AgentCertMustMatchHost(const TlsConfig& tls) {
  return tls.enabled && tls.require_client_cert &&
         tls.agent_cert_must_match_host.value_or(true);
}

std::string PlaintextWarning(const TlsConfig& tls, std::string_view program) {
  if (tls.enabled) return "";
  return absl::StrCat(
      std::string(program), ": WARNING: TLS is off (",
      tls.explicitly_off ? "tls: off" : "no tls section in the config",
      "): gRPC traffic is plaintext and unauthenticated; use it only on a "
      "trusted network (docs/security.md \"TLS\")");
}

absl::Status CheckListenerTls(const TlsConfig& tls,
                              std::string_view listen_address) {
  if (tls.enabled || tls.explicitly_off) return absl::OkStatus();
  absl::StatusOr<HostPort> listen = ParseHostPort(listen_address);
  if (!listen.ok()) return listen.status();
  const std::string& host = listen->host;
  const bool loopback =
      host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
  if (loopback) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "listen_address ", std::string(listen_address),
      " is reachable from other machines but the config has no tls section; "
      "configure tls (docs/security.md \"TLS\") or write `tls: off` to "
      "serve plaintext on purpose"));
}

}  // namespace gdt
