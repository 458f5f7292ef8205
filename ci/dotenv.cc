#include "ci/dotenv.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file.h"

namespace gdt::ci {
namespace {

// Ruby's String#strip: NUL and ASCII white space at both ends.
std::string Strip(std::string_view text) {
  const auto space = [](char c) {
    return c == '\0' || c == ' ' || c == '\t' || c == '\n' || c == '\v' ||
           c == '\f' || c == '\r';
  };
  size_t begin = 0;
  size_t end = text.size();
  while (begin < end && space(text[begin])) ++begin;
  while (end > begin && space(text[end - 1])) --end;
  return std::string(text.substr(begin, end - begin));
}

bool GoodKey(const std::string& key) {
  if (key.empty() || key.size() > 255) return false;
  for (char c : key) {
    const bool good = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                      (c >= '0' && c <= '9') || c == '_';
    if (!good) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseDotenv(
    const std::vector<std::string>& names,
    const std::vector<std::string>& files) {
  int64_t total = 0;
  for (const std::string& file : files) {
    total += static_cast<int64_t>(file.size());
  }
  if (total >= kDotenvMaxBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the dotenv report is ", total, " bytes; GitLab takes ",
                     "less than ", kDotenvMaxBytes));
  }
  std::vector<std::pair<std::string, std::string>> variables;
  std::map<std::string, size_t> index;
  for (size_t f = 0; f < files.size(); ++f) {
    std::string_view text = files[f];
    if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);
    const std::string name = f < names.size() ? names[f] : "dotenv";
    size_t line_number = 0;
    while (!text.empty()) {
      ++line_number;
      const size_t nl = text.find('\n');
      const std::string_view line = text.substr(0, nl);
      text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
      const size_t eq = line.find('=');
      if (eq == std::string_view::npos) {
        return absl::InvalidArgumentError(absl::StrCat(
            name, ":", line_number,
            ": not KEY=VALUE (GitLab takes no empty lines or comments)"));
      }
      std::string key = Strip(line.substr(0, eq));
      std::string value = Strip(line.substr(eq + 1));
      const auto [it, added] = index.emplace(key, variables.size());
      if (added) {
        variables.emplace_back(std::move(key), std::move(value));
      } else {
        variables[it->second].second = std::move(value);
      }
    }
  }
  if (variables.size() > kDotenvMaxVariables) {
    return absl::InvalidArgumentError(
        absl::StrCat("the dotenv report sets ", variables.size(),
                     " variables; GitLab takes at most ", kDotenvMaxVariables));
  }
  for (const auto& [key, value] : variables) {
    if (!GoodKey(key)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dotenv variable name '", key,
          "' is not 1 to 255 letters, digits and '_' (GitLab takes no ",
          "`export`, quotes or spaces in names)"));
    }
  }
  return variables;
}

std::string DotenvReportDir(const std::string& store, int64_t job_id) {
  return absl::StrCat(store, "/", job_id, ".dotenv");
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>>
ReadDotenvReport(const std::string& dir) {
  const int fd =
      open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT) {
      return std::vector<std::pair<std::string, std::string>>{};
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot read the dotenv report ", dir, ": ",
        e == ELOOP || e == ENOTDIR
            ? "it is not a directory (a symbolic link is not followed)"
            : std::strerror(e)));
  }
  const auto closer = [](const int* f) { close(*f); };
  const std::unique_ptr<const int, decltype(closer)> closed(&fd, closer);
  // The names of the files in messages; the upload writes one a line.
  std::vector<std::string> names;
  if (absl::StatusOr<std::string> paths =
          ReadPlainFile("paths", 64 * kDotenvMaxBytes, fd);
      paths.ok()) {
    names = absl::StrSplit(*paths, '\n', absl::SkipEmpty());
  }
  std::vector<std::string> files;
  size_t total = 0;
  for (size_t n = 1;; ++n) {
    const std::string name = absl::StrCat(n);
    absl::StatusOr<std::string> text = ReadPlainFile(name, kDotenvMaxBytes, fd);
    if (absl::IsNotFound(text.status())) break;
    if (absl::IsInvalidArgument(text.status())) {
      total = kDotenvMaxBytes;
    } else if (!text.ok()) {
      return absl::Status(
          text.status().code(),
          absl::StrCat("dotenv report ", dir, ": ", text.status().message()));
    } else {
      total += text->size();
    }
    if (total >= static_cast<size_t>(kDotenvMaxBytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat("the dotenv report is at least ", total,
                       " bytes; GitLab takes less than ", kDotenvMaxBytes));
    }
    if (n > static_cast<size_t>(kDotenvMaxBytes)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "dotenv report ", dir, " has more than ", kDotenvMaxBytes, " files"));
    }
    files.push_back(*std::move(text));
  }
  return ParseDotenv(names, files);
}

void DiscardDotenvReport(const std::string& dir) {
  const int fd =
      open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    // A link (or a file) in its place goes as itself.
    if (errno == ELOOP || errno == ENOTDIR) unlink(dir.c_str());
    return;
  }
  std::vector<std::string> entries;
  if (DIR* listing = fdopendir(dup(fd)); listing != nullptr) {
    while (const dirent* entry = readdir(listing)) {
      const std::string name = entry->d_name;
      if (name != "." && name != "..") entries.push_back(name);
    }
    closedir(listing);
  }
  // unlinkat without AT_REMOVEDIR removes a link as a link and refuses a
  // directory: nothing outside `dir` is touched.
  for (const std::string& name : entries) unlinkat(fd, name.c_str(), 0);
  close(fd);
  rmdir(dir.c_str());
}

}  // namespace gdt::ci
