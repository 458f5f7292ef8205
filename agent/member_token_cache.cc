#include "agent/member_token_cache.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/tcp_socket_owner.h"

namespace gdt::agent {
namespace {

// Drops expired entries of `map` when it is full; everything when still
// full.
template <typename Map>
void MakeRoom(Map& map, std::chrono::steady_clock::time_point now,
              size_t limit) {
  if (map.size() < limit) return;
  std::erase_if(map,
                [&](const auto& entry) { return entry.second.until <= now; });
  if (map.size() >= limit) map.clear();
}

// `address` (IPv4 or IPv6, without brackets) and `port` as a socket
// address; false when `address` is neither.
bool SocketAddress(const std::string& address, int port,
                   sockaddr_storage& socket_address) {
  socket_address = {};
  auto* in = reinterpret_cast<sockaddr_in*>(&socket_address);
  auto* in6 = reinterpret_cast<sockaddr_in6*>(&socket_address);
  if (inet_pton(AF_INET, address.c_str(), &in->sin_addr) == 1) {
    in->sin_family = AF_INET;
    in->sin_port = htons(static_cast<uint16_t>(port));
    return true;
  }
  if (inet_pton(AF_INET6, address.c_str(), &in6->sin6_addr) == 1) {
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(static_cast<uint16_t>(port));
    return true;
  }
  return false;
}

}  // namespace

MemberTokenCache::MemberTokenCache(Ask ask,
                                   std::chrono::steady_clock::duration ttl)
    : ask_(std::move(ask)),
      ttl_(ttl),
      refused_callers_(
          clock_,
          {.per_second = 1.0 / static_cast<double>(kRefusalInterval.count()),
           .burst = static_cast<double>(kRefusalBurst),
           .max_keys = kMaxEntries}) {}

absl::StatusOr<MemberClaims> MemberTokenCache::Check(
    const std::string& token, const std::string& caller) {
  const auto now = std::chrono::steady_clock::now();
  bool known_good = false;
  {
    MutexLock lock(mu_);
    auto it = entries_.find(token);
    if (it != entries_.end()) {
      if (now < it->second.until) return it->second.claims;
      entries_.erase(it);
    }
    auto refused = refusals_.find(token);
    if (refused != refusals_.end()) {
      if (now < refused->second.until) return refused->second.status;
      refusals_.erase(refused);
    }
    known_good = known_good_.contains(token);
  }
  std::chrono::milliseconds wait{};
  if (!known_good && !refused_callers_.HasToken(caller, &wait)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "member token not checked: the coordinator refused too many member "
        "tokens from this caller (",
        caller, "); its next one is checked in ",
        std::chrono::ceil<std::chrono::seconds>(wait).count(), " s"));
  }
  // Without the lock: the coordinator may take a while.
  absl::StatusOr<MemberClaims> claims = ask_(token);
  if (!claims.ok()) {
    // An answer about this token; an error on the way to the coordinator
    // says nothing about it.
    if (absl::IsPermissionDenied(claims.status()) ||
        absl::IsInvalidArgument(claims.status())) {
      refused_callers_.TryTake(caller);
      MutexLock lock(mu_);
      MakeRoom(refusals_, now, kMaxEntries);
      refusals_[token] = Refusal{claims.status(), now + kRefusalTtl};
    }
    return claims.status();
  }
  MutexLock lock(mu_);
  MakeRoom(entries_, now, kMaxEntries);
  entries_[token] = Entry{*claims, now + ttl_};
  if (known_good_.size() >= kMaxEntries) known_good_.clear();
  known_good_[token] = claims->member_id();
  return claims;
}

void MemberTokenCache::Forget(const std::string& member_id) {
  MutexLock lock(mu_);
  std::erase_if(entries_, [&](const auto& entry) {
    return entry.second.claims.member_id() == member_id;
  });
  std::erase_if(known_good_,
                [&](const auto& entry) { return entry.second == member_id; });
}

std::string CallerOf(std::string_view grpc_peer) {
  std::string peer(grpc_peer);
  const size_t scheme = peer.find(':');
  if (scheme == std::string::npos) return peer;
  const std::string kind = peer.substr(0, scheme);
  if (kind != "ipv4" && kind != "ipv6") return peer;
  std::string rest = peer.substr(scheme + 1);
  const size_t colon = rest.rfind(':');
  int port = 0;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(rest.substr(colon + 1), &port)) {
    return peer;
  }
  std::string address = rest.substr(0, colon);
  for (const char* open : {"[", "%5B", "%5b"}) {
    if (address.starts_with(open)) address.erase(0, std::strlen(open));
  }
  for (const char* close : {"]", "%5D", "%5d"}) {
    if (address.ends_with(close)) {
      address.erase(address.size() - std::strlen(close));
    }
  }
  // The caller's end of the connection is a socket of this host whose
  // local address is the peer's (an IPv4 peer's may be an IPv6 socket with
  // the address mapped, as gRPC's clients make).
  sockaddr_storage caller_end;
  if (port >= 0 && port <= 65535 && SocketAddress(address, port, caller_end)) {
    if (std::optional<uid_t> uid = TcpSocketOwnerAt(caller_end)) {
      return absl::StrCat("uid ", *uid);
    }
  }
  return absl::StrCat("address ", address);
}

}  // namespace gdt::agent
