#ifndef GDT_EXECUTOR_CONFIG_H_
#define GDT_EXECUTOR_CONFIG_H_

#include <chrono>
#include <map>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/tls_config.h"

namespace gdt::executor {

// Settings of gdt-executor, from the runner host's executor.yaml. Plain data:
// defaults live here, parsing lives in ParseConfig(), and nothing outside
// config.cc knows the file is YAML.
struct Config {
  // host:port of gdt-coord, required; or several comma-separated (replicas).
  std::string coordinator;
  std::string builds_root = "/var/lib/gdt/builds";
  std::string cache_root = "/var/lib/gdt/cache";
  std::string arrival_host;  // Empty in the file: this host's name.
  std::chrono::seconds join_timeout{3600};
  std::chrono::seconds rpc_timeout{10};
  // How long a member whose script exited 0 waits for the rest of its gang
  // (the exit barrier) before it gives up as a build failure.
  std::chrono::seconds exit_barrier_timeout{600};
  // How long an exit report is retried while the coordinator cannot be
  // reached. A report still lost after it is not lost for the gang: the
  // restarted coordinator finds the member gone (reconciliation) and fails
  // the gang naming it.
  std::chrono::seconds exit_report_retry{120};
  // Between the SIGTERM a stopped stage's processes get and the SIGKILL
  // that follows (the time a script has to write its checkpoint). 0: the
  // agent's kill_grace_seconds. gitlab-runner SIGKILLs this executor
  // graceful_kill_timeout after its own SIGTERM and stops waiting after five
  // minutes, so this must stay below both (at most 290 s).
  std::chrono::seconds kill_grace{0};
  std::string log_level = "warn";
  // TLS: how the executor reaches the coordinator and the agents
  // (ca_file; cert_file/key_file for mTLS). Unset = plaintext with a
  // warning in the prepare stage's log.
  TlsConfig tls;
};

// The path used when neither --config nor GDT_EXECUTOR_CONFIG is given.
inline constexpr std::string_view kDefaultConfigPath = "/etc/gdt/executor.yaml";

// Parses YAML text. Unknown keys are an error so that typos are caught; an
// empty arrival_host becomes gethostname().
// Errors: InvalidArgument naming the key or the YAML problem.
absl::StatusOr<Config> ParseConfig(std::string_view yaml_text);

// Reads and parses `path`. Errors: NotFound when the file cannot be read,
// otherwise as ParseConfig, each message naming the path.
absl::StatusOr<Config> LoadConfig(const std::string& path);

// The config file to read: `flag_value` when non-empty, else the
// GDT_EXECUTOR_CONFIG variable of the runner's (not the job's) environment,
// else kDefaultConfigPath.
std::string ResolveConfigPath(
    const std::string& flag_value,
    const std::map<std::string, std::string>& environment);

}  // namespace gdt::executor

#endif  // GDT_EXECUTOR_CONFIG_H_
