#ifndef GDT_TESTS_SUPPORT_CLUSTER_H_
#define GDT_TESTS_SUPPORT_CLUSTER_H_

#include <unistd.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/subprocess.h"
#include "nlohmann/json.hpp"
#include "testing/temp_dir.h"
#include "testing/test_certs.h"
#include "testing/wait.h"

namespace gdt::test {

// Paths baked in at build time.
std::string SourceDir();
std::string BinaryPath(const std::string& name);  // gdt-coord, gdt-agent, ...
// Directory holding the torchrun wrapper for Debian's torch 1.13 on
// Python 3.11 (see testing/torchrun-py311/torchrun).
std::string TorchrunFixDir();

std::string ReadFile(const std::string& path);
void WriteFile(const std::string& path, const std::string& content);

// A set of network namespaces that act as hosts on one bridge: host i has
// address 10.200.0.<i+1>/24 on its eth0. Everything runs inside them, so no
// traffic leaves the machine (toolchain-notes: traffic rule). Needs root.
// The destructor kills whatever still runs in the namespaces and deletes
// them.
class NetworkNamespaces {
 public:
  // Errors: FailedPrecondition when not root or `ip` is missing.
  static absl::StatusOr<std::unique_ptr<NetworkNamespaces>> Create(int hosts);
  ~NetworkNamespaces();

  int size() const { return static_cast<int>(hosts_.size()); }
  std::string Address(int host) const;
  // argv prefix that runs a command inside host `host`'s namespace.
  std::vector<std::string> Exec(int host) const;

 private:
  NetworkNamespaces() = default;
  std::string bridge_;
  std::vector<std::string> hosts_;
};

// A long-running gdt process (coordinator or agent) that reports its bound
// endpoint through --port-file. Output goes to `log_path`. The destructor
// stops it (SIGTERM, then SIGKILL).
class Daemon {
 public:
  // Starts argv (with `prefix` before it, e.g. a namespace's Exec()) plus
  // "--port-file <file>", and waits up to `timeout` for the port file.
  static absl::StatusOr<std::unique_ptr<Daemon>> Start(
      const std::vector<std::string>& prefix,
      const std::vector<std::string>& argv,
      const std::map<std::string, std::string>& extra_env,
      const std::string& log_path, std::chrono::milliseconds timeout);
  ~Daemon();

  const std::string& endpoint() const { return endpoint_; }
  const std::string& log_path() const { return log_path_; }
  std::string Log() const { return ReadFile(log_path_); }
  // The process id (of `prefix` when one was given).
  int pid() const { return process_->pid(); }
  // Sends `signal` and waits for the process to exit.
  ExitStatus Stop(int signal);

