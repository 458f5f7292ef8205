// Process groups a gdt-agent started, kept on disk so that the next agent
// can end what a dead one left running.
//
// The agent ends every stage's process group itself (Stage, Shutdown). An
// agent that dies without doing so (SIGKILL, the OOM killer, a crash)
// leaves the training running, holding its GPUs, with nothing left to
// report its exit. Each stage's group is therefore recorded as a file
// `<dir>/<pgid>` holding the leader's start time (field 22 of
// /proc/<pgid>/stat) and removed when the group is gone; an agent starting
// on the same scratch dir ends the groups still recorded before it serves.
#ifndef GDT_AGENT_PROCESS_LEDGER_H_
#define GDT_AGENT_PROCESS_LEDGER_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace gdt::agent {

// Field 22 of /proc/<pid>/stat (clock ticks after boot), or nullopt when the
// process does not exist.
std::optional<uint64_t> ProcessStartTime(pid_t pid);

// Thread-safe: every call works on its own file.
class ProcessLedger {
 public:
  // `dir` is created on the first Record().
  explicit ProcessLedger(std::string dir) : dir_(std::move(dir)) {}

  // Records the group led by `pgid`, whose leader must be alive.
  // Errors: NotFound when the leader is gone; Internal naming the file that
  // could not be written.
  absl::Status Record(pid_t pgid) const;

  // Forgets the group (it ended). Idempotent.
  void Forget(pid_t pgid) const;

  // A group a previous agent left behind and this call ended.
  struct Reaped {
    pid_t pgid = 0;
    size_t processes = 0;  // Alive when it was found.
    bool killed = false;   // It outlived `grace` after SIGTERM: SIGKILLed.
  };

  // Ends every recorded group that is still the one recorded: SIGTERM to
  // the group, up to `grace` for it to go, then SIGKILL; forgets every
  // entry. A group counts as the recorded one when its leader is alive with
  // the recorded start time or, with the leader gone, when every process
  // left in it started no earlier than the leader did (a group's number is
  // not reused while any member lives). Entries that do not parse are
  // removed. Returns the groups it ended.
  std::vector<Reaped> ReapLeftovers(std::chrono::milliseconds grace) const;

 private:
  std::string PathOf(pid_t pgid) const;

  const std::string dir_;
};

}  // namespace gdt::agent

#endif  // GDT_AGENT_PROCESS_LEDGER_H_
