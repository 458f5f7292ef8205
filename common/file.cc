#include "common/file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace gdt {

absl::StatusOr<std::string> ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error = errno;
    const std::string message =
        absl::StrCat("cannot read ", path, ": ", std::strerror(error));
    if (error == ENOENT) return absl::NotFoundError(message);
    if (error == EACCES) return absl::PermissionDeniedError(message);
    return absl::UnavailableError(message);
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace gdt
