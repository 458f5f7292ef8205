#ifndef GDT_COORDINATOR_CONFIG_H_
#define GDT_COORDINATOR_CONFIG_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/tls_config.h"

namespace gdt::coordinator {

// Settings for gdt-coord. Plain data: defaults live here, parsing lives in
// ParseConfig(), and nothing outside config.cc knows the file is YAML.
struct Config {
  std::string listen_address = "127.0.0.1:7070";
  // What goes into Assignment.coordinator_endpoint; empty = the bound address.
  std::string advertise_endpoint;
  std::string state_path = "/var/lib/gdt/coord.db";
  uint32_t master_port_min = 29510;
  uint32_t master_port_max = 29999;
  uint32_t max_nodes_per_job = 8;
  std::chrono::seconds heartbeat_interval{2};
  std::chrono::seconds host_down_after{10};
  // A failed gang's leases are released this long after the failure even
  // when some member never cleaned up (its runner is gone).
  std::chrono::seconds failed_gang_release{300};
  std::string log_level = "info";
  // Gang key-value store (issue 6): keys one gang may hold at once.
  uint32_t kv_max_keys_per_gang = 1024;
  // host:port for the Prometheus /metrics endpoint; empty = no endpoint.
  std::string metrics_address;
  // Issue 8 (TLS): the gRPC server's certificate and, with
  // require_client_cert, mTLS; also the client side of the coordinator's
  // calls to agents (CheckPort). Unset = plaintext with a warning.
  TlsConfig tls;
};

// Parses YAML text. Unknown keys are an error so that typos are caught.
// Errors: InvalidArgument naming the key or value that is wrong, e.g.
// "unknown key 'foo'".
absl::StatusOr<Config> ParseConfig(std::string_view yaml_text);

// Reads and parses the file at `path`.
// Errors: NotFound when it cannot be read; those of ParseConfig.
absl::StatusOr<Config> LoadConfig(const std::string& path);

// Checks values that flags may have overridden after parsing.
// Errors: InvalidArgument naming the setting.
absl::Status ValidateConfig(const Config& config);

}  // namespace gdt::coordinator

#endif  // GDT_COORDINATOR_CONFIG_H_
