#ifndef GDT_AGENT_PORT_CHECK_H_
#define GDT_AGENT_PORT_CHECK_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace gdt::agent {

// Returns whether TCP `port` can be bound on 0.0.0.0 and on [::] (IPv6
// only) right now (without SO_REUSEADDR), by binding it and closing the
// socket again; the IPv6 look is skipped on a host without IPv6. A port in
// use on either, or one this process may not bind, reads as not free.
// Errors: InvalidArgument for port 0 or above 65535; Internal when no socket
// can be made.
absl::StatusOr<bool> IsPortFree(uint32_t port);

// The accounts (uids) of the sockets that listen on TCP `port` on this host,
// on any address, IPv4 or IPv6, from /proc/net/tcp and /proc/net/tcp6 (of
// this process's network namespace); each uid once, ascending. Nothing when
// none listens or the tables cannot be read.
std::vector<uint32_t> ListenerUids(uint32_t port);

}  // namespace gdt::agent

#endif  // GDT_AGENT_PORT_CHECK_H_
