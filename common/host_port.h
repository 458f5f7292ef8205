#ifndef GDT_COMMON_HOST_PORT_H_
#define GDT_COMMON_HOST_PORT_H_

// Network addresses as gdt's configs and flags spell them: "host:port",
// where host is a name, an IPv4 address or a bracketed IPv6 address
// ("[::1]:7000"), and the port a decimal number in [0, 65535].

#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace gdt {

struct HostPort {
  // Without brackets: "::1", not "[::1]".
  std::string host;
  uint16_t port = 0;
};

// Splits `text` into host and port. Errors (InvalidArgument, one line naming
// the text and what is wrong): no colon, an empty host, an unclosed
// bracket, an unbracketed IPv6 address, a port that is missing, not a
// number or outside [0, 65535].
absl::StatusOr<HostPort> ParseHostPort(std::string_view text);

// "host:port", bracketing `host` when it is an IPv6 address (holds a colon
// and is not bracketed already).
std::string JoinHostPort(std::string_view host, int port);

// One address a server may listen on.
struct ListenAddress {
  int family = 0;  // AF_INET or AF_INET6.
  sockaddr_storage address = {};
  socklen_t length = 0;
};

// The addresses a TCP server listening on `address` binds ("localhost":
// ::1 and 127.0.0.1; a wildcard host: the wildcard of each family), with
// its port (0 stays 0). InvalidArgument for what ParseHostPort refuses;
// Unavailable with the resolver's reason when the host does not resolve.
absl::StatusOr<std::vector<ListenAddress>> ResolveListenAddress(
    const std::string& address);

// Whether a server could listen on `address` now: binds a socket to it (with
// SO_REUSEADDR, as servers do) and closes it again. Unavailable with the
// system's reason as its message ("Address already in use", "Cannot assign
// requested address") when no address it resolves to can be bound; a
// server checks this first so that the operator reads the reason in one
// line (gRPC's own report is a multi-line dump without it).
absl::Status ProbeListen(const std::string& address);

}  // namespace gdt

#endif  // GDT_COMMON_HOST_PORT_H_
