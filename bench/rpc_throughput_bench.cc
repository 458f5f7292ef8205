// Benchmark (b): join + heartbeat RPC throughput of the real in-process
// coordinator on loopback, next to an empty gRPC service (the ceiling of
// gRPC itself on this machine) measured in the same run.
//  - heartbeat: 64 Heartbeat calls kept in flight (callback API) for 3 s;
//  - join: 8 client threads each looping JoinGang (a 1-member gang, read
//    until Admitted) + LeaveGang, counted as 2 RPCs per cycle.
// With --etcd the join loop runs again against a coordinator whose state is
// in etcd (three local nodes started here, or --etcd=host:port,...),
// reported next to the SQLite figure of the same run.
// Usage: gdt-bench-rpc [--quick] [--etcd[=host:port,...]]
#include <atomic>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "bench/grpc_bench_support.h"
#include "spdlog/spdlog.h"
#include "state/model.h"

namespace gdt::bench {
namespace {

using Clock = std::chrono::steady_clock;

// What gRPC alone costs: Heartbeat answers at once.
class EmptyService final : public v1::Coordinator::CallbackService {
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* context,
                                      const v1::HeartbeatRequest*,
                                      v1::HeartbeatResponse*) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

// Keeps `in_flight` Heartbeat calls going until `deadline`; returns calls/s.
double HeartbeatRate(v1::Coordinator::Stub* stub, int in_flight,
                     std::chrono::milliseconds duration) {
  struct Call {
    grpc::ClientContext context;
    v1::HeartbeatRequest request;
    v1::HeartbeatResponse response;
  };
  std::atomic<int64_t> completed{0};
  std::atomic<int64_t> failed{0};
  Latch done(static_cast<size_t>(in_flight));
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + duration;
  std::function<void(int)> issue = [&](int slot) {
    auto call = std::make_shared<Call>();
    call->request.set_host_name(absl::StrCat("host-", slot % 64));
    stub->async()->Heartbeat(&call->context, &call->request, &call->response,
                             [&, call, slot](grpc::Status status) {
                               if (status.ok()) {
                                 ++completed;
                               } else {
                                 ++failed;
                               }
                               if (Clock::now() < deadline) {
                                 issue(slot);
                               } else {
                                 done.CountDown();
                               }
                             });
  };
  for (int slot = 0; slot < in_flight; ++slot) issue(slot);
  done.WaitFor(duration + std::chrono::seconds(30));
  const double seconds =
      std::chrono::duration<double>(Clock::now() - start).count();
  if (failed > 0) std::cerr << failed << " heartbeats failed\n";
  return static_cast<double>(completed) / seconds;
}

// `threads` threads loop JoinGang (1-member gang) + LeaveGang; RPCs/s.
double JoinRate(const std::string& endpoint, int threads,
                std::chrono::milliseconds duration) {
  std::atomic<int64_t> rpcs{0};
  std::atomic<int64_t> failures{0};
  auto stubs = MakeStubs(endpoint, threads);
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + duration;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      int64_t pipeline = 1000000 * (t + 1);
      while (Clock::now() < deadline) {
        ++pipeline;
        v1::JoinGangRequest request = JoinRequestFor(pipeline, 1, 1);
        // Each thread is a runner on its own host, as in a real cluster.
        request.set_arrival_host(BenchHostName(t));
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() +
                             std::chrono::seconds(30));
        auto reader = stubs[t]->JoinGang(&context, request);
        v1::JoinGangEvent event;
        bool admitted = false;
        while (reader->Read(&event)) admitted |= event.has_admitted();
        if (!reader->Finish().ok() || !admitted) ++failures;
        ++rpcs;
        grpc::ClientContext leave_context;
        v1::LeaveGangRequest leave;
        *leave.mutable_key() = request.key();
        leave.set_member_index(1);
        leave.set_job_id(request.job_id());
        v1::LeaveGangResponse response;
        if (!stubs[t]->LeaveGang(&leave_context, leave, &response).ok()) {
          ++failures;
        }
        ++rpcs;
      }
    });
  }
  for (std::thread& worker : workers) worker.join();
  const double seconds =
      std::chrono::duration<double>(Clock::now() - start).count();
  if (failures > 0) std::cerr << failures << " join cycles failed\n";
  return static_cast<double>(rpcs) / seconds;
}

}  // namespace
}  // namespace gdt::bench

int main(int argc, char** argv) {
  using namespace gdt::bench;
  bool quick = false;
  bool with_etcd = false;
  std::string etcd_endpoints;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--quick") {
      quick = true;
    } else if (arg == "--etcd") {
      with_etcd = true;
    } else if (arg.rfind("--etcd=", 0) == 0) {
      with_etcd = true;
      etcd_endpoints = arg.substr(7);
    } else {
      std::cerr << "usage: gdt-bench-rpc [--quick] [--etcd[=host:port,...]]\n";
      return 2;
    }
  }
  const std::chrono::milliseconds duration(quick ? 1000 : 3000);
  // Warnings are expected (see docs/benchmarks.md) and would flood stderr.
  spdlog::set_level(spdlog::level::err);

  std::unique_ptr<InProcessCoordinator> gdt =
      InProcessCoordinator::StartWithCpuHosts(8);
  if (gdt == nullptr) return 1;
  EmptyService empty_service;
  grpc::ServerBuilder builder;
  int empty_port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &empty_port);
  builder.RegisterService(&empty_service);
  std::unique_ptr<grpc::Server> empty = builder.BuildAndStart();
  if (empty == nullptr) return 1;

  auto gdt_stub = MakeStubs(gdt->endpoint(), 1);
  auto empty_stub = MakeStubs(absl::StrCat("127.0.0.1:", empty_port), 1);
  const double gdt_heartbeats = HeartbeatRate(gdt_stub[0].get(), 64, duration);
  const double empty_heartbeats =
      HeartbeatRate(empty_stub[0].get(), 64, duration);
  const double joins = JoinRate(gdt->endpoint(), 8, duration);
  std::printf(
      "rpc heartbeat gdt=%.0f/s | empty gRPC service=%.0f/s | "
      "gdt/empty=%.2f | target >=20000/s %s\n",
      gdt_heartbeats, empty_heartbeats, gdt_heartbeats / empty_heartbeats,
      gdt_heartbeats >= 20000 ? "MET" : "MISSED");
  std::printf(
      "rpc join+leave (1-member gangs, 8 threads) gdt=%.0f RPC/s | "
      "target >=20000/s %s\n",
      joins, joins >= 20000 ? "MET" : "MISSED");
  std::fflush(stdout);
  if (with_etcd) {
    absl::StatusOr<BenchEtcd> etcd = StartBenchEtcd(etcd_endpoints);
    if (!etcd.ok()) {
      std::cerr << "etcd: " << etcd.status() << "\n";
      return 1;
    }
    std::unique_ptr<InProcessCoordinator> on_etcd =
        InProcessCoordinator::StartWithCpuHosts(8, etcd->endpoints);
    if (on_etcd == nullptr) return 1;
    const double etcd_joins = JoinRate(on_etcd->endpoint(), 8, duration);
    std::printf(
        "rpc join+leave (1-member gangs, 8 threads) on %s=%.0f RPC/s | "
        "sqlite=%.0f RPC/s | etcd/sqlite=%.2f\n",
        etcd->description.c_str(), etcd_joins, joins, etcd_joins / joins);
  }
  empty->Shutdown(std::chrono::system_clock::now());
  return 0;
}
