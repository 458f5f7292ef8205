#ifndef GDT_COMMON_ZIP_ARCHIVE_H_
#define GDT_COMMON_ZIP_ARCHIVE_H_

// Zip files through libarchive, in the shape of GitLab job artifacts.

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace gdt {

// Writes a zip at `zip` holding the files `relative_paths` (regular files,
// relative to `root`) under those names, with their permission bits and
// modification times.
absl::Status CreateZip(const std::string& root,
                       const std::vector<std::string>& relative_paths,
                       const std::string& zip);

// What ExtractZip takes of a zip. The zip comes from another job's
// artifacts: what it expands to is bounded, not only its own size (a few
// kilobytes of zeros deflate from gigabytes).
struct ExtractLimits {
  // Only entries whose name this accepts are extracted (every one when
  // unset); the others are skipped whatever they are.
  std::function<bool(const std::string& name)> select;
  // The most bytes the extracted files may hold together.
  uint64_t max_bytes = std::numeric_limits<uint64_t>::max();
};

// Extracts every regular file and directory of the zip `zip` that
// `limits.select` accepts below `dest` (created if needed), files with the
// permission bits and modification time the zip gives them. DataLoss naming
// the zip for a truncated or corrupt archive, or one whose extracted files
// would hold more than `limits.max_bytes`; InvalidArgument for an extracted
// entry that is absolute, contains "..", or is a link. What was extracted
// before an error stays in `dest`.
absl::Status ExtractZip(const std::string& zip, const std::string& dest,
                        const ExtractLimits& limits = {});

}  // namespace gdt

#endif  // GDT_COMMON_ZIP_ARCHIVE_H_
