#ifndef GDT_LAUNCH_KV_DONE_SIGNAL_H_
#define GDT_LAUNCH_KV_DONE_SIGNAL_H_

#include "launch/head_worker.h"
#include "rendezvous/kv_client.h"

namespace gdt::launch {

// The key rank 0 sets to its script's exit code.
inline constexpr char kDoneKey[] = "gdt-launch/done";

// DoneSignal through the gang key-value store (docs/kv.md): Announce sets
// kDoneKey, WaitUntil waits for it. A deadline passing, or the coordinator
// away for now, is not an error;
// ABORTED / FAILED_PRECONDITION (the gang ended) and refusals are.
class KvDoneSignal : public DoneSignal {
 public:
  explicit KvDoneSignal(rendezvous::KvTarget target)
      : client_(std::move(target)) {}
  absl::Status Announce(int exit_code) override;
  absl::StatusOr<std::optional<int>> WaitUntil(
      std::chrono::system_clock::time_point deadline) override;

 private:
  rendezvous::KvClient client_;
};

}  // namespace gdt::launch

#endif  // GDT_LAUNCH_KV_DONE_SIGNAL_H_
