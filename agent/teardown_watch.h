// Ends a stage whose training is over but whose processes never leave.
//
// A distributed job's ranks finish together: their last collective (a
// barrier, destroy_process_group) syncs them, then each exits. torch 1.13's
// gloo teardown sometimes leaves one rank blocked there for good (its peers
// exited; see docs/troubleshooting.md), and torchrun waits for every local
// rank, and then up to 300 s for the other members' torchruns, before it
// exits. The job's work is done, yet it runs to its timeout.
//
// The watch looks at the stage's process group. A *rank* is a process whose
// environment has LOCAL_RANK (every torch launcher sets it) and whose parent
// is not a rank (a rank's own children inherit it). Once one rank has ended
// while the stage runs on, the member's ranks are at the end of their work:
// a rank that failed would have made its launcher stop the others within
// seconds. From then on output is activity; a new process other than a
// rank means the script moved on (the watch disarms), a new rank means the
// launcher started over (it starts afresh). When the stage stays quiet for
// the bound, it is stuck in teardown. CPU use does not count: once one
// member is ended, the others' ranks and torchruns spin retrying the lost
// rendezvous store, stuck as they are.
#ifndef GDT_AGENT_TEARDOWN_WATCH_H_
#define GDT_AGENT_TEARDOWN_WATCH_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gdt::agent {

// One live process of a stage's group.
struct GroupProcess {
  pid_t pid = 0;
  pid_t parent = 0;
  uint64_t start = 0;  // Field 22 of /proc/PID/stat: with pid, identity.
  // LOCAL_RANK is in its environment; RANK's value when it is a number.
  bool has_local_rank = false;
  std::optional<int> rank;
};

// The live processes of process group `pgid` (zombies left out), read from
// /proc. Environments that cannot be read count as having no rank.
std::vector<GroupProcess> SnapshotProcessGroup(pid_t pgid);

// Not thread-safe: one supervising thread feeds it.
class TeardownWatch {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // `bound` > 0: how long the stage may stay idle after a rank ended.
  explicit TeardownWatch(std::chrono::milliseconds bound);

  // The stage wrote output.
  void OnOutput(TimePoint now);

  // A fresh snapshot of the group. Returns the line for the job log once
  // the stage is stuck in teardown (then again on every later call), e.g.
  // "rank 3 stuck in teardown for 120 s after finishing; ended".
  std::optional<std::string> Observe(const std::vector<GroupProcess>& group,
                                     TimePoint now);

 private:
  using Identity = std::pair<pid_t, uint64_t>;  // pid, start.
  struct Seen {
    bool is_rank = false;
    std::optional<int> rank;
  };

  const std::chrono::milliseconds bound_;
  std::map<Identity, Seen> alive_;  // As of the last snapshot.
  int ranks_ended_ = 0;
  std::optional<TimePoint> first_rank_ended_;
  TimePoint last_activity_{};
  bool disarmed_ = false;
};

}  // namespace gdt::agent

#endif  // GDT_AGENT_TEARDOWN_WATCH_H_
