#include "ci/cache_archive.h"

#include <fnmatch.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <string_view>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/subprocess.h"
#include "common/zip_archive.h"

namespace gdt::ci {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kNoUploadUrl =
    "No URL provided, cache will not be uploaded to shared cache server. "
    "Cache will be stored only locally.";
constexpr std::string_view kNoDownloadUrl =
    "No URL provided, cache will not be downloaded from shared cache server. "
    "Instead a local version of cache will be extracted.";

struct Entry {
  // A regular file, a directory or a symbolic link: what the runner's
  // archiver puts in the zip; anything else is left out with a warning.
  bool archived = false;
  timespec mtime{};
};

bool Newer(const timespec& a, const timespec& b) {
  return a.tv_sec != b.tv_sec ? a.tv_sec > b.tv_sec : a.tv_nsec > b.tv_nsec;
}

std::vector<std::string> Parts(const std::string& path) {
  return absl::StrSplit(path, '/', absl::SkipEmpty());
}

// doublestar's matching: "**" is any number of whole parts; every other part
// a shell pattern of its own.
bool MatchParts(const std::vector<std::string>& pattern, size_t p,
                const std::vector<std::string>& path, size_t s) {
  if (p == pattern.size()) return s == path.size();
  if (pattern[p] == "**") {
    for (size_t k = s; k <= path.size(); ++k) {
      if (MatchParts(pattern, p + 1, path, k)) return true;
    }
    return false;
  }
  return s < path.size() &&
         fnmatch(pattern[p].c_str(), path[s].c_str(), 0) == 0 &&
         MatchParts(pattern, p + 1, path, s + 1);
}

bool HasGlob(std::string_view text) {
  return text.find_first_of("*?[{") != std::string_view::npos;
}

class Archiver {
 public:
  explicit Archiver(std::ostream& out) : out_(out) {}

  // Adds `rel` (lstat'ed, never followed) and, for a directory, all below
  // it; the number of entries added.
  int Walk(const std::string& rel) {
    int found = 0;
    if (Add(rel)) ++found;
    std::error_code error;
    if (!fs::is_directory(fs::symlink_status(rel, error))) return found;
    for (fs::recursive_directory_iterator
             it(rel, fs::directory_options::skip_permission_denied, error),
         end;
         !error && it != end; it.increment(error)) {
      if (Add(it->path().lexically_normal().string())) ++found;
    }
    if (error)
      out_ << "WARNING: Walking " << rel << " " << error.message() << "\n";
    return found;
  }

  void Path(const std::string& path) {
    if (path.empty()) {
      out_ << "WARNING: No matching files. Path is empty.\n";
      return;
    }
    std::string rel = fs::path(path).lexically_normal().string();
    if (fs::path(path).is_absolute()) {
      std::error_code error;
      rel = fs::path(path)
                .lexically_normal()
                .lexically_relative(fs::current_path(error))
                .string();
    }
    while (rel.size() > 1 && rel.back() == '/') rel.pop_back();
    if (rel.empty() || rel == ".." || absl::StartsWith(rel, "../")) {
      out_ << "WARNING: processPath: artifact path is not a subpath of "
              "project directory: "
           << path << "\n";
      return;
    }
    int found = 0;
    if (!HasGlob(rel)) {
      struct stat st {};
      if (lstat(rel.c_str(), &st) == 0) found = Walk(rel);
    } else {
      // Walk from the part before the first pattern, keep what matches.
      const std::vector<std::string> pattern = Parts(rel);
      std::string base;
      for (const std::string& part : pattern) {
        if (HasGlob(part)) break;
        base = base.empty() ? part : absl::StrCat(base, "/", part);
      }
      std::vector<std::string> matches;
      std::error_code error;
      const std::string root = base.empty() ? "." : base;
      if (fs::is_directory(fs::symlink_status(root, error))) {
        for (fs::recursive_directory_iterator
                 it(root, fs::directory_options::skip_permission_denied, error),
             end;
             !error && it != end; it.increment(error)) {
          const std::string candidate = it->path().lexically_normal().string();
          if (MatchParts(pattern, 0, Parts(candidate), 0)) {
            matches.push_back(candidate);
          }
        }
      }
      for (const std::string& match : matches) found += Walk(match);
    }
    char wd[4096] = {};
    if (getcwd(wd, sizeof(wd)) == nullptr) wd[0] = '\0';
    if (found == 0) {
      out_ << "WARNING: " << path
           << ": no matching files. Ensure that the artifact path is "
              "relative to the working directory ("
           << wd << ")\n";
    } else {
      out_ << path << ": found " << found
           << " matching artifact files and directories\n";
    }
  }

