// In-process gdt coordinator and gRPC client helpers for the benchmarks:
// the real Coordinator + CoordinatorService on 127.0.0.1:0 with a real SQLite
// state file (or etcd, --etcd), and callback-API JoinGang streams so that
// thousands of members can wait at once without a thread each.
#ifndef GDT_BENCH_GRPC_BENCH_SUPPORT_H_
#define GDT_BENCH_GRPC_BENCH_SUPPORT_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/clock.h"
#include "coordinator/coordinator.h"
#include "coordinator/coordinator_service.h"
#include "coordinator/metrics.h"
#include "gdt/v1/coordinator.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "testing/etcd_test_server.h"

namespace gdt::bench {

// Counts down to zero; Wait() has a deadline.
class Latch {
 public:
  explicit Latch(size_t count) : count_(count) {}
  void CountDown() {
    std::lock_guard<std::mutex> lock(mu_);
    if (count_ > 0 && --count_ == 0) cv_.notify_all();
  }
  bool WaitFor(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [this] { return count_ == 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  size_t count_;
};

// One member's JoinGang stream: records when Admitted arrived.
class JoinStream final : public grpc::ClientReadReactor<v1::JoinGangEvent> {
 public:
  JoinStream(v1::Coordinator::Stub* stub, v1::JoinGangRequest request,
             Latch* done)
      : stub_(stub), request_(std::move(request)), done_(done) {}

  void Start() {
    stub_->async()->JoinGang(&context_, &request_, this);
    StartRead(&event_);
    StartCall();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows.
    if (event_.has_admitted()) {
      admitted_at_ = std::chrono::steady_clock::now();
      admitted_ = true;
    }
    StartRead(&event_);
  }
  void OnDone(const grpc::Status& status) override {
    status_ = status;
    done_->CountDown();
  }

  bool admitted() const { return admitted_; }
  std::chrono::steady_clock::time_point admitted_at() const {
    return admitted_at_;
  }
  const grpc::Status& status() const { return status_; }

 private:
  v1::Coordinator::Stub* stub_;
  grpc::ClientContext context_;
  v1::JoinGangRequest request_;
  v1::JoinGangEvent event_;
  Latch* done_;
  bool admitted_ = false;
  std::chrono::steady_clock::time_point admitted_at_;
  grpc::Status status_;
};

// `count` stubs on distinct channels (distinct connections) to `endpoint`.
std::vector<std::unique_ptr<v1::Coordinator::Stub>> MakeStubs(
    const std::string& endpoint, int count);

// etcd for a benchmark's --etcd option: the cluster named by `endpoints`
// ("host:port,..."), or, when it is empty, kLocalEtcdNodes nodes of
// Debian's etcd started on loopback ports and stopped with this object.
// Either way gangs of thousands of members need etcd to accept an
// admission of that many writes in one transaction: a local cluster is
// started with the flags that allow it (kLocalEtcdFlags), a named one must
// have them (docs/ha.md).
inline constexpr int kLocalEtcdNodes = 3;
struct BenchEtcd {
  std::unique_ptr<test::EtcdTestServer> local;
  std::vector<std::string> endpoints;
  // "etcd (3 local nodes)" or "etcd (host:port,...)", for output lines.
  std::string description;
};
absl::StatusOr<BenchEtcd> StartBenchEtcd(const std::string& endpoints);

// The real coordinator (logic, state store, gRPC service, metrics observer)
// on 127.0.0.1:0; agents are not asked about ports (all free). State is a
// SQLite file in a temporary directory or, with `etcd_endpoints`, etcd
// under a prefix of its own.
inline constexpr int kBenchCpuHosts = 64;
class InProcessCoordinator {
 public:
  static std::unique_ptr<InProcessCoordinator> Start(
      uint32_t max_nodes, const std::vector<std::string>& etcd_endpoints = {});
  ~InProcessCoordinator();

  const std::string& endpoint() const { return endpoint_; }
  coordinator::Coordinator& core() { return *coordinator_; }

  // Start() with kBenchCpuHosts CPU hosts of kBenchCpuHosts member slots
  // each, named BenchHostName(0..): room for a 4,096-member gang.
  static std::unique_ptr<InProcessCoordinator> StartWithCpuHosts(
      uint32_t max_nodes, const std::vector<std::string>& etcd_endpoints = {});

 private:
  InProcessCoordinator() = default;

  std::string dir_;
  SystemClock clock_;
  std::unique_ptr<coordinator::PortChecker> ports_;
  // As in gdt-coord: metrics are always collected (served or not).
  std::unique_ptr<coordinator::CoordinatorMetrics> metrics_;
  std::unique_ptr<coordinator::Coordinator> coordinator_;
  std::unique_ptr<coordinator::CoordinatorService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string endpoint_;
};

// The name of the benchmarks' host `index`: "host-07".
std::string BenchHostName(int index);

// A JoinGang request for member `index` of a CPU gang of `size`.
v1::JoinGangRequest JoinRequestFor(int64_t pipeline, uint32_t size,
                                   uint32_t index);

}  // namespace gdt::bench

#endif  // GDT_BENCH_GRPC_BENCH_SUPPORT_H_
