#include "nccl_bootstrap/nccl_bootstrap.h"

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "rendezvous/kv_client.h"

namespace gdt::nccl {
namespace {

#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 23, 0)
constexpr bool kHaveScalableInit = true;
#else
constexpr bool kHaveScalableInit = false;
#endif

absl::Status NcclError(const char* call, ncclResult_t result,
                       const RankInfo& rank) {
  return absl::InternalError(absl::StrCat(
      call, " failed on rank ", rank.rank, " of ", rank.nranks, ": ",
      ncclGetErrorString(result), " (", ncclGetLastError(nullptr), ")"));
}

}  // namespace

absl::StatusOr<UniqueId> NewNcclUniqueId() {
  static_assert(sizeof(ncclUniqueId) == kUniqueIdBytes);
  ncclUniqueId id;
  if (ncclResult_t result = ncclGetUniqueId(&id); result != ncclSuccess) {
    return absl::InternalError(
        absl::StrCat("ncclGetUniqueId failed: ", ncclGetErrorString(result)));
  }
  UniqueId bytes;
  std::memcpy(bytes.data(), id.internal, kUniqueIdBytes);
  return bytes;
}

int RootsFor(int nranks, int ranks_per_root) {
  return kHaveScalableInit ? RootCount(nranks, ranks_per_root) : 1;
}

absl::StatusOr<Communicator> BootstrapFromEnvironment(
    const BootstrapOptions& options) {
  const auto started = std::chrono::steady_clock::now();
  const auto deadline = std::chrono::system_clock::now() + options.timeout;
  absl::StatusOr<rendezvous::KvTarget> target =
      rendezvous::KvTargetFromEnvironment(std::getenv);
  if (!target.ok()) return target.status();
  absl::StatusOr<RankInfo> rank = RankFromEnvironment(std::getenv);
  if (!rank.ok()) return rank.status();
  int ranks_per_root = options.ranks_per_root;
  if (const char* text = std::getenv("GDT_NCCL_RANKS_PER_ROOT");
      text != nullptr && *text != '\0') {
    ranks_per_root = std::atoi(text);
    if (ranks_per_root <= 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "GDT_NCCL_RANKS_PER_ROOT must be a positive integer, got '", text,
          "'"));
    }
  }

  Communicator result;
  result.rank = *rank;
  int devices = 0;
  if (cudaError_t error = cudaGetDeviceCount(&devices);
      error != cudaSuccess || devices == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no usable CUDA device: ",
        error != cudaSuccess ? cudaGetErrorString(error) : "none visible",
        " (CUDA_VISIBLE_DEVICES='",
        std::getenv("CUDA_VISIBLE_DEVICES") == nullptr
            ? ""
            : std::getenv("CUDA_VISIBLE_DEVICES"),
        "')"));
  }
  result.device = options.device >= 0 ? options.device : rank->local_rank;
  if (result.device >= devices) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", rank->rank, " wants CUDA device ", result.device, " but only ",
        devices, " are visible (lease more GPUs: GDT_GPUS_PER_NODE)"));
  }
  if (cudaError_t error = cudaSetDevice(result.device); error != cudaSuccess) {
    return absl::InternalError(
        absl::StrCat("cudaSetDevice(", result.device,
                     ") failed: ", cudaGetErrorString(error)));
  }

  result.nroots = RootsFor(rank->nranks, ranks_per_root);
  rendezvous::KvClient kv(*target);
  absl::StatusOr<std::vector<UniqueId>> ids = ExchangeUniqueIds(
      kv, *rank, result.nroots, options.name, NewNcclUniqueId, deadline);
  if (!ids.ok()) return ids.status();
  std::vector<ncclUniqueId> nccl_ids(ids->size());
  for (size_t i = 0; i < ids->size(); ++i) {
    std::memcpy(nccl_ids[i].internal, (*ids)[i].data(), kUniqueIdBytes);
  }

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // So that the deadline holds.
  ncclResult_t init;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 23, 0)
  if (result.nroots > 1) {
    init = ncclCommInitRankScalable(&result.comm, rank->nranks, rank->rank,
                                    result.nroots, nccl_ids.data(), &config);
  } else {
    init = ncclCommInitRankConfig(&result.comm, rank->nranks, nccl_ids[0],
                                  rank->rank, &config);
  }
#else
  init = ncclCommInitRankConfig(&result.comm, rank->nranks, nccl_ids[0],
                                rank->rank, &config);
#endif
  if (init != ncclSuccess && init != ncclInProgress) {
    if (result.comm != nullptr) ncclCommAbort(result.comm);
    return NcclError("ncclCommInitRank", init, *rank);
  }
  ncclResult_t state = ncclInProgress;
  while (true) {
    if (ncclResult_t polled = ncclCommGetAsyncError(result.comm, &state);
        polled != ncclSuccess) {
      state = polled;
    }
    if (state != ncclInProgress) break;
    if (std::chrono::system_clock::now() >= deadline) {
      ncclCommAbort(result.comm);
      return absl::DeadlineExceededError(
          absl::StrCat("rank ", rank->rank, " of ", rank->nranks,
                       ": the NCCL communicator was not ready within ",
                       options.timeout.count(), " ms (a peer may have died)"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (state != ncclSuccess) {
    ncclCommAbort(result.comm);
    return NcclError("ncclCommInitRank", state, *rank);
  }
  result.ready_after = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - started);
  return result;
}

}  // namespace gdt::nccl
