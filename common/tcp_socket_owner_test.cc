#include "common/tcp_socket_owner.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "testing/network_namespace.h"
#include "testing/sockets_of_uid.h"

namespace gdt {
namespace {

sockaddr_storage Name(int fd, bool peer) {
  sockaddr_storage address = {};
  socklen_t length = sizeof(address);
  if (peer) {
    getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length);
  } else {
    getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  }
  return address;
}

// A listener on `listen_on` ("127.0.0.1", "::1"), a connection to it (at
// `to`) on `client_fd`, and its accepted end.
struct Connection {
  Connection(int client_fd, const std::string& listen_on, const std::string& to)
      : client(client_fd) {
    const bool v6 = listen_on.find(':') != std::string::npos;
    listener = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_storage address = {};
    socklen_t length = 0;
    if (v6) {
      auto* in6 = reinterpret_cast<sockaddr_in6*>(&address);
      in6->sin6_family = AF_INET6;
      inet_pton(AF_INET6, listen_on.c_str(), &in6->sin6_addr);
      length = sizeof(sockaddr_in6);
    } else {
      auto* in = reinterpret_cast<sockaddr_in*>(&address);
      in->sin_family = AF_INET;
      inet_pton(AF_INET, listen_on.c_str(), &in->sin_addr);
      length = sizeof(sockaddr_in);
    }
    if (bind(listener, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
        listen(listener, 4) != 0) {
      ADD_FAILURE() << "listen on " << listen_on << ": "
                    << std::strerror(errno);
      return;
    }
    sockaddr_storage target = Name(listener, false);
    if (to.find(':') != std::string::npos) {
      auto* in6 = reinterpret_cast<sockaddr_in6*>(&target);
      const uint16_t port =
          v6 ? in6->sin6_port
             : reinterpret_cast<sockaddr_in*>(&target)->sin_port;
      target = {};
      in6->sin6_family = AF_INET6;
      in6->sin6_port = port;
      inet_pton(AF_INET6, to.c_str(), &in6->sin6_addr);
      length = sizeof(sockaddr_in6);
    }
    if (connect(client, reinterpret_cast<sockaddr*>(&target), length) != 0) {
      ADD_FAILURE() << "connect to " << to << ": " << std::strerror(errno);
      return;
    }
    accepted = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    EXPECT_GE(accepted, 0) << std::strerror(errno);
  }
  ~Connection() {
    for (int fd : {client, accepted, listener}) {
      if (fd >= 0) close(fd);
    }
  }
  // The owner of the client's socket, found by the accepted end's
  // addresses, the other way round, as a server would look for it.
  std::optional<uid_t> ClientOwner() const {
    return TcpSocketOwner(Name(accepted, true), Name(accepted, false));
  }
  // The same found by the client's address alone (the server's peer).
  std::optional<uid_t> ClientOwnerByPeer() const {
    return TcpSocketOwnerAt(Name(accepted, true));
  }
  int client = -1;
  int listener = -1;
  int accepted = -1;
};

TEST(TcpSocketOwnerTest, FindsTheUidOfTheOtherEndOfALoopbackConnection) {
  Connection connection(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0),
                        "127.0.0.1", "127.0.0.1");
  ASSERT_GE(connection.accepted, 0);
  EXPECT_EQ(connection.ClientOwner(), geteuid());
  EXPECT_EQ(connection.ClientOwnerByPeer(), geteuid());
  // The accepted end is the listener's owner's.
  EXPECT_EQ(TcpSocketOwner(Name(connection.client, true),
                           Name(connection.client, false)),
            geteuid());
}

TEST(TcpSocketOwnerTest, NoSuchConnectionIsNone) {
  sockaddr_storage local = {};
  auto* in = reinterpret_cast<sockaddr_in*>(&local);
  in->sin_family = AF_INET;
  in->sin_port = htons(9);
  inet_pton(AF_INET, "127.0.0.9", &in->sin_addr);
  EXPECT_EQ(TcpSocketOwner(local, local), std::nullopt);
  EXPECT_EQ(TcpSocketOwnerAt(local), std::nullopt);
  sockaddr_storage unix_socket = {};
  unix_socket.ss_family = AF_UNIX;
  EXPECT_EQ(TcpSocketOwner(unix_socket, local), std::nullopt);
  EXPECT_EQ(TcpSocketOwnerAt(unix_socket), std::nullopt);
}

// The client closes first, so its end stays behind in TIME_WAIT (for a
// minute), which the kernel shows as uid 0: that remnant is nobody's socket,
// by both ends or by the client's address alone.
TEST(TcpSocketOwnerTest, AClosedConnectionsRemnantHasNoOwner) {
  sockaddr_storage client_end = {};
  sockaddr_storage server_end = {};
  {
    Connection connection(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0),
                          "127.0.0.1", "127.0.0.1");
    ASSERT_GE(connection.accepted, 0);
    client_end = Name(connection.client, false);
    server_end = Name(connection.accepted, false);
    ASSERT_EQ(connection.ClientOwnerByPeer(), geteuid());
    close(connection.client);
    connection.client = -1;
    // The client's FIN has arrived once the accepted end reads the end of
    // the stream; the destructor's close then answers it.
    char byte = 0;
    ASSERT_EQ(read(connection.accepted, &byte, 1), 0);
  }
  // The handshake ends on loopback within moments.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((TcpSocketOwnerAt(client_end).has_value() ||
          TcpSocketOwner(client_end, server_end).has_value()) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(TcpSocketOwnerAt(client_end), std::nullopt);
  EXPECT_EQ(TcpSocketOwner(client_end, server_end), std::nullopt);
}

// Sockets another account made, over IPv4, ::1, and IPv4 from an IPv6
// socket ("::ffff:127.0.0.1", which /proc/net/tcp6 holds): each is that
// account's, whoever connected it. In a network namespace of its own, which
// has ::1 where the host may not.
TEST(TcpSocketOwnerTest, ASocketIsItsMakersWhoeverUsesIt) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: makes sockets as uid 61118";
  const absl::Status status = test::InNewNetworkNamespace({}, [] {
    absl::StatusOr<std::vector<int>> v4 =
        test::TcpSocketsMadeBy(61118, AF_INET, 1);
    absl::StatusOr<std::vector<int>> v6 =
        test::TcpSocketsMadeBy(61118, AF_INET6, 2);
    ASSERT_TRUE(v4.ok()) << v4.status();
    ASSERT_TRUE(v6.ok()) << v6.status();
    {
      Connection connection((*v4)[0], "127.0.0.1", "127.0.0.1");
      ASSERT_GE(connection.accepted, 0);
      EXPECT_EQ(connection.ClientOwner(), 61118u);
      EXPECT_EQ(connection.ClientOwnerByPeer(), 61118u);
    }
    {
      Connection connection((*v6)[0], "::1", "::1");
      ASSERT_GE(connection.accepted, 0);
      EXPECT_EQ(connection.ClientOwner(), 61118u);
      EXPECT_EQ(connection.ClientOwnerByPeer(), 61118u);
    }
    {
      // An IPv4 listener; the client's IPv6 socket names both ends mapped.
      Connection connection((*v6)[1], "127.0.0.1", "::ffff:127.0.0.1");
      ASSERT_GE(connection.accepted, 0);
      EXPECT_EQ(connection.ClientOwner(), 61118u);
      EXPECT_EQ(connection.ClientOwnerByPeer(), 61118u);
    }
  });
  ASSERT_TRUE(status.ok()) << status;
}

}  // namespace
}  // namespace gdt
