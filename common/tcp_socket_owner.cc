#include "common/tcp_socket_owner.h"

#include <arpa/inet.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/file.h"

namespace gdt {
namespace {

// One end of a connection as a table names it: "0100007F:1F90" in
// /proc/net/tcp, 32 hex digits and the port in /proc/net/tcp6. Each 32-bit
// word of the address is printed as the native integer its bytes (in
// network order) make; the port as a plain number.
std::string TableEnd(const unsigned char* bytes, int words, uint16_t port) {
  std::string text;
  for (int word = 0; word < words; ++word) {
    uint32_t value = 0;
    std::memcpy(&value, bytes + 4 * word, 4);
    char hex[9];
    std::snprintf(hex, sizeof(hex), "%08X", value);
    text += hex;
  }
  char port_hex[6];
  std::snprintf(port_hex, sizeof(port_hex), "%04X", port);
  return absl::StrCat(text, ":", port_hex);
}

// `address` as /proc/net/tcp (`ipv4`) and /proc/net/tcp6 (`ipv6`) would
// name it; empty where that table cannot hold it (an IPv6 address that is
// not IPv4-mapped in /proc/net/tcp). False for other families.
bool TableEnds(const sockaddr_storage& address, std::string& ipv4,
               std::string& ipv6) {
  unsigned char v4[4];
  uint16_t port = 0;
  if (address.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&address);
    std::memcpy(v4, &in->sin_addr, 4);
    port = ntohs(in->sin_port);
  } else if (address.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&address);
    port = ntohs(in6->sin6_port);
    if (!IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
      ipv4.clear();
      ipv6 = TableEnd(in6->sin6_addr.s6_addr, 4, port);
      return true;
    }
    std::memcpy(v4, &in6->sin6_addr.s6_addr[12], 4);
  } else {
    return false;
  }
  ipv4 = TableEnd(v4, 1, port);
  unsigned char mapped[16] = {};
  mapped[10] = 0xff;
  mapped[11] = 0xff;
  std::memcpy(mapped + 12, v4, 4);
  ipv6 = TableEnd(mapped, 4, port);
  return true;
}

// What the kernel's socket diagnostics said of one exact connection.
enum class DiagAnswer { kFound, kNone, kCannotAsk };

// The 16 address bytes and the port of `address` as family `family` puts
// them in an inet_diag socket id; false when `address` cannot be written
// so (an IPv6 address that is not IPv4-mapped, asked as AF_INET).
bool DiagEnd(const sockaddr_storage& address, int family, uint32_t* bytes,
             uint16_t* port) {
  std::memset(bytes, 0, 16);
  if (address.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&address);
    *port = in->sin_port;
    if (family == AF_INET) {
      std::memcpy(bytes, &in->sin_addr, 4);
    } else {
      auto* raw = reinterpret_cast<unsigned char*>(bytes);
      raw[10] = 0xff;
      raw[11] = 0xff;
      std::memcpy(raw + 12, &in->sin_addr, 4);
    }
    return true;
  }
  if (address.ss_family != AF_INET6) return false;
  const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&address);
  *port = in6->sin6_port;
  if (family == AF_INET6) {
    std::memcpy(bytes, &in6->sin6_addr, 16);
    return true;
  }
  if (!IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) return false;
  std::memcpy(bytes, &in6->sin6_addr.s6_addr[12], 4);
  return true;
}

