#ifndef GDT_COMMON_FILE_H_
#define GDT_COMMON_FILE_H_

#include <string>

#include "absl/status/statusor.h"

namespace gdt {

// Returns the whole contents of the file at `path`. Errors, each with the
// message "cannot read <path>: <reason>": NotFound when it does not exist,
// PermissionDenied when it may not be read, Unavailable otherwise.
absl::StatusOr<std::string> ReadTextFile(const std::string& path);

}  // namespace gdt

#endif  // GDT_COMMON_FILE_H_
