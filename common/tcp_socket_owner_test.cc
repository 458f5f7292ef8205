#include "common/tcp_socket_owner.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <string>
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
  int client = -1;
  int listener = -1;
  int accepted = -1;
};

TEST(TcpSocketOwnerTest, FindsTheUidOfTheOtherEndOfALoopbackConnection) {
  Connection connection(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0),
                        "127.0.0.1", "127.0.0.1");
  ASSERT_GE(connection.accepted, 0);
  EXPECT_EQ(connection.ClientOwner(), geteuid());
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
  sockaddr_storage unix_socket = {};
  unix_socket.ss_family = AF_UNIX;
  EXPECT_EQ(TcpSocketOwner(unix_socket, local), std::nullopt);
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
    }
    {
      Connection connection((*v6)[0], "::1", "::1");
      ASSERT_GE(connection.accepted, 0);
      EXPECT_EQ(connection.ClientOwner(), 61118u);
    }
    {
      // An IPv4 listener; the client's IPv6 socket names both ends mapped.
      Connection connection((*v6)[1], "127.0.0.1", "::ffff:127.0.0.1");
      ASSERT_GE(connection.accepted, 0);
      EXPECT_EQ(connection.ClientOwner(), 61118u);
    }
  });
  ASSERT_TRUE(status.ok()) << status;
}

}  // namespace
}  // namespace gdt
