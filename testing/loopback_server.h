#ifndef GDT_TESTING_LOOPBACK_SERVER_H_
#define GDT_TESTING_LOOPBACK_SERVER_H_

// A real gRPC server for tests: serves one service (a fake agent, a fake
// coordinator) on 127.0.0.1 at a port the kernel picks, so tests running in
// parallel never collide.

#include <chrono>
#include <memory>
#include <string>

#include "grpcpp/grpcpp.h"

namespace gdt::test {

struct LoopbackServer {
  // nullptr when the server could not start.
  std::unique_ptr<grpc::Server> server;
  // "127.0.0.1:<port>", for a client's channel.
  std::string address;
};

// Serves `service` (which must outlive the server) without TLS on
// `address`: a loopback port the kernel picks by default, or a given one
// (a test that stops a server and starts another where clients expect it).
inline LoopbackServer ServeOnLoopback(
    grpc::Service* service, const std::string& address = "127.0.0.1:0") {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(service);
  LoopbackServer result;
  result.server = builder.BuildAndStart();
  if (result.server == nullptr || port == 0) {
    result.server.reset();
    return result;
  }
  result.address = "127.0.0.1:" + std::to_string(port);
  return result;
}

// A fake's own server: Serve() starts serving the fake, Stop() (and the
// destructor) ends it. A fake calls Stop() in its destructor, so no call
// runs while its state is destroyed.
class LoopbackServing {
 public:
  LoopbackServing() = default;
  LoopbackServing(const LoopbackServing&) = delete;
  LoopbackServing& operator=(const LoopbackServing&) = delete;
  ~LoopbackServing() { Stop(); }

  // Serves `service` on `address` (see ServeOnLoopback); returns
  // "127.0.0.1:<port>", or "" when it could not start.
  std::string Serve(grpc::Service* service,
                    const std::string& address = "127.0.0.1:0") {
    Stop();
    LoopbackServer started = ServeOnLoopback(service, address);
    server_ = std::move(started.server);
    return started.address;
  }

  // Ends calls still open after a second. Idempotent.
  void Stop() {
    if (server_ == nullptr) return;
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::seconds(1));
    server_->Wait();
    server_.reset();
  }

 private:
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace gdt::test

#endif  // GDT_TESTING_LOOPBACK_SERVER_H_
