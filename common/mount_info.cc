#include "common/mount_info.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace gdt {
namespace {

// The kernel writes a space, tab, newline and backslash in a path as \040,
// \011, \012 and \134.
std::string Unescape(absl::string_view field) {
  std::string out;
  out.reserve(field.size());
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size() && field[i + 1] >= '0' &&
        field[i + 1] <= '3' && field[i + 2] >= '0' && field[i + 2] <= '7' &&
        field[i + 3] >= '0' && field[i + 3] <= '7') {
      out.push_back(static_cast<char>((field[i + 1] - '0') * 64 +
                                      (field[i + 2] - '0') * 8 +
                                      (field[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(field[i]);
    }
  }
  return out;
}

}  // namespace

std::vector<MountInfo> ParseMountInfo(std::string_view text) {
  std::vector<MountInfo> mounts;
  for (absl::string_view line :
       absl::StrSplit(absl::string_view(text.data(), text.size()), '\n')) {
    // id parent major:minor root mount-point options [optional...] -
    // type source super-options
    const std::vector<absl::string_view> fields = absl::StrSplit(line, ' ');
    size_t dash = 6;
    while (dash < fields.size() && fields[dash] != "-") ++dash;
    if (fields.size() < 7 || dash + 1 >= fields.size()) continue;
    MountInfo mount{Unescape(fields[3]), Unescape(fields[4]),
                    Unescape(fields[dash + 1]), "", ""};
    if (dash + 2 < fields.size()) mount.source = Unescape(fields[dash + 2]);
    if (dash + 3 < fields.size()) {
      mount.super_options = Unescape(fields[dash + 3]);
    }
    mounts.push_back(std::move(mount));
  }
  return mounts;
}

std::vector<MountInfo> ReadMountInfo() {
  std::ifstream in("/proc/self/mountinfo");
  std::ostringstream text;
  text << in.rdbuf();
  return ParseMountInfo(text.str());
}

}  // namespace gdt
