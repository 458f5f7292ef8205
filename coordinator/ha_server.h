#ifndef GDT_COORDINATOR_HA_SERVER_H_
#define GDT_COORDINATOR_HA_SERVER_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "coordinator/config.h"
#include "coordinator/leader_election.h"
#include "coordinator/server.h"
#include "coordinator/standby_service.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "rendezvous/endpoint_watch.h"
#include "state/etcd_client.h"

namespace gdt::coordinator {

// gdt-coord with state_store: etcd (docs/ha.md): one replica of
// several. It binds its address at once and serves as a standby
// (StandbyService: every RPC is refused with UNAVAILABLE naming the leader)
// while a thread campaigns for the leader key /gdt/<cluster>/leader every
// renew interval. On winning it stops the standby listener and starts a
// CoordinatorServer on the same address whose EtcdStore is fenced on the
// leader key: the state is loaded from etcd as after a restart, and agents
// and executors re-attach. If it then loses the lease (LeaderElection's
// step-down contract) it stops serving at once and, once its address is
// closed, lost() becomes true: the process must exit and be restarted (it comes
// back as a standby); it never serves a term it does not hold.
//
// Thread-safe. Keeps a reference to `clock`.
class HaServer {
 public:
  // Errors: Unavailable "cannot listen on ADDR"; InvalidArgument for bad
  // etcd settings.
  static absl::StatusOr<std::unique_ptr<HaServer>> Start(const Config& config,
                                                         const Clock& clock);
  ~HaServer();  // Shuts down.
  HaServer(const HaServer&) = delete;
  HaServer& operator=(const HaServer&) = delete;

  // host:port actually bound.
  const std::string& bound_address() const { return bound_address_; }
  // What this replica puts in the leader key and standbys redirect to.
  const std::string& advertised() const { return advertised_; }
  bool leader() const { return leader_.load(); }
  // True once this replica led and lost its lease (it no longer serves).
  bool lost() const { return lost_.load(); }

  // Stops campaigning and serving; a leader resigns (deletes the leader
  // key) so a standby takes over at once. Idempotent.
  void Shutdown();

 private:
  HaServer(const Config& config, const Clock& clock)
      : config_(config), clock_(clock) {}
  void Run();
  // Becomes the serving leader. False when that failed (it resigned).
  bool Promote();
  std::string CurrentLeader();
  // A standby server on `address` with a new standby_service_ (the server
  // before it, if any, must be shut down); null when it cannot listen.
  // `port`: the port bound.
  std::unique_ptr<grpc::Server> StartStandby(const std::string& address,
                                             int* port);
  // The standby watch's recovery: replaces the standby server with a new
  // one on the same address. Errors: FailedPrecondition while descriptors
  // are short (CoordinatorServer::CheckSpareFiles), Unavailable when the
  // address cannot be bound again.
  absl::Status RestartStandby();
  // Waits up to `timeout` unless Shutdown() comes first; false then.
  bool Sleep(std::chrono::milliseconds timeout);

  Config config_;
  const Clock& clock_;
  std::string bound_address_;
  std::string advertised_;  // Written once in Start(), under mu_.
  std::shared_ptr<state::EtcdClient> store_client_;
  std::unique_ptr<LeaderElection> election_;  // Run() thread only.
  // The standby server's service; replaced with the server (Start() and the
  // standby watch's thread, or Promote() once the watch stopped).
  std::unique_ptr<StandbyService> standby_service_;
  std::shared_ptr<grpc::ServerCredentials> credentials_;
  // Checks the standby's endpoint until this replica leads (or stops).
  std::unique_ptr<rendezvous::EndpointWatch> standby_watch_;
  std::atomic<bool> leader_{false};
  std::atomic<bool> lost_{false};

  Mutex mu_;
  CondVar cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::string leader_address_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<grpc::Server> standby_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<CoordinatorServer> server_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace gdt::coordinator

#endif  // GDT_COORDINATOR_HA_SERVER_H_
