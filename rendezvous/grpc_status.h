#ifndef GDT_RENDEZVOUS_GRPC_STATUS_H_
#define GDT_RENDEZVOUS_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace gdt::rendezvous {

// The only bridge between absl::Status and grpc::Status. Codes have the same
// numbers on both sides; messages are kept.
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace gdt::rendezvous

#endif  // GDT_RENDEZVOUS_GRPC_STATUS_H_
