#include "coordinator/config.h"

#include <fstream>
#include <sstream>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file.h"
#include "common/host_port.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/yaml_config.h"
#include "yaml-cpp/yaml.h"

namespace gdt::coordinator {
namespace {

// Longest finished_gang_retention_hours: 10 years (0 = forever).
constexpr int64_t kMaxRetentionHours = 87600;

// Reads a non-negative integer setting, with one clear line on bad input.
absl::StatusOr<uint32_t> ReadUint(const YAML::Node& value,
                                  const std::string& key) {
  try {
    const int64_t parsed = value.as<int64_t>();
    if (parsed < 0 || parsed > UINT32_MAX) {
      return absl::InvalidArgumentError(
          absl::StrCat(key, " must be a non-negative integer, got ", parsed));
    }
    return static_cast<uint32_t>(parsed);
  } catch (const YAML::Exception&) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, " must be a non-negative integer"));
  }
}

absl::StatusOr<std::string> ReadString(const YAML::Node& value,
                                       const std::string& key) {
  if (!value.IsScalar()) {
    return absl::InvalidArgumentError(absl::StrCat(key, " must be a string"));
  }
  return value.as<std::string>();
}

absl::Status ParsePortRange(const YAML::Node& value, Config& config) {
  if (!value.IsMap()) {
    return absl::InvalidArgumentError(
        "master_port_range must be a map like {min: 29510, max: 29999}");
  }
  for (const auto& entry : value) {
    const std::string key = entry.first.as<std::string>();
    if (key == "min" || key == "max") {
      absl::StatusOr<uint32_t> port =
          ReadUint(entry.second, "master_port_range." + key);
      if (!port.ok()) return port.status();
      (key == "min" ? config.master_port_min : config.master_port_max) = *port;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown key 'master_port_range.", key, "'"));
    }
  }
  return absl::OkStatus();
}

// `preemption: {enabled, grace_seconds, max_preemptions,
// checkpoint_interval_seconds, overdue_fraction, served_behind_head}`.
absl::Status ParsePreemption(const YAML::Node& value, Config& config) {
  if (!value.IsMap()) {
    return absl::InvalidArgumentError(
        "preemption must be a map like {enabled: true, grace_seconds: 300}");
  }
  PreemptionSettings& settings = config.preemption;
  for (const auto& entry : value) {
    const std::string key = entry.first.as<std::string>();
    const std::string name = "preemption." + key;
    if (key == "enabled") {
      absl::StatusOr<bool> enabled = ReadYamlBool(entry.second, name);
      if (!enabled.ok()) return enabled.status();
      settings.enabled = *enabled;
      continue;
    }
    if (key == "overdue_fraction") {
      double fraction = -1;
      try {
        fraction = entry.second.as<double>();
      } catch (const YAML::Exception&) {
      }
      if (!(fraction >= 0 && fraction <= 10)) {
        return absl::InvalidArgumentError(
            name + " must be a number from 0 (off) to 10, like 0.85");
      }
      settings.overdue_fraction = fraction;
      continue;
    }
    if (key != "grace_seconds" && key != "max_preemptions" &&
        key != "checkpoint_interval_seconds" && key != "served_behind_head") {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown key '", name, "'"));
    }
    absl::StatusOr<uint32_t> number = ReadUint(entry.second, name);
    if (!number.ok()) return number.status();
    if (key == "grace_seconds") settings.grace_s = *number;
    if (key == "max_preemptions") settings.max_preemptions = *number;
    if (key == "served_behind_head") settings.served_behind_head = *number;
    if (key == "checkpoint_interval_seconds") {
      settings.checkpoint_interval_s = *number;
    }
  }
  return absl::OkStatus();
}

