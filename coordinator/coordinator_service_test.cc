#include "coordinator/coordinator_service.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/fake_clock.h"
#include "common/mutex.h"
#include "common/retry_after.h"
#include "common/sha256.h"
#include "coordinator/agent_port_checker.h"
#include "coordinator/metrics.h"
#include "coordinator/rpc_metrics.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "rendezvous/coordinator_client.h"
#include "rendezvous/metadata.h"
#include "testing/fake_agent.h"
#include "testing/scheduler_fixtures.h"

namespace gdt::coordinator {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

using test::FakeAgent;

// Starts a loopback server for `service`; with `observer`, every RPC is
// reported to it as gdt-coord's server does.
std::unique_ptr<grpc::Server> StartServer(grpc::Service* service,
                                          std::string* address,
                                          Observer* observer = nullptr) {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  if (observer != nullptr) AddRpcMetrics(builder, *observer);
  builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  *address = "127.0.0.1:" + std::to_string(port);
  return server;
}

class CoordinatorServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    agent_address_ = agent_.Serve();
    ASSERT_FALSE(agent_address_.empty());
    absl::StatusOr<std::unique_ptr<Coordinator>> coordinator =
        Coordinator::Create(clock_, test::MemoryStore(), options_, checker_);
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    coordinator_ = std::move(*coordinator);
    service_ = std::make_unique<CoordinatorService>(*coordinator_, 2s);
    service_->SetAdvertiseEndpoint("coord.example.com:7070");
    server_ = StartServer(service_.get(), &address_, &metrics_);
    ASSERT_NE(server_, nullptr);
    coordinator_->Start();
    client_ = std::make_unique<rendezvous::CoordinatorClient>(address_);
  }

  void TearDown() override {
    service_->EndAllStreams("test over");
    server_->Shutdown(std::chrono::system_clock::now() + 2s);
    coordinator_->Stop();
    agent_.Stop();
  }

  absl::Status RegisterHost(const std::string& name, int gpus) {
    v1::HostSpec host;
    host.set_name(name);
    host.set_address("10.1.0.1");
    host.set_agent_endpoint(agent_address_);
    host.set_network_interface("eth0");
    for (int i = 0; i < gpus; ++i) host.add_gpus()->set_index(i);
    return client_->RegisterHost(host, 5s).status();
  }

  static v1::JoinGangRequest JoinRequestFor(uint32_t index, uint32_t size) {
    v1::JoinGangRequest request;
    v1::GangKey* key = request.mutable_key();
    key->set_instance("https://gitlab.example.com");
    key->set_project_id(5);
    key->set_pipeline_id(77);
    key->set_group_name("train");
    key->set_size(size);
    request.set_member_index(index);
    request.set_job_id(100 + index);
    request.set_job_name("train " + std::to_string(index) + "/" +
                         std::to_string(size));
    request.set_gpus_per_node(2);
    request.set_procs_per_node(2);
    request.set_launcher(v1::LAUNCHER_TORCHRUN);
    return request;
  }

  // Waits (bounded) until GetStatus satisfies `done`.
  bool WaitForStatus(
      const std::function<bool(const v1::GetStatusResponse&)>& done) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < deadline) {
      absl::StatusOr<v1::GetStatusResponse> status =
          client_->GetStatus(v1::GetStatusRequest(), 5s);
      if (status.ok() && done(*status)) return true;
      std::this_thread::yield();
    }
    return false;
  }

  SchedulerOptions options_;  // A test's constructor may change them.
  FakeClock clock_;
  CoordinatorMetrics metrics_{clock_};  // Every RPC of server_.
  FakeAgent agent_{{29510}};
  std::string agent_address_;
  AgentPortChecker checker_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<CoordinatorService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  std::unique_ptr<rendezvous::CoordinatorClient> client_;
};

