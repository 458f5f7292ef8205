#include "ci/include.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <system_error>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "ci/yaml_tree.h"
#include "common/file.h"

namespace gdt::ci {
namespace {

namespace fs = std::filesystem;

// The first entry `name` of a mapping (a null node when none).
YamlNode Find(const YamlNode& map, std::string_view name) {
  if (!map || !map.IsMap()) return YamlNode();
  for (const auto& entry : map) {
    if (entry.first.IsScalar() && entry.first.Scalar() == name) {
      return entry.second;
    }
  }
  return YamlNode();
}

// A wildcard include as GitLab matches it: `**` is any text, `/`
// included, `*` any text without `/`. Matching is dynamic programming over
// pattern and path, so a path costs at most |pattern| x |path| steps;
// `budget` is what all paths together may still cost.
class Glob {
 public:
  explicit Glob(std::string_view pattern) {
    // What every match starts and ends with: most paths fail these checks
    // without the dynamic programming.
    const size_t first_star = pattern.find('*');
    prefix_ = pattern.substr(0, first_star);
    if (first_star != std::string_view::npos) {
      suffix_ = pattern.substr(pattern.rfind('*') + 1);
    }
    for (size_t i = 0; i < pattern.size(); ++i) {
      if (pattern[i] != '*') {
        tokens_.push_back({kLiteral, pattern[i]});
        ++literals_;
      } else if (i + 1 < pattern.size() && pattern[i + 1] == '*') {
        tokens_.push_back({kAny, '*'});
        while (i + 1 < pattern.size() && pattern[i + 1] == '*') ++i;
      } else {
        tokens_.push_back({kSegment, '*'});
      }
    }
  }

  // nullopt when matching `path` would go past `budget`.
  std::optional<bool> Matches(std::string_view path, uint64_t* budget) {
    if (path.size() < literals_ || path.substr(0, prefix_.size()) != prefix_ ||
        path.substr(path.size() - suffix_.size()) != suffix_) {
      return false;
    }
    const uint64_t cost = (tokens_.size() + 1) * (path.size() + 1);
    if (cost > *budget) return std::nullopt;
    *budget -= cost;
    can_.assign(path.size() + 1, 0);
    can_[0] = 1;  // The first i tokens match path[0, j).
    for (const Token& token : tokens_) {
      next_.assign(path.size() + 1, 0);
      for (size_t j = 0; j <= path.size(); ++j) {
        if (token.kind == kLiteral) {
          next_[j] = j > 0 && can_[j - 1] && path[j - 1] == token.c;
        } else {
          // A star takes nothing, or one character more than for j - 1.
          next_[j] = can_[j] || (j > 0 && next_[j - 1] &&
                                 (token.kind == kAny || path[j - 1] != '/'));
        }
      }
      can_.swap(next_);
    }
    return can_[path.size()] != 0;
  }

 private:
  enum Kind { kLiteral, kSegment, kAny };
  struct Token {
    Kind kind;
    char c;
  };
  std::vector<Token> tokens_;
  size_t literals_ = 0;
  std::string_view prefix_;
  std::string_view suffix_;
  std::vector<char> can_;
  std::vector<char> next_;
};

bool HasYamlExtension(std::string_view path) {
  const auto ends = [&](std::string_view suffix) {
    return path.size() > suffix.size() &&
           path.substr(path.size() - suffix.size()) == suffix;
  };
  return ends(".yml") || ends(".yaml");
}

class IncludeReader {
 public:
  IncludeReader(const std::string& project_dir, CiIncludes* out) : out_(out) {
    std::error_code error;
    root_ = fs::canonical(project_dir.empty() ? "." : project_dir, error);
    if (error || !fs::is_directory(root_, error)) {
      Fail(absl::StrCat("project directory '", project_dir,
                        "' does not exist or is not a directory"));
    }
  }

  bool failed() const { return !out_->errors.empty(); }

  // The main file, when it is in the project: including it is a cycle.
  void StartAt(const std::string& file) {
    main_ = file;
    std::error_code error;
    const fs::path real = fs::canonical(file, error);
    if (error) return;
    const std::string rel = real.lexically_relative(root_).generic_string();
    if (rel.empty() || rel.rfind("..", 0) == 0) return;
    stack_.push_back(rel);
    seen_.insert(rel);
  }

