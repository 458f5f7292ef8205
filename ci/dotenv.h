#ifndef GDT_CI_DOTENV_H_
#define GDT_CI_DOTENV_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace gdt::ci {

// GitLab's defaults for an `artifacts:reports:dotenv` report (instance
// limits an administrator may change): the report is smaller than
// kDotenvMaxBytes and sets at most kDotenvMaxVariables variables.
inline constexpr int64_t kDotenvMaxBytes = 5 * 1024;
inline constexpr size_t kDotenvMaxVariables = 20;

// Reads the files of one job's dotenv report (`files`, their contents, in
// the order the runner found them) as GitLab does when the runner uploads
// it, and returns its variables in first-seen order, a later value of a
// key replacing the earlier one. GitLab's rules: every line is KEY=VALUE,
// split at the first '='; key and value lose leading and trailing white
// space (a "\r\n" ending too); quotes, `export`, `#` and `\` are kept as
// they are; an empty line, a comment or a line without '=' is refused, as
// is a key that is empty, longer than 255 bytes or has characters outside
// [A-Za-z0-9_]. A leading UTF-8 byte order mark is dropped. Errors
// (InvalidArgument, one line; checked in GitLab's order): the files
// together are kDotenvMaxBytes or larger; a line is not KEY=VALUE (naming
// the file and line); more than kDotenvMaxVariables distinct keys; a bad
// key (naming it). `names` name the files in messages.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseDotenv(
    const std::vector<std::string>& names,
    const std::vector<std::string>& files);

// Where run-local's emulated runner puts job `job_id`'s dotenv report in
// the artifact store `store` (beside the job's archive, which later jobs
// download: a report is not one of its files): <store>/<job id>.dotenv/,
// holding the files as 1, 2, ... and their paths, one a line, in `paths`.
std::string DotenvReportDir(const std::string& store, int64_t job_id);

// Reads the report in `dir` (DotenvReportDir) and calls ParseDotenv on it;
// no directory: no variables. The job's own account wrote the report, and
// the reader (run-local) may be a more privileged one: `dir` and its files
// are opened without following links or blocking, and only regular files
// of one link are read (ReadPlainFile); anything else there is an error
// (FailedPrecondition) naming it, as is a report of more than
// kDotenvMaxBytes files. Reading stops at kDotenvMaxBytes, GitLab's limit
// (InvalidArgument).
absl::StatusOr<std::vector<std::pair<std::string, std::string>>>
ReadDotenvReport(const std::string& dir);

// Removes the report in `dir` without following links: its files, then the
// directory itself (a link in its place is removed as a link); whatever
// else the job put there (a directory, say) stays, and so does `dir` then.
void DiscardDotenvReport(const std::string& dir);

}  // namespace gdt::ci

#endif  // GDT_CI_DOTENV_H_