TEST_F(CoordinatorServiceTest, TwoMembersWaitThenGetRanksAndOneMasterPort) {
  ASSERT_TRUE(RegisterHost("gpu-01", 4).ok());
  const auto deadline = std::chrono::system_clock::now() + 20s;
  std::promise<v1::WaitingEvent> first_waiting;
  bool first_event = true;
  std::future<absl::StatusOr<v1::Assignment>> first =
      std::async(std::launch::async, [&] {
        return client_->JoinGang(
            JoinRequestFor(1, 2), deadline,
            [&](const v1::WaitingEvent& event) {
              if (first_event) first_waiting.set_value(event);
              first_event = false;
            },
            nullptr);
      });
  std::future<v1::WaitingEvent> waiting = first_waiting.get_future();
  ASSERT_EQ(waiting.wait_for(10s), std::future_status::ready);
  v1::WaitingEvent event = waiting.get();
  EXPECT_EQ(event.members_present(), 1u);
  EXPECT_THAT(event.missing_indices(), ElementsAre(2u));
  EXPECT_EQ(event.reason(),
            "gang train (pipeline 77): 1/2 members present, waiting for "
            "member 2 — no job picked up yet");

  absl::StatusOr<v1::Assignment> second =
      client_->JoinGang(JoinRequestFor(2, 2), deadline, nullptr, nullptr);

  ASSERT_EQ(first.wait_for(10s), std::future_status::ready);
  absl::StatusOr<v1::Assignment> first_assignment = first.get();
  ASSERT_TRUE(first_assignment.ok()) << first_assignment.status();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(first_assignment->node_rank(), 0u);
  EXPECT_EQ(second->node_rank(), 1u);
  EXPECT_EQ(first_assignment->master_port(), 29511u);  // 29510 is busy.
  EXPECT_EQ(second->master_port(), 29511u);
  EXPECT_EQ(second->gang_id(), "train-p5-pl77-n2");
  EXPECT_EQ(second->world_size(), 4u);
  EXPECT_EQ(second->coordinator_endpoint(), "coord.example.com:7070");
  EXPECT_EQ(second->agent_endpoint(), agent_address_);
  EXPECT_EQ(second->launcher(), v1::LAUNCHER_TORCHRUN);
  EXPECT_THAT(second->peers(), ElementsAre("10.1.0.1", "10.1.0.1"));
  EXPECT_THAT(first_assignment->gpu_indices(), ElementsAre(0u, 1u));
  EXPECT_THAT(second->gpu_indices(), ElementsAre(2u, 3u));

  // Joining again by job id returns the same assignment at once.
  absl::StatusOr<v1::Assignment> again =
      client_->JoinGang(JoinRequestFor(2, 2), deadline, nullptr, nullptr);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->master_port(), 29511u);
}

