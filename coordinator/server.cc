#include "coordinator/server.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "common/host_port.h"
#include "common/logging.h"
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
  absl::StatusOr<std::unique_ptr<Coordinator>> coordinator =
      Coordinator::Create(clock, std::move(store), options,
                          server->port_checker_, kv_limits);
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

  if (absl::Status probe = ProbeListen(config.listen_address); !probe.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", config.listen_address, ": ", probe.message()));
  }
  grpc::ServerBuilder builder;
  rendezvous::ApplyServerLimits(builder);
  int port = 0;
  builder.AddListeningPort(config.listen_address, *credentials, &port);
  AddRpcMetrics(builder, *server->metrics_);
  builder.RegisterService(server->service_.get());
  server->kv_service_ =
      std::make_unique<kv::KvService>(server->coordinator_->kv());
  builder.RegisterService(server->kv_service_.get());
  server->checkpoint_service_ =
      std::make_unique<CheckpointService>(*server->coordinator_);
  builder.RegisterService(server->checkpoint_service_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", config.listen_address));
  }
  absl::StatusOr<HostPort> listen = ParseHostPort(config.listen_address);
  if (!listen.ok()) return listen.status();
  server->bound_address_ = JoinHostPort(listen->host, port);
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
          return metrics->Render(core->GetSnapshot(false));
        });
    if (!metrics_server.ok()) return metrics_server.status();
    server->metrics_server_ = std::move(*metrics_server);
  }
  server->coordinator_->Start();
  return server;
}

CoordinatorServer::~CoordinatorServer() { Shutdown(); }

void CoordinatorServer::Shutdown() {
  metrics_server_.reset();
  if (service_ != nullptr) {
    service_->EndAllStreams("coordinator is shutting down");
  }
  if (coordinator_ != nullptr) {
    coordinator_->kv().EndAllWaits("coordinator is shutting down");
  }
  if (liveness_server_ != nullptr) liveness_server_->Shutdown();
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::seconds(2));
    server_.reset();
  }
  if (coordinator_ != nullptr) coordinator_->Stop();
}

absl::Status WritePortFile(const std::string& path,
                           const std::string& content) {
  return WriteFileAtomically(path, content + "\n");
}

}  // namespace gdt::coordinator
