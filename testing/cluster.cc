#include "testing/cluster.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/cgroup.h"
#include "common/file.h"
#include "common/host_port.h"

namespace gdt::test {
namespace fs = std::filesystem;

int ClaimMasterPortSlot(int slot) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const std::string name = absl::StrCat("gdt-test-master-ports-", slot);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  // sun_path[0] stays '\0': the abstract namespace, no file.
  name.copy(address.sun_path + 1, name.size());
  const auto size =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  if (bind(fd, reinterpret_cast<const sockaddr*>(&address), size) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

int TestMasterPortBase() {
  static const int base = [] {
    const int first = static_cast<int>(getpid() % kMasterPortSlots);
    for (int i = 0; i < kMasterPortSlots; ++i) {
      const int slot = (first + i) % kMasterPortSlots;
      // The descriptor stays open: the claim lasts as long as the process.
      if (ClaimMasterPortSlot(slot) >= 0) return 20000 + slot * 40;
    }
    return 20000 + first * 40;
  }();
  return base;
}

using std::chrono::milliseconds;

std::string SourceDir() { return GDT_SOURCE_DIR; }

std::string BinaryPath(const std::string& name) {
  static const std::map<std::string, std::string> paths = {
      {"gdt-coord", GDT_COORD_BIN},
      {"gdt-agent", GDT_AGENT_BIN},
      {"gdt-executor", GDT_EXECUTOR_BIN},
      {"gdt-ci", GDT_CI_BIN},
  };
  return paths.at(name);
}

std::string TorchrunFixDir() { return SourceDir() + "/testing/torchrun-py311"; }

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

void WriteFile(const std::string& path, const std::string& content) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path, std::ios::trunc);
  out << content;
}

namespace {

bool RunQuiet(const std::vector<std::string>& argv) {
  absl::StatusOr<ExitStatus> status = RunCommand(argv, milliseconds(10000));
  return status.ok() && status->success();
}

}  // namespace

absl::StatusOr<std::unique_ptr<NetworkNamespaces>> NetworkNamespaces::Create(
    int hosts) {
  if (geteuid() != 0) {
    return absl::FailedPreconditionError("network namespaces need root");
  }
  auto set = std::unique_ptr<NetworkNamespaces>(new NetworkNamespaces());
  static int counter = 0;
  const std::string base =
      absl::StrCat("gdt", getpid() % 100000, "x", counter++);
  set->bridge_ = base + "br";
  if (!RunQuiet({"ip", "netns", "add", set->bridge_}) ||
      !RunQuiet(
          {"ip", "-n", set->bridge_, "link", "add", "br0", "type", "bridge"}) ||
      !RunQuiet({"ip", "-n", set->bridge_, "link", "set", "br0", "up"})) {
    return absl::FailedPreconditionError("cannot create the bridge namespace");
  }
  for (int i = 0; i < hosts; ++i) {
    const std::string ns = absl::StrCat(base, "h", i);
    const std::string leg = absl::StrCat("leg", i);
    set->hosts_.push_back(ns);
    const std::string address = absl::StrCat("10.200.0.", i + 1, "/24");
    if (!RunQuiet({"ip", "netns", "add", ns}) ||
        !RunQuiet({"ip", "link", "add", "eth0", "netns", ns, "type", "veth",
                   "peer", "name", leg, "netns", set->bridge_}) ||
        !RunQuiet(
            {"ip", "-n", set->bridge_, "link", "set", leg, "master", "br0"}) ||
        !RunQuiet({"ip", "-n", set->bridge_, "link", "set", leg, "up"}) ||
        !RunQuiet({"ip", "-n", ns, "addr", "add", address, "dev", "eth0"}) ||
        !RunQuiet({"ip", "-n", ns, "link", "set", "eth0", "up"}) ||
        !RunQuiet({"ip", "-n", ns, "link", "set", "lo", "up"})) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot set up namespace ", ns));
    }
  }
  return set;
}

