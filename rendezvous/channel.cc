#include "rendezvous/channel.h"

#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace gdt::rendezvous {

namespace {

grpc::ChannelArguments BaseArguments() {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  return args;
}

}  // namespace

std::shared_ptr<grpc::Channel> NewChannel(const std::string& endpoint) {
  return grpc::CreateCustomChannel(endpoint, grpc::InsecureChannelCredentials(),
                                   BaseArguments());
}

std::shared_ptr<grpc::Channel> NewLiveChannel(const std::string& endpoint) {
  grpc::ChannelArguments args = BaseArguments();
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepalivePingMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 0);
  // Keep pinging while a stream is quiet (a long stage with no output).
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  return grpc::CreateCustomChannel(endpoint, grpc::InsecureChannelCredentials(),
                                   args);
}

void EnableKeepalive(grpc::ServerBuilder& builder) {
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepalivePingMs);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                             kKeepaliveTimeoutMs);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
      kKeepalivePingMs / 2);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
}

}  // namespace gdt::rendezvous
