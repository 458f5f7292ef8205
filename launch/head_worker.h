#ifndef GDT_LAUNCH_HEAD_WORKER_H_
#define GDT_LAUNCH_HEAD_WORKER_H_

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "launch/recipe.h"

namespace gdt::launch {

// How rank 0 tells the workers that the job's command has finished. The
// real one is the gang key-value store (kv_done_signal.h).
class DoneSignal {
 public:
  virtual ~DoneSignal() = default;
  // Rank 0: publishes the job command's exit code.
  virtual absl::Status Announce(int exit_code) = 0;
  // Workers: rank 0's exit code once announced, or nullopt when `deadline`
  // passed first. Errors: the gang ended or the store cannot be reached.
  virtual absl::StatusOr<std::optional<int>> WaitUntil(
      std::chrono::system_clock::time_point deadline) = 0;
};

struct HeadWorkerOptions {
  std::string recipe_name;  // For messages.
  RenderedRecipe commands;
  int rank = 0;
  int num_workers = 0;
  // The job's own command (rank 0 only).
  std::vector<std::string> script;
  // The environment of every child; the script also gets
  // commands.script_env.
  std::map<std::string, std::string> env;
  std::chrono::seconds ready_timeout{120};
  // Between ready checks.
  std::chrono::milliseconds poll_interval{500};
  // SIGTERM to SIGKILL when stopping the head or a worker.
  std::chrono::milliseconds stop_grace{5000};
  // Returns a signal number once gdt-launch itself was asked to stop (0:
  // not asked). Children are then stopped and 128+signal returned.
  std::function<int()> stop_requested = [] { return 0; };
  std::ostream* log = nullptr;  // "gdt-launch: ..." lines; required.
};

// Rank 0: starts the head, polls the ready check until it exits 0 (the head
// must stay up; at most ready_timeout), runs the script with script_env,
// announces its exit code, stops the head and returns the script's exit
// code (128+signal when killed). A head that exits early, a ready check
// that never passes, or a script that cannot start return non-zero with
// one line on `log` naming the cause. Every child runs in its own process
// group and gets SIGKILL if gdt-launch dies (PR_SET_PDEATHSIG).
int RunHead(const HeadWorkerOptions& options, DoneSignal& done);

// Ranks 1..N-1: starts the worker and keeps it up until rank 0 announces
// its result (returns 0 after stopping the worker), the worker exits (its
// code, at least 1, with one line naming it), or the gang ends (1).
int RunWorker(const HeadWorkerOptions& options, DoneSignal& done);

}  // namespace gdt::launch

#endif  // GDT_LAUNCH_HEAD_WORKER_H_