  // The includes of `file` (its top-level `include:` is `include`), nested
  // `depth` levels below the main file.
  void Visit(const std::string& file, const YamlNode& include, int depth) {
    if (!include || include.IsNull() || failed()) return;
    std::vector<YamlNode> items;
    if (include.IsSequence()) {
      for (const YamlNode& item : include) items.push_back(item);
    } else if (include.IsScalar() || include.IsMap()) {
      items.push_back(include);
    } else {
      At(file, include, "include: must be a path, a list or a mapping");
      return;
    }
    for (const YamlNode& item : items) {
      if (failed()) return;
      std::string local;
      if (item.IsScalar()) {
        local = item.Scalar();
        if (local.rfind("http://", 0) == 0 || local.rfind("https://", 0) == 0) {
          Unread(file, item, absl::StrCat("remote '", local, "'"));
          continue;
        }
      } else if (item.IsMap()) {
        const YamlNode value = Find(item, "local");
        if (!value) {
          bool other = false;
          std::string what;
          for (const char* kind : {"project", "remote", "template", "component",
                                   "file", "artifact"}) {
            const YamlNode found = Find(item, kind);
            if (found && what.empty()) {
              what = found.IsScalar()
                         ? absl::StrCat(kind, " '", found.Scalar(), "'")
                         : std::string(kind);
            }
            other = other || found;
          }
          if (!other) {
            At(file, item,
               "include: an entry needs local, project, remote, template or "
               "component");
            return;
          }
          Unread(file, item, what);
          continue;
        }
        if (!value.IsScalar()) {
          At(file, value, "include: local must be a path");
          return;
        }
        local = value.Scalar();
      } else {
        At(file, item,
           "include: an entry must be a path or a mapping with local, "
           "project, remote, template or component");
        return;
      }
      if (local.find('$') != std::string::npos) {
        // A variable GitLab fills in from the pipeline: not known here.
        Unread(file, item, absl::StrCat("local '", local, "'"),
               "its path holds a variable, which GitLab fills in from the "
               "pipeline");
        continue;
      }
      ReadLocal(file, item, local, depth);
    }
  }

 private:
  void Fail(std::string message) {
    out_->errors.push_back(CiIncludes::Problem{"", 0, 0, std::move(message)});
  }
  // An include gdt does not read (`why`): what it may bring stays unseen.
  void Unread(const std::string& file, const YamlNode& node,
              const std::string& what,
              std::string_view why =
                  "gdt reads only local files of this "
                  "project") {
    out_->unseen = true;
    const YamlMark mark = node.Mark();
    out_->unread.push_back(CiIncludes::Problem{
        file == main_ ? "" : file, mark.line + 1, mark.column + 1,
        absl::StrCat("include: ", what, " is not read (", std::string(why),
                     "), so the jobs, templates and default: it may bring "
                     "are unseen")});
  }
  void At(const std::string& file, const YamlNode& node,
          std::string_view message) {
    const YamlMark mark = node.Mark();
    out_->errors.push_back(CiIncludes::Problem{file == main_ ? "" : file,
                                               mark.line + 1, mark.column + 1,
                                               std::string(message)});
  }

  // Project files by relative path, for wildcards; walked once.
  const std::vector<std::string>* ProjectFiles(const std::string& file,
                                               const YamlNode& where) {
    if (files_.has_value()) return &*files_;
    std::vector<std::string> found;
    std::error_code error;
    fs::recursive_directory_iterator it(
        root_, fs::directory_options::skip_permission_denied, error);
    size_t entries = 0;
    for (; !error && it != fs::recursive_directory_iterator();
         it.increment(error)) {
      if (++entries > kMaxGlobEntries) {
        At(file, where,
           absl::StrCat("include: the project has more than ", kMaxGlobEntries,
                        " files and directories, too many to match a "
                        "wildcard against; name the files"));
        return nullptr;
      }
      // Git's own files, and run-local's work dirs (logs, artifacts).
      if (const fs::path name = it->path().filename();
          name == ".git" || name == ".gdt-run") {
        it.disable_recursion_pending();
        continue;
      }
      std::error_code type_error;
      if (it->is_regular_file(type_error)) {
        found.push_back(it->path().lexically_relative(root_).generic_string());
      }
    }
    std::sort(found.begin(), found.end());
    files_ = std::move(found);
    return &*files_;
  }

  void ReadLocal(const std::string& file, const YamlNode& where,
                 std::string local, int depth) {
    // GitLab reads a leading `/` as the project's root.
    while (!local.empty() && local[0] == '/') local.erase(0, 1);
    const std::string shown = local;
    if (local.empty()) {
      At(file, where, "include: local needs a file name");
      return;
    }
    for (const auto& part : fs::path(local)) {
      if (part == "..") {
        At(file, where,
           absl::StrCat("include: '", shown,
                        "' leads outside the project directory (..); local "
                        "includes are paths in the project"));
        return;
      }
    }
    std::vector<std::string> paths;
    if (local.find('*') != std::string::npos) {
      const std::vector<std::string>* all = ProjectFiles(file, where);
      if (all == nullptr) return;
      Glob glob(local);
      for (const std::string& path : *all) {
        const std::optional<bool> match = glob.Matches(path, &glob_budget_);
        if (!match.has_value()) {
          At(file, where,
             absl::StrCat("include: matching '", shown,
                          "' against the project's files takes too long (a "
                          "long pattern in a large project); name the files "
                          "or use a shorter pattern"));
          return;
        }
        if (*match) paths.push_back(path);
      }
      if (paths.empty()) {
        At(file, where,
           absl::StrCat("include: no file in the project matches '", shown,
                        "'"));
        return;
      }
    } else {
      paths.push_back(fs::path(local).lexically_normal().generic_string());
    }
    for (const std::string& path : paths) {
      if (failed()) return;
      ReadOne(file, where, path, depth);
    }
  }

