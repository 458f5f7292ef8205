#ifndef GDT_CI_CACHE_ARCHIVE_H_
#define GDT_CI_CACHE_ARCHIVE_H_

// The two helper commands gitlab-runner's cache stages call (`gitlab-runner
// cache-archiver` and `cache-extractor`), for a runner without a shared
// cache server: the cache is a zip in the runner's cache directory. `gdt-ci
// run-local` writes its cache stages' scripts to call `gdt-ci
// cache-archiver` and `gdt-ci cache-extractor` the same way
// (docs/gitlab-runner-protocol.md).

#include <ostream>
#include <string>
#include <vector>

namespace gdt::ci {

struct CacheArchiverArgs {
  std::string file;                // --file: the zip to write.
  std::string alternate_file;      // --alternate-file: the other naming's zip.
  std::vector<std::string> paths;  // --path, in order.
  bool untracked = false;          // --untracked.
};

// Archives what `args` names below the current directory (the project
// directory) into `args.file`, as the runner's helper does: each path a
// pattern (`**` any number of directories, `*`, `?`, `[...]` within one),
// matched without following links, a directory with everything below it;
// `untracked` adds the files `git ls-files -o` lists. Regular files,
// directories (empty ones too) and symbolic links (as links) go into the
// zip; anything else is left out with a warning. The archive is left as it
// is when no entry is newer than it.
// Prints the helper's lines (warnings as "WARNING: ...", a fatal error as
// "FATAL: ...") to `out`; returns the exit code (0, or 1 after a fatal
// error).
int RunCacheArchiver(const CacheArchiverArgs& args, std::ostream& out);

// Extracts the zip `file` into the current directory, as the runner's
// helper does: a missing file is the warning "Cache file does not exist"
// and exit code 1; an unreadable or unsafe one (an entry outside the
// directory) a fatal error. Link entries become links; nothing is written
// through a link that is in the way (a job's or an earlier entry's): it is
// replaced. Returns the exit code.
int RunCacheExtractor(const std::string& file, std::ostream& out);

}  // namespace gdt::ci

#endif  // GDT_CI_CACHE_ARCHIVE_H_
