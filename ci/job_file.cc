#include "ci/job_file.h"

#include <yaml-cpp/yaml.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "common/status_macros.h"

namespace gdt::ci {
namespace {

// Top-level keys that are not jobs.
const std::set<std::string>& ReservedKeys() {
  static const std::set<std::string> keys = {
      "default",       "include",      "stages",   "variables",
      "workflow",      "image",        "services", "cache",
      "before_script", "after_script", "types",    "spec"};
  return keys;
}

// Job keys run-local understands or may safely ignore (they only matter to
// GitLab's scheduling or to features a local run has no use for).
const std::set<std::string>& KnownJobKeys() {
  static const std::set<std::string> keys = {
      "script",        "before_script", "after_script",   "variables",
      "parallel",      "timeout",       "artifacts",      "stage",
      "tags",          "rules",         "only",           "except",
      "when",          "needs",         "dependencies",   "image",
      "services",      "cache",         "retry",          "allow_failure",
      "interruptible", "environment",   "resource_group", "coverage",
      "id_tokens",     "secrets",       "release",        "hooks",
      "inherit",       "start_in",      "pages",          "manual_confirmation",
      "identity",      "extends",       "trigger",        "dast_configuration"};
  return keys;
}

absl::Status JobError(std::string_view job, std::string_view message) {
  return absl::InvalidArgumentError(
      absl::StrCat("job ", std::string(job), ": ", std::string(message)));
}

// A scalar as GitLab sees it (numbers and booleans become their text).
bool ScalarText(const YAML::Node& node, std::string* out) {
  if (!node.IsScalar()) return false;
  *out = node.Scalar();
  return true;
}

// `script:`-style value: a string or a (nested) list of strings.
// `id_tokens: {NAME: {aud: AUDIENCE or [AUDIENCES]}}`.
absl::Status ReadIdTokens(
    const YAML::Node& node, std::string_view job,
    std::vector<std::pair<std::string, std::vector<std::string>>>* out) {
  if (!node.IsMap()) {
    return JobError(job, "id_tokens must map variable names to {aud: ...}");
  }
  for (const auto& entry : node) {
    std::string variable;
    if (!ScalarText(entry.first, &variable) || variable.empty()) {
      return JobError(job, "id_tokens keys must be variable names");
    }
    const YAML::Node aud =
        entry.second.IsMap() ? entry.second["aud"] : YAML::Node();
    std::vector<std::string> audiences;
    std::string one;
    if (aud && ScalarText(aud, &one) && !one.empty()) {
      audiences.push_back(one);
    } else if (aud && aud.IsSequence()) {
      for (const YAML::Node& item : aud) {
        if (!ScalarText(item, &one) || one.empty()) {
          audiences.clear();  // One bad entry spoils the list.
          break;
        }
        audiences.push_back(one);
      }
    }
    if (audiences.empty()) {
      return JobError(job, absl::StrCat("id_tokens.", variable,
                                        " needs aud: a string or a list of "
                                        "strings"));
    }
    out->emplace_back(variable, std::move(audiences));
  }
  return absl::OkStatus();
}

absl::Status ReadScript(const YAML::Node& node, std::string_view job,
                        std::string_view key, std::vector<std::string>* out) {
  if (node.IsNull()) return absl::OkStatus();
  std::string text;
  if (ScalarText(node, &text)) {
    out->push_back(text);
    return absl::OkStatus();
  }
  if (!node.IsSequence()) {
    return JobError(job,
                    absl::StrCat(std::string(key),
                                 " must be a string or a list of strings"));
  }
  for (const YAML::Node& item : node) {
    if (item.IsSequence()) {
      GDT_RETURN_IF_ERROR(ReadScript(item, job, key, out));
      continue;
    }
    if (!ScalarText(item, &text)) {
      return JobError(
          job, absl::StrCat(std::string(key), " must contain only strings"));
    }
    out->push_back(text);
  }
  return absl::OkStatus();
}

absl::Status ReadStringList(const YAML::Node& node, std::string_view job,
                            std::string_view key,
                            std::vector<std::string>* out) {
  out->clear();
  return ReadScript(node, job, key, out);
}

// Merges a `variables:` map into `out`; a repeated key replaces the earlier
// value in place.
absl::Status ReadVariables(
    const YAML::Node& node, std::string_view owner,
    std::vector<std::pair<std::string, std::string>>* out) {
  if (node.IsNull()) return absl::OkStatus();
  if (!node.IsMap()) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(owner), ": variables must be a map"));
  }
  for (const auto& entry : node) {
    const std::string key = entry.first.as<std::string>();
    std::string value;
    if (entry.second.IsMap()) {
      // `VAR: {value: ..., description: ...}`
      const YAML::Node inner = entry.second["value"];
      if (!inner || !ScalarText(inner, &value)) {
        return absl::InvalidArgumentError(absl::StrCat(
            std::string(owner), ": variable ", key, " has no string 'value'"));
      }
    } else if (entry.second.IsNull()) {
      value.clear();
    } else if (!ScalarText(entry.second, &value)) {
      return absl::InvalidArgumentError(absl::StrCat(
          std::string(owner), ": variable ", key, " must be a string"));
    }
    bool replaced = false;
    for (auto& [existing_key, existing_value] : *out) {
      if (existing_key == key) {
        existing_value = value;
        replaced = true;
      }
    }
    if (!replaced) out->emplace_back(key, value);
  }
  return absl::OkStatus();
}

