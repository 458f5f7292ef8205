#ifndef GDT_AGENT_STAGE_H_
#define GDT_AGENT_STAGE_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "agent/teardown_watch.h"
#include "common/mutex.h"
#include "common/subprocess.h"

namespace gdt::agent {

// What a client may ask a running stage to do.
enum class StageSignal {
  kTerm,  // SIGTERM to the process group, SIGKILL after the grace.
  kKill,  // SIGKILL to the process group now.
  kInt,   // SIGINT to the process group.
  // Collect evidence into StageOptions::evidence_dir (once); no signal.
  kCollectEvidence,
};

// What a watched stage's progress file says.
struct StageProgress {
  // When the job last touched the file (its mtime), or the stage's start
  // when that is later.
  std::chrono::system_clock::time_point last;
  // The step the job wrote into the file: the whole content is a decimal
  // number (surrounding whitespace allowed). Unset for anything else, e.g.
  // an empty file that is only touched.
  std::optional<uint64_t> step;
};

// Reads `progress_file` (empty or missing: only `started` counts).
StageProgress ReadStageProgress(const std::string& progress_file,
                                std::chrono::system_clock::time_point started);

// Receives a stage's output and its end. Every call comes from the stage's
// own supervising thread, in order.
class StageObserver {
 public:
  virtual ~StageObserver() = default;
  // Returns false while the observer cannot take more output; the stage then
  // stops reading the script's pipes (the script blocks on write) but still
  // delivers signals.
  virtual bool ReadyForOutput() { return true; }
  // A chunk of output as it arrived; chunks of one stream are in order.
  virtual void OnOutput(OutputSource source, std::string_view data) = 0;
  // The hang watchdog fired (StageOptions::hang_timeout passed without
  // progress); evidence is collected. At most once, before OnExit().
  // `progress` is what the progress file said when the watchdog fired.
  virtual void OnHung(std::chrono::seconds timeout,
                      const StageProgress& progress) {}
  // The script exited and its process group is gone. Called exactly once and
  // last: the stage never touches the observer again, so the observer may
  // be destroyed from here on.
  virtual void OnExit(const ExitStatus& status) = 0;
};

// The master port leased to the gang in a stage environment of rank 0
// (GDT_NODE_RANK 0 and GDT_MASTER_PORT set), else 0.
uint32_t MasterPortOfRankZero(const std::map<std::string, std::string>& env);

struct StageOptions {
  std::string script_path;                 // Run as `/bin/bash <script_path>`.
  std::map<std::string, std::string> env;  // The complete environment.
  std::string working_dir;                 // Must exist.
  std::chrono::milliseconds kill_grace{10000};  // SIGTERM → SIGKILL.
  // Hang watchdog, off when 0: once `progress_file`'s mtime (or
  // the stage's start, whichever is later) is `hang_timeout` old, the stage
  // collects evidence into `evidence_dir` and calls OnHung(). It does not
  // stop the script: the gang decides.
  std::chrono::seconds hang_timeout{0};
  std::string progress_file;
  std::string evidence_dir;  // Also for kCollectEvidence; empty = none.
  // Teardown watch, off when 0 (see TeardownWatch): once a rank of the
  // stage has ended and the stage then stays idle this long, the stage
  // writes one line to its output ("gdt: rank 3 stuck in teardown for 60 s
  // after finishing; ended"), kills its process group and ends as a
  // success: the ranks' work was done.
  std::chrono::seconds teardown_timeout{0};
  // Non-empty: once collected, the evidence is copied here by a process
  // with the stage's credentials and cgroup (the directory is the job's).
  std::string evidence_copy_to;
  // Who runs the script and where its processes are kept (see
  // SpawnOptions): unset = the agent's uid and cgroup.
  std::optional<SpawnOptions::Credentials> credentials;
  std::string cgroup_procs;
};

// One stage script running in its own process group, supervised by a
// thread that streams its output to an observer, applies signals and, once
// the script exits, kills whatever is left in its process group so nothing
// runs on into the next stage.
//
// Thread-safe. The observer must stay alive until its OnExit() returns.
class Stage {
 public:
  // Spawns the script and starts supervising it. `on_finished` runs on the
  // supervising thread after the process group is gone and before
  // observer->OnExit().
  // Errors: those of Subprocess::Spawn.
  static absl::StatusOr<std::shared_ptr<Stage>> Start(
      const StageOptions& options, StageObserver* observer,
      std::function<void(Stage*)> on_finished);

