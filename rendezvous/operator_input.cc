#include "rendezvous/operator_input.h"

#include "absl/strings/str_cat.h"
#include "common/terminal_text.h"

namespace gdt::rendezvous {

absl::Status CheckCancelReason(absl::string_view reason) {
  if (reason.size() <= kMaxCancelReasonBytes) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("the cancel reason is ", reason.size(), " bytes; at most ",
                   kMaxCancelReasonBytes, " (1 KiB) are allowed"));
}

absl::Status CheckHostTokenName(absl::string_view host_name) {
  if (host_name.empty()) {
    return absl::InvalidArgumentError("host name must not be empty");
  }
  if (TerminalSafe(host_name) != host_name) {
    return absl::InvalidArgumentError(
        absl::StrCat("host name '", TerminalSafe(host_name),
                     "' must be one line of printable text (no newline or "
                     "other control character)"));
  }
  return absl::OkStatus();
}

}  // namespace gdt::rendezvous
