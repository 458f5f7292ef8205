#ifndef GDT_COMMON_FILE_H_
#define GDT_COMMON_FILE_H_

#include <sys/types.h>

#include <limits>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/env.h"

namespace gdt {

// Returns the whole contents of the file at `path`. Errors, each with the
// message "cannot read <path>: <reason>": NotFound when it does not exist,
// PermissionDenied when it may not be read, InvalidArgument for a directory
// or more than `max_bytes` (say /dev/zero), Unavailable otherwise.
absl::StatusOr<std::string> ReadTextFile(
    const std::string& path,
    size_t max_bytes = std::numeric_limits<size_t>::max());

// Replaces the file at `path` with `contents` so that a reader (or a crash)
// sees either the old file whole or the new one whole, never a part: writes
// a temporary file in the same directory, fsyncs it, renames it over `path`
// and fsyncs the directory. `mode` is the new file's permission bits (before
// the umask). On an error the temporary file is removed and the old file is
// untouched (unless only the final directory sync failed). Errors read
// "cannot write <path>: <reason>" and keep the code of the failed step
// (NotFound, PermissionDenied, Unavailable).
absl::Status WriteFileAtomically(const std::string& path,
                                 std::string_view contents, mode_t mode = 0644,
                                 Env* env = Env::Default());

}  // namespace gdt

#endif  // GDT_COMMON_FILE_H_
