#include "common/connection_gate.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/host_port.h"
#include "common/logging.h"
#include "common/open_files.h"
#include "common/tcp_socket_owner.h"
#include "spdlog/spdlog.h"

namespace gdt {
namespace {

// How long accepting pauses after the process ran out of descriptors.
constexpr std::chrono::milliseconds kOutOfFilesPause{100};
// The delays between attempts to build a new epoll set.
constexpr std::chrono::milliseconds kRebuildFirstDelay{10};
constexpr std::chrono::milliseconds kRebuildMaxDelay{1000};

int PortOf(int fd) {
  sockaddr_storage bound = {};
  socklen_t length = sizeof(bound);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length) != 0) {
    return 0;
  }
  if (bound.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
  }
  if (bound.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port);
  }
  return 0;
}

void SetPort(sockaddr* address, int port) {
  if (address->sa_family == AF_INET) {
    reinterpret_cast<sockaddr_in*>(address)->sin_port =
        htons(static_cast<uint16_t>(port));
  } else if (address->sa_family == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(address)->sin6_port =
        htons(static_cast<uint16_t>(port));
  }
}

}  // namespace

std::string ConnectionGate::PeerOf(const sockaddr_storage& address,
                                   int ipv6_prefix_length) {
  char text[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&address);
    if (inet_ntop(AF_INET, &v4->sin_addr, text, sizeof(text)) == nullptr) {
      return "";
    }
    return text;
  }
  if (address.ss_family != AF_INET6) return "";
  const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&address);
  if (IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr)) {
    if (inet_ntop(AF_INET, &v6->sin6_addr.s6_addr[12], text, sizeof(text)) ==
        nullptr) {
      return "";
    }
    return text;
  }
  if (IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr)) return "::1";
  // The prefix: the rest is the host's to choose.
  const int bits = std::clamp(ipv6_prefix_length, kMinIPv6PrefixLength,
                              kMaxIPv6PrefixLength);
  in6_addr prefix = v6->sin6_addr;
  for (int byte = 0; byte < 16; ++byte) {
    const int kept = std::clamp(bits - 8 * byte, 0, 8);
    prefix.s6_addr[byte] &= static_cast<uint8_t>(0xff00 >> kept);
  }
  if (inet_ntop(AF_INET6, &prefix, text, sizeof(text)) == nullptr) return "";
  return absl::StrCat(text, "/", bits);
}

bool ConnectionGate::IsLoopback(const sockaddr_storage& address) {
  if (address.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&address);
    return (ntohl(v4->sin_addr.s_addr) >> 24) == 127;
  }
  if (address.ss_family != AF_INET6) return false;
  const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&address);
  if (IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr)) return true;
  return IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr) &&
         v6->sin6_addr.s6_addr[12] == 127;
}

std::string ConnectionGate::PeerOfConnection(
    int fd, const sockaddr_storage& address) const {
  if (!options_.loopback_peers_by_uid || !IsLoopback(address)) {
    return PeerOf(address, options_.ipv6_prefix_length);
  }
  // Any process of this host may connect from any loopback address, so the
  // address tells them apart no better than a name they pick. The uid of
  // the connecting socket does: the kernel sets it from the credentials of
  // the process that made the socket, and nothing sent over it changes it.
  // The other end is a socket of this host (loopback), in the namespace of
  // this thread, which accepted it; it is found by its addresses, which are
  // this connection's the other way round.
  sockaddr_storage local = {};
  socklen_t length = sizeof(local);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0) {
    if (std::optional<uid_t> uid = TcpSocketOwner(address, local)) {
      return absl::StrCat("uid:", *uid);
    }
  }
  // Closed already, or the tables cannot be read.
  return PeerOf(address, options_.ipv6_prefix_length);
}

