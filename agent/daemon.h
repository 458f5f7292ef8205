#ifndef GDT_AGENT_DAEMON_H_
#define GDT_AGENT_DAEMON_H_

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/agent_service.h"
#include "agent/config.h"
#include "agent/disk_use.h"
#include "agent/exit_outbox.h"
#include "agent/exit_reporter.h"
#include "agent/registrar.h"
#include "agent/supervisor.h"
#include "common/mutex.h"
#include "common/work_queue.h"
#include "rendezvous/coordinator_client.h"
#include "rendezvous/endpoint_watch.h"

namespace gdt::agent {

// The running gdt-agent: its gRPC server, the stage supervisor and the
// registration with the coordinator, wired from a Config. main() and tests
// drive the same wiring through this class.
//
// Not thread-safe: Start, Shutdown and the destructor from one thread.
class Daemon {
 public:
  // Binds the server, then starts registering with the coordinator in the
  // background (an unreachable coordinator is retried, not an error).
  // Errors: Unavailable when the listen address cannot be bound.
  static absl::StatusOr<std::unique_ptr<Daemon>> Start(const Config& config);

  // Calls Shutdown().
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // host:port as bound: the listen host (host.address for a wildcard) and
  // the port the kernel gave.
  const std::string& bound_endpoint() const { return bound_endpoint_; }
  // host:port the coordinator and executors are told to use.
  const std::string& advertise_endpoint() const { return advertise_endpoint_; }

  // Empty while this agent takes new members; else why not (its own
  // endpoint stopped answering). Heartbeats carry it.
  std::string NotReadyReason() const;

  // Stops registering, terminates every running stage (SIGTERM, grace,
  // SIGKILL), then stops the server. Idempotent.
  void Shutdown();

 private:
  Daemon(const Config& config, const rendezvous::ClientSecurity& security,
         IsolationOptions isolation);

  // Queues the teardown of members the coordinator says have left their
  // gang while they run no stage here: no executor will tear them down
  // (their runner died), so what their jobs left running would otherwise
  // outlive them under an account the next member gets. Called on the
  // registrar's thread.
  void TearDownLeftMembers(const std::vector<std::string>& left);

  // EndpointWatch's recovery: when no stage runs, replaces the gRPC server
  // and its connection gate with new ones on the same address. Errors:
  // FailedPrecondition while stages run; Unavailable when the address cannot
  // be bound again.
  absl::Status RestartServerWhenIdle();

  const Config config_;
  Supervisor supervisor_;
  // Tears down members whose executor went away, and members whose gang
  // let them go (one at a time; each waits for its stage to stop). Emptied
  // in Shutdown(), before supervisor_ goes.
  std::unique_ptr<WorkQueue> lost_teardowns_;
  // Members whose teardown TearDownLeftMembers() queued and that are not
  // done yet, so that later heartbeats do not queue them again.
  Mutex left_mu_;
  std::set<std::string> left_queued_ ABSL_GUARDED_BY(left_mu_);
  AgentService service_;
  rendezvous::CoordinatorClient coordinator_;
  // Exits owed to the coordinator, on disk under the scratch dir.
  ExitOutbox exit_outbox_;
  // After coordinator_ and exit_outbox_, which it uses; stopped after the
  // server.
  std::unique_ptr<ExitReporter> exit_reporter_;
  std::unique_ptr<AgentServer> server_;
  // What RestartServerWhenIdle binds again.
  std::shared_ptr<grpc::ServerCredentials> server_credentials_;
  std::string rebind_address_;
  // Stopped before server_ goes; the registrar reads it.
  std::unique_ptr<rendezvous::EndpointWatch> endpoint_watch_;
  std::unique_ptr<Registrar> registrar_;
  // With member_disk_max: stops members above it. Stopped before
  // supervisor_ shuts down.
  std::unique_ptr<DiskWatch> disk_watch_;
  std::string bound_endpoint_;
  std::string advertise_endpoint_;
  bool shut_down_ = false;
};

// The HostSpec the agent registers, from the config and its endpoint.
v1::HostSpec MakeHostSpec(const HostConfig& host,
                          const std::string& agent_endpoint);

}  // namespace gdt::agent

#endif  // GDT_AGENT_DAEMON_H_
