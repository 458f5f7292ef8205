#include "executor/config.h"

#include <unistd.h>

#include <climits>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/yaml_config.h"
#include "yaml-cpp/yaml.h"

namespace gdt::executor {
namespace {

absl::StatusOr<std::chrono::seconds> PositiveSeconds(const YAML::Node& value,
                                                     const std::string& key) {
  const int64_t seconds = value.as<int64_t>();
  if (seconds <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        key, " must be a positive number of seconds, not ", seconds));
  }
  return std::chrono::seconds(seconds);
}

// The text of a string key. `key:` with nothing after it is YAML's null,
// which yaml-cpp would read as the text "null" (then a host of that name);
// it, and an empty value, are refused naming the key, like a missing one.
absl::StatusOr<std::string> StringValue(const YAML::Node& value,
                                        const std::string& key,
                                        std::string_view expected) {
  if (value.IsNull() || (value.IsScalar() && value.Scalar().empty())) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", key, "' has no value (", std::string(expected), ")"));
  }
  return value.as<std::string>();
}

std::string HostName() {
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

}  // namespace

absl::StatusOr<Config> ParseConfig(std::string_view yaml_text) {
  Config config;
  GDT_RETURN_IF_ERROR(ParseYamlConfig(
      yaml_text,
      [&config](const std::string& key,
                const YAML::Node& value) -> absl::Status {
        // The keys whose value is text.
        const std::pair<const char*, std::pair<std::string*, const char*>>
            strings[] = {
                {"coordinator",
                 {&config.coordinator, "host:port of gdt-coord"}},
                {"builds_root", {&config.builds_root, "an absolute path"}},
                {"cache_root", {&config.cache_root, "an absolute path"}},
                {"arrival_host",
                 {&config.arrival_host,
                  "the runner host's name; leave the key out for this "
                  "host's name"}},
                {"log_level",
                 {&config.log_level,
                  "trace, debug, info, warn, error, "
                  "critical or off"}},
            };
        for (const auto& [name, target] : strings) {
          if (key != name) continue;
          absl::StatusOr<std::string> text =
              StringValue(value, key, target.second);
          if (!text.ok()) return text.status();
          *target.first = *std::move(text);
          return absl::OkStatus();
        }
        if (key == "join_timeout_seconds") {
          absl::StatusOr<std::chrono::seconds> seconds =
              PositiveSeconds(value, key);
          if (!seconds.ok()) return seconds.status();
          config.join_timeout = *seconds;
        } else if (key == "rpc_timeout_seconds") {
          absl::StatusOr<std::chrono::seconds> seconds =
              PositiveSeconds(value, key);
          if (!seconds.ok()) return seconds.status();
          config.rpc_timeout = *seconds;
        } else if (key == "exit_barrier_timeout_seconds") {
          absl::StatusOr<std::chrono::seconds> seconds =
              PositiveSeconds(value, key);
          if (!seconds.ok()) return seconds.status();
          config.exit_barrier_timeout = *seconds;
        } else if (key == "exit_report_retry_seconds") {
          absl::StatusOr<std::chrono::seconds> seconds =
              PositiveSeconds(value, key);
          if (!seconds.ok()) return seconds.status();
          config.exit_report_retry = *seconds;
        } else if (key == "kill_grace_seconds") {
          absl::StatusOr<std::chrono::seconds> seconds =
              PositiveSeconds(value, key);
          if (!seconds.ok()) return seconds.status();
          if (*seconds > std::chrono::seconds(290)) {
            return absl::InvalidArgumentError(absl::StrCat(
                "kill_grace_seconds must be at most 290 (gitlab-runner waits "
                "at most 300 s for a stopped stage), not ",
                seconds->count()));
          }
          config.kill_grace = *seconds;
        } else if (key == "tls") {  // TLS on every gRPC connection.
          absl::StatusOr<TlsConfig> tls = ParseTlsConfig(value);
          if (!tls.ok()) return tls.status();
          config.tls = *tls;
        } else {
          return absl::InvalidArgumentError(
              absl::StrCat("unknown key '", key, "' in executor config"));
        }
        return absl::OkStatus();
      }));
  if (config.coordinator.empty()) {
    return absl::InvalidArgumentError(
        "executor config needs 'coordinator' (host:port of gdt-coord)");
  }
  if (config.builds_root.empty() || config.builds_root.front() != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("builds_root must be an absolute path, not '",
                     config.builds_root, "'"));
  }
  if (config.cache_root.empty() || config.cache_root.front() != '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        "cache_root must be an absolute path, not '", config.cache_root, "'"));
  }
  GDT_RETURN_IF_ERROR(CheckLogLevel(config.log_level));
  GDT_RETURN_IF_ERROR(ValidateClientTls(config.tls));
  if (config.arrival_host.empty()) config.arrival_host = HostName();
  return config;
}

absl::StatusOr<Config> LoadConfig(const std::string& path) {
  return LoadYamlConfig<Config>(path, ParseConfig);
}

std::string ResolveConfigPath(
    const std::string& flag_value,
    const std::map<std::string, std::string>& environment) {
  if (!flag_value.empty()) return flag_value;
  if (auto it = environment.find("GDT_EXECUTOR_CONFIG");
      it != environment.end() && !it->second.empty()) {
    return it->second;
  }
  return std::string(kDefaultConfigPath);
}

}  // namespace gdt::executor