absl::StatusOr<std::unique_ptr<ConnectionGate>> ConnectionGate::Listen(
    const std::string& address, Options options) {
  absl::StatusOr<std::vector<ListenAddress>> addresses =
      ResolveListenAddress(address);
  if (!addresses.ok()) {
    if (!absl::IsUnavailable(addresses.status())) return addresses.status();
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", address, ": ", addresses.status().message()));
  }
  std::vector<int> listeners;
  // The port asked for (0: the first address bound picks one).
  absl::StatusOr<HostPort> parsed = ParseHostPort(address);
  int port = parsed.ok() ? parsed->port : 0;
  int first_error = 0;
  // Every address the host resolves to ("localhost": ::1 and 127.0.0.1),
  // on one port: the first one bound picks it when the port is 0.
  for (ListenAddress& a : *addresses) {
    const int fd =
        socket(a.family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      if (first_error == 0) first_error = errno;
      continue;
    }
    const int yes = 1;
    const int no = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (a.family == AF_INET6) {
      // "[::]" takes IPv4 connections too, as gRPC's own listener does.
      setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &no, sizeof(no));
    }
    SetPort(reinterpret_cast<sockaddr*>(&a.address), port);
    if (bind(fd, reinterpret_cast<const sockaddr*>(&a.address), a.length) !=
            0 ||
        listen(fd, SOMAXCONN) != 0) {
      if (first_error == 0) first_error = errno;
      close(fd);
      continue;
    }
    if (port == 0) port = PortOf(fd);
    listeners.push_back(fd);
  }
  if (listeners.empty()) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address, ": ",
                     std::strerror(first_error != 0 ? first_error : EINVAL)));
  }
  const int epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  const int wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (epoll_fd < 0 || wake_fd < 0) {
    const int error = errno;
    for (int fd : listeners) close(fd);
    if (epoll_fd >= 0) close(epoll_fd);
    if (wake_fd >= 0) close(wake_fd);
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address, ": ", std::strerror(error)));
  }
  for (int fd : listeners) {
    epoll_event event = {};
    event.events = EPOLLIN;
    event.data.fd = fd;
    epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &event);
  }
  epoll_event wake = {};
  wake.events = EPOLLIN;
  wake.data.fd = wake_fd;
  epoll_ctl(epoll_fd, EPOLL_CTL_ADD, wake_fd, &wake);
  std::unique_ptr<ConnectionGate> gate(new ConnectionGate(
      std::move(options), std::move(listeners), port, epoll_fd, wake_fd));
  gate->thread_ = std::thread([raw = gate.get()] { raw->Run(); });
  return gate;
}

ConnectionGate::ConnectionGate(Options options, std::vector<int> listeners,
                               int port, int epoll_fd, int wake_fd)
    : options_(std::move(options)),
      listeners_(std::move(listeners)),
      port_(port),
      epoll_fd_(epoll_fd),
      wake_fd_(wake_fd) {}

ConnectionGate::~ConnectionGate() {
  stopping_ = true;
  const uint64_t one = 1;
  if (write(wake_fd_, &one, sizeof(one)) < 0) {
    // The thread also wakes every kOutOfFilesPause at most when paused; an
    // eventfd write only fails when its counter is full, which one write
    // per gate cannot make it.
  }
  if (thread_.joinable()) thread_.join();
  for (int fd : listeners_) close(fd);
  MutexLock lock(mu_);
  for (const auto& [watch_fd, peer] : open_) close(watch_fd);
  close(epoll_fd_);
  close(wake_fd_);
}

void ConnectionGate::SetHandoff(Handoff handoff) {
  MutexLock lock(handoff_mu_);
  handoff_ = std::move(handoff);
}

int ConnectionGate::open_connections() const {
  MutexLock lock(mu_);
  return static_cast<int>(open_.size());
}

int ConnectionGate::open_connections_from(const std::string& peer) const {
  MutexLock lock(mu_);
  auto it = per_peer_.find(peer);
  return it == per_peer_.end() ? 0 : it->second;
}

uint64_t ConnectionGate::refused() const {
  MutexLock lock(mu_);
  return refused_;
}

void ConnectionGate::Run() {
  epoll_event events[64];
  // Refusal lines are looked at once per flush period (a spray from many
  // addresses makes them many), and at once after the first refusal.
  const auto flush_period = std::clamp<std::chrono::steady_clock::duration>(
      options_.log_interval, std::chrono::milliseconds(1),
      std::chrono::seconds(1));
  std::chrono::steady_clock::time_point next_flush;
  bool refusal_lines = false;
  while (true) {
    int timeout_ms = -1;
    if (paused_) {
      const auto left = paused_until_ - std::chrono::steady_clock::now();
      if (left <= std::chrono::steady_clock::duration::zero()) {
        paused_ = false;
        for (int fd : listeners_) {
          epoll_event event = {};
          event.events = EPOLLIN;
          event.data.fd = fd;
          epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &event);
        }
      } else {
        timeout_ms = static_cast<int>(
            std::chrono::duration_cast<std::chrono::milliseconds>(left)
                .count() +
            1);
      }
    }
    if (const auto now = std::chrono::steady_clock::now();
        !refusal_lines || now >= next_flush) {
      refusal_lines = FlushRefusals();
      next_flush = now + flush_period;
    }
    if (refusal_lines) {
      // Wakes for the next flush: refusal counts are logged within about
      // an interval even when no later refusal comes.
      const int flush_ms = static_cast<int>(std::clamp<int64_t>(
          std::chrono::duration_cast<std::chrono::milliseconds>(
              options_.log_interval)
              .count(),
          1, 1000));
      timeout_ms = timeout_ms < 0 ? flush_ms : std::min(timeout_ms, flush_ms);
    }
    const int count = epoll_wait(epoll_fd_, events, 64, timeout_ms);
    if (count < 0) {
      if (errno == EINTR) continue;
      if (!RebuildEvents(errno)) return;
      continue;
    }
    for (int i = 0; i < count; ++i) {
      const int fd = events[i].data.fd;
      if (fd == wake_fd_) return;
      bool listener = false;
      for (int l : listeners_) listener = listener || l == fd;
      if (listener) {
        AcceptFrom(fd);
      } else {
        Closed(fd);
      }
    }
  }
}

