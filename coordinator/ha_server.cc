#include "coordinator/ha_server.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/host_port.h"
#include "common/logging.h"
#include "grpcpp/grpcpp.h"
#include "rendezvous/channel.h"
#include "rendezvous/endpoint_watch.h"
#include "rendezvous/tls.h"
#include "spdlog/spdlog.h"
#include "state/etcd_store.h"

namespace gdt::coordinator {
namespace {

// Renews the election's lease every renew interval on a thread of its own
// until stopped. A new leader loads the whole state before it serves, and a
// large state (tens of thousands of finished gangs) takes longer than the
// part of the TTL a leader may go without renewing (see LeaderElection);
// without renewals meanwhile the lease would expire under it, and every
// replica elected after it would fail the same way.
class LeaseKeeper {
 public:
  explicit LeaseKeeper(LeaderElection& election)
      : election_(election), thread_([this] { Loop(); }) {}
  ~LeaseKeeper() { Stop(); }
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

  // Stops renewing; returns whether every renewal held the lease.
  bool Stop() {
    {
      MutexLock lock(mu_);
      stopped_ = true;
    }
    cv_.NotifyAll();
    if (thread_.joinable()) thread_.join();
    return kept_.load();
  }

 private:
  void Loop() {
    while (true) {
      const auto deadline =
          std::chrono::steady_clock::now() + election_.renew_interval();
      {
        MutexLock lock(mu_);
        while (!stopped_ && std::chrono::steady_clock::now() < deadline) {
          cv_.WaitUntil(mu_, deadline);
        }
        if (stopped_) return;
      }
      if (!election_.Renew()) {
        kept_.store(false);
        return;
      }
    }
  }