NetworkNamespaces::~NetworkNamespaces() {
  for (const std::string& ns : hosts_) {
    std::string pids;
    (void)RunCommand({"ip", "netns", "pids", ns}, milliseconds(5000), &pids);
    std::istringstream in(pids);
    for (int pid; in >> pid;) kill(pid, SIGKILL);
    RunQuiet({"ip", "netns", "del", ns});
  }
  RunQuiet({"ip", "netns", "del", bridge_});
}

std::string NetworkNamespaces::Address(int host) const {
  return absl::StrCat("10.200.0.", host + 1);
}

std::vector<std::string> NetworkNamespaces::Exec(int host) const {
  return {"ip", "netns", "exec", hosts_.at(host)};
}

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Start(
    const std::vector<std::string>& prefix,
    const std::vector<std::string>& argv,
    const std::map<std::string, std::string>& extra_env,
    const std::string& log_path, milliseconds timeout) {
  auto daemon = std::unique_ptr<Daemon>(new Daemon());
  daemon->log_path_ = log_path;
  const std::string port_file = log_path + ".port";
  std::error_code ignored;
  fs::remove(port_file, ignored);

  SpawnOptions options;
  options.argv = prefix;
  options.argv.insert(options.argv.end(), argv.begin(), argv.end());
  options.argv.push_back("--port-file");
  options.argv.push_back(port_file);
  options.env = CurrentEnvironment();
  for (const auto& [key, value] : extra_env) options.env[key] = value;
  options.capture_output = false;
  options.output_path = log_path;
  options.die_with_parent = true;
  absl::StatusOr<std::unique_ptr<Subprocess>> process =
      Subprocess::Spawn(options);
  if (!process.ok()) return process.status();
  daemon->process_ = std::move(*process);

  const bool ready = WaitFor(
      [&] {
        return fs::exists(port_file) || daemon->process_->TryWait().has_value();
      },
      timeout);
  if (!ready || !fs::exists(port_file)) {
    return absl::UnavailableError(absl::StrCat(
        argv.at(0), " did not report its port; log:\n", ReadFile(log_path)));
  }
  daemon->endpoint_ = ReadFile(port_file);
  while (!daemon->endpoint_.empty() &&
         isspace(static_cast<unsigned char>(daemon->endpoint_.back()))) {
    daemon->endpoint_.pop_back();
  }
  return daemon;
}

Daemon::~Daemon() {
  if (process_ != nullptr && !process_->exit_status().has_value()) {
    process_->Terminate(milliseconds(5000));
  }
}

ExitStatus Daemon::Stop(int signal) {
  if (process_->exit_status().has_value()) return *process_->exit_status();
  process_->SignalGroup(signal);
  std::optional<ExitStatus> status = process_->WaitUntil(
      std::chrono::steady_clock::now() + milliseconds(15000));
  if (!status.has_value()) return process_->Terminate(milliseconds(100));
  return *status;
}

CommandResult RunProcess(const std::vector<std::string>& argv,
                         const std::map<std::string, std::string>& extra_env,
                         milliseconds timeout) {
  CommandResult result;
  SpawnOptions options;
  options.argv = argv;
  options.env = CurrentEnvironment();
  for (const auto& [key, value] : extra_env) options.env[key] = value;
  options.die_with_parent = true;
  absl::StatusOr<std::unique_ptr<Subprocess>> process =
      Subprocess::Spawn(options);
  if (!process.ok()) {
    result.status.exit_code = 127;
    result.output = process.status().ToString();
    return result;
  }
  auto collect = [&](OutputSource, std::string_view data) {
    result.output.append(data);
  };
  std::optional<ExitStatus> status = (*process)->WaitUntil(
      std::chrono::steady_clock::now() + timeout, collect);
  if (!status.has_value()) {
    result.output +=
        absl::StrCat("\n[test: killed after ", timeout.count(), " ms]\n");
    status = (*process)->Terminate(milliseconds(3000), collect);
  }
  result.status = *status;
  return result;
}

