#include "coordinator/server.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "common/host_port.h"
#include "common/logging.h"
#include "common/open_files.h"
#include "common/secret.h"
#include "coordinator/rpc_metrics.h"
#include "grpcpp/grpcpp.h"
#include "rendezvous/channel.h"
#include "rendezvous/tls.h"
#include "spdlog/spdlog.h"

namespace gdt::coordinator {
namespace {

// The service's access rules from `config`; creates `verifier` (job API)
// or `id_token_verifier` when member verification is on. Logs one line per
// check that is off.
absl::StatusOr<ServiceSecurity> SecurityOf(
    const Config& config, const Clock& clock,
    std::unique_ptr<MemberVerifier>& verifier,
    std::unique_ptr<IdTokenMemberVerifier>& id_token_verifier) {
  ServiceSecurity security;
  if (!config.gitlab_url.empty() && config.member_verification == "id_token") {
    gitlab::IdTokenVerifier::Options token_options;
    token_options.policy.issuer = config.gitlab_url;
    token_options.policy.audience = config.id_token_audience;
    token_options.min_refresh_interval = config.jwks_refresh_interval;
    IdTokenMemberVerifierOptions options;
    options.audience = config.id_token_audience;
    id_token_verifier = std::make_unique<IdTokenMemberVerifier>(
        std::make_unique<gitlab::IdTokenVerifier>(
            CurlJwksFetch(config.gitlab_url, config.jwks_url,
                          config.gitlab_ca_file,
                          std::chrono::milliseconds(config.gitlab_timeout)),
            clock, token_options),
        clock, options);
    security.id_token_verifier = id_token_verifier.get();
    spdlog::info(
        "event=member_verification_on mode=id_token issuer={} audience={} "
        "jwks_url={}",
        LogValue(config.gitlab_url), LogValue(config.id_token_audience),
        LogValue(config.jwks_url.empty() ? "<issuer>/oauth/discovery/keys"
                                         : config.jwks_url));
  } else if (!config.gitlab_url.empty()) {
    MemberVerifierOptions options;
    options.cache_ttl = config.member_cache_ttl;
    verifier = std::make_unique<MemberVerifier>(
        CurlJobLookup(config.gitlab_url, config.gitlab_ca_file,
                      std::chrono::milliseconds(config.gitlab_timeout)),
        clock, options);
    security.verifier = verifier.get();
    spdlog::info("event=member_verification_on gitlab_url={}",
                 LogValue(config.gitlab_url));
  } else {
    spdlog::warn("event=member_verification_off reason={}",
                 LogValue("no gitlab_url: any client can join any gang by "
                          "naming it; set gitlab_url outside local use"));
  }
  if (!config.admin_token_file.empty()) {
    absl::StatusOr<std::string> token =
        ReadTokenFile(config.admin_token_file, "admin_token_file");
    if (!token.ok()) return token.status();
    if (const std::string problem =
            TokenFileModeProblem(config.admin_token_file);
        !problem.empty()) {
      spdlog::warn("event=token_file_readable file={} reason={}",
                   LogValue(config.admin_token_file), LogValue(problem));
    }
    security.admin_token_sha256 = SecretSha256Hex(*token);
    security.status_without_token = config.status_without_token;
    spdlog::info("event=operator_auth_on status_without_token={}",
                 config.status_without_token);
  } else {
    spdlog::warn(
        "event=operator_auth_off listen_address={} reason={}",
        LogValue(config.listen_address),
        LogValue("no admin_token_file: anyone who reaches the listen address "
                 "can drain, remove hosts and cancel gangs"));
  }
  if (!config.gitlab_url.empty()) {
    security.trusted_instance = config.gitlab_instance_url.empty()
                                    ? config.gitlab_url
                                    : config.gitlab_instance_url;
  }
  security.require_host_tokens = config.require_host_tokens;
  if (!config.require_host_tokens) {
    spdlog::warn("event=host_tokens_off reason={}",
                 LogValue("require_host_tokens: false: any client can "
                          "register as a host"));
  }
  security.agent_cert_must_match_host = AgentCertMustMatchHost(config.tls);
  if (security.agent_cert_must_match_host) {
    spdlog::info("event=agent_cert_match_on reason={}",
                 LogValue("an agent acts only for the host its client "
                          "certificate names"));
  } else if (config.tls.enabled && config.tls.require_client_cert) {
    spdlog::warn(
        "event=agent_cert_match_off reason={}",
        LogValue("tls.agent_cert_must_match_host: false: any agent "
                 "certificate from tls.ca_file may register and heartbeat "
                 "as any host"));
  }
  return security;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(
    const Config& config, const Clock& clock) {
  absl::StatusOr<std::unique_ptr<state::SqliteStore>> store =
      state::SqliteStore::Open(config.state_path);
  if (!store.ok()) return store.status();
  return Start(config, clock, std::move(*store));
}

absl::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(
    const Config& config, const Clock& clock,
    std::unique_ptr<state::StateStore> store) {
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      rendezvous::LoadServerCredentials(config.tls);
  if (!credentials.ok()) return credentials.status();
  absl::StatusOr<rendezvous::ClientSecurity> agent_security =
      rendezvous::LoadClientSecurity(config.tls);
  if (!agent_security.ok()) return agent_security.status();
  std::unique_ptr<CoordinatorServer> server(new CoordinatorServer());
  server->port_checker_.SetSecurity(*agent_security);
  server->metrics_ = std::make_unique<CoordinatorMetrics>(clock);
  SchedulerOptions options;
  options.max_nodes_per_job = config.max_nodes_per_job;
  options.max_forming_gangs_per_pipeline =
      config.max_forming_gangs_per_pipeline;
  options.max_forming_gangs_per_project = config.max_forming_gangs_per_project;
  options.join_rate_per_project = config.join_rate_per_project;
  options.join_burst_per_project = config.join_burst_per_project;
  options.master_port_min = config.master_port_min;
  options.master_port_max = config.master_port_max;
  options.host_down_after = config.host_down_after;
  options.failed_gang_release = config.failed_gang_release;
  options.forming_abandoned_after = config.forming_gang_abandon;
  options.finished_gang_retention = config.finished_gang_retention;
  options.member_gone_after = config.member_gone_after;
  options.elastic_wait = config.elastic_wait;
  options.preemption = config.preemption;
  kv::KvLimits kv_limits;
  kv_limits.max_keys_per_gang = config.kv_max_keys_per_gang;
  kv_limits.max_bytes_total = size_t{config.kv_max_total_mib} << 20;
  CheckpointLimits checkpoint_limits;
  checkpoint_limits.per_second = config.checkpoint_record_rate_per_gang;
  checkpoint_limits.burst = config.checkpoint_record_burst_per_gang;
  absl::StatusOr<std::unique_ptr<Coordinator>> coordinator =
      Coordinator::Create(clock, std::move(store), options,
                          server->port_checker_, kv_limits, checkpoint_limits);
  if (!coordinator.ok()) return coordinator.status();
  server->coordinator_ = std::move(*coordinator);
  server->coordinator_->SetObserver(*server->metrics_);
  server->service_ = std::make_unique<CoordinatorService>(
      *server->coordinator_, config.heartbeat_interval);
  absl::StatusOr<ServiceSecurity> security =
      SecurityOf(config, clock, server->verifier_, server->id_token_verifier_);
  if (!security.ok()) return security.status();
  server->admin_token_sha256_ = security->admin_token_sha256;
  server->status_without_token_ = security->status_without_token;
  server->service_->SetSecurity(*std::move(security));
  server->service_->SetMasterPortRange(config.master_port_min,
                                       config.master_port_max);

  server->credentials_ = *credentials;
  server->kv_service_ =
      std::make_unique<kv::KvService>(server->coordinator_->kv());
  server->checkpoint_service_ =
      std::make_unique<CheckpointService>(*server->coordinator_);
  ConnectionGate::Options gate;
  gate.who = "coordinator";
  gate.max_per_peer = static_cast<int>(
      std::min<uint32_t>(config.max_connections_per_peer, INT_MAX));
  gate.max_total =
      static_cast<int>(std::min<uint32_t>(config.max_connections, INT_MAX));
  gate.ipv6_prefix_length = static_cast<int>(config.peer_ipv6_prefix_length);
  absl::StatusOr<std::unique_ptr<ConnectionGate>> listener =
      ConnectionGate::Listen(config.listen_address, gate);
  if (!listener.ok()) return listener.status();
  server->gate_ = std::move(*listener);
  const int port = server->gate_->port();
  absl::StatusOr<HostPort> listen = ParseHostPort(config.listen_address);
  if (!listen.ok()) return listen.status();
  server->bound_address_ = JoinHostPort(listen->host, port);
  if (absl::Status started = server->StartMainServer(); !started.ok()) {
    return started;
  }
  server->service_->SetAdvertiseEndpoint(config.advertise_endpoint.empty()
                                             ? server->bound_address_
                                             : config.advertise_endpoint);
  if (config.liveness_listen_address != "off") {
    const std::string address = config.liveness_listen_address.empty()
                                    ? JoinHostPort(listen->host, 0)
                                    : config.liveness_listen_address;
    absl::StatusOr<std::unique_ptr<LivenessServer>> liveness =
        LivenessServer::Start(address, *credentials, *server->service_,
                              *server->metrics_);
    if (!liveness.ok()) return liveness.status();
    server->liveness_server_ = std::move(*liveness);
    absl::StatusOr<HostPort> liveness_listen = ParseHostPort(address);
    server->liveness_address_ = JoinHostPort(
        liveness_listen.ok() ? liveness_listen->host : listen->host,
        server->liveness_server_->port());
    server->service_->SetLivenessEndpoint(
        static_cast<uint32_t>(server->liveness_server_->port()),
        config.liveness_advertise_endpoint);
    spdlog::info("event=liveness_server_on port={} advertise={}",
                 server->liveness_server_->port(),
                 LogValue(config.liveness_advertise_endpoint.empty()
                              ? "<the host agents reach the coordinator at>"
                              : config.liveness_advertise_endpoint));
  }
  if (!config.metrics_address.empty()) {
    Coordinator* core = server->coordinator_.get();
    CoordinatorMetrics* metrics = server->metrics_.get();
    absl::StatusOr<std::unique_ptr<MetricsServer>> metrics_server =
        MetricsServer::Start(config.metrics_address, [core, metrics] {
          return metrics->Render(*core->SharedSnapshot(false));
        });
    if (!metrics_server.ok()) return metrics_server.status();
    server->metrics_server_ = std::move(*metrics_server);
  }
  server->coordinator_->Start();
  // Anyone who reaches the coordinator can use up its descriptors with
  // connections; gRPC's listener then never accepts again, while the
  // connections made before go on. The liveness server's endpoint is
  // checked and its listener restarted once descriptors are free again.
  // (The main port's listener is gate_, which only pauses while
  // descriptors are out.)
  absl::StatusOr<HostPort> advertised = ParseHostPort(
      config.advertise_endpoint.empty() ? server->bound_address_
                                        : config.advertise_endpoint);
  const std::string tls_name = advertised.ok() ? advertised->host : "";
  constexpr char kUnanswered[] =
      "new connections fail; the listener is restarted after repeated "
      "failed checks, once descriptors are free";
  constexpr char kAnswered[] = "accepts new connections again";
  CoordinatorServer* self = server.get();
  if (server->liveness_server_ != nullptr) {
    server->liveness_watch_ = WatchEndpoint(
        server->liveness_address_, tls_name, *agent_security, kUnanswered,
        kAnswered, [self] { return self->RestartLivenessServer(); });
  }
  return server;
}

absl::Status CoordinatorServer::StartMainServer() {
  grpc::ServerBuilder builder;
  rendezvous::ApplyServerLimits(builder);
  // gate_ accepts the connections and hands them to the server.
  std::shared_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor =
      builder.experimental().AddExternalConnectionAcceptor(
          grpc::ServerBuilder::experimental_type::ExternalConnectionType::
              FROM_FD,
          credentials_);
  AddRpcMetrics(builder, *metrics_);
  builder.RegisterService(service_.get());
  builder.RegisterService(kv_service_.get());
  builder.RegisterService(checkpoint_service_.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || acceptor == nullptr) {
    server_.reset();
    return absl::UnavailableError(absl::StrCat(
        "cannot start the coordinator's server on ", bound_address_));
  }
  gate_->SetHandoff([acceptor](int listener_fd, int fd) {
    grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters
        connection;
    connection.listener_fd = listener_fd;
    connection.fd = fd;
    acceptor->HandleNewConnection(&connection);
  });
  return absl::OkStatus();
}

std::unique_ptr<rendezvous::EndpointWatch> CoordinatorServer::WatchEndpoint(
    const std::string& endpoint, const std::string& tls_target_name,
    const rendezvous::ClientSecurity& security, std::string while_unanswered,
    std::string when_answered, std::function<absl::Status()> restart) {
  rendezvous::EndpointWatch::Options options;
  options.who = "coordinator";
  options.while_unanswered = std::move(while_unanswered);
  options.when_answered = std::move(when_answered);
  auto watch = std::make_unique<rendezvous::EndpointWatch>(
      endpoint, options,
      [endpoint, security, tls_target_name] {
        return rendezvous::ProbeEndpoint("coordinator", endpoint, security,
                                         tls_target_name,
                                         kEndpointProbeDeadline);
      },
      std::move(restart));
  watch->Start();
  return watch;
}

absl::Status CoordinatorServer::CheckSpareFiles() {
  const int64_t spare = SpareOpenFiles();
  if (spare >= 0 && spare < CoordinatorServer::kRestartSpareFiles) {
    return absl::FailedPreconditionError(
        absl::StrCat("the listener is restarted once ",
                     CoordinatorServer::kRestartSpareFiles,
                     " descriptors are free (", OpenFilesSummary(), ")"));
  }
  return absl::OkStatus();
}

absl::Status CoordinatorServer::RestartLivenessServer() {
  if (absl::Status spare = CheckSpareFiles(); !spare.ok()) return spare;
  spdlog::warn("event=coordinator_listener_restart address={} reason={}",
               LogValue(liveness_address_),
               LogValue("the liveness endpoint does not answer the "
                        "coordinator's own check"));
  if (liveness_server_ != nullptr) {
    liveness_server_->Shutdown();
    liveness_server_.reset();
  }
  absl::StatusOr<std::unique_ptr<LivenessServer>> liveness =
      LivenessServer::Start(liveness_address_, credentials_, *service_,
                            *metrics_);
  if (!liveness.ok()) {
    spdlog::error(
        "event=coordinator_listener_restart_failed address={} "
        "error={}",
        LogValue(liveness_address_), LogValue(liveness.status().ToString()));
    return liveness.status();
  }
  liveness_server_ = std::move(*liveness);
  spdlog::info("event=coordinator_listener_restarted address={}",
               LogValue(liveness_address_));
  return absl::OkStatus();
}

CoordinatorServer::~CoordinatorServer() { Shutdown(); }

void CoordinatorServer::Shutdown() {
  if (liveness_watch_ != nullptr) liveness_watch_->Stop();
  metrics_server_.reset();
  if (service_ != nullptr) {
    service_->EndAllStreams("coordinator is shutting down");
  }
  if (coordinator_ != nullptr) {
    coordinator_->kv().EndAllWaits("coordinator is shutting down");
  }
  if (liveness_server_ != nullptr) liveness_server_->Shutdown();
  if (gate_ != nullptr) gate_->SetHandoff(nullptr);
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::seconds(2));
    server_.reset();
  }
  gate_.reset();  // Frees the port (a standby listens on it next).
  if (coordinator_ != nullptr) coordinator_->Stop();
}

absl::Status WritePortFile(const std::string& path,
                           const std::string& content) {
  return WriteFileAtomically(path, content + "\n");
}

}  // namespace gdt::coordinator