absl::Status ReadArtifacts(const YAML::Node& node, std::string_view job,
                           CiArtifacts* out) {
  if (node.IsNull()) return absl::OkStatus();
  if (!node.IsMap()) return JobError(job, "artifacts must be a map");
  for (const auto& entry : node) {
    const std::string key = entry.first.as<std::string>();
    const YAML::Node& value = entry.second;
    if (key == "paths") {
      GDT_RETURN_IF_ERROR(
          ReadStringList(value, job, "artifacts:paths", &out->paths));
    } else if (key == "exclude") {
      GDT_RETURN_IF_ERROR(
          ReadStringList(value, job, "artifacts:exclude", &out->exclude));
    } else if (key == "when") {
      if (!ScalarText(value, &out->when) ||
          (out->when != "on_success" && out->when != "on_failure" &&
           out->when != "always")) {
        return JobError(
            job, "artifacts:when must be on_success, on_failure or always");
      }
    } else if (key == "expire_in") {
      if (!ScalarText(value, &out->expire_in)) {
        return JobError(job, "artifacts:expire_in must be a string");
      }
    } else if (key == "name") {
      if (!ScalarText(value, &out->name)) {
        return JobError(job, "artifacts:name must be a string");
      }
    } else if (key == "untracked") {
      std::string text;
      if (!ScalarText(value, &text) || (text != "true" && text != "false")) {
        return JobError(job, "artifacts:untracked must be true or false");
      }
      out->untracked = text == "true";
    } else if (key == "reports" || key == "expose_as" || key == "public" ||
               key == "access") {
      // Only meaningful to a GitLab server.
    } else {
      return JobError(job, absl::StrCat("unknown key artifacts:", key));
    }
  }
  return absl::OkStatus();
}

absl::Status ReadParallel(const YAML::Node& node, std::string_view job,
                          int* out) {
  if (node.IsMap()) {
    if (node["matrix"]) {
      return JobError(job,
                      "parallel: matrix is not supported by run-local yet");
    }
    return JobError(job, "parallel must be an integer or a hash with 'matrix'");
  }
  std::string text;
  if (!ScalarText(node, &text) || text.empty() || text.size() > 4 ||
      text.find_first_not_of("0123456789") != std::string::npos) {
    return JobError(job, "parallel must be an integer from 1 to 200");
  }
  const int value = std::stoi(text);  // At most 4 digits: cannot throw.
  if (value < 1 || value > 200) {
    return JobError(
        job, absl::StrCat("parallel must be from 1 to 200, not ", value));
  }
  *out = value;
  return absl::OkStatus();
}

