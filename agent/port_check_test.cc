#include "agent/port_check.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "gtest/gtest.h"

namespace gdt::agent {
namespace {

// A TCP socket bound to a kernel-chosen loopback port; optionally listening.
class BoundSocket {
 public:
  explicit BoundSocket(bool listen_on_it) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof(address));
    if (listen_on_it) listen(fd_, 1);
    socklen_t length = sizeof(address);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
  }
  ~BoundSocket() { Close(); }
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  uint32_t port() const { return port_; }

 private:
  int fd_ = -1;
  uint32_t port_ = 0;
};

TEST(PortCheckTest, ListeningPortIsBusy) {
  BoundSocket listener(/*listen_on_it=*/true);
  ASSERT_GT(listener.port(), 0u);

  absl::StatusOr<bool> free = IsPortFree(listener.port());

  ASSERT_TRUE(free.ok()) << free.status();
  EXPECT_FALSE(*free);
}

TEST(PortCheckTest, ReleasedPortIsFree) {
  BoundSocket probe(/*listen_on_it=*/false);
  const uint32_t port = probe.port();
  probe.Close();

  absl::StatusOr<bool> free = IsPortFree(port);

  ASSERT_TRUE(free.ok()) << free.status();
  EXPECT_TRUE(*free);
}

// A listener on IPv6 only leaves the IPv4 wildcard bindable, but a
// dual-stack server (torch's TCPStore binds [::] first) cannot bind the
// port: leased as free, rank 0 would fail on it. Such a port is not free.
TEST(PortCheckTest, APortHeldOnIpv6OnlyIsBusy) {
  const int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) GTEST_SKIP() << "no IPv6 on this host: " << strerror(errno);
  const int v6_only = 1;
  ASSERT_EQ(
      setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6_only, sizeof(v6_only)), 0);
  sockaddr_in6 address{};
  address.sin6_family = AF_INET6;
  address.sin6_addr = in6addr_any;
  if (bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) !=
      0) {
    const int error = errno;
    close(fd);
    GTEST_SKIP() << "cannot bind on IPv6 here: " << strerror(error);
  }
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t length = sizeof(address);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const uint32_t port = ntohs(address.sin6_port);

  absl::StatusOr<bool> free = IsPortFree(port);

  close(fd);
  ASSERT_TRUE(free.ok()) << free.status();
  EXPECT_FALSE(*free);
}

TEST(PortCheckTest, OutOfRangePortIsInvalid) {
  EXPECT_EQ(IsPortFree(0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(IsPortFree(70000).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gdt::agent
