// The watch the agent and the coordinator keep on their own endpoints: when
// it stops answering there is a reason, the listener is restarted after
// repeated failures, and one answer clears it; and the probe itself against
// real sockets that refuse or never answer, and a real gRPC server.
#include "rendezvous/endpoint_watch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gdt/v1/agent.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/loopback_server.h"
#include "testing/wait.h"

namespace gdt::rendezvous {
namespace {

using namespace std::chrono_literals;
using ::gdt::test::WaitFor;
using ::testing::HasSubstr;

TEST(EndpointWatchTest, NotReadyWhileTheEndpointFailsAndReadyAgainAfter) {
  std::atomic<bool> answering{true};
  std::atomic<int> probes{0};
  std::atomic<int> recoveries{0};
  EndpointWatch::Options options;
  options.interval = 20ms;
  options.failures = 2;
  options.recover_after = 5;
  EndpointWatch watch(
      "127.0.0.1:7001", options,
      [&]() -> absl::Status {
        ++probes;
        if (answering) return absl::OkStatus();
        return absl::UnavailableError("failed to connect to all addresses");
      },
      [&]() -> absl::Status {
        ++recoveries;
        return absl::FailedPreconditionError("2 stages run");
      });
  watch.Start();
  ASSERT_TRUE(WaitFor([&] { return probes >= 3; }, 30s));
  EXPECT_EQ(watch.NotReadyReason(), "");
  EXPECT_EQ(recoveries, 0);

  answering = false;
  ASSERT_TRUE(WaitFor([&] { return !watch.NotReadyReason().empty(); }, 30s));
  EXPECT_THAT(watch.NotReadyReason(), HasSubstr("127.0.0.1:7001"));
  // Restarting the listener comes only after repeated failures, and a
  // recovery that cannot happen yet is part of the reason.
  ASSERT_TRUE(WaitFor([&] { return recoveries >= 1; }, 30s));
  ASSERT_TRUE(WaitFor(
      [&] {
        return watch.NotReadyReason().find("2 stages run") != std::string::npos;
      },
      30s))
      << watch.NotReadyReason();

  answering = true;
  ASSERT_TRUE(WaitFor([&] { return watch.NotReadyReason().empty(); }, 30s));
  const int after = recoveries;
  ASSERT_TRUE(
      WaitFor([&, seen = probes.load()] { return probes >= seen + 3; }, 30s));
  EXPECT_EQ(recoveries, after);
  watch.Stop();
}

TEST(EndpointWatchTest, OneFailedProbeIsNotEnough) {
  std::atomic<int> probes{0};
  EndpointWatch::Options options;
  options.interval = 20ms;
  options.failures = 2;
  EndpointWatch watch("127.0.0.1:7002", options, [&]() -> absl::Status {
    // Every other probe fails: never two in a row.
    return ++probes % 2 == 0 ? absl::DeadlineExceededError("slow")
                             : absl::OkStatus();
  });
  watch.Start();
  for (int seen = 0; seen < 10; seen = probes) {
    EXPECT_EQ(watch.NotReadyReason(), "");
    std::this_thread::sleep_for(5ms);
  }
  watch.Stop();
  EXPECT_EQ(watch.NotReadyReason(), "");
}

// A loopback socket that listens but never accepts: the kernel completes
// TCP handshakes, nothing ever answers gRPC's (an agent whose listener
// stopped accepting looks the same from outside).
class SilentListener {
 public:
  SilentListener() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address));
    listen(fd_, 64);
    socklen_t length = sizeof(address);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
  }
  ~SilentListener() { close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST(ProbeEndpointTest, SilentOrClosedEndpointFailsWithinTheDeadline) {
  int closed_port = 0;
  {
    SilentListener gone;  // Bound, then closed: nothing listens there.
    closed_port = gone.port();
  }
  SilentListener silent;
  for (const int port : {silent.port(), closed_port}) {
    const std::string endpoint = absl::StrCat("127.0.0.1:", port);
    const auto start = std::chrono::steady_clock::now();
    const absl::Status probed =
        ProbeEndpoint("agent", endpoint, ClientSecurity(), "", 500ms);
    EXPECT_FALSE(probed.ok()) << endpoint;
    EXPECT_TRUE(absl::IsUnavailable(probed) || absl::IsDeadlineExceeded(probed))
        << probed;
    EXPECT_LT(std::chrono::steady_clock::now() - start, 10s) << endpoint;
  }
}

// A server that serves none of the probe's method still answers it
// (UNIMPLEMENTED), which is all the probe asks: its listener accepted and
// its server spoke.
TEST(ProbeEndpointTest, ARealServerAnswersWithoutServingTheMethod) {
  v1::Agent::Service unimplemented;  // Every method UNIMPLEMENTED.
  test::LoopbackServer served = test::ServeOnLoopback(&unimplemented);
  ASSERT_NE(served.server, nullptr);
  const absl::Status probed =
      ProbeEndpoint("agent", served.address, ClientSecurity(), "", 5s);
  EXPECT_TRUE(probed.ok()) << probed;
  served.server->Shutdown(std::chrono::system_clock::now());
}

}  // namespace
}  // namespace gdt::rendezvous
