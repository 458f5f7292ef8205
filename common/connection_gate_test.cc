#include "common/connection_gate.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spdlog/spdlog.h"
#include "testing/log_capture.h"
#include "testing/network_namespace.h"
#include "testing/sockets_of_uid.h"
#include "testing/wait.h"

namespace gdt {
namespace {

using ::gdt::test::LogCapture;
using ::gdt::test::WaitFor;
using std::chrono::seconds;
using ::testing::HasSubstr;

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

sockaddr_storage Address(const std::string& text) {
  sockaddr_storage address = {};
  if (text.find(':') == std::string::npos) {
    auto* v4 = reinterpret_cast<sockaddr_in*>(&address);
    v4->sin_family = AF_INET;
    EXPECT_EQ(inet_pton(AF_INET, text.c_str(), &v4->sin_addr), 1) << text;
  } else {
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&address);
    v6->sin6_family = AF_INET6;
    EXPECT_EQ(inet_pton(AF_INET6, text.c_str(), &v6->sin6_addr), 1) << text;
  }
  return address;
}

// A client connection from `source` to `to` (by default 127.0.0.1) on
// `port`, closed when it goes; on a socket of its own, or on `fd`, which it
// takes over.
class Client {
 public:
  Client(const std::string& source, int port, const std::string& to = "")
      : Client(
            socket(source.find(':') == std::string::npos ? AF_INET : AF_INET6,
                   SOCK_STREAM | SOCK_CLOEXEC, 0),
            source, port, to) {}
  Client(int fd, const std::string& source, int port,
         const std::string& to = "")
      : fd_(fd) {
    sockaddr_storage from = Address(source);
    sockaddr_storage address = Address(to.empty() ? "127.0.0.1" : to);
    const socklen_t length =
        from.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    if (address.ss_family == AF_INET) {
      reinterpret_cast<sockaddr_in*>(&address)->sin_port =
          htons(static_cast<uint16_t>(port));
    } else {
      reinterpret_cast<sockaddr_in6*>(&address)->sin6_port =
          htons(static_cast<uint16_t>(port));
    }
    connected_ =
        bind(fd_, reinterpret_cast<const sockaddr*>(&from), length) == 0 &&
        connect(fd_, reinterpret_cast<const sockaddr*>(&address), length) == 0;
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

// A host with an IPv6 /64 may connect from any of its addresses: they count
// as one peer, else the cap per peer would not cap it at all.
TEST(ConnectionGateTest, IPv6AddressesCountPerSlash64) {
  EXPECT_EQ(ConnectionGate::PeerOf(Address("2001:db8:1:2::5")),
            "2001:db8:1:2::/64");
  EXPECT_EQ(ConnectionGate::PeerOf(Address("2001:db8:1:2:ffff:1:2:3")),
            "2001:db8:1:2::/64");
  EXPECT_EQ(ConnectionGate::PeerOf(Address("2001:db8:1:3::5")),
            "2001:db8:1:3::/64");
  EXPECT_EQ(ConnectionGate::PeerOf(Address("fe80::1:2:3:4")), "fe80::/64");
  // IPv4 reached over IPv6 is the IPv4 address, each on its own.
  EXPECT_EQ(ConnectionGate::PeerOf(Address("::ffff:10.0.0.1")), "10.0.0.1");
  EXPECT_EQ(ConnectionGate::PeerOf(Address("::ffff:10.0.0.2")), "10.0.0.2");
  EXPECT_EQ(ConnectionGate::PeerOf(Address("10.0.0.1")), "10.0.0.1");
  EXPECT_EQ(ConnectionGate::PeerOf(Address("::1")), "::1");
  sockaddr_storage unix_socket = {};
  unix_socket.ss_family = AF_UNIX;
  EXPECT_EQ(ConnectionGate::PeerOf(unix_socket), "");
}

// The prefix length is the operator's: a site that gives each host a /56
// (or runs several hosts in one /64, each with its own /128) says so.
TEST(ConnectionGateTest, IPv6PeersAreTheirPrefixOfTheLengthGiven) {
  const sockaddr_storage host = Address("2001:db8:1:2a3:4:5:6:7");
  EXPECT_EQ(ConnectionGate::PeerOf(host, 48), "2001:db8:1::/48");
  EXPECT_EQ(ConnectionGate::PeerOf(host, 64), "2001:db8:1:2a3::/64");
  EXPECT_EQ(ConnectionGate::PeerOf(host, 128), "2001:db8:1:2a3:4:5:6:7/128");
  // Not a multiple of 8: 0x2a3 keeps its first 8 bits of 16 at /56, 12 at
  // /60.
  EXPECT_EQ(ConnectionGate::PeerOf(host, 56), "2001:db8:1:200::/56");
  EXPECT_EQ(ConnectionGate::PeerOf(host, 60), "2001:db8:1:2a0::/60");
  EXPECT_EQ(ConnectionGate::PeerOf(Address("2001:db8:1:2ff::1"), 56),
            "2001:db8:1:200::/56");
  EXPECT_EQ(ConnectionGate::PeerOf(Address("2001:db8:1:300::1"), 56),
            "2001:db8:1:300::/56");
  EXPECT_EQ(ConnectionGate::PeerOf(Address("2001:db8:ffff::1"), 33),
            "2001:db8:8000::/33");
  // IPv4 and ::1 are what they were.
  EXPECT_EQ(ConnectionGate::PeerOf(Address("::ffff:10.0.0.1"), 48), "10.0.0.1");
  EXPECT_EQ(ConnectionGate::PeerOf(Address("::1"), 48), "::1");
}

// Real IPv6 connections, from addresses of two /64s added to the loopback
// of a network namespace of the test's own (a CI host has no IPv6 address
// but ::1): two addresses of one /64 are one peer, another /64 is another;
// with a prefix length of 128 each address is a peer.
TEST(ConnectionGateTest, AnIPv6ConnectionCountsTowardItsPrefix) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: makes a network namespace";
  const std::string first = "2001:db8:1:2::10";
  const std::string second = "2001:db8:1:2::11";
  const std::string elsewhere = "2001:db8:1:3::10";
  absl::Status status = test::InNewNetworkNamespace(
      {first + "/64", second + "/64", elsewhere + "/64"}, [&] {
        Server server;
        ConnectionGate::Options options;
        options.who = "test";
        options.max_per_peer = 2;
        absl::StatusOr<std::unique_ptr<ConnectionGate>> gate =
            ConnectionGate::Listen("[::]:0", options);
        ASSERT_TRUE(gate.ok()) << gate.status();
        (*gate)->SetHandoff(server.Handoff());
        const int port = (*gate)->port();
        Client a(first, port, first);
        Client b(second, port, first);
        ASSERT_TRUE(a.connected() && b.connected()) << std::strerror(errno);
        ASSERT_TRUE(WaitFor([&] { return server.held() == 2; }, seconds(10)));
        EXPECT_EQ((*gate)->open_connections_from("2001:db8:1:2::/64"), 2);
        Client c(second, port, first);
        ASSERT_TRUE(c.connected());
        EXPECT_TRUE(c.ClosedWithin(std::chrono::seconds(10)))
            << "a third connection from the /64 is over its cap of 2";
        Client d(elsewhere, port, first);
        ASSERT_TRUE(d.connected());
        EXPECT_TRUE(WaitFor(
            [&] {
              return (*gate)->open_connections_from("2001:db8:1:3::/64") == 1;
            },
            seconds(10)));
        EXPECT_FALSE(d.ClosedWithin(std::chrono::milliseconds(0)));
        EXPECT_EQ((*gate)->refused(), 1u);

        options.max_per_peer = 1;
        options.ipv6_prefix_length = 128;
        absl::StatusOr<std::unique_ptr<ConnectionGate>> each =
            ConnectionGate::Listen("[::]:0", options);
        ASSERT_TRUE(each.ok()) << each.status();
        (*each)->SetHandoff(server.Handoff());
        Client e(first, (*each)->port(), first);
        Client f(second, (*each)->port(), first);
        ASSERT_TRUE(e.connected() && f.connected());
        EXPECT_TRUE(WaitFor(
            [&] {
              return (*each)->open_connections_from(first + "/128") == 1 &&
                     (*each)->open_connections_from(second + "/128") == 1;
            },
            seconds(10)));
        EXPECT_EQ((*each)->refused(), 0u);
      });
  ASSERT_TRUE(status.ok()) << status;
}

// A job on the host may connect from any of 127.0.0.0/8's addresses, each
// of which would have its own cap: with loopback_peers_by_uid its
// connections count toward the account that made their sockets. 12
// connections of uid 61115 from 12 addresses are one peer at its cap of 4;
// root, and another account from one of those addresses, still get in.
TEST(ConnectionGateTest, LoopbackConnectionsCountTowardTheirSocketsUid) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: makes sockets as uid 61115";
  LogCapture log;
  Server server;
  ConnectionGate::Options options;
  options.who = "test";
  options.max_per_peer = 4;
  options.loopback_peers_by_uid = true;
  absl::StatusOr<std::unique_ptr<ConnectionGate>> gate =
      ConnectionGate::Listen("127.0.0.1:0", options);
  ASSERT_TRUE(gate.ok()) << gate.status();
  (*gate)->SetHandoff(server.Handoff());
  const int port = (*gate)->port();
  constexpr int kJobConnections = 12;
  absl::StatusOr<std::vector<int>> sockets =
      test::TcpSocketsMadeBy(61115, AF_INET, kJobConnections);
  ASSERT_TRUE(sockets.ok()) << sockets.status();
  std::vector<std::unique_ptr<Client>> job;
  for (int i = 0; i < kJobConnections; ++i) {
    job.push_back(std::make_unique<Client>(
        (*sockets)[i], "127.0.0." + std::to_string(i + 2), port));
    ASSERT_TRUE(job.back()->connected()) << i << ": " << std::strerror(errno);
  }
  ASSERT_TRUE(WaitFor(
      [&] {
        return static_cast<uint64_t>((*gate)->open_connections()) +
                   (*gate)->refused() ==
               kJobConnections;
      },
      seconds(10)));
  EXPECT_EQ((*gate)->open_connections_from("uid:61115"), 4);
  EXPECT_EQ((*gate)->refused(), uint64_t{kJobConnections - 4});
  int closed = 0;
  for (const auto& client : job) {
    if (client->ClosedWithin(std::chrono::milliseconds(0))) ++closed;
  }
  EXPECT_EQ(closed, kJobConnections - 4);

