#include "common/connection_gate.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "gtest/gtest.h"
#include "testing/wait.h"

namespace gdt {
namespace {

using ::gdt::test::WaitFor;
using std::chrono::seconds;

// A stand-in for the server behind the gate: keeps what it is handed, and
// ends a connection as gRPC does (shutdown, then close).
class Server {
 public:
  ~Server() {
    MutexLock lock(mu_);
    for (int fd : fds_) close(fd);
  }
  ConnectionGate::Handoff Handoff() {
    return [this](int, int fd) {
      MutexLock lock(mu_);
      fds_.push_back(fd);
    };
  }
  size_t held() {
    MutexLock lock(mu_);
    return fds_.size();
  }
  void EndFirst() {
    MutexLock lock(mu_);
    ASSERT_FALSE(fds_.empty());
    shutdown(fds_.front(), SHUT_RDWR);
    close(fds_.front());
    fds_.erase(fds_.begin());
  }

 private:
  Mutex mu_;
  std::vector<int> fds_ ABSL_GUARDED_BY(mu_);
};

// A client connection from `source` to 127.0.0.1:`port`, closed when it
// goes.
class Client {
 public:
  Client(const std::string& source, int port) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in from{};
    from.sin_family = AF_INET;
    inet_pton(AF_INET, source.c_str(), &from.sin_addr);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    connected_ =
        bind(fd_, reinterpret_cast<const sockaddr*>(&from), sizeof(from)) ==
            0 &&
        connect(fd_, reinterpret_cast<const sockaddr*>(&to), sizeof(to)) == 0;
  }
  ~Client() { close(fd_); }
  bool connected() const { return connected_; }
  // Whether the other end closed the connection within `timeout`.
  bool ClosedWithin(std::chrono::milliseconds timeout) const {
    pollfd one{fd_, POLLIN, 0};
    if (poll(&one, 1, static_cast<int>(timeout.count())) != 1) return false;
    char byte;
    const ssize_t got = recv(fd_, &byte, 1, MSG_PEEK);
    return got == 0 || (got < 0 && errno == ECONNRESET);
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

std::unique_ptr<ConnectionGate> Gate(int per_peer, int total) {
  ConnectionGate::Options options;
  options.who = "test";
  options.max_per_peer = per_peer;
  options.max_total = total;
  absl::StatusOr<std::unique_ptr<ConnectionGate>> gate =
      ConnectionGate::Listen("127.0.0.1:0", options);
  EXPECT_TRUE(gate.ok()) << gate.status();
  return gate.ok() ? std::move(*gate) : nullptr;
}

TEST(ConnectionGateTest, ClosesConnectionsBeyondThePeersCapAtOnce) {
  Server server;
  std::unique_ptr<ConnectionGate> gate = Gate(/*per_peer=*/2, /*total=*/0);
  ASSERT_NE(gate, nullptr);
  gate->SetHandoff(server.Handoff());
  Client first("127.0.0.1", gate->port());
  Client second("127.0.0.1", gate->port());
  ASSERT_TRUE(first.connected() && second.connected());
  ASSERT_TRUE(WaitFor([&] { return server.held() == 2; }, seconds(10)));
  Client third("127.0.0.1", gate->port());
  ASSERT_TRUE(third.connected());
  EXPECT_TRUE(third.ClosedWithin(std::chrono::seconds(10)));
  EXPECT_EQ(server.held(), 2u);
  EXPECT_EQ(gate->open_connections_from("127.0.0.1"), 2);
  EXPECT_EQ(gate->refused(), 1u);
  // Another address has its own count.
  Client other("127.0.0.2", gate->port());
  ASSERT_TRUE(other.connected());
  ASSERT_TRUE(WaitFor([&] { return server.held() == 3; }, seconds(10)));
  EXPECT_EQ(gate->open_connections_from("127.0.0.2"), 1);
  EXPECT_FALSE(other.ClosedWithin(std::chrono::milliseconds(0)));
  EXPECT_FALSE(first.ClosedWithin(std::chrono::milliseconds(0)));
}

TEST(ConnectionGateTest, AConnectionTheServerEndsFreesItsPlace) {
  Server server;
  std::unique_ptr<ConnectionGate> gate = Gate(/*per_peer=*/1, /*total=*/0);
  ASSERT_NE(gate, nullptr);
  gate->SetHandoff(server.Handoff());
  Client first("127.0.0.1", gate->port());
  ASSERT_TRUE(WaitFor([&] { return server.held() == 1; }, seconds(10)));
  server.EndFirst();
  EXPECT_TRUE(first.ClosedWithin(std::chrono::seconds(10)));
  ASSERT_TRUE(
      WaitFor([&] { return gate->open_connections() == 0; }, seconds(10)));
  Client second("127.0.0.1", gate->port());
  ASSERT_TRUE(WaitFor([&] { return server.held() == 1; }, seconds(10)));
  EXPECT_FALSE(second.ClosedWithin(std::chrono::milliseconds(200)));
  EXPECT_EQ(gate->refused(), 0u);
}

TEST(ConnectionGateTest, CapsAllConnectionsTogether) {
  Server server;
  std::unique_ptr<ConnectionGate> gate = Gate(/*per_peer=*/0, /*total=*/2);
  ASSERT_NE(gate, nullptr);
  gate->SetHandoff(server.Handoff());
  Client first("127.0.0.1", gate->port());
  Client second("127.0.0.2", gate->port());
  ASSERT_TRUE(WaitFor([&] { return server.held() == 2; }, seconds(10)));
  Client third("127.0.0.3", gate->port());
  EXPECT_TRUE(third.ClosedWithin(std::chrono::seconds(10)));
  EXPECT_EQ(gate->open_connections(), 2);
}

TEST(ConnectionGateTest, WithoutAHandoffConnectionsAreClosedAndNotCounted) {
  std::unique_ptr<ConnectionGate> gate = Gate(/*per_peer=*/1, /*total=*/0);
  ASSERT_NE(gate, nullptr);
  Client first("127.0.0.1", gate->port());
  EXPECT_TRUE(first.ClosedWithin(std::chrono::seconds(10)));
  ASSERT_TRUE(
      WaitFor([&] { return gate->open_connections() == 0; }, seconds(10)));
  Server server;
  gate->SetHandoff(server.Handoff());
  Client second("127.0.0.1", gate->port());
  ASSERT_TRUE(WaitFor([&] { return server.held() == 1; }, seconds(10)));
}

TEST(ConnectionGateTest, AnAddressInUseIsOneLine) {
  std::unique_ptr<ConnectionGate> first = Gate(0, 0);
  ASSERT_NE(first, nullptr);
  ConnectionGate::Options options;
  absl::StatusOr<std::unique_ptr<ConnectionGate>> second =
      ConnectionGate::Listen("127.0.0.1:" + std::to_string(first->port()),
                             options);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("Address already in use"),
            std::string::npos)
      << second.status();
}

}  // namespace
}  // namespace gdt
