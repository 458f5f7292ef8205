#ifndef GDT_NCCL_BOOTSTRAP_NCCL_BOOTSTRAP_H_
#define GDT_NCCL_BOOTSTRAP_NCCL_BOOTSTRAP_H_

#include <nccl.h>

#include <chrono>
#include <string>

#include "absl/status/statusor.h"
#include "nccl_bootstrap/id_exchange.h"

namespace gdt::nccl {

struct BootstrapOptions {
  // Names the communicator; each communicator of one gang epoch needs its
  // own name (its ids are keys in the gang's store).
  std::string name = "world";
  // From the call to a ready communicator (exchange and init together).
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  // Ranks per root before several roots are used; GDT_NCCL_RANKS_PER_ROOT
  // overrides it. Several roots need NCCL >= 2.23
  // (ncclCommInitRankScalable); older NCCL always uses one.
  int ranks_per_root = kRanksPerRoot;
  // CUDA device to bind; -1: the local rank (an index into the leased
  // CUDA_VISIBLE_DEVICES).
  int device = -1;
};

struct Communicator {
  ncclComm_t comm = nullptr;  // The caller owns it (ncclCommDestroy).
  RankInfo rank;
  int device = 0;
  int nroots = 1;
  // From the call to a ready communicator.
  std::chrono::milliseconds ready_after{0};
};

// Builds this process's NCCL communicator from the environment contract of a
// gdt job (GDT_LAUNCHER: nccl): binds the CUDA device, exchanges the unique
// id(s) through the gang key-value store (rank 0, or every root rank above
// ranks_per_root ranks, calls ncclGetUniqueId and publishes; the others
// wait), then ncclCommInitRankConfig (non-blocking) or
// ncclCommInitRankScalable, polling until ready or the deadline (then
// ncclCommAbort).
// Errors: FailedPrecondition naming the missing variable
// (GDT_COORDINATOR, GDT_GANG_ID, GDT_EPOCH, GDT_KV_TOKEN, GDT_NODE_RANK,
// GDT_WORLD_SIZE, GDT_LOCAL_RANK) or "no usable CUDA device: ..." when CUDA
// has no device or driver; DeadlineExceeded naming the stage that ran out
// of time; Internal with NCCL's error string; the store's errors.
absl::StatusOr<Communicator> BootstrapFromEnvironment(
    const BootstrapOptions& options = {});

// ncclGetUniqueId as a value (works without a GPU).
// Errors: Internal with NCCL's error string.
absl::StatusOr<UniqueId> NewNcclUniqueId();

// Roots this build uses for `nranks`: RootCount, or 1 when the NCCL it was
// built against has no ncclCommInitRankScalable.
int RootsFor(int nranks, int ranks_per_root);

}  // namespace gdt::nccl

#endif  // GDT_NCCL_BOOTSTRAP_NCCL_BOOTSTRAP_H_
