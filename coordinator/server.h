#ifndef GDT_COORDINATOR_SERVER_H_
#define GDT_COORDINATOR_SERVER_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "common/connection_gate.h"
#include "coordinator/agent_port_checker.h"
#include "coordinator/checkpoint_service.h"
#include "coordinator/config.h"
#include "coordinator/coordinator.h"
#include "coordinator/coordinator_service.h"
#include "coordinator/liveness_server.h"
#include "coordinator/metrics.h"
#include "coordinator/metrics_server.h"
#include "grpcpp/server.h"
#include "kv/kv_service.h"
#include "rendezvous/endpoint_watch.h"

namespace gdt::coordinator {

// gdt-coord's serving wiring: opens the state, starts the scheduler thread
// and the gRPC server (Coordinator and GangKv services). main() and the
// cross-process tests use it. Thread-safe. Keeps a reference to `clock`.
class CoordinatorServer {
 public:
  // Serves /metrics too when config.metrics_address is set. Applies the
  // security settings (docs/security.md) and logs a warning for each check
  // that is off.
  // Errors: Unavailable "cannot listen on ADDR" when the address (or the
  // metrics address) cannot be bound; InvalidArgument for a malformed
  // metrics address; NotFound/InvalidArgument for an unreadable or empty
  // admin_token_file; Internal/FailedPrecondition/DataLoss when the state
  // cannot be opened or loaded.
  static absl::StatusOr<std::unique_ptr<CoordinatorServer>> Start(
      const Config& config, const Clock& clock);
  // The same with a state store the caller opened (HA: a fenced EtcdStore);
  // config.state_path is not used.
  static absl::StatusOr<std::unique_ptr<CoordinatorServer>> Start(
      const Config& config, const Clock& clock,
      std::unique_ptr<state::StateStore> store);

  ~CoordinatorServer();  // Shuts down.
  CoordinatorServer(const CoordinatorServer&) = delete;
  CoordinatorServer& operator=(const CoordinatorServer&) = delete;

  // host:port actually bound (the port is the kernel's choice for port 0).
  const std::string& bound_address() const { return bound_address_; }
  // The liveness server's port (Heartbeat only); 0 when it is off.
  int liveness_port() const {
    return liveness_server_ ? liveness_server_->port() : 0;
  }
  // host:port of the /metrics endpoint; empty when it is off.
  std::string metrics_address() const {
    return metrics_server_ ? metrics_server_->bound_address() : "";
  }

  // What GetStatus answers, finished gangs included.
  v1::GetStatusResponse Status() const {
    return StatusResponseOf(*coordinator_->SharedSnapshot(true));
  }
  // One page of it, as GetStatus answers (StatusPage).
  absl::StatusOr<v1::GetStatusResponse> StatusPageOf(
      uint32_t page_size, const std::string& page_token) const {
    return StatusPage(*coordinator_->SharedSnapshot(true), page_size,
                      page_token);
  }
  // Who may read status without the admin token: the SHA-256 (hex) of the
  // admin token (empty: none configured) and status_without_token.
  const std::string& admin_token_sha256() const { return admin_token_sha256_; }
  const std::string& status_without_token() const {
    return status_without_token_;
  }

  // The core, for tests that drive it directly.
  Coordinator& coordinator() { return *coordinator_; }

  // Ends open JoinGang streams (clients reconnect) and kv waits, stops
  // serving and the scheduler thread. Idempotent.
  void Shutdown();

  // The liveness endpoint watch's recovery (docs/security.md "Descriptor
  // exhaustion"): gRPC's listener, once accept() failed with EMFILE, never
  // accepts again. Replaces the liveness server with a new one on the same
  // address. Called on the watch's thread. (The main port needs none: its
  // listener, gate_, resumes accepting once descriptors are free.)
  // Errors: FailedPrecondition while fewer than kRestartSpareFiles
  // descriptors are free (the new listener would fail at once, and the old
  // server still serves the connections it has); Unavailable when the
  // address cannot be bound again.
  absl::Status RestartLivenessServer();

  // Descriptors that must be free before a listener is restarted.
  static constexpr int kRestartSpareFiles = 32;
  // FailedPrecondition unless kRestartSpareFiles descriptors are free: a
  // listener restarted without them fails at once, and the old server
  // still serves the connections it has. HaServer's standby uses it too.
  static absl::Status CheckSpareFiles();
  // How long the check of the coordinator's own endpoints waits for an
  // answer.
  static constexpr std::chrono::seconds kEndpointProbeDeadline{3};
  // Starts a watch of a coordinator's own `endpoint` (its main or liveness
  // server, or a standby's) that calls `restart` after repeated failed
  // checks (docs/security.md "Descriptor exhaustion"); `while_unanswered`
  // and `when_answered` end its log lines. HaServer's standby uses it too.
  static std::unique_ptr<rendezvous::EndpointWatch> WatchEndpoint(
      const std::string& endpoint, const std::string& tls_target_name,
      const rendezvous::ClientSecurity& security, std::string while_unanswered,
      std::string when_answered, std::function<absl::Status()> restart);

 private:
  CoordinatorServer() = default;

  // Builds and starts server_ with the services and points gate_ at it.
  absl::Status StartMainServer();

  AgentPortChecker port_checker_;
  std::unique_ptr<MemberVerifier> verifier_;  // Null: members not verified.
  // Null unless member_verification is id_token.
  std::unique_ptr<IdTokenMemberVerifier> id_token_verifier_;
  std::unique_ptr<CoordinatorMetrics> metrics_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<CoordinatorService> service_;
  std::unique_ptr<kv::KvService> kv_service_;
  std::unique_ptr<CheckpointService> checkpoint_service_;
  // The main port's listener: accepts connections, caps them per remote
  // address and in all, and hands the rest to server_.
  std::unique_ptr<ConnectionGate> gate_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<LivenessServer> liveness_server_;
  std::unique_ptr<MetricsServer> metrics_server_;
  // What the restarts need: the server credentials and where to bind again.
  std::shared_ptr<grpc::ServerCredentials> credentials_;
  std::string liveness_address_;
  // The watch on the liveness endpoint; stopped first in Shutdown(),
  // before the server it restarts goes.
  std::unique_ptr<rendezvous::EndpointWatch> liveness_watch_;
  std::string bound_address_;
  std::string admin_token_sha256_;
  std::string status_without_token_;
};

// Writes `content` plus a newline to `path` with WriteFileAtomically (see
// common/file.h for the guarantees and errors).
absl::Status WritePortFile(const std::string& path, const std::string& content);

}  // namespace gdt::coordinator

#endif  // GDT_COORDINATOR_SERVER_H_