  void ReadOne(const std::string& file, const YamlNode& where,
               const std::string& path, int depth) {
    if (!HasYamlExtension(path)) {
      At(file, where,
         absl::StrCat("include: '", path,
                      "' is not a .yml or .yaml file, which GitLab "
                      "refuses to include"));
      return;
    }
    std::error_code error;
    const fs::path full = root_ / path;
    if (!fs::exists(fs::symlink_status(full, error))) {
      At(file, where,
         absl::StrCat("include: '", path, "' does not exist in the project ",
                      root_.string()));
      return;
    }
    const fs::path real = fs::canonical(full, error);
    if (error) {
      At(file, where,
         absl::StrCat("include: '", path,
                      "' cannot be followed (a broken link?)"));
      return;
    }
    const std::string rel = real.lexically_relative(root_).generic_string();
    if (rel.empty() || rel == "." || rel.rfind("..", 0) == 0) {
      At(file, where,
         absl::StrCat("include: '", path,
                      "' leads outside the project directory (a symbolic "
                      "link to ",
                      real.string(), ")"));
      return;
    }
    if (fs::is_directory(real, error)) {
      At(file, where,
         absl::StrCat("include: '", path,
                      "' is a directory; include its files (e.g. '", path,
                      "/*.yml')"));
      return;
    }
    if (std::find(stack_.begin(), stack_.end(), rel) != stack_.end()) {
      At(file, where,
         absl::StrCat("include: '", path, "' includes itself (through ", file,
                      "); GitLab refuses an include cycle"));
      return;
    }
    if (!seen_.insert(rel).second) return;  // Read once, as GitLab does.
    if (++count_ > kMaxIncludes) {
      At(file, where,
         absl::StrCat("include: more than ", kMaxIncludes,
                      " included files, more than GitLab accepts"));
      return;
    }
    if (depth > kMaxIncludeNesting) {
      At(file, where,
         absl::StrCat("include: includes nest more than ", kMaxIncludeNesting,
                      " levels deep, more than GitLab accepts"));
      return;
    }
    absl::StatusOr<std::string> text =
        ReadTextFile(real.string(), kMaxIncludedBytes - bytes_);
    if (!text.ok()) {
      At(file, where,
         absl::StrCat("include: '", path, "': ", text.status().message(),
                      bytes_ > 0 ? " (all included files together may "
                                   "hold at most 64 MiB)"
                                 : ""));
      return;
    }
    bytes_ += text->size();
    YamlError error_at;
    const std::unique_ptr<YamlTree> tree = YamlTree::Parse(*text, &error_at);
    if (!error_at.message.empty()) {
      out_->errors.push_back(CiIncludes::Problem{
          path, error_at.mark.line + 1, error_at.mark.column + 1,
          absl::StrCat("YAML syntax error: ", error_at.message)});
      return;
    }
    YamlNode include;
    for (const YamlNode& root : tree->documents()) {
      if (const YamlNode i = Find(root, "include")) include = i;
    }
    stack_.push_back(rel);
    Visit(path, include, depth + 1);
    stack_.pop_back();
    // Its own includes first, then the file over them.
    out_->files.push_back(CiIncludedFile{path, *std::move(text)});
  }

  CiIncludes* out_;
  std::string main_;  // The main file, as named.
  fs::path root_;
  std::optional<std::vector<std::string>> files_;
  std::vector<std::string> stack_;
  std::set<std::string> seen_;
  size_t bytes_ = 0;
  size_t count_ = 0;
  // Steps all wildcards together may still take.
  uint64_t glob_budget_ = kMaxGlobSteps;
};

}  // namespace

CiIncludes ReadLocalIncludes(std::string_view file, std::string_view text,
                             const std::string& project_dir) {
  CiIncludes result;
  YamlError error;
  const std::unique_ptr<YamlTree> tree = YamlTree::Parse(text, &error);
  if (!error.message.empty()) return result;  // Reported by lint/expand.
  YamlNode include;
  for (const YamlNode& root : tree->documents()) {
    if (const YamlNode i = Find(root, "include")) include = i;
  }
  if (!include) return result;
  IncludeReader reader(project_dir, &result);
  if (reader.failed()) return result;
  reader.StartAt(std::string(file));
  reader.Visit(std::string(file), include, 1);
  return result;
}

}  // namespace gdt::ci
