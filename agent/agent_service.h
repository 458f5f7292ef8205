#ifndef GDT_AGENT_AGENT_SERVICE_H_
#define GDT_AGENT_AGENT_SERVICE_H_

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "agent/exit_outbox.h"
#include "agent/member_token_cache.h"
#include "agent/supervisor.h"
#include "common/connection_gate.h"
#include "common/log_throttle.h"
#include "common/mutex.h"
#include "gdt/v1/agent.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace gdt::agent {

// The gRPC face of the agent. Each handler converts the request into a
// Supervisor call and the result back; no process handling lives here.
// RunStage uses the callback API (a reactor per stage, fed by the stage's
// own thread); the unary calls are synchronous because teardown may wait
// out a kill grace.
//
// Thread-safe. Keeps a reference to `supervisor`, which must outlive it.
class AgentService final
    : public v1::Agent::WithCallbackMethod_RunStage<v1::Agent::Service> {
 public:
  // Called (on a gRPC thread; it must not block) when a user stage's
  // stream breaks before the stage ended: its executor went away. Gets the
  // stage's StartStage.
  using MemberLostHandler = std::function<void(const v1::StartStage&)>;
  // Called (on the stage's thread) when a stage whose StartStage asked for
  // it (agent_reports_exit, with a gang) ends, unless its executor went
  // away first (then the member was reported lost). Should not block long.
  using ExitHandler = std::function<void(const ExitRecord&)>;

  explicit AgentService(Supervisor& supervisor) : supervisor_(supervisor) {}

  // Set before the server starts; constant afterwards.
  void SetMemberLostHandler(MemberLostHandler handler) {
    member_lost_ = std::move(handler);
  }
  void SetExitHandler(ExitHandler handler) { exit_ = std::move(handler); }
  // With a check set, SetupMember, RunStage and TeardownMember need
  // metadata "gdt-member-token" that `ask` (the coordinator) finds good, and
  // every member id, gang id, epoch and job id in the request must be the
  // token's; without one nothing is checked. Good answers are kept for
  // `ttl` (MemberTokenCache). Set before the server starts.
  void SetMemberTokenCheck(MemberTokenCache::Ask ask,
                           std::chrono::steady_clock::duration ttl) {
    member_tokens_ = std::make_unique<MemberTokenCache>(std::move(ask), ttl);
  }

  grpc::Status SetupMember(grpc::ServerContext* context,
                           const v1::SetupMemberRequest* request,
                           v1::SetupMemberResponse* response) override;
  grpc::ServerBidiReactor<v1::RunStageRequest, v1::RunStageResponse>* RunStage(
      grpc::CallbackServerContext* context) override;
  grpc::Status TeardownMember(grpc::ServerContext* context,
                              const v1::TeardownMemberRequest* request,
                              v1::TeardownMemberResponse* response) override;
  grpc::Status CheckPort(grpc::ServerContext* context,
                         const v1::CheckPortRequest* request,
                         v1::CheckPortResponse* response) override;
  // Commands one member may run through gdt-rsh at once: each holds one of
  // the agent's threads while it runs, and a job must not make the agent
  // start threads (and tasks of its own cgroup) without bound. Beyond it
  // ExecInMember is RESOURCE_EXHAUSTED.
  static constexpr int kMaxExecsPerMember = 64;

  // gdt-rsh: see agent.proto.
  grpc::Status ExecInMember(
      grpc::ServerContext* context, const v1::ExecInMemberRequest* request,
      grpc::ServerWriter<v1::ExecInMemberResponse>* writer) override;

 private:
  Supervisor& supervisor_;
  MemberLostHandler member_lost_;
  ExitHandler exit_;
  std::unique_ptr<MemberTokenCache> member_tokens_;  // Null: no check.
  RefusalLog refusals_;
  Mutex execs_mu_;
  // Commands running through ExecInMember, by member id.
  std::map<std::string, int> execs_ ABSL_GUARDED_BY(execs_mu_);
};

// Connections an AgentServer keeps open at once (ConnectionGate::Options);
// 0 = no cap.
struct ConnectionLimits {
  int max_connections_per_peer = 0;
  int max_connections = 0;
  int peer_ipv6_prefix_length = ConnectionGate::kDefaultIPv6PrefixLength;
};

// A started gRPC server hosting one AgentService. Its port is a
// ConnectionGate's: connections over the caps are closed as they are
// accepted, before gRPC holds them (or any call on them). Not thread-safe.
class AgentServer {
 public:
  // Listens on `listen_address` (host:port; port 0 picks one), without caps.
  // Errors: Unavailable when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<AgentServer>> Start(
      const std::string& listen_address, AgentService& service);
  // The same with `credentials` (TLS, docs/security.md "TLS") and `limits`.
  static absl::StatusOr<std::unique_ptr<AgentServer>> Start(
      const std::string& listen_address, AgentService& service,
      const std::shared_ptr<grpc::ServerCredentials>& credentials,
      const ConnectionLimits& limits = {});

  // The bound port.
  int port() const { return port_; }

  // Stops accepting calls, gives running ones until `deadline` and cancels
  // the rest. Idempotent.
  void Shutdown(std::chrono::system_clock::time_point deadline);

 private:
  AgentServer(std::unique_ptr<grpc::Server> server,
              std::unique_ptr<ConnectionGate> gate)
      : server_(std::move(server)),
        gate_(std::move(gate)),
        port_(gate_->port()) {}

  std::unique_ptr<grpc::Server> server_;
  // Destroyed before server_: nothing is handed to a server that is gone.
  std::unique_ptr<ConnectionGate> gate_;
  int port_;
  bool shut_down_ = false;
};

}  // namespace gdt::agent

#endif  // GDT_AGENT_AGENT_SERVICE_H_
