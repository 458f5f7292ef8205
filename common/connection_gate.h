#ifndef GDT_COMMON_CONNECTION_GATE_H_
#define GDT_COMMON_CONNECTION_GATE_H_
// A listener that accepts TCP connections itself and caps how many are open
// at once from each remote peer and in all, before any server library sees
// them. A server whose library holds every accepted connection (and
// every call started on it) until the peer goes away can otherwise be made
// to hold as many as a single client cares to open.
//
// Accepted connections within the caps are handed to a handoff function
// (a gRPC server's external connection acceptor), which owns the descriptor
// from then on. The gate keeps a duplicate of each handed-off socket only to
// learn when the server shuts it down (or the peer resets it), and counts it
// open until then. Connections over a cap are closed at once; refusals are
// logged one line per peer per interval, with a count.
//
// A peer is what one host can be told apart by: an IPv4 address (also when
// reached over IPv6, "::ffff:10.0.0.1"), or an IPv6 prefix, a /64 unless
// told otherwise ("2001:db8:1:2::/64": a host usually holds a whole /64 and
// may pick any address in it). ::1 is itself. With loopback_peers_by_uid, a
// connection from this host's loopback (127.0.0.0/8, ::1) is the account
// that made its socket instead ("uid:1000"): every process of the host may
// pick any of 127.0.0.0/8's addresses, but not its uid.
//
// The total is shared fairly: while at least three quarters of max_total
// are open, a peer that already holds its fair share, max_total / (the peers
// holding connections, itself included, + 1) but never fewer than
// kFairShareFloor, is refused too. Peers that each hold as many as the
// others are refused only within one share of the total (n peers holding c
// each are refused from n x c >= max_total x n / (n + 1) on), and a few
// peers at their max_per_peer cannot take the whole total: they leave room
// for another one.
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "common/log_throttle.h"
#include "common/mutex.h"

namespace gdt {

class ConnectionGate {
 public:
  static constexpr int kDefaultIPv6PrefixLength = 64;
  static constexpr int kMinIPv6PrefixLength = 32;
  static constexpr int kMaxIPv6PrefixLength = 128;
  struct Options {
    // Names the server in log lines ("coordinator").
    std::string who;
    // Connections open at once from one peer (see above). 0: no cap.
    int max_per_peer = 0;
    // Connections open at once from everyone, shared fairly (see above).
    // 0: no cap.
    int max_total = 0;
    // Leading bits of an IPv6 address that make one peer, 32..128.
    int ipv6_prefix_length = kDefaultIPv6PrefixLength;
    // Whether a loopback peer is the uid owning the connecting socket (as
    // /proc/net/tcp{,6} shows it) rather than its address; the address when
    // that cannot be found.
    bool loopback_peers_by_uid = false;
    // At most one refusal line per peer per interval.
    std::chrono::steady_clock::duration log_interval = std::chrono::seconds(10);
  };
  // Takes an accepted, non-blocking socket: `listener_fd` is the socket it
  // was accepted on, `fd` is the connection, now owned by the callee.
  using Handoff = std::function<void(int listener_fd, int fd)>;
  // The fair share of the total is never below this many connections.
  static constexpr int kFairShareFloor = 8;

  // The peer a remote address counts toward by its address (see above):
  // "10.0.0.1", "2001:db8:1:2::/64" (the first `ipv6_prefix_length` bits,
  // clamped to 32..128, the rest zero), "::1"; empty when the address is
  // neither IPv4 nor IPv6.
  static std::string PeerOf(const sockaddr_storage& address,
                            int ipv6_prefix_length = kDefaultIPv6PrefixLength);
  // Whether `address` is this host's loopback: 127.0.0.0/8 (also as
  // "::ffff:127.x.y.z") or ::1.
  static bool IsLoopback(const sockaddr_storage& address);