absl::StatusOr<nlohmann::json> CoordinatorStatus(
    const std::string& endpoint, const std::vector<std::string>& prefix,
    const std::map<std::string, std::string>& env) {
  std::vector<std::string> argv = prefix;
  for (const std::string& arg : {BinaryPath("gdt-coord"), std::string("status"),
                                 std::string("--coordinator"), endpoint,
                                 std::string("--json"), std::string("--all")}) {
    argv.push_back(arg);
  }
  CommandResult result = RunProcess(argv, env, milliseconds(20000));
  if (!result.status.success()) {
    return absl::UnavailableError(
        absl::StrCat("gdt-coord status failed: ", result.output));
  }
  nlohmann::json parsed = nlohmann::json::parse(result.output, nullptr, false);
  if (parsed.is_discarded()) {
    return absl::InternalError(absl::StrCat(
        "gdt-coord status --json printed no JSON: ", result.output));
  }
  return parsed;
}

GdtCluster::GdtCluster(const NetworkNamespaces* namespaces, int control_host)
    : namespaces_(namespaces), control_host_(control_host) {}

namespace {

// Undoes EscapePathComponent's %XX (the agent names its cgroup tree after
// its escaped scratch dir).
std::string Unescape(const std::string& text) {
  std::string plain;
  for (size_t i = 0; i < text.size(); ++i) {
    int byte = 0;
    if (text[i] == '%' && i + 2 < text.size() &&
        absl::SimpleHexAtoi(text.substr(i + 1, 2), &byte)) {
      plain.push_back(static_cast<char>(byte));
      i += 2;
    } else {
      plain.push_back(text[i]);
    }
  }
  return plain;
}

}  // namespace

GdtCluster::~GdtCluster() {
  agents_.clear();
  coordinator_.reset();
  // An agent a test killed (SIGKILL) leaves its member cgroups behind, as a
  // crashed agent would for its successor: remove those of this cluster.
  absl::StatusOr<std::string> own = OwnCgroupDir();
  if (!own.ok()) return;
  const std::string trees = *own + "/gdt";
  std::error_code error;
  for (const std::filesystem::directory_entry& entry :
       std::filesystem::directory_iterator(trees, error)) {
    const std::string scratch = Unescape(entry.path().filename().string());
    if (!absl::StartsWith(scratch, dir_.path() + "/")) continue;
    absl::StatusOr<std::unique_ptr<CgroupTree>> tree =
        CgroupTree::Open(entry.path().string());
    if (!tree.ok()) continue;
    for (const std::string& name : (*tree)->Children()) {
      (void)(*tree)->Destroy(
          name, std::chrono::steady_clock::now() + std::chrono::seconds(10));
    }
    (*tree)->RemoveParent();
  }
  rmdir(trees.c_str());
}

std::vector<std::string> GdtCluster::Prefix(int host) const {
  if (namespaces_ == nullptr || host < 0) return {};
  return namespaces_->Exec(host);
}

std::string GdtCluster::coordinator_endpoint() const {
  if (!replica_endpoints_.empty())
    return absl::StrJoin(replica_endpoints_, ",");
  return coordinator_ != nullptr ? coordinator_->endpoint()
                                 : coordinator_listen_;
}

// HA.

