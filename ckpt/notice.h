#ifndef GDT_GITLAB_CHECKPOINT_NOTICE_H_
#define GDT_GITLAB_CHECKPOINT_NOTICE_H_

// The pre-timeout checkpoint notice. GitLab sends nothing before it kills a
// job at its timeout, so `gdt-ckpt run -- <training command>` runs the
// command in its own process group and, GDT_CHECKPOINT_NOTICE seconds
// (default 300) before the job's deadline (CI_JOB_STARTED_AT, else now,
// plus CI_JOB_TIMEOUT), writes the flag file GDT_CHECKPOINT_NOTICE_FILE
// (default $GDT_CHECKPOINT_DIR/.notice) and sends GDT_CHECKPOINT_SIGNAL
// (default USR1; "none": the flag file only) to that group, or, with
// GDT_CHECKPOINT_SIGNAL_TO=workers, to the command's own children only
// (torchrun's workers, not what the workers start). Only processes that
// handle the signal receive it; one that has not installed a handler yet
// gets it once it does, so a notice never kills a process by the signal's
// default action.

#include <chrono>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gdt::ckpt {

// `key`'s value in `env`; empty when it is not set.
std::string EnvValue(const std::map<std::string, std::string>& env,
                     const std::string& key);

struct NoticePlan {
  // When to give notice; nullopt without CI_JOB_TIMEOUT (no deadline).
  std::optional<std::chrono::system_clock::time_point> notice_at;
  std::chrono::system_clock::time_point deadline;
  std::string flag_file;
  int signal = 0;  // 0: none.
  // The notice signal skips the command itself (GDT_CHECKPOINT_SIGNAL_TO).
  bool workers_only = false;
};

// From the job's environment. InvalidArgument naming the variable for a
// malformed CI_JOB_TIMEOUT, CI_JOB_STARTED_AT, GDT_CHECKPOINT_NOTICE,
// GDT_CHECKPOINT_SIGNAL or GDT_CHECKPOINT_SIGNAL_TO (group or workers), or
// when no flag file path can be derived.
absl::StatusOr<NoticePlan> PlanNotice(
    const std::map<std::string, std::string>& env,
    std::chrono::system_clock::time_point now);

// Shares the notice among a gang's members (ckpt/: the gang's key-value
// store on the coordinator): the first member to reach its notice time
// announces it, and every member gives notice as soon as it hears, so all
// ranks checkpoint at about the same time even when their deadlines differ.
class NoticeBroadcast {
 public:
  virtual ~NoticeBroadcast() = default;
  // Tells the other members; `deadline_unix_s` is the announcer's deadline.
  virtual absl::Status Announce(int64_t deadline_unix_s) = 0;
  // What was announced, nullopt when nothing was: "<deadline Unix s>",
  // optionally followed by a space and a one-line note saying who gave the
  // notice (the coordinator's, when it preempts the gang; see
  // rendezvous/kv_keys.h). Returns within a fraction of a second.
  virtual absl::StatusOr<std::optional<std::string>> Announced() = 0;
};

// Runs `argv` with `env` (+ GDT_CHECKPOINT_NOTICE_FILE) under the plan;
// forwards SIGTERM/SIGINT/SIGHUP to the command's group. With `broadcast`,
// the member announces its notice and gives notice when another member
// announced first (checked about once a second, also without a deadline of
// its own); the first broadcast error is one warning line on `err` and
// ends the sharing (the member's own notice still comes). Returns the
// command's exit code (128+signal when killed), 2 with one line on `err`
// when it cannot be started.
int RunWithNotice(const std::vector<std::string>& argv,
                  std::map<std::string, std::string> env,
                  const NoticePlan& plan, std::ostream& err,
                  NoticeBroadcast* broadcast = nullptr);

}  // namespace gdt::ckpt

#endif  // GDT_GITLAB_CHECKPOINT_NOTICE_H_
