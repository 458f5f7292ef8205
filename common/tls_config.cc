#include "common/tls_config.h"

#include "absl/strings/str_cat.h"

namespace gdt {
namespace {

absl::StatusOr<std::string> Scalar(const YAML::Node& value,
                                   const std::string& key) {
  if (!value.IsScalar() || value.Scalar().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, " must be a non-empty path"));
  }
  return value.Scalar();
}

absl::StatusOr<bool> Boolean(const YAML::Node& value, const std::string& key) {
  if (value.IsScalar()) {
    const std::string& text = value.Scalar();
    if (text == "true" || text == "yes" || text == "on") return true;
    if (text == "false" || text == "no" || text == "off") return false;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(key, " must be true or false"));
}

}  // namespace

absl::StatusOr<TlsConfig> ParseTlsConfig(const YAML::Node& value,
                                         std::string_view key) {
  const std::string name(key);
  TlsConfig tls;
  if (value.IsScalar()) {
    const std::string& text = value.Scalar();
    if (text == "off" || text == "false" || text == "no") {
      tls.explicitly_off = true;
      return tls;
    }
    return absl::InvalidArgumentError(
        absl::StrCat(name,
                     " must be 'off' or a map of ca_file, cert_file, key_file, "
                     "require_client_cert; got '",
                     text, "'"));
  }
  if (!value.IsMap()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name,
                     " must be 'off' or a map of ca_file, cert_file, key_file, "
                     "require_client_cert"));
  }
  tls.enabled = true;
  for (const auto& entry : value) {
    if (!entry.first.IsScalar()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " has a key that is not a string"));
    }
    const std::string sub = entry.first.Scalar();
    const std::string full = absl::StrCat(name, ".", sub);
    if (sub == "ca_file" || sub == "cert_file" || sub == "key_file") {
      absl::StatusOr<std::string> path = Scalar(entry.second, full);
      if (!path.ok()) return path.status();
      (sub == "ca_file"     ? tls.ca_file
       : sub == "cert_file" ? tls.cert_file
                            : tls.key_file) = *path;
    } else if (sub == "require_client_cert") {
      absl::StatusOr<bool> flag = Boolean(entry.second, full);
      if (!flag.ok()) return flag.status();
      tls.require_client_cert = *flag;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown key '", full, "'"));
    }
  }
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ".cert_file and ", name, ".key_file must be given together"));
  }
  if (tls.require_client_cert && tls.ca_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ".require_client_cert needs ", name,
                     ".ca_file (the CA that signed the client certificates)"));
  }
  return tls;
}

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
