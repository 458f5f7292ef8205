// HA (issue 11): gdt-coord replicas sharing state in a real etcd started on
// loopback, with real gRPC servers and clients.
#include "coordinator/ha_server.h"

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "common/clock.h"
#include "coordinator/etcd_test_server.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "rendezvous/coordinator_client.h"

namespace gdt::coordinator {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

// Polls `condition` every 20 ms until it holds or `timeout` passes.
bool WaitFor(const std::function<bool()>& condition,
             std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

v1::HostSpec CpuHost(const std::string& name) {
  v1::HostSpec host;
  host.set_name(name);
  host.set_address("10.1.0.1");
  host.set_agent_endpoint("127.0.0.1:1");
  host.set_cpu_slots(1);
  return host;
}

class HaServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<testing_support::EtcdTestServer>> etcd =
        testing_support::EtcdTestServer::Start();
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = std::move(*etcd);
    config_.listen_address = "127.0.0.1:0";
    config_.state_store = "etcd";
    config_.etcd_endpoints = etcd_->endpoints();
    // Short for fast tests, long enough for etcd fsyncs on a loaded machine.
    config_.lease_ttl_s = 3;
  }

  std::unique_ptr<HaServer> StartReplica() {
    absl::StatusOr<std::unique_ptr<HaServer>> server =
        HaServer::Start(config_, clock_);
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? std::move(*server) : nullptr;
  }

  SystemClock clock_;
  Config config_;
  std::unique_ptr<testing_support::EtcdTestServer> etcd_;
};

TEST_F(HaServerTest, StandbyRedirectsAndTakesOverWithTheState) {
  std::unique_ptr<HaServer> first = StartReplica();
  ASSERT_NE(first, nullptr);
  ASSERT_TRUE(WaitFor([&] { return first->leader(); }, 10s));
  std::unique_ptr<HaServer> second = StartReplica();
  ASSERT_NE(second, nullptr);
  EXPECT_FALSE(second->leader());

  // A client that knows only the standby is sent to the leader (once the
  // standby has seen who leads).
  rendezvous::CoordinatorClient via_standby(second->bound_address());
  ASSERT_TRUE(WaitFor(
      [&] { return via_standby.RegisterHost(CpuHost("cpu-01"), 5s).ok(); },
      10s));
  EXPECT_EQ(via_standby.current_endpoint(), first->bound_address());

  // A client that lists both replicas moves on when the leader goes.
  rendezvous::CoordinatorClient both(first->bound_address() + "," +
                                     second->bound_address());
  first->Shutdown();  // Resigns: the standby takes over at once.
  ASSERT_TRUE(WaitFor([&] { return second->leader(); }, 10s));

  absl::StatusOr<v1::GetStatusResponse> status =
      both.GetStatus(v1::GetStatusRequest(), 5s);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(both.current_endpoint(), second->bound_address());
  ASSERT_EQ(status->hosts_size(), 1);  // Registered with the old leader.
  EXPECT_EQ(status->hosts(0).host().name(), "cpu-01");
}

TEST_F(HaServerTest, StandbyNamesTheLeaderWhenRefusing) {
  std::unique_ptr<HaServer> first = StartReplica();
  ASSERT_NE(first, nullptr);
  ASSERT_TRUE(WaitFor([&] { return first->leader(); }, 10s));
  std::unique_ptr<HaServer> second = StartReplica();
  ASSERT_NE(second, nullptr);
  ASSERT_TRUE(WaitFor(
      [&] {
        // Asks through a raw stub so that nothing follows the redirect.
        auto stub = v1::Coordinator::NewStub(grpc::CreateChannel(
            second->bound_address(), grpc::InsecureChannelCredentials()));
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() + 2s);
        v1::GetStatusResponse response;
        grpc::Status status =
            stub->GetStatus(&context, v1::GetStatusRequest(), &response);
        return status.error_code() == grpc::StatusCode::UNAVAILABLE &&
               rendezvous::LeaderFromMessage(status.error_message()) ==
                   first->bound_address();
      },
      10s));
}

TEST_F(HaServerTest, LeaderCutOffFromEtcdStopsServingWithinItsLease) {
  std::unique_ptr<HaServer> leader = StartReplica();
  ASSERT_NE(leader, nullptr);
  ASSERT_TRUE(WaitFor([&] { return leader->leader(); }, 10s));

  etcd_->Pause();
  const auto cut = std::chrono::steady_clock::now();
  const bool stopped = WaitFor([&] { return leader->lost(); }, 10s);
  const auto took = std::chrono::steady_clock::now() - cut;
  etcd_->Resume();

  ASSERT_TRUE(stopped);
  EXPECT_FALSE(leader->leader());
  EXPECT_LT(took, std::chrono::seconds(config_.lease_ttl_s));
  // Nothing answers on its address any more.
  rendezvous::CoordinatorClient client(leader->bound_address());
  absl::StatusOr<v1::GetStatusResponse> status =
      client.GetStatus(v1::GetStatusRequest(), 2s);
  EXPECT_EQ(status.status().code(), absl::StatusCode::kUnavailable);
}

TEST(HaServerEtcdClusterTest, ReplicasRideOutTheLossOfAnEtcdMember) {
  absl::StatusOr<std::unique_ptr<testing_support::EtcdTestServer>> etcd =
      testing_support::EtcdTestServer::Start(/*nodes=*/3);
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  SystemClock clock;
  Config config;
  config.listen_address = "127.0.0.1:0";
  config.state_store = "etcd";
  config.etcd_endpoints = (*etcd)->endpoints();
  // Longer than etcd needs to elect a new raft leader (about 1 s here).
  config.lease_ttl_s = 4;
  absl::StatusOr<std::unique_ptr<HaServer>> first =
      HaServer::Start(config, clock);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(WaitFor([&] { return (*first)->leader(); }, 10s));
  absl::StatusOr<std::unique_ptr<HaServer>> second =
      HaServer::Start(config, clock);
  ASSERT_TRUE(second.ok()) << second.status();
  rendezvous::CoordinatorClient client((*first)->bound_address() + "," +
                                       (*second)->bound_address());
  ASSERT_TRUE(client.RegisterHost(CpuHost("cpu-01"), 5s).ok());

  // The member both replicas talk to first goes away: they move to the
  // others; the leader keeps its lease through more than a TTL.
  (*etcd)->StopNode(0);
  const auto stopped = std::chrono::steady_clock::now();
  ASSERT_TRUE(client.RegisterHost(CpuHost("cpu-02"), 10s).ok());
  ASSERT_TRUE(WaitFor(
      [&] {
        return std::chrono::steady_clock::now() - stopped >
               std::chrono::seconds(config.lease_ttl_s + 1);
      },
      20s));
  EXPECT_TRUE((*first)->leader());
  EXPECT_FALSE((*first)->lost());

  // And a takeover still works on the two members left.
  (*first)->Shutdown();
  ASSERT_TRUE(WaitFor([&] { return (*second)->leader(); }, 10s));
  absl::StatusOr<v1::GetStatusResponse> status =
      client.GetStatus(v1::GetStatusRequest(), 5s);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->hosts_size(), 2);
}

}  // namespace
}  // namespace gdt::coordinator
