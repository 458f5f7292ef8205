#ifndef GDT_COMMON_SUBPROCESS_H_
#define GDT_COMMON_SUBPROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace gdt {

// How a child process ended.
struct ExitStatus {
  int exit_code = 0;  // Valid when signal == 0.
  int signal = 0;     // Signal that killed the process, or 0.
  // The shell's convention: the exit code, or 128+signal.
  int code() const { return signal != 0 ? 128 + signal : exit_code; }
  bool success() const { return signal == 0 && exit_code == 0; }
};

// Which of the child's output pipes a chunk came from.
enum class OutputSource { kStdout, kStderr };

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH.
  // The complete environment of the child (nothing is inherited).
  std::map<std::string, std::string> env;
  std::string working_dir;        // Empty: the parent's.
  bool new_process_group = true;  // setpgid(0, 0) in the child.
  bool capture_output = true;     // Pipes for stdout/stderr; else inherit.
  // When set (and capture_output is false), stdout and stderr are appended
  // to this file instead of being inherited.
  std::string output_path;
  bool die_with_parent = false;  // PR_SET_PDEATHSIG(SIGKILL); for tests.
  std::string stdin_path = "/dev/null";
  // Non-empty: the child writes itself into this cgroup.procs file (cgroup
  // v2) before anything else, so it and all it starts stay in that cgroup;
  // the spawn fails when it cannot.
  std::string cgroup_procs;
  // When set, the child drops to these credentials (setgroups, setgid,
  // setuid, in that order) before changing directory and executing; the
  // parent needs CAP_SETUID/CAP_SETGID. The spawn fails when a call fails.
  struct Credentials {
    uid_t uid = 0;
    gid_t gid = 0;
    std::vector<gid_t> groups;  // Supplementary groups; empty = none.
  };
  std::optional<Credentials> credentials;
};

// Whether Spawn starts the child of `options` in this process's memory
// until it executes, as posix_spawn does, rather than in a copy of it, as
// fork does. Sharing copies no page tables, so a start costs the same in a
// large process as in a small one and holds up none of its other threads.
// The child gets a copy when
//   - it switches to other credentials: the kernel then makes its memory,
//     shared with this process, undumpable for good (no core dumps of this
//     process), and until it executes a process of that account could
//     reach this process's memory through it wherever fs.suid_dumpable is 1;
//   - it joins a cgroup whose memory.oom.group is 1 (the agent sets it with
//     member_memory_max): the kernel's OOM kill of such a group also kills
//     every process that shares memory with one of its tasks, and a child
//     that has not executed yet would take this process with it.
bool SpawnSharesMemory(const SpawnOptions& options);

// A child process, optionally the leader of its own process group, with its
// stdout and stderr on pipes. It gets descriptors 0, 1 and 2 only: every
// other one of this process is closed when it executes, whether or not it
// was opened close-on-exec. The destructor kills the process group with
// SIGKILL if the child has not been reaped, so nothing outlives its owner by
// accident. Not thread-safe.
class Subprocess {
 public:
  using OutputCallback = std::function<void(OutputSource, std::string_view)>;

  // Starts the child. Errors: InvalidArgument for an empty argv; NotFound if
  // argv[0] cannot be executed; Internal when no pipe or process can be made.
  static absl::StatusOr<std::unique_ptr<Subprocess>> Spawn(
      const SpawnOptions& options);

  // From now on every child of this process starts with this soft
  // RLIMIT_NOFILE (at most the hard limit) instead of this process's own: a
  // daemon that raised its own limit gives its children the one it was
  // started with. 0 (the default) leaves children this process's limit.
  // Thread-safe.
  static void SetChildOpenFilesLimit(uint64_t soft);

  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }

  // Waits up to `timeout` for output and passes whatever arrives to
  // `callback`. Returns false once both pipes are closed (or were never
  // captured).
  bool PumpOutput(std::chrono::milliseconds timeout,
                  const OutputCallback& callback);

  // Reaps the child if it has exited; never blocks.
  std::optional<ExitStatus> TryWait();

  // Blocks until the child exits, delivering output to `callback` (may be
  // empty). Returns the exit status.
  ExitStatus Wait(const OutputCallback& callback = nullptr);

  // Like Wait() but gives up at `deadline`, returning nullopt (the child is
  // left running). Returns as soon as the child has exited, however its
  // pipes stand (a process it left behind may hold them open): it waits on
  // the child's exit and its output together (a pidfd, Linux 5.3 and later;
  // elsewhere it looks for the exit at least every 20 ms). What the child
  // wrote before it exited is delivered before it returns.
  std::optional<ExitStatus> WaitUntil(
      std::chrono::steady_clock::time_point deadline,
      const OutputCallback& callback = nullptr);

  // Sends `signal` to the child's process group (or the child alone when it
  // has none). Returns false if nothing was signalled.
  bool SignalGroup(int signal);

  // SIGTERM to the group, then SIGKILL after `grace` unless the child exited;
  // then reaps it. Returns the exit status.
  ExitStatus Terminate(std::chrono::milliseconds grace,
                       const OutputCallback& callback = nullptr);

  std::optional<ExitStatus> exit_status() const { return exit_; }

 private:
  Subprocess() = default;
  void CloseFd(int& fd);
  // Waits up to `timeout` for output or, when `with_exit`, for the child's
  // exit; delivers what arrived. Returns false once both pipes are closed.
  bool Poll(std::chrono::milliseconds timeout, bool with_exit,
            const OutputCallback& callback);

  pid_t pid_ = -1;
  int pid_fd_ = -1;  // Readable once the child exited; -1 if unsupported.
  bool own_group_ = false;
  int out_fd_ = -1;
  int err_fd_ = -1;
  std::optional<ExitStatus> exit_;
};

// The current process's environment as a map.
std::map<std::string, std::string> CurrentEnvironment();

// Runs argv to completion with the current environment and returns its exit
// status with stdout and stderr concatenated in `output`. Gives up (killing
// the child) after `timeout`: DeadlineExceeded.
absl::StatusOr<ExitStatus> RunCommand(const std::vector<std::string>& argv,
                                      std::chrono::milliseconds timeout,
                                      std::string* output = nullptr);

}  // namespace gdt

#endif  // GDT_COMMON_SUBPROCESS_H_