absl::Status ParseEntry(const std::string& key, const YAML::Node& value,
                        Config& config) {
  if (key == "master_port_range") return ParsePortRange(value, config);
  if (key == "preemption") return ParsePreemption(value, config);
  if (key == "tls") {  // TLS on every gRPC connection.
    absl::StatusOr<TlsConfig> tls =
        ParseTlsConfig(value, "tls", /*coordinator=*/true);
    if (!tls.ok()) return tls.status();
    config.tls = *tls;
    return absl::OkStatus();
  }
  if (key == "kv_max_keys_per_gang") {  // state::Gang key-value store.
    absl::StatusOr<uint32_t> number = ReadUint(value, key);
    if (!number.ok()) return number.status();
    if (*number == 0) {
      return absl::InvalidArgumentError("kv_max_keys_per_gang must be >= 1");
    }
    config.kv_max_keys_per_gang = *number;
    return absl::OkStatus();
  }
  if (key == "kv_max_total_mib") {  // Every gang's store together.
    absl::StatusOr<uint32_t> number = ReadUint(value, key);
    if (!number.ok()) return number.status();
    config.kv_max_total_mib = *number;
    return absl::OkStatus();
  }
  // HA.
  if (key == "etcd_endpoints") {
    // A YAML list, or one comma-separated string.
    std::vector<std::string> endpoints;
    if (value.IsSequence()) {
      for (const YAML::Node& item : value) {
        absl::StatusOr<std::string> text = ReadString(item, key);
        if (!text.ok()) return text.status();
        endpoints.push_back(*text);
      }
    } else {
      absl::StatusOr<std::string> text = ReadString(value, key);
      if (!text.ok()) return text.status();
      for (absl::string_view part :
           absl::StrSplit(*text, ',', absl::SkipWhitespace())) {
        endpoints.emplace_back(absl::StripAsciiWhitespace(part));
      }
    }
    config.etcd_endpoints = std::move(endpoints);
    return absl::OkStatus();
  }
  if (key == "state_store" || key == "etcd_cluster") {
    absl::StatusOr<std::string> text = ReadString(value, key);
    if (!text.ok()) return text.status();
    (key == "state_store" ? config.state_store : config.etcd_cluster) = *text;
    return absl::OkStatus();
  }
  if (key == "lease_ttl_s") {
    absl::StatusOr<uint32_t> number = ReadUint(value, key);
    if (!number.ok()) return number.status();
    config.lease_ttl_s = *number;
    return absl::OkStatus();
  }
  // Security.
  if (key == "gitlab_url" || key == "gitlab_instance_url" ||
      key == "gitlab_ca_file" || key == "admin_token_file" ||
      key == "status_without_token" || key == "member_verification" ||
      key == "id_token_audience" || key == "jwks_url") {
    absl::StatusOr<std::string> text = ReadString(value, key);
    if (!text.ok()) return text.status();
    if (key == "member_verification") config.member_verification = *text;
    if (key == "id_token_audience") config.id_token_audience = *text;
    if (key == "jwks_url") config.jwks_url = *text;
    if (key == "gitlab_url") config.gitlab_url = *text;
    if (key == "gitlab_instance_url") config.gitlab_instance_url = *text;
    if (key == "gitlab_ca_file") config.gitlab_ca_file = *text;
    if (key == "admin_token_file") config.admin_token_file = *text;
    if (key == "status_without_token") config.status_without_token = *text;
    return absl::OkStatus();
  }
  if (key == "jwks_refresh_seconds") {
    absl::StatusOr<uint32_t> number = ReadUint(value, key);
    if (!number.ok()) return number.status();
    if (*number < 1 || *number > 3600) {
      return absl::InvalidArgumentError(absl::StrCat(
          "jwks_refresh_seconds must be between 1 and 3600, got ", *number));
    }
    config.jwks_refresh_interval = std::chrono::seconds(*number);
    return absl::OkStatus();
  }
  if (key == "gitlab_timeout_seconds" || key == "member_cache_seconds") {
    absl::StatusOr<uint32_t> number = ReadUint(value, key);
    if (!number.ok()) return number.status();
    if (key == "gitlab_timeout_seconds") {
      config.gitlab_timeout = std::chrono::seconds(*number);
    }
    if (key == "member_cache_seconds") {
      config.member_cache_ttl = std::chrono::seconds(*number);
    }
    return absl::OkStatus();
  }
  if (key == "require_host_tokens") {
    absl::StatusOr<bool> required = ReadYamlBool(value, key);
    if (!required.ok()) return required.status();
    config.require_host_tokens = *required;
    return absl::OkStatus();
  }
  if (key == "listen_address" || key == "advertise_endpoint" ||
      key == "state_path" || key == "log_level" || key == "metrics_address" ||
      key == "dashboard_address" || key == "liveness_listen_address" ||
      key == "liveness_advertise_endpoint") {
    absl::StatusOr<std::string> text = ReadString(value, key);
    if (!text.ok()) return text.status();
    if (key == "listen_address") config.listen_address = *text;
    if (key == "advertise_endpoint") config.advertise_endpoint = *text;
    if (key == "state_path") config.state_path = *text;
    if (key == "log_level") config.log_level = *text;
    if (key == "metrics_address") config.metrics_address = *text;
    if (key == "dashboard_address") config.dashboard_address = *text;
    if (key == "liveness_listen_address") {
      config.liveness_listen_address = *text;
    }
    if (key == "liveness_advertise_endpoint") {
      config.liveness_advertise_endpoint = *text;
    }
    return absl::OkStatus();
  }
  if (key == "peer_ipv6_prefix_length") {
    absl::StatusOr<uint32_t> bits = ReadUint(value, key);
    if (!bits.ok() || *bits < 32 || *bits > 128) {
      return absl::InvalidArgumentError(absl::StrCat(
          key, " must be an integer between 32 and 128, got '",
          value.IsScalar() ? value.Scalar() : "(not a number)", "'"));
    }
    config.peer_ipv6_prefix_length = *bits;
    return absl::OkStatus();
  }
  if (key == "max_nodes_per_job" || key == "heartbeat_interval_seconds" ||
      key == "host_down_after_seconds" ||
      key == "failed_gang_release_seconds" ||
      key == "forming_gang_abandon_seconds" ||
      key == "member_gone_after_seconds" || key == "elastic_wait_seconds" ||
      key == "finished_gang_retention_hours" ||
      key == "max_forming_gangs_per_pipeline" ||
      key == "max_forming_gangs_per_project" ||
      key == "join_rate_per_project" || key == "join_burst_per_project" ||
      key == "checkpoint_record_rate_per_gang" ||
      key == "checkpoint_record_burst_per_gang" ||
      key == "max_connections_per_peer" || key == "max_connections") {
    absl::StatusOr<uint32_t> number = ReadUint(value, key);
    if (!number.ok()) return number.status();
    if (key == "max_connections_per_peer") {
      config.max_connections_per_peer = *number;
    }
    if (key == "max_connections") config.max_connections = *number;
    if (key == "checkpoint_record_rate_per_gang") {
      config.checkpoint_record_rate_per_gang = *number;
    }
    if (key == "checkpoint_record_burst_per_gang") {
      config.checkpoint_record_burst_per_gang = *number;
    }
    if (key == "join_rate_per_project") config.join_rate_per_project = *number;
    if (key == "join_burst_per_project") {
      config.join_burst_per_project = *number;
    }
    if (key == "max_nodes_per_job") config.max_nodes_per_job = *number;
    if (key == "max_forming_gangs_per_pipeline") {
      config.max_forming_gangs_per_pipeline = *number;
    }
    if (key == "max_forming_gangs_per_project") {
      config.max_forming_gangs_per_project = *number;
    }
    if (key == "heartbeat_interval_seconds") {
      config.heartbeat_interval = std::chrono::seconds(*number);
    }
    if (key == "host_down_after_seconds") {
      config.host_down_after = std::chrono::seconds(*number);
    }
    if (key == "failed_gang_release_seconds") {
      config.failed_gang_release = std::chrono::seconds(*number);
    }
    if (key == "member_gone_after_seconds") {
      config.member_gone_after = std::chrono::seconds(*number);
    }
    if (key == "forming_gang_abandon_seconds") {
      config.forming_gang_abandon = std::chrono::seconds(*number);
    }
    if (key == "elastic_wait_seconds") {
      config.elastic_wait = std::chrono::seconds(*number);
    }
    if (key == "finished_gang_retention_hours") {
      config.finished_gang_retention = std::chrono::hours(*number);
    }
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown key '", key, "'"));
}

}  // namespace