 private:
  Daemon() = default;
  std::unique_ptr<Subprocess> process_;
  std::string endpoint_;
  std::string log_path_;
};

// Runs a command to completion (stdout+stderr merged) under a deadline.
struct CommandResult {
  ExitStatus status;
  std::string output;
};
CommandResult RunProcess(const std::vector<std::string>& argv,
                         const std::map<std::string, std::string>& extra_env,
                         std::chrono::milliseconds timeout);

// `gdt-coord status --json` against `endpoint`, run with `prefix`.
// `env` adds variables, e.g. GDT_TLS_CA_FILE for a TLS coordinator.
absl::StatusOr<nlohmann::json> CoordinatorStatus(
    const std::string& endpoint, const std::vector<std::string>& prefix = {},
    const std::map<std::string, std::string>& env = {});

// One gdt-agent's host, as its config file declares it.
struct AgentSpec {
  std::string name;
  int host = -1;  // Namespace host index; -1 = the root namespace (loopback).
  int cpu_slots = 1;
  int gpus = 0;
  // Non-empty: the host's GPUs instead of `gpus` plain ones, each with a
  // UUID and a device node (index = position).
  struct Gpu {
    std::string uuid;
    std::string device;
  };
  std::vector<Gpu> gpu_list;
  std::string network_interface;
  // Non-empty: the agent runs in its own UTS namespace with this host name
  // (namespaced hosts otherwise share the machine's; OpenMPI tells nodes
  // apart by host name).
  std::string uts_hostname;
  // Non-empty: the agent's host_token_file.
  std::string host_token_file;
  // Non-empty: the agent's member_uid_pool (user names or UID[:GID]); the
  // cluster's directory then becomes traversable (0711) so that those
  // accounts reach their builds dirs and the project.
  std::vector<std::string> member_uid_pool;
  // YAML lines appended to the agent's config.
  std::string extra_yaml;
  // argv put before the agent's own (inside its namespace), e.g.
  // {"prlimit", "--nofile=256:256", "--"}.
  std::vector<std::string> prefix;
  // Added to the agent's own environment (stages see only what
  // stage_environment_passthrough lets through).
  std::map<std::string, std::string> env;
  // Names added to the agent's stage_environment_passthrough, after those
  // every test agent passes (the torchrun monitor interval, the sanitizers',
  // Python's, CUDA's and NCCL's settings).
  std::vector<std::string> stage_environment_passthrough;
  // With UseTls(): the host name the agent's certificate is issued for;
  // empty = `name` (what an operator does). Attack tests give an agent
  // another host's certificate.
  std::string tls_cert_host;
};

// The first of the 40 ports a test cluster of this process gives its
// coordinator as master_port_range: below the kernel's ephemeral range
// (32768 and up by default), so that no outgoing connection of a test
// running beside it holds one. Each test process running at the same time
// gets a range of its own: the process claims one of 318 slots (tried from
// its process id on) by binding an abstract Unix socket named after it,
// which the kernel releases when the process ends. Two tests that shared a
// range could both lease its first port, and the second rank 0 to bind it
// failed with "address already in use".
int TestMasterPortBase();

// The slots TestMasterPortBase() chooses from, and its claim of one: a
// descriptor that holds slot `slot` until it is closed, or -1 when another
// process holds it.
inline constexpr int kMasterPortSlots = 318;
int ClaimMasterPortSlot(int slot);

// Two accounts for member_uid_pool that exist nowhere else on the machine
// (numeric, without a passwd entry), so that tests running as root can run
// members as unprivileged users without creating any.
inline const std::vector<std::string>& TestMemberAccounts() {
  static const std::vector<std::string> accounts = {"61001:61001",
                                                    "61002:61002"};
  return accounts;
}

// TestMemberAccounts() when this test runs as root (as in CI), so that jobs
// run the way a real installation runs them; none otherwise (the agent
// cannot switch users then).
std::vector<std::string> MemberAccountsIfRoot();

// A whole gdt installation for a test: a coordinator with SQLite state, any
// number of agents, and an executor config, all under one TempDir; either on
// loopback or spread over NetworkNamespaces (the coordinator and the emulated
// runner then live on host `control_host`). Every process is stopped on
// destruction.
class GdtCluster {
 public:
  explicit GdtCluster(const NetworkNamespaces* namespaces = nullptr,
                      int control_host = 0);
  ~GdtCluster();

  // YAML lines appended to the coordinator's config (e.g. the security
  // settings ); call before StartCoordinator().
  void SetCoordinatorExtraConfig(std::string yaml) {
    coordinator_extra_config_ = std::move(yaml);
  }
  // The SQLite state file of StartCoordinator() (default: coord.db in
  // dir()); call before it.
  void SetStatePath(std::string path) { state_path_ = std::move(path); }
  // A command gdt-coord is started through (e.g. {"prlimit",
  // "--nofile=256:4096", "--"}), inside the control host's namespace; call
  // before StartCoordinator() or StartHaCoordinators() (every replica is
  // started through it). It must exec gdt-coord (its pid is the
  // coordinator's).
  void SetCoordinatorLauncher(std::vector<std::string> argv) {
    coordinator_launcher_ = std::move(argv);
  }
  // A launcher for SetCoordinatorLauncher() that runs gdt-coord with
  // `nofile` ("soft:hard") as its descriptor limit, for tests that use its
  // descriptors up on purpose. UBSan findings are not fatal in it: the vptr
  // check needs a free descriptor (a pipe) and, with none, takes every
  // object of a type it meets for the first time for one with an invalid
  // vptr (only the vptr check can go on; cmake/sanitizer_defaults.cc).
  static std::vector<std::string> DescriptorStarvedLauncher(
      const std::string& nofile);
  // YAML lines appended to the executor's config (e.g. kill_grace_seconds).
  void SetExecutorExtraConfig(std::string yaml) {
    executor_extra_config_ = std::move(yaml);
  }
  // Every daemon, the executor and Status() use TLS with mutual
  // authentication from `certs` (call before starting anything). Each agent
  // gets a certificate of its own that names its host (MakeHostCert), as
  // the coordinator requires by default.
  void UseTls(const TestCerts& certs) { tls_ = certs; }

  // Starts gdt-coord; `listen` empty = a kernel-chosen port.
  absl::Status StartCoordinator(const std::string& listen = "");
  // Stops it with `signal` (SIGKILL simulates a crash).
  void StopCoordinator(int signal);
  absl::Status StartAgent(const AgentSpec& spec);

