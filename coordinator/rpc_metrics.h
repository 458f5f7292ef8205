#ifndef GDT_COORDINATOR_RPC_METRICS_H_
#define GDT_COORDINATOR_RPC_METRICS_H_

#include <string_view>

#include "coordinator/observer.h"
#include "grpcpp/server_builder.h"

namespace gdt::coordinator {

// Installs a server interceptor that reports every RPC the server handles,
// of every service on it, to `observer` (Observer::RpcFinished): the method's
// short name ("Heartbeat"), its status code name and the seconds from the
// call's arrival to its first answer. For a unary call the first answer is
// its status; for a server stream it is the first event or the status that
// refuses the stream, so a long-lived stream is timed up to its acceptance,
// not for its whole life. Every call is counted exactly once, however the
// handler returns. `observer` must outlive the server built by `builder`.
void AddRpcMetrics(grpc::ServerBuilder& builder, Observer& observer);

// "OK", "NOT_FOUND", ... for a gRPC status code number; "UNKNOWN" when out of
// range.
std::string_view RpcCodeName(int code);

}  // namespace gdt::coordinator

#endif  // GDT_COORDINATOR_RPC_METRICS_H_
