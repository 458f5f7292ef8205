#ifndef GDT_CI_GO_QUOTE_H_
#define GDT_CI_GO_QUOTE_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace gdt::ci {

// Go's strconv.IsPrint, which decides what strconv.Quote (and %q) leaves
// as it is: letters, marks, numbers, punctuation and symbols, and the ASCII
// space, as Unicode 15.0 (Go 1.21 to 1.25, which the runner is built with)
// assigns them. Other spaces, control, format, private-use and unassigned
// code points are not printable.
bool GoIsPrint(uint32_t rune);

// Go's strconv.Quote (and %q): a double-quoted string, `"` and `\` escaped,
// control characters as \a \b \f \n \r \t \v or \xNN, each byte that is not
// part of valid UTF-8 as \xNN; a character GoIsPrint refuses as \uNNNN (or
// \UNNNNNNNN past U+FFFF), every other one kept as it is.
std::string GoQuote(std::string_view text);

}  // namespace gdt::ci

#endif  // GDT_CI_GO_QUOTE_H_
