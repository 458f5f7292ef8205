#include "agent/config.h"

#include <unistd.h>

#include <climits>
#include <fstream>
#include <sstream>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file.h"
#include "common/gang_limits.h"
#include "common/host_port.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/terminal_text.h"
#include "common/yaml_config.h"
#include "yaml-cpp/yaml.h"

namespace gdt::agent {
namespace {

absl::Status UnknownKey(const std::string& key) {
  return absl::InvalidArgumentError(absl::StrCat("unknown key '", key, "'"));
}

absl::StatusOr<std::string> ReadString(const YAML::Node& value,
                                       const std::string& key) {
  if (!value.IsScalar()) {
    return absl::InvalidArgumentError(absl::StrCat(key, " must be a string"));
  }
  // Names and labels go to the coordinator as protobuf strings, which must
  // be UTF-8: refused here in one line rather than by every call later.
  if (!IsValidUtf8(value.Scalar())) {
    return absl::InvalidArgumentError(absl::StrCat(
        key, " is not valid UTF-8: '", TerminalSafe(value.Scalar()), "'"));
  }
  return value.Scalar();
}

// Reads an integer in [0, max] with one clear line on bad input.
absl::StatusOr<uint64_t> ReadUint(const YAML::Node& value,
                                  const std::string& key, uint64_t max) {
  uint64_t parsed = 0;
  if (!value.IsScalar() || !absl::SimpleAtoi(value.Scalar(), &parsed) ||
      parsed > max) {
    return absl::InvalidArgumentError(absl::StrCat(
        key, " must be an integer between 0 and ", max, ", got '",
        value.IsScalar() ? value.Scalar() : "(not a number)", "'"));
  }
  return parsed;
}

// A size in bytes: an integer, optionally with a binary suffix K, M, G or T
// (1024-based), e.g. 64G; 0 is fine.
absl::StatusOr<uint64_t> ReadByteSize(const YAML::Node& value,
                                      const std::string& key) {
  const std::string text = value.IsScalar() ? value.Scalar() : "";
  std::string_view digits = text;
  uint64_t unit = 1;
  if (!digits.empty()) {
    switch (digits.back()) {
      case 'K':
        unit = uint64_t{1} << 10;
        break;
      case 'M':
        unit = uint64_t{1} << 20;
        break;
      case 'G':
        unit = uint64_t{1} << 30;
        break;
      case 'T':
        unit = uint64_t{1} << 40;
        break;
      default:
        break;
    }
    if (unit != 1) digits.remove_suffix(1);
  }
  uint64_t parsed = 0;
  if (digits.empty() ||
      digits.find_first_not_of("0123456789") != std::string_view::npos ||
      !absl::SimpleAtoi(std::string(digits), &parsed) ||
      parsed > UINT64_MAX / unit) {
    return absl::InvalidArgumentError(absl::StrCat(
        key,
        " must be a size in bytes, optionally with K, M, G or T (e.g. "
        "64G), got '",
        value.IsScalar() ? text : "(not a size)", "'"));
  }
  return parsed * unit;
}

absl::StatusOr<GpuConfig> ParseGpu(const YAML::Node& value,
                                   const std::string& path, uint32_t position) {
  if (!value.IsMap()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, " must be a map like {index: 0, uuid: GPU-..., model: H100}"));
  }
  GpuConfig gpu;
  gpu.index = position;
  for (const auto& entry : value) {
    const std::string key = entry.first.as<std::string>();
    const std::string full = absl::StrCat(path, ".", key);
    if (key == "index") {
      absl::StatusOr<uint64_t> index = ReadUint(entry.second, full, UINT32_MAX);
      if (!index.ok()) return index.status();
      gpu.index = static_cast<uint32_t>(*index);
    } else if (key == "uuid" || key == "model") {
      absl::StatusOr<std::string> text = ReadString(entry.second, full);
      if (!text.ok()) return text.status();
      (key == "uuid" ? gpu.uuid : gpu.model) = *text;
    } else if (key == "device") {
      absl::StatusOr<std::string> text = ReadString(entry.second, full);
      if (!text.ok()) return text.status();
      if (text->empty() || text->front() != '/') {
        return absl::InvalidArgumentError(absl::StrCat(
            full, " must be an absolute path like /dev/nvidia0, got '", *text,
            "'"));
      }
      gpu.device = *text;
    } else if (key == "memory_bytes") {
      absl::StatusOr<uint64_t> bytes = ReadUint(entry.second, full, UINT64_MAX);
      if (!bytes.ok()) return bytes.status();
      gpu.memory_bytes = *bytes;
    } else {
      return UnknownKey(full);
    }
  }
  return gpu;
}

