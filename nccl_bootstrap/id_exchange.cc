#include "nccl_bootstrap/id_exchange.h"

#include <charconv>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"

namespace gdt::nccl {
namespace {

// Parses a non-negative decimal variable; nullopt when unset or empty.
absl::StatusOr<std::optional<int>> ReadInt(
    const std::function<const char*(const char*)>& getenv, const char* name) {
  const char* value = getenv(name);
  if (value == nullptr || *value == '\0') return std::optional<int>();
  const std::string text = value;
  int parsed = 0;
  const auto [end, error] =
      std::from_chars(text.data(), text.data() + text.size(), parsed);
  if (error != std::errc() || end != text.data() + text.size() || parsed < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        name, " must be a non-negative integer, got '", text, "'"));
  }
  return std::optional<int>(parsed);
}

}  // namespace

absl::StatusOr<RankInfo> RankFromEnvironment(
    const std::function<const char*(const char*)>& getenv) {
  absl::StatusOr<std::optional<int>> node_rank =
      ReadInt(getenv, "GDT_NODE_RANK");
  absl::StatusOr<std::optional<int>> procs =
      ReadInt(getenv, "GDT_NPROC_PER_NODE");
  absl::StatusOr<std::optional<int>> world = ReadInt(getenv, "GDT_WORLD_SIZE");
  absl::StatusOr<std::optional<int>> local = ReadInt(getenv, "GDT_LOCAL_RANK");
  if (local.ok() && !local->has_value()) local = ReadInt(getenv, "LOCAL_RANK");
  for (const auto* status : {&node_rank, &procs, &world, &local}) {
    if (!status->ok()) return status->status();
  }
  if (!node_rank->has_value()) {
    return absl::FailedPreconditionError(
        "GDT_NODE_RANK is not set (run inside a gdt job with GDT_LAUNCHER: "
        "nccl)");
  }
  if (!world->has_value() || **world == 0) {
    return absl::FailedPreconditionError("GDT_WORLD_SIZE is not set");
  }
  const int per_node = procs->value_or(1) == 0 ? 1 : procs->value_or(1);
  if (!local->has_value() && per_node > 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "GDT_NPROC_PER_NODE is ", per_node, ": set GDT_LOCAL_RANK (0..",
        per_node - 1, ") in each process the member starts"));
  }
  RankInfo info;
  info.local_rank = local->value_or(0);
  if (info.local_rank >= per_node) {
    return absl::FailedPreconditionError(
        absl::StrCat("GDT_LOCAL_RANK ", info.local_rank,
                     " is not below GDT_NPROC_PER_NODE ", per_node));
  }
  info.nranks = **world;
  info.rank = **node_rank * per_node + info.local_rank;
  if (info.rank >= info.nranks) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", info.rank, " (GDT_NODE_RANK ", **node_rank,
                     ") is not below GDT_WORLD_SIZE ", info.nranks));
  }
  return info;
}

int RootCount(int nranks, int ranks_per_root) {
  if (nranks <= 0 || ranks_per_root <= 0) return 1;
  return (nranks + ranks_per_root - 1) / ranks_per_root;
}

int RootRank(int root, int nranks, int nroots) {
  return static_cast<int>(static_cast<int64_t>(root) * nranks / nroots);
}

std::string UniqueIdKey(const std::string& name, int root) {
  return absl::StrCat("gdt/nccl/", name, "/unique_id/", root);
}

absl::StatusOr<std::vector<UniqueId>> ExchangeUniqueIds(
    rendezvous::KvClient& kv, const RankInfo& rank, int nroots,
    const std::string& name,
    const std::function<absl::StatusOr<UniqueId>()>& generate,
    rendezvous::KvClient::Deadline deadline) {
  if (nroots < 1 || nroots > rank.nranks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot use ", nroots, " roots for ", rank.nranks, " ranks"));
  }
  std::vector<UniqueId> ids(static_cast<size_t>(nroots));
  std::vector<bool> known(static_cast<size_t>(nroots), false);
  for (int root = 0; root < nroots; ++root) {
    if (RootRank(root, rank.nranks, nroots) != rank.rank) continue;
    absl::StatusOr<UniqueId> id = generate();
    if (!id.ok()) return id.status();
    // Create-only: a second publication in the same epoch (a rank that ran
    // the exchange before) would leave ranks holding different ids, and
    // NCCL would hang until its deadline.
    absl::StatusOr<rendezvous::KvCasOutcome> published =
        kv.CompareAndSet(UniqueIdKey(name, root), std::nullopt,
                         std::string(id->data(), id->size()), deadline);
    if (!published.ok()) {
      return absl::Status(
          published.status().code(),
          absl::StrCat("cannot publish the NCCL unique id of "
                       "root ",
                       root, ": ", published.status().message()));
    }
    if (!published->swapped) {
      return absl::AlreadyExistsError(absl::StrCat(
          "rank ", rank.rank, ": the NCCL unique id of communicator \"", name,
          "\" root ", root,
          " was already published in this epoch (by an earlier run of this "
          "rank); other ranks may hold it, so it is not replaced: give the "
          "new communicator another name, or retry the gang"));
    }
    ids[static_cast<size_t>(root)] = *id;
    known[static_cast<size_t>(root)] = true;
  }
  for (int root = 0; root < nroots; ++root) {
    if (known[static_cast<size_t>(root)]) continue;
    absl::StatusOr<std::string> value =
        kv.Wait(UniqueIdKey(name, root), deadline);
    if (!value.ok()) {
      const int creator = RootRank(root, rank.nranks, nroots);
      if (value.status().code() == absl::StatusCode::kDeadlineExceeded) {
        return absl::DeadlineExceededError(
            absl::StrCat("rank ", rank.rank, ": the NCCL unique id of root ",
                         root, " (created by rank ", creator,
                         ") did not arrive in time; is that rank running?"));
      }
      return absl::Status(value.status().code(),
                          absl::StrCat("rank ", rank.rank,
                                       ": cannot fetch the NCCL unique id "
                                       "of root ",
                                       root, ": ", value.status().message()));
    }
    if (value->size() != kUniqueIdBytes) {
      return absl::DataLossError(
          absl::StrCat("the NCCL unique id of root ", root, " has ",
                       value->size(), " bytes instead of ", kUniqueIdBytes));
    }
    std::memcpy(ids[static_cast<size_t>(root)].data(), value->data(),
                kUniqueIdBytes);
  }
  return ids;
}

}  // namespace gdt::nccl
