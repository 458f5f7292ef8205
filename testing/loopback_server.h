#ifndef GDT_TESTING_LOOPBACK_SERVER_H_
#define GDT_TESTING_LOOPBACK_SERVER_H_

// A real gRPC server for tests: serves one service (a fake agent, a fake
// coordinator) on 127.0.0.1 at a port the kernel picks, so tests running in
// parallel never collide.

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

// Serves `service` (which must outlive the server) without TLS.
inline LoopbackServer ServeOnLoopback(grpc::Service* service) {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
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

}  // namespace gdt::test

#endif  // GDT_TESTING_LOOPBACK_SERVER_H_
