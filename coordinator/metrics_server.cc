#include "coordinator/metrics_server.h"

#include <sys/socket.h>

#include <chrono>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "common/host_port.h"
#include "httplib.h"

namespace gdt::coordinator {
namespace {

constexpr std::chrono::seconds kStartTimeout{10};

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& address, std::function<std::string()> render) {
  absl::StatusOr<HostPort> parsed = ParseHostPort(address);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics_address ", parsed.status().message()));
  }
  const std::string& host = parsed->host;
  const int port = parsed->port;
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  server->server_ = std::make_unique<httplib::Server>();
  // httplib's default also sets SO_REUSEPORT, which would let a second
  // daemon share the port silently; keep only SO_REUSEADDR.
  server->server_->set_socket_options([](socket_t socket) {
    int yes = 1;
    setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  server->server_->Get(
      "/metrics", [render = std::move(render)](const httplib::Request&,
                                               httplib::Response& response) {
        response.set_content(render(), "text/plain; version=0.0.4");
      });
  const int bound =
      port == 0 ? server->server_->bind_to_any_port(host)
                : (server->server_->bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address, " for metrics"));
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
          absl::StrCat("metrics server on ", address, " did not start"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return server;
}

MetricsServer::~MetricsServer() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace gdt::coordinator
