// Space the agent sets aside for its own small writes on the file system
// that jobs can fill.
//
// The agent's scratch dir holds what it must write while members run: each
// stage's script and files (in the member's home), its exit outbox and its
// process records. The members' homes, their TMPDIRs and (on most hosts)
// the builds dirs share that file system, and a job may fill it: every
// write of the agent then failed with ENOSPC, so other members' stages
// could not start and exits could not be kept on disk. The reserve is a
// few files allocated ahead (fallocate) in a directory only the agent
// uses; a write that fails for lack of space is written into one of them
// instead, already allocated, which is then renamed into place. Nothing a
// job does in between can take that space. The reserve is topped up when
// space is back (the agent does so after each teardown).
#ifndef GDT_AGENT_DISK_RESERVE_H_
#define GDT_AGENT_DISK_RESERVE_H_

#include <sys/types.h>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "common/mutex.h"

namespace gdt::agent {

// Thread-safe.
class DiskReserve {
 public:
  static constexpr size_t kSlotBytes = 256 << 10;
  static constexpr int kSlots = 16;

  // `dir` (made mode 0700 on the first Refill()) must be on the file system
  // of the files written through WriteFrom().
  explicit DiskReserve(std::string dir) : dir_(std::move(dir)) {}

  // Allocates slots up to kSlots as space allows; logs once when it cannot
  // (event=disk_reserve_short) and once when it can again.
  void Refill();

  // Writes `content` to `path` (replacing what is there, without following
  // a link) in a reserved slot: its mode becomes `mode`, its owner
  // `uid`:`gid` when given. Errors: ResourceExhausted when no slot is left
  // or `content` is larger than one; Internal when the slot cannot be
  // written or moved (another file system: no space is gained).
  absl::Status WriteFrom(const std::string& path, std::string_view content,
                         mode_t mode,
                         std::optional<std::pair<uid_t, gid_t>> owner);

  // Slots ready.
  size_t slots() const;

 private:
  const std::string dir_;
  mutable Mutex mu_;
  std::vector<std::string> slots_ ABSL_GUARDED_BY(mu_);  // Paths.
  int next_ ABSL_GUARDED_BY(mu_) = 0;                    // For slot names.
  bool short_ ABSL_GUARDED_BY(mu_) = false;
};

// Whether `status` (from a write) failed for lack of space.
bool IsNoSpace(const absl::Status& status);

}  // namespace gdt::agent

#endif  // GDT_AGENT_DISK_RESERVE_H_