  void Untracked() {
    std::string output;
    const absl::StatusOr<ExitStatus> status = RunCommand(
        {"git", "ls-files", "-o", "-z"}, std::chrono::minutes(5), &output);
    if (!status.ok() || !status->success()) {
      out_ << "WARNING: untracked: "
           << (status.ok() ? "git ls-files failed"
                           : std::string(status.status().message()))
           << "\n";
      return;
    }
    int found = 0;
    for (absl::string_view name : absl::StrSplit(output, '\0')) {
      if (name.empty()) continue;
      if (Add(std::string(name))) ++found;
    }
    if (found == 0) {
      out_ << "WARNING: untracked: no files\n";
    } else {
      out_ << "untracked: found " << found << " files\n";
    }
  }

  const std::map<std::string, Entry>& files() const { return files_; }

 private:
  bool Add(const std::string& rel) {
    struct stat st {};
    if (lstat(rel.c_str(), &st) != 0) return false;
    files_[rel] =
        Entry{S_ISREG(st.st_mode) || S_ISDIR(st.st_mode) || S_ISLNK(st.st_mode),
              st.st_mtim};
    return true;
  }

  std::ostream& out_;
  std::map<std::string, Entry> files_;
};

// The runner's helper renames a zip kept under the other naming scheme
// (hashed or not) to the one it writes, when only that one exists.
void RenameAlternate(const CacheArchiverArgs& args, std::ostream& out) {
  if (args.alternate_file.empty() || args.alternate_file == args.file) return;
  std::error_code error;
  if (fs::exists(fs::symlink_status(args.file, error))) return;
  if (!fs::exists(fs::symlink_status(args.alternate_file, error))) return;
  fs::create_directories(fs::path(args.file).parent_path(), error);
  if (error) {
    out << "WARNING: Failed to create directory for cache file rename\n";
    return;
  }
  fs::rename(args.alternate_file, args.file, error);
  if (error) {
    out << "WARNING: Failed to rename alternate cache file to primary\n";
    return;
  }
  out << "Renamed alternate cache file to primary\n";
}

}  // namespace

int RunCacheArchiver(const CacheArchiverArgs& args, std::ostream& out) {
  if (args.file.empty()) {
    out << "FATAL: Missing --file\n";
    return 1;
  }
  RenameAlternate(args, out);
  Archiver archiver(out);
  for (const std::string& path : args.paths) archiver.Path(path);
  if (args.untracked) archiver.Untracked();
  if (archiver.files().empty()) {
    out << "WARNING: No files to cache.\n";
    return 0;
  }
  // Unchanged: no file is newer than the archive.
  struct stat archive_stat {};
  if (stat(args.file.c_str(), &archive_stat) == 0) {
    // Every entry counts, directories and links too (their own times).
    bool changed = false;
    for (const auto& [name, entry] : archiver.files()) {
      changed = changed || Newer(entry.mtime, archive_stat.st_mtim);
    }
    if (!changed) {
      if (args.alternate_file != args.file) {
        // With another naming scheme the helper makes sure the cache
        // server has the archive; there is none.
        out << "Primary cache does not exist remotely, uploading existing "
               "archive\n"
            << kNoUploadUrl << "\n";
      } else {
        out << "Archive is up to date!\n";
      }
      return 0;
    }
  } else if (errno != ENOENT) {
    out << "WARNING: stat " << args.file << ": " << std::strerror(errno)
        << "\n";
  }
  std::vector<std::string> entries;
  for (const auto& [name, entry] : archiver.files()) {
    if (name == ".") continue;  // The project directory itself.
    if (entry.archived) {
      entries.push_back(name);
    } else {
      out << "WARNING: File ignored: " << name << "\n";
    }
  }
  std::error_code error;
  fs::create_directories(fs::path(args.file).parent_path(), error);
  if (error) {
    out << "FATAL: mkdir " << fs::path(args.file).parent_path().string() << ": "
        << error.message() << "\n";
    return 1;
  }
  const std::string temp = absl::StrCat(args.file, ".", getpid(), ".tmp");
  if (absl::Status created = CreateZip(".", entries, temp); !created.ok()) {
    std::remove(temp.c_str());
    out << "FATAL: " << created.message() << "\n";
    return 1;
  }
  fs::rename(temp, args.file, error);
  if (error) {
    std::remove(temp.c_str());
    out << "FATAL: renaming: " << error.message() << "\n";
    return 1;
  }
  out << kNoUploadUrl << "\n";
  return 0;
}

int RunCacheExtractor(const std::string& file, std::ostream& out) {
  if (file.empty()) {
    out << "WARNING: Missing cache file\n";
    return 1;
  }
  out << kNoDownloadUrl << "\n";
  std::error_code error;
  if (!fs::exists(fs::symlink_status(file, error))) {
    out << "WARNING: Cache file does not exist\n";
    return 1;
  }
  // Links are kept as links, never followed: one the zip or a job made is
  // replaced by what a later entry puts in its place.
  if (absl::Status extracted = ExtractZip(file, ".", {.links = true});
      !extracted.ok()) {
    out << "FATAL: " << extracted.message() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace gdt::ci