TEST_F(CoordinatorServiceTest, CompactAssignmentLeavesThePeerListToGetPeers) {
  ASSERT_TRUE(RegisterHost("gpu-01", 4).ok());
  const auto deadline = std::chrono::system_clock::now() + 20s;
  // Member 1 is an older executor (full assignment), member 2 a compact one.
  std::future<absl::StatusOr<v1::Assignment>> full =
      std::async(std::launch::async, [&] {
        return client_->JoinGang(JoinRequestFor(1, 2), deadline, nullptr,
                                 nullptr);
      });
  v1::JoinGangRequest compact_request = JoinRequestFor(2, 2);
  compact_request.set_compact_assignment(true);
  absl::StatusOr<v1::Assignment> compact =
      client_->JoinGang(compact_request, deadline, nullptr, nullptr);
  ASSERT_EQ(full.wait_for(10s), std::future_status::ready);
  absl::StatusOr<v1::Assignment> full_assignment = full.get();
  ASSERT_TRUE(full_assignment.ok()) << full_assignment.status();
  ASSERT_TRUE(compact.ok()) << compact.status();

  EXPECT_THAT(full_assignment->peers(), ElementsAre("10.1.0.1", "10.1.0.1"));
  EXPECT_THAT(compact->peers(), IsEmpty());
  EXPECT_EQ(compact->node_rank(), 1u);
  EXPECT_EQ(compact->world_size(), 4u);
  EXPECT_EQ(compact->master_addr(), "10.1.0.1");
  EXPECT_EQ(compact->peers_sha256(), Sha256Hex("10.1.0.1\n10.1.0.1"));
  EXPECT_EQ(full_assignment->peers_sha256(), compact->peers_sha256());

  v1::GetPeersRequest request;
  request.set_gang_id(compact->gang_id());
  request.set_epoch(compact->epoch());
  request.set_member_index(2);
  request.set_job_id(102);
  absl::StatusOr<v1::GetPeersResponse> peers = client_->GetPeers(request, 5s);
  ASSERT_TRUE(peers.ok()) << peers.status();
  EXPECT_THAT(peers->peers(), ElementsAre("10.1.0.1", "10.1.0.1"));
  EXPECT_EQ(peers->peers_sha256(), compact->peers_sha256());

  // Another job cannot pose as the member.
  request.set_job_id(999);
  EXPECT_EQ(client_->GetPeers(request, 5s).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(CoordinatorServiceTest, RunnerSlotDeadlockAbortsTheYoungerGang) {
  // One host whose runner has 2 slots, declared at registration.
  v1::HostSpec host;
  host.set_name("gpu-01");
  host.set_address("10.1.0.1");
  host.set_agent_endpoint(agent_address_);
  for (int i = 0; i < 4; ++i) host.add_gpus()->set_index(i);
  host.set_runner_slots(2);
  ASSERT_TRUE(client_->RegisterHost(host, 5s).ok());
  const auto deadline = std::chrono::system_clock::now() + 20s;
  v1::JoinGangRequest older = JoinRequestFor(1, 2);
  older.set_arrival_host("gpu-01");
  std::promise<void> older_waiting;
  bool first_event = true;
  std::future<absl::StatusOr<v1::Assignment>> older_join =
      std::async(std::launch::async, [&] {
        return client_->JoinGang(
            older, deadline,
            [&](const v1::WaitingEvent&) {
              if (first_event) older_waiting.set_value();
              first_event = false;
            },
            nullptr);
      });
  ASSERT_EQ(older_waiting.get_future().wait_for(10s),
            std::future_status::ready);

  // A member of another pipeline's gang takes the second slot: both gangs
  // miss a member and no slot is left, so the younger one is sent back.
  v1::JoinGangRequest younger = JoinRequestFor(1, 2);
  younger.mutable_key()->set_pipeline_id(78);
  younger.set_job_id(201);
  younger.set_arrival_host("gpu-01");
  absl::StatusOr<v1::Assignment> bounced =
      client_->JoinGang(younger, deadline, nullptr, nullptr);

  ASSERT_EQ(bounced.status().code(), absl::StatusCode::kAborted)
      << bounced.status();
  EXPECT_THAT(std::string(bounced.status().message()),
              HasSubstr("gang train-p5-pl78-n2 failed: sent back to GitLab "
                        "with 1/2 members present to break a runner-slot "
                        "deadlock"));
  EXPECT_THAT(std::string(bounced.status().message()),
              HasSubstr("covers runner_system_failure"));
  // The older gang still forms and runs once its second member comes.
  absl::StatusOr<v1::Assignment> second =
      client_->JoinGang(JoinRequestFor(2, 2), deadline, nullptr, nullptr);
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_EQ(older_join.wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(older_join.get().ok());
}

// Two executors of one job id (two local runs with the same pipeline and
// job ids): the second is refused at its join, forming or running, naming
// the job, and its leave changes nothing; the holder's own re-join passes.
TEST_F(CoordinatorServiceTest, SecondExecutorOfAJobIsRefusedAndLeavesNothing) {
  ASSERT_TRUE(RegisterHost("gpu-01", 4).ok());
  const auto deadline = std::chrono::system_clock::now() + 20s;
  rendezvous::CoordinatorClient first_executor(address_);
  first_executor.AddMetadata(rendezvous::kExecutorMetadata, "aaaa");
  rendezvous::CoordinatorClient second_executor(address_);
  second_executor.AddMetadata(rendezvous::kExecutorMetadata, "bbbb");
  std::promise<void> waiting;
  bool first_event = true;
  std::future<absl::StatusOr<v1::Assignment>> held =
      std::async(std::launch::async, [&] {
        return first_executor.JoinGang(
            JoinRequestFor(1, 2), deadline,
            [&](const v1::WaitingEvent&) {
              if (first_event) waiting.set_value();
              first_event = false;
            },
            nullptr);
      });
  ASSERT_EQ(waiting.get_future().wait_for(10s), std::future_status::ready);

  absl::StatusOr<v1::Assignment> forming = second_executor.JoinGang(
      JoinRequestFor(1, 2), deadline, nullptr, nullptr);
  ASSERT_EQ(forming.status().code(), absl::StatusCode::kAlreadyExists)
      << forming.status();
  EXPECT_EQ(forming.status().message(),
            "another executor already holds job 101 (member 1 of gang "
            "train-p5-pl77-n2, joined); this second executor of "
            "the same job id is refused and the gang goes on with the first");
  v1::LeaveGangRequest leave;
  *leave.mutable_key() = JoinRequestFor(1, 2).key();
  leave.set_member_index(1);
  leave.set_job_id(101);
  ASSERT_TRUE(second_executor.LeaveGang(leave, 5s).ok());

  // The first still holds member 1: the gang starts once member 2 comes.
  absl::StatusOr<v1::Assignment> second_member =
      client_->JoinGang(JoinRequestFor(2, 2), deadline, nullptr, nullptr);
  ASSERT_TRUE(second_member.ok()) << second_member.status();
  ASSERT_EQ(held.wait_for(10s), std::future_status::ready);
  ASSERT_TRUE(held.get().ok());

  absl::StatusOr<v1::Assignment> running = second_executor.JoinGang(
      JoinRequestFor(1, 2), deadline, nullptr, nullptr);
  ASSERT_EQ(running.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(running.status().message()),
              HasSubstr("another executor already holds job 101 (member 1 of "
                        "gang train-p5-pl77-n2, running on host gpu-01)"));
  ASSERT_TRUE(second_executor.LeaveGang(leave, 5s).ok());
  EXPECT_EQ(coordinator_->GetSnapshot(false).gangs.at(0).state,
            state::GangState::kRunning);
  // The holder joining again (its stream broke) gets its assignment again.
  absl::StatusOr<v1::Assignment> again =
      first_executor.JoinGang(JoinRequestFor(1, 2), deadline, nullptr, nullptr);
  EXPECT_TRUE(again.ok()) << again.status();
}

TEST_F(CoordinatorServiceTest, RejectedJoinsKeepTheirCodes) {
  ASSERT_TRUE(RegisterHost("gpu-01", 4).ok());
  const auto deadline = std::chrono::system_clock::now() + 10s;

  absl::StatusOr<v1::Assignment> too_big =
      client_->JoinGang(JoinRequestFor(1, 12), deadline, nullptr, nullptr);
  absl::StatusOr<v1::Assignment> bad_index =
      client_->JoinGang(JoinRequestFor(3, 2), deadline, nullptr, nullptr);

  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(too_big.status().message(),
            "gang train needs 12 nodes but this cluster allows at most 8 per "
            "job (max_nodes_per_job)");
  EXPECT_EQ(bad_index.status().code(), absl::StatusCode::kInvalidArgument);
  // A refused stream counts with its refusal's code.
  const std::string text = metrics_.Render(coordinator_->GetSnapshot(false));
  EXPECT_THAT(text, HasSubstr("gdt_rpcs_total{method=\"JoinGang\",code="
                              "\"FAILED_PRECONDITION\"} 1\n"))
      << text;
  EXPECT_THAT(text, HasSubstr("gdt_rpcs_total{method=\"JoinGang\",code="
                              "\"INVALID_ARGUMENT\"} 1\n"))
      << text;
}

// A project may join once, then once a second.
class JoinRateServiceTest : public CoordinatorServiceTest {
 protected:
  JoinRateServiceTest() {
    options_.join_rate_per_project = 1;
    options_.join_burst_per_project = 1;
  }
};

TEST_F(JoinRateServiceTest, ARateLimitedJoinCarriesTheRetryHint) {
  ASSERT_TRUE(RegisterHost("gpu-01", 4).ok());
  auto stub = v1::Coordinator::NewStub(
      grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  grpc::ClientContext first_context;
  v1::JoinGangRequest first_request = JoinRequestFor(1, 2);
  auto first = stub->JoinGang(&first_context, first_request);
  v1::JoinGangEvent event;
  ASSERT_TRUE(first->Read(&event));  // Joined: waiting for member 2.

  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + 10s);
  v1::JoinGangRequest request = JoinRequestFor(2, 2);
  auto second = stub->JoinGang(&context, request);
  EXPECT_FALSE(second->Read(&event));
  const grpc::Status status = second->Finish();

  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(status.error_message(),
              HasSubstr("project 5 joins faster than 1 members a second"));
  const auto& trailers = context.GetServerTrailingMetadata();
  auto hint = trailers.find(rendezvous::kRetryAfterMetadata);
  ASSERT_NE(hint, trailers.end());
  EXPECT_EQ(std::string(hint->second.data(), hint->second.size()), "1000");
  first_context.TryCancel();
  first->Finish().ok();
}

TEST_F(JoinRateServiceTest, TheClientWaitsOutTheRefusalAndJoins) {
  ASSERT_TRUE(RegisterHost("gpu-01", 4).ok());
  const auto deadline = std::chrono::system_clock::now() + 20s;
  std::future<absl::StatusOr<v1::Assignment>> first =
      std::async(std::launch::async, [&] {
        return client_->JoinGang(JoinRequestFor(1, 2), deadline, nullptr,
                                 nullptr);
      });
  ASSERT_TRUE(WaitForStatus([](const v1::GetStatusResponse& status) {
    return status.gangs_size() == 1 && status.gangs(0).members(0).present();
  }));
  std::vector<absl::Status> refusals;
  absl::StatusOr<v1::Assignment> second = client_->JoinGang(
      JoinRequestFor(2, 2), deadline, nullptr, [&](const absl::Status& status) {
        refusals.push_back(status);
        // The project's next join is let in a second later.
        clock_.Advance(1s);
      });

  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_EQ(refusals.size(), 1u);
  EXPECT_EQ(refusals[0].code(), absl::StatusCode::kResourceExhausted);
  // The wait: the coordinator's hint plus at most 0.5 s of jitter.
  ASSERT_TRUE(RetryAfter(refusals[0]).has_value());
  EXPECT_GE(*RetryAfter(refusals[0]), 1000ms);
  EXPECT_LE(*RetryAfter(refusals[0]), 1500ms);
  ASSERT_EQ(first.wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(first.get().ok());
}

TEST_F(CoordinatorServiceTest, CancelledStreamLeavesTheMemberAbsent) {
  auto stub = v1::Coordinator::NewStub(
      grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + 10s);
  std::unique_ptr<grpc::ClientReader<v1::JoinGangEvent>> reader =
      stub->JoinGang(&context, JoinRequestFor(1, 2));
  v1::JoinGangEvent event;
  ASSERT_TRUE(reader->Read(&event));
  ASSERT_TRUE(event.has_waiting());
  ASSERT_TRUE(WaitForStatus([](const v1::GetStatusResponse& status) {
    return status.gangs_size() == 1 && status.gangs(0).members(0).present();
  }));
  // An accepted stream is counted at its first event, while it stays open.
  EXPECT_THAT(metrics_.Render(coordinator_->GetSnapshot(false)),
              HasSubstr("gdt_rpcs_total{method=\"JoinGang\",code=\"OK\"} 1\n"));

  context.TryCancel();
  reader->Finish().ok();

  EXPECT_TRUE(WaitForStatus([](const v1::GetStatusResponse& status) {
    return status.gangs_size() == 1 && !status.gangs(0).members(0).present();
  }));
}

TEST_F(CoordinatorServiceTest, HeartbeatOfUnknownHostAsksToRegister) {
  absl::StatusOr<bool> unknown = client_->Heartbeat("gpu-09", 5s);
  ASSERT_TRUE(RegisterHost("gpu-09", 1).ok());
  absl::StatusOr<bool> known = client_->Heartbeat("gpu-09", 5s);

  ASSERT_TRUE(unknown.ok()) << unknown.status();
  EXPECT_TRUE(*unknown);
  ASSERT_TRUE(known.ok()) << known.status();
  EXPECT_FALSE(*known);
}

TEST_F(CoordinatorServiceTest, LeavingReleasesTheLeases) {
  ASSERT_TRUE(RegisterHost("gpu-01", 2).ok());
  const auto deadline = std::chrono::system_clock::now() + 10s;
  absl::StatusOr<v1::Assignment> assignment =
      client_->JoinGang(JoinRequestFor(1, 1), deadline, nullptr, nullptr);
  ASSERT_TRUE(assignment.ok()) << assignment.status();
  v1::ReportExitRequest exit;
  exit.set_gang_id(assignment->gang_id());
  exit.set_epoch(assignment->epoch());
  exit.set_member_index(1);
  exit.set_job_id(101);
  exit.set_exit_code(0);
  ASSERT_TRUE(client_->ReportExit(exit, 5s).ok());

  v1::LeaveGangRequest leave;
  *leave.mutable_key() = JoinRequestFor(1, 1).key();
  leave.set_member_index(1);
  leave.set_job_id(101);
  ASSERT_TRUE(client_->LeaveGang(leave, 5s).ok());
  ASSERT_TRUE(client_->LeaveGang(leave, 5s).ok());  // Idempotent.

  v1::GetStatusRequest all;
  all.set_include_finished(true);
  absl::StatusOr<v1::GetStatusResponse> status = client_->GetStatus(all, 5s);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->hosts(0).leased_gpus_size(), 0);
  ASSERT_EQ(status->gangs_size(), 1);
  EXPECT_EQ(status->gangs(0).state(), v1::GANG_STATE_DONE);
  EXPECT_EQ(status->gangs(0).members(0).exit_code(), 0);
}

TEST_F(CoordinatorServiceTest, WatchGangFansOutTheFirstFailure) {
  ASSERT_TRUE(RegisterHost("gpu-01", 4).ok());
  const auto deadline = std::chrono::system_clock::now() + 20s;
  std::future<absl::StatusOr<v1::Assignment>> second =
      std::async(std::launch::async, [&] {
        return client_->JoinGang(JoinRequestFor(2, 2), deadline, nullptr,
                                 nullptr);
      });
  absl::StatusOr<v1::Assignment> first =
      client_->JoinGang(JoinRequestFor(1, 2), deadline, nullptr, nullptr);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.get().ok());

  // Member 1 watches while its script runs; the first event says so.
  v1::WatchGangRequest watch;
  watch.set_gang_id(first->gang_id());
  watch.set_epoch(first->epoch());
  watch.set_member_index(1);
  watch.set_job_id(101);
  rendezvous::CallCanceller canceller;
  std::promise<void> running;
  std::future<absl::StatusOr<v1::WatchGangEvent>> watched =
      std::async(std::launch::async, [&] {
        bool first_event = true;
        return client_->WatchGang(
            watch, deadline,
            [&](const v1::WatchGangEvent& event) {
              if (first_event && event.has_running()) running.set_value();
              first_event = false;
            },
            nullptr, canceller);
      });
  ASSERT_EQ(running.get_future().wait_for(10s), std::future_status::ready);

  v1::ReportExitRequest exit;
  exit.set_gang_id(first->gang_id());
  exit.set_epoch(first->epoch());
  exit.set_member_index(2);
  exit.set_job_id(102);
  exit.set_exit_code(3);
  ASSERT_TRUE(client_->ReportExit(exit, 5s).ok());

  absl::StatusOr<v1::WatchGangEvent> event = watched.get();
  ASSERT_TRUE(event.ok()) << event.status();
  ASSERT_TRUE(event->has_failed());
  const std::string reason = event->failed().reason();
  EXPECT_THAT(reason, HasSubstr("failed: member 2/2 (job 102 on host gpu-01) "
                                "exited 3 at "));
  EXPECT_EQ(event->failed().member_index(), 2u);
  EXPECT_EQ(event->failed().job_id(), 102);

  // A watch opened later gets the same line at once.
  watch.set_member_index(2);
  watch.set_job_id(102);
  absl::StatusOr<v1::WatchGangEvent> late =
      client_->WatchGang(watch, deadline, nullptr, nullptr, canceller);
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_EQ(late->failed().reason(), reason);

  absl::StatusOr<v1::GetStatusResponse> status =
      client_->GetStatus(v1::GetStatusRequest(), 5s);
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_EQ(status->gangs_size(), 1);
  EXPECT_EQ(status->gangs(0).state(), v1::GANG_STATE_FAILED);
  EXPECT_EQ(status->gangs(0).reason(), reason);
}

TEST_F(CoordinatorServiceTest, WatchGangRejectsStrangersAndCanBeCancelled) {
  ASSERT_TRUE(RegisterHost("gpu-01", 2).ok());
  const auto deadline = std::chrono::system_clock::now() + 20s;
  absl::StatusOr<v1::Assignment> assignment =
      client_->JoinGang(JoinRequestFor(1, 1), deadline, nullptr, nullptr);
  ASSERT_TRUE(assignment.ok()) << assignment.status();
  v1::WatchGangRequest watch;
  watch.set_gang_id(assignment->gang_id());
  watch.set_epoch(assignment->epoch());
  watch.set_member_index(1);
  watch.set_job_id(999);
  rendezvous::CallCanceller canceller;

  EXPECT_EQ(client_->WatchGang(watch, deadline, nullptr, nullptr, canceller)
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);

  watch.set_job_id(101);
  std::promise<void> running;
  std::future<absl::StatusOr<v1::WatchGangEvent>> watched =
      std::async(std::launch::async, [&] {
        return client_->WatchGang(
            watch, deadline,
            [&](const v1::WatchGangEvent&) { running.set_value(); }, nullptr,
            canceller);
      });
  ASSERT_EQ(running.get_future().wait_for(10s), std::future_status::ready);
  canceller.Cancel();
  EXPECT_EQ(watched.get().status().code(), absl::StatusCode::kCancelled);
}

TEST_F(CoordinatorServiceTest, HostsCanBeDrainedUndrainedAndRemoved) {
  ASSERT_TRUE(RegisterHost("gpu-01", 2).ok());

  ASSERT_TRUE(client_->SetHostDrained("gpu-01", true, 5s).ok());
  absl::StatusOr<v1::GetStatusResponse> status =
      client_->GetStatus(v1::GetStatusRequest(), 5s);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->hosts(0).state(), v1::HOST_STATE_DRAINED);
  // Registering again (an agent restart) keeps the drain.
  ASSERT_TRUE(RegisterHost("gpu-01", 2).ok());
  status = client_->GetStatus(v1::GetStatusRequest(), 5s);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->hosts(0).state(), v1::HOST_STATE_DRAINED);

  ASSERT_TRUE(client_->SetHostDrained("gpu-01", false, 5s).ok());
  status = client_->GetStatus(v1::GetStatusRequest(), 5s);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->hosts(0).state(), v1::HOST_STATE_UP);

  absl::Status unknown = client_->SetHostDrained("gpu-09", true, 5s);
  EXPECT_EQ(unknown.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(unknown.message(), "unknown host gpu-09");
  EXPECT_EQ(client_->RemoveHost("gpu-09", 5s).code(),
            absl::StatusCode::kNotFound);

  ASSERT_TRUE(client_->RemoveHost("gpu-01", 5s).ok());
  status = client_->GetStatus(v1::GetStatusRequest(), 5s);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->hosts_size(), 0);
}

