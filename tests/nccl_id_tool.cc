// Test helper for nccl_id_exchange_test: one member process that exchanges
// real ncclGetUniqueId ids through the gang key-value store (no GPU needed)
// and prints them, hex-encoded, comma-separated in root order. Reads the
// job environment like nccl_bootstrap (GDT_NCCL_RANKS_PER_ROOT picks the
// roots). Exit 0 on success; 1 with one line on stderr otherwise.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_join.h"
#include "nccl_bootstrap/nccl_bootstrap.h"

int main() {
  absl::StatusOr<gdt::rendezvous::KvTarget> target =
      gdt::rendezvous::KvTargetFromEnvironment(std::getenv);
  absl::StatusOr<gdt::nccl::RankInfo> rank =
      gdt::nccl::RankFromEnvironment(std::getenv);
  if (!target.ok() || !rank.ok()) {
    std::fprintf(stderr, "nccl_id_tool: %s\n",
                 std::string(!target.ok() ? target.status().message()
                                          : rank.status().message())
                     .c_str());
    return 1;
  }
  const char* per_root = std::getenv("GDT_NCCL_RANKS_PER_ROOT");
  const int nroots = gdt::nccl::RootsFor(
      rank->nranks,
      per_root != nullptr ? std::atoi(per_root) : gdt::nccl::kRanksPerRoot);
  gdt::rendezvous::KvClient kv(*target);
  absl::StatusOr<std::vector<gdt::nccl::UniqueId>> ids =
      gdt::nccl::ExchangeUniqueIds(
          kv, *rank, nroots, "world", gdt::nccl::NewNcclUniqueId,
          std::chrono::system_clock::now() + std::chrono::seconds(60));
  if (!ids.ok()) {
    std::fprintf(stderr, "nccl_id_tool: %s\n",
                 std::string(ids.status().message()).c_str());
    return 1;
  }
  std::vector<std::string> hex;
  for (const gdt::nccl::UniqueId& id : *ids) {
    hex.push_back(
        absl::BytesToHexString(absl::string_view(id.data(), id.size())));
  }
  std::printf("%s\n", absl::StrJoin(hex, ",").c_str());
  return 0;
}