  // Kills a stage that is still running (SIGKILL) and waits for its thread.
  ~Stage();
  Stage(const Stage&) = delete;
  Stage& operator=(const Stage&) = delete;

  // Asks the supervising thread to deliver `signal`; does nothing once the
  // stage has finished.
  void Signal(StageSignal signal);

  // Has the stage's process group killed (SIGKILL) by its supervising
  // thread at its next turn, and then ends its output with `line` (a
  // "gdt: ..." line ending in '\n' saying why the agent stopped it);
  // does nothing once the script has exited (its stage may still be
  // collecting output) or was stopped so before. The line is left out when
  // the script ended with success before the kill came.
  void StopWith(const std::string& line);

  // Waits until the stage has finished or `deadline` passes; returns whether
  // it finished.
  bool WaitFinished(std::chrono::steady_clock::time_point deadline);

  bool finished() const;
  // The progress of a stage with a hang watchdog, read now; nullopt when it
  // has none.
  std::optional<StageProgress> progress() const;
  pid_t process_group() const { return process_group_; }
  std::chrono::milliseconds kill_grace() const { return kill_grace_; }

 private:
  Stage(std::unique_ptr<Subprocess> child, StageObserver* observer,
        std::function<void(Stage*)> on_finished, const StageOptions& options);

  void Run();
  void ApplySignals();
  // The hang watchdog; on the supervising thread.
  void CheckProgress();
  // The teardown watch; on the supervising thread.
  void CheckTeardown();
  void CollectEvidenceOnce(const std::string& why);

  // Constant after construction.
  const pid_t process_group_;
  const std::chrono::milliseconds kill_grace_;
  StageObserver* const observer_;
  const std::function<void(Stage*)> on_finished_;

  // Owned by the supervising thread.
  std::unique_ptr<Subprocess> child_;
  std::optional<std::chrono::steady_clock::time_point> kill_at_;
  const std::chrono::seconds hang_timeout_;
  const std::string progress_file_;
  const std::string evidence_dir_;
  const std::string evidence_copy_to_;
  const std::optional<SpawnOptions::Credentials> credentials_;
  const std::string cgroup_procs_;
  const std::string path_;  // $PATH of the script, to find py-spy.
  // The master port leased to the gang when this is rank 0's stage
  // (GDT_NODE_RANK 0, GDT_MASTER_PORT), else 0.
  const uint32_t master_port_;
  const std::chrono::system_clock::time_point started_;
  std::chrono::steady_clock::time_point next_progress_check_{};
  bool hung_ = false;
  std::optional<TeardownWatch> teardown_watch_;
  std::chrono::steady_clock::time_point next_teardown_check_{};
  bool ended_in_teardown_ = false;
  bool evidence_collected_ = false;
  std::string output_tail_;  // The last output, both streams.
  // oom_kill in the member cgroup's memory.events when the stage started.
  uint64_t oom_kills_at_start_ = 0;

  mutable Mutex mu_;
  CondVar changed_;
  std::vector<StageSignal> pending_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  std::string stop_line_ ABSL_GUARDED_BY(mu_);  // From StopWith().
  bool exited_ ABSL_GUARDED_BY(mu_) = false;    // The script was reaped.

  std::thread thread_;
};

}  // namespace gdt::agent

#endif  // GDT_AGENT_STAGE_H_