  Client root("127.0.0.1", port);
  ASSERT_TRUE(root.connected());
  EXPECT_TRUE(
      WaitFor([&] { return (*gate)->open_connections_from("uid:0") == 1; },
              seconds(10)));
  EXPECT_FALSE(root.ClosedWithin(std::chrono::milliseconds(0)));
  absl::StatusOr<std::vector<int>> other =
      test::TcpSocketsMadeBy(61116, AF_INET, 1);
  ASSERT_TRUE(other.ok()) << other.status();
  Client neighbour((*other)[0], "127.0.0.2", port);
  ASSERT_TRUE(neighbour.connected());
  EXPECT_TRUE(
      WaitFor([&] { return (*gate)->open_connections_from("uid:61116") == 1; },
              seconds(10)));
  EXPECT_EQ((*gate)->open_connections_from("127.0.0.2"), 0);
  gate->reset();
  EXPECT_THAT(log.text(), HasSubstr("event=connection_refused who=test "
                                    "peer=uid:61115 limit=per_peer"));
}

// The uid is looked for only for this host's loopback addresses, also
// reached over IPv6; any other address is a peer as it is.
TEST(ConnectionGateTest, OnlyLoopbackAddressesAreLoopback) {
  EXPECT_TRUE(ConnectionGate::IsLoopback(Address("127.0.0.1")));
  EXPECT_TRUE(ConnectionGate::IsLoopback(Address("127.255.0.9")));
  EXPECT_TRUE(ConnectionGate::IsLoopback(Address("::ffff:127.0.0.3")));
  EXPECT_TRUE(ConnectionGate::IsLoopback(Address("::1")));
  EXPECT_FALSE(ConnectionGate::IsLoopback(Address("128.0.0.1")));
  EXPECT_FALSE(ConnectionGate::IsLoopback(Address("10.0.0.1")));
  EXPECT_FALSE(ConnectionGate::IsLoopback(Address("::ffff:10.0.0.1")));
  EXPECT_FALSE(ConnectionGate::IsLoopback(Address("::2")));
}

// Opens `count` connections from `source`, then waits until the gate has
// taken each one in or refused it.
void Flood(ConnectionGate& gate, const std::string& source, int count,
           std::vector<std::unique_ptr<Client>>& clients) {
  const uint64_t before =
      static_cast<uint64_t>(gate.open_connections()) + gate.refused();
  for (int i = 0; i < count; ++i) {
    clients.push_back(std::make_unique<Client>(source, gate.port()));
    ASSERT_TRUE(clients.back()->connected()) << source << " " << i;
  }
  ASSERT_TRUE(WaitFor(
      [&] {
        return static_cast<uint64_t>(gate.open_connections()) +
                   gate.refused() ==
               before + count;
      },
      seconds(10)))
      << source;
}

// Eight addresses each at the cap per peer would take the whole total and
// shut out everyone else. Past three quarters of the total, a peer holding
// its fair share (total / (peers + 1), at least 8) is refused: the last
// flooder stops short and the next address still gets in.
TEST(ConnectionGateTest, AFewPeersAtTheirCapLeaveRoomForANewOne) {
  LogCapture log;
  Server server;
  std::unique_ptr<ConnectionGate> gate = Gate(/*per_peer=*/16, /*total=*/128);
  ASSERT_NE(gate, nullptr);
  gate->SetHandoff(server.Handoff());
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 1; i <= 8; ++i) {
    ASSERT_NO_FATAL_FAILURE(
        Flood(*gate, "127.0.0." + std::to_string(i), 16, clients));
  }
  // Six peers fill three quarters of the total; after that each one may
  // hold 128 / (peers + 1): 16 of 7 (its cap per peer), 14 of 8.
  EXPECT_EQ(gate->open_connections_from("127.0.0.6"), 16);
  EXPECT_EQ(gate->open_connections_from("127.0.0.7"), 16);
  EXPECT_EQ(gate->open_connections_from("127.0.0.8"), 14);
  Client newcomer("127.0.0.9", gate->port());
  ASSERT_TRUE(newcomer.connected());
  EXPECT_TRUE(
      WaitFor([&] { return gate->open_connections_from("127.0.0.9") == 1; },
              seconds(10)))
      << "open " << gate->open_connections() << " of 128";
  EXPECT_EQ(gate->open_connections(), 127);
  EXPECT_EQ(server.held(), 127u);
  gate.reset();
  EXPECT_THAT(log.text(),
              HasSubstr("event=connection_refused who=test peer=127.0.0.8 "
                        "limit=fair_share times=1 open_from_peer=14 open=126 "
                        "peers=8 max_per_peer=16 max_total=128"));
}