// Asks the kernel (NETLINK_SOCK_DIAG, one request for one exact socket,
// whatever the number of sockets on the host) for the uid of the `family`
// TCP socket whose own end is `local` and whose peer is `remote`.
DiagAnswer DiagOwner(int family, const sockaddr_storage& local,
                     const sockaddr_storage& remote, uid_t* uid) {
  struct {
    nlmsghdr header;
    inet_diag_req_v2 request;
  } message = {};
  if (!DiagEnd(local, family, message.request.id.idiag_src,
               &message.request.id.idiag_sport) ||
      !DiagEnd(remote, family, message.request.id.idiag_dst,
               &message.request.id.idiag_dport)) {
    return DiagAnswer::kNone;
  }
  message.header.nlmsg_len = sizeof(message);
  message.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  message.header.nlmsg_flags = NLM_F_REQUEST;
  message.request.sdiag_family = static_cast<uint8_t>(family);
  message.request.sdiag_protocol = IPPROTO_TCP;
  message.request.idiag_states = ~0u;
  message.request.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
  message.request.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  // In the calling thread's network namespace, as the tables below.
  const int fd =
      socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (fd < 0) return DiagAnswer::kCannotAsk;
  const timeval limit = {.tv_sec = 1, .tv_usec = 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  sockaddr_nl kernel = {};
  kernel.nl_family = AF_NETLINK;
  DiagAnswer answer = DiagAnswer::kCannotAsk;
  if (sendto(fd, &message, sizeof(message), 0,
             reinterpret_cast<const sockaddr*>(&kernel),
             sizeof(kernel)) == static_cast<ssize_t>(sizeof(message))) {
    alignas(nlmsghdr) char reply[1024];
    const ssize_t got = recv(fd, reply, sizeof(reply), 0);
    const auto* header = reinterpret_cast<const nlmsghdr*>(reply);
    if (got >= static_cast<ssize_t>(sizeof(nlmsghdr)) &&
        NLMSG_OK(header, static_cast<size_t>(got))) {
      if (header->nlmsg_type == NLMSG_ERROR) {
        const auto* error = static_cast<const nlmsgerr*>(NLMSG_DATA(header));
        // ENOENT: no such socket; anything else: the kernel cannot say.
        if (header->nlmsg_len >= NLMSG_LENGTH(sizeof(nlmsgerr)) &&
            error->error == -ENOENT) {
          answer = DiagAnswer::kNone;
        }
      } else if (header->nlmsg_type == SOCK_DIAG_BY_FAMILY &&
                 header->nlmsg_len >= NLMSG_LENGTH(sizeof(inet_diag_msg))) {
        const auto* found =
            static_cast<const inet_diag_msg*>(NLMSG_DATA(header));
        // A TIME_WAIT remnant of a closed socket shows uid 0: no owner.
        if (found->idiag_state == TCP_TIME_WAIT) {
          answer = DiagAnswer::kNone;
        } else {
          *uid = found->idiag_uid;
          answer = DiagAnswer::kFound;
        }
      }
    }
  }
  close(fd);
  return answer;
}

// The uid of the socket at `local` whose remote address is `remote`, or at
// `local` with any remote address when `remote` is null.
std::optional<uid_t> Owner(const sockaddr_storage& local,
                           const sockaddr_storage* remote) {
  std::string local_v4, local_v6, remote_v4, remote_v6;
  if (!TableEnds(local, local_v4, local_v6) ||
      (remote != nullptr && !TableEnds(*remote, remote_v4, remote_v6))) {
    return std::nullopt;
  }
  // The calling thread's namespace: /proc/net is the whole process's (its
  // first thread's), which a thread that entered another one does not use.
  std::vector<std::pair<std::string, std::pair<std::string, std::string>>>
      tables;
  if (!local_v4.empty() && (remote == nullptr || !remote_v4.empty())) {
    tables.push_back({"/proc/thread-self/net/tcp", {local_v4, remote_v4}});
  }
  tables.push_back({"/proc/thread-self/net/tcp6", {local_v6, remote_v6}});
  std::optional<uid_t> owner;
  for (const auto& [path, ends] : tables) {
    absl::StatusOr<std::string> table = ReadTextFile(path);
    if (!table.ok()) continue;
    for (absl::string_view line : absl::StrSplit(*table, '\n')) {
      const std::vector<absl::string_view> fields =
          absl::StrSplit(line, ' ', absl::SkipEmpty());
      // sl local_address rem_address st tx_queue:rx_queue tr:tm->when
      // retrnsmt uid ...
      // A socket in TIME_WAIT (06) is the kernel's remnant of a closed
      // one and shows uid 0: no owner at all.
      if (fields.size() < 8 || fields[1] != ends.first ||
          (remote != nullptr && fields[2] != ends.second) ||
          fields[3] == "06") {
        continue;
      }
      uint32_t uid = 0;
      if (!absl::SimpleAtoi(fields[7], &uid)) return std::nullopt;
      if (owner.has_value() && *owner != uid) return std::nullopt;
      owner = uid;
    }
  }
  return owner;
}

}  // namespace

std::optional<uid_t> TcpSocketOwner(const sockaddr_storage& local,
                                    const sockaddr_storage& remote) {
  // The socket may be IPv4 or IPv6 (with IPv4-mapped addresses) whatever
  // the family its peer accepted it as: ask for both.
  bool asked = true;
  for (const int family : {AF_INET, AF_INET6}) {
    uid_t uid = 0;
    switch (DiagOwner(family, local, remote, &uid)) {
      case DiagAnswer::kFound:
        return uid;
      case DiagAnswer::kNone:
        break;
      case DiagAnswer::kCannotAsk:
        asked = false;
        break;
    }
  }
  if (asked) return std::nullopt;
  // A kernel without socket diagnostics for TCP: read the tables.
  return Owner(local, &remote);
}

std::optional<uid_t> TcpSocketOwnerAt(const sockaddr_storage& local) {
  return Owner(local, nullptr);
}

}  // namespace gdt
