#ifndef GDT_TESTING_FREE_PORTS_H_
#define GDT_TESTING_FREE_PORTS_H_
// Consecutive TCP ports a test may bind, for tests that need a range of
// known ports rather than one the kernel picks.
//
// A port the kernel picks for bind(0) lies in its ephemeral range, and so
// do the ports of every outgoing connection and of the TIME_WAIT sockets
// they leave: the neighbours of such a port are often held by other tests'
// connections, and bind() to one then fails with "address already in use".
// These ports come from above the ephemeral range (or below it, where
// nothing is left above), which only explicit binds use, and each was free
// on IPv4 and IPv6 when it was chosen.
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <vector>

namespace gdt::test {

// Binds the wildcard address on `port` (both families, or IPv4 alone on a
// host without IPv6); true if it could.
inline bool PortIsFree(int port) {
  int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 && errno == EAFNOSUPPORT) {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    const bool bound = bind(fd, reinterpret_cast<const sockaddr*>(&address),
                            sizeof(address)) == 0;
    close(fd);
    return bound;
  }
  if (fd < 0) return false;
  const int no = 0;
  setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &no, sizeof(no));
  sockaddr_in6 address{};
  address.sin6_family = AF_INET6;
  address.sin6_port = htons(static_cast<uint16_t>(port));
  const bool bound = bind(fd, reinterpret_cast<const sockaddr*>(&address),
                          sizeof(address)) == 0;
  close(fd);
  return bound;
}

// The first of `count` consecutive ports that were all free, outside the
// kernel's ephemeral range; 0 if none were found.
inline int FreePortRange(int count) {
  int low = 32768;
  int high = 60999;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> low >> high;
  int first = high + 1;
  int last = 65535 - count + 1;
  if (last - first < 16 * count) {  // Too little above it: below it.
    first = 1024;
    last = low - count;
  }
  if (last < first) return 0;
  std::mt19937 random(std::random_device{}());
  std::uniform_int_distribution<int> pick(first, last);
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int start = pick(random);
    bool free = true;
    for (int port = start; free && port < start + count; ++port) {
      free = PortIsFree(port);
    }
    if (free) return start;
  }
  return 0;
}

}  // namespace gdt::test

#endif  // GDT_TESTING_FREE_PORTS_H_
