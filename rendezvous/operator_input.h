#ifndef GDT_RENDEZVOUS_OPERATOR_INPUT_H_
#define GDT_RENDEZVOUS_OPERATOR_INPUT_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace gdt::rendezvous {

// Operator input the coordinator refuses (InvalidArgument, one line) from
// any client, and that gdt-coord checks before it sends anything.

// A cancel reason is stored with every gang it cancels and quoted in
// status, the dashboard and job logs: at most kMaxCancelReasonBytes.
inline constexpr size_t kMaxCancelReasonBytes = 1024;
absl::Status CheckCancelReason(absl::string_view reason);

// A host name given for a new host token is printed by `hosts token list`
// and logged: not empty, and one line of printable text (no newline or
// other control character, valid UTF-8).
absl::Status CheckHostTokenName(absl::string_view host_name);

}  // namespace gdt::rendezvous

#endif  // GDT_RENDEZVOUS_OPERATOR_INPUT_H_
