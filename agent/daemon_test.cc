#include "agent/daemon.h"

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "rendezvous/agent_client.h"
#include "testing/fake_coordinator.h"
#include "testing/joined_thread.h"
#include "testing/log_capture.h"
#include "testing/stalled_streams.h"
#include "testing/temp_dir.h"
#include "testing/wait.h"

namespace gdt::agent {
namespace {

namespace fs = std::filesystem;
using ::gdt::test::JoinedThread;
using ::gdt::test::WaitFor;
using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;
using ::testing::HasSubstr;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

using test::FakeCoordinator;

class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(root_.empty()); }

  Config MakeConfig(const std::string& coordinator,
                    const std::string& extra_yaml = "") {
    absl::StatusOr<Config> config = ParseConfig(R"(
coordinator: )" + coordinator + R"(
listen_address: 127.0.0.1:0
scratch_dir: )" + root_ + R"(/scratch
kill_grace_seconds: 2
host:
  name: gpu-07
  address: 127.0.0.1
  gpus:
    - {index: 0, uuid: GPU-aaa, model: H100, memory_bytes: 1024}
    - {index: 1, uuid: GPU-bbb, model: H100, memory_bytes: 1024}
  labels: {rack: r1, switch: s4}
  network_interface: lo
)" + extra_yaml);
    EXPECT_TRUE(config.ok()) << config.status();
    return config.value_or(Config{});
  }

  test::TempDir temp_;
  const std::string root_ = temp_.path();
};

TEST_F(DaemonTest, RegistersItsHostAndHeartbeats) {
  FakeCoordinator coordinator;
  const std::string endpoint = coordinator.Serve("127.0.0.1:0");
  ASSERT_FALSE(endpoint.empty());

  absl::StatusOr<std::unique_ptr<Daemon>> daemon =
      Daemon::Start(MakeConfig(endpoint));
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  ASSERT_TRUE(coordinator.WaitFor(1, 2, seconds(15)));

  const v1::HostSpec host = coordinator.registrations().front();
  EXPECT_EQ(host.name(), "gpu-07");
  EXPECT_EQ(host.address(), "127.0.0.1");
  EXPECT_EQ(host.agent_endpoint(), (*daemon)->advertise_endpoint());
  EXPECT_EQ(host.agent_endpoint(), (*daemon)->bound_endpoint());
  ASSERT_EQ(host.gpus_size(), 2);
  EXPECT_EQ(host.gpus(1).index(), 1u);
  EXPECT_EQ(host.gpus(1).uuid(), "GPU-bbb");
  EXPECT_EQ(host.gpus(1).model(), "H100");
  EXPECT_EQ(host.gpus(1).memory_bytes(), 1024u);
  EXPECT_THAT(host.labels(),
              UnorderedElementsAre(Pair("rack", "r1"), Pair("switch", "s4")));
  EXPECT_EQ(host.network_interface(), "lo");
  EXPECT_EQ(host.cpu_slots(), 1u);
  EXPECT_EQ(coordinator.heartbeats().front(), "gpu-07");

  // The advertised endpoint really is the agent.
  rendezvous::AgentClient agent(host.agent_endpoint());
  EXPECT_TRUE(agent.CheckPort(1, seconds(5)).ok());
}

TEST_F(DaemonTest, RegistersAgainWhenTheCoordinatorAsks) {
  FakeCoordinator coordinator;
  const std::string endpoint = coordinator.Serve("127.0.0.1:0");
  ASSERT_FALSE(endpoint.empty());
  absl::StatusOr<std::unique_ptr<Daemon>> daemon =
      Daemon::Start(MakeConfig(endpoint));
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  ASSERT_TRUE(coordinator.WaitFor(1, 0, seconds(15)));

  coordinator.ReregisterOnNextHeartbeat();

  EXPECT_TRUE(coordinator.WaitFor(2, 1, seconds(15)));
}

