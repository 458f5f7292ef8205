#ifndef GDT_GITLAB_CKPT_COMMAND_H_
#define GDT_GITLAB_CKPT_COMMAND_H_

// The logic of the gdt-ckpt CLI (gitlab/ckpt_main.cc), called by training
// scripts inside a gdt job:
//   gdt-ckpt save --step N      writes manifest.json into the checkpoint
//                               directory; with store packages (or auto and
//                               the checkpoint above the threshold) uploads
//                               it to the generic package registry; prunes
//                               all but the newest GDT_CHECKPOINT_KEEP.
//   gdt-ckpt resume             finds the newest checkpoint that verifies
//                               among --manifest files and --from-job
//                               artifacts, places it in GDT_CHECKPOINT_DIR
//                               and prints GDT_RESUME_FROM=<dir>.
// Exit codes: 0 done (resume: also a fresh start, printed as
// "GDT_RESUME_FROM="), 1 the store failed, 2 bad input (one line naming it).

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

namespace gdt::gitlab {

inline constexpr int kCkptOk = 0;
inline constexpr int kCkptFailed = 1;
inline constexpr int kCkptBadInput = 2;

using CkptEnv = std::map<std::string, std::string>;

struct CkptSaveOptions {
  int64_t step = -1;
  std::string dir;     // Default: $GDT_CHECKPOINT_DIR/step-<step>.
  int world_size = 0;  // Default: $WORLD_SIZE, else 1.
  int rank = 0;        // Default: $RANK, else 0.
  // artifacts, packages, or auto: packages above threshold_bytes.
  std::string store = "auto";
  uint64_t threshold_bytes = 100ull << 20;
  int keep = 0;  // Default: $GDT_CHECKPOINT_KEEP; 0 keeps all.
  bool json = false;
};

struct CkptResumeOptions {
  std::vector<std::string> manifests;
  std::vector<int64_t> from_jobs;
  std::string dest;  // Default: $GDT_CHECKPOINT_DIR.
  bool json = false;
};

int RunCkptSave(const CkptSaveOptions& options, const CkptEnv& env,
                std::ostream& out, std::ostream& err);
int RunCkptResume(const CkptResumeOptions& options, const CkptEnv& env,
                  std::ostream& out, std::ostream& err);

// Removes all but the `keep` highest-step checkpoint directories (those
// with a manifest.json) directly below `checkpoint_dir`. Returns the removed
// directories.
std::vector<std::string> PruneCheckpoints(const std::string& checkpoint_dir,
                                          int keep);

}  // namespace gdt::gitlab

#endif  // GDT_GITLAB_CKPT_COMMAND_H_