TEST_F(CoordinatorServiceTest, EveryRpcIsTimedAndCountedEvenWhenRefused) {
  ASSERT_TRUE(RegisterHost("gpu-01", 2).ok());
  // A ReportExit with a host token nobody issued is refused before it
  // reaches the scheduler: an early return that must still be counted.
  auto stub = v1::Coordinator::NewStub(
      grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + 5s);
  context.AddMetadata(rendezvous::kHostTokenMetadata, "not-a-token");
  v1::ReportExitRequest request;
  request.set_gang_id("g-1");
  v1::ReportExitResponse response;
  const grpc::Status refused = stub->ReportExit(&context, request, &response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::PERMISSION_DENIED)
      << refused.error_message();
  // An operator RPC, which no handler used to time.
  grpc::ClientContext remove_context;
  remove_context.set_deadline(std::chrono::system_clock::now() + 5s);
  v1::RemoveHostRequest remove;
  remove.set_host_name("gpu-01");
  v1::RemoveHostResponse removed;
  ASSERT_TRUE(stub->RemoveHost(&remove_context, remove, &removed).ok());

  const std::string text = metrics_.Render(coordinator_->GetSnapshot(false));
  EXPECT_THAT(text, HasSubstr("gdt_rpcs_total{method=\"ReportExit\",code="
                              "\"PERMISSION_DENIED\"} 1\n"))
      << text;
  EXPECT_THAT(text, HasSubstr("gdt_rpc_duration_seconds_count{method="
                              "\"ReportExit\"} 1\n"))
      << text;
  EXPECT_THAT(text, HasSubstr("gdt_rpcs_total{method=\"RemoveHost\",code="
                              "\"OK\"} 1\n"))
      << text;
  EXPECT_THAT(text, HasSubstr("gdt_rpcs_total{method=\"RegisterHost\",code="
                              "\"OK\"} 1\n"))
      << text;
}

