#include "ci/runner_config.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "ci/go_duration.h"
#include "common/file.h"
#include "common/status_macros.h"
#include "toml++/toml.h"

namespace gdt::ci {
namespace {

absl::Status WrongType(const std::string& source, std::string_view key,
                       std::string_view want) {
  return absl::InvalidArgumentError(absl::StrCat(
      source, ": ", std::string(key), " must be ", std::string(want)));
}

absl::Status ReadString(const toml::table& table, const std::string& source,
                        std::string_view prefix, std::string_view key,
                        std::string* out) {
  const toml::node* node = table.get(key);
  if (node == nullptr) return absl::OkStatus();
  const std::optional<std::string> value = node->value<std::string>();
  if (!node->is_string() || !value.has_value()) {
    return WrongType(source, std::string(prefix) + std::string(key),
                     "a string");
  }
  *out = *value;
  return absl::OkStatus();
}

absl::Status ReadStrings(const toml::table& table, const std::string& source,
                         std::string_view prefix, std::string_view key,
                         std::vector<std::string>* out) {
  const toml::node* node = table.get(key);
  if (node == nullptr) return absl::OkStatus();
  const toml::array* array = node->as_array();
  if (array == nullptr) {
    return WrongType(source, std::string(prefix) + std::string(key),
                     "an array of strings");
  }
  out->clear();
  for (const toml::node& item : *array) {
    const std::optional<std::string> value = item.value<std::string>();
    if (!item.is_string() || !value.has_value()) {
      return WrongType(source, std::string(prefix) + std::string(key),
                       "an array of strings");
    }
    out->push_back(*value);
  }
  return absl::OkStatus();
}

absl::Status ReadSeconds(const toml::table& table, const std::string& source,
                         std::string_view prefix, std::string_view key,
                         std::chrono::milliseconds* out) {
  const toml::node* node = table.get(key);
  if (node == nullptr) return absl::OkStatus();
  const std::optional<int64_t> value = node->value<int64_t>();
  if (!node->is_integer() || !value.has_value() || *value < 0 ||
      *value > kMaxTimeoutSeconds) {
    return WrongType(source, std::string(prefix) + std::string(key),
                     absl::StrCat("a non-negative integer (seconds), at most ",
                                  kMaxTimeoutSeconds));
  }
  *out = std::chrono::seconds(*value);
  return absl::OkStatus();
}

// `output_limit`: the job log's size limit in kilobytes (0 or absent: the
// runner's default).
absl::Status ReadOutputLimit(const toml::table& table,
                             const std::string& source, int64_t* bytes) {
  const toml::node* node = table.get("output_limit");
  if (node == nullptr) return absl::OkStatus();
  const std::optional<int64_t> value = node->value<int64_t>();
  // GitLab's own trace limit is in the gigabytes; 1 TiB bounds the
  // multiplication.
  constexpr int64_t kMaxKilobytes = int64_t{1} << 30;
  if (!node->is_integer() || !value.has_value() || *value < 0 ||
      *value > kMaxKilobytes) {
    return WrongType(
        source, "runners.output_limit",
        absl::StrCat("a non-negative integer (kilobytes), at most ",
                     kMaxKilobytes));
  }
  if (*value > 0) *bytes = *value * 1024;
  return absl::OkStatus();
}

// A Go duration string ("30s", "1h30m", "1.5m"), as gitlab-runner reads
// `prepare_timeout`.
absl::Status ReadDuration(const toml::table& table, const std::string& source,
                          std::string_view prefix, std::string_view key,
                          std::chrono::milliseconds* out) {
  const toml::node* node = table.get(key);
  if (node == nullptr) return absl::OkStatus();
  const std::optional<std::string> text = node->value<std::string>();
  absl::StatusOr<std::chrono::nanoseconds> duration =
      text.has_value() && node->is_string()
          ? ParseGoDuration(*text)
          : absl::InvalidArgumentError("not a string");
  if (!duration.ok() || *duration > std::chrono::seconds(kMaxTimeoutSeconds)) {
    return WrongType(source, std::string(prefix) + std::string(key),
                     "a duration string such as \"30s\" or \"1h30m\", at "
                     "most ten years");
  }
  *out = std::chrono::duration_cast<std::chrono::milliseconds>(*duration);
  return absl::OkStatus();
}

absl::Status ReadBool(const toml::table& table, const std::string& source,
                      std::string_view prefix, std::string_view key,
                      bool* out) {
  const toml::node* node = table.get(key);
  if (node == nullptr) return absl::OkStatus();
  const std::optional<bool> value = node->value<bool>();
  if (!node->is_boolean() || !value.has_value()) {
    return WrongType(source, std::string(prefix) + std::string(key),
                     "a boolean");
  }
  *out = *value;
  return absl::OkStatus();
}

// A boolean whose absence the caller tells from false.
absl::Status ReadBool(const toml::table& table, const std::string& source,
                      std::string_view prefix, std::string_view key,
                      std::optional<bool>* out) {
  if (table.get(key) == nullptr) return absl::OkStatus();
  bool value = false;
  GDT_RETURN_IF_ERROR(ReadBool(table, source, prefix, key, &value));
  *out = value;
  return absl::OkStatus();
}

// `[runners.feature_flags]`: a table of booleans, as gitlab-runner reads it.
absl::Status ReadFeatureFlags(const toml::table& runner,
                              const std::string& source,
                              std::map<std::string, bool, std::less<>>* out) {
  const toml::node* node = runner.get("feature_flags");
  if (node == nullptr) return absl::OkStatus();
  const toml::table* table = node->as_table();
  if (table == nullptr) {
    return WrongType(source, "runners.feature_flags", "a table of booleans");
  }
  for (const auto& [key, value] : *table) {
    const std::optional<bool> flag = value.value<bool>();
    if (!value.is_boolean() || !flag.has_value()) {
      return WrongType(
          source,
          absl::StrCat("runners.feature_flags.", std::string(key.str())),
          "a boolean");
    }
    (*out)[std::string(key.str())] = *flag;
  }
  return absl::OkStatus();
}

}  // namespace

std::string ShortenRunnerToken(std::string_view token) {
  const auto drop = [&token](std::string_view prefix) {
    if (token.substr(0, prefix.size()) != prefix) return false;
    token.remove_prefix(prefix.size());
    return true;
  };
  const auto drop_partition = [&] {
    return drop("t1_") || drop("t2_") || drop("t3_");
  };
  if (drop("glrt-")) {
    drop_partition();
  } else if (!drop_partition()) {
    drop("glrtr-");
  }
  drop("glcbt-");
  if (token.size() >= 9 && token.substr(0, 2) == "GR" &&
      std::all_of(token.begin() + 2, token.begin() + 9, [](char c) {
        return absl::ascii_isxdigit(static_cast<unsigned char>(c));
      })) {
    token.remove_prefix(9);
  }
  return std::string(token.substr(0, 9));
}

absl::StatusOr<RunnerConfig> ParseRunnerConfigToml(std::string_view text,
                                                   const std::string& source,
                                                   const std::string& name) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& error) {
    const toml::source_position where = error.source().begin;
    return absl::InvalidArgumentError(
        absl::StrCat(source, ":", where.line, ":", where.column, ": ",
                     std::string(error.description())));
  }
  const toml::array* runners = root["runners"].as_array();
  if (runners == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": no [[runners]] entry"));
  }
  for (const toml::node& node : *runners) {
    const toml::table* runner = node.as_table();
    if (runner == nullptr) {
      return WrongType(source, "[[runners]]", "an array of tables");
    }
    RunnerConfig config;
    std::string executor;
    if (absl::Status s =
            ReadString(*runner, source, "runners.", "executor", &executor);
        !s.ok()) {
      return s;
    }
    std::string runner_name;
    if (absl::Status s =
            ReadString(*runner, source, "runners.", "name", &runner_name);
        !s.ok()) {
      return s;
    }
    if (executor != "custom" || (!name.empty() && runner_name != name)) {
      continue;
    }
    if (!runner_name.empty()) config.name = runner_name;
    std::string token;
    if (absl::Status s =
            ReadString(*runner, source, "runners.", "token", &token);
        !s.ok()) {
      return s;
    }
    if (!token.empty()) config.runner_short_token = ShortenRunnerToken(token);
    const std::string shell_before = config.shell;
    for (absl::Status s :
         {ReadString(*runner, source, "runners.", "url", &config.url),
          ReadString(*runner, source, "runners.", "clone_url",
                     &config.clone_url),
          ReadString(*runner, source, "runners.", "builds_dir",
                     &config.builds_dir),
          ReadString(*runner, source, "runners.", "cache_dir",
                     &config.cache_dir),
          ReadString(*runner, source, "runners.", "shell", &config.shell),
          ReadOutputLimit(*runner, source, &config.output_limit_bytes),
          ReadString(*runner, source, "runners.", "pre_get_sources_script",
                     &config.pre_get_sources_script),
          ReadString(*runner, source, "runners.", "post_get_sources_script",
                     &config.post_get_sources_script),
          ReadString(*runner, source, "runners.", "pre_build_script",
                     &config.pre_build_script),
          ReadString(*runner, source, "runners.", "post_build_script",
                     &config.post_build_script),
          ReadStrings(*runner, source, "runners.", "environment",
                      &config.environment),
          ReadDuration(*runner, source, "runners.", "prepare_timeout",
                       &config.prepare_timeout),
          ReadDuration(*runner, source, "runners.", "get_sources_timeout",
                       &config.get_sources_timeout),
          ReadBool(*runner, source, "runners.", "clean_git_config",
                   &config.clean_git_config),
          ReadFeatureFlags(*runner, source, &config.feature_flags)}) {
      if (!s.ok()) return s;
    }
    if (const toml::node* dir = runner->get("custom_build_dir")) {
      const toml::table* table = dir->as_table();
      if (table == nullptr) {
        return WrongType(source, "runners.custom_build_dir", "a table");
      }
      if (absl::Status s =
              ReadBool(*table, source, "runners.custom_build_dir.", "enabled",
                       &config.custom_build_dir_enabled);
          !s.ok()) {
        return s;
      }
    }
    if (config.shell.empty()) config.shell = shell_before;
    if (config.shell != "bash") {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": runners.shell is '", config.shell,
                       "'; gdt needs bash (gitlab-runner's default on Linux)"));
    }
    const toml::table* custom = (*runner)["custom"].as_table();
    if (custom == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": the custom runner has no [runners.custom]"));
    }
    constexpr std::string_view p = "runners.custom.";
    for (absl::Status s :
         {ReadString(*custom, source, p, "config_exec", &config.config_exec),
          ReadStrings(*custom, source, p, "config_args", &config.config_args),
          ReadString(*custom, source, p, "prepare_exec", &config.prepare_exec),
          ReadStrings(*custom, source, p, "prepare_args", &config.prepare_args),
          ReadString(*custom, source, p, "run_exec", &config.run_exec),
          ReadStrings(*custom, source, p, "run_args", &config.run_args),
          ReadString(*custom, source, p, "cleanup_exec", &config.cleanup_exec),
          ReadStrings(*custom, source, p, "cleanup_args", &config.cleanup_args),
          ReadSeconds(*custom, source, p, "config_exec_timeout",
                      &config.config_exec_timeout),
          ReadSeconds(*custom, source, p, "prepare_exec_timeout",
                      &config.prepare_exec_timeout),
          ReadSeconds(*custom, source, p, "cleanup_exec_timeout",
                      &config.cleanup_exec_timeout),
          ReadSeconds(*custom, source, p, "graceful_kill_timeout",
                      &config.graceful_kill_timeout),
          ReadSeconds(*custom, source, p, "force_kill_timeout",
                      &config.force_kill_timeout)}) {
      if (!s.ok()) return s;
    }
    if (config.run_exec.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": runners.custom.run_exec is required"));
    }
    return config;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(source, ": no [[runners]] entry with executor = \"custom\"",
                   name.empty() ? "" : absl::StrCat(" named '", name, "'")));
}

absl::StatusOr<RunnerConfig> LoadRunnerConfigToml(const std::string& path,
                                                  const std::string& name) {
  absl::StatusOr<std::string> text = ReadTextFile(path);
  if (!text.ok()) return text.status();
  absl::StatusOr<RunnerConfig> config =
      ParseRunnerConfigToml(*text, path, name);
  if (!config.ok()) return config;
  // The system ID the runner saved beside its config.toml, when it is one
  // ("s_" or "r_" and 12 letters or digits, white space around it ignored).
  const std::string dir = std::filesystem::path(path).parent_path().string();
  absl::StatusOr<std::string> saved = ReadTextFile(
      (dir.empty() ? std::string(".") : dir) + "/.runner_system_id");
  if (saved.ok()) {
    const std::string id(absl::StripAsciiWhitespace(*saved));
    const bool valid =
        id.size() == 14 && (id[0] == 's' || id[0] == 'r') && id[1] == '_' &&
        std::all_of(id.begin() + 2, id.end(), [](char c) {
          return absl::ascii_isalnum(static_cast<unsigned char>(c));
        });
    if (valid) config->system_id = id;
  }
  return config;
}

}  // namespace gdt::ci
