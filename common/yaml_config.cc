#include "common/yaml_config.h"

#include <string>

#include "absl/strings/ascii.h"

namespace gdt {

absl::Status ParseYamlConfig(std::string_view text,
                             const YamlConfigEntry& entry) {
  try {
    const YAML::Node root = YAML::Load(std::string(text));
    if (root.IsNull()) return absl::OkStatus();  // All defaults.
    if (!root.IsMap()) {
      return absl::InvalidArgumentError("the config must be a YAML map");
    }
    for (const auto& item : root) {
      if (absl::Status status =
              entry(item.first.as<std::string>(), item.second);
          !status.ok()) {
        return status;
      }
    }
  } catch (const YAML::Exception& e) {
    if (e.mark.is_null()) {
      return absl::InvalidArgumentError(absl::StrCat("bad YAML: ", e.msg));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("bad YAML at line ", e.mark.line + 1, ", column ",
                     e.mark.column + 1, ": ", e.msg));
  }
  return absl::OkStatus();
}

namespace {

absl::StatusOr<std::string> Scalar(const YAML::Node& value,
                                   const std::string& key) {
  if (!value.IsScalar() || value.Scalar().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, " must be a non-empty path"));
  }
  return value.Scalar();
}

}  // namespace

absl::StatusOr<bool> ReadYamlBool(const YAML::Node& value,
                                  std::string_view key) {
  if (value.IsScalar()) {
    const std::string text = absl::AsciiStrToLower(value.Scalar());
    if (text == "true" || text == "yes" || text == "on") return true;
    if (text == "false" || text == "no" || text == "off") return false;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(std::string(key), " must be true or false"));
}

absl::StatusOr<TlsConfig> ParseTlsConfig(const YAML::Node& value,
                                         std::string_view key,
                                         bool coordinator) {
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
      absl::StatusOr<bool> flag = ReadYamlBool(entry.second, full);
      if (!flag.ok()) return flag.status();
      tls.require_client_cert = *flag;
    } else if (sub == "agent_cert_must_match_host") {
      if (!coordinator) {
        return absl::InvalidArgumentError(absl::StrCat(
            full, " is a coordinator setting (coord.yaml); remove it here"));
      }
      absl::StatusOr<bool> flag = ReadYamlBool(entry.second, full);
      if (!flag.ok()) return flag.status();
      tls.agent_cert_must_match_host = *flag;
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
  if (tls.agent_cert_must_match_host.value_or(false) &&
      !tls.require_client_cert) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ".agent_cert_must_match_host needs ", name,
        ".require_client_cert: true (without client certificates there is "
        "no name to match)"));
  }
  return tls;
}

}  // namespace gdt
