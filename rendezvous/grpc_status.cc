#include "rendezvous/grpc_status.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "absl/strings/numbers.h"
#include "common/retry_after.h"
#include "rendezvous/metadata.h"

namespace gdt::rendezvous {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

void AddRetryAfterTrailer(const absl::Status& status,
                          grpc::ServerContextBase& context) {
  if (std::optional<std::chrono::milliseconds> after = RetryAfter(status)) {
    context.AddTrailingMetadata(kRetryAfterMetadata,
                                std::to_string(after->count()));
  }
}

absl::Status WithRetryAfterTrailer(absl::Status status,
                                   const grpc::ClientContext& context) {
  if (status.ok()) return status;
  const auto& trailers = context.GetServerTrailingMetadata();
  auto found = trailers.find(kRetryAfterMetadata);
  if (found == trailers.end()) return status;
  int64_t ms = 0;
  if (!absl::SimpleAtoi(
          absl::string_view(found->second.data(), found->second.size()), &ms) ||
      ms < 0) {
    return status;
  }
  return WithRetryAfter(
      std::move(status),
      std::min(std::chrono::milliseconds(ms),
               std::chrono::duration_cast<std::chrono::milliseconds>(
                   kMaxRetryAfter)));
}

bool IsPeerRefusal(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kResourceExhausted:
      return true;
    default:
      return false;
  }
}

}  // namespace gdt::rendezvous
