#ifndef GDT_COMMON_HTTP_SERVER_H_
#define GDT_COMMON_HTTP_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace gdt {

// A small read-only HTTP server (cpp-httplib) on a thread of its own: the
// coordinator's /metrics endpoint and its web dashboard. Each route answers
// GET on one exact path; every other path is 404. Handlers run on the
// server's threads and must be thread-safe.
class HttpServer {
 public:
  using Handler =
      std::function<void(const httplib::Request&, httplib::Response&)>;
  struct Route {
    std::string path;
    Handler handler;
  };

  // Binds `address` (host:port; port 0 = any free port) and starts serving.
  // `what` names the endpoint in errors ("metrics", "the dashboard").
  // Errors: InvalidArgument "<setting> 'X' is not host:port: <why>" for an
  // address without a valid port; Unavailable "cannot listen on ADDR for
  // <what>" when it cannot be bound.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const std::string& address, const std::string& setting,
      const std::string& what, std::vector<Route> routes);

  ~HttpServer();  // Stops serving and joins the thread.
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // host:port actually bound.
  const std::string& bound_address() const { return bound_address_; }

 private:
  HttpServer() = default;

  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::string bound_address_;
};

// True when an HTTP peer address (as cpp-httplib reports it) is on this
// machine: 127.0.0.0/8, ::1 or an IPv4-mapped 127.x address.
bool IsLoopbackHttpPeer(const std::string& remote_addr);

}  // namespace gdt

#endif  // GDT_COMMON_HTTP_SERVER_H_
