// The liveness server over the wire: a real gdt-coord server on
// 127.0.0.1:0 whose heartbeats go to a second port, and the real
// CoordinatorClient an agent uses.
#include "coordinator/liveness_server.h"

#include <chrono>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "coordinator/server.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "rendezvous/coordinator_client.h"
#include "testing/temp_dir.h"

namespace gdt::coordinator {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ::testing::StartsWith;

v1::HostSpec Host(const std::string& name) {
  v1::HostSpec host;
  host.set_name(name);
  host.set_address("127.0.0.1");
  host.set_agent_endpoint("127.0.0.1:1");
  host.set_cpu_slots(1);
  return host;
}

class LivenessServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_.listen_address = "127.0.0.1:0";
    config_.state_path = temp_.path() + "/coord.db";
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
  }

  void Start() {
    absl::StatusOr<std::unique_ptr<CoordinatorServer>> server =
        CoordinatorServer::Start(config_, clock_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    client_ = std::make_unique<rendezvous::CoordinatorClient>(
        server_->bound_address());
  }

  std::string LivenessAddress() const {
    return absl::StrCat("127.0.0.1:", server_->liveness_port());
  }

  gdt::test::TempDir temp_;
  Config config_;
  SystemClock clock_;
  std::unique_ptr<CoordinatorServer> server_;
  std::unique_ptr<rendezvous::CoordinatorClient> client_;
};

// Registration also names the master_port_range, which agents keep their
// members' binds to (docs/security.md).
TEST_F(LivenessServerTest, RegistrationTellsAgentsTheMasterPortRange) {
  config_.master_port_min = 23100;
  config_.master_port_max = 23139;
  Start();
  EXPECT_EQ(client_->master_port_range(), std::make_pair(0u, 0u));
  ASSERT_TRUE(client_->RegisterHost(Host("cpu-01"), 5s).ok());
  EXPECT_EQ(client_->master_port_range(), std::make_pair(23100u, 23139u));
}

TEST_F(LivenessServerTest, AgentsHeartbeatOnTheLivenessPortAndNothingElseDoes) {
  Start();
  ASSERT_NE(server_->liveness_port(), 0);
  EXPECT_THAT(
      server_->bound_address(),
      ::testing::Not(HasSubstr(absl::StrCat(":", server_->liveness_port()))));

  ASSERT_TRUE(client_->RegisterHost(Host("cpu-01"), 5s).ok());
  EXPECT_EQ(client_->liveness_endpoint(), LivenessAddress());
  absl::StatusOr<bool> beat = client_->Heartbeat("cpu-01", 5s);
  ASSERT_TRUE(beat.ok()) << beat.status();
  EXPECT_FALSE(*beat);
  EXPECT_EQ(client_->liveness_endpoint(), LivenessAddress());

  auto stub = v1::Coordinator::NewStub(grpc::CreateChannel(
      LivenessAddress(), grpc::InsecureChannelCredentials()));
  {  // A heartbeat there is a heartbeat: an unknown host must register.
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + 5s);
    v1::HeartbeatRequest request;
    request.set_host_name("cpu-99");
    v1::HeartbeatResponse response;
    ASSERT_TRUE(stub->Heartbeat(&context, request, &response).ok());
    EXPECT_TRUE(response.reregister());
  }
  {  // Nothing but heartbeats.
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + 5s);
    v1::GetStatusResponse response;
    EXPECT_EQ(stub->GetStatus(&context, v1::GetStatusRequest(), &response)
                  .error_code(),
              grpc::StatusCode::UNIMPLEMENTED);
  }
  {  // Small messages only.
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + 5s);
    v1::HeartbeatRequest request;
    request.set_host_name("cpu-01");
    request.set_reports_running_members(true);
    request.add_running_members(std::string(kLivenessMaxRequestBytes, 'x'));
    v1::HeartbeatResponse response;
    EXPECT_EQ(stub->Heartbeat(&context, request, &response).error_code(),
              grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
}

TEST_F(LivenessServerTest, HeartbeatsOnTheLivenessPortNeedTheHostToken) {
  config_.require_host_tokens = true;
  Start();
  auto stub = v1::Coordinator::NewStub(grpc::CreateChannel(
      LivenessAddress(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + 5s);
  v1::HeartbeatRequest request;
  request.set_host_name("cpu-01");
  v1::HeartbeatResponse response;
  const grpc::Status status = stub->Heartbeat(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED)
      << status.error_message();
}

TEST_F(LivenessServerTest, UnreachableLivenessPortFallsBackToTheMainPort) {
  // Advertised where nothing listens (a firewalled port, say).
  config_.liveness_advertise_endpoint = "127.0.0.1:1";
  Start();
  ASSERT_TRUE(client_->RegisterHost(Host("cpu-01"), 5s).ok());
  EXPECT_EQ(client_->liveness_endpoint(), "127.0.0.1:1");
  // Nothing answers there, so the coordinator that heard it is the main
  // port's.
  absl::StatusOr<bool> beat = client_->Heartbeat("cpu-01", 5s);
  ASSERT_TRUE(beat.ok()) << beat.status();
  EXPECT_FALSE(*beat);
  // Later heartbeats go straight to the main port, until the next
  // registration names the liveness server again.
  EXPECT_EQ(client_->liveness_endpoint(), "");
  ASSERT_TRUE(client_->RegisterHost(Host("cpu-01"), 5s).ok());
  EXPECT_EQ(client_->liveness_endpoint(), "127.0.0.1:1");
}

TEST_F(LivenessServerTest, OffMeansHeartbeatsOnTheMainPort) {
  config_.liveness_listen_address = "off";
  Start();
  EXPECT_EQ(server_->liveness_port(), 0);
  ASSERT_TRUE(client_->RegisterHost(Host("cpu-01"), 5s).ok());
  EXPECT_EQ(client_->liveness_endpoint(), "");
  absl::StatusOr<bool> beat = client_->Heartbeat("cpu-01", 5s);
  ASSERT_TRUE(beat.ok()) << beat.status();
  EXPECT_FALSE(*beat);
}

TEST_F(LivenessServerTest, AnAddressThatCannotBeBoundStopsStartUp) {
  config_.liveness_listen_address = "203.0.113.7:0";  // Not this machine's.
  absl::StatusOr<std::unique_ptr<CoordinatorServer>> server =
      CoordinatorServer::Start(config_, clock_);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(server.status().message()),
              StartsWith("cannot listen on 203.0.113.7:0 "
                         "(liveness_listen_address)"));
}

TEST_F(LivenessServerTest, ABusyPortIsNotShared) {
  Start();
  // A second coordinator (its own state) on either port of the first must
  // fail, not share the port's connections (gRPC's SO_REUSEPORT default).
  Config second = config_;
  second.state_path = temp_.path() + "/second.db";
  second.listen_address = server_->bound_address();
  absl::StatusOr<std::unique_ptr<CoordinatorServer>> main_port =
      CoordinatorServer::Start(second, clock_);
  ASSERT_FALSE(main_port.ok());
  EXPECT_THAT(std::string(main_port.status().message()),
              StartsWith("cannot listen on " + server_->bound_address()));
  second.listen_address = "127.0.0.1:0";
  second.liveness_listen_address = LivenessAddress();
  absl::StatusOr<std::unique_ptr<CoordinatorServer>> liveness_port =
      CoordinatorServer::Start(second, clock_);
  ASSERT_FALSE(liveness_port.ok());
  EXPECT_THAT(std::string(liveness_port.status().message()),
              StartsWith("cannot listen on " + LivenessAddress()));
}

}  // namespace
}  // namespace gdt::coordinator
