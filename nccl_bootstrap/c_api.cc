#include <algorithm>
#include <cstring>
#include <string>

#include "nccl_bootstrap/gdt_nccl_bootstrap.h"
#include "nccl_bootstrap/nccl_bootstrap.h"

namespace {

void WriteError(const std::string& message, char* error, size_t error_size) {
  if (error == nullptr || error_size == 0) return;
  const size_t n = std::min(message.size(), error_size - 1);
  std::memcpy(error, message.data(), n);
  error[n] = '\0';
}

}  // namespace

extern "C" ncclResult_t gdtNcclCommInitFromEnv(ncclComm_t* comm,
                                               const char* name, int timeout_ms,
                                               int* rank, int* nranks,
                                               char* error, size_t error_size) {
  if (comm == nullptr) {
    WriteError("gdtNcclCommInitFromEnv: comm is NULL", error, error_size);
    return ncclInvalidArgument;
  }
  gdt::nccl::BootstrapOptions options;
  if (name != nullptr && *name != '\0') options.name = name;
  if (timeout_ms > 0) options.timeout = std::chrono::milliseconds(timeout_ms);
  absl::StatusOr<gdt::nccl::Communicator> result =
      gdt::nccl::BootstrapFromEnvironment(options);
  if (!result.ok()) {
    WriteError(std::string(result.status().message()), error, error_size);
    switch (result.status().code()) {
      case absl::StatusCode::kFailedPrecondition:
      case absl::StatusCode::kInvalidArgument:
        return ncclInvalidUsage;
      case absl::StatusCode::kInternal:
        return ncclInternalError;
      default:
        return ncclSystemError;
    }
  }
  *comm = result->comm;
  if (rank != nullptr) *rank = result->rank.rank;
  if (nranks != nullptr) *nranks = result->rank.nranks;
  WriteError("", error, error_size);
  return ncclSuccess;
}
