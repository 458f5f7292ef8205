#include "common/terminal_text.h"

#include <cstdint>

#include "absl/strings/str_format.h"

namespace gdt {
namespace {

// The length of the UTF-8 character at the start of `text` and its code
// point, or 0 when the bytes there are not one (overlong forms, surrogates
// and values past U+10FFFF included).
size_t DecodeUtf8(absl::string_view text, uint32_t* code_point) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t lead = byte(0);
  if (lead < 0x80) {
    *code_point = lead;
    return 1;
  }
  size_t length = 0;
  uint32_t value = 0;
  uint32_t smallest = 0;
  if ((lead & 0xE0) == 0xC0) {
    length = 2;
    value = lead & 0x1F;
    smallest = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3;
    value = lead & 0x0F;
    smallest = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4;
    value = lead & 0x07;
    smallest = 0x10000;
  } else {
    return 0;
  }
  if (text.size() < length) return 0;
  for (size_t i = 1; i < length; ++i) {
    if ((byte(i) & 0xC0) != 0x80) return 0;
    value = (value << 6) | (byte(i) & 0x3F);
  }
  if (value < smallest || value > 0x10FFFF ||
      (value >= 0xD800 && value <= 0xDFFF)) {
    return 0;
  }
  *code_point = value;
  return length;
}

// Characters a terminal acts on or that break or reorder a line.
bool Steers(uint32_t c) {
  return c < 0x20 || c == 0x7F || (c >= 0x80 && c <= 0x9F) || c == 0x2028 ||
         c == 0x2029 || c == 0x200E || c == 0x200F ||
         (c >= 0x202A && c <= 0x202E) || (c >= 0x2066 && c <= 0x2069);
}

}  // namespace

std::string TerminalSafe(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    uint32_t c = 0;
    const size_t length = DecodeUtf8(text.substr(i), &c);
    if (length == 0) {
      absl::StrAppendFormat(
          &out, "\\x%02x",
          static_cast<unsigned>(static_cast<uint8_t>(text[i])));
      ++i;
      continue;
    }
    if (!Steers(c)) {
      out.append(text.data() + i, length);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x80) {
      absl::StrAppendFormat(&out, "\\x%02x", c);
    } else {
      absl::StrAppendFormat(&out, "\\u%04x", c);
    }
    i += length;
  }
  return out;
}

size_t DisplayWidth(absl::string_view text) {
  size_t width = 0;
  size_t i = 0;
  while (i < text.size()) {
    uint32_t c = 0;
    const size_t length = DecodeUtf8(text.substr(i), &c);
    i += length == 0 ? 1 : length;
    ++width;
  }
  return width;
}

std::string TruncateDisplay(absl::string_view text, size_t width) {
  if (DisplayWidth(text) <= width) return std::string(text);
  const size_t keep = width <= 3 ? width : width - 3;
  size_t i = 0;
  for (size_t shown = 0; shown < keep && i < text.size(); ++shown) {
    uint32_t c = 0;
    const size_t length = DecodeUtf8(text.substr(i), &c);
    i += length == 0 ? 1 : length;
  }
  std::string out(text.data(), i);
  if (width > 3) out += "...";
  return out;
}

bool IsValidUtf8(absl::string_view text) {
  return FirstNonUtf8(text) == absl::string_view::npos;
}

size_t FirstNonUtf8(absl::string_view text) {
  for (size_t i = 0; i < text.size();) {
    uint32_t c = 0;
    const size_t length = DecodeUtf8(text.substr(i), &c);
    if (length == 0) return i;
    i += length;
  }
  return absl::string_view::npos;
}

}  // namespace gdt
