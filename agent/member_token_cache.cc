#include "agent/member_token_cache.h"

#include <arpa/inet.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file.h"

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

// `address` as /proc/net/tcp{,6} prints it: each 32-bit word of the
// address in network order printed as a native integer, in hex.
std::optional<std::string> ProcNetAddress(const std::string& address,
                                          bool* ipv6) {
  unsigned char bytes[16] = {};
  if (inet_pton(AF_INET, address.c_str(), bytes) == 1) {
    *ipv6 = false;
  } else if (inet_pton(AF_INET6, address.c_str(), bytes) == 1) {
    *ipv6 = true;
  } else {
    return std::nullopt;
  }
  std::string text;
  for (int word = 0; word < (*ipv6 ? 4 : 1); ++word) {
    uint32_t value = 0;
    std::memcpy(&value, bytes + 4 * word, 4);
    char hex[9];
    std::snprintf(hex, sizeof(hex), "%08X", value);
    text += hex;
  }
  return text;
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
  const std::string by_address = absl::StrCat("address ", address);
  char port_hex[8];
  std::snprintf(port_hex, sizeof(port_hex), "%04X", port);
  // The caller's end of the connection is a socket of this host whose
  // local address is the peer's; an IPv4 peer may have an IPv6 socket
  // (gRPC's clients use those, with the address mapped).
  std::vector<std::pair<std::string, std::string>> wanted;  // Table, address.
  bool ipv6 = false;
  if (std::optional<std::string> text = ProcNetAddress(address, &ipv6)) {
    wanted.emplace_back(ipv6 ? "/proc/net/tcp6" : "/proc/net/tcp",
                        absl::StrCat(*text, ":", port_hex));
    if (!ipv6) {
      if (std::optional<std::string> mapped =
              ProcNetAddress("::ffff:" + address, &ipv6)) {
        wanted.emplace_back("/proc/net/tcp6",
                            absl::StrCat(*mapped, ":", port_hex));
      }
    }
  }
  std::optional<std::string> uid;
  for (const auto& [path, local] : wanted) {
    absl::StatusOr<std::string> table = ReadTextFile(path);
    if (!table.ok()) continue;
    for (absl::string_view line : absl::StrSplit(*table, '\n')) {
      const std::vector<absl::string_view> fields =
          absl::StrSplit(line, ' ', absl::SkipEmpty());
      // sl local rem st tx:rx tr:when retrnsmt uid ...
      if (fields.size() < 8 || fields[1] != local) continue;
      if (uid.has_value() && *uid != fields[7]) return by_address;
      uid = std::string(fields[7]);
    }
  }
  return uid.has_value() ? absl::StrCat("uid ", *uid) : by_address;
}

}  // namespace gdt::agent