// `gpus` is a count or a list of GPU maps.
absl::Status ParseGpus(const YAML::Node& value, HostConfig& host) {
  host.gpus.clear();
  if (value.IsScalar()) {
    absl::StatusOr<uint64_t> count =
        ReadUint(value, "host.gpus", kMaxGpusPerNode);
    if (!count.ok()) return count.status();
    for (uint32_t i = 0; i < *count; ++i) {
      GpuConfig gpu;
      gpu.index = i;
      host.gpus.push_back(gpu);
    }
    return absl::OkStatus();
  }
  if (!value.IsSequence()) {
    return absl::InvalidArgumentError(
        "host.gpus must be a count or a list of {index, uuid, model, "
        "memory_bytes, device}");
  }
  // The same bound as the count form: the executor refuses a member that
  // asks for more GPUs (GDT_GPUS_PER_NODE), so a longer list could never
  // be used whole, and each entry costs memory and report space.
  if (value.size() > static_cast<size_t>(kMaxGpusPerNode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("host.gpus lists ", value.size(),
                     " GPUs; a host may have at most ", kMaxGpusPerNode));
  }
  for (size_t i = 0; i < value.size(); ++i) {
    absl::StatusOr<GpuConfig> gpu = ParseGpu(
        value[i], absl::StrCat("host.gpus[", i, "]"), static_cast<uint32_t>(i));
    if (!gpu.ok()) return gpu.status();
    for (const GpuConfig& other : host.gpus) {
      if (other.index == gpu->index) {
        return absl::InvalidArgumentError(
            absl::StrCat("host.gpus lists index ", gpu->index, " twice"));
      }
    }
    host.gpus.push_back(*gpu);
  }
  return absl::OkStatus();
}

absl::Status ParseHost(const YAML::Node& value, HostConfig& host) {
  if (!value.IsMap()) {
    return absl::InvalidArgumentError("host must be a map");
  }
  for (const auto& entry : value) {
    const std::string key = entry.first.as<std::string>();
    const std::string full = "host." + key;
    if (key == "gpus") {
      GDT_RETURN_IF_ERROR(ParseGpus(entry.second, host));
    } else if (key == "name" || key == "address" ||
               key == "network_interface") {
      absl::StatusOr<std::string> text = ReadString(entry.second, full);
      if (!text.ok()) return text.status();
      if (key == "name") host.name = *text;
      if (key == "address") host.address = *text;
      if (key == "network_interface") host.network_interface = *text;
    } else if (key == "labels") {
      if (!entry.second.IsMap()) {
        return absl::InvalidArgumentError(
            "host.labels must be a map of strings");
      }
      for (const auto& label : entry.second) {
        const std::string name = label.first.as<std::string>();
        if (!IsValidUtf8(name)) {
          return absl::InvalidArgumentError(
              absl::StrCat("host.labels has a name that is not valid UTF-8: '",
                           TerminalSafe(name), "'"));
        }
        absl::StatusOr<std::string> text =
            ReadString(label.second, "host.labels." + name);
        if (!text.ok()) return text.status();
        host.labels[name] = *text;
      }
    } else if (key == "cpu_slots") {
      absl::StatusOr<uint64_t> slots = ReadUint(entry.second, full, 4096);
      if (!slots.ok()) return slots.status();
      host.cpu_slots = static_cast<uint32_t>(*slots);
    } else if (key == "runner_slots") {
      absl::StatusOr<uint64_t> slots = ReadUint(entry.second, full, 4096);
      if (!slots.ok()) return slots.status();
      host.runner_slots = static_cast<uint32_t>(*slots);
    } else {
      return UnknownKey(full);
    }
  }
  return absl::OkStatus();
}

