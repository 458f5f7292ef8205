#ifndef GDT_EXECUTOR_MEMBER_STATE_H_
#define GDT_EXECUTOR_MEMBER_STATE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gdt/v1/coordinator.pb.h"

namespace gdt::executor {

// What prepare learned and later stages (each a new process) need: the
// member's placement and identity. Stored as JSON in $TMPDIR/gdt-member.json.
struct MemberState {
  v1::Assignment assignment;
  v1::GangKey gang_key;
  int member_index = 0;  // 1-based.
  int64_t job_id = 0;
  std::string member_id;  // "<gang_id>/<job_id>", the agent's handle.
  std::string agent_endpoint;
  std::string builds_dir;
  std::string cache_dir;
};

// Writes `state` to `path` atomically (a temporary file renamed over it,
// mode 0600). Errors: Internal naming the path and the OS error.
absl::Status WriteMemberState(const std::string& path,
                              const MemberState& state);

// Reads a state file written by WriteMemberState. Errors: NotFound when the
// file does not exist; DataLoss when it is not a state file.
absl::StatusOr<MemberState> ReadMemberState(const std::string& path);

}  // namespace gdt::executor

#endif  // GDT_EXECUTOR_MEMBER_STATE_H_
