#include "gitlab/job_payload.h"

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace gdt::gitlab {
namespace {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

constexpr char kFile[] = "JOB_RESPONSE_FILE";

// A SAX consumer that accepts every event and remembers the parser's error
// message, so a parse failure can be explained without exceptions.
class ErrorRecorder {
 public:
  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(Json::number_integer_t) { return true; }
  bool number_unsigned(Json::number_unsigned_t) { return true; }
  bool number_float(Json::number_float_t, const Json::string_t&) {
    return true;
  }
  bool string(Json::string_t&) { return true; }
  bool binary(Json::binary_t&) { return true; }
  bool start_object(std::size_t) { return true; }
  bool key(Json::string_t&) { return true; }
  bool end_object() { return true; }
  bool start_array(std::size_t) { return true; }
  bool end_array() { return true; }
  bool parse_error(std::size_t, const std::string&,
                   const nlohmann::detail::exception& error) {
    message = error.what();
    return false;
  }

  std::string message;
};

std::string DescribeParseError(std::string_view text) {
  ErrorRecorder recorder;
  Json::sax_parse(text.begin(), text.end(), &recorder,
                  Json::input_format_t::json, /*strict=*/true);
  if (recorder.message.empty()) return "malformed document";
  return recorder.message;
}

bool IsInteger(const Json& value) {
  return value.is_number_integer() || value.is_number_unsigned();
}

// The member `key` of `object`, or nullptr when absent or null (Go encodes
// nil slices and pointers as null).
const Json* Member(const Json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::Status TypeError(std::string_view path, std::string_view type) {
  return absl::InvalidArgumentError(absl::StrCat(
      kFile, " field '", std::string(path), "' is not ", std::string(type)));
}

absl::Status ReadString(const Json& object, const char* key,
                        std::string_view path, std::string* out) {
  const Json* value = Member(object, key);
  if (value == nullptr) return absl::OkStatus();
  if (!value->is_string()) return TypeError(path, "a string");
  *out = value->get<std::string>();
  return absl::OkStatus();
}

absl::Status ReadBool(const Json& object, const char* key,
                      std::string_view path, bool* out) {
  const Json* value = Member(object, key);
  if (value == nullptr) return absl::OkStatus();
  if (!value->is_boolean()) return TypeError(path, "a boolean");
  *out = value->get<bool>();
  return absl::OkStatus();
}

absl::Status ReadInt(const Json& object, const char* key, std::string_view path,
                     int64_t* out) {
  const Json* value = Member(object, key);
  if (value == nullptr) return absl::OkStatus();
  if (!IsInteger(*value)) return TypeError(path, "an integer");
  *out = value->get<int64_t>();
  return absl::OkStatus();
}

absl::Status ReadStrings(const Json& object, const char* key,
                         std::string_view path, std::vector<std::string>* out) {
  const Json* value = Member(object, key);
  if (value == nullptr) return absl::OkStatus();
  if (!value->is_array()) return TypeError(path, "an array of strings");
  out->clear();
  for (const Json& item : *value) {
    if (!item.is_string()) return TypeError(path, "an array of strings");
    out->push_back(item.get<std::string>());
  }
  return absl::OkStatus();
}

// Calls `parse(item, path)` for every element of the array `key`.
template <typename Parse>
absl::Status ForEach(const Json& object, const char* key, Parse parse) {
  const Json* value = Member(object, key);
  if (value == nullptr) return absl::OkStatus();
  if (!value->is_array()) return TypeError(key, "an array");
  for (size_t i = 0; i < value->size(); ++i) {
    const std::string path = absl::StrCat(key, "[", i, "]");
    if (!(*value)[i].is_object()) return TypeError(path, "an object");
    GDT_RETURN_IF_ERROR(parse((*value)[i], path));
  }
  return absl::OkStatus();
}

absl::Status ParseVariable(const Json& item, const std::string& path,
                           JobVariable* variable) {
  GDT_RETURN_IF_ERROR(ReadString(item, "key", path + ".key", &variable->key));
  GDT_RETURN_IF_ERROR(
      ReadString(item, "value", path + ".value", &variable->value));
  GDT_RETURN_IF_ERROR(
      ReadBool(item, "public", path + ".public", &variable->is_public));
  GDT_RETURN_IF_ERROR(ReadBool(item, "file", path + ".file", &variable->file));
  GDT_RETURN_IF_ERROR(
      ReadBool(item, "masked", path + ".masked", &variable->masked));
  GDT_RETURN_IF_ERROR(ReadBool(item, "raw", path + ".raw", &variable->raw));
  return absl::OkStatus();
}

absl::Status ParseStep(const Json& item, const std::string& path,
                       JobStep* step) {
  GDT_RETURN_IF_ERROR(ReadString(item, "name", path + ".name", &step->name));
  GDT_RETURN_IF_ERROR(
      ReadStrings(item, "script", path + ".script", &step->script));
  GDT_RETURN_IF_ERROR(
      ReadInt(item, "timeout", path + ".timeout", &step->timeout_seconds));
  GDT_RETURN_IF_ERROR(ReadString(item, "when", path + ".when", &step->when));
  GDT_RETURN_IF_ERROR(ReadBool(item, "allow_failure", path + ".allow_failure",
                               &step->allow_failure));
  return absl::OkStatus();
}

absl::Status ParseHook(const Json& item, const std::string& path,
                       JobHook* hook) {
  GDT_RETURN_IF_ERROR(ReadString(item, "name", path + ".name", &hook->name));
  return ReadStrings(item, "script", path + ".script", &hook->script);
}

absl::Status ParseArtifact(const Json& item, const std::string& path,
                           JobArtifact* artifact) {
  GDT_RETURN_IF_ERROR(
      ReadString(item, "name", path + ".name", &artifact->name));
  GDT_RETURN_IF_ERROR(
      ReadBool(item, "untracked", path + ".untracked", &artifact->untracked));
  GDT_RETURN_IF_ERROR(
      ReadStrings(item, "paths", path + ".paths", &artifact->paths));
  GDT_RETURN_IF_ERROR(
      ReadStrings(item, "exclude", path + ".exclude", &artifact->exclude));
  GDT_RETURN_IF_ERROR(
      ReadString(item, "when", path + ".when", &artifact->when));
  GDT_RETURN_IF_ERROR(ReadString(item, "artifact_type", path + ".artifact_type",
                                 &artifact->artifact_type));
  GDT_RETURN_IF_ERROR(ReadString(item, "artifact_format",
                                 path + ".artifact_format",
                                 &artifact->artifact_format));
  GDT_RETURN_IF_ERROR(
      ReadString(item, "expire_in", path + ".expire_in", &artifact->expire_in));
  return absl::OkStatus();
}

absl::Status ParseCache(const Json& item, const std::string& path,
                        JobCache* cache) {
  GDT_RETURN_IF_ERROR(ReadString(item, "key", path + ".key", &cache->key));
  GDT_RETURN_IF_ERROR(
      ReadBool(item, "untracked", path + ".untracked", &cache->untracked));
  GDT_RETURN_IF_ERROR(
      ReadString(item, "policy", path + ".policy", &cache->policy));
  GDT_RETURN_IF_ERROR(
      ReadStrings(item, "paths", path + ".paths", &cache->paths));
  GDT_RETURN_IF_ERROR(ReadString(item, "when", path + ".when", &cache->when));
  GDT_RETURN_IF_ERROR(ReadStrings(
      item, "fallback_keys", path + ".fallback_keys", &cache->fallback_keys));
  return absl::OkStatus();
}

// A `services` entry: the fields a custom executor's execs are told about;
// the others (ports, pull_policy, executor_opts) are left out.
absl::Status ParseService(const Json& item, const std::string& path,
                          JobService* out) {
  GDT_RETURN_IF_ERROR(
      ReadString(item, "name", absl::StrCat(path, ".name"), &out->name));
  GDT_RETURN_IF_ERROR(
      ReadString(item, "alias", absl::StrCat(path, ".alias"), &out->alias));
  GDT_RETURN_IF_ERROR(ReadStrings(
      item, "entrypoint", absl::StrCat(path, ".entrypoint"), &out->entrypoint));
  GDT_RETURN_IF_ERROR(ReadStrings(
      item, "command", absl::StrCat(path, ".command"), &out->command));
  const Json* variables = Member(item, "variables");
  if (variables == nullptr) return absl::OkStatus();
  const std::string variables_path = absl::StrCat(path, ".variables");
  if (!variables->is_array()) return TypeError(variables_path, "an array");
  for (size_t i = 0; i < variables->size(); ++i) {
    const Json& variable = (*variables)[i];
    const std::string entry = absl::StrCat(variables_path, "[", i, "]");
    if (!variable.is_object()) return TypeError(entry, "an object");
    std::string key;
    std::string value;
    GDT_RETURN_IF_ERROR(
        ReadString(variable, "key", absl::StrCat(entry, ".key"), &key));
    GDT_RETURN_IF_ERROR(
        ReadString(variable, "value", absl::StrCat(entry, ".value"), &value));
    out->variables.emplace_back(std::move(key), std::move(value));
  }
  return absl::OkStatus();
}

absl::Status ParseDependency(const Json& item, const std::string& path,
                             JobDependency* dependency) {
  GDT_RETURN_IF_ERROR(ReadInt(item, "id", path + ".id", &dependency->id));
  GDT_RETURN_IF_ERROR(
      ReadString(item, "token", path + ".token", &dependency->token));
  GDT_RETURN_IF_ERROR(
      ReadString(item, "name", path + ".name", &dependency->name));
  if (const Json* file = Member(item, "artifacts_file"); file != nullptr) {
    const std::string file_path = path + ".artifacts_file";
    if (!file->is_object()) return TypeError(file_path, "an object");
    GDT_RETURN_IF_ERROR(ReadString(*file, "filename", file_path + ".filename",
                                   &dependency->artifacts_filename));
    GDT_RETURN_IF_ERROR(ReadInt(*file, "size", file_path + ".size",
                                &dependency->artifacts_size));
  }
  return absl::OkStatus();
}

}  // namespace

std::optional<std::string> JobPayload::Variable(std::string_view key) const {
  for (auto it = variables.rbegin(); it != variables.rend(); ++it) {
    if (it->key == key) return it->value;
  }
  return std::nullopt;
}

absl::StatusOr<JobPayload> ParseJobPayload(std::string_view json_text) {
  const Json root = Json::parse(json_text.begin(), json_text.end(), nullptr,
                                /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(
        kFile, " is not valid JSON: ", DescribeParseError(json_text)));
  }
  if (!root.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kFile, " is not a JSON object"));
  }
  JobPayload payload;

  const Json* id = Member(root, "id");
  if (id == nullptr || !IsInteger(*id)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kFile, " has no numeric 'id'"));
  }
  payload.id = id->get<int64_t>();
  const Json* token = Member(root, "token");
  if (token == nullptr || !token->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kFile, " has no string 'token'"));
  }
  payload.token = token->get<std::string>();
  GDT_RETURN_IF_ERROR(ReadBool(root, "allow_git_fetch", "allow_git_fetch",
                               &payload.allow_git_fetch));

  const Json* job_info = Member(root, "job_info");
  if (job_info == nullptr || !job_info->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kFile, " has no object 'job_info'"));
  }
  const Json* name = Member(*job_info, "name");
  if (name == nullptr || !name->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kFile, " has no string 'job_info.name'"));
  }
  payload.name = name->get<std::string>();
  const Json* project_id = Member(*job_info, "project_id");
  if (project_id == nullptr || !IsInteger(*project_id)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kFile, " has no numeric 'job_info.project_id'"));
  }
  payload.project_id = project_id->get<int64_t>();
  GDT_RETURN_IF_ERROR(
      ReadString(*job_info, "stage", "job_info.stage", &payload.stage));
  GDT_RETURN_IF_ERROR(ReadString(*job_info, "project_name",
                                 "job_info.project_name",
                                 &payload.project_name));
  GDT_RETURN_IF_ERROR(ReadString(*job_info, "project_full_path",
                                 "job_info.project_full_path",
                                 &payload.project_full_path));
  if (Member(*job_info, "pipeline_id") != nullptr) {
    int64_t pipeline_id = 0;
    GDT_RETURN_IF_ERROR(ReadInt(*job_info, "pipeline_id",
                                "job_info.pipeline_id", &pipeline_id));
    payload.pipeline_id = pipeline_id;
  }

  if (const Json* git = Member(root, "git_info"); git != nullptr) {
    if (!git->is_object()) return TypeError("git_info", "an object");
    GDT_RETURN_IF_ERROR(
        ReadString(*git, "repo_url", "git_info.repo_url", &payload.repo_url));
    GDT_RETURN_IF_ERROR(ReadString(*git, "ref", "git_info.ref", &payload.ref));
    GDT_RETURN_IF_ERROR(ReadString(*git, "sha", "git_info.sha", &payload.sha));
    GDT_RETURN_IF_ERROR(ReadString(*git, "before_sha", "git_info.before_sha",
                                   &payload.before_sha));
    GDT_RETURN_IF_ERROR(
        ReadString(*git, "ref_type", "git_info.ref_type", &payload.ref_type));
    GDT_RETURN_IF_ERROR(
        ReadStrings(*git, "refspecs", "git_info.refspecs", &payload.refspecs));
    GDT_RETURN_IF_ERROR(
        ReadInt(*git, "depth", "git_info.depth", &payload.depth));
    GDT_RETURN_IF_ERROR(ReadBool(*git, "protected", "git_info.protected",
                                 &payload.ref_protected));
  }
  if (const Json* image = Member(root, "image"); image != nullptr) {
    if (!image->is_object()) return TypeError("image", "an object");
    GDT_RETURN_IF_ERROR(
        ReadString(*image, "name", "image.name", &payload.image));
  }
  if (const Json* runner = Member(root, "runner_info"); runner != nullptr) {
    if (!runner->is_object()) return TypeError("runner_info", "an object");
    GDT_RETURN_IF_ERROR(ReadInt(*runner, "timeout", "runner_info.timeout",
                                &payload.timeout_seconds));
  }

  // Named lambdas: GDT_RETURN_IF_ERROR must not nest.
  const auto add_variable = [&](const Json& item, const std::string& path) {
    JobVariable variable;
    absl::Status status = ParseVariable(item, path, &variable);
    payload.variables.push_back(std::move(variable));
    return status;
  };
  const auto add_step = [&](const Json& item, const std::string& path) {
    JobStep step;
    absl::Status status = ParseStep(item, path, &step);
    payload.steps.push_back(std::move(step));
    return status;
  };
  const auto add_artifact = [&](const Json& item, const std::string& path) {
    JobArtifact artifact;
    absl::Status status = ParseArtifact(item, path, &artifact);
    payload.artifacts.push_back(std::move(artifact));
    return status;
  };
  const auto add_cache = [&](const Json& item, const std::string& path) {
    JobCache cache;
    absl::Status status = ParseCache(item, path, &cache);
    payload.caches.push_back(std::move(cache));
    return status;
  };
  const auto add_dependency = [&](const Json& item, const std::string& path) {
    JobDependency dependency;
    absl::Status status = ParseDependency(item, path, &dependency);
    payload.dependencies.push_back(std::move(dependency));
    return status;
  };
  GDT_RETURN_IF_ERROR(ForEach(root, "variables", add_variable));
  GDT_RETURN_IF_ERROR(ForEach(root, "steps", add_step));
  GDT_RETURN_IF_ERROR(ForEach(root, "artifacts", add_artifact));
  GDT_RETURN_IF_ERROR(ForEach(root, "cache", add_cache));
  const auto add_service = [&](const Json& item, const std::string& path) {
    JobService service;
    absl::Status status = ParseService(item, path, &service);
    payload.services.push_back(std::move(service));
    return status;
  };
  GDT_RETURN_IF_ERROR(ForEach(root, "dependencies", add_dependency));
  GDT_RETURN_IF_ERROR(ForEach(root, "services", add_service));
  const auto add_hook = [&](const Json& item, const std::string& path) {
    JobHook hook;
    absl::Status status = ParseHook(item, path, &hook);
    payload.hooks.push_back(std::move(hook));
    return status;
  };
  GDT_RETURN_IF_ERROR(ForEach(root, "hooks", add_hook));
  return payload;
}

