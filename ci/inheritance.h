#ifndef GDT_CI_INHERITANCE_H_
#define GDT_CI_INHERITANCE_H_

// GitLab's job-configuration inheritance, as far as one file shows it, for
// gdt-ci lint and expand: what configuration a job really runs with, so that
// expand adds gdt's entries to it instead of replacing inherited ones.
//
// The rules, in GitLab's order:
//  1. YAML merge keys as Ruby's YAML reader applies them: `<<: *a` copies
//     a's entries over the ones written before it, later entries override
//     them; in `<<: [*a, *b]` the earlier mapping wins.
//  2. `extends:` (a name or a list): each parent's own configuration (its
//     extends resolved first, at most 11 levels) is deep-merged in list
//     order, then the job's: mappings merge key by key, everything else
//     (lists included) is replaced.
//  3. `default:` fills each key the job still lacks, unless the job says
//     `inherit: {default: false}` or lists the keys it inherits.
//  4. `!reference [job, key, ...]` is replaced by that entry of the named
//     job (after its extends); inside a list, a referenced list is spliced
//     in.
// The files a CI file includes from its project (ci/include.h) are read
// with it. An include gdt does not read (project, remote, template,
// component) may bring `default:` entries and parents from elsewhere; the
// model says so (Effective::unknown) instead of guessing.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "ci/yaml_tree.h"
#include "nlohmann/json.hpp"

namespace gdt::ci {

using CiValue = nlohmann::ordered_json;

// `node` as GitLab reads it: merge keys applied, plain scalars typed (null,
// booleans, integers, floats, else strings), quoted scalars strings, and
// `!reference [...]` kept as {"!reference": [...]}.
CiValue ToCiValue(const YamlNode& node);

// The integer Ruby's YAML reader (YAML 1.1, as GitLab reads CI files) makes
// of plain scalar `text`: decimal, octal with a leading zero (010 is 8),
// 0x hexadecimal, 0b binary, `_` or `,` between digits (1_000); nullopt
// when it is no integer or does not fit in 64 bits.
std::optional<int64_t> Yaml11Integer(std::string_view text);

// A scalar as GitLab sends it to a job (numbers and booleans become their
// text). False for null, lists and maps.
bool CiScalarText(const CiValue& value, std::string* out);

// The names a `stages:` value lists, nested lists flattened as GitLab
// flattens them; nullopt when it is not a list of names gdt can read (a
// `!reference` left unresolved, a value filled in later, another type).
std::optional<std::vector<std::string>> CiStageNames(const CiValue& listed);

// The top-level entries of a file's documents (a later document's, or a
// later duplicate's, win), read as GitLab reads them when asked for.
class CiConfigModel {
 public:
  explicit CiConfigModel(const std::vector<YamlNode>& documents);
  // Several files (ci/include.h): the documents of each, in GitLab's merge
  // order (included files first, the including file last). A name defined
  // in more than one file is their deep merge, the later file's entries
  // over the earlier's (mappings key by key, anything else replaced).
  // `unseen_includes`: some include is not among `files` (see
  // has_include()).
  // `unseen_over_seen`: some unseen include merges over a file read.
  CiConfigModel(const std::vector<std::vector<YamlNode>>& files,
                bool unseen_includes, bool unseen_over_seen = true);

  struct Effective {
    CiValue config;  // The job's configuration as GitLab computes it.
    // Why some inherited keys cannot be known from this file (a parent or
    // `default:` in an included file); empty when everything is known.
    std::string unknown;
    // Which keys `unknown` concerns: all, or only these (the ones the job
    // inherits from an unseen `default:`).
    bool unknown_all = true;
    std::vector<std::string> unknown_keys;
    // `unknown` is only an unseen `default:`, whose keys GitLab gives a
    // job only where the job, after `extends`, has none: a key the job
    // has (its own or a parent's) is known.
    bool unknown_default_only = false;
    // `inherit: {default: false}` would make everything known (no unread
    // include can add entries to the templates the job extends).
    bool inherit_default_suffices = true;
    bool Known(std::string_view key) const {
      if (unknown.empty()) return true;
      if (unknown_default_only && config.is_object()) {
        const auto found = config.find(std::string(key));
        if (found != config.end() && !found->is_null()) return true;
      }
      if (unknown_all) return false;
      for (const std::string& k : unknown_keys) {
        if (k == key) return false;
      }
      return true;
    }
    // Top-level keys whose value holds a `!reference` that does not
    // resolve in this file (left in place), and why.
    std::map<std::string, std::string> unresolved;
  };
  // The effective configuration of `job`. Errors: no such job, an extends
  // cycle or more than 11 levels.
  // With `only_keys`, the configuration holds just those top-level keys
  // (what a caller inspects): a file of thousands of jobs that inherit a
  // large default: or template then costs its size, not jobs x template.
  // "key/prefix" keeps only the entries of mapping `key` whose names start
  // with prefix ("variables/GDT_").
  absl::StatusOr<Effective> Resolve(
      std::string_view job,
      const std::vector<std::string>& only_keys = {}) const;

