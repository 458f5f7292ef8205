#ifndef GDT_COORDINATOR_STATUS_COMMAND_H_
#define GDT_COORDINATOR_STATUS_COMMAND_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "gdt/v1/coordinator.pb.h"

namespace gdt::coordinator {

// `gdt-coord status`: asks the coordinator at `endpoint` for its state and
// returns the text to print (tables, or JSON when `json`). `all` includes
// finished gangs.
// Errors: Unavailable "cannot reach coordinator at ADDR: <reason>".
absl::StatusOr<std::string> RunStatusCommand(const std::string& endpoint,
                                             bool json, bool all);

// A HOSTS table and a GANGS table with one row per member. `now_unix_ms`
// gives the heartbeat ages.
std::string RenderStatusText(const v1::GetStatusResponse& status,
                             int64_t now_unix_ms);

// {"hosts":[...],"gangs":[...]} for scripts.
std::string RenderStatusJson(const v1::GetStatusResponse& status);

}  // namespace gdt::coordinator

#endif  // GDT_COORDINATOR_STATUS_COMMAND_H_
