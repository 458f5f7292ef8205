#ifndef GDT_RENDEZVOUS_CHANNEL_H_
#define GDT_RENDEZVOUS_CHANNEL_H_

#include <memory>
#include <string>

#include "grpcpp/channel.h"
#include "grpcpp/server_builder.h"

namespace gdt::rendezvous {

// A channel to a gdt peer (coordinator or agent) at host:port. Reconnect
// backoff is capped at 2 s instead of gRPC's 120 s, so a restarted
// coordinator is found again within seconds.
std::shared_ptr<grpc::Channel> NewChannel(const std::string& endpoint);

// Liveness of long streams (issue 4): a channel from NewLiveChannel() pings
// its server every kKeepalivePing while a call is open and drops the
// connection, failing the call with UNAVAILABLE, when a ping is not answered
// within kKeepaliveTimeout — so a stage stream to a host that vanished
// (crash, cable, namespace cut off) ends within seconds instead of hanging.
inline constexpr int kKeepalivePingMs = 2000;
inline constexpr int kKeepaliveTimeoutMs = 3000;
std::shared_ptr<grpc::Channel> NewLiveChannel(const std::string& endpoint);

// The server side of the same contract: accepts those pings (gRPC refuses
// frequent pings by default) and pings its own clients, so a server notices
// a vanished client within kKeepalivePingMs + kKeepaliveTimeoutMs and
// cancels its calls.
void EnableKeepalive(grpc::ServerBuilder& builder);

}  // namespace gdt::rendezvous

#endif  // GDT_RENDEZVOUS_CHANNEL_H_
