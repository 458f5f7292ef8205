#include "common/host_port.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace gdt {
namespace {

absl::Status Bad(std::string_view text, std::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(
      "'", std::string(text), "' is not host:port: ", std::string(why)));
}

}  // namespace

absl::StatusOr<HostPort> ParseHostPort(std::string_view text) {
  HostPort result;
  std::string_view rest;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) return Bad(text, "no closing ']'");
    result.host = std::string(text.substr(1, close - 1));
    rest = text.substr(close + 1);
    if (rest.empty() || rest.front() != ':') {
      return Bad(text, "no ':port' after the ']'");
    }
    rest.remove_prefix(1);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return Bad(text, "no port");
    result.host = std::string(text.substr(0, colon));
    if (result.host.find('/') != std::string::npos) {
      return Bad(text,
                 "a URL or gRPC target (scheme://, dns:///) is not a host, "
                 "as in coord.example.com:7000");
    }
    if (result.host.find(':') != std::string::npos) {
      return Bad(text, "an IPv6 host must be in brackets, as in [::1]:7000");
    }
    rest = text.substr(colon + 1);
  }
  if (result.host.empty()) return Bad(text, "no host");
  if (rest.empty()) return Bad(text, "no port");
  uint32_t port = 0;
  if (rest.find_first_not_of("0123456789") != std::string_view::npos ||
      !absl::SimpleAtoi(std::string(rest), &port) || port > 65535) {
    return Bad(text, absl::StrCat("port '", std::string(rest),
                                  "' is not a number in [0, 65535]"));
  }
  result.port = static_cast<uint16_t>(port);
  return result;
}

std::string JoinHostPort(std::string_view host, int port) {
  if (host.find(':') != std::string_view::npos && host.front() != '[') {
    return absl::StrCat("[", std::string(host), "]:", port);
  }
  return absl::StrCat(std::string(host), ":", port);
}

absl::StatusOr<std::vector<ListenAddress>> ResolveListenAddress(
    const std::string& address) {
  absl::StatusOr<HostPort> parsed = ParseHostPort(address);
  if (!parsed.ok()) return parsed.status();
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(parsed->port);
  if (const int error =
          getaddrinfo(parsed->host.c_str(), port.c_str(), &hints, &found);
      error != 0) {
    return absl::UnavailableError(gai_strerror(error));
  }
  std::vector<ListenAddress> addresses;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if ((a->ai_family != AF_INET && a->ai_family != AF_INET6) ||
        a->ai_addrlen > sizeof(sockaddr_storage)) {
      continue;
    }
    ListenAddress listen;
    listen.family = a->ai_family;
    std::memcpy(&listen.address, a->ai_addr, a->ai_addrlen);
    listen.length = a->ai_addrlen;
    addresses.push_back(listen);
  }
  freeaddrinfo(found);
  return addresses;
}

absl::Status ProbeListen(const std::string& address) {
  absl::StatusOr<std::vector<ListenAddress>> addresses =
      ResolveListenAddress(address);
  if (!addresses.ok()) return addresses.status();
  int last_error = EADDRNOTAVAIL;
  for (const ListenAddress& a : *addresses) {
    const int fd = socket(a.family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      last_error = errno;
      continue;
    }
    const int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    const bool bound =
        bind(fd, reinterpret_cast<const sockaddr*>(&a.address), a.length) == 0;
    if (!bound) last_error = errno;
    close(fd);
    if (bound) return absl::OkStatus();
  }
  return absl::UnavailableError(std::strerror(last_error));
}

}  // namespace gdt