  // HA.
  // Starts `count` gdt-coord replicas with state_store: etcd at
  // `etcd_endpoints` (comma-separated) and the given lease TTL, and waits
  // until one leads. coordinator_endpoint() then lists every replica, so
  // agents, executors and Status() fail over between them. Use instead of
  // StartCoordinator(). With `hosts`, replica i runs on namespace host
  // hosts[i] (else all on the control host).
  absl::Status StartHaCoordinators(int count, const std::string& etcd_endpoints,
                                   int lease_ttl_s,
                                   const std::vector<int>& hosts = {});
  // Replica `index`'s log.
  std::string ReplicaLog(int index) const;
  // The index of the live replica that serves as leader; -1 when none.
  int HaLeader() const;
  // The endpoint of replica `index`.
  std::string ReplicaEndpoint(int index) const;
  // Stops replica `index` with `signal` (SIGKILL simulates a crash) and
  // returns how it ended (at once if it had exited already).
  ExitStatus StopReplica(int index, int signal);

  // Stops every agent with `signal`.
  void StopAgents(int signal);
  // Stops the `index`th agent started (0-based) with `signal`.
  void StopAgent(size_t index, int signal);
  // host:port the `index`th agent started (0-based) listens on.
  std::string AgentEndpoint(size_t index) const {
    return agents_.at(index)->endpoint();
  }
  // The process id of the `index`th agent started (0-based).
  int AgentPid(size_t index) const { return agents_.at(index)->pid(); }
  // Waits until the coordinator lists `count` hosts as up.
  absl::Status WaitForHosts(int count, std::chrono::milliseconds timeout);
  // Starts agents host1..host`count` on namespace hosts 1..`count`, one
  // CPU member slot each, their ranks on eth0 and member accounts when run
  // as root, and waits (20 s at most) until the coordinator lists them up.
  absl::Status StartHostAgents(int count);

  // Runs `gdt-ci run-local` for `job` of `project_dir`/.gitlab-ci.yml on the
  // control host, with `extra` arguments.
  CommandResult RunLocal(const std::string& project_dir, const std::string& job,
                         const std::vector<std::string>& extra,
                         std::chrono::milliseconds timeout);
  // The argv RunLocal() runs, for tests that start it in the background.
  // It sets run-local's TMPDIR (an argument "TMPDIR=<dir>/runner-tmp" of
  // env) to a dir of the cluster's, whatever the caller's environment says.
  std::vector<std::string> RunLocalArgv(
      const std::string& project_dir, const std::string& job,
      const std::vector<std::string>& extra) const;

  absl::StatusOr<nlohmann::json> Status();
  // Reads Status() until `condition` holds for it (true) or `timeout` has
  // passed (false); a status that cannot be read counts as not yet. `last`,
  // where given, gets the last status read, for the failure message.
  template <typename Condition>
  bool WaitForStatus(Condition&& condition, std::chrono::milliseconds timeout,
                     nlohmann::json* last = nullptr) {
    return WaitFor(
        [&] {
          absl::StatusOr<nlohmann::json> status = Status();
          if (!status.ok()) return false;
          if (last != nullptr) *last = *status;
          return static_cast<bool>(condition(*status));
        },
        timeout);
  }
  // The id of a gang the status lists as running, waiting up to `timeout`
  // for one; empty when none ran by then.
  std::string WaitForRunningGang(std::chrono::milliseconds timeout);
  std::string coordinator_endpoint() const;
  // The coordinator's process id (StartCoordinator); 0 when none runs.
  int coordinator_pid() const {
    return coordinator_ != nullptr ? coordinator_->pid() : 0;
  }
  // host:port of the running coordinator's Prometheus /metrics endpoint.
  const std::string& metrics_endpoint() const { return metrics_endpoint_; }
  // host:port of the coordinator's web dashboard.
  const std::string& dashboard_endpoint() const { return dashboard_endpoint_; }
  const TempDir& dir() const { return dir_; }
  std::string run_dir() const { return dir_.Sub("run"); }
  // Every daemon's log, for failure messages.
  std::string Logs() const;

 private:
  std::vector<std::string> Prefix(int host) const;
  // The `tls:` config lines ("" without UseTls()).
  // `certs` replaces the cluster's certificate (an agent's own).
  std::string TlsYaml(bool server, const TestCerts* certs = nullptr) const;
  std::string WriteExecutorConfig() const;

  const NetworkNamespaces* namespaces_;
  int control_host_;
  TempDir dir_;
  std::string coordinator_listen_;
  std::string coordinator_extra_config_;
  std::string state_path_;
  std::vector<std::string> coordinator_launcher_;
  std::string executor_extra_config_;
  std::unique_ptr<Daemon> coordinator_;
  std::string metrics_endpoint_;
  std::string dashboard_endpoint_;
  std::vector<std::unique_ptr<Daemon>> agents_;
  int coordinator_starts_ = 0;
  std::vector<std::unique_ptr<Daemon>> replicas_;  // HA.
  std::vector<std::string> replica_endpoints_;
  std::optional<TestCerts> tls_;
};

}  // namespace gdt::test

#endif  // GDT_TESTS_SUPPORT_CLUSTER_H_
