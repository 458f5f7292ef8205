#ifndef GDT_COMMON_FILE_H_
#define GDT_COMMON_FILE_H_

#include <fcntl.h>
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

// Reads a file that a less trusted account may have put in place (a job's
// upload, a member's own directory), for a process that may read more than
// that account could: `path` is opened relative to `dir_fd` (AT_FDCWD: as
// open(2) does) without following a symbolic link in its last component and
// without blocking (a FIFO, a device), and read only when what was opened is
// a regular file with one link (a hard link's other name may be a file only
// the reader may read) of at most `max_bytes`. Errors, each "cannot read
// <path>: <reason>": NotFound; FailedPrecondition for a symbolic link,
// anything but a regular file, or a hard link; InvalidArgument when larger
// than `max_bytes`; PermissionDenied; Unavailable otherwise.
absl::StatusOr<std::string> ReadPlainFile(const std::string& path,
                                          size_t max_bytes,
                                          int dir_fd = AT_FDCWD);

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

// Creating files in a directory another account may have written to (a job's
// project dir, a directory an archive is extracted into), the way
// gitlab-runner extracts artifacts: nothing there is written through.
// `relative` is a path beneath the directory `root` (no leading '/', no
// `..` part). Every directory on the way is opened without following a
// symbolic link; a link or another non-directory in the way of a directory is
// removed and a directory (mode 0755 before the umask) made in its place.
//
// MakeDirsBeneath makes the directories of `relative`, the last one
// included. CreateFileBeneath removes whatever non-directory is at the last
// component (a link is removed, never followed) and creates the file afresh
// (O_EXCL, O_NOFOLLOW) with `mode`; it returns the open descriptor for
// writing, which the caller closes. Errors read "cannot create
// <root>/<relative>: <reason>": InvalidArgument for a path that is absolute,
// empty or has a `..` part, or a directory at the last component of a file;
// PermissionDenied; Unavailable otherwise.
absl::Status MakeDirsBeneath(const std::string& root,
                             const std::string& relative);
absl::StatusOr<int> CreateFileBeneath(const std::string& root,
                                      const std::string& relative,
                                      mode_t mode = 0644);

// Made the same way: OpenDirBeneath makes the directories of `relative` as
// MakeDirsBeneath does and returns the last one open (O_RDONLY, to set its
// mode or times), which the caller closes. CreateSymlinkBeneath removes
// whatever non-directory is at the last component and makes a symbolic link
// there whose content is `target`, kept as it is (never followed here).
absl::StatusOr<int> OpenDirBeneath(const std::string& root,
                                   const std::string& relative);
absl::Status CreateSymlinkBeneath(const std::string& root,
                                  const std::string& relative,
                                  const std::string& target);

}  // namespace gdt

#endif  // GDT_COMMON_FILE_H_
