#ifndef GDT_COMMON_YAML_CONFIG_H_
#define GDT_COMMON_YAML_CONFIG_H_

#include <functional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "common/tls_config.h"
#include "yaml-cpp/yaml.h"

namespace gdt {

// Reads one top-level entry of a config file into the config being built.
using YamlConfigEntry =
    std::function<absl::Status(const std::string& key, const YAML::Node&)>;

// Parses `text`, the YAML of a daemon's config file: a map whose entries go
// to `entry` in the file's order (an empty document has none). yaml-cpp
// reports errors by throwing, also from `as<T>()` inside `entry`; this is the
// one place gdt's config files catch them.
// Errors: whatever `entry` returns; InvalidArgument "the config must be a
// YAML map", or "bad YAML at line L, column C: ..." for a syntax or type
// error.
absl::Status ParseYamlConfig(std::string_view text,
                             const YamlConfigEntry& entry);

// Reads the config file `path` and parses its text with `parse`
// (absl::StatusOr<Config>(std::string_view)). Every error is one line that
// names the file first: "PATH: ...".
template <typename Config, typename Parse>
absl::StatusOr<Config> LoadYamlConfig(const std::string& path, Parse parse) {
  absl::StatusOr<std::string> text = ReadTextFile(path);
  if (!text.ok()) return text.status();  // Names the path already.
  absl::StatusOr<Config> config = parse(*text);
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(path, ": ", config.status().message()));
  }
  return config;
}

// The boolean `value`: true/false (also yes/no, on/off; in any case, as
// yaml-cpp reads them). Never throws.
// Errors: InvalidArgument "KEY must be true or false".
absl::StatusOr<bool> ReadYamlBool(const YAML::Node& value,
                                  std::string_view key);

// Parses the value of a `tls` key (common/tls_config.h): the scalar `off`
// (or `false`) or a map of ca_file, cert_file, key_file,
// require_client_cert; with `coordinator` also agent_cert_must_match_host
// (a setting only the coordinator has). Never throws.
// Errors: InvalidArgument naming `key` and what is wrong, e.g.
// "unknown key 'tls.ca'".
absl::StatusOr<TlsConfig> ParseTlsConfig(const YAML::Node& value,
                                         std::string_view key = "tls",
                                         bool coordinator = false);

}  // namespace gdt

#endif  // GDT_COMMON_YAML_CONFIG_H_