absl::Status ParseEntry(const std::string& key, const YAML::Node& value,
                        Config& config) {
  if (key == "host") return ParseHost(value, config.host);
  if (key == "tls") {  // TLS on every gRPC connection.
    absl::StatusOr<TlsConfig> tls = ParseTlsConfig(value);
    if (!tls.ok()) return tls.status();
    config.tls = *tls;
    return absl::OkStatus();
  }
  if (key == "coordinator" || key == "listen_address" ||
      key == "advertise_endpoint" || key == "scratch_dir" ||
      key == "log_level" || key == "host_token_file" || key == "member_user" ||
      key == "cgroup_parent" || key == "builds_root" || key == "cache_root") {
    absl::StatusOr<std::string> text = ReadString(value, key);
    if (!text.ok()) return text.status();
    if (key == "coordinator") config.coordinator = *text;
    if (key == "listen_address") config.listen_address = *text;
    if (key == "advertise_endpoint") config.advertise_endpoint = *text;
    if (key == "scratch_dir") config.scratch_dir = *text;
    if (key == "log_level") config.log_level = *text;
    if (key == "host_token_file") config.host_token_file = *text;
    if (key == "member_user") config.member_user = *text;
    if (key == "cgroup_parent") config.cgroup_parent = *text;
    if (key == "builds_root") config.builds_root = *text;
    if (key == "cache_root") config.cache_root = *text;
    return absl::OkStatus();
  }
  if (key == "member_uid_pool") {
    if (!value.IsSequence()) {
      return absl::InvalidArgumentError(
          "member_uid_pool must be a list of user names or UID[:GID]");
    }
    for (size_t i = 0; i < value.size(); ++i) {
      absl::StatusOr<std::string> text =
          ReadString(value[i], absl::StrCat("member_uid_pool[", i, "]"));
      if (!text.ok()) return text.status();
      config.member_uid_pool.push_back(*text);
    }
    return absl::OkStatus();
  }
  if (key == "stage_environment_passthrough") {
    if (!value.IsSequence()) {
      return absl::InvalidArgumentError(
          "stage_environment_passthrough must be a list of variable names "
          "(NAME, or PREFIX*)");
    }
    for (size_t i = 0; i < value.size(); ++i) {
      const std::string path =
          absl::StrCat("stage_environment_passthrough[", i, "]");
      absl::StatusOr<std::string> text = ReadString(value[i], path);
      if (!text.ok()) return text.status();
      const std::string_view name =
          !text->empty() && text->back() == '*'
              ? std::string_view(*text).substr(0, text->size() - 1)
              : std::string_view(*text);
      if (name.empty() || name.find_first_of("= \t\n") != name.npos ||
          name.find('*') != name.npos) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, " must be a variable name or a prefix ending in '*', got '",
            *text, "'"));
      }
      config.stage_environment_passthrough.push_back(*text);
    }
    return absl::OkStatus();
  }
  if (key == "member_pids_max") {
    absl::StatusOr<uint64_t> max = ReadUint(value, key, 4194304);
    if (!max.ok()) return max.status();
    config.member_pids_max = *max;
    return absl::OkStatus();
  }
  if (key == "member_memory_max") {
    absl::StatusOr<uint64_t> max = ReadByteSize(value, key);
    if (!max.ok()) return max.status();
    config.member_memory_max = *max;
    return absl::OkStatus();
  }
  if (key == "member_disk_max") {
    absl::StatusOr<uint64_t> max = ReadByteSize(value, key);
    if (!max.ok()) return max.status();
    config.member_disk_max = *max;
    return absl::OkStatus();
  }
  if (key == "confine_gpu_devices") {
    absl::StatusOr<bool> confine = ReadYamlBool(value, key);
    if (!confine.ok()) return confine.status();
    config.confine_gpu_devices = *confine;
    return absl::OkStatus();
  }
  if (key == "max_connections_per_peer" || key == "max_connections") {
    absl::StatusOr<uint64_t> max = ReadUint(value, key, INT_MAX);
    if (!max.ok()) return max.status();
    (key == "max_connections" ? config.max_connections
                              : config.max_connections_per_peer) =
        static_cast<uint32_t>(*max);
    return absl::OkStatus();
  }
  if (key == "peer_ipv6_prefix_length") {
    absl::StatusOr<uint64_t> bits = ReadUint(value, key, 128);
    if (!bits.ok() || *bits < 32) {
      return absl::InvalidArgumentError(absl::StrCat(
          key, " must be an integer between 32 and 128, got '",
          value.IsScalar() ? value.Scalar() : "(not a number)", "'"));
    }
    config.peer_ipv6_prefix_length = static_cast<uint32_t>(*bits);
    return absl::OkStatus();
  }
  if (key == "kill_grace_seconds") {
    absl::StatusOr<uint64_t> seconds = ReadUint(value, key, 3600);
    if (!seconds.ok()) return seconds.status();
    config.kill_grace = std::chrono::seconds(*seconds);
    return absl::OkStatus();
  }
  return UnknownKey(key);
}