TEST_F(DaemonTest, KeepsTryingUntilTheCoordinatorComesUp) {
  // Find a free port, then start the daemon before anything listens there.
  std::string address;
  {
    FakeCoordinator placeholder;
    address = placeholder.Serve("127.0.0.1:0");
    ASSERT_FALSE(address.empty());
  }
  absl::StatusOr<std::unique_ptr<Daemon>> daemon =
      Daemon::Start(MakeConfig(address));
  ASSERT_TRUE(daemon.ok()) << daemon.status();

  FakeCoordinator coordinator;
  ASSERT_EQ(coordinator.Serve(address), address);

  EXPECT_TRUE(coordinator.WaitFor(1, 0, seconds(20)));
}

TEST_F(DaemonTest, ShutdownTerminatesRunningStages) {
  FakeCoordinator coordinator;
  const std::string endpoint = coordinator.Serve("127.0.0.1:0");
  absl::StatusOr<std::unique_ptr<Daemon>> daemon =
      Daemon::Start(MakeConfig(endpoint));
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  rendezvous::AgentClient agent((*daemon)->bound_endpoint());
  Mutex mu;
  std::string output;
  absl::StatusOr<v1::StageExit> exit = absl::UnknownError("not run");
  JoinedThread stage(
      [&] {
        v1::StartStage start;
        start.set_member_id("g1/1");
        start.set_stage("build_script");
        start.set_script("trap '' TERM\necho ready\nsleep 300\n");
        exit = agent.RunStage(
            start,
            [&](v1::OutputStream, std::string_view data) {
              MutexLock lock(mu);
              output.append(data);
            },
            nullptr);
      },
      [&] { (*daemon)->Shutdown(); });
  ASSERT_TRUE(WaitFor(
      [&] {
        MutexLock lock(mu);
        return output == "ready\n";
      },
      seconds(10)));

  const auto begin = steady_clock::now();
  (*daemon)->Shutdown();
  stage.Join();

  // The stage ignored SIGTERM, so it took the 2 s grace and then SIGKILL.
  EXPECT_GE(steady_clock::now() - begin, milliseconds(1900));
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_EQ(exit->exit_code(), 128 + SIGKILL);
}

// A member's script exits 3 while the coordinator is unreachable, and the
// agent is restarted before it comes back: the exit waits on disk, and the
// next agent on the same scratch dir delivers it, with the time it happened.
TEST_F(DaemonTest, ExitsOutliveCoordinatorOutagesAndAgentRestarts) {
  std::string address;
  {
    FakeCoordinator placeholder;
    address = placeholder.Serve("127.0.0.1:0");
    ASSERT_FALSE(address.empty());
  }
  const std::string outbox = root_ + "/scratch/.exit-outbox";
  const int64_t before =
      std::chrono::duration_cast<milliseconds>(
          std::chrono::system_clock::now().time_since_epoch())
          .count();
  {
    absl::StatusOr<std::unique_ptr<Daemon>> daemon =
        Daemon::Start(MakeConfig(address));
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    rendezvous::AgentClient agent((*daemon)->bound_endpoint());
    v1::StartStage start;
    start.set_member_id("g1/1002");
    start.set_stage("build_script");
    start.set_script("exit 3\n");
    start.set_gang_id("g1");
    start.set_epoch(1);
    start.set_member_index(2);
    start.set_job_id(1002);
    start.set_agent_reports_exit(true);
    absl::StatusOr<v1::StageExit> exit = agent.RunStage(
        start, [](v1::OutputStream, std::string_view) {}, nullptr);
    ASSERT_TRUE(exit.ok()) << exit.status();
    EXPECT_EQ(exit->exit_code(), 3);
  }  // The agent stops; the coordinator never heard of the exit.
  EXPECT_EQ(
      std::distance(fs::directory_iterator(outbox), fs::directory_iterator()),
      1);

  FakeCoordinator coordinator;
  ASSERT_EQ(coordinator.Serve(address), address);
  absl::StatusOr<std::unique_ptr<Daemon>> next =
      Daemon::Start(MakeConfig(address));
  ASSERT_TRUE(next.ok()) << next.status();
  const std::vector<v1::ReportExitRequest> exits =
      coordinator.WaitForExits(1, seconds(20));
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].gang_id(), "g1");
  EXPECT_EQ(exits[0].epoch(), 1u);
  EXPECT_EQ(exits[0].member_index(), 2u);
  EXPECT_EQ(exits[0].job_id(), 1002);
  EXPECT_EQ(exits[0].exit_code(), 3);
  EXPECT_FALSE(exits[0].cancelled());
  EXPECT_TRUE(exits[0].lost_reason().empty());
  EXPECT_GE(exits[0].exited_unix_ms(), before);
  // Acknowledged: gone from disk.
  EXPECT_TRUE(WaitFor([&] { return fs::is_empty(outbox); }, seconds(10)))
      << "the outbox still holds reports";
}

