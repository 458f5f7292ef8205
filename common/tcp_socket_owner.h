#ifndef GDT_COMMON_TCP_SOCKET_OWNER_H_
#define GDT_COMMON_TCP_SOCKET_OWNER_H_
// Which account made a TCP socket of this host: what the kernel's socket
// diagnostics and the uid column of /proc/net/tcp and /proc/net/tcp6 say.
// The kernel sets it from the creator's credentials when the socket is
// made (socket(2), or accept(2) for the listener's owner) and never from
// anything the socket's user sends, so a process can claim no uid but
// those whose sockets it was handed.

#include <sys/socket.h>
#include <sys/types.h>

#include <optional>

namespace gdt {

// The uid of the TCP socket whose local address is `local` and whose remote
// address is `remote` (both IPv4 or IPv6, with ports; an IPv4 address is
// also looked for as an IPv6 socket's "::ffff:a.b.c.d"), in the network
// namespace of the calling thread; nullopt when there is none (it closed
// meanwhile, or is in another namespace or on another host; a TIME_WAIT
// remnant is no socket), or when it cannot be told. Asks the kernel's
// socket diagnostics (netlink) for that one socket, which costs the same
// however many sockets the host has (a flood of connections does not make
// each lookup dearer); only where the kernel has none for TCP does it read
// the tables whole, and then more than one uid matching is nullopt too.
std::optional<uid_t> TcpSocketOwner(const sockaddr_storage& local,
                                    const sockaddr_storage& remote);

// The same for the TCP socket whose local address is `local`, whatever its
// remote address: for a server that knows only the other end of a
// connection (its peer), whose socket on this host has the peer's address
// as its local one. nullopt too when sockets of more than one uid have that
// local address.
std::optional<uid_t> TcpSocketOwnerAt(const sockaddr_storage& local);

}  // namespace gdt

#endif  // GDT_COMMON_TCP_SOCKET_OWNER_H_
