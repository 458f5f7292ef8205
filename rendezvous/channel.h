#ifndef GDT_RENDEZVOUS_CHANNEL_H_
#define GDT_RENDEZVOUS_CHANNEL_H_

#include <memory>
#include <string>

#include "grpcpp/channel.h"

namespace gdt::rendezvous {

// A channel to a gdt peer (coordinator or agent) at host:port. Reconnect
// backoff is capped at 2 s instead of gRPC's 120 s, so a restarted
// coordinator is found again within seconds.
std::shared_ptr<grpc::Channel> NewChannel(const std::string& endpoint);

}  // namespace gdt::rendezvous

#endif  // GDT_RENDEZVOUS_CHANNEL_H_
