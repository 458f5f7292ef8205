#ifndef GDT_AGENT_CONFIG_H_
#define GDT_AGENT_CONFIG_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tls_config.h"

namespace gdt::agent {

// One GPU as the host's driver numbers it. Config-declared GPUs may leave
// `uuid` and `model` empty.
struct GpuConfig {
  uint32_t index = 0;
  std::string uuid;
  std::string model;
  uint64_t memory_bytes = 0;
  // Its device node, which a member must open to use it; empty =
  // /dev/nvidia<index> (NVML's minor number for discovered GPUs).
  std::string device;
};

// What the agent tells the coordinator about its host.
struct HostConfig {
  std::string name;                   // Default: gethostname().
  std::string address = "127.0.0.1";  // What peers use (MASTER_ADDR).
  std::vector<GpuConfig> gpus;        // Empty for a CPU-only host.
  std::map<std::string, std::string> labels;
  std::string network_interface;
  uint32_t cpu_slots = 1;  // Members at once on a CPU-only host.
  // Jobs this host's gitlab-runner runs at once (`concurrent`/`limit`);
  // 0 = not declared.
  uint32_t runner_slots = 0;
};

// Settings for gdt-agent. Plain data: defaults live here, parsing lives in
// ParseConfig(), and nothing outside config.cc knows the file is YAML.
struct Config {
  // host:port, required; or several comma-separated (gdt-coord replicas).
  std::string coordinator;
  std::string listen_address = "0.0.0.0:7071";
  // host:port the executor and coordinator use to reach this agent; empty =
  // <host.address>:<bound port>.
  std::string advertise_endpoint;
  // Connections to listen_address open at once from one peer (an IPv4
  // address or an IPv6 /64) and from everyone (ConnectionGate: past three
  // quarters of it a peer gets a fair share); more are closed on accept. Its
  // peers are the coordinator, the runner hosts' executors (one connection per
  // running stage) and gdt-rsh. 0 = no cap.
  uint32_t max_connections_per_peer = 128;
  uint32_t max_connections = 512;
  // Leading bits of an IPv6 address that make one peer for those caps,
  // 32..128. (A peer on this host's loopback is the uid that made its
  // socket.)
  uint32_t peer_ipv6_prefix_length = 64;
  HostConfig host;
  std::string scratch_dir = "/var/lib/gdt/agent";
  std::chrono::seconds kill_grace{10};
  std::string log_level = "info";
  // File holding this host's token (`gdt-coord
  // hosts token create NAME`). When set, the agent presents it to the
  // coordinator and runs stages only for executors holding the member token
  // the coordinator issued for this host; empty = neither.
  std::string host_token_file;
  // The account member stages run as (a user name or UID[:GID]); all
  // members share it. The agent must be root (or hold CAP_SETUID and
  // CAP_SETGID) to switch. Empty, with an empty pool = the agent's own uid.
  std::string member_user;
  // Accounts of which each member gets one no other live member uses, so
  // members cannot read each other's processes or files either (e.g.
  // gdt-slot0..gdt-slot7, which the Debian package creates).
  std::vector<std::string> member_uid_pool;
  // Names of the agent's own environment variables stages also get (an
  // entry ending in '*' is a prefix, e.g. NCCL_*). Stages always get PATH,
  // HOME, USER, LOGNAME, SHELL, LANG, LANGUAGE, LC_*, TZ and TERM from it;
  // nothing else of the agent's environment reaches them.
  std::vector<std::string> stage_environment_passthrough;
  // Directory under which the agent makes one cgroup (v2) per member;
  // empty = a subtree of the agent's own cgroup, "off" = process groups
  // only.
  std::string cgroup_parent;
  // pids.max of each member's cgroup: processes and threads a member may
  // have at once (a fork bomb stops there); 0 = no limit. Needs the pids
  // controller in cgroup v2; without it the agent warns once and sets none.
  uint64_t member_pids_max = 32768;
  // memory.max of each member's cgroup in bytes (memory.swap.max 0 and
  // memory.oom.group 1 with it): beyond it the kernel kills the member's
  // processes (OOM) and its job log says so; 0 = no limit (the default).
  // Needs the memory controller in cgroup v2; without it the agent warns
  // once and sets none.
  uint64_t member_memory_max = 0;
  // What each member may hold on disk, in bytes: its builds and scratch
  // dirs (HOME, TMPDIR) and, with member_uid_pool, what its account owns
  // in /tmp, /dev/shm and /var/tmp. A member above it is stopped (its
  // running stage fails, its cgroup is killed) so that it cannot fill the
  // disk other members write to; 0 = no bound (the default). See DiskWatch.
  uint64_t member_disk_max = 0;
  // Each member's cgroup may open only the device nodes of the GPUs its
  // stages are given (CUDA_VISIBLE_DEVICES, which then names them by UUID);
  // the other GPUs' nodes answer EPERM. Needs cgroups, a kernel that
  // attaches device programs, and a device node and UUID for every GPU;
  // else the agent warns once and confines nothing.
  bool confine_gpu_devices = false;
  // SetupMember accepts builds dirs only under builds_root and extra dirs
  // only under it or cache_root (the executor's settings of the same name).
  std::string builds_root = "/var/lib/gdt/builds";
  std::string cache_root = "/var/lib/gdt/cache";
  // TLS: the agent's server certificate (executors and the
  // coordinator call it) and its client side towards the coordinator.
  // Unset = plaintext with a warning.
  TlsConfig tls;
};

// Parses YAML text. `gpus` is either a count (indices 0..n-1) or a list of
// {index, uuid, model, memory_bytes, device}. Unknown keys are an error so that
// typos are caught. Errors: InvalidArgument naming the key or value that is
// wrong, e.g. "unknown key 'host.gpu'".
absl::StatusOr<Config> ParseConfig(std::string_view yaml_text);

// Reads and parses the file at `path`.
// Errors: NotFound when it cannot be read; those of ParseConfig.
absl::StatusOr<Config> LoadConfig(const std::string& path);

// Checks values that flags may have overridden after parsing.
// Errors: InvalidArgument naming the setting.
absl::Status ValidateConfig(const Config& config);

}  // namespace gdt::agent

#endif  // GDT_AGENT_CONFIG_H_