absl::StatusOr<CiJob> ParseJob(const YAML::Node& root, const std::string& name,
                               const YAML::Node& node) {
  CiJob job;
  job.name = name;
  if (!node.IsMap()) return JobError(name, "is not a map");
  for (const auto& entry : node) {
    const std::string key = entry.first.as<std::string>();
    if (KnownJobKeys().count(key) == 0) {
      return JobError(name, absl::StrCat("unknown key '", key, "'"));
    }
  }
  if (node["trigger"]) {
    return JobError(name, "is a trigger job and cannot be run locally");
  }
  if (node["extends"]) {
    return JobError(name, "extends is not supported by run-local yet");
  }

  // Defaults: `default:` wins over the deprecated top-level keywords. (A
  // YAML::Node is rebound only by construction; assignment writes through.)
  const YAML::Node defaults = root["default"];
  const auto inherited = [&](const char* key,
                             bool top_level) -> std::optional<YAML::Node> {
    if (node[key]) return node[key];
    if (defaults && defaults.IsMap() && defaults[key]) return defaults[key];
    if (top_level && root[key]) return root[key];
    return std::nullopt;
  };
  if (std::optional<YAML::Node> before = inherited("before_script", true)) {
    GDT_RETURN_IF_ERROR(
        ReadScript(*before, name, "before_script", &job.before_script));
  }
  if (std::optional<YAML::Node> after = inherited("after_script", true)) {
    GDT_RETURN_IF_ERROR(
        ReadScript(*after, name, "after_script", &job.after_script));
  }
  if (!node["script"]) return JobError(name, "has no script");
  GDT_RETURN_IF_ERROR(ReadScript(node["script"], name, "script", &job.script));
  if (job.script.empty()) return JobError(name, "script is empty");

  if (const YAML::Node stage = node["stage"]; stage) {
    if (!ScalarText(stage, &job.stage)) {
      return JobError(name, "stage must be a string");
    }
  }
  if (const YAML::Node variables = root["variables"]; variables) {
    GDT_RETURN_IF_ERROR(
        ReadVariables(variables, "top-level variables", &job.variables));
  }
  if (const YAML::Node variables = node["variables"]; variables) {
    GDT_RETURN_IF_ERROR(
        ReadVariables(variables, absl::StrCat("job ", name), &job.variables));
  }
  if (const YAML::Node parallel = node["parallel"]; parallel) {
    GDT_RETURN_IF_ERROR(ReadParallel(parallel, name, &job.parallel));
    job.parallel_given = true;
  }
  if (std::optional<YAML::Node> timeout = inherited("timeout", false)) {
    std::string text;
    if (!ScalarText(*timeout, &text)) {
      return JobError(name, "timeout must be a duration string");
    }
    absl::StatusOr<int64_t> seconds = ParseDurationSeconds(text);
    if (!seconds.ok()) {
      return JobError(
          name,
          absl::StrCat("timeout: ", std::string(seconds.status().message())));
    }
    job.timeout_seconds = *seconds;
  }
  if (std::optional<YAML::Node> id_tokens = inherited("id_tokens", false)) {
    GDT_RETURN_IF_ERROR(ReadIdTokens(*id_tokens, name, &job.id_tokens));
  }
  if (std::optional<YAML::Node> artifacts = inherited("artifacts", false)) {
    GDT_RETURN_IF_ERROR(ReadArtifacts(*artifacts, name, &job.artifacts));
  }
  if (const YAML::Node dependencies = node["dependencies"]; dependencies) {
    std::vector<std::string> names;
    GDT_RETURN_IF_ERROR(
        ReadStringList(dependencies, name, "dependencies", &names));
    job.artifact_sources = std::move(names);
  } else if (const YAML::Node needs = node["needs"]; needs) {
    if (!needs.IsSequence()) return JobError(name, "needs must be a list");
    std::vector<std::string> names;
    for (const YAML::Node& need : needs) {
      std::string text;
      if (ScalarText(need, &text)) {
        names.push_back(text);
      } else if (need.IsMap() && need["job"] &&
                 ScalarText(need["job"], &text)) {
        const YAML::Node with_artifacts = need["artifacts"];
        if (!with_artifacts || !with_artifacts.IsScalar() ||
            with_artifacts.Scalar() != "false") {
          names.push_back(text);
        }
      } else if (!(need.IsMap() && need["pipeline"])) {
        return JobError(name, "needs entries must be job names or {job: name}");
      }
    }
    job.artifact_sources = std::move(names);
  }
  return job;
}

}  // namespace

