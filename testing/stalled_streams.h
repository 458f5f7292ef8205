#ifndef GDT_TESTING_STALLED_STREAMS_H_
#define GDT_TESTING_STALLED_STREAMS_H_

// Connections that start gRPC calls whose request message never comes, as
// a client that wants a server to hold memory for it would.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/host_port.h"
#include "gtest/gtest.h"
#include "testing/sockets_of_uid.h"

namespace gdt::test {

// Connections from `source` (an IPv4 address of this host) to the IPv4
// `endpoint`, each starting `streams` gRPC calls of `method` whose request
// message never comes: HTTP/2's preface, SETTINGS and one HEADERS frame per
// call. Closed when it goes.
class StalledStreams {
 public:
  StalledStreams() = default;
  // Connections on sockets made by `maker` (as TcpSocketsMadeBy() makes
  // them; root only), as another account's job would open them.
  explicit StalledStreams(uid_t maker) : maker_(maker) {}
  StalledStreams(const StalledStreams&) = delete;
  StalledStreams& operator=(const StalledStreams&) = delete;
  ~StalledStreams() {
    for (int fd : fds_) close(fd);
  }

  // Use with ASSERT_NO_FATAL_FAILURE. `method`: "/package.Service/Method".
  void Open(const std::string& source, const std::string& endpoint,
            int connections, int streams,
            const std::string& method = "/gdt.v1.Coordinator/GetStatus") {
    absl::StatusOr<HostPort> parsed = ParseHostPort(endpoint);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(parsed->port));
    ASSERT_EQ(inet_pton(AF_INET, parsed->host.c_str(), &to.sin_addr), 1);
    sockaddr_in from{};
    from.sin_family = AF_INET;
    ASSERT_EQ(inet_pton(AF_INET, source.c_str(), &from.sin_addr), 1);
    std::string data = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    data += Frame(4, 0, 0, "");  // SETTINGS
    std::string headers;
    for (const auto& [name, value] :
         {std::pair<std::string, std::string>{":method", "POST"},
          {":scheme", "http"},
          {":path", method},
          {":authority", parsed->host},
          {"content-type", "application/grpc"},
          {"te", "trailers"}}) {
      // A literal header field without indexing, short name and value.
      headers += '\0';
      headers += static_cast<char>(name.size());
      headers += name;
      headers += static_cast<char>(value.size());
      headers += value;
    }
    for (int i = 0; i < streams; ++i) {
      data += Frame(1, 4, 2 * i + 1, headers);  // HEADERS, END_HEADERS
    }
    std::vector<int> made;
    if (maker_.has_value()) {
      absl::StatusOr<std::vector<int>> sockets =
          TcpSocketsMadeBy(*maker_, AF_INET, connections);
      ASSERT_TRUE(sockets.ok()) << sockets.status();
      made = *std::move(sockets);
      // Closed with the others whatever happens below.
      fds_.insert(fds_.end(), made.begin(), made.end());
    }
    for (int i = 0; i < connections; ++i) {
      const int fd = maker_.has_value()
                         ? made[i]
                         : socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      ASSERT_GE(fd, 0);
      if (!maker_.has_value()) fds_.push_back(fd);
      ASSERT_EQ(
          bind(fd, reinterpret_cast<const sockaddr*>(&from), sizeof(from)), 0)
          << source << ": " << strerror(errno);
      ASSERT_EQ(connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof(to)),
                0)
          << i << ": " << strerror(errno);
      // A connection the server already closed may refuse the write.
      (void)!send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    }
  }

  // How many connections the other end has closed (reading them ends, or
  // they were reset) by now.
  int Closed() const {
    int closed = 0;
    for (int fd : fds_) {
      pollfd one{fd, POLLIN, 0};
      if (poll(&one, 1, 0) != 1) continue;
      char buffer[4096];
      const ssize_t got = recv(fd, buffer, sizeof(buffer), MSG_PEEK);
      if (got == 0 || (got < 0 && errno == ECONNRESET)) ++closed;
    }
    return closed;
  }

 private:
  static std::string Frame(int kind, int flags, uint32_t stream,
                           const std::string& payload) {
    std::string frame;
    const size_t length = payload.size();
    frame += static_cast<char>((length >> 16) & 0xff);
    frame += static_cast<char>((length >> 8) & 0xff);
    frame += static_cast<char>(length & 0xff);
    frame += static_cast<char>(kind);
    frame += static_cast<char>(flags);
    for (int shift = 24; shift >= 0; shift -= 8) {
      frame += static_cast<char>((stream >> shift) & 0xff);
    }
    return frame + payload;
  }

  std::optional<uid_t> maker_;
  std::vector<int> fds_;
};

}  // namespace gdt::test

#endif  // GDT_TESTING_STALLED_STREAMS_H_