bool ConnectionGate::RebuildEvents(int error) {
  // epoll_wait() fails only when the number is not an epoll set (EBADF,
  // EINVAL; EFAULT cannot happen with a local array): something else in the
  // process closed it, and the number may now be another file. It is not
  // closed here; a new set takes its place.
  std::chrono::milliseconds delay = kRebuildFirstDelay;
  while (!stopping_) {
    if (std::optional<uint64_t> times =
            wait_failed_log_.Occur(std::chrono::steady_clock::now())) {
      spdlog::error(
          "event=connection_gate_wait_failed who={} port={} error={} "
          "times={} reason={}",
          LogValue(options_.who), port_, LogValue(std::strerror(error)), *times,
          LogValue("its epoll set is gone; new connections wait in the "
                   "backlog while a new one is built"));
    }
    // Waits on the wake descriptor alone, so that the destructor is not
    // kept waiting.
    pollfd wake = {wake_fd_, POLLIN, 0};
    if (poll(&wake, 1, static_cast<int>(delay.count())) > 0 &&
        (wake.revents & POLLIN) != 0) {
      return false;
    }
    delay = std::min(delay * 2, kRebuildMaxDelay);
    const int fresh = NewEventSet();
    if (fresh < 0) {
      error = errno;
      continue;
    }
    epoll_fd_ = fresh;
    spdlog::warn("event=connection_gate_recovered who={} port={} reason={}",
                 LogValue(options_.who), port_,
                 LogValue("accepting again with a new epoll set"));
    return true;
  }
  return false;
}

int ConnectionGate::NewEventSet() {
  const int fresh = epoll_create1(EPOLL_CLOEXEC);
  if (fresh < 0) return -1;
  auto add = [fresh](int fd, uint32_t events) {
    epoll_event event = {};
    event.events = events;
    event.data.fd = fd;
    return epoll_ctl(fresh, EPOLL_CTL_ADD, fd, &event) == 0;
  };
  bool added = add(wake_fd_, EPOLLIN);
  for (int fd : listeners_) {
    // Paused listeners come back when the pause ends (EPOLL_CTL_MOD).
    added = added && add(fd, paused_ ? 0 : EPOLLIN);
  }
  {
    MutexLock lock(mu_);
    for (const auto& [watch_fd, peer] : open_) {
      added = added && add(watch_fd, 0);
    }
  }
  if (!added) {
    const int error = errno;
    close(fresh);
    errno = error;
    return -1;
  }
  return fresh;
}

const char* ConnectionGate::OverLimit(const std::string& peer,
                                      int from_peer) const {
  if (options_.max_per_peer > 0 && from_peer >= options_.max_per_peer) {
    return "per_peer";
  }
  if (options_.max_total <= 0) return nullptr;
  const int open = static_cast<int>(open_.size());
  if (open >= options_.max_total) return "total";
  if (open * 4 < options_.max_total * 3 || from_peer < kFairShareFloor) {
    return nullptr;
  }
  // Peers holding connections, this one included; the share leaves room for
  // one more.
  const int peers =
      static_cast<int>(per_peer_.size()) + (per_peer_.count(peer) == 0 ? 1 : 0);
  if (from_peer >= options_.max_total / (peers + 1)) return "fair_share";
  return nullptr;
}