absl::Status GdtCluster::StartHaCoordinators(int count,
                                             const std::string& etcd_endpoints,
                                             int lease_ttl_s,
                                             const std::vector<int>& hosts) {
  const int first_port = TestMasterPortBase();
  for (int i = 0; i < count; ++i) {
    const int host =
        i < static_cast<int>(hosts.size()) ? hosts[i] : control_host_;
    const std::string address =
        namespaces_ != nullptr ? namespaces_->Address(host) : "127.0.0.1";
    const std::string config = dir_.Sub(absl::StrCat("coord-ha-", i, ".yaml"));
    WriteFile(config,
              absl::StrCat("listen_address: ", address, ":0\n",
                           "state_store: etcd\netcd_endpoints: \"",
                           etcd_endpoints, "\"\nlease_ttl_s: ", lease_ttl_s,
                           "\nheartbeat_interval_seconds: 1\n",
                           "host_down_after_seconds: 5\n",
                           "master_port_range: {min: ", first_port, ", max: ",
                           first_port + 39, "}\n", TlsYaml(/*server=*/true)));
    const std::string log = dir_.Sub(absl::StrCat("coord-replica-", i, ".log"));
    std::vector<std::string> prefix = Prefix(host);
    prefix.insert(prefix.end(), coordinator_launcher_.begin(),
                  coordinator_launcher_.end());
    absl::StatusOr<std::unique_ptr<Daemon>> daemon = Daemon::Start(
        prefix, {BinaryPath("gdt-coord"), "serve", "--config", config}, {}, log,
        milliseconds(20000));
    if (!daemon.ok()) return daemon.status();
    replica_endpoints_.push_back((*daemon)->endpoint());
    replicas_.push_back(std::move(*daemon));
  }
  if (!WaitFor([&] { return HaLeader() >= 0; }, milliseconds(20000))) {
    return absl::DeadlineExceededError("no gdt-coord replica became leader");
  }
  return absl::OkStatus();
}

std::string GdtCluster::ReplicaLog(int index) const {
  return ReadFile(dir_.Sub(absl::StrCat("coord-replica-", index, ".log")));
}

