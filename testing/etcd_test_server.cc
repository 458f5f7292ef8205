#include "testing/etcd_test_server.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "state/etcd_client.h"

namespace gdt::test {
namespace {

// A port the kernel just handed out on 127.0.0.1 (free when this returns).
absl::StatusOr<int> FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError("socket failed");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    close(fd);
    return absl::InternalError("cannot find a free port");
  }
  close(fd);
  return ntohs(address.sin_port);
}

std::string ReadAll(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdTestServer>> EtcdTestServer::Start(
    int nodes, std::chrono::milliseconds timeout,
    const std::vector<std::string>& extra_args) {
  return StartIn({}, "127.0.0.1", nodes, timeout, extra_args);
}

absl::StatusOr<std::unique_ptr<EtcdTestServer>> EtcdTestServer::StartIn(
    const std::vector<std::string>& prefix, const std::string& address,
    int nodes, std::chrono::milliseconds timeout,
    const std::vector<std::string>& extra_args) {
  if (access("/usr/bin/etcd", X_OK) != 0) {
    return absl::NotFoundError(
        "/usr/bin/etcd is missing: apt-get install etcd-server");
  }
  std::unique_ptr<EtcdTestServer> server(new EtcdTestServer());
  std::string pattern =
      (std::filesystem::temp_directory_path() / "gdt-etcd-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::InternalError("mkdtemp failed");
  }
  server->dir_ = pattern;
  std::vector<std::string> peers;
  for (int i = 0; i < nodes; ++i) {
    // A fresh namespace has every port free; loopback is shared.
    absl::StatusOr<int> client =
        prefix.empty() ? FreePort() : absl::StatusOr<int>(2379 + 2 * i);
    absl::StatusOr<int> peer =
        prefix.empty() ? FreePort() : absl::StatusOr<int>(2380 + 2 * i);
    if (!client.ok()) return client.status();
    if (!peer.ok()) return peer.status();
    peers.push_back(absl::StrCat("n", i, "=http://", address, ":", *peer));
    server->endpoints_.push_back(absl::StrCat(address, ":", *client));
  }
  const std::string cluster = absl::StrJoin(peers, ",");
  for (int i = 0; i < nodes; ++i) {
    const std::string peer_url = peers[i].substr(peers[i].find('=') + 1);
    const std::string client_url =
        absl::StrCat("http://", server->endpoints_[i]);
    SpawnOptions options;
    options.argv = prefix;
    for (const std::string& arg : std::vector<std::string>{
             "/usr/bin/etcd", "--name", absl::StrCat("n", i), "--data-dir",
             absl::StrCat(server->dir_, "/n", i), "--listen-client-urls",
             client_url, "--advertise-client-urls", client_url,
             "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls",
             peer_url, "--initial-cluster", cluster, "--initial-cluster-token",
             "gdt-test", "--initial-cluster-state", "new"}) {
      options.argv.push_back(arg);
    }
    options.argv.insert(options.argv.end(), extra_args.begin(),
                        extra_args.end());
    options.env = CurrentEnvironment();
    options.capture_output = false;
    options.output_path = absl::StrCat(server->dir_, "/n", i, ".log");
    options.die_with_parent = true;
    absl::StatusOr<std::unique_ptr<Subprocess>> process =
        Subprocess::Spawn(options);
    if (!process.ok()) return process.status();
    server->processes_.push_back(std::move(*process));
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    // Every node must answer, not just the first.
    bool all = true;
    for (const std::string& endpoint : server->endpoints_) {
      if (prefix.empty()) {
        absl::StatusOr<std::unique_ptr<state::EtcdClient>> one =
            state::EtcdClient::Create({endpoint}, std::chrono::seconds(1));
        if (!one.ok() || !(*one)->Range("/", false, true).ok()) all = false;
        continue;
      }
      SpawnOptions check;
      check.argv = prefix;
      for (const char* arg :
           {"/usr/bin/etcdctl", "--dial-timeout=1s", "--command-timeout=1s",
            "endpoint", "health", "--endpoints"}) {
        check.argv.push_back(arg);
      }
      check.argv.push_back(endpoint);
      check.env = CurrentEnvironment();
      check.env["ETCDCTL_API"] = "3";
      check.die_with_parent = true;
      absl::StatusOr<std::unique_ptr<Subprocess>> etcdctl =
          Subprocess::Spawn(check);
      if (!etcdctl.ok()) return etcdctl.status();
      if (!(*etcdctl)->Wait().success()) all = false;
    }
    if (all) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("etcd did not come up; its log: ",
                       ReadAll(server->dir_ + "/n0.log").substr(0, 2000)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return server;
}

EtcdTestServer::~EtcdTestServer() {
  Resume();  // A stopped process would not act on SIGTERM.
  for (auto& process : processes_) {
    if (!process->exit_status().has_value() &&
        !process->TryWait().has_value()) {
      process->Terminate(std::chrono::milliseconds(3000));
    }
  }
  processes_.clear();
  std::error_code ignored;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
}

void EtcdTestServer::Pause() {
  for (auto& process : processes_) {
    if (!process->exit_status().has_value()) process->SignalGroup(SIGSTOP);
  }
}

void EtcdTestServer::Resume() {
  for (auto& process : processes_) {
    if (!process->exit_status().has_value()) process->SignalGroup(SIGCONT);
  }
}

void EtcdTestServer::StopNode(int index) {
  Subprocess& process = *processes_.at(index);
  if (!process.TryWait().has_value()) {
    process.Terminate(std::chrono::milliseconds(3000));
  }
}

std::string EtcdTestServer::joined_endpoints() const {
  return absl::StrJoin(endpoints_, ",");
}

}  // namespace gdt::test