  // Listens on `address` ("host:port", port 0 picks a free one) on every
  // address the host resolves to, and starts accepting. Connections that
  // come before SetHandoff() (or while the handoff is unset) are closed.
  // Unavailable with the system's reason when it cannot listen.
  static absl::StatusOr<std::unique_ptr<ConnectionGate>> Listen(
      const std::string& address, Options options);
  // Stops accepting and closes the listeners and the duplicates it keeps;
  // handed-off connections stay with their owner.
  ~ConnectionGate();
  ConnectionGate(const ConnectionGate&) = delete;
  ConnectionGate& operator=(const ConnectionGate&) = delete;

  int port() const { return port_; }
  // Where accepted connections go from now on; an empty function closes
  // them (e.g. while the server behind the gate restarts). Returns once no
  // connection is being handed to the previous function.
  void SetHandoff(Handoff handoff);
  // Connections counted open now, in all and from `peer` (as PeerOf()
  // names it).
  int open_connections() const;
  int open_connections_from(const std::string& peer) const;
  // Connections refused since start.
  uint64_t refused() const;

 private:
  ConnectionGate(Options options, std::vector<int> listeners, int port,
                 int epoll_fd, int wake_fd);
  void Run();
  // epoll_wait() failed with `error` (other than EINTR): the descriptor
  // is no longer this gate's epoll set (someone closed it, and the number
  // may be reused). Logs it and builds a new set, retrying with a growing
  // delay until that works. False when the gate is stopping meanwhile.
  bool RebuildEvents(int error);
  // A new epoll set watching the listeners, the wake descriptor and every
  // open connection's duplicate; -1 with errno when it cannot be made.
  int NewEventSet();
  // Why a connection from `peer` holding `from_peer` is refused now, or
  // null.
  // The peer of the connection `fd` accepted from `address`.
  std::string PeerOfConnection(int fd, const sockaddr_storage& address) const;
  const char* OverLimit(const std::string& peer, int from_peer) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AcceptFrom(int listener_fd);
  void Refuse(int fd, const std::string& peer, const char* why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Closed(int watch_fd);
  // The process is out of descriptors (or memory): logs it (throttled) and
  // pauses accepting for a moment.
  void OutOfFiles(int error);
  struct RefusalLine {
    std::chrono::steady_clock::time_point last;
    uint64_t pending = 0;  // Refusals not logged yet.
    const char* limit = "";
  };
  void LogRefusals(const std::string& peer, RefusalLine& line,
                   std::chrono::steady_clock::time_point now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Logs refusal counts an interval old, forgets peers quiet for an
  // interval; whether any peer is still remembered.
  bool FlushRefusals();

  const Options options_;
  const std::vector<int> listeners_;
  const int port_;
  // Replaced by RebuildEvents(); loop thread only (and the destructor, after
  // it).
  int epoll_fd_;
  const int wake_fd_;
  std::atomic<bool> stopping_{false};
  // Accepting is paused until then after the process ran out of
  // descriptors (accept() would fail at once again); loop thread only.
  std::chrono::steady_clock::time_point paused_until_;
  bool paused_ = false;
  LogThrottle out_of_files_log_{std::chrono::seconds(10)};
  LogThrottle wait_failed_log_{std::chrono::seconds(10)};

  // Held while a connection is handed off, so that SetHandoff() returns
  // only once the previous function is no longer called.
  Mutex handoff_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  Handoff handoff_ ABSL_GUARDED_BY(handoff_mu_);

  mutable Mutex mu_;
  // The duplicate kept of each handed-off connection -> its peer.
  std::map<int, std::string> open_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> per_peer_ ABSL_GUARDED_BY(mu_);
  uint64_t refused_ ABSL_GUARDED_BY(mu_) = 0;
  // Per refused peer, for one line per interval; quiet ones are forgotten.
  std::map<std::string, RefusalLine> refusal_lines_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace gdt

#endif  // GDT_COMMON_CONNECTION_GATE_H_