absl::Status ValidateConfig(const Config& config) {
  if (config.listen_address.empty()) {
    return absl::InvalidArgumentError("listen_address must not be empty");
  }
  if (config.state_path.empty()) {
    return absl::InvalidArgumentError("state_path must not be empty");
  }
  if (config.checkpoint_record_rate_per_gang > 0 &&
      config.checkpoint_record_burst_per_gang == 0) {
    return absl::InvalidArgumentError(
        "checkpoint_record_burst_per_gang must be at least 1 while "
        "checkpoint_record_rate_per_gang is set (0 turns the limit off)");
  }
  if (config.join_rate_per_project > 0 && config.join_burst_per_project == 0) {
    return absl::InvalidArgumentError(
        "join_burst_per_project must be at least 1 while "
        "join_rate_per_project is set (0 turns the limit off)");
  }
  if (config.master_port_min == 0 || config.master_port_max > 65535 ||
      config.master_port_min > config.master_port_max) {
    return absl::InvalidArgumentError(absl::StrCat(
        "master_port_range must satisfy 1 <= min <= max <= 65535, got ",
        config.master_port_min, "..", config.master_port_max));
  }
  if (config.max_nodes_per_job == 0) {
    return absl::InvalidArgumentError("max_nodes_per_job must be at least 1");
  }
  if (config.finished_gang_retention > std::chrono::hours(kMaxRetentionHours)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "finished_gang_retention_hours must be at most ", kMaxRetentionHours,
        " (10 years; 0 keeps finished gangs forever), got ",
        config.finished_gang_retention.count()));
  }
  if (config.preemption.enabled && config.preemption.grace_s == 0) {
    // A victim needs some time to write its checkpoint after the notice.
    return absl::InvalidArgumentError(
        "preemption.grace_seconds must be at least 1");
  }
  if (config.heartbeat_interval.count() == 0) {
    return absl::InvalidArgumentError(
        "heartbeat_interval_seconds must be at least 1");
  }
  if (config.host_down_after <= config.heartbeat_interval) {
    return absl::InvalidArgumentError(absl::StrCat(
        "host_down_after_seconds (", config.host_down_after.count(),
        ") must be larger than heartbeat_interval_seconds (",
        config.heartbeat_interval.count(), ")"));
  }
  for (const auto& [key, address] :
       {std::pair{"metrics_address", &config.metrics_address},
        std::pair{"dashboard_address", &config.dashboard_address},
        std::pair{"liveness_listen_address", &config.liveness_listen_address},
        std::pair{"liveness_advertise_endpoint",
                  &config.liveness_advertise_endpoint}}) {
    if (address->empty()) continue;
    if (std::string_view(key) == "liveness_listen_address" &&
        *address == "off") {
      continue;
    }
    if (!ParseHostPort(*address).ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          key, " must be host:port (port 0..65535), got '", *address, "'"));
    }
  }
  // HA.
  if (config.state_store != "sqlite" && config.state_store != "etcd") {
    return absl::InvalidArgumentError(absl::StrCat(
        "state_store must be sqlite or etcd, got '", config.state_store, "'"));
  }
  if (config.state_store == "etcd") {
    if (config.etcd_endpoints.empty()) {
      return absl::InvalidArgumentError(
          "state_store: etcd needs etcd_endpoints (host:port, ...)");
    }
    for (const std::string& endpoint : config.etcd_endpoints) {
      if (endpoint.empty() || endpoint.find(':') == std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat(
            "etcd_endpoints entries must be host:port, got '", endpoint, "'"));
      }
    }
    if (config.lease_ttl_s < 2 || config.lease_ttl_s > 60) {
      return absl::InvalidArgumentError(
          absl::StrCat("lease_ttl_s must be 2..60, got ", config.lease_ttl_s));
    }
  }
  if (config.status_without_token != "loopback" &&
      config.status_without_token != "anyone" &&
      config.status_without_token != "nobody") {
    return absl::InvalidArgumentError(
        absl::StrCat("status_without_token must be loopback, anyone or "
                     "nobody, got '",
                     config.status_without_token, "'"));
  }
  if (!config.gitlab_url.empty() &&
      config.gitlab_url.rfind("http://", 0) != 0 &&
      config.gitlab_url.rfind("https://", 0) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("gitlab_url must start with https:// or http://, got '",
                     config.gitlab_url, "'"));
  }
  if (!config.gitlab_instance_url.empty() &&
      config.gitlab_instance_url.rfind("http://", 0) != 0 &&
      config.gitlab_instance_url.rfind("https://", 0) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gitlab_instance_url must start with https:// or http://, got '",
        config.gitlab_instance_url, "'"));
  }
  if (!config.gitlab_instance_url.empty() && config.gitlab_url.empty()) {
    return absl::InvalidArgumentError(
        "gitlab_instance_url needs gitlab_url (it only matters when members "
        "are verified)");
  }
  if (!config.gitlab_url.empty() && config.gitlab_timeout.count() == 0) {
    return absl::InvalidArgumentError("gitlab_timeout_seconds must be >= 1");
  }
  if (config.member_verification != "job_api" &&
      config.member_verification != "id_token") {
    return absl::InvalidArgumentError(
        absl::StrCat("member_verification must be job_api or id_token, got '",
                     config.member_verification, "'"));
  }
  if (config.member_verification == "id_token") {
    if (config.gitlab_url.empty()) {
      return absl::InvalidArgumentError(
          "member_verification: id_token needs gitlab_url (the instance "
          "whose ID tokens are trusted: their iss)");
    }
    if (config.id_token_audience.empty()) {
      return absl::InvalidArgumentError(
          "member_verification: id_token needs id_token_audience (the aud: "
          "the jobs' id_tokens are issued for)");
    }
  }
  if (!config.jwks_url.empty() && config.jwks_url.rfind("http://", 0) != 0 &&
      config.jwks_url.rfind("https://", 0) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("jwks_url must start with https:// or http://, got '",
                     config.jwks_url, "'"));
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
  GDT_RETURN_IF_ERROR(ValidateConfig(config));
  return config;
}

absl::StatusOr<Config> LoadConfig(const std::string& path) {
  return LoadYamlConfig<Config>(path, ParseConfig);
}

}  // namespace gdt::coordinator
