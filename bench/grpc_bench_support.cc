#include "bench/grpc_bench_support.h"

#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "coordinator/port_checker.h"
#include "state/etcd_client.h"
#include "state/etcd_store.h"
#include "state/sqlite_store.h"

namespace gdt::bench {
namespace {

class FreePorts final : public coordinator::PortChecker {
 public:
  absl::StatusOr<bool> IsPortFree(const std::string&, uint32_t) override {
    return true;
  }
};

}  // namespace

std::vector<std::unique_ptr<v1::Coordinator::Stub>> MakeStubs(
    const std::string& endpoint, int count) {
  std::vector<std::unique_ptr<v1::Coordinator::Stub>> stubs;
  for (int i = 0; i < count; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("gdt.bench.channel", i);  // No subchannel sharing.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    // GetStatus of 10,000 hosts is larger than gRPC's default 4 MB.
    args.SetMaxReceiveMessageSize(-1);
    stubs.push_back(v1::Coordinator::NewStub(grpc::CreateCustomChannel(
        endpoint, grpc::InsecureChannelCredentials(), args)));
  }
  return stubs;
}

absl::StatusOr<BenchEtcd> StartBenchEtcd(const std::string& endpoints) {
  BenchEtcd etcd;
  etcd.endpoints = absl::StrSplit(endpoints, ',', absl::SkipEmpty());
  if (!etcd.endpoints.empty()) {
    etcd.description = absl::StrCat("etcd (", endpoints, ")");
    return etcd;
  }
  // etcd's default limits per transaction fit the admission of 4,096
  // members (one roster value, docs/ha.md); the backend quota is raised
  // because every run's history stays in the store (nothing compacts it).
  absl::StatusOr<std::unique_ptr<test::EtcdTestServer>> started =
      test::EtcdTestServer::Start(kLocalEtcdNodes, std::chrono::seconds(30),
                                  {"--quota-backend-bytes=8589934592"});
  if (!started.ok()) return started.status();
  etcd.local = std::move(*started);
  etcd.endpoints = etcd.local->endpoints();
  etcd.description = absl::StrCat("etcd (", kLocalEtcdNodes, " local nodes)");
  return etcd;
}

std::unique_ptr<InProcessCoordinator> InProcessCoordinator::Start(
    uint32_t max_nodes, const std::vector<std::string>& etcd_endpoints) {
  std::unique_ptr<InProcessCoordinator> self(new InProcessCoordinator());
  char pattern[] = "/tmp/gdt-bench-XXXXXX";
  if (mkdtemp(pattern) == nullptr) return nullptr;
  self->dir_ = pattern;
  absl::StatusOr<std::unique_ptr<state::StateStore>> store;
  if (etcd_endpoints.empty()) {
    store = state::SqliteStore::Open(self->dir_ + "/coord.db");
  } else {
    absl::StatusOr<std::unique_ptr<state::EtcdClient>> client =
        state::EtcdClient::Create(etcd_endpoints, std::chrono::seconds(30));
    if (!client.ok()) {
      std::cerr << "etcd: " << client.status() << "\n";
      return nullptr;
    }
    // A prefix per coordinator: benchmarks may start several on one etcd.
    static std::atomic<int> next{0};
    store = state::EtcdStore::Open(
        std::move(*client), absl::StrCat("bench-", getpid(), "-", next++));
  }
  if (!store.ok()) {
    std::cerr << "state store: " << store.status() << "\n";
    return nullptr;
  }
  coordinator::SchedulerOptions options;
  options.max_nodes_per_job = max_nodes;
  options.master_port_min = 20000;
  options.master_port_max = 60000;
  // Joins are what the benchmarks measure: no per-project rate limit.
  options.join_rate_per_project = 0;
  // Hosts registered by a benchmark send no heartbeats: keep them up.
  options.host_down_after = std::chrono::hours(24);
  self->ports_ = std::make_unique<FreePorts>();
  absl::StatusOr<std::unique_ptr<coordinator::Coordinator>> core =
      coordinator::Coordinator::Create(self->clock_, std::move(*store), options,
                                       *self->ports_);
  if (!core.ok()) return nullptr;
  self->coordinator_ = std::move(*core);
  self->metrics_ =
      std::make_unique<coordinator::CoordinatorMetrics>(self->clock_);
  self->coordinator_->SetObserver(*self->metrics_);
  self->service_ = std::make_unique<coordinator::CoordinatorService>(
      *self->coordinator_, std::chrono::seconds(2));
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(self->service_.get());
  self->server_ = builder.BuildAndStart();
  if (self->server_ == nullptr || port == 0) return nullptr;
  self->endpoint_ = absl::StrCat("127.0.0.1:", port);
  self->service_->SetAdvertiseEndpoint(self->endpoint_);
  self->coordinator_->Start();
  return self;
}

InProcessCoordinator::~InProcessCoordinator() {
  if (service_) service_->EndAllStreams("benchmark over");
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::seconds(2));
  }
  if (coordinator_) coordinator_->Stop();
  server_.reset();
  service_.reset();
  coordinator_.reset();
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

std::unique_ptr<InProcessCoordinator> InProcessCoordinator::StartWithCpuHosts(
    uint32_t max_nodes, const std::vector<std::string>& etcd_endpoints) {
  std::unique_ptr<InProcessCoordinator> self = Start(max_nodes, etcd_endpoints);
  if (self == nullptr) return nullptr;
  for (int host = 0; host < kBenchCpuHosts; ++host) {
    state::HostSpec spec;
    spec.name = BenchHostName(host);
    spec.address = absl::StrCat("10.0.", host / 256, ".", host % 256);
    spec.agent_endpoint = spec.address + ":7071";
    spec.cpu_slots = kBenchCpuHosts;
    if (!self->coordinator_->RegisterHost(spec).ok()) return nullptr;
  }
  return self;
}

std::string BenchHostName(int index) {
  return absl::StrCat("host-", index < 10 ? "0" : "", index);
}

v1::JoinGangRequest JoinRequestFor(int64_t pipeline, uint32_t size,
                                   uint32_t index) {
  v1::JoinGangRequest request;
  request.mutable_key()->set_instance("https://gitlab.example.com");
  request.mutable_key()->set_project_id(1);
  request.mutable_key()->set_pipeline_id(pipeline);
  request.mutable_key()->set_group_name("bench");
  request.mutable_key()->set_size(size);
  request.set_member_index(index);
  request.set_job_id(pipeline * 100000 + index);
  request.set_job_name(absl::StrCat("bench ", index, "/", size));
  request.set_gpus_per_node(0);
  request.set_procs_per_node(1);
  request.set_launcher(v1::LAUNCHER_NONE);
  // As gdt-executor asks: the peer list is fetched after formation.
  request.set_compact_assignment(true);
  return request;
}

}  // namespace gdt::bench
