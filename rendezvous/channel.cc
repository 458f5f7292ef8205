#include "rendezvous/channel.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/resource_quota.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace gdt::rendezvous {

namespace {

// How long gRPC lets one connection attempt (TCP and the HTTP/2 or TLS
// handshake) take. At 200 ms a link with more than about 0.2 s round trip
// never connected and every call failed as "cannot reach"; now the call's
// own deadline is what ends a call on a slow link. A refused connection
// (nothing listens) still fails the call at once.
constexpr int kMinConnectTimeoutMs = 20000;

grpc::ChannelArguments BaseArguments() {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  // gRPC names the connect timeout after the backoff.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, kMinConnectTimeoutMs);
  return args;
}

std::shared_ptr<grpc::ChannelCredentials> CredentialsOf(
    const ClientSecurity& security) {
  return security.tls() ? security.credentials
                        : grpc::InsecureChannelCredentials();
}

}  // namespace

std::shared_ptr<grpc::Channel> NewChannel(const std::string& endpoint) {
  return NewChannel(endpoint, ClientSecurity());
}

std::shared_ptr<grpc::Channel> NewChannel(const std::string& endpoint,
                                          const ClientSecurity& security) {
  return grpc::CreateCustomChannel(endpoint, CredentialsOf(security),
                                   BaseArguments());
}

std::shared_ptr<grpc::Channel> NewLiveChannel(const std::string& endpoint) {
  return NewLiveChannel(endpoint, ClientSecurity());
}

std::shared_ptr<grpc::Channel> NewLiveChannel(const std::string& endpoint,
                                              const ClientSecurity& security) {
  grpc::ChannelArguments args = BaseArguments();
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepalivePingMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 0);
  // Keep pinging while a stream is quiet (a long stage with no output).
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  return grpc::CreateCustomChannel(endpoint, CredentialsOf(security), args);
}

bool IsTlsHandshakeFailure(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnavailable &&
         absl::StrContains(status.message(), ": TLS handshake failed: ");
}

absl::Status ExplainConnectFailure(const absl::Status& status,
                                   std::string_view peer,
                                   std::string_view endpoint,
                                   const ClientSecurity& security) {
  if (status.code() != absl::StatusCode::kUnavailable) return status;
  const std::string message = absl::AsciiStrToLower(status.message());
  const std::string where =
      absl::StrCat(std::string(peer), " ", std::string(endpoint));
  // A closed connection is also what a restarting server looks like, so
  // these lines stay retryable and only add a hint.
  const bool closed = absl::StrContains(message, "socket closed") ||
                      absl::StrContains(message, "connection reset") ||
                      absl::StrContains(message, "end of tcp stream");
  if (!security.tls()) {
    if (!closed) return status;
    return absl::UnavailableError(absl::StrCat(
        where,
        ": the server closed the connection; if this repeats, it may "
        "require TLS (set tls.ca_file, or GDT_TLS_CA_FILE / --tls-ca-file "
        "for CLIs)"));
  }
  std::string reason;
  if (absl::StrContains(message, "certificate_verify_failed") ||
      absl::StrContains(message, "certificate verify failed")) {
    reason = "certificate verify failed";
  } else if (absl::StrContains(message, "peer name")) {
    reason = "the server certificate does not name this address";
  } else if (absl::StrContains(message, "certificate required") ||
             absl::StrContains(message, "certificate_required")) {
    reason =
        "the server requires a client certificate (set tls.cert_file and "
        "tls.key_file)";
  } else if (absl::StrContains(message, "handshake") ||
             absl::StrContains(message, "ssl_error")) {
    reason = "the peer does not speak TLS or rejected ours";
  } else if (closed) {
    return absl::UnavailableError(absl::StrCat(
        where,
        ": the server closed the connection; if this repeats, it may "
        "require a client certificate (set tls.cert_file and "
        "tls.key_file)"));
  } else {
    return status;
  }
  return absl::UnavailableError(absl::StrCat(
      where, ": TLS handshake failed: ", reason, " — check ",
      security.ca_setting.empty() ? "tls.ca_file" : security.ca_setting,
      " (and the client certificate if the server requires mTLS)"));
}

void ApplyServerLimits(grpc::ServerBuilder& builder) {
  builder.AddChannelArgument(GRPC_ARG_MAX_METADATA_SIZE, kMaxMetadataBytes);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             kMaxStreamsPerConnection);
  builder.SetMaxReceiveMessageSize(kMaxRequestBytes);
  RefuseSharedPort(builder);
  grpc::ResourceQuota quota("gdt-server");
  quota.Resize(kServerMemoryQuotaBytes);
  builder.SetResourceQuota(quota);
  CloseIdleConnections(builder);
}

void CloseIdleConnections(grpc::ServerBuilder& builder) {
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             kHandshakeTimeoutMs);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                             kMaxConnectionIdleMs);
}

void RefuseSharedPort(grpc::ServerBuilder& builder) {
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
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