absl::StatusOr<CiJob> ParseCiJob(std::string_view yaml_text,
                                 std::string_view job_name) {
  const std::string name(job_name);
  try {
    const YAML::Node root = YAML::Load(std::string(yaml_text));
    if (!root.IsMap()) {
      return absl::InvalidArgumentError(
          "the CI file is not a map of jobs and keywords");
    }
    if (ReservedKeys().count(name) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", name, "' is a keyword, not a job"));
    }
    const YAML::Node node = root[name];
    if (!node) {
      std::string jobs;
      for (const auto& entry : root) {
        const std::string key = entry.first.as<std::string>();
        if (ReservedKeys().count(key) != 0 || key.empty() || key[0] == '.') {
          continue;
        }
        absl::StrAppend(&jobs, jobs.empty() ? "" : ", ", key);
      }
      return absl::NotFoundError(absl::StrCat(
          "no job '", name, "' (jobs: ", jobs.empty() ? "none" : jobs, ")"));
    }
    if (name[0] == '.') {
      return JobError(name, "is hidden and cannot be run");
    }
    return ParseJob(root, name, node);
  } catch (const YAML::Exception& e) {
    // yaml-cpp reports errors by throwing; this is the only place we catch.
    return absl::InvalidArgumentError(absl::StrCat("bad YAML: ", e.what()));
  }
}

absl::StatusOr<CiJob> LoadCiJob(const std::string& path,
                                std::string_view job_name) {
  absl::StatusOr<std::string> text = ReadTextFile(path);
  if (!text.ok()) return text.status();
  absl::StatusOr<CiJob> job = ParseCiJob(*text, job_name);
  if (!job.ok()) {
    return absl::Status(job.status().code(),
                        absl::StrCat(path, ": ", job.status().message()));
  }
  return job;
}

bool IsCiKeyword(std::string_view key) {
  return ReservedKeys().count(std::string(key)) != 0;
}

namespace {
constexpr int64_t kMaxDurationSeconds = int64_t{10} * 366 * 86400;
}  // namespace

absl::StatusOr<int64_t> ParseDurationSeconds(std::string_view text) {
  const std::string input(text);
  const auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("'", input, "' is not a duration (e.g. 1h 30m)"));
  };
  struct Unit {
    const char* name;
    int64_t seconds;
  };
  static constexpr Unit kUnits[] = {
      {"s", 1},         {"sec", 1},      {"secs", 1},     {"second", 1},
      {"seconds", 1},   {"m", 60},       {"min", 60},     {"mins", 60},
      {"minute", 60},   {"minutes", 60}, {"h", 3600},     {"hr", 3600},
      {"hrs", 3600},    {"hour", 3600},  {"hours", 3600}, {"d", 86400},
      {"day", 86400},   {"days", 86400}, {"w", 604800},   {"week", 604800},
      {"weeks", 604800}};
  int64_t total = 0;
  bool any = false;
  size_t i = 0;
  const size_t n = input.size();
  const auto skip_separators = [&] {
    while (i < n && (std::isspace(static_cast<unsigned char>(input[i])) ||
                     input[i] == ',')) {
      ++i;
    }
  };
  skip_separators();
  while (i < n) {
    if (input.compare(i, 4, "and ") == 0) {
      i += 4;
      skip_separators();
      continue;
    }
    if (!std::isdigit(static_cast<unsigned char>(input[i]))) return bad();
    int64_t number = 0;
    while (i < n && std::isdigit(static_cast<unsigned char>(input[i]))) {
      number = number * 10 + (input[i] - '0');
      if (number > 100000000) return bad();
      ++i;
    }
    while (i < n && input[i] == ' ') ++i;
    const size_t unit_start = i;
    while (i < n && std::isalpha(static_cast<unsigned char>(input[i]))) ++i;
    const std::string unit = input.substr(unit_start, i - unit_start);
    int64_t scale = 0;
    if (unit.empty()) {
      scale = 1;
    } else {
      for (const Unit& u : kUnits) {
        if (unit == u.name) scale = u.seconds;
      }
    }
    if (scale == 0) return bad();
    // Each term is at most 10^8 weeks; a sum past ten years is no job
    // timeout, and stopping there keeps it from overflowing.
    total += number * scale;
    if (total > kMaxDurationSeconds) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", input.size() > 60 ? input.substr(0, 60) + "..." : input,
          "' is longer than ten years"));
    }
    any = true;
    skip_separators();
  }
  if (!any || total <= 0) return bad();
  return total;
}

std::string Slugify(std::string_view text) {
  std::string slug;
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (std::isalnum(u) && u < 128) {
      slug.push_back(static_cast<char>(std::tolower(u)));
    } else {
      slug.push_back('-');
    }
  }
  if (slug.size() > 63) slug.resize(63);
  const size_t first = slug.find_first_not_of('-');
  if (first == std::string::npos) return "";
  const size_t last = slug.find_last_not_of('-');
  return slug.substr(first, last - first + 1);
}

}  // namespace gdt::ci