absl::StatusOr<JobPayload> LoadJobPayload(const std::string& path) {
  absl::StatusOr<std::string> text = ReadTextFile(path);
  if (!text.ok()) {
    // "cannot read JOB_RESPONSE_FILE <path>: <reason>", code kept.
    return absl::Status(
        text.status().code(),
        absl::StrCat("cannot read ", kFile, " ",
                     text.status().message().substr(
                         std::string_view("cannot read ").size())));
  }
  return ParseJobPayload(*text);
}

std::string SerializeJobPayload(const JobPayload& payload) {
  OrderedJson job_info = {{"name", payload.name}, {"stage", payload.stage}};
  if (payload.pipeline_id.has_value()) {
    job_info["pipeline_id"] = *payload.pipeline_id;
  }
  job_info["project_id"] = payload.project_id;
  job_info["project_name"] = payload.project_name;
  if (!payload.project_full_path.empty()) {
    job_info["project_full_path"] = payload.project_full_path;
  }

  OrderedJson variables = OrderedJson::array();
  for (const JobVariable& v : payload.variables) {
    variables.push_back({{"key", v.key},
                         {"value", v.value},
                         {"public", v.is_public},
                         {"file", v.file},
                         {"masked", v.masked},
                         {"raw", v.raw}});
  }
  OrderedJson steps = OrderedJson::array();
  for (const JobStep& s : payload.steps) {
    steps.push_back({{"name", s.name},
                     {"script", s.script},
                     {"timeout", s.timeout_seconds},
                     {"when", s.when},
                     {"allow_failure", s.allow_failure}});
  }
  OrderedJson artifacts = OrderedJson::array();
  for (const JobArtifact& a : payload.artifacts) {
    artifacts.push_back({{"name", a.name},
                         {"untracked", a.untracked},
                         {"paths", a.paths},
                         {"exclude", a.exclude},
                         {"when", a.when},
                         {"artifact_type", a.artifact_type},
                         {"artifact_format", a.artifact_format},
                         {"expire_in", a.expire_in}});
  }
  OrderedJson dependencies = OrderedJson::array();
  for (const JobDependency& d : payload.dependencies) {
    dependencies.push_back(
        {{"id", d.id},
         {"token", d.token},
         {"name", d.name},
         {"artifacts_file",
          {{"filename", d.artifacts_filename}, {"size", d.artifacts_size}}}});
  }

  OrderedJson root;
  root["id"] = payload.id;
  root["token"] = payload.token;
  root["allow_git_fetch"] = payload.allow_git_fetch;
  root["job_info"] = std::move(job_info);
  root["git_info"] = {
      {"repo_url", payload.repo_url}, {"ref", payload.ref},
      {"sha", payload.sha},           {"before_sha", payload.before_sha},
      {"ref_type", payload.ref_type}, {"refspecs", payload.refspecs},
      {"depth", payload.depth},       {"protected", payload.ref_protected}};
  root["runner_info"] = {{"timeout", payload.timeout_seconds}};
  if (!payload.image.empty()) root["image"] = {{"name", payload.image}};
  root["variables"] = std::move(variables);
  root["steps"] = std::move(steps);
  root["artifacts"] = std::move(artifacts);
  OrderedJson caches = OrderedJson::array();
  for (const JobCache& c : payload.caches) {
    caches.push_back({{"key", c.key},
                      {"untracked", c.untracked},
                      {"policy", c.policy},
                      {"paths", c.paths},
                      {"when", c.when},
                      {"fallback_keys", c.fallback_keys}});
  }
  root["cache"] = std::move(caches);
  root["dependencies"] = std::move(dependencies);
  // As the runner re-encodes them: alias, command and entrypoint only when
  // set.
  OrderedJson services = OrderedJson::array();
  for (const JobService& service : payload.services) {
    OrderedJson entry = {{"name", service.name}};
    if (!service.alias.empty()) entry["alias"] = service.alias;
    if (!service.command.empty()) entry["command"] = service.command;
    if (!service.entrypoint.empty()) entry["entrypoint"] = service.entrypoint;
    if (!service.variables.empty()) {
      OrderedJson list = OrderedJson::array();
      for (const auto& [key, value] : service.variables) {
        list.push_back({{"key", key}, {"value", value}});
      }
      entry["variables"] = std::move(list);
    }
    services.push_back(std::move(entry));
  }
  root["services"] = std::move(services);
  if (!payload.hooks.empty()) {
    OrderedJson hooks = OrderedJson::array();
    for (const JobHook& hook : payload.hooks) {
      hooks.push_back({{"name", hook.name}, {"script", hook.script}});
    }
    root["hooks"] = std::move(hooks);
  }
  root["features"] = {{"trace_sections", true}};
  // Replace invalid UTF-8 instead of throwing: the payload is ours to write.
  return root.dump(-1, ' ', false, OrderedJson::error_handler_t::replace) +
         "\n";
}

absl::StatusOr<NodeSuffix> ParseNodeSuffix(std::string_view job_name) {
  const auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("job name '", std::string(job_name),
                     "' has no ' i/N' suffix with 1 <= i <= N"));
  };
  const size_t space = job_name.rfind(' ');
  if (space == std::string_view::npos || space == 0) return bad();
  const std::string_view suffix = job_name.substr(space + 1);
  const size_t slash = suffix.find('/');
  if (slash == std::string_view::npos) return bad();
  const auto parse_number = [](std::string_view text, int* out) {
    if (text.empty() || text.size() > 9 || text[0] == '0') return false;
    for (char c : text) {
      if (c < '0' || c > '9') return false;
    }
    return std::from_chars(text.data(), text.data() + text.size(), *out).ec ==
           std::errc();
  };
  NodeSuffix result;
  if (!parse_number(suffix.substr(0, slash), &result.index) ||
      !parse_number(suffix.substr(slash + 1), &result.total) ||
      result.index > result.total) {
    return bad();
  }
  result.group_name = std::string(job_name.substr(0, space));
  return result;
}

}  // namespace gdt::gitlab
