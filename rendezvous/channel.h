#ifndef GDT_RENDEZVOUS_CHANNEL_H_
#define GDT_RENDEZVOUS_CHANNEL_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "grpcpp/channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/server_builder.h"

namespace gdt::rendezvous {

// How a client reaches its peers (docs/security.md "TLS"). Built by
// LoadClientSecurity() / ClientSecurityFromEnvironment() in rendezvous/tls.h;
// the default is plaintext.
struct ClientSecurity {
  // TLS credentials; nullptr = plaintext.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // The setting that names the CA, for error messages ("tls.ca_file").
  std::string ca_setting;
  bool tls() const { return credentials != nullptr; }
};

// A channel to a gdt peer (coordinator or agent) at host:port. Reconnect
// backoff is capped at 2 s instead of gRPC's 120 s, so a restarted
// coordinator is found again within seconds.
std::shared_ptr<grpc::Channel> NewChannel(const std::string& endpoint);
std::shared_ptr<grpc::Channel> NewChannel(const std::string& endpoint,
                                          const ClientSecurity& security);

// Liveness of long streams: a channel from NewLiveChannel() pings
// its server every kKeepalivePing while a call is open and drops the
// connection, failing the call with UNAVAILABLE, when a ping is not answered
// within kKeepaliveTimeout — so a stage stream to a host that vanished
// (crash, cable, namespace cut off) ends within seconds instead of hanging.
inline constexpr int kKeepalivePingMs = 2000;
inline constexpr int kKeepaliveTimeoutMs = 3000;
std::shared_ptr<grpc::Channel> NewLiveChannel(const std::string& endpoint);
std::shared_ptr<grpc::Channel> NewLiveChannel(const std::string& endpoint,
                                              const ClientSecurity& security);

// One clear line for a call that failed to connect. When `status` is
// UNAVAILABLE and gRPC reports a TLS handshake problem (certificate verify
// failed, wrong peer name, client certificate required, not TLS), returns
// UNAVAILABLE "<peer> <endpoint>: TLS handshake failed: <reason> — check
// <ca_setting> ..." (see IsTlsHandshakeFailure: not worth retrying). A
// connection the server closed gets a hint (it may require TLS or a client
// certificate) but stays an ordinary, retryable UNAVAILABLE, because a
// restarting server looks the same. Other statuses are returned as they
// are.
// Whether `status` is such a rewritten TLS handshake failure (not worth
// retrying: certificates do not fix themselves).
bool IsTlsHandshakeFailure(const absl::Status& status);
absl::Status ExplainConnectFailure(const absl::Status& status,
                                   std::string_view peer,
                                   std::string_view endpoint,
                                   const ClientSecurity& security);

// The server side of the same contract: accepts those pings (gRPC refuses
// frequent pings by default) and pings its own clients, so a server notices
// a vanished client within kKeepalivePingMs + kKeepaliveTimeoutMs and
// cancels its calls.
void EnableKeepalive(grpc::ServerBuilder& builder);

// Bounds on what one client can make a gdt server hold, so that nobody's
// oversized request slows anyone else's heartbeat: request metadata (headers,
// tokens) at most kMaxMetadataBytes, a request message at most
// kMaxRequestBytes, kMaxStreamsPerConnection calls at once per connection,
// and all buffers together within kServerMemoryQuotaBytes (gRPC refuses new
// work with RESOURCE_EXHAUSTED beyond it). docs/security.md lists them.
inline constexpr int kMaxMetadataBytes = 16 * 1024;
inline constexpr int kMaxRequestBytes = 4 * 1024 * 1024;
inline constexpr int kMaxStreamsPerConnection = 256;
inline constexpr size_t kServerMemoryQuotaBytes = 512u * 1024 * 1024;
// Also refuses a port another process listens on (RefuseSharedPort) and
// closes idle connections (CloseIdleConnections).
void ApplyServerLimits(grpc::ServerBuilder& builder);

// Every connection holds one of the server's descriptors: one that has not
// finished its handshake (TLS and HTTP/2 settings) within
// kHandshakeTimeoutMs, or that has had no call for kMaxConnectionIdleMs, is
// closed, so that nobody can keep thousands of idle ones (docs/security.md
// "Descriptor exhaustion"). Clients reconnect on their next call; a
// connection with a call open (a watch, a stage) is not idle.
inline constexpr int kHandshakeTimeoutMs = 10'000;
inline constexpr int kMaxConnectionIdleMs = 60'000;
void CloseIdleConnections(grpc::ServerBuilder& builder);

// gRPC sets SO_REUSEPORT by default, so a second daemon on a busy port would
// start and share its connections with the first; this makes it fail.
void RefuseSharedPort(grpc::ServerBuilder& builder);

}  // namespace gdt::rendezvous

#endif  // GDT_RENDEZVOUS_CHANNEL_H_