// A host at every bound RegisterHost accepts (scheduler.h).
HostView LargestHost(int i) {
  HostView view;
  state::HostSpec& spec = view.host.spec;
  spec.name = absl::StrCat(i, "-", std::string(kMaxNameBytes, 'h'))
                  .substr(0, kMaxNameBytes);
  spec.address = std::string(kMaxNameBytes, 'a');
  spec.agent_endpoint = std::string(kMaxNameBytes, 'e');
  spec.network_interface = std::string(kMaxNameBytes, 'n');
  for (size_t l = 0; l < kMaxHostLabels; ++l) {
    spec.labels[absl::StrCat(l, std::string(kMaxLabelBytes, 'k'))
                    .substr(0, kMaxLabelBytes)] =
        std::string(kMaxLabelBytes, 'v');
  }
  for (size_t g = 0; g < kMaxHostGpus; ++g) {
    spec.gpus.push_back({static_cast<uint32_t>(g),
                         std::string(kMaxLabelBytes, 'u'),
                         std::string(kMaxLabelBytes, 'm'), 80ull << 30});
    view.leased_gpus.push_back(static_cast<uint32_t>(g));
  }
  return view;
}

// A forming gang at every bound a join accepts, with max_nodes_per_job's
// default of members.
state::Gang LargestGang(int i) {
  state::Gang gang;
  gang.key.instance = std::string(kMaxInstanceBytes, 'i');
  gang.key.group_name = absl::StrCat(i, "-", std::string(kMaxNameBytes, 'g'))
                            .substr(0, kMaxNameBytes);
  gang.key.size = SchedulerOptions{}.max_nodes_per_job;
  gang.id = absl::StrCat(gang.key.group_name, "-p1-pl", i);
  gang.sequence = i;
  gang.reason = std::string(300, 'r');
  for (uint32_t m = 1; m <= gang.key.size; ++m) {
    state::Member& member = gang.members[m];
    member.job_id = 1'000'000'000'000 + i;
    member.job_name = std::string(kMaxJobNameBytes, 'j');
    member.host_name = std::string(kMaxNameBytes, 'h');
  }
  return gang;
}