  // `job`'s configuration after merge keys and extends (no default): what
  // `!reference` and extends see of it. Unknown parents are skipped and
  // named in `unknown`.
  absl::StatusOr<CiValue> Extended(std::string_view job, int depth,
                                   std::string* unknown) const;

  // The longest extends chain GitLab merges: an entry kMaxExtendsDepth
  // levels below the job may not extend another.
  static constexpr int kMaxExtendsDepth = 11;
  // Whether `job`'s extends chain is longer than that, or loops; GitLab
  // then refuses the whole file.
  bool ExtendsTooDeep(std::string_view job) const;

  // The top-level entry `name` as GitLab reads it (nullopt when absent).
  std::optional<CiValue> Top(std::string_view name) const;

  // The most values that `!reference`s may stand for in one job's
  // configuration (nested references multiply: a reference bomb).
  static constexpr uint64_t kMaxReferenceValues = 100'000;
  // The first job whose resolution went past kMaxReferenceValues (every
  // later reference then fails at once), or "".
  const std::string& reference_bomb() const { return reference_bomb_; }

  // Whether the file defines a job (or hidden job) `name` as a mapping;
  // cheaper than Top().
  bool HasJob(std::string_view name) const;

  // Whether the file has an `include:` that gdt did not read (parents and
  // `default:` entries may then come from files it does not see).
  bool has_include() const { return has_include_; }
  // Names the includes not read, for messages: all of them, and those that
  // merge over a file read (empty: "other files").
  void set_unseen_names(std::vector<std::string> all,
                        std::vector<std::string> over_seen) {
    unseen_names_ = std::move(all);
    unseen_over_seen_names_ = std::move(over_seen);
  }
  // How many files the model reads (the main file and those it includes).
  size_t file_count() const { return file_count_; }

  // What `job` inherits through `extends` alone: its parents' configurations
  // (each after its own extends) merged in list order, without the job's
  // own entries or default:; an empty mapping when it extends nothing.
  // Parents not in this file are skipped. `only_keys` as for Resolve.
  absl::StatusOr<CiValue> FromParents(
      std::string_view job,
      const std::vector<std::string>& only_keys = {}) const;

 private:
  // Extended() of one job, merged once.
  struct ExtendedMemo {
    enum State { kNew, kInProgress, kDone } state = kNew;
    absl::Status status;
    CiValue value;
    int height = 0;  // Longest extends chain above the job.
    std::string unknown;
  };
  // With `only_keys`, only those keys (and `inherit`) are merged, in a memo
  // of their own.
  const ExtendedMemo& ExtendedOnce(
      std::string_view job, const std::vector<std::string>* only_keys) const;
  // The length of `job`'s longest extends chain, at most
  // kMaxExtendsDepth + 1 (also for a loop). Worked out without recursion,
  // so that ExtendedOnce recurses only into chains short enough to merge.
  int Height(std::string_view job) const;
  mutable std::unordered_map<std::string, int> heights_;

  // Each name's entry in the last file that defines it, and its entries in
  // earlier files, in merge order (only names defined more than once).
  std::unordered_map<std::string, YamlNode> top_;
  std::unordered_map<std::string, std::vector<YamlNode>> underneath_;
  mutable std::unordered_map<std::string, ExtendedMemo> extended_;
  // One memo per list of keys asked for (callers use a few fixed lists).
  mutable std::map<std::vector<std::string>,
                   std::unordered_map<std::string, ExtendedMemo>>
      filtered_;
  // Top("default"), read once.
  mutable std::optional<std::optional<CiValue>> default_;
  bool has_include_ = false;
  // Some unseen include merges over a file read (see
  // CiIncludes::unseen_over_seen): what a template has may not be final.
  bool unseen_over_seen_ = false;
  std::vector<std::string> unseen_names_;
  std::vector<std::string> unseen_over_seen_names_;
  size_t file_count_ = 1;
  mutable std::string reference_bomb_;
};

// The names `job` (a job's configuration) lists under `extends`.
std::vector<std::string> ExtendsList(const CiValue& job);

// The effective configuration of `job` in `text` (for tests and tools).
absl::StatusOr<CiConfigModel::Effective> EffectiveJobConfig(
    std::string_view text, std::string_view job);

}  // namespace gdt::ci

#endif  // GDT_CI_INHERITANCE_H_
