#include "ci/job_file.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ci/inheritance.h"
#include "ci/yaml_tree.h"
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

// `id_tokens: {NAME: {aud: AUDIENCE or [AUDIENCES]}}`.
absl::Status ReadIdTokens(
    const CiValue& node, std::string_view job,
    std::vector<std::pair<std::string, std::vector<std::string>>>* out) {
  if (!node.is_object()) {
    return JobError(job, "id_tokens must map variable names to {aud: ...}");
  }
  for (const auto& [variable, value] : node.items()) {
    if (variable.empty()) {
      return JobError(job, "id_tokens keys must be variable names");
    }
    std::vector<std::string> audiences;
    std::string one;
    const auto aud = value.is_object() ? value.find("aud") : value.end();
    if (aud != value.end() && CiScalarText(*aud, &one) && !one.empty()) {
      audiences.push_back(one);
    } else if (aud != value.end() && aud->is_array()) {
      for (const CiValue& item : *aud) {
        if (!CiScalarText(item, &one) || one.empty()) {
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

// `script:`-style value: a string or a (nested) list of strings.
absl::Status ReadScript(const CiValue& node, std::string_view job,
                        std::string_view key, std::vector<std::string>* out) {
  if (node.is_null()) return absl::OkStatus();
  std::string text;
  if (CiScalarText(node, &text)) {
    out->push_back(text);
    return absl::OkStatus();
  }
  if (!node.is_array()) {
    return JobError(job,
                    absl::StrCat(std::string(key),
                                 " must be a string or a list of strings"));
  }
  for (const CiValue& item : node) {
    if (item.is_array()) {
      GDT_RETURN_IF_ERROR(ReadScript(item, job, key, out));
      continue;
    }
    if (!CiScalarText(item, &text)) {
      return JobError(
          job, absl::StrCat(std::string(key), " must contain only strings"));
    }
    out->push_back(text);
  }
  return absl::OkStatus();
}

absl::Status ReadStringList(const CiValue& node, std::string_view job,
                            std::string_view key,
                            std::vector<std::string>* out) {
  out->clear();
  return ReadScript(node, job, key, out);
}

// Merges a `variables:` map into `job`'s variables; a repeated key replaces
// the earlier value in place. `inherited`: which names to take (all when
// nullopt). `expand: false` marks a variable raw.
absl::Status ReadVariables(
    const CiValue& node, std::string_view owner,
    const std::optional<std::vector<std::string>>& inherited, CiJob* job) {
  if (node.is_null()) return absl::OkStatus();
  if (!node.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(owner), ": variables must be a map"));
  }
  for (const auto& [key, entry] : node.items()) {
    if (inherited.has_value() && std::find(inherited->begin(), inherited->end(),
                                           key) == inherited->end()) {
      continue;
    }
    std::string value;
    bool raw = false;
    if (entry.is_object()) {
      // `VAR: {value: ..., description: ..., expand: false}`
      const auto inner = entry.find("value");
      if (inner == entry.end() || !CiScalarText(*inner, &value)) {
        return absl::InvalidArgumentError(absl::StrCat(
            std::string(owner), ": variable ", key, " has no string 'value'"));
      }
      if (const auto expand = entry.find("expand"); expand != entry.end()) {
        if (!expand->is_boolean()) {
          return absl::InvalidArgumentError(
              absl::StrCat(std::string(owner), ": variable ", key,
                           ": expand must be true or false"));
        }
        raw = !expand->get<bool>();
      }
    } else if (entry.is_null()) {
      value.clear();
    } else if (!CiScalarText(entry, &value)) {
      return absl::InvalidArgumentError(absl::StrCat(
          std::string(owner), ": variable ", key, " must be a string"));
    }
    bool replaced = false;
    for (auto& [existing_key, existing_value] : job->variables) {
      if (existing_key == key) {
        existing_value = value;
        replaced = true;
      }
    }
    if (!replaced) job->variables.emplace_back(key, value);
    if (raw) {
      job->raw_variables.insert(key);
    } else {
      job->raw_variables.erase(key);
    }
  }
  return absl::OkStatus();
}

absl::Status ReadArtifacts(const CiValue& node, std::string_view job,
                           CiArtifacts* out) {
  if (node.is_null()) return absl::OkStatus();
  if (!node.is_object()) return JobError(job, "artifacts must be a map");
  for (const auto& [key, value] : node.items()) {
    if (key == "paths") {
      GDT_RETURN_IF_ERROR(
          ReadStringList(value, job, "artifacts:paths", &out->paths));
    } else if (key == "exclude") {
      GDT_RETURN_IF_ERROR(
          ReadStringList(value, job, "artifacts:exclude", &out->exclude));
    } else if (key == "when") {
      if (!CiScalarText(value, &out->when) ||
          (out->when != "on_success" && out->when != "on_failure" &&
           out->when != "always")) {
        return JobError(
            job, "artifacts:when must be on_success, on_failure or always");
      }
    } else if (key == "expire_in") {
      if (!CiScalarText(value, &out->expire_in)) {
        return JobError(job, "artifacts:expire_in must be a string");
      }
    } else if (key == "name") {
      if (!CiScalarText(value, &out->name)) {
        return JobError(job, "artifacts:name must be a string");
      }
    } else if (key == "untracked") {
      if (!value.is_boolean()) {
        return JobError(job, "artifacts:untracked must be true or false");
      }
      out->untracked = value.get<bool>();
    } else if (key == "reports") {
      if (!value.is_null() && !value.is_object()) {
        return JobError(job, "artifacts:reports must be a map");
      }
      if (value.is_null()) continue;
      for (const auto& [report, paths] : value.items()) {
        // The other reports are only meaningful to a GitLab server.
        if (report != "dotenv") continue;
        GDT_RETURN_IF_ERROR(ReadStringList(
            paths, job, "artifacts:reports:dotenv", &out->dotenv));
      }
    } else if (key == "expose_as" || key == "public" || key == "access") {
      // Only meaningful to a GitLab server.
    } else {
      return JobError(job, absl::StrCat("unknown key artifacts:", key));
    }
  }
  return absl::OkStatus();
}

absl::Status ReadCacheEntry(const CiValue& node, std::string_view job,
                            CiCache* out) {
  if (!node.is_object()) return JobError(job, "cache must be a map");
  for (const auto& [key, value] : node.items()) {
    if (key == "key") {
      if (value.is_object()) {
        out->key_files.emplace();
        for (const auto& [part, inner] : value.items()) {
          if (part == "files") {
            GDT_RETURN_IF_ERROR(ReadStringList(inner, job, "cache:key:files",
                                               &*out->key_files));
          } else if (part == "files_commits") {
            GDT_RETURN_IF_ERROR(ReadStringList(inner, job,
                                               "cache:key:files_commits",
                                               &out->key_files_commits));
          } else if (part == "prefix") {
            if (!CiScalarText(inner, &out->key_prefix)) {
              return JobError(job, "cache:key:prefix must be a string");
            }
          } else {
            return JobError(job, absl::StrCat("unknown key cache:key:", part));
          }
        }
        if (out->key_files->empty() && out->key_files_commits.empty()) {
          return JobError(job,
                          "cache:key:files or cache:key:files_commits must "
                          "name one or two files");
        }
      } else if (!CiScalarText(value, &out->key)) {
        return JobError(job, "cache:key must be a string or a map");
      }
    } else if (key == "paths") {
      GDT_RETURN_IF_ERROR(
          ReadStringList(value, job, "cache:paths", &out->paths));
    } else if (key == "fallback_keys") {
      GDT_RETURN_IF_ERROR(ReadStringList(value, job, "cache:fallback_keys",
                                         &out->fallback_keys));
    } else if (key == "untracked" || key == "unprotect") {
      if (!value.is_boolean()) {
        return JobError(job,
                        absl::StrCat("cache:", key, " must be true or false"));
      }
      (key == "untracked" ? out->untracked : out->unprotect) =
          value.get<bool>();
    } else if (key == "policy") {
      if (!CiScalarText(value, &out->policy)) {
        return JobError(job, "cache:policy must be a string");
      }
    } else if (key == "when") {
      if (!CiScalarText(value, &out->when) ||
          (out->when != "on_success" && out->when != "on_failure" &&
           out->when != "always")) {
        return JobError(job,
                        "cache:when must be on_success, on_failure or always");
      }
    } else {
      return JobError(job, absl::StrCat("unknown key cache:", key));
    }
  }
  return absl::OkStatus();
}

// `cache:`: one map or a list of at most four (GitLab's limit).
absl::Status ReadCaches(const CiValue& node, std::string_view job,
                        std::vector<CiCache>* out) {
  out->clear();
  if (node.is_null()) return absl::OkStatus();
  if (node.is_array()) {
    if (node.size() > 4) {
      return JobError(job, "cache is a list of at most 4 entries");
    }
    for (const CiValue& item : node) {
      GDT_RETURN_IF_ERROR(ReadCacheEntry(item, job, &out->emplace_back()));
    }
    return absl::OkStatus();
  }
  return ReadCacheEntry(node, job, &out->emplace_back());
}

// `parallel: matrix: [...]`: each entry's values multiplied out (a list
// is one value per job, its first variable outermost), as GitLab names and
// numbers the jobs; at most 200 jobs in all.
absl::Status ReadMatrix(const CiValue& node, std::string_view job,
                        std::vector<CiMatrixJob>* out) {
  if (!node.is_array() || node.empty()) {
    return JobError(job, "parallel:matrix must be a list of variable maps");
  }
  for (const CiValue& entry : node) {
    if (!entry.is_object() || entry.empty()) {
      return JobError(job,
                      "parallel:matrix entries must be maps of variables to a "
                      "value or a list of values");
    }
    std::vector<std::pair<std::string, std::vector<std::string>>> axes;
    for (const auto& [name, values] : entry.items()) {
      std::vector<std::string> texts;
      std::string text;
      if (values.is_array()) {
        for (const CiValue& value : values) {
          if (!CiScalarText(value, &text)) {
            return JobError(job, absl::StrCat("parallel:matrix: ", name,
                                              ": values must be strings"));
          }
          texts.push_back(text);
        }
      } else if (CiScalarText(values, &text)) {
        texts.push_back(text);
      } else {
        return JobError(job, absl::StrCat("parallel:matrix: ", name,
                                          ": values must be strings"));
      }
      if (texts.empty()) {
        return JobError(
            job, absl::StrCat("parallel:matrix: ", name, " has no value"));
      }
      axes.emplace_back(name, std::move(texts));
    }
    // Odometer over the axes, the last one turning fastest.
    std::vector<size_t> at(axes.size(), 0);
    while (true) {
      if (out->size() == 200) {
        return JobError(job, "parallel:matrix makes more than 200 jobs");
      }
      CiMatrixJob one;
      std::vector<std::string> shown;
      for (size_t a = 0; a < axes.size(); ++a) {
        one.variables.emplace_back(axes[a].first, axes[a].second[at[a]]);
        shown.push_back(axes[a].second[at[a]]);
      }
      one.name = absl::StrCat(std::string(job), ": [",
                              absl::StrJoin(shown, ", "), "]");
      out->push_back(std::move(one));
      size_t a = axes.size();
      while (a > 0 && ++at[a - 1] == axes[a - 1].second.size()) {
        at[--a] = 0;
      }
      if (a == 0) break;
    }
  }
  return absl::OkStatus();
}

absl::Status ReadParallel(const CiValue& node, std::string_view job, int* out,
                          std::vector<CiMatrixJob>* matrix) {
  if (node.is_object()) {
    const auto entries = node.find("matrix");
    if (entries == node.end() || node.size() != 1) {
      return JobError(job,
                      "parallel must be an integer or a hash with 'matrix'");
    }
    return ReadMatrix(*entries, job, matrix);
  }
  std::string text;
  if (!(node.is_number_integer() || node.is_string()) ||
      !CiScalarText(node, &text) || text.empty() || text.size() > 4 ||
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

// An exit code, or a list of them (`exit_codes: 137` or `[1, 137]`).
absl::Status ReadExitCodes(const CiValue& node, std::string_view job,
                           std::string_view key, std::vector<int>* out) {
  const auto one = [&](const CiValue& value) {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 ||
        value.get<int64_t>() > 255) {
      return false;
    }
    out->push_back(static_cast<int>(value.get<int64_t>()));
    return true;
  };
  bool ok = node.is_array() ? !node.empty() : one(node);
  if (node.is_array()) {
    for (const CiValue& item : node) ok = ok && one(item);
  }
  if (!ok) {
    return JobError(job, absl::StrCat(std::string(key),
                                      " must be an exit code (0 to 255) or a "
                                      "list of them"));
  }
  return absl::OkStatus();
}

// GitLab's `retry:when:` values.
bool IsRetryReason(std::string_view reason) {
  static const std::set<std::string, std::less<>> reasons = {
      "always",
      "unknown_failure",
      "script_failure",
      "api_failure",
      "stuck_or_timeout_failure",
      "runner_system_failure",
      "runner_unsupported",
      "stale_schedule",
      "job_execution_timeout",
      "archived_failure",
      "unmet_prerequisites",
      "scheduler_failure",
      "data_integrity_failure"};
  return reasons.count(reason) != 0;
}

// `retry: N` or `retry: {max: N, when: ..., exit_codes: ...}`, N 0..2.
absl::Status ReadRetry(const CiValue& node, std::string_view job,
                       CiRetry* out) {
  *out = CiRetry{};
  if (node.is_null()) return absl::OkStatus();
  const CiValue* max = &node;
  if (node.is_object()) {
    for (const auto& [key, value] : node.items()) {
      if (key != "max" && key != "when" && key != "exit_codes") {
        return JobError(job, absl::StrCat("unknown key retry:", key));
      }
    }
    const auto found = node.find("max");
    max = found == node.end() ? nullptr : &*found;
    if (const auto when = node.find("when"); when != node.end()) {
      std::vector<std::string> reasons;
      GDT_RETURN_IF_ERROR(ReadStringList(*when, job, "retry:when", &reasons));
      for (const std::string& reason : reasons) {
        if (!IsRetryReason(reason)) {
          return JobError(job, absl::StrCat("retry:when: unknown failure "
                                            "reason '",
                                            reason, "'"));
        }
      }
      out->when = std::move(reasons);
    }
    if (const auto codes = node.find("exit_codes"); codes != node.end()) {
      std::vector<int> list;
      GDT_RETURN_IF_ERROR(
          ReadExitCodes(*codes, job, "retry:exit_codes", &list));
      out->exit_codes = std::move(list);
    }
  }
  if (max != nullptr) {
    if (!max->is_number_integer() || max->get<int64_t>() < 0 ||
        max->get<int64_t>() > 2) {
      return JobError(job, "retry must be 0, 1 or 2 (or {max: 0..2, ...})");
    }
    out->max = static_cast<int>(max->get<int64_t>());
  }
  return absl::OkStatus();
}

// `when:` and `allow_failure:` (whose default follows `when:`).
absl::Status ReadWhen(const CiValue* when, const CiValue* allow_failure,
                      std::string_view job, CiJob* out) {
  if (when != nullptr) {
    static const std::set<std::string, std::less<>> kinds = {
        "on_success", "on_failure", "always", "manual", "delayed", "never"};
    if (!when->is_string() || kinds.count(when->get<std::string>()) == 0) {
      return JobError(job,
                      "when must be on_success, on_failure, always, manual, "
                      "delayed or never");
    }
    out->when = when->get<std::string>();
    if (out->when == "never") {
      return JobError(job,
                      "has `when: never`: GitLab never adds it to a pipeline");
    }
  }
  // GitLab: a manual job may fail unless it says otherwise.
  out->allow_failure = out->when == "manual";
  if (allow_failure == nullptr || allow_failure->is_null()) {
    return absl::OkStatus();
  }
  if (allow_failure->is_boolean()) {
    out->allow_failure = allow_failure->get<bool>();
    return absl::OkStatus();
  }
  const auto codes = allow_failure->is_object()
                         ? allow_failure->find("exit_codes")
                         : allow_failure->end();
  if (codes == allow_failure->end() || allow_failure->size() != 1) {
    return JobError(job,
                    "allow_failure must be true, false or {exit_codes: ...}");
  }
  out->allow_failure = false;
  return ReadExitCodes(*codes, job, "allow_failure:exit_codes",
                       &out->allow_failure_exit_codes);
}

// Which entries of `default:` the job's `inherit: default:` lets in: all
// (nullopt), or the names listed (none for `false`).
std::optional<std::vector<std::string>> InheritedNames(const CiValue& config,
                                                       const char* key) {
  const auto inherit = config.find("inherit");
  if (inherit == config.end() || !inherit->is_object()) return std::nullopt;
  const auto setting = inherit->find(key);
  if (setting == inherit->end()) return std::nullopt;
  if (setting->is_boolean()) {
    if (setting->get<bool>()) return std::nullopt;
    return std::vector<std::string>{};
  }
  std::vector<std::string> names;
  if (setting->is_array()) {
    for (const CiValue& name : *setting) {
      if (name.is_string()) names.push_back(name.get<std::string>());
    }
  }
  return names;
}

bool Allows(const std::optional<std::vector<std::string>>& names,
            std::string_view key) {
  return !names.has_value() ||
         std::find(names->begin(), names->end(), key) != names->end();
}

// The first parent in `job`'s extends chain that the files read lack
// (run-local reads local includes only, so a parent from a project,
// remote, template or component include cannot be run), or "".
std::string MissingParent(const CiConfigModel& model, const std::string& job,
                          int depth) {
  const std::optional<CiValue> own = model.Top(job);
  if (!own.has_value() || depth > 12) return "";
  for (const std::string& parent : ExtendsList(*own)) {
    if (!model.Top(parent).has_value()) return parent;
    if (std::string missing = MissingParent(model, parent, depth + 1);
        !missing.empty()) {
      return missing;
    }
  }
  return "";
}

// `services:`: a list of names or maps with a `name` (`alias` a string,
// `entrypoint` and `command` lists of strings, `variables` a map of scalars),
// as GitLab accepts them; other keys of a map are left to the executors
// that use them.
absl::Status ReadServices(const CiValue& node, std::string_view job,
                          std::vector<CiService>* out) {
  out->clear();
  if (node.is_null()) return absl::OkStatus();
  if (!node.is_array()) return JobError(job, "services must be a list");
  const auto strings = [&](const CiValue& value, const char* key,
                           std::vector<std::string>* list) {
    if (!value.is_array()) {
      return JobError(
          job, absl::StrCat("services ", key, " must be a list of strings"));
    }
    for (const CiValue& item : value) {
      std::string text;
      if (!item.is_string() || !CiScalarText(item, &text)) {
        return JobError(
            job, absl::StrCat("services ", key, " must be a list of strings"));
      }
      list->push_back(std::move(text));
    }
    return absl::OkStatus();
  };
  for (const CiValue& item : node) {
    CiService service;
    if (item.is_string()) {
      service.name = item.get<std::string>();
      out->push_back(std::move(service));
      continue;
    }
    if (!item.is_object() || !item.contains("name") ||
        !item["name"].is_string()) {
      return JobError(job, "services must be names or maps with a name");
    }
    service.name = item["name"].get<std::string>();
    if (const auto alias = item.find("alias"); alias != item.end()) {
      if (!alias->is_string()) {
        return JobError(job, "services alias must be a string");
      }
      service.alias = alias->get<std::string>();
    }
    if (const auto entrypoint = item.find("entrypoint");
        entrypoint != item.end()) {
      GDT_RETURN_IF_ERROR(
          strings(*entrypoint, "entrypoint", &service.entrypoint));
    }
    if (const auto command = item.find("command"); command != item.end()) {
      GDT_RETURN_IF_ERROR(strings(*command, "command", &service.command));
    }
    if (const auto variables = item.find("variables");
        variables != item.end() && !variables->is_null()) {
      if (!variables->is_object()) {
        return JobError(job, "services variables must be a map");
      }
      for (const auto& [key, value] : variables->items()) {
        std::string text;
        if (!value.is_null() && !CiScalarText(value, &text)) {
          return JobError(job, absl::StrCat("services variable ", key,
                                            " must be a string"));
        }
        service.variables.emplace_back(key, std::move(text));
      }
    }
    out->push_back(std::move(service));
  }
  return absl::OkStatus();
}

// The job from its effective configuration (merge keys, extends, default:
// and !reference applied); `model` gives the top-level entries.
absl::StatusOr<CiJob> ReadJob(const CiConfigModel& model,
                              const std::string& name, const CiValue& config) {
  CiJob job;
  job.name = name;
  for (const auto& [key, value] : config.items()) {
    if (key == "run") {  // GitLab's CI/CD steps, which run-local lacks.
      return JobError(name,
                      "run: (CI/CD steps) is not supported by run-local; "
                      "give the job a script:");
    }
    if (KnownJobKeys().count(key) == 0) {
      return JobError(name, absl::StrCat("unknown key '", key, "'"));
    }
  }
  if (config.contains("trigger")) {
    return JobError(name, "is a trigger job and cannot be run locally");
  }
  const auto entry = [&](const char* key) -> const CiValue* {
    const auto found = config.find(key);
    return found == config.end() ? nullptr : &*found;
  };
  // The deprecated top-level before_script and after_script are defaults
  // too: `default:` wins over them, and `inherit: default:` governs both.
  const std::optional<std::vector<std::string>> defaults =
      InheritedNames(config, "default");
  const auto with_top_level = [&](const char* key) -> std::optional<CiValue> {
    if (const CiValue* own = entry(key)) return *own;
    if (!Allows(defaults, key)) return std::nullopt;
    return model.Top(key);
  };
  if (std::optional<CiValue> before = with_top_level("before_script")) {
    GDT_RETURN_IF_ERROR(
        ReadScript(*before, name, "before_script", &job.before_script));
  }
  if (std::optional<CiValue> after = with_top_level("after_script")) {
    GDT_RETURN_IF_ERROR(
        ReadScript(*after, name, "after_script", &job.after_script));
  }
  if (const CiValue* hooks = entry("hooks"); hooks != nullptr) {
    if (!hooks->is_object()) {
      return JobError(name, "hooks must be a map of hook names to scripts");
    }
    for (const auto& [hook, script] : hooks->items()) {
      if (hook == "pre_get_sources_script") {
        GDT_RETURN_IF_ERROR(ReadScript(script, name, "hooks:" + hook,
                                       &job.pre_get_sources_script));
      } else if (hook == "post_get_sources_script") {
        GDT_RETURN_IF_ERROR(ReadScript(script, name, "hooks:" + hook,
                                       &job.post_get_sources_script));
      } else {
        return JobError(
            name, absl::StrCat("hooks: unknown hook '", hook,
                               "' (GitLab knows pre_get_sources_script and "
                               "post_get_sources_script)"));
      }
    }
  }
  // `image:` (the job's, else `default:`'s, else the deprecated top-level
  // one): a name, or a map with its name.
  if (std::optional<CiValue> image = with_top_level("image")) {
    if (image->is_string()) {
      job.image = image->get<std::string>();
    } else if (image->is_object() && image->contains("name") &&
               (*image)["name"].is_string()) {
      job.image = (*image)["name"].get<std::string>();
    } else if (!image->is_null()) {
      return JobError(name, "image must be a name or a map with a name");
    }
  }
  if (const CiValue* tags = entry("tags");
      tags != nullptr && !tags->is_null()) {
    if (!tags->is_array()) return JobError(name, "tags must be a list");
    for (const CiValue& tag : *tags) {
      std::string text;
      if (!CiScalarText(tag, &text)) {
        return JobError(name, "tags must be a list of strings");
      }
      job.tags.push_back(std::move(text));
    }
  }
  if (std::optional<CiValue> services = with_top_level("services")) {
    GDT_RETURN_IF_ERROR(ReadServices(*services, name, &job.services));
  }
  const CiValue* script = entry("script");
  if (script == nullptr) {
    // A job of the same name in a file run-local does not read (GitLab's
    // Security templates' jobs, overridden here) may bring it.
    return JobError(name, model.has_include()
                              ? "has no script in the files run-local reads "
                                "(it reads only local includes)"
                              : "has no script");
  }
  GDT_RETURN_IF_ERROR(ReadScript(*script, name, "script", &job.script));
  if (job.script.empty()) return JobError(name, "script is empty");

  if (const CiValue* stage = entry("stage")) {
    if (!CiScalarText(*stage, &job.stage)) {
      return JobError(name, "stage must be a string");
    }
  }
  if (std::optional<CiValue> variables = model.Top("variables")) {
    GDT_RETURN_IF_ERROR(ReadVariables(*variables, "top-level variables",
                                      InheritedNames(config, "variables"),
                                      &job));
  }
  if (const CiValue* variables = entry("variables")) {
    GDT_RETURN_IF_ERROR(ReadVariables(*variables, absl::StrCat("job ", name),
                                      std::nullopt, &job));
    for (const auto& [key, value] : variables->items()) {
      job.own_variables.insert(key);
    }
  }
  if (const CiValue* parallel = entry("parallel")) {
    GDT_RETURN_IF_ERROR(
        ReadParallel(*parallel, name, &job.parallel, &job.matrix));
    job.parallel_given = true;
  }
  if (const CiValue* timeout = entry("timeout")) {
    std::string text;
    if (!CiScalarText(*timeout, &text)) {
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
  if (const CiValue* id_tokens = entry("id_tokens")) {
    GDT_RETURN_IF_ERROR(ReadIdTokens(*id_tokens, name, &job.id_tokens));
  }
  if (const CiValue* artifacts = entry("artifacts")) {
    GDT_RETURN_IF_ERROR(ReadArtifacts(*artifacts, name, &job.artifacts));
  }
  if (const CiValue* caches = entry("cache")) {
    GDT_RETURN_IF_ERROR(ReadCaches(*caches, name, &job.caches));
  }
  GDT_RETURN_IF_ERROR(
      ReadWhen(entry("when"), entry("allow_failure"), name, &job));
  const CiValue* allow_failure = entry("allow_failure");
  job.allow_failure_given =
      allow_failure != nullptr && !allow_failure->is_null();
  if (const CiValue* rules = entry("rules")) {
    if (entry("only") != nullptr || entry("except") != nullptr) {
      return JobError(name,
                      "rules cannot be used with only or except (GitLab "
                      "refuses such a job)");
    }
    absl::StatusOr<std::vector<CiRule>> read =
        ReadRules(*rules, absl::StrCat("job ", name), /*job_rules=*/true);
    if (!read.ok()) return read.status();
    job.rules = *std::move(read);
  }
  for (const char* key : {"only", "except"}) {
    const CiValue* policy = entry(key);
    if (policy == nullptr || policy->is_null()) continue;
    absl::StatusOr<CiRefPolicy> read = ReadRefPolicy(*policy, name, key);
    if (!read.ok()) return read.status();
    (std::string_view(key) == "only" ? job.only : job.except) =
        *std::move(read);
  }
  if (const CiValue* retry = entry("retry")) {
    GDT_RETURN_IF_ERROR(ReadRetry(*retry, name, &job.retry));
  }
  if (const CiValue* dependencies = entry("dependencies")) {
    std::vector<std::string> names;
    GDT_RETURN_IF_ERROR(
        ReadStringList(*dependencies, name, "dependencies", &names));
    job.artifact_sources = std::move(names);
  }
  if (const CiValue* needs = entry("needs")) {
    // One need may be written as a mapping (`needs: {job: x}`).
    if (!needs->is_array() && !needs->is_object()) {
      return JobError(name, "needs must be a list or one {job: name}");
    }
    const CiValue list = needs->is_object() ? CiValue::array({*needs}) : *needs;
    std::vector<std::string> names;
    std::vector<std::string> all;
    for (const CiValue& need : list) {
      std::string text;
      if (CiScalarText(need, &text)) {
        names.push_back(text);
        all.push_back(text);
      } else if (need.is_object() && need.contains("job") &&
                 CiScalarText(need["job"], &text)) {
        const auto with_artifacts = need.find("artifacts");
        if (with_artifacts == need.end() || *with_artifacts != false) {
          names.push_back(text);
        }
        all.push_back(text);
      } else if (!(need.is_object() && need.contains("pipeline"))) {
        return JobError(name, "needs entries must be job names or {job: name}");
      }
    }
    if (!job.artifact_sources.has_value()) {
      job.artifact_sources = std::move(names);
    }
    job.needs = std::move(all);
  }
  return job;
}

// Parses the files `includes` holds (none when null) into `trees`, and
// adds their documents to `files` in GitLab's merge order.
absl::Status ParseIncluded(const CiIncludes* includes,
                           std::vector<std::unique_ptr<YamlTree>>* trees,
                           std::vector<std::vector<YamlNode>>* files) {
  if (includes == nullptr) return absl::OkStatus();
  for (const CiIncludedFile& file : includes->files) {
    YamlError error;
    trees->push_back(YamlTree::Parse(file.text, &error));
    if (!error.message.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          file.path, ": bad YAML at line ", error.mark.line + 1, ", column ",
          error.mark.column + 1, ": ", error.message));
    }
    files->push_back(trees->back()->documents());
  }
  return absl::OkStatus();
}

// `release:` of job `job`: a mapping with a tag_name.
// `whole`: the job's own entry is all it has (no extends, not a template),
// so tag_name must be in it.
absl::Status CheckRelease(const CiValue& node, std::string_view job,
                          bool whole) {
  if (!node.is_object()) {
    return JobError(job, "release config should be a hash");
  }
  static const std::set<std::string, std::less<>> kStrings = {
      "tag_name", "tag_message", "name", "description", "ref", "released_at"};
  for (const auto& [key, value] : node.items()) {
    if (kStrings.count(key) != 0) {
      if (!value.is_string()) {
        return JobError(job,
                        absl::StrCat("release ", key, " should be a string"));
      }
    } else if (key == "milestones") {
      std::vector<std::string> ignored;
      GDT_RETURN_IF_ERROR(
          ReadStringList(value, job, "release:milestones", &ignored));
    } else if (key == "assets") {
      const auto links = value.is_object() ? value.find("links") : value.end();
      if (!value.is_object() || value.size() != 1 || links == value.end() ||
          !links->is_array()) {
        return JobError(job,
                        "release assets should be a hash with links, a list");
      }
      for (const CiValue& link : *links) {
        if (!link.is_object() || !link.contains("name") ||
            !link.contains("url")) {
          return JobError(job,
                          "release assets:links entries need name and url");
        }
      }
    } else {
      return JobError(job, absl::StrCat("release config contains unknown "
                                        "keys: ",
                                        key));
    }
  }
  if (whole && !node.contains("tag_name")) {
    return JobError(job, "release tag_name can't be blank");
  }
  return absl::OkStatus();
}

// `pages:` of job `job`: true/false, or publish, path_prefix, expire_in.
absl::Status CheckPages(const CiValue& node, std::string_view job) {
  if (node.is_boolean()) return absl::OkStatus();
  if (!node.is_object()) {
    return JobError(job, "pages config should be a hash or a boolean value");
  }
  for (const auto& [key, value] : node.items()) {
    if (key != "publish" && key != "path_prefix" && key != "expire_in") {
      return JobError(
          job, absl::StrCat("pages config contains unknown keys: ", key));
    }
    if (!value.is_string() && !value.is_null()) {
      return JobError(job, absl::StrCat("pages ", key, " should be a string"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int RetriesForScriptExit(const CiRetry& retry, int exit_code) {
  const bool reason =
      !retry.when.has_value() ||
      std::any_of(retry.when->begin(), retry.when->end(),
                  [](const std::string& r) {
                    return r == "always" || r == "script_failure";
                  });
  const bool code =
      !retry.exit_codes.has_value() ||
      std::find(retry.exit_codes->begin(), retry.exit_codes->end(),
                exit_code) != retry.exit_codes->end();
  return reason && code ? retry.max : 0;
}

absl::Status ReadCiRetry(const CiValue& node, std::string_view job,
                         CiRetry* out) {
  return ReadRetry(node, job, out);
}

absl::Status ReadCiMatrix(const CiValue& node, std::string_view job,
                          std::vector<CiMatrixJob>* out) {
  return ReadMatrix(node, job, out);
}

std::vector<std::pair<std::string, std::string>> CheckJobKeywordValues(
    const CiValue& own, std::string_view job) {
  std::vector<std::pair<std::string, std::string>> problems;
  if (!own.is_object()) return problems;
  for (const auto& [key, value] : own.items()) {
    // An empty value unsets an inherited one.
    if (value.is_null()) continue;
    absl::Status status;
    if (key == "retry") {
      CiRetry retry;
      status = ReadRetry(value, job, &retry);
    } else if (key == "only" || key == "except") {
      status = value.is_array() || value.is_object()
                   ? ReadRefPolicy(value, job, key).status()
                   : JobError(job, absl::StrCat(key,
                                                " has to be either an array "
                                                "of conditions or a hash"));
    } else if (key == "parallel" && value.is_object() &&
               value.contains("matrix") && !value.contains("distributed")) {
      std::vector<CiMatrixJob> jobs;
      status = ReadMatrix(value["matrix"], job, &jobs);
    } else if (key == "release") {
      status = CheckRelease(value, job,
                            !job.starts_with('.') && !own.contains("extends"));
    } else if (key == "pages") {
      status = CheckPages(value, job);
    }
    if (!status.ok()) problems.emplace_back(key, status.message());
  }
  return problems;
}

absl::StatusOr<CiJob> ParseCiJob(std::string_view yaml_text,
                                 std::string_view job_name,
                                 const CiIncludes* includes) {
  const std::string name(job_name);
  YamlError error;
  const std::unique_ptr<YamlTree> tree = YamlTree::Parse(yaml_text, &error);
  if (!error.message.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad YAML at line ", error.mark.line + 1, ", column ",
                     error.mark.column + 1, ": ", error.message));
  }
  const std::vector<YamlNode>& documents = tree->documents();
  if (documents.empty() ||
      std::none_of(documents.begin(), documents.end(),
                   [](const YamlNode& root) { return root.IsMap(); })) {
    return absl::InvalidArgumentError(
        "the CI file is not a map of jobs and keywords");
  }
  if (ReservedKeys().count(name) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", name, "' is a keyword, not a job"));
  }
  // Included files first, in GitLab's merge order, then this one.
  std::vector<std::unique_ptr<YamlTree>> included_trees;
  std::vector<std::vector<YamlNode>> files;
  GDT_RETURN_IF_ERROR(ParseIncluded(includes, &included_trees, &files));
  files.push_back(documents);
  const CiConfigModel model =
      includes == nullptr
          ? CiConfigModel(documents)
          : CiConfigModel(files, includes->unseen, includes->unseen_over_seen);
  const std::optional<CiValue> own = model.Top(name);
  if (!own.has_value()) {
    std::vector<std::string> jobs;
    for (const std::vector<YamlNode>& file : files) {
      for (const YamlNode& root : file) {
        if (!root.IsMap()) continue;
        for (const auto& entry : root) {
          if (!entry.first.IsScalar()) continue;
          const std::string& key = entry.first.Scalar();
          if (ReservedKeys().count(key) != 0 || key.empty() || key[0] == '.' ||
              std::find(jobs.begin(), jobs.end(), key) != jobs.end()) {
            continue;
          }
          jobs.push_back(key);
        }
      }
    }
    return absl::NotFoundError(absl::StrCat(
        "no job '", name,
        "' (jobs: ", jobs.empty() ? "none" : absl::StrJoin(jobs, ", "), ")"));
  }
  if (name[0] == '.') return JobError(name, "is hidden and cannot be run");
  if (!own->is_object()) return JobError(name, "is not a map");
  absl::StatusOr<CiConfigModel::Effective> effective = model.Resolve(name);
  if (!effective.ok()) {
    return JobError(name, std::string(effective.status().message()));
  }
  if (const std::string missing = MissingParent(model, name, 0);
      !missing.empty()) {
    return JobError(
        name, absl::StrCat("extends '", missing, "', which is not in this file",
                           includes == nullptr || includes->unseen
                               ? " (run-local reads only local includes)"
                               : " nor in the files it includes"));
  }
  if (!effective->unresolved.empty()) {
    const auto& [key, why] = *effective->unresolved.begin();
    return JobError(name, absl::StrCat(key, ": ", why));
  }
  return ReadJob(model, name, effective->config);
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

absl::StatusOr<CiWorkflow> LoadCiWorkflow(const std::string& path,
                                          const CiIncludes* includes) {
  absl::StatusOr<std::string> text = ReadTextFile(path);
  if (!text.ok()) return text.status();
  const auto failed = [&](const absl::Status& status) {
    return absl::Status(status.code(),
                        absl::StrCat(path, ": ", status.message()));
  };
  YamlError error;
  const std::unique_ptr<YamlTree> tree = YamlTree::Parse(*text, &error);
  if (!error.message.empty()) {
    return failed(absl::InvalidArgumentError(
        absl::StrCat("bad YAML at line ", error.mark.line + 1, ", column ",
                     error.mark.column + 1, ": ", error.message)));
  }
  std::vector<std::unique_ptr<YamlTree>> included_trees;
  std::vector<std::vector<YamlNode>> files;
  if (absl::Status read = ParseIncluded(includes, &included_trees, &files);
      !read.ok()) {
    return failed(read);
  }
  files.push_back(tree->documents());
  const CiConfigModel model =
      includes == nullptr
          ? CiConfigModel(tree->documents())
          : CiConfigModel(files, includes->unseen, includes->unseen_over_seen);
  CiWorkflow workflow;
  if (std::optional<CiValue> variables = model.Top("variables")) {
    CiJob top;
    if (absl::Status read = ReadVariables(*variables, "top-level variables",
                                          std::nullopt, &top);
        !read.ok()) {
      return failed(read);
    }
    workflow.variables = std::move(top.variables);
    workflow.raw_variables = std::move(top.raw_variables);
  }
  const std::optional<CiValue> config = model.Top("workflow");
  if (!config.has_value() || config->is_null()) return workflow;
  if (!config->is_object()) {
    return failed(absl::InvalidArgumentError("workflow must be a map"));
  }
  if (const auto named = config->find("name");
      named != config->end() && !named->is_null()) {
    std::string name_text;
    if (!CiScalarText(*named, &name_text)) {
      return failed(
          absl::InvalidArgumentError("workflow name must be a string"));
    }
    // GitLab's length check counts characters; an empty name is accepted
    // (the pipeline stays unnamed).
    const size_t length = static_cast<size_t>(std::count_if(
        name_text.begin(), name_text.end(),
        [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
    if (length > 255) {
      return failed(absl::InvalidArgumentError(
          "workflow name is too long (maximum is 255 characters)"));
    }
    workflow.name = std::move(name_text);
  }
  if (const auto rules = config->find("rules"); rules != config->end()) {
    absl::StatusOr<std::vector<CiRule>> read =
        ReadRules(*rules, "workflow", /*job_rules=*/false);
    if (!read.ok()) return failed(read.status());
    workflow.rules = *std::move(read);
  }
  return workflow;
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
