// Checkpoint manifest records over the wire: a real gdt-coord
// server (SQLite state in a temp dir) on 127.0.0.1:0, a gang admitted through
// JoinGang, retried into epoch 2, and the real CheckpointClient.
#include "coordinator/checkpoint_service.h"

#include <chrono>

#include "common/clock.h"
#include "coordinator/server.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "rendezvous/checkpoint_client.h"
#include "rendezvous/coordinator_client.h"
#include "testing/loopback_server.h"
#include "testing/scheduler_fixtures.h"
#include "testing/temp_dir.h"

namespace gdt::coordinator {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::HasSubstr;

class FreePortAgent final : public v1::Agent::Service {
  grpc::Status CheckPort(grpc::ServerContext* context,
                         const v1::CheckPortRequest* request,
                         v1::CheckPortResponse* response) override {
    response->set_free(true);
    return grpc::Status::OK;
  }
};

std::chrono::system_clock::time_point In(std::chrono::milliseconds timeout) {
  return std::chrono::system_clock::now() + timeout;
}

class CheckpointServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    gdt::test::LoopbackServer loopback = gdt::test::ServeOnLoopback(&agent_);
    ASSERT_NE(loopback.server, nullptr);
    agent_server_ = std::move(loopback.server);
    agent_address_ = loopback.address;
    config_.listen_address = "127.0.0.1:0";
    config_.state_path = temp_.path() + "/coord.db";
    StartCoordinator();
    v1::HostSpec host;
    host.set_name("cpu-01");
    host.set_address("127.0.0.1");
    host.set_agent_endpoint(agent_address_);
    host.set_cpu_slots(1);
    ASSERT_TRUE(client_->RegisterHost(host, 5s).ok());
  }

  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
    agent_server_->Shutdown(std::chrono::system_clock::now() + 2s);
  }

  void StartCoordinator() {
    absl::StatusOr<std::unique_ptr<CoordinatorServer>> server =
        CoordinatorServer::Start(config_, clock_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    client_ = std::make_unique<rendezvous::CoordinatorClient>(
        server_->bound_address());
  }

  static v1::GangKey Key() {
    v1::GangKey key;
    key.set_instance("https://gitlab.example.com");
    key.set_project_id(5);
    key.set_pipeline_id(77);
    key.set_group_name("train");
    key.set_size(1);
    return key;
  }

  // Joins the one-member gang as job `job_id` and returns its assignment.
  v1::Assignment Join(int64_t job_id) {
    v1::JoinGangRequest request;
    *request.mutable_key() = Key();
    request.set_member_index(1);
    request.set_job_id(job_id);
    request.set_job_name("train");
    request.set_launcher(v1::LAUNCHER_NCCL);
    absl::StatusOr<v1::Assignment> assignment =
        client_->JoinGang(request, In(20s), nullptr, nullptr);
    EXPECT_TRUE(assignment.ok()) << assignment.status();
    return assignment.value_or(v1::Assignment());
  }

  // Fails the gang (exit 137) and leaves it, as a killed member's job does.
  void Fail(const v1::Assignment& assignment, int64_t job_id) {
    v1::ReportExitRequest exit;
    exit.set_gang_id(assignment.gang_id());
    exit.set_epoch(assignment.epoch());
    exit.set_member_index(1);
    exit.set_job_id(job_id);
    exit.set_exit_code(137);
    ASSERT_TRUE(client_->ReportExit(exit, 5s).ok());
    v1::LeaveGangRequest leave;
    *leave.mutable_key() = Key();
    leave.set_member_index(1);
    leave.set_job_id(job_id);
    ASSERT_TRUE(client_->LeaveGang(leave, 5s).ok());
  }

  rendezvous::CheckpointClient ClientFor(const v1::Assignment& assignment) {
    return rendezvous::CheckpointClient(
        rendezvous::KvTarget{server_->bound_address(),
                             assignment.gang_id(),
                             assignment.epoch(),
                             assignment.kv_token(),
                             {}});
  }

  test::TempDir temp_;
  SystemClock clock_;
  FreePortAgent agent_;
  std::unique_ptr<grpc::Server> agent_server_;
  std::string agent_address_;
  Config config_;
  std::unique_ptr<CoordinatorServer> server_;
  std::unique_ptr<rendezvous::CoordinatorClient> client_;
};

TEST_F(CheckpointServiceTest, RetriedEpochListsTheEarlierEpochsRecords) {
  const v1::Assignment first = Join(101);
  ASSERT_EQ(first.epoch(), 1u);
  rendezvous::CheckpointClient epoch1 = ClientFor(first);
  ASSERT_TRUE(epoch1.Record(4, 0, 101, R"({"step": 4})", In(5s)).ok());
  ASSERT_TRUE(epoch1.Record(8, 0, 101, R"({"step": 8})", In(5s)).ok());
  Fail(first, 101);

  // A restart in between: the records are in the coordinator's state.
  server_->Shutdown();
  server_.reset();
  StartCoordinator();

  const v1::Assignment retry = Join(201);
  ASSERT_EQ(retry.epoch(), 2u);
  EXPECT_EQ(retry.gang_id(), first.gang_id());
  absl::StatusOr<std::vector<rendezvous::CheckpointRecordInfo>> listed =
      ClientFor(retry).List(In(5s));
  ASSERT_TRUE(listed.ok()) << listed.status();
  using Info = rendezvous::CheckpointRecordInfo;
  EXPECT_THAT(*listed,
              ElementsAre(AllOf(Field(&Info::step, 8), Field(&Info::epoch, 1u),
                                Field(&Info::job_id, 101),
                                Field(&Info::manifest_json, R"({"step": 8})")),
                          Field(&Info::step, 4)));
  EXPECT_GT((*listed)[0].recorded_unix_ms, 0);

  // The old epoch's credential no longer works.
  absl::Status stale = ClientFor(first).Record(12, 0, 101, "{}", In(5s));
  EXPECT_EQ(stale.code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(CheckpointServiceTest, StrangersAndBadRecordsAreRefused) {
  const v1::Assignment member = Join(101);
  v1::Assignment forged = member;
  forged.set_kv_token(std::string(64, '0'));
  absl::Status denied = ClientFor(forged).Record(1, 0, 101, "{}", In(5s));
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(denied.message(), HasSubstr("wrong gang token"));
  forged.set_kv_token("");
  EXPECT_EQ(ClientFor(forged).List(In(5s)).status().code(),
            absl::StatusCode::kUnauthenticated);

  rendezvous::CheckpointClient client = ClientFor(member);
  absl::Status negative = client.Record(-1, 0, 101, "{}", In(5s));
  EXPECT_EQ(negative.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(negative.message(), HasSubstr("negative"));
  EXPECT_EQ(client.Record(1, 0, 101, "", In(5s)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      client.Record(1, 0, 101, std::string((1 << 20) + 1, 'x'), In(5s)).code(),
      absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::vector<rendezvous::CheckpointRecordInfo>> none =
      client.List(In(5s));
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
}

}  // namespace
}  // namespace gdt::coordinator
