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

// Writes a zip at `zip` holding the entries `relative_paths` (relative to
// `root`, never followed) under those names, with their permission bits and
// modification times: a regular file with its contents, a directory as
// "name/", a symbolic link with its target as its contents (as
// gitlab-runner's archiver writes them). InvalidArgument for anything else
// (a FIFO, a socket, a device).
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
  // As gitlab-runner's cache extractor: a symbolic link entry becomes a
  // link (its target kept as it is; else the zip is refused), and
  // directories get their entries' permission bits and modification times
  // once everything is extracted.
  bool links = false;
};

// Extracts every regular file and directory (and, with `limits.links`,
// symbolic link) of the zip `zip` that `limits.select` accepts below `dest`
// (created if needed), files with the permission bits and modification time
// the zip gives them. Nothing is written through a link already in `dest`
// or made by an earlier entry: it is replaced. DataLoss naming the zip for
// a truncated or corrupt archive, or one whose extracted files would hold
// more than `limits.max_bytes`; InvalidArgument for an extracted entry that
// is absolute, contains "..", or is a link (without `limits.links`) or
// another kind of file. What was extracted before an error stays in
// `dest`.
absl::Status ExtractZip(const std::string& zip, const std::string& dest,
                        const ExtractLimits& limits = {});

}  // namespace gdt

#endif  // GDT_COMMON_ZIP_ARCHIVE_H_
