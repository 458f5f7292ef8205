#include "coordinator/liveness_server.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/host_port.h"
#include "coordinator/rpc_metrics.h"
#include "grpcpp/grpcpp.h"
#include "rendezvous/channel.h"
#include "rendezvous/grpc_status.h"

namespace gdt::coordinator {

class LivenessServer::Service final : public v1::Coordinator::Service {
 public:
  explicit Service(CoordinatorService& main) : main_(main) {}

  grpc::Status Heartbeat(grpc::ServerContext* context,
                         const v1::HeartbeatRequest* request,
                         v1::HeartbeatResponse* response) override {
    return rendezvous::ToGrpcStatus(
        main_.HandleHeartbeat(context, *request, *response));
  }

 private:
  CoordinatorService& main_;
};

absl::StatusOr<std::unique_ptr<LivenessServer>> LivenessServer::Start(
    const std::string& address,
    std::shared_ptr<grpc::ServerCredentials> credentials,
    CoordinatorService& service, CoordinatorMetrics& metrics) {
  std::unique_ptr<LivenessServer> server(new LivenessServer());
  server->service_ = std::make_unique<Service>(service);
  grpc::ServerBuilder builder;
  builder.AddChannelArgument(GRPC_ARG_MAX_METADATA_SIZE,
                             kLivenessMaxMetadataBytes);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             kLivenessMaxStreamsPerConnection);
  builder.SetMaxReceiveMessageSize(kLivenessMaxRequestBytes);
  rendezvous::RefuseSharedPort(builder);
  rendezvous::CloseIdleConnections(builder);
  grpc::ResourceQuota quota("gdt-liveness");
  quota.Resize(kLivenessMemoryQuotaBytes);
  quota.SetMaxThreads(kLivenessMaxThreads);
  builder.SetResourceQuota(quota);
  // One completion queue with its own polling threads: a heartbeat never
  // waits for a thread the main server is using.
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::NUM_CQS,
                              1);
  builder.SetSyncServerOption(
      grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, 1);
  builder.SetSyncServerOption(
      grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, 2);
  if (absl::Status probe = ProbeListen(address); !probe.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address,
                     " (liveness_listen_address): ", probe.message()));
  }
  builder.AddListeningPort(address, std::move(credentials), &server->port_);
  AddRpcMetrics(builder, metrics);
  builder.RegisterService(server->service_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address,
                                               " (liveness_listen_address)"));
  }
  return server;
}

LivenessServer::~LivenessServer() { Shutdown(); }

void LivenessServer::Shutdown() {
  if (server_ == nullptr) return;
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server_.reset();
}

}  // namespace gdt::coordinator
