#ifndef GDT_GITLAB_CKPT_COMMAND_H_
#define GDT_GITLAB_CKPT_COMMAND_H_

// The logic of the gdt-ckpt CLI (ckpt/main.cc), called by training
// scripts inside a gdt job:
//   gdt-ckpt save --step N      writes manifest.json into the checkpoint
//                               directory; with store packages (or auto and
//                               the checkpoint above the threshold) uploads
//                               it to the generic package registry; prunes
//                               all but the newest GDT_CHECKPOINT_KEEP.
//   gdt-ckpt resume             finds the newest checkpoint that verifies
//                               among --manifest files and --from-job
//                               artifacts (neither given: the coordinator's
//                               records of the gang), places it in
//                               GDT_CHECKPOINT_DIR and prints
//                               GDT_RESUME_FROM=<dir>.
// Exit codes: 0 done (resume: also a fresh start, printed as
// "GDT_RESUME_FROM="), 1 the store failed, 2 bad input (one line naming it),
// 3 resume in a retried gang could not read the coordinator's records
// (stdout then ends the script that evals it: "GDT_RESUME_FROM= ; exit 3").

#include <chrono>
#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gdt::ckpt {

inline constexpr int kCkptOk = 0;
inline constexpr int kCkptFailed = 1;
inline constexpr int kCkptBadInput = 2;
// Resume in a retried gang could not read the coordinator's records.
inline constexpr int kCkptUnavailable = 3;

using CkptEnv = std::map<std::string, std::string>;

struct CkptSaveOptions {
  int64_t step = -1;
  std::string dir;     // Default: $GDT_CHECKPOINT_DIR/step-<step>.
  int world_size = 0;  // Default: $WORLD_SIZE, else 1.
  int rank = 0;        // Default: $RANK, else 0.
  // artifacts, packages, or auto: packages above threshold_bytes.
  std::string store = "auto";
  // 0: $GDT_CHECKPOINT_THRESHOLD, else 100 MiB (GitLab's default artifact
  // limit).
  uint64_t threshold_bytes = 0;
  int keep = 0;  // Default: $GDT_CHECKPOINT_KEEP; 0 keeps all.
  bool json = false;
  // How long, in all, a record the coordinator refuses for pace (with a
  // retry hint) is retried before save warns that it is not recorded.
  std::chrono::milliseconds record_wait{std::chrono::seconds(30)};
};

struct CkptResumeOptions {
  std::vector<std::string> manifests;
  std::vector<int64_t> from_jobs;
  std::string dest;  // Default: $GDT_CHECKPOINT_DIR.
  bool json = false;
  // In a retried gang (GDT_EPOCH 2 on), how long a coordinator that cannot
  // be reached is waited for before resume fails (kCkptUnavailable) rather
  // than start fresh and lose the work of the attempt that died.
  // The same bound holds for a GitLab API that cannot be reached (refused,
  // 5xx) while recorded checkpoints need downloading.
  std::chrono::seconds wait{120};
  // Why the coordinator's records could not be opened (a malformed
  // GDT_COORDINATOR, a missing credential), when the caller passes no
  // registry; in a retried gang resume then fails (kCkptBadInput).
  std::string no_registry_reason;
};

// Where checkpoints are recorded so that a later epoch of the same gang (a
// retry, with new job ids) finds them: the coordinator (ckpt/), or a fake in
// tests. Implementations say in their errors whom they could not reach.
class ManifestRegistry {
 public:
  virtual ~ManifestRegistry() = default;
  // Records one manifest (its manifest.json text).
  virtual absl::Status Record(int64_t step, int rank, int64_t job_id,
                              const std::string& manifest_json) = 0;
  // The gang's recorded manifest.json texts from every epoch, newest first.
  virtual absl::StatusOr<std::vector<std::string>> List() = 0;
};

// `registry` may be null (no coordinator: outside a gdt job). With one, save
// records the manifest after writing (and uploading) it; a refusal is one
// warning line and does not change the exit code (the checkpoint itself is
// in place and the artifacts remain the fallback).
int RunCkptSave(const CkptSaveOptions& options, const CkptEnv& env,
                ManifestRegistry* registry, std::ostream& out,
                std::ostream& err);
// With no --manifest and no --from-job, resume asks `registry` for the
// gang's recorded manifests (newest first) and, when none of them can be
// used, scans the artifacts of the jobs they name (GitLab API fallback).
// Without a registry and without either option it starts fresh.
int RunCkptResume(const CkptResumeOptions& options, const CkptEnv& env,
                  ManifestRegistry* registry, std::ostream& out,
                  std::ostream& err);

// Removes all but the `keep` highest-step checkpoint directories (those
// with a manifest.json) directly below `checkpoint_dir`. Returns the removed
// directories.
std::vector<std::string> PruneCheckpoints(const std::string& checkpoint_dir,
                                          int keep);

}  // namespace gdt::ckpt

#endif  // GDT_GITLAB_CKPT_COMMAND_H_
