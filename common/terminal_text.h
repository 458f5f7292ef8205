#ifndef GDT_COMMON_TERMINAL_TEXT_H_
#define GDT_COMMON_TERMINAL_TEXT_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace gdt {

// Text that came from someone else (job and host names, labels, reasons)
// made safe to print on an operator's terminal or in a job log: valid UTF-8
// passes unchanged except for characters that steer a terminal or fake a
// line, which become visible escapes: "\n", "\r", "\t", "\x1b" for other C0
// controls and DEL, "\u009b" for C1 controls, line and paragraph separators
// and bidirectional overrides; each byte that is not UTF-8 becomes "\xNN".
// The result is printable ASCII plus printable UTF-8, one line, and
// TerminalSafe(TerminalSafe(x)) == TerminalSafe(x).
std::string TerminalSafe(absl::string_view text);

// Whether `text` is UTF-8 throughout (no overlong forms, no surrogates), as
// protobuf requires of string fields: a name that is not cannot be sent.
bool IsValidUtf8(absl::string_view text);

// The offset of the first byte of `text` that does not start a UTF-8
// character (by the rules of IsValidUtf8), or npos when there is none.
size_t FirstNonUtf8(absl::string_view text);

// How many characters (code points) `text` shows as; each byte that is not
// UTF-8 counts as one.
size_t DisplayWidth(absl::string_view text);

// `text` cut to at most `width` characters, never inside a UTF-8 character:
// when cut, it ends in "..." (within `width`).
std::string TruncateDisplay(absl::string_view text, size_t width);

}  // namespace gdt

#endif  // GDT_COMMON_TERMINAL_TEXT_H_