void ConnectionGate::AcceptFrom(int listener_fd) {
  // A bounded batch, so that closes and other listeners are not starved.
  for (int batch = 0; batch < 64; ++batch) {
    sockaddr_storage address = {};
    socklen_t length = sizeof(address);
    const int fd = accept4(listener_fd, reinterpret_cast<sockaddr*>(&address),
                           &length, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
          errno == ENOMEM) {
        OutOfFiles(errno);
      }
      return;  // EAGAIN: nothing more to accept now.
    }
    const std::string peer = PeerOfConnection(fd, address);
    const int yes = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
    {
      MutexLock lock(mu_);
      auto held = per_peer_.find(peer);
      const int from_peer = held == per_peer_.end() ? 0 : held->second;
      if (const char* limit = OverLimit(peer, from_peer); limit != nullptr) {
        Refuse(fd, peer, limit);
        continue;
      }
    }
    // The server closes its descriptor with shutdown() first (as gRPC
    // does), which the duplicate sees as a hang-up; so does a reset.
    const int watch_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (watch_fd < 0) {
      const int error = errno;
      close(fd);
      // Out of descriptors: accepting more would only close them again
      // while taking the last descriptor from everyone else.
      OutOfFiles(error);
      return;
    }
    epoll_event watch = {};
    watch.events = 0;  // Hang-ups and errors only; they are always reported.
    watch.data.fd = watch_fd;
    {
      MutexLock lock(mu_);
      open_[watch_fd] = peer;
      ++per_peer_[peer];
    }
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, watch_fd, &watch);
    MutexLock lock(handoff_mu_);
    if (handoff_) {
      handoff_(listener_fd, fd);
    } else {
      // Nothing to hand it to (the server restarts): close it now; the
      // duplicate sees the hang-up.
      shutdown(fd, SHUT_RDWR);
      close(fd);
    }
  }
}

void ConnectionGate::OutOfFiles(int error) {
  if (std::optional<uint64_t> times =
          out_of_files_log_.Occur(std::chrono::steady_clock::now())) {
    spdlog::warn(
        "event=accept_failed who={} error={} times={} open={} reason={}",
        LogValue(options_.who), LogValue(std::strerror(error)), *times,
        LogValue(OpenFilesSummary()),
        LogValue("new connections wait in the backlog until descriptors "
                 "are free"));
  }
  paused_ = true;
  paused_until_ = std::chrono::steady_clock::now() + kOutOfFilesPause;
  for (int listener : listeners_) {
    epoll_event event = {};
    event.data.fd = listener;
    epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listener, &event);
  }
}

void ConnectionGate::Refuse(int fd, const std::string& peer, const char* why) {
  // Closed at once: the peer reads the end of the stream before any byte.
  close(fd);
  ++refused_;
  const auto now = std::chrono::steady_clock::now();
  auto [line, first] = refusal_lines_.try_emplace(peer);
  ++line->second.pending;
  line->second.limit = why;
  if (!first && now - line->second.last < options_.log_interval) return;
  LogRefusals(peer, line->second, now);
}

void ConnectionGate::LogRefusals(const std::string& peer, RefusalLine& line,
                                 std::chrono::steady_clock::time_point now) {
  auto from_peer = per_peer_.find(peer);
  spdlog::warn(
      "event=connection_refused who={} peer={} limit={} times={} "
      "open_from_peer={} open={} peers={} max_per_peer={} max_total={} "
      "reason={}",
      LogValue(options_.who), LogValue(peer), line.limit, line.pending,
      from_peer == per_peer_.end() ? 0 : from_peer->second, open_.size(),
      per_peer_.size(), options_.max_per_peer, options_.max_total,
      LogValue("too many connections open at once; closed before any "
               "byte was read"));
  line.last = now;
  line.pending = 0;
}

bool ConnectionGate::FlushRefusals() {
  const auto now = std::chrono::steady_clock::now();
  MutexLock lock(mu_);
  for (auto it = refusal_lines_.begin(); it != refusal_lines_.end();) {
    if (now - it->second.last < options_.log_interval) {
      ++it;
    } else if (it->second.pending > 0) {
      // Refusals since the last line, which no later refusal logged.
      LogRefusals(it->first, it->second, now);
      ++it;
    } else {
      it = refusal_lines_.erase(it);  // Quiet for an interval: forgotten.
    }
  }
  return !refusal_lines_.empty();
}

void ConnectionGate::Closed(int watch_fd) {
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, watch_fd, nullptr);
  close(watch_fd);
  MutexLock lock(mu_);
  auto it = open_.find(watch_fd);
  if (it == open_.end()) return;
  auto peer = per_peer_.find(it->second);
  if (peer != per_peer_.end() && --peer->second <= 0) per_peer_.erase(peer);
  open_.erase(it);
}

}  // namespace gdt