// Checks `endpoint` is host:port with a port in [min_port, 65535].
absl::Status CheckEndpoint(const std::string& key, const std::string& endpoint,
                           uint32_t min_port) {
  const absl::StatusOr<HostPort> parsed = ParseHostPort(endpoint);
  if (!parsed.ok() || parsed->port < min_port) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, " must be host:port, got '", endpoint, "'"));
  }
  return absl::OkStatus();
}

std::string HostName() {
  char name[HOST_NAME_MAX + 1] = {0};
  if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

}  // namespace

absl::Status ValidateConfig(const Config& config) {
  if (config.coordinator.empty()) {
    return absl::InvalidArgumentError(
        "coordinator is required (host:port of gdt-coord)");
  }
  // Several comma-separated endpoints: gdt-coord replicas.
  for (absl::string_view part : absl::StrSplit(config.coordinator, ',')) {
    GDT_RETURN_IF_ERROR(CheckEndpoint(
        "coordinator", std::string(absl::StripAsciiWhitespace(part)), 1));
  }
  GDT_RETURN_IF_ERROR(
      CheckEndpoint("listen_address", config.listen_address, 0));
  if (!config.advertise_endpoint.empty()) {
    GDT_RETURN_IF_ERROR(
        CheckEndpoint("advertise_endpoint", config.advertise_endpoint, 1));
  }
  if (config.host.name.empty()) {
    return absl::InvalidArgumentError("host.name must not be empty");
  }
  if (config.host.address.empty()) {
    return absl::InvalidArgumentError("host.address must not be empty");
  }
  if (config.host.cpu_slots == 0) {
    return absl::InvalidArgumentError("host.cpu_slots must be at least 1");
  }
  if (config.scratch_dir.empty() || config.scratch_dir[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("scratch_dir must be an absolute path, got '",
                     config.scratch_dir, "'"));
  }
  for (const auto& [key, path] : {std::pair{"builds_root", config.builds_root},
                                  std::pair{"cache_root", config.cache_root}}) {
    if (path.empty() || path[0] != '/') {
      return absl::InvalidArgumentError(
          absl::StrCat(key, " must be an absolute path, got '", path, "'"));
    }
  }
  if (!config.cgroup_parent.empty() && config.cgroup_parent != "off" &&
      config.cgroup_parent[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("cgroup_parent must be an absolute path or \"off\", got '",
                     config.cgroup_parent, "'"));
  }
  if (!config.member_user.empty() && !config.member_uid_pool.empty()) {
    return absl::InvalidArgumentError(
        "set member_user or member_uid_pool, not both");
  }
  GDT_RETURN_IF_ERROR(ValidateServerTls(config.tls));
  return CheckLogLevel(config.log_level);
}

absl::StatusOr<Config> ParseConfig(std::string_view yaml_text) {
  Config config;
  GDT_RETURN_IF_ERROR(ParseYamlConfig(
      yaml_text, [&config](const std::string& key, const YAML::Node& value) {
        return ParseEntry(key, value, config);
      }));
  if (config.host.name.empty()) config.host.name = HostName();
  GDT_RETURN_IF_ERROR(ValidateConfig(config));
  return config;
}

absl::StatusOr<Config> LoadConfig(const std::string& path) {
  return LoadYamlConfig<Config>(path, ParseConfig);
}

}  // namespace gdt::agent
