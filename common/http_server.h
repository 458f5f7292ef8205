#ifndef GDT_COMMON_HTTP_SERVER_H_
#define GDT_COMMON_HTTP_SERVER_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
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
  // Limits on clients. A connection is served by one of `threads`; one
  // older than `max_connection_age` is shut down, whatever it is doing, so
  // that clients sending a request a byte at a time cannot hold every
  // thread for long, nor keep the server from stopping.
  struct Limits {
    int threads = 32;
    std::chrono::milliseconds max_connection_age{30'000};
    // How often connections are checked against that age.
    std::chrono::milliseconds check_interval{1'000};
  };

  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const std::string& address, const std::string& setting,
      const std::string& what, std::vector<Route> routes);
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const std::string& address, const std::string& setting,
      const std::string& what, std::vector<Route> routes, const Limits& limits);

  // Stops serving: shuts down the connections still open (a client that
  // never finishes its request would otherwise hold a thread for ever) and
  // joins the threads.
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // host:port actually bound.
  const std::string& bound_address() const { return bound_address_; }

 private:
  HttpServer() = default;

  // Shuts down the accepted connections of this server that are older
  // than `max_age` (all of them for zero); returns how many.
  int ShutDownConnections(std::chrono::milliseconds max_age);

  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::string bound_address_;
  Limits limits_;
  int port_ = 0;
  // When each open connection (by socket inode) was first seen.
  std::map<uint64_t, std::chrono::steady_clock::time_point> first_seen_;
  std::mutex reaper_mutex_;
  std::condition_variable reaper_wake_;
  bool stopping_ = false;  // Guarded by reaper_mutex_.
  std::thread reaper_;
};

// True when an HTTP peer address (as cpp-httplib reports it) is on this
// machine: 127.0.0.0/8, ::1 or an IPv4-mapped 127.x address.
bool IsLoopbackHttpPeer(const std::string& remote_addr);

}  // namespace gdt

#endif  // GDT_COMMON_HTTP_SERVER_H_
