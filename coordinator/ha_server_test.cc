// HA: gdt-coord replicas sharing state in a real etcd started on
// loopback, with real gRPC servers and clients.
#include "coordinator/ha_server.h"

#include <chrono>
#include <cstdlib>
#include <future>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "rendezvous/coordinator_client.h"
#include "state/etcd_client.h"
#include "state/etcd_store.h"
#include "testing/etcd_test_server.h"
#include "testing/loopback_server.h"
#include "testing/wait.h"

namespace gdt::coordinator {
namespace {

using namespace std::chrono_literals;
using ::gdt::test::WaitFor;
using ::testing::HasSubstr;

v1::HostSpec CpuHost(const std::string& name) {
  v1::HostSpec host;
  host.set_name(name);
  host.set_address("10.1.0.1");
  host.set_agent_endpoint("127.0.0.1:1");
  host.set_cpu_slots(1);
  return host;
}

// A real agent endpoint that finds every master port free.
class FreePortsAgent final : public v1::Agent::Service {
 public:
  grpc::Status CheckPort(grpc::ServerContext* /*context*/,
                         const v1::CheckPortRequest* /*request*/,
                         v1::CheckPortResponse* response) override {
    response->set_free(true);
    return grpc::Status::OK;
  }
};

v1::JoinGangRequest OneMemberGang(int64_t pipeline) {
  v1::JoinGangRequest request;
  request.mutable_key()->set_instance("https://gitlab.example.com");
  request.mutable_key()->set_project_id(5);
  request.mutable_key()->set_pipeline_id(pipeline);
  request.mutable_key()->set_group_name("train");
  request.mutable_key()->set_size(1);
  request.set_member_index(1);
  request.set_job_id(pipeline * 10);
  request.set_job_name("train 1/1");
  request.set_procs_per_node(1);
  return request;
}

class HaServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<test::EtcdTestServer>> etcd =
        test::EtcdTestServer::Start();
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
  std::unique_ptr<test::EtcdTestServer> etcd_;
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

TEST_F(HaServerTest, WaitingGangsKeepTheirOrderAcrossAFailover) {
  FreePortsAgent agent;
  gdt::test::LoopbackServer loopback = gdt::test::ServeOnLoopback(&agent);
  ASSERT_NE(loopback.server, nullptr);
  std::unique_ptr<grpc::Server> agent_server = std::move(loopback.server);
  std::unique_ptr<HaServer> first = StartReplica();
  ASSERT_NE(first, nullptr);
  ASSERT_TRUE(WaitFor([&] { return first->leader(); }, 10s));
  std::unique_ptr<HaServer> second = StartReplica();
  ASSERT_NE(second, nullptr);
  rendezvous::CoordinatorClient client(first->bound_address() + "," +
                                       second->bound_address());
  v1::HostSpec host = CpuHost("cpu-01");  // One slot: one gang at a time.
  host.set_agent_endpoint(loopback.address);
  ASSERT_TRUE(client.RegisterHost(host, 5s).ok());
  const auto deadline = std::chrono::system_clock::now() + 60s;
  auto join = [&](int64_t pipeline) {
    return std::async(std::launch::async, [&client, deadline, pipeline] {
      return client.JoinGang(OneMemberGang(pipeline), deadline, nullptr,
                             nullptr);
    });
  };
  auto finish = [&](const v1::Assignment& assignment, int64_t pipeline) {
    v1::ReportExitRequest exit;
    exit.set_gang_id(assignment.gang_id());
    exit.set_epoch(assignment.epoch());
    exit.set_member_index(1);
    exit.set_job_id(pipeline * 10);
    exit.set_exit_code(0);
    ASSERT_TRUE(client.ReportExit(exit, 5s).ok());
    v1::LeaveGangRequest leave;
    *leave.mutable_key() = OneMemberGang(pipeline).key();
    leave.set_member_index(1);
    leave.set_job_id(pipeline * 10);
    ASSERT_TRUE(client.LeaveGang(leave, 5s).ok());
  };
  // Present members of forming gangs, by pipeline, as the leader sees them.
  auto waiting = [&] {
    std::vector<int64_t> pipelines;
    absl::StatusOr<v1::GetStatusResponse> status =
        client.GetStatus(v1::GetStatusRequest(), 2s);
    if (!status.ok()) return pipelines;
    for (const v1::GangStatus& gang : status->gangs()) {
      if (gang.state() == v1::GANG_STATE_FORMING && gang.members_size() == 1 &&
          gang.members(0).present()) {
        pipelines.push_back(gang.key().pipeline_id());
      }
    }
    return pipelines;
  };

  std::future<absl::StatusOr<v1::Assignment>> running = join(1);
  ASSERT_EQ(running.wait_for(20s), std::future_status::ready);
  absl::StatusOr<v1::Assignment> running_assignment = running.get();
  ASSERT_TRUE(running_assignment.ok()) << running_assignment.status();
  std::future<absl::StatusOr<v1::Assignment>> older = join(2);
  ASSERT_TRUE(WaitFor([&] { return waiting().size() == 1; }, 10s));
  std::future<absl::StatusOr<v1::Assignment>> newer = join(3);
  ASSERT_TRUE(WaitFor([&] { return waiting().size() == 2; }, 10s));

  first->Shutdown();
  ASSERT_TRUE(WaitFor([&] { return second->leader(); }, 10s));
  // Both waiting members re-join the new leader, in any order.
  ASSERT_TRUE(WaitFor([&] { return waiting().size() == 2; }, 20s));
  finish(*running_assignment, 1);

  // The older waiting gang gets the slot; the newer one still waits.
  ASSERT_EQ(older.wait_for(20s), std::future_status::ready);
  absl::StatusOr<v1::Assignment> older_assignment = older.get();
  ASSERT_TRUE(older_assignment.ok()) << older_assignment.status();
  EXPECT_THAT(waiting(), ::testing::ElementsAre(3));
  finish(*older_assignment, 2);
  ASSERT_EQ(newer.wait_for(20s), std::future_status::ready);
  absl::StatusOr<v1::Assignment> newer_assignment = newer.get();
  ASSERT_TRUE(newer_assignment.ok()) << newer_assignment.status();
  EXPECT_NE(newer_assignment->gang_id(), older_assignment->gang_id());
  agent_server->Shutdown(std::chrono::system_clock::now() + 1s);
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
  absl::StatusOr<std::unique_ptr<test::EtcdTestServer>> etcd =
      test::EtcdTestServer::Start(/*nodes=*/3);
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

// Fills the store of cluster "default" with `finished` done gangs of two
// members and `running` running ones on host gpu-01, as EtcdStore writes
// them: one of each is saved through the store, the rest are copies under
// other ids written many keys to a transaction.
void FillWithGangs(const std::vector<std::string>& endpoints, int finished,
                   int running) {
  absl::StatusOr<std::unique_ptr<state::EtcdClient>> created =
      state::EtcdClient::Create(endpoints, 10s);
  ASSERT_TRUE(created.ok()) << created.status();
  std::shared_ptr<state::EtcdClient> client = std::move(*created);
  absl::StatusOr<std::unique_ptr<state::EtcdStore>> store =
      state::EtcdStore::Open(client, "default");
  ASSERT_TRUE(store.ok()) << store.status();
  state::Host host;
  host.spec.name = "gpu-01";
  host.spec.address = "10.1.0.1";
  host.spec.agent_endpoint = "127.0.0.1:1";
  for (uint32_t gpu = 0; gpu < 8; ++gpu) {
    host.spec.gpus.push_back(state::GpuInfo{gpu, "GPU-" + std::to_string(gpu),
                                            "H100", uint64_t{80} << 30});
  }
  ASSERT_TRUE((*store)->SaveHost(host).ok());
  const std::string prefix = state::EtcdStore::Prefix("default");
  nlohmann::json ops = nlohmann::json::array();
  auto flush = [&] {
    ASSERT_TRUE(
        client->Txn(nlohmann::json::array(), ops, nlohmann::json::array())
            .ok());
    ops = nlohmann::json::array();
  };
  for (const bool is_running : {false, true}) {
    state::Gang gang;
    gang.id = is_running ? "template-running" : "template-done";
    gang.key.instance = "https://gitlab.example.com";
    gang.key.project_id = 5;
    gang.key.pipeline_id = 1;
    gang.key.group_name = "train";
    gang.key.size = 2;
    gang.state =
        is_running ? state::GangState::kRunning : state::GangState::kDone;
    gang.master_host = "gpu-01";
    gang.master_addr = "10.1.0.1";
    gang.master_port = 29500;
    gang.created_unix_ms = 1'700'000'000'000;
    for (uint32_t index : {1u, 2u}) {
      state::Member& member = gang.members[index];
      member.index = index;
      member.job_id = 1000 + index;
      member.job_name = "train " + std::to_string(index) + "/2";
      member.gpus_per_node = 1;
      member.procs_per_node = 1;
      member.arrival_host = "gpu-01";
      member.job_timeout_seconds = 3600;
      member.node_rank = static_cast<int32_t>(index - 1);
      member.host_name = "gpu-01";
      member.exit_code = is_running ? -1 : 0;
    }
    ASSERT_TRUE((*store)->SaveGang(gang).ok());
    absl::StatusOr<std::vector<state::EtcdKeyValue>> saved = client->Range(
        prefix + "gangs/" + gang.id, /*prefix=*/false, /*keys_only=*/false);
    ASSERT_TRUE(saved.ok() && saved->size() == 1u);
    absl::StatusOr<std::vector<state::EtcdKeyValue>> roster = client->Range(
        prefix + "rosters/" + gang.id, /*prefix=*/false, /*keys_only=*/false);
    ASSERT_TRUE(roster.ok() && roster->size() == 1u);
    ops.push_back(state::EtcdClient::Delete(prefix + "gangs/" + gang.id));
    ops.push_back(state::EtcdClient::Delete(prefix + "rosters/" + gang.id));
    flush();
    const int count = is_running ? running : finished;
    for (int i = 0; i < count; ++i) {
      const std::string id = absl::StrCat(gang.id, "-", i);
      nlohmann::json record = nlohmann::json::parse(saved->front().value);
      record["id"] = id;
      record["pipeline_id"] = 100'000 * (is_running ? 2 : 1) + i;
      record["sequence"] = 100'000 * (is_running ? 2 : 1) + i;
      nlohmann::json members = nlohmann::json::parse(roster->front().value);
      members["gang_id"] = id;
      if (is_running) {
        // One GPU per member, and a port of its own.
        members["members"][0][11] = nlohmann::json::array({2 * i});
        members["members"][1][11] = nlohmann::json::array({2 * i + 1});
        members["port"]["port"] = 29500 + i;
        record["master_port"] = 29500 + i;
      }
      ops.push_back(
          state::EtcdClient::Put(prefix + "gangs/" + id, record.dump()));
      ops.push_back(
          state::EtcdClient::Put(prefix + "rosters/" + id, members.dump()));
      if (ops.size() >= 120) flush();
    }
    if (!ops.empty()) flush();
  }
}

// A takeover of a store holding thousands of finished gangs, whose load
// takes longer than the part of the TTL a leader may go without renewing
// (seconds in this build): the new leader keeps its lease while it loads,
// then serves the running gangs and their leases. GDT_TEST_FINISHED_GANGS
// sets the number (docs/ha.md has the figures for 20,000).
TEST_F(HaServerTest, TakeoverOfAStoreWithThousandsOfFinishedGangs) {
  int kFinished = 5'000;
  if (const char* env = std::getenv("GDT_TEST_FINISHED_GANGS")) {
    kFinished = std::atoi(env);
  }
  constexpr int kRunning = 4;
  // Renewals get a second each; the load still takes several TTLs here.
  config_.lease_ttl_s = 5;
  const auto filling = std::chrono::steady_clock::now();
  FillWithGangs(etcd_->endpoints(), kFinished, kRunning);
  std::cout << "filled " << kFinished << " finished gangs in "
            << std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::steady_clock::now() - filling)
                   .count()
            << " ms\n";
  std::unique_ptr<HaServer> first = StartReplica();
  ASSERT_NE(first, nullptr);
  ASSERT_TRUE(WaitFor([&] { return first->leader() || first->lost(); }, 300s));
  ASSERT_TRUE(first->leader()) << "the first replica lost its lease loading";
  std::unique_ptr<HaServer> second = StartReplica();
  ASSERT_NE(second, nullptr);

  const auto resigned = std::chrono::steady_clock::now();
  first->Shutdown();
  ASSERT_TRUE(
      WaitFor([&] { return second->leader() || second->lost(); }, 300s));
  const auto took = std::chrono::steady_clock::now() - resigned;
  std::cout
      << "takeover with " << kFinished << " finished gangs: "
      << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
      << " ms (lease TTL " << config_.lease_ttl_s << " s)\n";
  ASSERT_TRUE(second->leader()) << "the new leader lost its lease loading";
  // It keeps leading past a TTL, and serves the running gangs.
  const auto led = std::chrono::steady_clock::now();
  ASSERT_TRUE(WaitFor(
      [&] {
        return second->lost() ||
               std::chrono::steady_clock::now() - led >
                   std::chrono::seconds(config_.lease_ttl_s + 1);
      },
      20s));
  EXPECT_FALSE(second->lost());
  rendezvous::CoordinatorClient client(second->bound_address());
  absl::StatusOr<v1::GetStatusResponse> status =
      client.GetStatus(v1::GetStatusRequest(), 10s);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->gangs_size(), kRunning);
  ASSERT_EQ(status->hosts_size(), 1);
  EXPECT_EQ(status->hosts(0).leased_gpus_size(), 2 * kRunning);
}

// A replica whose lease goes while it loads a large state does not start
// serving: it ends as a deposed leader does (lost), and another replica
// takes over.
TEST_F(HaServerTest, ALeaseLostWhileLoadingEndsThePromotion) {
  FillWithGangs(etcd_->endpoints(), 5'000, 1);
  absl::StatusOr<std::unique_ptr<state::EtcdClient>> created =
      state::EtcdClient::Create(etcd_->endpoints(), 5s);
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<state::EtcdClient> client = std::move(*created);
  const std::string leader_key = state::EtcdStore::Prefix("default") + "leader";
  std::unique_ptr<HaServer> first = StartReplica();
  ASSERT_NE(first, nullptr);
  // It won the election (the key is there) and is loading (not serving).
  int64_t lease = 0;
  ASSERT_TRUE(WaitFor(
      [&] {
        absl::StatusOr<std::vector<state::EtcdKeyValue>> kvs =
            client->Range(leader_key, /*prefix=*/false, /*keys_only=*/true);
        if (kvs.ok() && kvs->size() == 1) lease = kvs->front().lease;
        return lease != 0;
      },
      20s));
  ASSERT_FALSE(first->leader()) << "loaded too fast to test this";

  ASSERT_TRUE(client->RevokeLease(lease).ok());

  bool served = false;
  ASSERT_TRUE(WaitFor(
      [&] {
        served = served || first->leader();
        return first->lost();
      },
      120s));
  EXPECT_FALSE(served) << "it served after its lease was gone";
  EXPECT_FALSE(first->leader());
  std::unique_ptr<HaServer> second = StartReplica();
  ASSERT_NE(second, nullptr);
  ASSERT_TRUE(
      WaitFor([&] { return second->leader() || second->lost(); }, 120s));
  EXPECT_TRUE(second->leader());
}

}  // namespace
}  // namespace gdt::coordinator
