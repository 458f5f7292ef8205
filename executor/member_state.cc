#include "executor/member_state.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"

namespace gdt::executor {
namespace {

constexpr int kStateVersion = 1;

template <typename Message>
absl::StatusOr<nlohmann::json> ToJson(const Message& message) {
  std::string text;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  if (!google::protobuf::util::MessageToJsonString(message, &text, options)
           .ok()) {
    return absl::InternalError("cannot encode member state");
  }
  return nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
}

template <typename Message>
bool FromJson(const nlohmann::json& json, Message* message) {
  return google::protobuf::util::JsonStringToMessage(json.dump(), message).ok();
}

}  // namespace

absl::Status WriteMemberState(const std::string& path,
                              const MemberState& state) {
  absl::StatusOr<nlohmann::json> assignment = ToJson(state.assignment);
  if (!assignment.ok()) return assignment.status();
  absl::StatusOr<nlohmann::json> key = ToJson(state.gang_key);
  if (!key.ok()) return key.status();
  nlohmann::json json = {
      {"version", kStateVersion},
      {"assignment", *assignment},
      {"gang_key", *key},
      {"member_index", state.member_index},
      {"job_id", state.job_id},
      {"member_id", state.member_id},
      {"agent_endpoint", state.agent_endpoint},
      {"builds_dir", state.builds_dir},
      {"cache_dir", state.cache_dir},
  };
  const std::string text = json.dump() + "\n";

  // Private to the executor's user, like the job it describes.
  return WriteFileAtomically(path, text, 0600);
}

absl::StatusOr<MemberState> ReadMemberState(const std::string& path) {
  absl::StatusOr<std::string> text = ReadTextFile(path);
  if (!text.ok()) {
    return absl::NotFoundError(absl::StrCat("no member state at ", path));
  }
  const nlohmann::json json =
      nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  const auto bad = [&path](const std::string& why) {
    return absl::DataLossError(
        absl::StrCat("member state ", path, " is damaged: ", why));
  };
  if (!json.is_object()) return bad("not a JSON object");
  if (!json.contains("version") || !json["version"].is_number_integer() ||
      json["version"].get<int>() != kStateVersion) {
    return bad("unknown version");
  }
  MemberState state;
  if (!json.contains("assignment") ||
      !FromJson(json["assignment"], &state.assignment)) {
    return bad("no assignment");
  }
  if (!json.contains("gang_key") ||
      !FromJson(json["gang_key"], &state.gang_key)) {
    return bad("no gang_key");
  }
  const auto& fields = json;
  if (!fields.contains("member_index") ||
      !fields["member_index"].is_number_integer() ||
      !fields.contains("job_id") || !fields["job_id"].is_number_integer() ||
      !fields.contains("member_id") || !fields["member_id"].is_string() ||
      !fields.contains("agent_endpoint") ||
      !fields["agent_endpoint"].is_string() || !fields.contains("builds_dir") ||
      !fields["builds_dir"].is_string()) {
    return bad("missing fields");
  }
  state.member_index = fields["member_index"].get<int>();
  state.job_id = fields["job_id"].get<int64_t>();
  state.member_id = fields["member_id"].get<std::string>();
  state.agent_endpoint = fields["agent_endpoint"].get<std::string>();
  state.builds_dir = fields["builds_dir"].get<std::string>();
  if (fields.contains("cache_dir") && fields["cache_dir"].is_string()) {
    state.cache_dir = fields["cache_dir"].get<std::string>();
  }
  return state;
}

}  // namespace gdt::executor
