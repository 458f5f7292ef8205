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

absl::Status ProbeListen(const std::string& address) {
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
  int last_error = 0;
  bool bound = false;
  for (const addrinfo* a = found; a != nullptr && !bound; a = a->ai_next) {
    const int fd =
        socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last_error = errno;
      continue;
    }
    const int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0) {
      bound = true;
    } else {
      last_error = errno;
    }
    close(fd);
  }
  freeaddrinfo(found);
  if (bound) return absl::OkStatus();
  return absl::UnavailableError(std::strerror(last_error));
}

}  // namespace gdt
