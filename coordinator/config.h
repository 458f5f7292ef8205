#ifndef GDT_COORDINATOR_CONFIG_H_
#define GDT_COORDINATOR_CONFIG_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tls_config.h"
#include "coordinator/placement.h"

namespace gdt::coordinator {

// Settings for gdt-coord. Plain data: defaults live here, parsing lives in
// ParseConfig(), and nothing outside config.cc knows the file is YAML.
struct Config {
  std::string listen_address = "127.0.0.1:7070";
  // What goes into Assignment.coordinator_endpoint; empty = the bound address.
  std::string advertise_endpoint;
  // The liveness server (Heartbeat only, its own threads and small limits):
  // empty = listen_address's host on a port the kernel picks; "off" = none
  // (heartbeats go to listen_address).
  std::string liveness_listen_address;
  // What RegisterHost tells agents to send heartbeats to; empty = the host
  // each agent reached the coordinator at, with the liveness port.
  std::string liveness_advertise_endpoint;
  std::string state_path = "/var/lib/gdt/coord.db";
  // Connections the main port keeps open at once from one remote address
  // and from everyone (ConnectionGate); more are closed on accept. 0 = no
  // cap.
  uint32_t max_connections_per_peer = 1024;
  uint32_t max_connections = 8192;
  // Leading bits of an IPv6 address that make one peer for those caps,
  // 32..128.
  uint32_t peer_ipv6_prefix_length = 64;
  uint32_t master_port_min = 29510;
  uint32_t master_port_max = 29999;
  uint32_t max_nodes_per_job = 8;
  // Forming gangs a pipeline / a project may have at once (SchedulerOptions).
  uint32_t max_forming_gangs_per_pipeline = 64;
  uint32_t max_forming_gangs_per_project = 256;
  // Joins one project may make: bursts of join_burst_per_project, then
  // join_rate_per_project a second; 0 = no limit (SchedulerOptions).
  uint32_t join_rate_per_project = 50;
  uint32_t join_burst_per_project = 500;
  std::chrono::seconds heartbeat_interval{2};
  std::chrono::seconds host_down_after{10};
  // A failed gang's leases are released this long after the failure even
  // when some member never cleaned up (its runner is gone).
  std::chrono::seconds failed_gang_release{300};
  // A forming gang none of whose members is present ends this long after
  // the coordinator saw it so (its jobs are gone; a retry forms it again).
  std::chrono::seconds forming_gang_abandon{300};
  // A placed member that neither its agent (no stage) nor its executor (no
  // watch stream) holds for this long has left (docs/states.md).
  std::chrono::seconds member_gone_after{120};
  // An elastic gang (`nodes: min..max`) missing members starts with those
  // present (at least min, if they fit) this long after it began forming.
  std::chrono::seconds elastic_wait{60};
  // A finished gang whose members have all left is forgotten (in memory and
  // in the store) this long after it ended for good (Gang::ended_unix_ms,
  // stored); 0 = kept forever (SchedulerOptions).
  std::chrono::hours finished_gang_retention{168};
  std::string log_level = "info";
  // Checkpoint-aware preemption (`preemption:` map); off by default.
  PreemptionSettings preemption;
  // Gang key-value store: keys one gang may hold at once.
  uint32_t kv_max_keys_per_gang = 1024;
  // Gang key-value stores: MiB of keys and values all gangs may hold
  // together (KvLimits::max_bytes_total); 0 = no bound.
  uint32_t kv_max_total_mib = 1024;
  // Checkpoint records one gang may make (CheckpointLimits): units a
  // second after a burst; 0 = no limit.
  uint32_t checkpoint_record_rate_per_gang = 2;
  uint32_t checkpoint_record_burst_per_gang = 64;
  // host:port for the Prometheus /metrics endpoint; empty = no endpoint.
  std::string metrics_address;
  // host:port for the read-only web dashboard; empty = no dashboard.
  // Readers follow the status rule (admin_token_file, status_without_token).
  std::string dashboard_address;

  // HA.
  // Where the state lives: "sqlite" (state_path, one coordinator) or
  // "etcd" (etcd_endpoints; several replicas elect a leader).
  std::string state_store = "sqlite";
  // etcd client endpoints, host:port; needed for state_store: etcd.
  std::vector<std::string> etcd_endpoints;
  // Names the key prefix /gdt/<etcd_cluster>/ (one etcd for several gdts).
  std::string etcd_cluster = "default";
  // The leader's etcd lease: a leader that cannot renew it stops serving
  // within this time, and a standby takes over within about this time.
  uint32_t lease_ttl_s = 5;
  // Security -------------------------------.
  // Base URL of the GitLab instance (e.g. https://gitlab.example.com). When
  // set, every joining member's job token is checked with GET /api/v4/job
  // and only GitLab's answer decides its gang; empty = no verification.
  std::string gitlab_url;
  // With member verification on: the GitLab URL every joining member must
  // name as its instance (its CI_SERVER_URL); empty = gitlab_url. Set it
  // when the coordinator reaches GitLab at another address than jobs see.
  std::string gitlab_instance_url;
  // PEM CA bundle for gitlab_url; empty = the system's CAs.
  std::string gitlab_ca_file;
  // Limit on one GitLab call (bounded so joins never hang on GitLab).
  std::chrono::seconds gitlab_timeout{5};
  // How long a positive GitLab answer for one job token is reused.
  std::chrono::seconds member_cache_ttl{60};
  // How members are verified when gitlab_url is set: "job_api" (each job
  // token is checked with GitLab's API) or "id_token" (each job presents a
  // GitLab CI ID token, a JWT checked against the instance's published
  // keys with no GitLab call per member).
  std::string member_verification = "job_api";
  // With id_token: the audience (`aud`) the jobs' tokens must be issued for.
  std::string id_token_audience;
  // With id_token: where the instance publishes its keys; empty =
  // <gitlab_url>/oauth/discovery/keys.
  std::string jwks_url;
  // With id_token: the least time between two fetches of those keys (a
  // token naming an unknown key id waits for the next one).
  std::chrono::seconds jwks_refresh_interval{30};
  // File holding the operators' admin token; empty = no operator
  // authentication (every RPC open, as in the local demo).
  std::string admin_token_file;
  // With an admin token: who may read status (GetStatus) without it:
  // "loopback" (clients on 127.0.0.1/::1, the default), "anyone", "nobody".
  std::string status_without_token = "loopback";
  // Agents must present a host token (gdt-coord hosts token create) to
  // register, heartbeat and report lost members; agents then run stages only
  // for executors holding the member token the coordinator issued.
  bool require_host_tokens = false;
  // ---------------------------------------------.
  // TLS: the gRPC server's certificate and, with
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