// Many peers that each hold as many connections as the others (runner
// hosts with a few jobs each) are not refused while the total has room for
// an even share more: nine peers of 12 leave 20 of 128 free.
TEST(ConnectionGateTest, PeersHoldingEvenSharesAreNotRefused) {
  Server server;
  std::unique_ptr<ConnectionGate> gate = Gate(/*per_peer=*/16, /*total=*/128);
  ASSERT_NE(gate, nullptr);
  gate->SetHandoff(server.Handoff());
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 1; i <= 9; ++i) {
    ASSERT_NO_FATAL_FAILURE(
        Flood(*gate, "127.0.0." + std::to_string(i), 12, clients));
  }
  for (int i = 1; i <= 9; ++i) {
    EXPECT_EQ(gate->open_connections_from("127.0.0." + std::to_string(i)), 12)
        << i;
  }
  EXPECT_EQ(gate->open_connections(), 108);
  EXPECT_EQ(gate->refused(), 0u);
}

// The epoll descriptors this process has open.
std::set<int> EpollDescriptors() {
  std::set<int> found;
  std::error_code error;
  for (const auto& entry :
       std::filesystem::directory_iterator("/proc/self/fd", error)) {
    std::error_code link_error;
    const std::filesystem::path target =
        std::filesystem::read_symlink(entry.path(), link_error);
    if (!link_error && target.string() == "anon_inode:[eventpoll]") {
      found.insert(std::stoi(entry.path().filename().string()));
    }
  }
  return found;
}

