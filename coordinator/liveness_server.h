#ifndef GDT_COORDINATOR_LIVENESS_SERVER_H_
#define GDT_COORDINATOR_LIVENESS_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/coordinator_service.h"
#include "coordinator/metrics.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"

namespace gdt::coordinator {

// Bounds of the liveness server: a heartbeat is a host name and the list
// of members running on that host, so these leave room for thousands of
// members while keeping what one client can make it hold small.
inline constexpr int kLivenessMaxRequestBytes = 256 * 1024;
inline constexpr int kLivenessMaxMetadataBytes = 8 * 1024;
inline constexpr int kLivenessMaxStreamsPerConnection = 8;
inline constexpr size_t kLivenessMemoryQuotaBytes = 32u * 1024 * 1024;
inline constexpr int kLivenessMaxThreads = 8;

// A second gRPC server next to the main one that answers only Heartbeat
// (every other method is UNIMPLEMENTED), with its own listening port, its
// own completion queue and threads (gRPC's synchronous server, not the
// callback threads the main server shares with its streams), its own
// memory quota and small message and metadata limits. Joins, status calls
// and large requests on the main port cannot queue ahead of a heartbeat
// here. The checks and bookkeeping are the main service's
// (CoordinatorService::HandleHeartbeat), so a heartbeat means the same on
// either port. Thread-safe; keeps references to `service` and `metrics`.
class LivenessServer {
 public:
  // Errors: Unavailable "cannot listen on ADDR (liveness_listen_address)"
  // when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<LivenessServer>> Start(
      const std::string& address,
      std::shared_ptr<grpc::ServerCredentials> credentials,
      CoordinatorService& service, CoordinatorMetrics& metrics);

  ~LivenessServer();  // Shuts down.
  LivenessServer(const LivenessServer&) = delete;
  LivenessServer& operator=(const LivenessServer&) = delete;

  // The port actually bound (the kernel's choice for port 0).
  int port() const { return port_; }

  // Stops serving, waiting at most 2 s for heartbeats in flight.
  // Idempotent.
  void Shutdown();

 private:
  class Service;
  LivenessServer() = default;

  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace gdt::coordinator

#endif  // GDT_COORDINATOR_LIVENESS_SERVER_H_
