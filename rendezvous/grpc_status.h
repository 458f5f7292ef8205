#ifndef GDT_RENDEZVOUS_GRPC_STATUS_H_
#define GDT_RENDEZVOUS_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/client_context.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/status.h"

namespace gdt::rendezvous {

// The only bridge between absl::Status and grpc::Status. Codes have the same
// numbers on both sides; messages are kept.
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

// Whether a failed call's `status` is the peer's deliberate answer (it was
// reached and refused: bad argument, wrong state, not allowed, not found,
// over a limit) rather than a transport failure or a lost peer (UNAVAILABLE,
// DEADLINE_EXCEEDED, CANCELLED, UNKNOWN, INTERNAL, ...).
bool IsPeerRefusal(const absl::Status& status);

// A refusal's retry hint (common/retry_after.h) crosses the wire as the
// trailing metadata kRetryAfterMetadata (rendezvous/metadata.h), whole
// milliseconds in decimal. Servers: adds `status`'s hint, if any, to
// `context`'s trailing metadata; call before the call is finished.
void AddRetryAfterTrailer(const absl::Status& status,
                          grpc::ServerContextBase& context);
// Clients: `status` (of a finished call made with `context`) with the hint
// the server sent, if any; hints above kMaxRetryAfter are cut to it, and
// malformed ones are ignored.
absl::Status WithRetryAfterTrailer(absl::Status status,
                                   const grpc::ClientContext& context);

}  // namespace gdt::rendezvous

#endif  // GDT_RENDEZVOUS_GRPC_STATUS_H_