// Anyone who reaches the agent's port (any job on its host) opens 100
// connections, from ten addresses of 127.0.0.0/8, each starting calls whose
// request never comes, which gRPC would hold for as long as the client
// likes. The agent counts them all toward the job's uid (61117) and keeps
// max_connections_per_peer (4) of them, closing the rest as it accepts
// them, with a log line; a member's stage, whose executor calls as another
// account (root, here from 127.0.0.1), still runs meanwhile.
TEST_F(DaemonTest, AFloodFromOneAccountIsCappedWhileAStageRuns) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: the flood is uid 61117's";
  test::LogCapture captured;
  FakeCoordinator coordinator;
  const std::string endpoint = coordinator.Serve("127.0.0.1:0");
  ASSERT_FALSE(endpoint.empty());
  {
    absl::StatusOr<std::unique_ptr<Daemon>> daemon =
        Daemon::Start(MakeConfig(endpoint, "max_connections_per_peer: 4\n"));
    ASSERT_TRUE(daemon.ok()) << daemon.status();

    constexpr int kConnections = 100;
    test::StalledStreams flood(61117);
    for (int i = 0; i < 10; ++i) {
      ASSERT_NO_FATAL_FAILURE(flood.Open(
          "127.0.0." + std::to_string(i + 2), (*daemon)->bound_endpoint(),
          kConnections / 10, /*streams=*/20, "/gdt.v1.Agent/CheckPort"));
    }
    int closed = 0;
    EXPECT_TRUE(WaitFor(
        [&] {
          closed = flood.Closed();
          return closed >= kConnections - 4;
        },
        seconds(20)))
        << "the agent closed " << closed << " of " << kConnections
        << " connections of one account; it keeps 4";

    rendezvous::AgentClient agent((*daemon)->bound_endpoint());
    v1::StartStage start;
    start.set_member_id("g1/1");
    start.set_stage("build_script");
    start.set_script("echo ran\n");
    std::string output;
    absl::StatusOr<v1::StageExit> exit = agent.RunStage(
        start, [&](v1::OutputStream, std::string_view data) { output += data; },
        nullptr);
    ASSERT_TRUE(exit.ok()) << exit.status();
    EXPECT_EQ(exit->exit_code(), 0);
    EXPECT_EQ(output, "ran\n");
    // The flood is still open: the agent still holds just 4 of it.
    EXPECT_EQ(flood.Closed(), kConnections - 4);
  }
  EXPECT_THAT(captured.text(),
              HasSubstr("event=connection_refused who=agent peer=uid:61117 "
                        "limit=per_peer"));
}

TEST_F(DaemonTest, ListenFailureIsUnavailable) {
  Config config = MakeConfig("127.0.0.1:1");
  config.listen_address = "203.0.113.1:0";  // Not an address of this host.

  EXPECT_EQ(Daemon::Start(config).status().code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace gdt::agent