int GdtCluster::HaLeader() const {
  for (size_t i = 0; i < replicas_.size(); ++i) {
    if (replicas_[i] != nullptr &&
        replicas_[i]->Log().find("event=serving_as_leader") !=
            std::string::npos) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

std::string GdtCluster::ReplicaEndpoint(int index) const {
  return replica_endpoints_.at(index);
}

ExitStatus GdtCluster::StopReplica(int index, int signal) {
  if (replicas_.at(index) == nullptr) return ExitStatus{};
  ExitStatus status = replicas_[index]->Stop(signal);
  replicas_[index].reset();
  return status;
}

absl::Status GdtCluster::StartCoordinator(const std::string& listen) {
  if (coordinator_listen_.empty()) {
    coordinator_listen_ = !listen.empty() ? listen
                          : namespaces_ != nullptr
                              ? namespaces_->Address(control_host_) + ":0"
                              : "127.0.0.1:0";
  }
  const std::string config = dir_.Sub("coord.yaml");
  // Tests running in parallel share this machine's ports but not a
  // coordinator, so each test process leases master ports from its own range.
  const int first_port = TestMasterPortBase();
  const std::string listen_host =
      ParseHostPort(coordinator_listen_).value().host;
  WriteFile(
      config,
      absl::StrCat(
          "listen_address: ", coordinator_listen_, "\nstate_path: ",
          state_path_.empty() ? dir_.Sub("coord.db") : state_path_,
          "\nheartbeat_interval_seconds: 1\n", "host_down_after_seconds: 5\n",
          "metrics_address: ", JoinHostPort(listen_host, 0), "\n",
          "dashboard_address: ", JoinHostPort(listen_host, 0), "\n",
          "master_port_range: {min: ", first_port, ", max: ", first_port + 39,
          "}\n", coordinator_extra_config_, TlsYaml(/*server=*/true)));
  const std::string log =
      dir_.Sub(absl::StrCat("coord-", coordinator_starts_++, ".log"));
  std::vector<std::string> prefix = Prefix(control_host_);
  prefix.insert(prefix.end(), coordinator_launcher_.begin(),
                coordinator_launcher_.end());
  absl::StatusOr<std::unique_ptr<Daemon>> daemon =
      Daemon::Start(prefix,
                    {BinaryPath("gdt-coord"), "serve", "--config", config,
                     "--metrics-port-file", log + ".metrics",
                     "--dashboard-port-file", log + ".dashboard"},
                    {}, log, milliseconds(20000));
  if (!daemon.ok()) return daemon.status();
  coordinator_ = std::move(*daemon);
  // gdt-coord writes the metrics and dashboard port files before the port
  // file.
  metrics_endpoint_ =
      std::string(absl::StripAsciiWhitespace(ReadFile(log + ".metrics")));
  dashboard_endpoint_ =
      std::string(absl::StripAsciiWhitespace(ReadFile(log + ".dashboard")));
  // A restart must come back on the same address: pin the port it got.
  coordinator_listen_ = coordinator_->endpoint();
  return absl::OkStatus();
}

void GdtCluster::StopCoordinator(int signal) {
  if (coordinator_ != nullptr) coordinator_->Stop(signal);
  coordinator_.reset();
}

std::vector<std::string> MemberAccountsIfRoot() {
  if (geteuid() != 0) return {};
  return TestMemberAccounts();
}

absl::Status GdtCluster::StartAgent(const AgentSpec& spec) {
  const std::string address = spec.host >= 0 && namespaces_ != nullptr
                                  ? namespaces_->Address(spec.host)
                                  : "127.0.0.1";
  const std::string config = dir_.Sub("agent-" + spec.name + ".yaml");
  std::string yaml = absl::StrCat(
      "coordinator: ", coordinator_endpoint(), "\nlisten_address: ", address,
      ":0\nscratch_dir: ", dir_.Sub("agent-" + spec.name),
      "\nkill_grace_seconds: 5\nhost:\n  name: ", spec.name,
      "\n  address: ", address, "\n  cpu_slots: ", spec.cpu_slots, "\n");
  if (spec.gpu_list.empty()) {
    absl::StrAppend(&yaml, "  gpus: ", spec.gpus, "\n");
  } else {
    absl::StrAppend(&yaml, "  gpus:\n");
    for (size_t i = 0; i < spec.gpu_list.size(); ++i) {
      absl::StrAppend(&yaml, "    - {index: ", i,
                      ", uuid: ", spec.gpu_list[i].uuid,
                      ", device: ", spec.gpu_list[i].device, "}\n");
    }
  }
  if (!spec.network_interface.empty()) {
    absl::StrAppend(&yaml, "  network_interface: ", spec.network_interface,
                    "\n");
  }
  if (!spec.host_token_file.empty()) {
    absl::StrAppend(&yaml, "host_token_file: ", spec.host_token_file, "\n");
  }
  // The executor's roots: the agent creates builds dirs only under them.
  absl::StrAppend(&yaml, "builds_root: ", dir_.Sub("builds"),
                  "\ncache_root: ", dir_.Sub("cache"), "\n");
  if (!spec.member_uid_pool.empty()) {
    absl::StrAppend(&yaml, "member_uid_pool: [",
                    absl::StrJoin(spec.member_uid_pool, ", "), "]\n");
    chmod(dir_.path().c_str(), 0711);
  }
  std::optional<TestCerts> agent_certs;
  if (tls_.has_value()) {
    // One certificate per host name, issued once and shared by every agent
    // that presents it.
    const std::string cert_host =
        spec.tls_cert_host.empty() ? spec.name : spec.tls_cert_host;
    const std::string cert_dir = dir_.Sub("agent-certs");
    fs::create_directories(cert_dir);
    TestCerts reused = *tls_;
    reused.cert_file = cert_dir + "/host-" + cert_host + ".pem";
    reused.key_file = cert_dir + "/host-" + cert_host + ".key";
    if (fs::exists(reused.cert_file)) {
      agent_certs = reused;
    } else {
      absl::StatusOr<TestCerts> issued =
          MakeHostCert(*tls_, cert_dir, cert_host, {address});
      if (!issued.ok()) return issued.status();
      agent_certs = *issued;
    }
  }
  // What the test process sets for jobs through the agent's environment,
  // as an operator of a GPU host would pass on its CUDA and NCCL settings.
  std::vector<std::string> passthrough = {"PET_MONITOR_INTERVAL",
                                          "ASAN_OPTIONS",
                                          "UBSAN_OPTIONS",
                                          "LSAN_OPTIONS",
                                          "PYTHON*",
                                          "LD_LIBRARY_PATH",
                                          "CUDA_*",
                                          "NCCL_*",
                                          "NVIDIA_*"};
  passthrough.insert(passthrough.end(),
                     spec.stage_environment_passthrough.begin(),
                     spec.stage_environment_passthrough.end());
  absl::StrAppend(&yaml, "stage_environment_passthrough: [\"",
                  absl::StrJoin(passthrough, "\", \""), "\"]\n");
  absl::StrAppend(&yaml, spec.extra_yaml,
                  TlsYaml(/*server=*/true,
                          agent_certs.has_value() ? &*agent_certs : nullptr));
  WriteFile(config, yaml);
  // Only the agent (and the operator) may read its configuration.
  chmod(config.c_str(), 0600);
  // Job scripts call a bare `torchrun`; the wrapper works around Debian's
  // torch 1.13 on Python 3.11 (see testing/torchrun-py311/torchrun).
  const char* path = getenv("PATH");
  std::vector<std::string> prefix = Prefix(spec.host);
  if (!spec.uts_hostname.empty()) {
    for (const char* arg : {"unshare", "--uts", "/bin/sh", "-c",
                            "hostname \"$0\" && exec \"$@\""}) {
      prefix.push_back(arg);
    }
    prefix.push_back(spec.uts_hostname);
  }
  prefix.insert(prefix.end(), spec.prefix.begin(), spec.prefix.end());
  std::map<std::string, std::string> env = spec.env;
  env["PATH"] =
      TorchrunFixDir() + ":" + (path != nullptr ? path : "/usr/bin:/bin");
  env["PET_MONITOR_INTERVAL"] = "0.5";
  absl::StatusOr<std::unique_ptr<Daemon>> daemon = Daemon::Start(
      prefix, {BinaryPath("gdt-agent"), "--config", config}, env,
      dir_.Sub("agent-" + spec.name + ".log"), milliseconds(20000));
  if (!daemon.ok()) return daemon.status();
  agents_.push_back(std::move(*daemon));
  return absl::OkStatus();
}

void GdtCluster::StopAgents(int signal) {
  for (auto& agent : agents_) agent->Stop(signal);
}

void GdtCluster::StopAgent(size_t index, int signal) {
  agents_.at(index)->Stop(signal);
}

absl::Status GdtCluster::StartHostAgents(int count) {
  for (int i = 1; i <= count; ++i) {
    // In a namespace gloo must use eth0, or it advertises 127.0.0.1.
    absl::Status started =
        StartAgent({.name = absl::StrCat("host", i),
                    .host = i,
                    .cpu_slots = 1,
                    .network_interface = "eth0",
                    .member_uid_pool = MemberAccountsIfRoot()});
    if (!started.ok()) return started;
  }
  return WaitForHosts(count, std::chrono::seconds(20));
}

absl::Status GdtCluster::WaitForHosts(int count, milliseconds timeout) {
  std::string last;
  const bool ok = WaitFor(
      [&] {
        absl::StatusOr<nlohmann::json> status = Status();
        if (!status.ok()) {
          last = status.status().ToString();
          return false;
        }
        last = status->dump();
        int up = 0;
        for (const auto& host : (*status)["hosts"]) {
          if (host.value("state", "") == "up") ++up;
        }
        return up >= count;
      },
      timeout);
  if (ok) return absl::OkStatus();
  return absl::DeadlineExceededError(absl::StrCat(
      "fewer than ", count, " hosts came up; last status: ", last));
}

std::string GdtCluster::WriteExecutorConfig() const {
  const std::string config = dir_.Sub("executor.yaml");
  // Replaced whole: executors of a run-local started earlier read it at
  // every stage, and must never see it half written.
  const absl::Status written = WriteFileAtomically(
      config,
      absl::StrCat("coordinator: ", coordinator_endpoint(), "\nbuilds_root: ",
                   dir_.Sub("builds"), "\ncache_root: ", dir_.Sub("cache"),
                   "\narrival_host: runner\njoin_timeout_seconds: 120\n",
                   "log_level: info\n", executor_extra_config_,
                   TlsYaml(/*server=*/false)));
  if (!written.ok()) std::cerr << written << "\n";
  return config;
}

CommandResult GdtCluster::RunLocal(const std::string& project_dir,
                                   const std::string& job,
                                   const std::vector<std::string>& extra,
                                   milliseconds timeout) {
  return RunProcess(RunLocalArgv(project_dir, job, extra), {}, timeout);
}

std::vector<std::string> GdtCluster::RunLocalArgv(
    const std::string& project_dir, const std::string& job,
    const std::vector<std::string>& extra) const {
  std::vector<std::string> argv = Prefix(control_host_);
  // The custom-executor temporary dirs go under the cluster's dir, not
  // /tmp: a run-local the test kills outright (SIGKILL) leaves its dir
  // behind as gitlab-runner does, and the cluster's TempDir takes it.
  const std::string runner_tmp = dir_.Sub("runner-tmp");
  std::error_code ignored;
  fs::create_directories(runner_tmp, ignored);
  argv.push_back("/usr/bin/env");
  argv.push_back("TMPDIR=" + runner_tmp);
  for (const std::string& arg :
       {BinaryPath("gdt-ci"), std::string("run-local"), std::string("--file"),
        project_dir + "/.gitlab-ci.yml", std::string("--job"), job,
        std::string("--executor"), BinaryPath("gdt-executor"),
        std::string("--executor-config"), WriteExecutorConfig(),
        std::string("--project-dir"), project_dir, std::string("--work-dir"),
        run_dir(),
        // The tests retry a gang themselves (new job ids) where they mean
        // to, not by the `retry:` that expand adds to every gang job.
        std::string("--no-retry")}) {
    argv.push_back(arg);
  }
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

absl::StatusOr<nlohmann::json> GdtCluster::Status() {
  std::map<std::string, std::string> env;
  if (tls_.has_value()) {
    env = {{"GDT_TLS_CA_FILE", tls_->ca_file},
           {"GDT_TLS_CERT_FILE", tls_->cert_file},
           {"GDT_TLS_KEY_FILE", tls_->key_file}};
  }
  return CoordinatorStatus(coordinator_endpoint(), Prefix(control_host_), env);
}

std::vector<std::string> GdtCluster::DescriptorStarvedLauncher(
    const std::string& nofile) {
  const char* ubsan = getenv("UBSAN_OPTIONS");
  return {"env",
          absl::StrCat("UBSAN_OPTIONS=", ubsan != nullptr ? ubsan : "",
                       ubsan != nullptr && *ubsan != '\0' ? ":" : "",
                       "halt_on_error=0"),
          "prlimit", "--nofile=" + nofile, "--"};
}

std::string GdtCluster::WaitForRunningGang(std::chrono::milliseconds timeout) {
  std::string id;
  WaitForStatus(
      [&](const nlohmann::json& status) {
        for (const auto& gang : status["gangs"]) {
          if (gang.value("state", "") == "running") {
            id = gang.value("gang_id", "");
            return true;
          }
        }
        return false;
      },
      timeout);
  return id;
}

std::string GdtCluster::TlsYaml(bool server, const TestCerts* certs) const {
  // Daemons in network namespaces listen on non-loopback addresses, which
  // they refuse in plaintext unless told so.
  if (!tls_.has_value()) return server ? "tls: off\n" : "";
  if (certs == nullptr) certs = &*tls_;
  return absl::StrCat("tls:\n  ca_file: ", certs->ca_file,
                      "\n  cert_file: ", certs->cert_file,
                      "\n  key_file: ", certs->key_file, "\n",
                      server ? "  require_client_cert: true\n" : "");
}

std::string GdtCluster::Logs() const {
  std::string logs;
  std::error_code ignored;
  for (const auto& entry : fs::directory_iterator(dir_.path(), ignored)) {
    if (entry.path().extension() == ".log") {
      absl::StrAppend(&logs, "==== ", entry.path().filename().string(), "\n",
                      ReadFile(entry.path().string()));
    }
  }
  return logs;
}

}  // namespace gdt::test