  LeaderElection& election_;  // Driven by this thread alone until Stop().
  Mutex mu_;
  CondVar cv_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> kept_{true};
  std::thread thread_;  // Last: starts once the rest is set up.
};

}  // namespace

absl::StatusOr<std::unique_ptr<HaServer>> HaServer::Start(const Config& config,
                                                          const Clock& clock) {
  std::unique_ptr<HaServer> server(new HaServer(config, clock));
  const std::chrono::seconds ttl(config.lease_ttl_s);
  absl::StatusOr<std::unique_ptr<state::EtcdClient>> store_client =
      state::EtcdClient::Create(config.etcd_endpoints, ttl);
  if (!store_client.ok()) return store_client.status();
  server->store_client_ = std::move(*store_client);
  // Election requests must end within a renew interval (see
  // LeaderElection's step-down contract).
  absl::StatusOr<std::unique_ptr<state::EtcdClient>> election_client =
      state::EtcdClient::Create(
          config.etcd_endpoints,
          std::chrono::duration_cast<std::chrono::milliseconds>(ttl) / 5);
  if (!election_client.ok()) return election_client.status();
  // Checks the cluster name before anything listens.
  if (absl::StatusOr<std::unique_ptr<state::EtcdStore>> probe =
          state::EtcdStore::Open(server->store_client_, config.etcd_cluster);
      !probe.ok()) {
    return probe.status();
  }

  // The standby answers on the same address and with the same TLS as the
  // leader it becomes.
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      rendezvous::LoadServerCredentials(config.tls);
  if (!credentials.ok()) return credentials.status();
  if (absl::Status probe = ProbeListen(config.listen_address); !probe.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", config.listen_address, ": ", probe.message()));
  }
  server->credentials_ = *credentials;
  absl::StatusOr<HostPort> listen = ParseHostPort(config.listen_address);
  if (!listen.ok()) return listen.status();
  HaServer* self = server.get();
  int port = 0;
  std::unique_ptr<grpc::Server> standby =
      server->StartStandby(config.listen_address, &port);
  if (standby == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", config.listen_address));
  }
  server->bound_address_ = JoinHostPort(listen->host, port);
  {
    MutexLock lock(server->mu_);
    server->advertised_ = config.advertise_endpoint.empty()
                              ? server->bound_address_
                              : config.advertise_endpoint;
  }
  if (config.advertise_endpoint.empty() &&
      (listen->host == "0.0.0.0" || listen->host == "::")) {
    spdlog::warn("event=no_advertise_endpoint listen_address={} reason={}",
                 LogValue(config.listen_address),
                 LogValue("standbys will send clients to this address; set "
                          "advertise_endpoint to one they can reach"));
  }
  server->config_.listen_address = server->bound_address_;
  {
    MutexLock lock(server->mu_);
    server->standby_ = std::move(standby);
  }
  // A standby is reachable by anyone, as the leader is: a flood of
  // connections above its descriptor limit stops gRPC's listener for good
  // (docs/security.md "Descriptor exhaustion"): clients that try it first
  // then wait out their share of each call instead of being sent to the
  // leader at once. Its endpoint is checked and its listener restarted as
  // the leader's are, until it leads.
  absl::StatusOr<rendezvous::ClientSecurity> security =
      rendezvous::LoadClientSecurity(config.tls);
  if (!security.ok()) return security.status();
  absl::StatusOr<HostPort> advertised = ParseHostPort(server->advertised_);
  const std::string tls_name = advertised.ok() ? advertised->host : "";
  server->standby_watch_ = CoordinatorServer::WatchEndpoint(
      server->bound_address_, tls_name, *security,
      "new connections to this standby fail; its listener is restarted "
      "after repeated failed checks, once descriptors are free",
      "the standby accepts new connections again",
      [self] { return self->RestartStandby(); });
  server->election_ = std::make_unique<LeaderElection>(
      std::move(*election_client),
      state::EtcdStore::Prefix(config.etcd_cluster) + "leader",
      server->advertised_, ttl);
  server->thread_ = std::thread([self] { self->Run(); });
  return server;
}

HaServer::~HaServer() { Shutdown(); }

std::unique_ptr<grpc::Server> HaServer::StartStandby(const std::string& address,
                                                     int* port) {
  // gRPC takes a generic service for one server only: each standby server
  // gets its own (the one before it is shut down by now).
  standby_service_ = std::make_unique<StandbyService>([this] {
    MutexLock lock(mu_);
    return StandbyService::Message(advertised_, leader_address_);
  });
  grpc::ServerBuilder builder;
  rendezvous::ApplyServerLimits(builder);
  *port = 0;
  builder.AddListeningPort(address, credentials_, port);
  builder.RegisterCallbackGenericService(standby_service_.get());
  std::unique_ptr<grpc::Server> standby = builder.BuildAndStart();
  if (standby == nullptr || *port == 0) return nullptr;
  return standby;
}

absl::Status HaServer::RestartStandby() {
  if (absl::Status spare = CoordinatorServer::CheckSpareFiles(); !spare.ok()) {
    return spare;
  }
  std::unique_ptr<grpc::Server> old;
  {
    MutexLock lock(mu_);
    // Promote() and Shutdown() stop the watch (this thread) before they
    // take the standby server, so while the watch runs this replica is a
    // standby; no server means the last restart could not listen, and
    // this one tries again.
    if (stopping_) return absl::OkStatus();
    old = std::move(standby_);
  }
  spdlog::warn("event=coordinator_listener_restart address={} reason={}",
               LogValue(bound_address_),
               LogValue("the standby's endpoint does not answer its own "
                        "check"));
  // Outside mu_: calls in flight ask the refusal's message under it.
  if (old != nullptr) {
    old->Shutdown(std::chrono::system_clock::now());
    old.reset();
  }
  int port = 0;
  std::unique_ptr<grpc::Server> standby = StartStandby(bound_address_, &port);
  if (standby == nullptr) {
    spdlog::error(
        "event=coordinator_listener_restart_failed address={} error={}",
        LogValue(bound_address_), LogValue("cannot listen on the address"));
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", bound_address_, " again"));
  }
  {
    MutexLock lock(mu_);
    standby_ = std::move(standby);
  }
  spdlog::info("event=coordinator_listener_restarted address={}",
               LogValue(bound_address_));
  return absl::OkStatus();
}

std::string HaServer::CurrentLeader() {
  MutexLock lock(mu_);
  return leader_address_;
}

bool HaServer::Sleep(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  MutexLock lock(mu_);
  while (!stopping_ && std::chrono::steady_clock::now() < deadline) {
    cv_.WaitUntil(mu_, deadline);
  }
  return !stopping_;
}

void HaServer::Run() {
  const std::chrono::milliseconds interval = election_->renew_interval();
  std::string last_error;
  bool promoted = false;
  while (!promoted) {
    absl::StatusOr<bool> won = election_->TryAcquire();
    if (won.ok()) {
      last_error.clear();
      {
        MutexLock lock(mu_);
        if (leader_address_ != election_->leader()) {
          spdlog::info(
              "event=leader_seen leader={}",
              election_->leader().empty() ? "none" : election_->leader());
        }
        leader_address_ = election_->leader();
      }
      if (*won) {
        if (!Promote()) return;
        promoted = true;
        break;
      }
    } else if (std::string(won.status().message()) != last_error) {
      last_error = std::string(won.status().message());
      spdlog::warn("event=election_failed error={}", last_error);
    }
    if (!Sleep(interval)) return;
  }
  while (Sleep(interval)) {
    if (election_->Renew()) continue;
    spdlog::error(
        "event=leadership_lost lease_ttl_s={} action=stop_serving detail={}",
        config_.lease_ttl_s,
        LogValue("the process exits; restart it to rejoin as a standby"));
    leader_.store(false);
    std::unique_ptr<CoordinatorServer> server;
    {
      MutexLock lock(mu_);
      server = std::move(server_);
      leader_address_.clear();
    }
    // lost() once the address is closed: a call from then on is refused
    // (UNAVAILABLE, so clients move on to another replica), not accepted
    // by a server in the middle of its shutdown and cancelled.
    if (server != nullptr) server->Shutdown();
    lost_.store(true);
    return;
  }
}

bool HaServer::Promote() {
  spdlog::info("event=elected_leader address={} revision={}", advertised_,
               election_->revision());
  absl::StatusOr<std::unique_ptr<state::EtcdStore>> store =
      state::EtcdStore::Open(store_client_, config_.etcd_cluster);
  if (!store.ok()) {
    spdlog::error("event=promotion_failed error={}",
                  std::string(store.status().message()));
    election_->Resign();
    lost_.store(true);
    return false;
  }
  (*store)->SetFence(state::EtcdStore::Prefix(config_.etcd_cluster) + "leader",
                     election_->revision());
  // The leader's server watches its own endpoints.
  if (standby_watch_ != nullptr) standby_watch_->Stop();
  std::unique_ptr<grpc::Server> standby;
  {
    MutexLock lock(mu_);
    standby = std::move(standby_);
  }
  if (standby != nullptr) {
    standby->Shutdown(std::chrono::system_clock::now());
    standby.reset();
  }
  Config config = config_;
  config.advertise_endpoint = advertised_;
  // Loading the state can outlast a renew interval: keep the lease
  // meanwhile.
  LeaseKeeper keeper(*election_);
  const auto loading = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<CoordinatorServer>> server =
      CoordinatorServer::Start(config, clock_, std::move(*store));
  // Renew once more at once: the keeper may have been about to, and the
  // Run() loop waits a whole interval before its first renewal.
  const bool kept = keeper.Stop() && election_->Renew();
  const auto loaded_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::steady_clock::now() - loading)
                             .count();
  if (!kept) {
    spdlog::error(
        "event=leadership_lost lease_ttl_s={} load_ms={} action=stop_serving "
        "detail={}",
        config_.lease_ttl_s, loaded_ms,
        LogValue("the lease was lost while the state loaded; the process "
                 "exits; restart it to rejoin as a standby"));
    if (server.ok()) (*server)->Shutdown();
    lost_.store(true);
    return false;
  }
  if (!server.ok()) {
    spdlog::error("event=promotion_failed error={}",
                  std::string(server.status().message()));
    election_->Resign();
    lost_.store(true);
    return false;
  }
  {
    MutexLock lock(mu_);
    server_ = std::move(*server);
  }
  leader_.store(true);
  spdlog::info("event=serving_as_leader address={} load_ms={}", bound_address_,
               loaded_ms);
  return true;
}

void HaServer::Shutdown() {
  {
    MutexLock lock(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
    cv_.NotifyAll();
  }
  if (thread_.joinable()) thread_.join();
  if (standby_watch_ != nullptr) standby_watch_->Stop();
  std::unique_ptr<CoordinatorServer> server;
  std::unique_ptr<grpc::Server> standby;
  {
    MutexLock lock(mu_);
    server = std::move(server_);
    standby = std::move(standby_);
  }
  if (server != nullptr) {
    server->Shutdown();
    election_->Resign();
  }
  if (standby != nullptr) {
    standby->Shutdown(std::chrono::system_clock::now());
  }
  leader_.store(false);
}

}  // namespace gdt::coordinator
