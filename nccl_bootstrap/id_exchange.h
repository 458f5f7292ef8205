#ifndef GDT_NCCL_BOOTSTRAP_ID_EXCHANGE_H_
#define GDT_NCCL_BOOTSTRAP_ID_EXCHANGE_H_

#include <array>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "rendezvous/kv_client.h"

namespace gdt::nccl {

// The unique-id exchange of nccl_bootstrap, without NCCL itself: ids are
// opaque 128-byte blobs (NCCL_UNIQUE_ID_BYTES) carried through the gang
// key-value store, so it builds and is tested on machines without CUDA.

inline constexpr size_t kUniqueIdBytes = 128;
using UniqueId = std::array<char, kUniqueIdBytes>;

// Above this many ranks per root, the communicator uses several roots
// (ncclCommInitRankScalable).
inline constexpr int kRanksPerRoot = 256;

// This process's place in the gang's communicator.
struct RankInfo {
  int rank = 0;        // Global rank, 0..nranks-1.
  int nranks = 0;      // GDT_WORLD_SIZE.
  int local_rank = 0;  // Index among the member's processes on its host.
};

// Reads GDT_NODE_RANK, GDT_NPROC_PER_NODE (default 1), GDT_WORLD_SIZE and
// GDT_LOCAL_RANK (or LOCAL_RANK; may be absent when GDT_NPROC_PER_NODE is 1)
// through `getenv`: rank = node rank x processes per node + local rank.
// Errors: FailedPrecondition naming the variable that is missing or out of
// range.
absl::StatusOr<RankInfo> RankFromEnvironment(
    const std::function<const char*(const char*)>& getenv);

// Roots for `nranks` ranks: ceil(nranks / ranks_per_root), at least 1.
int RootCount(int nranks, int ranks_per_root = kRanksPerRoot);

// The rank that creates root `root`'s id: spread evenly,
// floor(root x nranks / nroots), so root 0 is rank 0.
int RootRank(int root, int nranks, int nroots);

// The key root `root`'s id is stored under for communicator `name`.
std::string UniqueIdKey(const std::string& name, int root);

// Exchanges the `nroots` ids of communicator `name`: each rank that is a
// root calls `generate` and publishes its id (key UniqueIdKey), then every
// rank waits for all ids. Returns them in root order (identical on every
// rank).
// Errors: those of `generate`; DeadlineExceeded naming the root (and its
// rank) whose id did not arrive by `deadline`; DataLoss when a stored id has
// the wrong size; the store's errors (docs/kv.md).
absl::StatusOr<std::vector<UniqueId>> ExchangeUniqueIds(
    rendezvous::KvClient& kv, const RankInfo& rank, int nroots,
    const std::string& name,
    const std::function<absl::StatusOr<UniqueId>()>& generate,
    rendezvous::KvClient::Deadline deadline);

}  // namespace gdt::nccl

#endif  // GDT_NCCL_BOOTSTRAP_ID_EXCHANGE_H_