// Something else in the process closes the gate's epoll descriptor and the
// number goes to another file: the gate says so, builds a new set and goes
// on accepting (and counting, and capping) instead of leaving the port
// without anyone accepting.
TEST(ConnectionGateTest, KeepsAcceptingWhenItsEpollSetIsTakenAway) {
  LogCapture log;
  Server server;
  const std::set<int> before = EpollDescriptors();
  std::unique_ptr<ConnectionGate> gate = Gate(/*per_peer=*/1, /*total=*/0);
  ASSERT_NE(gate, nullptr);
  int epoll_fd = -1;
  for (int fd : EpollDescriptors()) {
    if (before.count(fd) == 0) epoll_fd = fd;
  }
  ASSERT_GE(epoll_fd, 0);
  gate->SetHandoff(server.Handoff());
  Client first("127.0.0.1", gate->port());
  ASSERT_TRUE(WaitFor([&] { return server.held() == 1; }, seconds(10)));

  const int other = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(other, 0);
  ASSERT_EQ(dup2(other, epoll_fd), epoll_fd);
  close(other);
  // The gate notices on its next wait: after this connection.
  Client second("127.0.0.2", gate->port());
  ASSERT_TRUE(WaitFor([&] { return server.held() == 2; }, seconds(10)));
  Client third("127.0.0.3", gate->port());
  EXPECT_TRUE(WaitFor([&] { return server.held() == 3; }, seconds(10)))
      << log.text();
  // Connections are still counted and capped.
  Client again("127.0.0.3", gate->port());
  EXPECT_TRUE(again.ClosedWithin(std::chrono::seconds(10)));
  server.EndFirst();
  EXPECT_TRUE(
      WaitFor([&] { return gate->open_connections_from("127.0.0.1") == 0; },
              seconds(10)));
  gate.reset();
  close(epoll_fd);  // The file that took the number, left alone by the gate.
  EXPECT_THAT(log.text(),
              HasSubstr("event=connection_gate_wait_failed who=test port="));
  EXPECT_THAT(log.text(),
              HasSubstr("event=connection_gate_recovered who=test port="));
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