// 10,000 hosts and 5,000 forming gangs, each as large as a coordinator
// accepts, are far beyond one 4 MiB message; the pages stay near 1 MiB and
// together hold every host and gang once, in order.
TEST(StatusPageTest, ManyLargeHostsAndGangsComeInBoundedPages) {
  Snapshot snapshot;
  for (int i = 0; i < 10'000; ++i) snapshot.hosts.push_back(LargestHost(i));
  std::sort(snapshot.hosts.begin(), snapshot.hosts.end(),
            [](const HostView& a, const HostView& b) {
              return a.host.spec.name < b.host.spec.name;
            });
  for (int i = 0; i < 5'000; ++i) snapshot.gangs.push_back(LargestGang(i));
  snapshot.live_gangs = snapshot.gangs.size();
  EXPECT_GT(StatusResponseOf(snapshot).ByteSizeLong(), 16u << 20);

  std::vector<std::string> hosts;
  std::vector<std::string> gangs;
  std::string token;
  int pages = 0;
  do {
    absl::StatusOr<v1::GetStatusResponse> page =
        StatusPage(snapshot, /*page_size=*/0, token);
    ASSERT_TRUE(page.ok()) << page.status();
    EXPECT_LE(page->ByteSizeLong(), kStatusPageBytes);
    EXPECT_GT(page->hosts_size() + page->gangs_size(), 0);
    for (const v1::HostStatus& host : page->hosts()) {
      hosts.push_back(host.host().name());
    }
    for (const v1::GangStatus& gang : page->gangs()) {
      gangs.push_back(gang.gang_id());
    }
    token = page->next_page_token();
    ASSERT_LT(++pages, 1000);
  } while (!token.empty());
  ASSERT_EQ(hosts.size(), snapshot.hosts.size());
  ASSERT_EQ(gangs.size(), snapshot.gangs.size());
  for (size_t i = 0; i < hosts.size(); ++i) {
    EXPECT_EQ(hosts[i], snapshot.hosts[i].host.spec.name);
  }
  for (size_t i = 0; i < gangs.size(); ++i) {
    EXPECT_EQ(gangs[i], snapshot.gangs[i].id);
  }
}

// A page size bounds the items; a token names the last item shown, so a
// host or gang that goes away between pages does not shift the rest; a token
// no page carried is refused.
TEST(StatusPageTest, TokensResumeAfterTheLastItemShown) {
  Snapshot snapshot;
  for (const char* name : {"a", "b", "c"}) {
    HostView view;
    view.host.spec.name = name;
    snapshot.hosts.push_back(view);
  }
  for (int i = 1; i <= 4; ++i) {
    state::Gang gang;
    gang.id = absl::StrCat("live-", i);
    gang.sequence = i;
    snapshot.gangs.push_back(gang);
  }
  snapshot.live_gangs = 4;
  for (int i = 9; i >= 7; --i) {  // Finished ones, most recent first.
    state::Gang gang;
    gang.id = absl::StrCat("done-", i);
    gang.sequence = i;
    snapshot.gangs.push_back(gang);
  }
  absl::StatusOr<v1::GetStatusResponse> first = StatusPage(snapshot, 2, "");
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->hosts_size(), 2);
  EXPECT_EQ(first->next_page_token(), "h:b");
  snapshot.hosts.erase(snapshot.hosts.begin());  // "a" went away.
  absl::StatusOr<v1::GetStatusResponse> second =
      StatusPage(snapshot, 2, first->next_page_token());
  ASSERT_TRUE(second.ok());
  ASSERT_EQ(second->hosts_size(), 1);
  EXPECT_EQ(second->hosts(0).host().name(), "c");
  ASSERT_EQ(second->gangs_size(), 1);
  EXPECT_EQ(second->gangs(0).gang_id(), "live-1");
  snapshot.gangs.erase(snapshot.gangs.begin());  // live-1 finished.
  --snapshot.live_gangs;
  absl::StatusOr<v1::GetStatusResponse> third =
      StatusPage(snapshot, 4, second->next_page_token());
  ASSERT_TRUE(third.ok());
  ASSERT_EQ(third->gangs_size(), 4);
  EXPECT_EQ(third->gangs(0).gang_id(), "live-2");
  EXPECT_EQ(third->gangs(3).gang_id(), "done-9");
  EXPECT_EQ(third->next_page_token(), "f:9");
  absl::StatusOr<v1::GetStatusResponse> last =
      StatusPage(snapshot, 4, third->next_page_token());
  ASSERT_TRUE(last.ok());
  ASSERT_EQ(last->gangs_size(), 2);
  EXPECT_EQ(last->gangs(1).gang_id(), "done-7");
  EXPECT_EQ(last->next_page_token(), "");

  for (const char* bad : {"x", "x:1", "l:one", "f:", "h"}) {
    EXPECT_EQ(StatusPage(snapshot, 0, bad).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

}  // namespace
}  // namespace gdt::coordinator
