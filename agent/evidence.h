#ifndef GDT_AGENT_EVIDENCE_H_
#define GDT_AGENT_EVIDENCE_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gdt::agent {

// What a stage knows when it is asked for evidence of a hang (hang
// watchdog): its process group and the end of its output.
struct EvidenceRequest {
  std::string dir;  // Absolute; created with its parents.
  pid_t process_group = 0;
  std::string why;          // One line, e.g. "no progress for 600 s".
  std::string output_tail;  // The stage's last output, both streams.
  std::string path;         // $PATH to look for py-spy in.
};

// Writes into `request.dir`:
//   summary.txt    why, when, and whether py-spy was available;
//   processes.txt  the process group's tree (ps: pid, ppid, pgid, state,
//                  elapsed, command line);
//   last-lines.txt the stage's last 100 output lines;
//   py-spy-PID.txt `py-spy dump --pid PID` for each Python process of the
//                  group, only when py-spy is on `request.path` (it is not
//                  in Debian; summary.txt says so when it is missing).
// Every external command runs under a 10 s deadline. Returns the files
// written (names only). Errors: Internal naming a file or directory that
// could not be written.
absl::StatusOr<std::vector<std::string>> CollectEvidence(
    const EvidenceRequest& request);

// The last `lines` lines of `text` (all of it when it has fewer).
std::string LastLines(const std::string& text, size_t lines);

}  // namespace gdt::agent

#endif  // GDT_AGENT_EVIDENCE_H_
