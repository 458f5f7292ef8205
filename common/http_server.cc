#include "common/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/host_port.h"
#include "httplib.h"

namespace gdt {
namespace {

constexpr std::chrono::seconds kStartTimeout{10};

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const std::string& address, const std::string& setting,
    const std::string& what, std::vector<Route> routes) {
  return Start(address, setting, what, std::move(routes), Limits());
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const std::string& address, const std::string& setting,
    const std::string& what, std::vector<Route> routes, const Limits& limits) {
  absl::StatusOr<HostPort> parsed = ParseHostPort(address);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(setting, " ", parsed.status().message()));
  }
  const std::string& host = parsed->host;
  const int port = parsed->port;
  std::unique_ptr<HttpServer> server(new HttpServer());
  server->server_ = std::make_unique<httplib::Server>();
  server->limits_ = limits;
  const int threads = std::max(1, limits.threads);
  server->server_->new_task_queue = [threads] {
    return new httplib::ThreadPool(static_cast<size_t>(threads));
  };
  // httplib's default also sets SO_REUSEPORT, which would let a second
  // daemon share the port silently; keep only SO_REUSEADDR.
  server->server_->set_socket_options([](socket_t socket) {
    int yes = 1;
    setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  for (Route& route : routes) {
    server->server_->Get(route.path, std::move(route.handler));
  }
  const int bound =
      port == 0 ? server->server_->bind_to_any_port(host)
                : (server->server_->bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address, " for ", what));
  }
  server->bound_address_ = JoinHostPort(host, bound);
  server->port_ = bound;
  httplib::Server* raw = server->server_.get();
  server->thread_ = std::thread([raw] { raw->listen_after_bind(); });
  // stop() is a no-op until the listen loop runs, so the destructor could
  // otherwise miss it and wait forever: return only once it runs.
  const auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
  while (!raw->is_running()) {
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::UnavailableError(
          absl::StrCat(what, " server on ", address, " did not start"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  HttpServer* self = server.get();
  server->reaper_ = std::thread([self] {
    std::unique_lock<std::mutex> lock(self->reaper_mutex_);
    while (!self->reaper_wake_.wait_for(lock, self->limits_.check_interval,
                                        [self] { return self->stopping_; })) {
      lock.unlock();
      self->ShutDownConnections(self->limits_.max_connection_age);
      lock.lock();
    }
  });
  return server;
}

int HttpServer::ShutDownConnections(std::chrono::milliseconds max_age) {
  const auto now = std::chrono::steady_clock::now();
  std::map<uint64_t, std::chrono::steady_clock::time_point> seen;
  int shut = 0;
  std::error_code error;
  for (const auto& entry :
       std::filesystem::directory_iterator("/proc/self/fd", error)) {
    std::error_code link_error;
    const std::string target =
        std::filesystem::read_symlink(entry.path(), link_error).string();
    uint64_t inode = 0;
    if (link_error || !absl::StartsWith(target, "socket:[") ||
        !absl::SimpleAtoi(
            absl::StripSuffix(absl::StripPrefix(target, "socket:["), "]"),
            &inode)) {
      continue;
    }
    int fd = -1;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &fd)) continue;
    // An accepted connection of this server: its local port is ours and
    // it has a peer (the listening socket has none).
    sockaddr_storage local{};
    sockaddr_storage peer{};
    socklen_t local_size = sizeof(local);
    socklen_t peer_size = sizeof(peer);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_size) !=
            0 ||
        getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_size) != 0) {
      continue;
    }
    int port = -1;
    if (local.ss_family == AF_INET) {
      port = ntohs(reinterpret_cast<sockaddr_in*>(&local)->sin_port);
    } else if (local.ss_family == AF_INET6) {
      port = ntohs(reinterpret_cast<sockaddr_in6*>(&local)->sin6_port);
    }
    if (port != port_) continue;
    const auto known = first_seen_.find(inode);
    const auto since = known == first_seen_.end() ? now : known->second;
    if (now - since >= max_age) {
      ::shutdown(fd, SHUT_RDWR);
      ++shut;
    }
    seen[inode] = since;
  }
  first_seen_ = std::move(seen);
  return shut;
}

HttpServer::~HttpServer() {
  {
    std::lock_guard<std::mutex> lock(reaper_mutex_);
    stopping_ = true;
  }
  reaper_wake_.notify_all();
  if (reaper_.joinable()) reaper_.join();
  // stop() closes the listening socket; the listen thread then waits for
  // the connection threads, which a client that never finishes its request
  // would hold: shut those connections down until it is done.
  server_->stop();
  std::atomic<bool> done{false};
  std::thread joiner([this, &done] {
    if (thread_.joinable()) thread_.join();
    done = true;
  });
  while (!done) {
    ShutDownConnections(std::chrono::milliseconds(0));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  joiner.join();
}

bool IsLoopbackHttpPeer(const std::string& remote_addr) {
  return absl::StartsWith(remote_addr, "127.") || remote_addr == "::1" ||
         absl::StartsWith(remote_addr, "::ffff:127.");
}

}  // namespace gdt
