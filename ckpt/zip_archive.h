#ifndef GDT_GITLAB_ZIP_ARCHIVE_H_
#define GDT_GITLAB_ZIP_ARCHIVE_H_

// Zip files through libarchive, in the shape of GitLab job artifacts.

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace gdt::ckpt {

// Writes a zip at `zip` holding the files `relative_paths` (regular files,
// relative to `root`) under those names.
absl::Status CreateZip(const std::string& root,
                       const std::vector<std::string>& relative_paths,
                       const std::string& zip);

// Extracts every regular file and directory of the zip `zip` below `dest`
// (created if needed). DataLoss naming the zip for a truncated or corrupt
// archive; InvalidArgument for an entry that is absolute, contains "..", or
// is a link. What was extracted before an error stays in `dest`.
absl::Status ExtractZip(const std::string& zip, const std::string& dest);

}  // namespace gdt::ckpt

#endif  // GDT_GITLAB_ZIP_ARCHIVE_H_
