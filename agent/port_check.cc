#include "agent/port_check.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace gdt::agent {

namespace {

// Binds `port` on the wildcard address of `family` (IPv6 only, for
// AF_INET6) and closes the socket again: true when that worked, false when
// the port is taken there; nullopt with `error` set otherwise.
std::optional<bool> Bindable(int family, uint32_t port, int& error) {
  const int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    error = errno;
    return std::nullopt;
  }
  int result = 0;
  if (family == AF_INET6) {
    const int v6_only = 1;
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6_only, sizeof(v6_only));
    sockaddr_in6 address{};
    address.sin6_family = AF_INET6;
    address.sin6_addr = in6addr_any;
    address.sin6_port = htons(static_cast<uint16_t>(port));
    result =
        bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address));
  } else {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_ANY);
    address.sin_port = htons(static_cast<uint16_t>(port));
    result =
        bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address));
  }
  error = errno;
  close(fd);
  if (result == 0) return true;
  if (error == EADDRINUSE || error == EACCES) return false;
  return std::nullopt;
}

}  // namespace

absl::StatusOr<bool> IsPortFree(uint32_t port) {
  if (port == 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("port must be between 1 and 65535, got ", port));
  }
  int error = 0;
  const std::optional<bool> v4 = Bindable(AF_INET, port, error);
  if (!v4.has_value()) {
    return absl::InternalError(
        absl::StrCat("cannot bind port ", port, ": ", strerror(error)));
  }
  if (!*v4) return false;
  // A socket on IPv6 only (IPV6_V6ONLY) does not keep the IPv4 bind above
  // from working, but it does keep a dual-stack server (torch's TCPStore
  // binds [::] first) from binding the port: without this look a process
  // could hold a port so that it was leased as free and rank 0 could not
  // bind it. A host without IPv6 has only the IPv4 answer.
  const std::optional<bool> v6 = Bindable(AF_INET6, port, error);
  return v6.value_or(true);
}

std::vector<uint32_t> ListenerUids(uint32_t port) {
  std::set<uint32_t> uids;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // The header.
    while (std::getline(in, line)) {
      // sl local_address rem_address st tx:rx tr:when retrnsmt uid ...
      const std::vector<absl::string_view> fields =
          absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (fields.size() < 8 || fields[3] != "0A") continue;  // LISTEN.
      const size_t colon = fields[1].rfind(':');
      uint32_t local_port = 0;
      uint32_t uid = 0;
      if (colon == absl::string_view::npos ||
          !absl::SimpleHexAtoi(fields[1].substr(colon + 1), &local_port) ||
          local_port != port || !absl::SimpleAtoi(fields[7], &uid)) {
        continue;
      }
      uids.insert(uid);
    }
  }
  return std::vector<uint32_t>(uids.begin(), uids.end());
}

}  // namespace gdt::agent
