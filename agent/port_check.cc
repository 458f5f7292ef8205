#include "agent/port_check.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace gdt::agent {

absl::StatusOr<bool> IsPortFree(uint32_t port) {
  if (port == 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("port must be between 1 and 65535, got ", port));
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  }
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = htons(static_cast<uint16_t>(port));
  const int result =
      bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address));
  const int error = errno;
  close(fd);
  if (result == 0) return true;
  if (error == EADDRINUSE || error == EACCES) return false;
  return absl::InternalError(
      absl::StrCat("cannot bind port ", port, ": ", strerror(error)));
}

}  // namespace gdt::agent
