#include "common/http_server.h"

#include <sys/socket.h>

#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/host_port.h"
#include "httplib.h"

namespace gdt {
namespace {

constexpr std::chrono::seconds kStartTimeout{10};

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const std::string& address, const std::string& setting,
    const std::string& what, std::vector<Route> routes) {
  absl::StatusOr<HostPort> parsed = ParseHostPort(address);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(setting, " ", parsed.status().message()));
  }
  const std::string& host = parsed->host;
  const int port = parsed->port;
  std::unique_ptr<HttpServer> server(new HttpServer());
  server->server_ = std::make_unique<httplib::Server>();
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
  return server;
}

HttpServer::~HttpServer() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

bool IsLoopbackHttpPeer(const std::string& remote_addr) {
  return absl::StartsWith(remote_addr, "127.") || remote_addr == "::1" ||
         absl::StartsWith(remote_addr, "::ffff:127.");
}

}  // namespace gdt
