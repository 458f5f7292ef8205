#include "ci/expand.h"

#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "ci/inheritance.h"
#include "ci/job_file.h"
#include "ci/rules.h"
#include "ci/yaml_tree.h"
#include "common/exit_code.h"
#include "common/gang_limits.h"
#include "common/terminal_text.h"
#include "nlohmann/json.hpp"

namespace gdt::ci {
namespace {

constexpr int kGitLabParallelLimit = 200;
constexpr int64_t kMaxPriority = 1000;
constexpr int64_t kMaxGangTimeoutSeconds = 7 * 86400;
constexpr int64_t kMaxCheckpointNoticeSeconds = 3600;
constexpr int64_t kMaxCheckpointKeep = 1000;
// Nesting deeper than this is not walked (no CI file needs it).
constexpr int kMaxDepth = 100;
const char kCheckpointPath[] = "checkpoints/";

const std::vector<std::string>& BlockKeys() {
  static const std::vector<std::string> keys = {
      "nodes",    "gpus_per_node", "procs_per_node", "launcher",   "timeout",
      "priority", "topology",      "checkpoint",     "preemptible"};
  return keys;
}
const std::vector<std::string>& Launchers() {
  static const std::vector<std::string> values = {"torchrun", "env", "nccl",
                                                  "none"};
  return values;
}
const std::vector<std::string>& TopologyModes() {
  static const std::vector<std::string> values = {"required", "preferred"};
  return values;
}
const std::vector<std::string>& CheckpointStores() {
  static const std::vector<std::string> values = {"artifacts", "none"};
  return values;
}

// What the executor takes for GDT_PREEMPTIBLE.
const std::vector<std::string>& PreemptibleValues() {
  static const std::vector<std::string> values = {"1", "0", "true", "false"};
  return values;
}

// GitLab retries a job at most this many times (`retry: 0..2`).
constexpr int64_t kMaxGitLabRetries = 2;

// How many retries bring a preempted member (exit code 76) of `job` back:
// from its effective `retry:`, or, without one, from the `retry:` expand
// adds (max 2, script_failure). A `retry:` that does not read counts none
// (lint reports it).
int PreemptRetries(const std::string& job, const CiValue& effective) {
  const auto retry = effective.find("retry");
  if (retry == effective.end() || retry->is_null()) {
    return static_cast<int>(kMaxGitLabRetries);
  }
  CiRetry read;
  if (!ReadCiRetry(*retry, job, &read).ok()) return 0;
  return RetriesForScriptExit(read, kPreemptedJobExitCode);
}

// The keys of a job's effective configuration (after extends and
// default:) that expand and lint look at.
const std::vector<std::string>& InspectedKeys() {
  static const std::vector<std::string> keys = {
      "tags", "variables", "artifacts", "retry", "parallel"};
  return keys;
}

// GDT_* variables a job may set (inputs) and their rules.
struct VariableRule {
  std::string name;
  enum Kind { kInteger, kChoice, kLabel } kind;
  int64_t low = 0;
  int64_t high = 0;
  const std::vector<std::string>* choices = nullptr;
};
const std::vector<VariableRule>& InputVariables() {
  static const std::vector<VariableRule> rules = {
      {"GDT_GPUS_PER_NODE", VariableRule::kInteger, 0, kMaxGpusPerNode},
      {"GDT_NPROC_PER_NODE", VariableRule::kInteger, 1, kMaxProcsPerNode},
      {"GDT_LAUNCHER", VariableRule::kChoice, 0, 0, &Launchers()},
      {"GDT_NODES_MIN", VariableRule::kInteger, 1, kGitLabParallelLimit},
      {"GDT_NODES_MAX", VariableRule::kInteger, 1, kGitLabParallelLimit},
      {"GDT_GANG_TIMEOUT", VariableRule::kInteger, 1, kMaxGangTimeoutSeconds},
      {"GDT_PRIORITY", VariableRule::kInteger, -kMaxPriority, kMaxPriority},
      {"GDT_TOPOLOGY_SAME", VariableRule::kLabel},
      {"GDT_TOPOLOGY_MODE", VariableRule::kChoice, 0, 0, &TopologyModes()},
      {"GDT_CHECKPOINT_NOTICE", VariableRule::kInteger, 1,
       kMaxCheckpointNoticeSeconds},
      {"GDT_CHECKPOINT_KEEP", VariableRule::kInteger, 1, kMaxCheckpointKeep},
      {"GDT_CHECKPOINT_STORE", VariableRule::kChoice, 0, 0,
       &CheckpointStores()},
      {"GDT_PREEMPTIBLE", VariableRule::kChoice, 0, 0, &PreemptibleValues()},
      {"GDT_PREEMPT_RETRIES", VariableRule::kInteger, 0, kMaxGitLabRetries},
  };
  return rules;
}
// Set by gdt on the placed host (docs/environment.md), never by a job.
const std::set<std::string>& OutputVariables() {
  static const std::set<std::string> names = {
      "GDT_GANG_ID",        "GDT_EPOCH",      "GDT_NODE_RANK",
      "GDT_NUM_NODES",      "GDT_WORLD_SIZE", "GDT_MASTER_ADDR",
      "GDT_MASTER_PORT",    "GDT_PEERS",      "GDT_HOSTFILE",
      "GDT_CHECKPOINT_DIR", "GDT_COORDINATOR"};
  return names;
}

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1,
                         diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// " (did you mean 'x'?)" for the closest candidate, or "".
std::string DidYouMean(std::string_view word,
                       const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = 3;  // At most two edits away.
  for (const std::string& candidate : candidates) {
    const size_t distance = EditDistance(word, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  return best.empty() ? "" : absl::StrCat(" (did you mean '", best, "'?)");
}

// GitLab's limit on `workflow:name`, in characters.
constexpr size_t kMaxWorkflowNameCharacters = 255;

// A value for a one-line message: control characters replaced, long text
// cut.
std::string Shown(std::string_view text) {
  std::string shown;
  for (char c : text.substr(0, 40)) {
    const unsigned char u = static_cast<unsigned char>(c);
    shown.push_back(u < 0x20 || u == 0x7f ? '?' : c);
  }
  if (text.size() > 40) shown += "...";
  return shown;
}

bool IsPlain(const YamlNode& node) {
  return node.IsScalar() && node.Tag() == "?";
}

// What a node is, for "must be X, not Y" messages.
std::string Describe(const YamlNode& node) {
  if (!node || node.IsNull()) return "empty";
  if (node.IsMap()) return "a mapping";
  if (node.IsSequence()) return "a list";
  if (node.Tag() == "!") {
    return absl::StrCat("the quoted string \"", Shown(node.Scalar()), "\"");
  }
  if (!IsPlain(node)) {
    return absl::StrCat("'", Shown(node.Scalar()), "' tagged ",
                        Shown(node.Tag()));
  }
  const std::string& text = node.Scalar();
  if (text.size() > 1 && text[0] == '0' &&
      std::all_of(text.begin(), text.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c));
      })) {
    if (const std::optional<int64_t> octal = Yaml11Integer(text)) {
      return absl::StrCat("'", text,
                          "' (a leading zero: GitLab's YAML reads it as "
                          "octal, ",
                          *octal, ")");
    }
    return absl::StrCat("'", text,
                        "' (a leading zero, and not octal: GitLab's YAML "
                        "reads it as text, not a number)");
  }
  // Other integers of YAML 1.1, which GitLab's reader takes and gdt's
  // block does not: 0x1f, 0b101, 1_000.
  const std::optional<int64_t> yaml11 = Yaml11Integer(text);
  if (yaml11.has_value() && absl::StrCat(*yaml11) != text) {
    return absl::StrCat("'", text, "' (GitLab's YAML reads it as ", *yaml11,
                        "; write that)");
  }
  return absl::StrCat("'", Shown(text), "'");
}

// An optional sign ('-', and '+' when `plus_allowed`) and 1 to 12 digits.
std::optional<int64_t> SignedDigits(std::string_view text, bool plus_allowed) {
  size_t i = 0;
  bool negative = false;
  if (!text.empty() && (text[0] == '-' || (plus_allowed && text[0] == '+'))) {
    negative = text[0] == '-';
    i = 1;
  }
  if (i == text.size() || text.size() - i > 12) return std::nullopt;
  int64_t value = 0;
  for (; i < text.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(text[i]))) {
      return std::nullopt;
    }
    value = value * 10 + (text[i] - '0');
  }
  return negative ? -value : value;
}

// A plain (unquoted) integer scalar, as YAML reads one. A leading zero
// (`010`) is not one: GitLab's YAML 1.1 reader takes it for octal (8).
std::optional<int64_t> PlainInteger(const YamlNode& node) {
  if (!IsPlain(node) && node.Tag() != "tag:yaml.org,2002:int") {
    return std::nullopt;
  }
  std::string_view digits = node.Scalar();
  if (!digits.empty() && (digits[0] == '-' || digits[0] == '+')) {
    digits.remove_prefix(1);
  }
  if (digits.size() > 1 && digits[0] == '0') return std::nullopt;
  return SignedDigits(node.Scalar(), /*plus_allowed=*/true);
}

// Digits only (a variable value as GitLab sends it), at most 12.
std::optional<int64_t> IntegerText(std::string_view text) {
  return SignedDigits(text, /*plus_allowed=*/false);
}

bool IsLabel(std::string_view text) {
  if (text.empty() || text.size() > 63 ||
      !std::isalnum(static_cast<unsigned char>(text[0]))) {
    return false;
  }
  for (char c : text) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' &&
        c != '-' && c != '/') {
      return false;
    }
  }
  return true;
}

bool Contains(const std::vector<std::string>& values, std::string_view v) {
  return std::find(values.begin(), values.end(), v) != values.end();
}

// `message` with control characters (from names in the file) shown as '?'.
std::string OneLine(std::string message) {
  for (char& c : message) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) c = '?';
  }
  return message;
}

// The `spec: inputs:` header of a CI/CD component (or of a pipeline that
// takes inputs): each input's default as text, none when it has none (the
// input is then required) or it is a list or mapping.
struct ComponentInputs {
  bool header = false;  // The file has a `spec:` header.
  std::map<std::string, std::optional<std::string>, std::less<>> defaults;
  // The component data the header asks for (`spec: component: [name]`):
  // GitLab fills in `$[[ component.name ]]` only for these, and only when
  // the file is included as a CI/CD component.
  std::set<std::string, std::less<>> component_fields;
};

// A value holding `$[[ inputs.x ]]` with each input's default filled in, as
// GitLab interpolates it when the file is used without inputs.
struct FilledInput {
  std::optional<std::string> text;  // None when some input has no default.
  std::string input;                // The first input named.
  std::string problem;              // Why there is no text.
  bool error = false;               // GitLab refuses the file.
};

FilledInput FillInDefaults(std::string_view text,
                           const ComponentInputs& inputs) {
  FilledInput out;
  std::string filled;
  size_t at = 0;
  while (true) {
    const size_t open = text.find("$[[", at);
    if (open == std::string_view::npos) break;
    const size_t close = text.find("]]", open + 3);
    if (close == std::string_view::npos) break;
    filled += text.substr(at, open - at);
    std::string_view inner = text.substr(open + 3, close - open - 3);
    while (!inner.empty() && inner.front() == ' ') inner.remove_prefix(1);
    while (!inner.empty() && inner.back() == ' ') inner.remove_suffix(1);
    if (inner.rfind("inputs.", 0) != 0) {
      out.problem = absl::StrCat("'$[[ ", std::string(inner),
                                 " ]]' is no input (GitLab interpolates only "
                                 "$[[ inputs.name ]])");
      out.error = true;
      return out;
    }
    std::string_view name = inner.substr(7);
    const size_t pipe = name.find('|');
    const bool functions = pipe != std::string_view::npos;
    name = name.substr(0, pipe);
    while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
    if (out.input.empty()) out.input = std::string(name);
    const auto input = inputs.defaults.find(name);
    if (!inputs.header) {
      out.problem = absl::StrCat(
          "the file has no spec: inputs header, so GitLab does not fill in "
          "input '",
          std::string(name), "' and takes '", std::string(text),
          "' as written");
      out.error = true;
      return out;
    }
    if (input == inputs.defaults.end()) {
      out.problem = absl::StrCat("input '", std::string(name),
                                 "' is not declared in the file's spec: "
                                 "inputs header, so GitLab refuses the file");
      out.error = true;
      return out;
    }
    if (functions) {
      out.problem = absl::StrCat("input '", std::string(name),
                                 "' goes through input functions, which gdt "
                                 "does not evaluate");
      return out;
    }
    if (!input->second.has_value()) {
      out.problem =
          absl::StrCat("input '", std::string(name), "' has no default");
      return out;
    }
    filled += *input->second;
    at = close + 2;
  }
  filled += text.substr(at);
  out.text = std::move(filled);
  return out;
}

// Collects diagnostics at 1-based places.
class Reporter {
 public:
  explicit Reporter(std::vector<CiDiagnostic>* out) : out_(out) {}

  // The file's inputs, for checks that meet `$[[ inputs.x ]]` (none: such
  // values are not checked), and where lint's warnings go (none: dropped).
  const ComponentInputs* inputs = nullptr;
  Reporter* warnings = nullptr;
  // An included file the problems are in (empty: the main file).
  std::string file;

  // At `node`, or at `fallback` when `node` has no place (an empty value).
  void At(const YamlNode& node, const YamlNode& fallback, std::string message) {
    // An empty value's mark is the next token's: use the key's instead.
    YamlMark mark = node && !node.IsNull() ? node.Mark() : YamlMark{};
    if (mark.is_null() && fallback) mark = fallback.Mark();
    AtMark(mark, std::move(message));
  }
  void AtMark(const YamlMark& mark, std::string message) {
    CiDiagnostic d;
    if (!mark.is_null()) {
      d.line = mark.line + 1;
      d.column = mark.column + 1;
    }
    d.message = OneLine(std::move(message));
    d.file = file;
    out_->push_back(std::move(d));
  }
  void AtLine(int line, int column, std::string message) {
    out_->push_back(
        CiDiagnostic{line, column, OneLine(std::move(message)), file});
  }
  size_t count() const { return out_->size(); }

 private:
  std::vector<CiDiagnostic>* out_;
};

// The key node and value of a map entry. Never assign one Entry to
// another: YamlNode assignment writes through to the document.
struct Entry {
  YamlNode key;
  YamlNode value;
  bool found = false;
  explicit operator bool() const { return found; }
};
// The first entry named `name` of `map` (not found when `map` is no map).
Entry FindEntry(const YamlNode& map, std::string_view name) {
  if (!map || !map.IsMap()) return Entry{};
  for (const auto& entry : map) {
    if (entry.first.IsScalar() && entry.first.Scalar() == name) {
      return Entry{entry.first, entry.second, true};
    }
  }
  return Entry{};
}

// Reports every key that appears twice in one mapping, anywhere below
// `node`. GitLab keeps the last one, so the first is silently lost.
void FindDuplicateKeys(const YamlNode& node, int depth,
                       std::vector<bool>* visited, Reporter* report) {
  if (depth > kMaxDepth || !(node.IsMap() || node.IsSequence())) return;
  // Aliases share the node with their anchor: walk it once.
  if ((*visited)[node.index()]) return;
  (*visited)[node.index()] = true;
  if (node.IsSequence()) {
    for (const YamlNode& item : node) {
      FindDuplicateKeys(item, depth + 1, visited, report);
    }
    return;
  }
  std::map<std::string, YamlMark> seen;
  for (const auto& entry : node) {
    if (entry.first.IsMap() || entry.first.IsSequence()) {
      report->At(entry.first, node,
                 "a mapping or list used as a key (`? ...`); GitLab reads "
                 "only names as keys");
    }
    // Repeated merge keys (`<<: *a` then `<<: *b`) each merge in GitLab.
    if (entry.first.IsScalar() && entry.first.Scalar() != "<<") {
      const std::string& key = entry.first.Scalar();
      auto [it, inserted] = seen.emplace(key, entry.first.Mark());
      if (!inserted) {
        report->At(entry.first, node,
                   absl::StrCat("duplicate key '", Shown(key),
                                "' (first at line ", it->second.line + 1,
                                "); YAML keeps only one of them"));
      }
    }
    FindDuplicateKeys(entry.second, depth + 1, visited, report);
  }
}

// ---------------------------------------------------------------------.
// The block.

// Reads an integer in [low, high]; `range` explains the range.
std::optional<int64_t> ReadInteger(const Entry& e, const std::string& path,
                                   int64_t low, int64_t high,
                                   const std::string& range, Reporter* report) {
  const std::optional<int64_t> value = PlainInteger(e.value);
  if (!value.has_value()) {
    report->At(e.value, e.key,
               absl::StrCat(path, " must be an integer ", range, ", not ",
                            Describe(e.value)));
    return std::nullopt;
  }
  if (*value < low || *value > high) {
    report->At(e.value, e.key,
               absl::StrCat(path, " must be ", range, ", not ", *value));
    return std::nullopt;
  }
  return value;
}

std::optional<std::string> ReadChoice(const Entry& e, const std::string& path,
                                      const std::vector<std::string>& choices,
                                      Reporter* report) {
  if (!e.value.IsScalar() || !Contains(choices, e.value.Scalar())) {
    report->At(
        e.value, e.key,
        absl::StrCat(
            path, " must be one of ", absl::StrJoin(choices, ", "), ", not ",
            Describe(e.value),
            e.value.IsScalar() ? DidYouMean(e.value.Scalar(), choices) : ""));
    return std::nullopt;
  }
  return e.value.Scalar();
}

// A duration: seconds as an integer, or GitLab's duration text ("10m").
std::optional<int64_t> ReadDuration(const Entry& e, const std::string& path,
                                    int64_t high, const std::string& range,
                                    Reporter* report) {
  std::optional<int64_t> seconds;
  if (e.value.IsScalar()) {
    seconds = PlainInteger(e.value);
    if (!seconds.has_value()) {
      absl::StatusOr<int64_t> parsed = ParseDurationSeconds(e.value.Scalar());
      if (parsed.ok()) seconds = *parsed;
    }
  }
  if (!seconds.has_value()) {
    report->At(e.value, e.key,
               absl::StrCat(path,
                            " must be a duration (seconds, or e.g. 10m, 1h "
                            "30m), not ",
                            Describe(e.value)));
    return std::nullopt;
  }
  if (*seconds < 1 || *seconds > high) {
    report->At(
        e.value, e.key,
        absl::StrCat(path, " must be ", range, ", not ", *seconds, " seconds"));
    return std::nullopt;
  }
  return seconds;
}

// The entries of mapping `map` as GitLab's YAML reader builds them: a merge
// key (`<<: *a`, `<<: [*a, *b]`) puts the entries of the mappings it names
// where it stands (of a list, the earlier mapping's entry wins), and of two
// entries with one name the later wins, in the place of the first.
std::vector<Entry> MergedEntries(const YamlNode& map, int depth = 0) {
  std::vector<Entry> out;
  if (!map || !map.IsMap() || depth > 16) return out;
  // Looked up by name: a mapping may have 100,000 entries.
  struct Entries {
    std::vector<Entry>* list;
    std::unordered_map<std::string, size_t> at;
  };
  const auto put = [](Entries* into, const Entry& e) {
    if (e.key.IsScalar()) {
      const auto [found, fresh] =
          into->at.emplace(e.key.Scalar(), into->list->size());
      if (!fresh) {
        (*into->list)[found->second] = e;
        return;
      }
    }
    into->list->push_back(e);
  };
  Entries all{&out, {}};
  for (const auto& entry : map) {
    const Entry e{entry.first, entry.second, true};
    const bool merge = entry.first.IsScalar() && entry.first.IsPlain() &&
                       entry.first.Scalar() == "<<";
    if (merge && entry.second.IsMap()) {
      for (const Entry& m : MergedEntries(entry.second, depth + 1)) {
        put(&all, m);
      }
    } else if (merge && entry.second.IsSequence() && [&] {
                 for (const YamlNode& item : entry.second) {
                   if (!item.IsMap()) return false;
                 }
                 return true;
               }()) {
      std::vector<Entry> list;
      Entries merged{&list, {}};
      for (size_t i = entry.second.size(); i-- > 0;) {
        for (const Entry& m : MergedEntries(entry.second.Item(i), depth + 1)) {
          put(&merged, m);
        }
      }
      for (const Entry& m : list) put(&all, m);
    } else {
      put(&all, e);
    }
  }
  return out;
}

// The entry named `name` of `map` after its merge keys (MergedEntries).
Entry FindMergedEntry(const YamlNode& map, std::string_view name) {
  for (const Entry& e : MergedEntries(map)) {
    if (e.key.IsScalar() && e.key.Scalar() == name) return e;
  }
  return Entry{};
}

// A mapping value with only `keys`; reports anything else.
bool CheckSubMap(const Entry& e, const std::string& path,
                 const std::vector<std::string>& keys, Reporter* report) {
  if (!e.value.IsMap()) {
    report->At(
        e.value, e.key,
        absl::StrCat(path, " must be a mapping with ",
                     absl::StrJoin(keys, ", "), ", not ", Describe(e.value)));
    return false;
  }
  bool ok = true;
  for (const Entry& entry : MergedEntries(e.value)) {
    const std::string key =
        entry.key.IsScalar() ? entry.key.Scalar() : std::string("?");
    if (!Contains(keys, key)) {
      report->At(entry.key, e.value,
                 absl::StrCat(path, ": unknown key '", Shown(key), "'",
                              DidYouMean(key, keys),
                              "; keys: ", absl::StrJoin(keys, ", ")));
      ok = false;
    }
  }
  return ok;
}

// An elastic size `nodes: 2..8` (plain or quoted, spaces around `..`
// allowed): the gang starts with any number of members from min to max.
// Returns {min, max}, or nullopt after reporting the one thing wrong.
std::optional<std::pair<int, int>> ReadNodeRange(const Entry& e,
                                                 const std::string& path,
                                                 int max_nodes,
                                                 Reporter* report) {
  const std::string& text = e.value.Scalar();
  const size_t dots = text.find("..");
  const auto number = [](std::string_view part) -> std::optional<int64_t> {
    while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
    while (!part.empty() && part.back() == ' ') part.remove_suffix(1);
    if (part.empty() || part.size() > 6) return std::nullopt;
    int64_t value = 0;
    for (const char c : part) {
      if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
      value = value * 10 + (c - '0');
    }
    return value;
  };
  const std::optional<int64_t> low =
      number(std::string_view(text).substr(0, dots));
  const std::optional<int64_t> high =
      number(std::string_view(text).substr(dots + 2));
  if (!low.has_value() || !high.has_value()) {
    report->At(e.value, e.key,
               absl::StrCat(path,
                            " must be an integer or a range min..max of "
                            "integers (e.g. 2..8), not ",
                            Describe(e.value)));
    return std::nullopt;
  }
  if (*low < 1) {
    report->At(e.value, e.key,
               absl::StrCat(path, " range ", *low, "..", *high,
                            " starts below 1: a gang needs at least one "
                            "member"));
    return std::nullopt;
  }
  if (*low > *high) {
    report->At(e.value, e.key,
               absl::StrCat(path, " range ", *low, "..", *high,
                            " has its minimum above its maximum"));
    return std::nullopt;
  }
  if (*high > max_nodes) {
    report->At(e.value, e.key,
               absl::StrCat(path, " range ", *low, "..", *high, " goes up to ",
                            *high, " but this cluster allows at most ",
                            max_nodes, " nodes per job (--max-nodes)"));
    return std::nullopt;
  }
  return std::pair<int, int>(static_cast<int>(*low), static_cast<int>(*high));
}

// Parses `parallel: {distributed: ...}` of job `job` into `spec`. Returns
// false after reporting when anything is wrong.
// `nodes_inherited`: the job's template gives `nodes`, so its own block may
// leave it out.
bool ParseBlock(const std::string& job, const Entry& parallel,
                const CiExpandOptions& options, GangSpec* spec,
                Reporter* report, bool nodes_inherited = false) {
  const size_t errors_before = report->count();
  const std::string prefix = absl::StrCat(job, ": parallel:distributed");
  const Entry distributed = FindEntry(parallel.value, "distributed");
  for (const auto& entry : parallel.value) {
    const std::string key =
        entry.first.IsScalar() ? entry.first.Scalar() : std::string("?");
    if (key == "distributed") {
      continue;
    } else if (key == "matrix") {
      report->At(entry.first, parallel.key,
                 absl::StrCat(job,
                              ": parallel:matrix cannot be combined with "
                              "parallel:distributed"));
    } else {
      report->At(entry.first, parallel.key,
                 absl::StrCat(job, ": unknown key '", Shown(key),
                              "' in parallel; with a gang use only "
                              "distributed"));
    }
  }
  if (!distributed.value.IsMap()) {
    report->At(distributed.value, distributed.key,
               absl::StrCat(prefix, " must be a mapping with ",
                            absl::StrJoin(BlockKeys(), ", "), ", not ",
                            Describe(distributed.value)));
    return false;
  }
  const int max_nodes =
      std::min(kGitLabParallelLimit, std::max(1, options.max_nodes));
  bool have_nodes = false;
  bool have_procs = false;
  for (const Entry& e : MergedEntries(distributed.value)) {
    const std::string key =
        e.key.IsScalar() ? e.key.Scalar() : std::string("?");
    const std::string path = absl::StrCat(prefix, ":", key);
    if (key == "nodes" && e.value.IsScalar() &&
        e.value.Scalar().find("..") != std::string::npos) {
      if (std::optional<std::pair<int, int>> range =
              ReadNodeRange(e, path, max_nodes, report)) {
        spec->nodes_min = range->first;
        spec->nodes = range->second;
      }
      have_nodes = true;
    } else if (key == "nodes") {
      std::optional<int64_t> nodes =
          ReadInteger(e, path, 1, kGitLabParallelLimit,
                      "from 1 to 200 (GitLab's parallel limit)", report);
      if (nodes.has_value() && *nodes > max_nodes) {
        report->At(e.value, e.key,
                   absl::StrCat(path, " is ", *nodes,
                                " but this cluster allows at most ", max_nodes,
                                " nodes per job (--max-nodes)"));
        nodes.reset();
      }
      if (nodes.has_value()) spec->nodes = static_cast<int>(*nodes);
      have_nodes = true;
    } else if (key == "gpus_per_node") {
      if (auto v = ReadInteger(e, path, 0, kMaxGpusPerNode,
                               absl::StrCat("from 0 to ", kMaxGpusPerNode),
                               report)) {
        spec->gpus_per_node = static_cast<int>(*v);
      }
    } else if (key == "procs_per_node") {
      if (auto v = ReadInteger(e, path, 1, kMaxProcsPerNode,
                               absl::StrCat("from 1 to ", kMaxProcsPerNode),
                               report)) {
        spec->procs_per_node = static_cast<int>(*v);
      }
      have_procs = true;
    } else if (key == "launcher") {
      if (auto v = ReadChoice(e, path, Launchers(), report)) {
        spec->launcher = *v;
      }
    } else if (key == "timeout") {
      spec->gang_timeout_seconds = ReadDuration(
          e, path, kMaxGangTimeoutSeconds, "from 1 second to 7 days", report);
    } else if (key == "priority") {
      if (auto v = ReadInteger(e, path, -kMaxPriority, kMaxPriority,
                               "from -1000 to 1000", report)) {
        spec->priority = static_cast<int>(*v);
      }
    } else if (key == "topology") {
      static const std::vector<std::string> keys = {"same", "mode"};
      if (!CheckSubMap(e, path, keys, report)) continue;
      const Entry same = FindMergedEntry(e.value, "same");
      const Entry mode = FindMergedEntry(e.value, "mode");
      if (!same) {
        report->At(e.value, e.key,
                   absl::StrCat(path,
                                " needs same: <label> (the host label all "
                                "members must share)"));
        continue;
      }
      if (!same.value.IsScalar()) {
        report->At(same.value, same.key,
                   absl::StrCat(path, ":same must be a host label, not ",
                                Describe(same.value)));
      } else if (!IsLabel(same.value.Scalar())) {
        report->At(same.value, same.key,
                   absl::StrCat(path,
                                ":same must be a host label (letters, "
                                "digits, . _ - /; at most 63), not ",
                                Describe(same.value)));
      } else {
        spec->topology_same = same.value.Scalar();
      }
      spec->topology_mode = "required";
      if (mode) {
        if (auto v = ReadChoice(mode, absl::StrCat(path, ":mode"),
                                TopologyModes(), report)) {
          spec->topology_mode = *v;
        }
      }
    } else if (key == "preemptible") {
      if (IsPlain(e.value) &&
          (e.value.Scalar() == "true" || e.value.Scalar() == "false")) {
        spec->preemptible = e.value.Scalar() == "true";
      } else {
        report->At(e.value, e.key,
                   absl::StrCat(path, " must be true or false, not ",
                                Describe(e.value)));
      }
    } else if (key == "checkpoint") {
      static const std::vector<std::string> keys = {"notice", "keep", "store"};
      if (!e.value.IsNull() && !CheckSubMap(e, path, keys, report)) continue;
      spec->checkpoint_store = "artifacts";
      if (const Entry notice = FindMergedEntry(e.value, "notice")) {
        spec->checkpoint_notice_seconds = ReadDuration(
            notice, absl::StrCat(path, ":notice"), kMaxCheckpointNoticeSeconds,
            "from 1 second to 1 hour", report);
      }
      if (const Entry keep = FindMergedEntry(e.value, "keep")) {
        if (auto v =
                ReadInteger(keep, absl::StrCat(path, ":keep"), 1,
                            kMaxCheckpointKeep, "from 1 to 1000", report)) {
          spec->checkpoint_keep = static_cast<int>(*v);
        }
      }
      if (const Entry store = FindMergedEntry(e.value, "store")) {
        if (auto v = ReadChoice(store, absl::StrCat(path, ":store"),
                                CheckpointStores(), report)) {
          spec->checkpoint_store = *v;
        }
      }
    } else {
      report->At(e.key, distributed.value,
                 absl::StrCat(prefix, ": unknown key '", Shown(key), "'",
                              DidYouMean(key, BlockKeys()),
                              "; keys: ", absl::StrJoin(BlockKeys(), ", ")));
    }
  }
  if (!have_nodes && !nodes_inherited) {
    report->At(distributed.key, distributed.key,
               absl::StrCat(prefix, " needs nodes (the number of members)"));
  }
  if (!have_procs) spec->procs_per_node = std::max(1, spec->gpus_per_node);
  return report->count() == errors_before;
}

// The block in `parallel` (a value of the inheritance model: a template's
// block, or a job's merged with its template's) read as ParseBlock reads a
// written one. Errors go to `errors`, without places.
std::optional<GangSpec> SpecOfValue(const std::string& job,
                                    const CiValue& parallel,
                                    const CiExpandOptions& options,
                                    std::vector<CiDiagnostic>* errors) {
  if (!parallel.is_object() || !parallel.contains("distributed")) {
    return std::nullopt;
  }
  YamlError error;
  const std::unique_ptr<YamlTree> tree = YamlTree::Parse(
      absl::StrCat(
          "parallel: ",
          parallel.dump(-1, ' ', false, CiValue::error_handler_t::replace)),
      &error);
  if (!error.message.empty() || tree->documents().empty()) {
    errors->push_back(CiDiagnostic{0, 0,
                                   absl::StrCat(job,
                                                ": its inherited "
                                                "parallel:distributed cannot "
                                                "be read back"),
                                   ""});
    return std::nullopt;
  }
  const Entry entry = FindEntry(tree->documents()[0], "parallel");
  std::vector<CiDiagnostic> found;
  Reporter report(&found);
  GangSpec spec;
  spec.job = job;
  spec.from_block = true;
  const bool ok = ParseBlock(job, entry, options, &spec, &report);
  for (CiDiagnostic& d : found) {
    errors->push_back(CiDiagnostic{0, 0, std::move(d.message), ""});
  }
  if (!ok) return std::nullopt;
  return spec;
}

// The GDT_* variables a block writes only for some of its keys: every
// input but GPUs, processes and launcher, which it always writes.
const std::vector<std::string>& OptionalBlockVariables() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> optional;
    for (const VariableRule& rule : InputVariables()) {
      if (rule.name != "GDT_GPUS_PER_NODE" &&
          rule.name != "GDT_NPROC_PER_NODE" && rule.name != "GDT_LAUNCHER") {
        optional.push_back(rule.name);
      }
    }
    return optional;
  }();
  return names;
}

// ---------------------------------------------------------------------.
// Text splicing.

// The file as lines, each with its own line break.
struct Lines {
  std::vector<std::string_view> lines;  // Into the text being processed.
  std::string eol = "\n";
};

Lines SplitLines(std::string_view text) {
  Lines out;
  size_t start = 0;
  while (start < text.size()) {
    const size_t nl = text.find('\n', start);
    const size_t end = nl == std::string_view::npos ? text.size() : nl + 1;
    out.lines.emplace_back(text.substr(start, end - start));
    start = end;
  }
  if (!out.lines.empty() && out.lines[0].size() >= 2 &&
      out.lines[0].substr(out.lines[0].size() - 2) == "\r\n") {
    out.eol = "\r\n";
  }
  return out;
}

// Column of the first character that is not a space, or npos when blank.
size_t FirstNonSpace(std::string_view line) {
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] != ' ' && line[i] != '\t' && line[i] != '\r' &&
        line[i] != '\n') {
      return i;
    }
  }
  return std::string::npos;
}

// Whether `line` ends the document before it: a `---` or `...` marker, or
// a directive (`%YAML 1.2`) for the next document, at column 0. No scalar
// of a document reaches past one of these.
bool IsDocumentBoundary(std::string_view line) {
  if (line.rfind('%', 0) == 0) return true;
  if (line.rfind("---", 0) != 0 && line.rfind("...", 0) != 0) return false;
  return line.size() == 3 ||
         std::string_view(" \t\r\n").find(line[3]) != std::string_view::npos;
}

// Lowers `end` past trailing lines that cannot belong to an entry at column
// `indent`: blank lines, comments at or left of `indent`, document markers.
int TrimEnd(const Lines& lines, int begin, int end, int indent) {
  while (end > begin + 1) {
    const std::string_view line = lines.lines[static_cast<size_t>(end - 1)];
    const size_t first = FirstNonSpace(line);
    const bool removable =
        first == std::string::npos ||
        (line[first] == '#' && static_cast<int>(first) <= indent) ||
        line.rfind("---", 0) == 0 || line.rfind("...", 0) == 0;
    if (!removable) break;
    --end;
  }
  return end;
}

// The byte offset in `line` of character column `column` (libyaml counts
// characters; a key or value after multibyte text sits further right in
// bytes).
size_t ByteColumn(std::string_view line, int column) {
  size_t at = 0;
  for (int chars = 0; at < line.size(); ++at) {
    if ((static_cast<unsigned char>(line[at]) & 0xC0) == 0x80) continue;
    if (chars++ == column) break;
  }
  return at;
}

// What follows `key:` on the key's line, comments and spaces dropped ("" for
// a block value; "{", "[", "*x", "&x" ... otherwise).
std::string RestOfKeyLine(const Lines& lines, const YamlNode& key) {
  const std::string_view line =
      lines.lines[static_cast<size_t>(key.Mark().line)];
  size_t colon = line.find(':', ByteColumn(line, key.Mark().column));
  if (colon == std::string::npos) return "?";
  std::string rest(line.substr(colon + 1));
  for (size_t i = 0; i < rest.size(); ++i) {
    if (rest[i] == '#' && (i == 0 || rest[i - 1] == ' ')) {
      rest.resize(i);
      break;
    }
  }
  const size_t first = rest.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return "";
  const size_t last = rest.find_last_not_of(" \t\r\n");
  return rest.substr(first, last - first + 1);
}

// Whether the last scalar of block collection `node` is a block scalar that
// keeps its trailing line breaks (`|+`, `>+`): lines added after it would
// take its trailing blank lines from it.
bool EndsWithKeptScalar(const Lines& lines, const YamlNode& node,
                        int depth = 0) {
  if (depth > kMaxDepth) return true;
  if (node.IsMap() && node.size() > 0) {
    return EndsWithKeptScalar(lines, node.Entry(node.size() - 1).second,
                              depth + 1);
  }
  if (node.IsSequence() && node.size() > 0) {
    return EndsWithKeptScalar(lines, node.Item(node.size() - 1), depth + 1);
  }
  if (!node.IsScalar() || node.Mark().is_null()) return false;
  const std::string_view line =
      lines.lines[static_cast<size_t>(node.Mark().line)];
  const size_t at = ByteColumn(line, node.Mark().column);
  if (at >= line.size() || (line[at] != '|' && line[at] != '>')) return false;
  const std::string_view header =
      line.substr(at, line.find_first_of(" \t#\r\n", at) - at);
  return header.find('+') != std::string_view::npos;
}

// Replace lines [begin, end) by `text` (whole lines); begin == end inserts.
struct Edit {
  int begin = 0;
  int end = 0;
  std::string text;
};

// Sorts one job's edits by place (they never overlap).
void SortEdits(std::vector<Edit>::iterator begin,
               std::vector<Edit>::iterator end) {
  std::stable_sort(begin, end, [](const Edit& a, const Edit& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
}

// Appends lines [first, last) with `edits` (sorted, inside the range)
// applied to `out`: one pass, so the whole file costs linear time.
void ApplyEdits(const Lines& lines, int first, int last,
                std::vector<Edit>::const_iterator edits_begin,
                std::vector<Edit>::const_iterator edits_end, std::string* out) {
  const int count = static_cast<int>(lines.lines.size());
  // A last line without a line break needs one when text follows it.
  bool break_last = false;
  for (auto edit = edits_begin; edit != edits_end; ++edit) {
    if (edit->end >= count) {
      break_last = edit->begin >= count;
      break;
    }
  }
  const auto copy_line = [&](int i) {
    *out += lines.lines[static_cast<size_t>(i)];
    if (i == count - 1 && break_last && out->back() != '\n') {
      *out += lines.eol;
    }
  };
  int next = first;
  for (auto edit = edits_begin; edit != edits_end; ++edit) {
    for (; next < edit->begin; ++next) copy_line(next);
    *out += edit->text;
    next = std::max(next, edit->end);
  }
  for (; next < last; ++next) copy_line(next);
}

// `tag` as a YAML scalar that reads back as the same string: plain when it
// is safe, double-quoted when YAML would read it as something else (a
// boolean, a number, null) or it starts with a character YAML reserves.
std::string TagText(std::string_view tag) {
  static const std::set<std::string, std::less<>> kSpecial = {
      "y",  "Y",    "yes",  "Yes",  "YES",   "n",     "N",     "no", "No",
      "NO", "true", "True", "TRUE", "false", "False", "FALSE", "on", "On",
      "ON", "off",  "Off",  "OFF",  "null",  "Null",  "NULL",  "~"};
  const bool plain =
      !tag.empty() && std::isalpha(static_cast<unsigned char>(tag[0])) &&
      kSpecial.count(tag) == 0 && tag.find(": ") == std::string_view::npos &&
      tag.find(" #") == std::string_view::npos && tag.back() != ':' &&
      tag.back() != ' ';
  return plain ? std::string(tag) : absl::StrCat("\"", std::string(tag), "\"");
}

// A value as one line of YAML: JSON is YAML's flow style, so a string comes
// out double-quoted and a mapping or list as {...} or [...].
// A `!reference [...]` (the inheritance model's {"!reference": [...]})
// is written with its tag.
std::string FlowText(const CiValue& value) {
  if (value.is_object() && value.size() == 1 && value.contains("!reference") &&
      value.begin()->is_array()) {
    return absl::StrCat("!reference ", FlowText(*value.begin()));
  }
  if (value.is_array() || value.is_object()) {
    std::string text = value.is_array() ? "[" : "{";
    bool first = true;
    for (const auto& [key, item] : value.items()) {
      if (!first) text += ", ";
      first = false;
      if (value.is_object()) absl::StrAppend(&text, FlowText(key), ": ");
      absl::StrAppend(&text, FlowText(item));
    }
    return text + (value.is_array() ? "]" : "}");
  }
  return value.dump(-1, ' ', false, CiValue::error_handler_t::replace);
}

std::string Quoted(std::string_view value) {
  return absl::StrCat("\"", std::string(value), "\"");
}

// How deep merge keys may nest in a gang job: deeper, what they bring
// (tags, variables, artifacts) would lie beyond kMaxDepth.
constexpr int kMaxMergeDepth = kMaxDepth - 10;

// Whether merge keys (`<<:`) in mapping `node` nest more than `levels`
// deep (a template that merges a template that merges ...).
bool MergesDeeperThan(const YamlNode& node, int levels) {
  if (!node.IsMap()) return false;
  for (const auto& entry : node) {
    if (!entry.first.IsScalar() || !entry.first.IsPlain() ||
        entry.first.Scalar() != "<<") {
      continue;
    }
    if (levels == 0) return true;
    if (entry.second.IsMap() && MergesDeeperThan(entry.second, levels - 1)) {
      return true;
    }
    if (entry.second.IsSequence()) {
      for (const YamlNode& item : entry.second) {
        if (MergesDeeperThan(item, levels - 1)) return true;
      }
    }
  }
  return false;
}

// Whether `node` nests more than `levels` mappings or lists deep.
bool NestsDeeperThan(const YamlNode& node, int levels) {
  if (!node.IsMap() && !node.IsSequence()) return false;
  if (levels == 0) return true;
  if (node.IsMap()) {
    for (const auto& entry : node) {
      if (NestsDeeperThan(entry.first, levels - 1) ||
          NestsDeeperThan(entry.second, levels - 1)) {
        return true;
      }
    }
    return false;
  }
  for (const YamlNode& item : node) {
    if (NestsDeeperThan(item, levels - 1)) return true;
  }
  return false;
}

// The value Ruby's YAML reader gives `key` in mapping `map`: its own entry,
// or one a merge key brings (a merge key overrides the keys before it; in
// `<<: [*a, *b]` the earlier mapping wins). A null node when none.
YamlNode MergedEntry(const YamlNode& map, std::string_view key, int depth) {
  YamlNode found;
  if (!map.IsMap() || depth > kMaxDepth) return found;
  for (const auto& entry : map) {
    if (!entry.first.IsScalar()) continue;
    if (entry.first.IsPlain() && entry.first.Scalar() == "<<") {
      if (entry.second.IsMap()) {
        if (const YamlNode v = MergedEntry(entry.second, key, depth + 1)) {
          found = v;
        }
      } else if (entry.second.IsSequence()) {
        for (const YamlNode& item : entry.second) {
          if (const YamlNode v = MergedEntry(item, key, depth + 1)) {
            found = v;
            break;
          }
        }
      }
    } else if (entry.first.Scalar() == key) {
      found = entry.second;
    }
  }
  return found;
}

// Whether Ruby's YAML 1.1 reader may read plain scalar `text` as something
// other than a string (a number in any of its forms, a boolean, null, a
// date, a symbol): written out again, it stays plain.
bool MayReadAsNonString(const std::string& text) {
  if (text.empty() || text.find(' ') != std::string::npos) return false;
  static const std::set<std::string, std::less<>> kWords = {
      "true", "True", "TRUE", "false", "False", "FALSE", "yes", "Yes",
      "YES",  "no",   "No",   "NO",    "on",    "On",    "ON",  "off",
      "Off",  "OFF",  "null", "Null",  "NULL",  "~"};
  if (kWords.count(text) != 0) return true;
  const unsigned char first = static_cast<unsigned char>(text[0]);
  return std::isdigit(first) ||
         std::string_view("+-.:").find(text[0]) != std::string_view::npos;
}

// Writes `node` into a flow-style emitter: quoted scalars stay quoted, and
// with `quote_all` (a variable's value) a plain one is quoted unless YAML
// 1.1 may read it as a number, boolean or null (`0644`, octal 420 for
// GitLab, stays plain); a variable written as a mapping, `{value: x,
// expand: false}`, keeps its form, `!reference [...]` its tag. Aliases are
// written out in full. Callers refuse values deeper than kMaxDepth
// (NestsDeeperThan) first.
void EmitValue(YAML::Emitter& out, const YamlNode& node, bool quote_all,
               int depth = 0) {
  if (depth > kMaxDepth) {
    out << YAML::Null;
  } else if (node.IsMap()) {
    out << YAML::BeginMap;
    for (const auto& entry : node) {
      out << YAML::Key;
      EmitValue(out, entry.first, false, depth + 1);
      out << YAML::Value;
      EmitValue(out, entry.second, false, depth + 1);
    }
    out << YAML::EndMap;
  } else if (node.IsSequence()) {
    // GitLab's `!reference [job, key]` keeps its tag.
    if (node.Tag() == "!reference") out << YAML::LocalTag("reference");
    out << YAML::BeginSeq;
    for (const YamlNode& item : node) {
      EmitValue(out, item, quote_all && node.Tag() != "!reference", depth + 1);
    }
    out << YAML::EndSeq;
  } else if (node.IsScalar()) {
    if (!IsPlain(node) || (quote_all && !MayReadAsNonString(node.Scalar()))) {
      out << YAML::DoubleQuoted;
    }
    out << node.Scalar();
  } else {
    out << YAML::Null;
  }
}

// One entry `key: <flow value>` on one line at `indent`.
std::string FlowEntry(const std::string& indent, std::string_view key,
                      YAML::Emitter& value, const std::string& eol) {
  return absl::StrCat(indent, std::string(key), ": ", value.c_str(), eol);
}

// The plan for one job's rewrite.
class JobRewriter {
 public:
  // `effective`: the job's configuration as GitLab computes it (inherited
  // entries included), before the rewrite.
  JobRewriter(const Lines& lines, const std::string& job,
              const YamlNode& job_value, int job_end,
              const CiConfigModel::Effective& effective,
              const CiExpandOptions& options, Reporter* report)
      : lines_(lines),
        job_(job),
        job_value_(job_value),
        job_end_(job_end),
        effective_(effective),
        own_(ToCiValue(job_value)),
        options_(options),
        report_(report) {
    for (const auto& entry : job_value_) keys_.push_back(entry.first);
  }

  // The job inherits `variables` through extends from a parent where they
  // are a `!reference`, which GitLab does not merge with the job's own.
  void set_inherits_variables_by_reference(bool value) {
    inherits_variables_by_reference_ = value;
  }

  // Replaces the job's own entry `e` by `value` on one line (a job that is
  // no gang, whose entry is a `!reference` to a gang job's: `value` is
  // what the reference names before expansion).
  void WriteOut(const Entry& e, const CiValue& value,
                std::vector<Edit>* edits) {
    ReplaceWithValue(e, value, edits);
  }

  // Adds the edits for `spec` to `edits`; false after reporting.
  bool Plan(const GangSpec& spec, const Entry& parallel,
            std::vector<Edit>* edits) {
    const size_t errors_before = report_->count();
    if (!CheckMergeKeyOrder()) return false;
    const std::string& eol = lines_.eol;
    const std::string indent(static_cast<size_t>(parallel.key.Mark().column),
                             ' ');
    const std::string parallel_line =
        absl::StrCat(indent, "parallel: ", spec.nodes, eol);
    // The entries gdt adds to the job (after `parallel: N`, or after the
    // job's last merge key, which would override them).
    std::string text;

    const std::vector<std::pair<std::string, std::string>> variables =
        spec.Variables();
    if (const Entry e = FindEntry(job_value_, "variables");
        e && e.value.Tag() == "!reference") {
      CiValue merged = effective_.config.value("variables", CiValue::object());
      if (!merged.is_object()) merged = CiValue::object();
      for (const auto& [key, value] : variables) {
        if (merged.contains(key)) {
          report_->At(e.key, e.key,
                      absl::StrCat(job_, ": variables:", key,
                                   " is also set by parallel:distributed; "
                                   "set it in one place"));
        }
        merged[key] = value;
      }
      ReplaceWithValue(e, merged, edits);
    } else if (e) {
      CheckConflicts(e, variables);
      if (e.value.IsMap() || e.value.IsNull()) {
        MergeMap(e, variables, edits);
      } else {
        report_->At(e.value, e.key,
                    absl::StrCat(job_, ": variables must be a mapping, not ",
                                 Describe(e.value)));
      }
    } else {
      // Variables that come through a merge key (`<<: *tpl`) would be
      // replaced by a new entry: it repeats them. (Those from extends are
      // merged with the job's by GitLab.)
      absl::StrAppend(&text, indent, "variables:", eol);
      const YamlNode merged_node = MergedEntry(job_value_, "variables", 0);
      if (merged_node.IsMap() && !FindEntry(merged_node, "<<")) {
        // Written as they are written there (a !reference stays one, a
        // plain 0644 stays the number YAML 1.1 reads).
        for (const auto& entry : merged_node) {
          YAML::Emitter key;
          YAML::Emitter value;
          key << YAML::Flow;
          value << YAML::Flow;
          EmitValue(key, entry.first, false);
          EmitValue(value, entry.second, true);
          absl::StrAppend(&text, indent, "  ", key.c_str(), ": ", value.c_str(),
                          eol);
        }
      } else if (const auto merged = own_.find("variables");
                 merged != own_.end() && merged->is_object()) {
        for (const auto& [key, value] : merged->items()) {
          absl::StrAppend(&text, indent, "  ", FlowText(CiValue(key)), ": ",
                          FlowText(value), eol);
        }
      } else if (const auto inherited = effective_.config.find("variables");
                 inherits_variables_by_reference_ &&
                 inherited != effective_.config.end() &&
                 inherited->is_object()) {
        // A parent's `variables: !reference [...]` would be replaced by the
        // new entry (GitLab merges extends before it resolves references):
        // it repeats the variables the reference names.
        for (const auto& [key, value] : inherited->items()) {
          absl::StrAppend(&text, indent, "  ", FlowText(CiValue(key)), ": ",
                          FlowText(value), eol);
        }
      }
      for (const auto& [key, value] : variables) {
        absl::StrAppend(&text, indent, "  ", key, ": ", Quoted(value), eol);
      }
    }

    if (!options_.runner_tag.empty()) {
      if (const Entry e = FindEntry(job_value_, "tags");
          e && e.value.Tag() == "!reference") {
        // The list it names, resolved, plus gdt's tag.
        CiValue tags = effective_.config.value("tags", CiValue::array());
        if (!tags.is_array()) tags = CiValue::array();
        if (std::find(tags.begin(), tags.end(), CiValue(options_.runner_tag)) ==
            tags.end()) {
          tags.push_back(options_.runner_tag);
        }
        ReplaceWithValue(e, tags, edits);
      } else if (e && e.value.IsNull() && !effective_.Known("tags")) {
        Unknown("tags");
      } else if (const auto defaults = effective_.config.find("tags");
                 e && e.value.IsNull() && defaults != effective_.config.end() &&
                 defaults->is_array()) {
        // `tags:` with no value is unspecified for GitLab: the job takes
        // default's, which are kept.
        CiValue tags = *defaults;
        if (std::find(tags.begin(), tags.end(), CiValue(options_.runner_tag)) ==
            tags.end()) {
          tags.push_back(options_.runner_tag);
        }
        ReplaceWithValue(e, tags, edits);
      } else if (e) {
        if (e.value.IsSequence() || e.value.IsNull()) {
          AppendTag(e, edits);
        } else {
          report_->At(e.value, e.key,
                      absl::StrCat(job_, ": tags must be a list, not ",
                                   Describe(e.value)));
        }
      } else if (!effective_.Known("tags")) {
        Unknown("tags");
      } else if (const auto inherited = effective_.config.find("tags");
                 inherited != effective_.config.end() &&
                 !inherited->is_null()) {
        // Inherited tags would be replaced by a new entry: it repeats them.
        if (!inherited->is_array()) {
          report_->At(
              job_value_, job_value_,
              absl::StrCat(job_, ": its inherited tags are not a list"));
        } else if (std::find(inherited->begin(), inherited->end(),
                             CiValue(options_.runner_tag)) ==
                   inherited->end()) {
          absl::StrAppend(&text, indent, "tags:", eol);
          for (const CiValue& tag : *inherited) {
            absl::StrAppend(&text, indent, "  - ", FlowText(tag), eol);
          }
          absl::StrAppend(&text, indent, "  - ", TagText(options_.runner_tag),
                          eol);
        }
      } else {
        absl::StrAppend(&text, indent, "tags:", eol, indent, "  - ",
                        TagText(options_.runner_tag), eol);
      }
    }

    // A job's own retry wins, inherited or not; docs/user-guide.md explains
    // the default.
    if (!FindEntry(job_value_, "retry")) {
      if (!effective_.Known("retry")) {
        Unknown("retry");
      } else if (!effective_.config.contains("retry") ||
                 effective_.config["retry"].is_null()) {
        // Every member must be retried alike: a gang re-forms (as its next
        // epoch) only when all of its members come back.
        absl::StrAppend(&text, indent, "retry:", eol, indent, "  max: 2", eol,
                        indent,
                        "  when: [runner_system_failure, script_failure]", eol);
      }
    }

    if (spec.checkpoint_store == "artifacts") {
      PlanArtifacts(indent, &text, edits);
    }

    if (!unknown_keys_.empty()) {
      const std::string keys = absl::StrJoin(unknown_keys_, ", ");
      report_->At(
          job_value_, job_value_,
          absl::StrCat(job_, ": ", effective_.unknown,
                       ", so gdt cannot see whether it inherits ", keys,
                       "; give the job its own ", keys, " (gdt adds to them)",
                       effective_.inherit_default_suffices
                           ? ", or `inherit: {default: false}`"
                           : ""));
    }
    const auto [begin, end] = EntryRange(parallel.key);
    // Ruby's YAML reader applies a merge key (`<<: *tpl`) where it stands:
    // it overrides the keys written before it. Added entries go after the
    // last one, so that they win as they would written above it.
    YamlNode last_merge;
    for (const YamlNode& key : keys_) {
      if (IsMergeKey(key) && key.Mark().line > parallel.key.Mark().line) {
        last_merge = key;
      }
    }
    if (last_merge && !text.empty()) {
      edits->push_back(Edit{begin, end, parallel_line});
      const int at = EntryRange(last_merge).second;
      edits->push_back(Edit{at, at, std::move(text)});
    } else {
      edits->push_back(Edit{begin, end, parallel_line + text});
    }
    return report_->count() == errors_before;
  }

 private:
  static bool IsMergeKey(const YamlNode& key) {
    return key.IsScalar() && key.IsPlain() && key.Scalar() == "<<";
  }

  // A merge key written after the job's own parallel, variables, tags or
  // artifacts that merges in the same key replaces them in GitLab (Ruby
  // applies `<<` where it stands), so gdt's block or additions would be
  // lost. False after reporting.
  bool CheckMergeKeyOrder() {
    bool ok = true;
    for (size_t i = 0; i < job_value_.size(); ++i) {
      const YamlNode key = job_value_.Entry(i).first;
      if (!key.IsScalar() || IsMergeKey(key)) continue;
      const std::string& name = key.Scalar();
      if (name != "parallel" && name != "variables" && name != "tags" &&
          name != "artifacts") {
        continue;
      }
      for (size_t j = i + 1; j < job_value_.size(); ++j) {
        const auto [merge, merged] = job_value_.Entry(j);
        if (!IsMergeKey(merge) || !MergeSets(merged, name)) continue;
        report_->At(
            merge, merge,
            absl::StrCat(job_,
                         ": the merge key `<<:` here, written after the "
                         "job's own ",
                         name, " (line ", key.Mark().line + 1, "), replaces ",
                         name == "parallel"
                             ? "its parallel:distributed block"
                             : absl::StrCat("them and what gdt adds to them"),
                         " (a YAML merge key overrides the keys written "
                         "before it); move `<<:` above the job's own keys"));
        ok = false;
        break;
      }
    }
    return ok;
  }

  // Whether merge value `merged` (a mapping, or a list of them) sets `key`.
  static bool MergeSets(const YamlNode& merged, const std::string& key) {
    const CiValue value = ToCiValue(merged);
    if (value.is_object()) return value.contains(key);
    if (value.is_array()) {
      for (const CiValue& item : value) {
        if (item.is_object() && item.contains(key)) return true;
      }
    }
    return false;
  }

  // Lines [begin, end) of the entry whose key is `key`.
  std::pair<int, int> EntryRange(const YamlNode& key) const {
    const int begin = key.Mark().line;
    int end = job_end_;
    for (const YamlNode& other : keys_) {
      if (other.Mark().line > begin) end = std::min(end, other.Mark().line);
    }
    return {begin, TrimEnd(lines_, begin, end, key.Mark().column)};
  }

  // Whether `e`'s value is written in block style below its key, with
  // nothing (no anchor, tag or alias) after the colon.
  bool IsBlockBelowKey(const Entry& e) const {
    return RestOfKeyLine(lines_, e.key).empty() &&
           e.value.Mark().line > e.key.Mark().line && !e.value.IsFlow();
  }

  // An anchor or tag on the value: rewriting it would change other jobs.
  bool HasAnchorOrTag(const Entry& e) const {
    const std::string rest = RestOfKeyLine(lines_, e.key);
    return !rest.empty() && (rest[0] == '&' || rest[0] == '!');
  }

  void CheckConflicts(
      const Entry& e,
      const std::vector<std::pair<std::string, std::string>>& variables) {
    if (!e.value.IsMap()) return;
    for (const auto& entry : e.value) {
      if (!entry.first.IsScalar()) continue;
      const std::string& name = entry.first.Scalar();
      if (name == "GDT_NODES_MIN" || name == "GDT_NODES_MAX") {
        // Written by the block only for a range, and then a conflict below.
        if (std::none_of(variables.begin(), variables.end(),
                         [&](const auto& v) { return v.first == name; })) {
          report_->At(entry.first, e.key,
                      absl::StrCat(job_, ": variables:", name,
                                   " is what parallel:distributed's nodes: "
                                   "min..max sets; write the range there"));
        }
      }
      for (const auto& [key, value] : variables) {
        if (entry.first.Scalar() == key) {
          report_->At(entry.first, e.key,
                      absl::StrCat(job_, ": variables:", key,
                                   " is also set by parallel:distributed; "
                                   "set it in one place"));
        }
      }
    }
  }

  // An entry gdt would write out again whose value nests deeper than it
  // walks: reported, since the deepest levels would be lost.
  bool TooDeepToRewrite(const Entry& e) {
    if (!NestsDeeperThan(e.value, kMaxDepth)) return false;
    report_->At(e.key, e.key,
                absl::StrCat(job_, ": cannot rewrite ", e.key.Scalar(),
                             ": a value in it nests more than ", kMaxDepth,
                             " levels deep"));
    return true;
  }

  void RejectAnchor(const Entry& e) {
    report_->At(e.key, e.key,
                absl::StrCat(job_, ": ", e.key.Scalar(),
                             " carries an anchor or tag that other jobs may "
                             "share; gdt will not change it (give this job "
                             "its own ",
                             e.key.Scalar(), " entry)"));
  }

  void MergeMap(const Entry& e,
                const std::vector<std::pair<std::string, std::string>>& add,
                std::vector<Edit>* edits) {
    const std::string& eol = lines_.eol;
    if (HasAnchorOrTag(e)) return RejectAnchor(e);
    if (e.value.IsMap() && e.value.size() > 0 && IsBlockBelowKey(e) &&
        !EndsWithKeptScalar(lines_, e.value)) {
      const YamlMark first = e.value.Entry(0).first.Mark();
      const std::string indent(static_cast<size_t>(first.column), ' ');
      std::string text;
      for (const auto& [key, value] : add) {
        absl::StrAppend(&text, indent, key, ": ", Quoted(value), eol);
      }
      const int at = EntryRange(e.key).second;
      edits->push_back(Edit{at, at, std::move(text)});
      return;
    }
    if (e.value.IsMap() && e.value.IsFlow()) {
      std::vector<std::string> items;
      for (const auto& [key, value] : add) {
        items.push_back(absl::StrCat(key, ": ", Quoted(value)));
      }
      if (InsertIntoFlow(e, items, edits)) return;
    }
    // An alias or empty: the entry becomes one flow mapping.
    YAML::Emitter flow;
    flow << YAML::Flow << YAML::BeginMap;
    if (e.value.IsMap()) {
      for (const auto& entry : e.value) {
        flow << YAML::Key;
        EmitValue(flow, entry.first, false);
        flow << YAML::Value;
        // `VAR: {value: x, description: y}` keeps its form.
        EmitValue(flow, entry.second, true);
      }
    }
    for (const auto& [key, value] : add) {
      flow << YAML::Key << key << YAML::Value << YAML::DoubleQuoted << value;
    }
    flow << YAML::EndMap;
    ReplaceEntry(e, flow, edits);
  }

  void AppendTag(const Entry& e, std::vector<Edit>* edits) {
    const std::string& tag = options_.runner_tag;
    if (e.value.IsSequence()) {
      for (const YamlNode& item : e.value) {
        if (item.IsScalar() && item.Scalar() == tag) return;
      }
    }
    if (HasAnchorOrTag(e)) return RejectAnchor(e);
    if (e.value.IsSequence() && e.value.size() > 0 && IsBlockBelowKey(e) &&
        !EndsWithKeptScalar(lines_, e.value)) {
      const YamlMark first = e.value.Item(0).Mark();
      const std::string_view line =
          lines_.lines[static_cast<size_t>(first.line)];
      const size_t dash = FirstNonSpace(line);
      if (dash != std::string::npos && line[dash] == '-') {
        const int at = EntryRange(e.key).second;
        edits->push_back(Edit{at, at,
                              absl::StrCat(std::string(dash, ' '), "- ",
                                           TagText(tag), lines_.eol)});
        return;
      }
    }
    if (e.value.IsSequence() && e.value.IsFlow() &&
        InsertIntoFlow(e, {TagText(tag)}, edits)) {
      return;
    }
    YAML::Emitter flow;
    flow << YAML::Flow << YAML::BeginSeq;
    if (e.value.IsSequence()) {
      for (const YamlNode& item : e.value) EmitValue(flow, item, false);
    }
    if (TagText(tag) != tag) flow << YAML::DoubleQuoted;
    flow << tag << YAML::EndSeq;
    ReplaceEntry(e, flow, edits);
  }

  // The line of `mark` and the byte offset in it of its column (libyaml
  // counts characters).
  std::pair<int, size_t> BytePlace(const YamlMark& mark) const {
    return {mark.line, ByteColumn(lines_.lines[static_cast<size_t>(mark.line)],
                                  mark.column)};
  }

  // Adds `items` (flow entries or items, as text) to the flow collection
  // of `e` written in place, right after its last entry: every byte of
  // what is there stays (anchors, tags such as !reference, scalars as
  // written, which YAML 1.1 may read as numbers). False when the
  // collection is not laid out so (the caller rewrites it).
  bool InsertIntoFlow(const Entry& e, const std::vector<std::string>& items,
                      std::vector<Edit>* edits) {
    const YamlNode& node = e.value;
    const YamlMark open = node.Mark();
    const YamlMark close = node.EndMark();
    if (open.is_null() || close.is_null() || open.pos <= e.key.EndMark().pos ||
        items.empty()) {
      return false;  // An alias: the collection is written elsewhere.
    }
    const auto inside = [&](const YamlNode& n) {
      return n && !n.Mark().is_null() && n.Mark().pos > open.pos &&
             n.EndMark().pos < close.pos;
    };
    std::pair<int, size_t> at;
    std::string text = absl::StrJoin(items, ", ");
    if (node.size() == 0) {
      at = BytePlace(open);
      ++at.second;  // After the bracket.
    } else {
      const YamlNode last_key =
          node.IsMap() ? node.Entry(node.size() - 1).first : YamlNode();
      const YamlNode last = node.IsMap() ? node.Entry(node.size() - 1).second
                                         : node.Item(node.size() - 1);
      if (inside(last) && !last.IsNull()) {
        at = BytePlace(last.EndMark());
      } else if (node.IsMap() && inside(last_key)) {
        // An alias or an empty value: the alias (`*name`) or the colon
        // follows the key on its line.
        at = BytePlace(last_key.EndMark());
        const std::string_view line =
            lines_.lines[static_cast<size_t>(at.first)];
        size_t p = at.second;
        while (p < line.size() && line[p] == ' ') ++p;
        if (p < line.size() && line[p] == ':') {
          at.second = ++p;
          while (p < line.size() && line[p] == ' ') ++p;
          if (p < line.size() && line[p] == '*') {
            while (p < line.size() &&
                   std::string_view(" \t\r\n,]}").find(line[p]) ==
                       std::string_view::npos) {
              ++p;
            }
            at.second = p;
          }
        }
      } else {
        return false;
      }
      text = absl::StrCat(", ", text);
    }
    const std::string_view line = lines_.lines[static_cast<size_t>(at.first)];
    if (at.second > line.size()) return false;
    // `A:,` would read as the key "A:".
    if (at.second > 0 && line[at.second - 1] == ':') text.insert(0, " ");
    edits->push_back(
        Edit{at.first, at.first + 1,
             absl::StrCat(std::string(line.substr(0, at.second)), text,
                          std::string(line.substr(at.second)))});
    return true;
  }

  // Notes that `key` may be inherited from where gdt cannot see; Plan
  // reports all such keys in one line.
  void Unknown(std::string_view key) { unknown_keys_.emplace_back(key); }

  // The job's effective artifacts with checkpoints/ and `when: always`
  // added (unless it has its own `when`).
  CiValue ArtifactsWithCheckpoints() const {
    CiValue artifacts = CiValue::object();
    if (const auto found = effective_.config.find("artifacts");
        found != effective_.config.end() && found->is_object()) {
      artifacts = *found;
    }
    CiValue& paths = artifacts["paths"];
    if (paths.is_string()) paths = CiValue::array({paths});
    if (!paths.is_array()) paths = CiValue::array();
    if (std::find(paths.begin(), paths.end(), CiValue(kCheckpointPath)) ==
        paths.end()) {
      paths.push_back(kCheckpointPath);
    }
    if (!artifacts.contains("when") || artifacts["when"].is_null()) {
      artifacts["when"] = "always";
    }
    return artifacts;
  }

  void PlanArtifacts(const std::string& indent, std::string* text,
                     std::vector<Edit>* edits) {
    const std::string& eol = lines_.eol;
    const Entry e = FindEntry(job_value_, "artifacts");
    // A `!reference` names a mapping elsewhere (in the effective
    // configuration, resolved): it is replaced below like an inherited one.
    if (e && !e.value.IsMap() && !e.value.IsNull() &&
        e.value.Tag() != "!reference") {
      report_->At(e.value, e.key,
                  absl::StrCat(job_, ": artifacts must be a mapping, not ",
                               Describe(e.value)));
      return;
    }
    if (!effective_.Known("artifacts")) {
      // Only a job whose own artifacts name paths and when is safe: an
      // unseen parent's would be merged into them.
      const CiValue own = e ? ToCiValue(e.value) : CiValue();
      if (!own.is_object() || !own.contains("paths") || !own.contains("when")) {
        Unknown("artifacts");
        return;
      }
      MergeArtifacts(e, edits);
      return;
    }
    const auto found = effective_.config.find("artifacts");
    const bool inherited = found != effective_.config.end() &&
                           found->is_object() &&
                           (!e || ToCiValue(e.value) != *found);
    if (e && !inherited) {
      MergeArtifacts(e, edits);
      return;
    }
    if (!inherited) {
      absl::StrAppend(text, indent, "artifacts:", eol, indent, "  paths:", eol,
                      indent, "    - ", kCheckpointPath, eol, indent,
                      "  when: always", eol);
      return;
    }
    // Inherited (merge key, extends, default): the job's own entry becomes
    // the whole effective mapping plus gdt's additions, which is what GitLab
    // computes either way.
    const std::string line =
        absl::StrCat("artifacts: ", FlowText(ArtifactsWithCheckpoints()), eol);
    if (!e) {
      absl::StrAppend(text, indent, line);
      return;
    }
    ReplaceWithValue(e, ArtifactsWithCheckpoints(), edits);
  }

  // Replaces entry `e` by `key: <value>` on one line; refused when the
  // value carries an anchor (other jobs may share it).
  void ReplaceWithValue(const Entry& e, const CiValue& value,
                        std::vector<Edit>* edits) {
    if (TooDeepToRewrite(e)) return;
    const std::string rest = RestOfKeyLine(lines_, e.key);
    if (!rest.empty() && rest[0] == '&') return RejectAnchor(e);
    if (e.key.Mark().column !=
        static_cast<int>(FirstNonSpace(
            lines_.lines[static_cast<size_t>(e.key.Mark().line)]))) {
      report_->At(e.key, e.key,
                  absl::StrCat(job_, ": cannot rewrite ", e.key.Scalar(),
                               " in place; write it as a block mapping"));
      return;
    }
    const auto [begin, end] = EntryRange(e.key);
    edits->push_back(Edit{
        begin, end,
        absl::StrCat(std::string(static_cast<size_t>(e.key.Mark().column), ' '),
                     e.key.Scalar(), ": ", FlowText(value), lines_.eol)});
  }

  // Block-style artifacts keep their style and comments: gdt adds a
  // `- checkpoints/` line to a block `paths` list (or a `paths` entry) and a
  // `when: always` line.
  bool AppendToBlockArtifacts(const Entry& e, std::vector<Edit>* edits) {
    if (!IsBlockBelowKey(e) || e.value.size() == 0 ||
        EndsWithKeptScalar(lines_, e.value)) {
      return false;
    }
    const int artifacts_end = EntryRange(e.key).second;
    std::vector<YamlNode> keys;
    for (const auto& entry : e.value) keys.push_back(entry.first);
    const int column = keys[0].Mark().column;
    const auto sub_range = [&](const YamlNode& key) {
      int end = artifacts_end;
      for (const YamlNode& other : keys) {
        if (other.Mark().line > key.Mark().line) {
          end = std::min(end, other.Mark().line);
        }
      }
      return TrimEnd(lines_, key.Mark().line, end, key.Mark().column);
    };
    for (const YamlNode& key : keys) {
      if (key.Mark().column != column ||
          key.Mark().column !=
              static_cast<int>(FirstNonSpace(
                  lines_.lines[static_cast<size_t>(key.Mark().line)]))) {
        return false;
      }
    }
    const std::string indent(static_cast<size_t>(column), ' ');
    const std::string& eol = lines_.eol;
    const Entry paths = FindEntry(e.value, "paths");
    const Entry when = FindEntry(e.value, "when");
    std::vector<Edit> planned;
    if (paths) {
      bool present = false;
      if (paths.value.IsSequence()) {
        for (const YamlNode& path : paths.value) {
          present =
              present || (path.IsScalar() && path.Scalar() == kCheckpointPath);
        }
      }
      if (!present) {
        if (!paths.value.IsSequence() || paths.value.size() == 0 ||
            !IsBlockBelowKey(paths)) {
          return false;
        }
        const std::string_view first_line =
            lines_.lines[static_cast<size_t>(paths.value.Item(0).Mark().line)];
        const size_t dash = FirstNonSpace(first_line);
        if (dash == std::string::npos || first_line[dash] != '-') return false;
        const int at = sub_range(paths.key);
        planned.push_back(Edit{
            at, at,
            absl::StrCat(std::string(dash, ' '), "- ", kCheckpointPath, eol)});
      }
    }
    std::string tail;
    if (!paths) {
      absl::StrAppend(&tail, indent, "paths:", eol, indent, "  - ",
                      kCheckpointPath, eol);
    }
    if (!when) absl::StrAppend(&tail, indent, "when: always", eol);
    if (!tail.empty())
      planned.push_back(Edit{artifacts_end, artifacts_end, tail});
    for (Edit& edit : planned) edits->push_back(std::move(edit));
    return true;
  }

  void MergeArtifacts(const Entry& e, std::vector<Edit>* edits) {
    if (HasAnchorOrTag(e)) return RejectAnchor(e);
    if (AppendToBlockArtifacts(e, edits)) return;
    YAML::Emitter flow;
    flow << YAML::Flow << YAML::BeginMap;
    bool have_paths = false;
    bool have_when = false;
    for (const auto& entry : e.value) {
      const std::string key =
          entry.first.IsScalar() ? entry.first.Scalar() : std::string();
      flow << YAML::Key;
      EmitValue(flow, entry.first, false);
      flow << YAML::Value;
      if (key == "paths") {
        have_paths = true;
        flow << YAML::BeginSeq;
        bool present = false;
        if (entry.second.IsSequence()) {
          for (const YamlNode& path : entry.second) {
            EmitValue(flow, path, false);
            present = present ||
                      (path.IsScalar() && path.Scalar() == kCheckpointPath);
          }
        } else if (entry.second.IsScalar()) {
          EmitValue(flow, entry.second, false);
        }
        if (!present) flow << kCheckpointPath;
        flow << YAML::EndSeq;
      } else {
        have_when = have_when || key == "when";
        EmitValue(flow, entry.second, false);
      }
    }
    if (!have_paths) {
      flow << YAML::Key << "paths" << YAML::Value << YAML::BeginSeq
           << kCheckpointPath << YAML::EndSeq;
    }
    if (!have_when) flow << YAML::Key << "when" << YAML::Value << "always";
    flow << YAML::EndMap;
    ReplaceEntry(e, flow, edits);
  }

  void ReplaceEntry(const Entry& e, YAML::Emitter& flow,
                    std::vector<Edit>* edits) {
    if (TooDeepToRewrite(e)) return;
    if (!flow.good() ||
        e.key.Mark().column !=
            static_cast<int>(FirstNonSpace(
                lines_.lines[static_cast<size_t>(e.key.Mark().line)]))) {
      report_->At(e.key, e.key,
                  absl::StrCat(job_, ": cannot rewrite ", e.key.Scalar(),
                               " in place; write it as a block mapping"));
      return;
    }
    const auto [begin, end] = EntryRange(e.key);
    const std::string indent(static_cast<size_t>(e.key.Mark().column), ' ');
    edits->push_back(
        Edit{begin, end, FlowEntry(indent, e.key.Scalar(), flow, lines_.eol)});
  }

  const Lines& lines_;
  const std::string& job_;
  const YamlNode& job_value_;
  const int job_end_;
  const CiConfigModel::Effective& effective_;
  const CiValue own_;  // The job's own entries, merge keys applied.
  bool inherits_variables_by_reference_ = false;
  std::vector<std::string> unknown_keys_;
  const CiExpandOptions& options_;
  Reporter* report_;
  std::vector<YamlNode> keys_;
};

// Checks that `text` (the expansion) reads back as planned.
// `unresolved` (when given) is set instead when `text` uses an alias it does
// not define (a job read on its own).
// `tag_inherited`: jobs that carry no tags of their own since the ones
// they inherit (extends, default:) hold the runner tag already.
bool ReadsBack(const std::string& text,
               const std::vector<const GangSpec*>& gangs,
               const CiExpandOptions& options,
               const std::unordered_set<std::string>& tag_inherited,
               bool* unresolved = nullptr) {
  YamlError error;
  const std::unique_ptr<YamlTree> tree = YamlTree::Parse(text, &error);
  if (unresolved != nullptr) {
    *unresolved = error.message.rfind("unknown alias", 0) == 0;
  }
  if (!error.message.empty()) return false;
  // Every top-level entry by name (a later document's wins, as GitLab
  // merges them), so that checking all jobs stays linear.
  std::unordered_map<std::string, YamlNode> jobs;
  for (const YamlNode& root : tree->documents()) {
    for (const auto& entry : root) {
      if (entry.first.IsScalar()) jobs[entry.first.Scalar()] = entry.second;
    }
  }
  for (const GangSpec* gang : gangs) {
    const GangSpec& spec = *gang;
    const auto found = jobs.find(spec.job);
    if (found == jobs.end() || !found->second.IsMap()) return false;
    // The job as GitLab reads it: merge keys applied where they stand.
    const CiValue job = ToCiValue(found->second);
    const auto parallel = job.find("parallel");
    if (parallel == job.end() || !parallel->is_number_integer() ||
        parallel->get<int64_t>() != spec.nodes) {
      return false;
    }
    const auto variables = job.find("variables");
    for (const auto& [key, value] : spec.Variables()) {
      if (variables == job.end() || !variables->is_object()) return false;
      const auto v = variables->find(key);
      if (v == variables->end() || !v->is_string() ||
          v->get<std::string>() != value) {
        return false;
      }
    }
    const auto contains = [&](const char* key, const char* sub,
                              const std::string& item) {
      auto list = job.find(key);
      if (list == job.end()) return false;
      if (sub != nullptr) {
        if (!list->is_object()) return false;
        const auto inner = list->find(sub);
        if (inner == list->end()) return false;
        list = inner;
      }
      return list->is_array() && std::find(list->begin(), list->end(),
                                           CiValue(item)) != list->end();
    };
    if (!options.runner_tag.empty() &&
        !(tag_inherited.count(spec.job) != 0 && !job.contains("tags")) &&
        !contains("tags", nullptr, options.runner_tag)) {
      return false;
    }
    if (spec.checkpoint_store == "artifacts" &&
        !contains("artifacts", "paths", kCheckpointPath)) {
      return false;
    }
  }
  return true;
}

// What the configuration GitLab computes for a gang job of the expanded
// file (`after`: after extends, merge keys and default:) lacks of the gang
// its block describes (`spec`, from the job's block as GitLab would merge
// it before expansion); "" when it carries it all. `own_variables` are the
// job's own (a plain GDT_* value of the job's own overrides on purpose).
// Expand writes a gang's settings into the entry that holds its block, a
// template when jobs inherit the block, and whatever else such a job
// inherits can replace them: another parent later in its extends list, or
// default: where the template lacks a key but the job's inherit: differs.
std::string MissingAfterExpansion(const CiConfigModel::Effective& before,
                                  const CiConfigModel::Effective& after,
                                  const GangSpec& spec,
                                  const CiValue& own_variables,
                                  const CiExpandOptions& options) {
  const CiValue& job = after.config;
  const auto known = [&](const char* key) {
    return after.Known(key) && after.unresolved.count(key) == 0 &&
           before.Known(key) && before.unresolved.count(key) == 0;
  };
  // The strings of list `key` (of mapping `key`'s `sub`) in `config`: none
  // when it is absent; nullopt when it is not a list of strings.
  const auto items =
      [](const CiValue& config, const char* key,
         const char* sub) -> std::optional<std::set<std::string>> {
    const CiValue* at = &config;
    for (const char* name : {key, sub}) {
      if (name == nullptr) break;
      if (!at->is_object()) return std::set<std::string>();
      const auto found = at->find(name);
      if (found == at->end() || found->is_null()) {
        return std::set<std::string>();
      }
      at = &*found;
    }
    if (!at->is_array()) return std::nullopt;
    std::set<std::string> out;
    for (const CiValue& item : *at) {
      if (!item.is_string()) return std::nullopt;
      out.insert(item.get<std::string>());
    }
    return out;
  };
  // Expansion adds `added` to the list and changes nothing else.
  const auto only_adds = [&](const char* key, const char* sub,
                             const std::string& added) -> std::string {
    std::optional<std::set<std::string>> was = items(before.config, key, sub);
    const std::optional<std::set<std::string>> is =
        items(after.config, key, sub);
    if (!was.has_value() || !is.has_value()) return "";
    if (!added.empty()) was->insert(added);
    if (*was == *is) return "";
    const auto shown = [](const std::set<std::string>& set) {
      std::vector<std::string> quoted;
      for (const std::string& item : set) quoted.push_back(Shown(item));
      return absl::StrCat("[", absl::StrJoin(quoted, ", "), "]");
    };
    return absl::StrCat("has ", key, sub == nullptr ? "" : ":",
                        sub == nullptr ? "" : sub, " ", shown(*is), ", not ",
                        shown(*was));
  };
  if (known("parallel")) {
    const auto parallel = job.find("parallel");
    if (parallel == job.end() || !parallel->is_number_integer() ||
        parallel->get<int64_t>() != spec.nodes) {
      return absl::StrCat(
          "has parallel: ", parallel == job.end() ? "none" : parallel->dump(),
          ", not ", spec.nodes);
    }
  }
  if (known("variables")) {
    const auto variables = job.find("variables");
    for (const auto& [name, value] : spec.Variables()) {
      // Checked below against the retry it ends up with.
      if (name == "GDT_PREEMPT_RETRIES") continue;
      if (own_variables.is_object() && own_variables.contains(name)) continue;
      std::string got = "unset";
      if (variables != job.end() && variables->is_object()) {
        const auto v = variables->find(name);
        if (v != variables->end()) {
          got = v->is_string() ? Shown(v->get<std::string>()) : v->dump();
        }
      }
      if (got != Shown(value)) {
        return absl::StrCat("has ", name, " ", got, ", not ", Shown(value),
                            " as its parallel:distributed block says");
      }
    }
  }
  // Its tags, and with checkpoints in artifacts its artifact paths, are
  // what GitLab would give it without gdt plus what gdt adds.
  if (known("tags")) {
    if (std::string wrong = only_adds("tags", nullptr, options.runner_tag);
        !wrong.empty()) {
      return wrong;
    }
  }
  if (spec.checkpoint_store == "artifacts" && known("artifacts")) {
    if (std::string wrong = only_adds("artifacts", "paths", kCheckpointPath);
        !wrong.empty()) {
      return wrong;
    }
  }
  if (spec.preemptible && known("retry") && known("variables")) {
    const auto variables = job.find("variables");
    int64_t promised = 0;
    if (variables != job.end() && variables->is_object()) {
      const auto v = variables->find("GDT_PREEMPT_RETRIES");
      if (v != variables->end() && v->is_string()) {
        promised = std::atoll(v->get<std::string>().c_str());
      }
    }
    const auto retry = job.find("retry");
    const int retries = retry == job.end() || retry->is_null()
                            ? 0
                            : PreemptRetries(spec.job, job);
    if (retries != promised) {
      return absl::StrCat("has a retry: that brings a preempted job back ",
                          retries, " times, while GDT_PREEMPT_RETRIES says ",
                          promised);
    }
  }
  return "";
}

// Each job of the main file (`documents`) that runs as a gang, by its own
// block or one it inherits, read again in the `expanded` text as GitLab
// will merge it: what it lacks of its gang is an error at the job. `files`
// are the configuration's files as `model` read them, the main file last.
void CheckGangsAfterExpansion(const std::string& expanded,
                              const std::vector<YamlNode>& documents,
                              std::vector<std::vector<YamlNode>> files,
                              const CiConfigModel& model,
                              const CiExpandOptions& options,
                              Reporter* report) {
  YamlError error;
  const std::unique_ptr<YamlTree> tree = YamlTree::Parse(expanded, &error);
  if (tree == nullptr || !error.message.empty()) return;  // Reported later.
  files.back() = tree->documents();
  const CiConfigModel after =
      options.includes == nullptr
          ? CiConfigModel(files.back())
          : CiConfigModel(files, options.includes->unseen,
                          options.includes->unseen_over_seen);
  std::unordered_set<std::string> seen;
  // A later document's job is the one GitLab keeps.
  for (auto root = documents.rbegin(); root != documents.rend(); ++root) {
    for (const auto& entry : *root) {
      const YamlNode& key = entry.first;
      const YamlNode& value = entry.second;
      if (!key.IsScalar() || !value.IsMap()) continue;
      const std::string& job = key.Scalar();
      if (job.empty() || job[0] == '.' || IsCiKeyword(job) ||
          !seen.insert(job).second) {
        continue;
      }
      // Its block alone first (cheap): most jobs are not gangs.
      static const std::vector<std::string> kParallel = {"parallel"};
      const absl::StatusOr<CiConfigModel::Effective> block =
          model.Resolve(job, kParallel);
      if (!block.ok()) continue;
      const auto parallel = block->config.find("parallel");
      if (parallel == block->config.end()) continue;
      std::vector<CiDiagnostic> ignored;  // Reported where the block is.
      const std::optional<GangSpec> spec =
          SpecOfValue(job, *parallel, options, &ignored);
      if (!spec.has_value()) continue;
      const absl::StatusOr<CiConfigModel::Effective> before =
          model.Resolve(job, InspectedKeys());
      if (!before.ok()) continue;
      const absl::StatusOr<CiConfigModel::Effective> now =
          after.Resolve(job, InspectedKeys());
      if (!now.ok()) continue;
      const Entry own = FindEntry(value, "variables");
      const std::string missing = MissingAfterExpansion(
          *before, *now, *spec, own ? ToCiValue(own.value) : CiValue(),
          options);
      if (missing.empty()) continue;
      report->At(
          key, key,
          absl::StrCat(
              Shown(job), ": once expanded, GitLab would give this job what ",
              "it inherits merged so that it ", missing,
              ": gdt writes a gang's settings where its parallel:distributed "
              "block is, and something else this job has or inherits (its own "
              "entries, a merge key, another parent in its extends list, "
              "default: under another inherit:, a second block) replaces "
              "them; give the job the block itself, or that setting with "
              "gdt's part in it"));
    }
  }
}

// "UTF-16 (...)" when `text` is not UTF-8 but UTF-16 or UTF-32 (a
// byte-order mark, or the zero bytes of ASCII text in them), else "".
std::string OtherEncoding(std::string_view text) {
  const auto starts = [&](std::string_view prefix) {
    return text.substr(0, prefix.size()) == prefix;
  };
  using namespace std::string_view_literals;
  if (starts("\x00\x00\xfe\xff"sv) || starts("\xff\xfe\x00\x00"sv)) {
    return "UTF-32 (it starts with a UTF-32 byte-order mark)";
  }
  if (starts("\xfe\xff"sv) || starts("\xff\xfe"sv)) {
    return "UTF-16 (it starts with a UTF-16 byte-order mark)";
  }
  if (text.size() >= 2 && (text[0] == '\0') != (text[1] == '\0')) {
    return "UTF-16 (every other byte of its first characters is zero)";
  }
  return "";
}

// Bytes that YAML forbids or that readers take differently from GitLab:
// bytes that are not UTF-8, NUL and other control characters, carriage
// returns inside a line. The first is named with its place, and a count of
// the other lines with such bytes follows in the same line, so a binary file
// given by mistake is one line, not one per line of it. (Tabs are checked
// only where the file does not parse: inside a block scalar, `|` or `>`, a
// tab after the indentation is content, e.g. a Makefile recipe, for
// GitLab's reader too.)
void CheckCharacters(const Lines& lines, Reporter* report) {
  int first_line = 0;
  int first_column = 0;
  std::string what;  // The first one, "<what>; <hint>".
  std::string hint;
  bool binary = false;  // A NUL byte or a byte that is not UTF-8 seen.
  int more = 0;
  for (size_t i = 0; i < lines.lines.size(); ++i) {
    const std::string_view line = lines.lines[i];
    size_t at = std::string_view::npos;
    std::string line_what;
    std::string line_hint;
    for (size_t c = 0; c < line.size(); ++c) {
      const unsigned char u = static_cast<unsigned char>(line[c]);
      if ((u < 0x20 && u != '\t' && u != '\r' && u != '\n') || u == 0x7f) {
        at = c;
        binary = binary || u == 0;
        line_what =
            absl::StrCat(u == 0 ? "NUL byte" : "control character",
                         absl::StrFormat(" (0x%02x)", u), " in the file");
        line_hint =
            "YAML allows none (write it as an escape in a double-quoted "
            "string)";
        break;
      }
    }
    if (const size_t bad =
            FirstNonUtf8(absl::string_view(line.data(), line.size()));
        bad != std::string_view::npos) {
      binary = true;
      if (bad < at) {
        at = bad;
        line_what = absl::StrFormat("byte 0x%02x is not UTF-8",
                                    static_cast<unsigned char>(line[bad]));
        line_hint =
            "GitLab reads CI files as UTF-8 (convert a Latin-1 file with "
            "iconv -f LATIN1 -t UTF-8)";
      }
    }
    const size_t cr = line.find('\r');
    if (cr < at && cr + 1 < line.size() && line[cr + 1] != '\n') {
      at = cr;
      line_what = "carriage return inside a line";
      line_hint = "use \\n or \\r\\n line breaks";
    }
    if (at == std::string_view::npos) continue;
    if (what.empty()) {
      first_line = static_cast<int>(i + 1);
      // Columns count characters, from after a byte-order mark.
      std::string_view before = line.substr(0, at);
      if (i == 0 && before.substr(0, 3) == "\xef\xbb\xbf") {
        before.remove_prefix(3);
      }
      first_column = static_cast<int>(
          DisplayWidth(absl::string_view(before.data(), before.size())) + 1);
      what = std::move(line_what);
      hint = std::move(line_hint);
    } else {
      ++more;
    }
  }
  if (what.empty()) return;
  if (binary && more >= 3) {
    report->AtLine(first_line, first_column,
                   absl::StrCat("not a text file: ", what, ", and ", more,
                                " more lines with bytes YAML refuses; a CI "
                                "file is YAML text in UTF-8"));
    return;
  }
  std::string message = absl::StrCat(what, "; ", hint);
  if (more > 0) {
    absl::StrAppend(&message, " (", more,
                    more == 1 ? " more line has" : " more lines have",
                    " such bytes)");
  }
  report->AtLine(first_line, first_column, std::move(message));
}

// A gang whose job is `when: manual` (itself or through extends) is N
// manual jobs, one per member, each played by hand; the gang forms only
// when every member has been played. Lint warns (GitLab accepts it).
void WarnAboutManualGangs(const std::vector<YamlNode>& documents,
                          const CiConfigModel& model,
                          const std::vector<GangSpec>& gangs,
                          CiExpansion* result) {
  Reporter warn(&result->warnings);
  static const std::vector<std::string> kWhen = {"when"};
  for (const GangSpec& gang : gangs) {
    if (gang.job.empty() || gang.job[0] == '.') continue;
    const absl::StatusOr<CiConfigModel::Effective> effective =
        model.Resolve(gang.job, kWhen);
    if (!effective.ok() ||
        effective->config.value("when", CiValue()) != CiValue("manual")) {
      continue;
    }
    YamlNode key;
    warn.file = gang.file;
    for (const YamlNode& root : documents) {
      if (!gang.file.empty()) break;  // Its line is gang.line there.
      if (const Entry e = FindEntry(root, gang.job)) {
        key = e.key;
        if (const Entry when = FindEntry(e.value, "when")) key = when.key;
      }
    }
    const std::string members =
        gang.nodes_min > 0 ? absl::StrCat(gang.nodes_min, " to ", gang.nodes)
                           : absl::StrCat(gang.nodes);
    std::string message =
        absl::StrCat(gang.job, ": when: manual makes ", gang.nodes,
                     " manual jobs, one per member, each to be played by "
                     "hand; the gang forms only when ",
                     members,
                     " of them are played (the played ones wait for the "
                     "rest, up to the gang's join timeout)");
    if (gang.file.empty()) {
      warn.At(key, key, std::move(message));
    } else {
      warn.AtLine(gang.line, 1, std::move(message));
    }
  }
}

// ---------------------------------------------------------------------.
// The plain form.

// `name`'s value as GitLab would send it, if it is a scalar or {value: x}.
std::optional<std::string> VariableValue(const YamlNode& value) {
  if (IsPlain(value)) {
    // A number as GitLab's YAML reader reads it (010 is 8), sent in decimal.
    if (const std::optional<int64_t> n = Yaml11Integer(value.Scalar())) {
      return absl::StrCat(*n);
    }
  }
  if (value.IsScalar()) return value.Scalar();
  if (value.IsNull()) return std::string();
  if (value.IsMap()) {
    const Entry inner = FindEntry(value, "value");
    if (inner && inner.value.IsScalar()) return inner.value.Scalar();
  }
  return std::nullopt;
}

// Checks every GDT_* variable of `variables` (a mapping) and records the
// inputs in `spec`. Returns whether any input was found.
bool CheckVariables(const std::string& owner, const YamlNode& variables,
                    const std::set<std::string>& skip, GangSpec* spec,
                    Reporter* report) {
  if (!variables || !variables.IsMap()) return false;
  std::vector<std::string> names;
  for (const VariableRule& rule : InputVariables()) names.push_back(rule.name);
  bool any = false;
  for (const auto& entry : variables) {
    if (!entry.first.IsScalar()) continue;
    const std::string& name = entry.first.Scalar();
    if (name.rfind("GDT_", 0) != 0 || skip.count(name) != 0) continue;
    if (OutputVariables().count(name) != 0) {
      report->At(entry.first, variables,
                 absl::StrCat(owner, ": ", name,
                              " is set by gdt on the host; a job must not "
                              "set it"));
      continue;
    }
    // The runner's environment, and the child-pipeline template's inputs
    // (examples/ci-templates/gdt-child-pipeline.yml): not gang settings.
    if (name == "GDT_EXECUTOR_CONFIG" || name == "GDT_CI_FILE" ||
        name == "GDT_MAX_NODES") {
      continue;
    }
    const auto rule =
        std::find_if(InputVariables().begin(), InputVariables().end(),
                     [&](const VariableRule& r) { return r.name == name; });
    if (rule == InputVariables().end()) {
      report->At(entry.first, variables,
                 absl::StrCat(owner, ": unknown gdt variable ", Shown(name),
                              DidYouMean(name, names)));
      continue;
    }
    if (const CiValue typed = ToCiValue(entry.second);
        typed.is_boolean() || typed.is_number_float()) {
      any = true;
      report->At(entry.second, entry.first,
                 absl::StrCat(owner, ": ", name, " is ",
                              typed.is_boolean() ? "a boolean" : "a float",
                              " for GitLab, which takes only strings and "
                              "integers as variable values and refuses the "
                              "pipeline; quote it: \"",
                              Shown(entry.second.Scalar()), "\""));
      continue;
    }
    const std::optional<std::string> value = VariableValue(entry.second);
    if (!value.has_value()) {
      any = true;
      report->At(entry.second, entry.first,
                 absl::StrCat(owner, ": ", name, " must be a string, not ",
                              Describe(entry.second)));
      continue;
    }
    // Empty is unset, for gdt as for GitLab (expand writes it so to undo a
    // template's value).
    if (value->empty()) continue;
    any = true;
    // A CI/CD component input: GitLab fills it in before the job exists;
    // gdt checks the value the header gives when none is passed.
    std::optional<std::string> filled = value;
    std::string from_input;
    if (value->find("$[[") != std::string::npos && report->inputs != nullptr) {
      const FilledInput input = FillInDefaults(*value, *report->inputs);
      if (input.error) {
        report->At(entry.second, entry.first,
                   absl::StrCat(owner, ": ", name, ": ", input.problem));
        continue;
      }
      if (!input.text.has_value()) {
        if (report->warnings != nullptr) {
          report->warnings->At(
              entry.second, entry.first,
              absl::StrCat(owner, ": ", name, " is set from an input (",
                           input.problem,
                           "), so gdt cannot check it; gdt-executor "
                           "checks the value when the job runs"));
        }
        continue;
      }
      filled = input.text;
      from_input = absl::StrCat(" (the default of input '", input.input, "')");
    }
    if (filled->find('$') != std::string::npos) continue;  // Expanded later.
    std::string problem;
    switch (rule->kind) {
      case VariableRule::kInteger: {
        const std::optional<int64_t> n = IntegerText(*filled);
        if (!n.has_value() || *n < rule->low || *n > rule->high) {
          problem = absl::StrCat("must be an integer from ", rule->low, " to ",
                                 rule->high);
        } else if (name == "GDT_GPUS_PER_NODE") {
          spec->gpus_per_node = static_cast<int>(*n);
        } else if (name == "GDT_NPROC_PER_NODE") {
          spec->procs_per_node = static_cast<int>(*n);
        } else if (name == "GDT_GANG_TIMEOUT") {
          spec->gang_timeout_seconds = *n;
        } else if (name == "GDT_PRIORITY") {
          spec->priority = static_cast<int>(*n);
        } else if (name == "GDT_CHECKPOINT_NOTICE") {
          spec->checkpoint_notice_seconds = *n;
        } else if (name == "GDT_CHECKPOINT_KEEP") {
          spec->checkpoint_keep = static_cast<int>(*n);
        }
        break;
      }
      case VariableRule::kChoice:
        if (!Contains(*rule->choices, *filled)) {
          problem = absl::StrCat("must be one of ",
                                 absl::StrJoin(*rule->choices, ", "));
        } else if (name == "GDT_LAUNCHER") {
          spec->launcher = *filled;
        } else if (name == "GDT_TOPOLOGY_MODE") {
          spec->topology_mode = *filled;
        } else if (name == "GDT_PREEMPTIBLE") {
          spec->preemptible = *filled == "1" || *filled == "true";
        } else {
          spec->checkpoint_store = *filled;
        }
        break;
      case VariableRule::kLabel:
        if (!IsLabel(*filled)) {
          problem =
              "must be a host label (letters, digits, . _ - /; at most 63)";
        } else {
          spec->topology_same = *filled;
        }
        break;
    }
    if (!problem.empty()) {
      report->At(entry.second, entry.first,
                 absl::StrCat(owner, ": ", name, " ", problem, ", not '",
                              Shown(*filled), "'", from_input,
                              rule->choices != nullptr
                                  ? DidYouMean(*filled, *rule->choices)
                                  : ""));
    }
  }
  return any;
}

// Lints one job without the block.
// Variables outside GDT_* that gdt sets for a gang member (the leased GPUs,
// the network interface, the launcher's rendezvous). gitlab-runner exports
// job variables after gdt's environment, so gdt-executor refuses a job that
// sets one (executor/env_contract.cc holds the full list, GDT_* included;
// this side cannot link it).
void CheckGdtOwnedVariables(const std::string& owner, const YamlNode& variables,
                            const std::string& launcher, Reporter* report,
                            const std::set<std::string>& skip = {}) {
  if (!variables || !variables.IsMap()) return;
  static const std::set<std::string> kAlways = {
      "CUDA_VISIBLE_DEVICES", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"};
  static const std::set<std::string> kTorchrun = {
      "PET_NNODES",      "PET_NODE_RANK",   "PET_NPROC_PER_NODE",
      "PET_MASTER_ADDR", "PET_MASTER_PORT", "PET_MAX_RESTARTS"};
  static const std::set<std::string> kEnv = {"MASTER_ADDR", "MASTER_PORT",
                                             "RANK",        "WORLD_SIZE",
                                             "LOCAL_RANK",  "LOCAL_WORLD_SIZE"};
  for (const auto& entry : variables) {
    if (!entry.first.IsScalar()) continue;
    const std::string& name = entry.first.Scalar();
    if (skip.count(name) != 0) continue;
    if (kAlways.count(name) != 0 ||
        (launcher == "torchrun" && kTorchrun.count(name) != 0) ||
        (launcher == "env" && kEnv.count(name) != 0)) {
      report->At(entry.first, variables,
                 absl::StrCat(owner, ": ", name,
                              " is set by gdt for the gang; the runner "
                              "exports job variables after it, so "
                              "gdt-executor refuses the job"));
    }
  }
}

// The top-level variables a job does not inherit (`inherit: {variables:
// false}`, or names missing from `inherit: {variables: [list]}`).
std::set<std::string> NotInherited(const YamlNode& job,
                                   const YamlNode& top_variables) {
  std::set<std::string> names;
  const Entry setting = FindEntry(FindEntry(job, "inherit").value, "variables");
  if (!setting || !top_variables.IsMap()) return names;
  std::set<std::string> kept;
  if (setting.value.IsSequence()) {
    for (const YamlNode& name : setting.value) {
      if (name.IsScalar()) kept.insert(name.Scalar());
    }
  } else if (!(IsPlain(setting.value) && setting.value.Scalar() == "false")) {
    return names;  // true, or something GitLab refuses.
  }
  for (const auto& entry : top_variables) {
    if (entry.first.IsScalar() && kept.count(entry.first.Scalar()) == 0) {
      names.insert(entry.first.Scalar());
    }
  }
  return names;
}

// `rules: [{variables: ...}]`: GitLab sets a matching rule's variables over
// the job's. Their GDT_* variables are checked as the job's own (`lint`),
// and for a job with the block (`block`) none may be one the block sets.
void CheckRulesVariables(const std::string& job, const YamlNode& value,
                         const GangSpec* block, bool lint, Reporter* report) {
  const Entry rules = FindEntry(value, "rules");
  if (!rules || !rules.value.IsSequence()) return;
  std::set<std::string> written;
  if (block != nullptr) {
    for (const auto& [name, v] : block->Variables()) written.insert(name);
    written.insert("GDT_NODES_MIN");
    written.insert("GDT_NODES_MAX");
  }
  for (size_t i = 0; i < rules.value.size(); ++i) {
    const Entry vars = FindEntry(rules.value.Item(i), "variables");
    if (!vars || !vars.value.IsMap()) continue;
    const std::string owner = absl::StrCat(job, ": rules[", i, "]");
    if (lint) {
      GangSpec ignored;
      CheckVariables(owner, vars.value, written, &ignored, report);
      CheckGdtOwnedVariables(owner, vars.value,
                             block != nullptr ? block->launcher : "", report);
    }
    for (const auto& entry : vars.value) {
      if (entry.first.IsScalar() && written.count(entry.first.Scalar()) != 0) {
        report->At(entry.first, vars.key,
                   absl::StrCat(owner, ": variables:", entry.first.Scalar(),
                                " would replace what parallel:distributed "
                                "sets whenever the rule matches; set it in "
                                "one place"));
      }
    }
  }
}

// A value of the inheritance model as GitLab would send it in a variable.
std::optional<std::string> ValueText(const CiValue& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number_integer()) return std::to_string(value.get<int64_t>());
  if (value.is_object() && value.contains("value")) {
    return ValueText(value["value"]);
  }
  return std::nullopt;
}

// Fills `spec` from what a job inherits (its effective configuration):
// a parallel:distributed block from a template (`template_spec`, read as a
// written block), then GDT_* variables. Their errors are reported where
// they are written. Returns whether it makes the job a gang.
bool SpecFromInherited(const CiValue& effective, const GangSpec* template_spec,
                       GangSpec* spec) {
  bool gang = false;
  if (template_spec != nullptr) {
    const std::string job = spec->job;
    const int line = spec->line;
    *spec = *template_spec;
    spec->job = job;
    spec->line = line;
    gang = true;
  }
  const auto integer = [](const std::optional<std::string>& text) {
    return text.has_value() ? IntegerText(*text) : std::nullopt;
  };
  if (const auto vars = effective.find("variables");
      vars != effective.end() && vars->is_object()) {
    for (const auto& [name, value] : vars->items()) {
      const std::optional<std::string> text = ValueText(value);
      if (!text.has_value() || text->empty()) continue;
      if (name == "GDT_GPUS_PER_NODE" && integer(text)) {
        spec->gpus_per_node = static_cast<int>(*integer(text));
      } else if (name == "GDT_NPROC_PER_NODE" && integer(text)) {
        spec->procs_per_node = static_cast<int>(*integer(text));
      } else if (name == "GDT_LAUNCHER") {
        spec->launcher = *text;
      } else if (name == "GDT_NODES_MIN" && integer(text)) {
        spec->nodes_min = static_cast<int>(*integer(text));
      } else if (name == "GDT_PRIORITY" && integer(text)) {
        spec->priority = static_cast<int>(*integer(text));
      } else if (name == "GDT_GANG_TIMEOUT" && integer(text)) {
        spec->gang_timeout_seconds = *integer(text);
      } else if (name == "GDT_TOPOLOGY_SAME") {
        spec->topology_same = *text;
      } else if (name == "GDT_TOPOLOGY_MODE") {
        spec->topology_mode = *text;
      } else if (name == "GDT_CHECKPOINT_STORE") {
        spec->checkpoint_store = *text;
      } else if (name == "GDT_PREEMPTIBLE") {
        spec->preemptible = *text == "1" || *text == "true";
      } else {
        continue;
      }
      gang = true;
    }
  }
  const auto parallel = effective.find("parallel");
  if (parallel != effective.end() && parallel->is_number_integer()) {
    const int64_t n = parallel->get<int64_t>();
    if (n >= 1 && n <= kGitLabParallelLimit) spec->nodes = static_cast<int>(n);
  } else if (parallel != effective.end() && parallel->is_null()) {
    spec->nodes = 1;  // `parallel: null` drops an inherited one.
  }
  return gang;
}

// A plain-form gang's GDT_NODES_MIN and GDT_NODES_MAX against its members
// (`parallel`, 1 without): the executor refuses a minimum above them and a
// maximum other than them. Reports at the variable when the job sets it.
bool CheckElasticRange(const std::string& job, const YamlNode& key,
                       const YamlNode& value, const YamlNode& top_variables,
                       const CiValue* effective, const GangSpec& spec,
                       Reporter* report) {
  const auto place = [&](const char* name) {
    const Entry own = FindEntry(FindEntry(value, "variables").value, name);
    if (own) return own.key;
    const Entry top = FindEntry(top_variables, name);
    return top ? top.key : key;
  };
  const auto text = [&](const char* name) -> std::optional<std::string> {
    if (effective != nullptr) {
      if (const auto vars = effective->find("variables");
          vars != effective->end() && vars->is_object() &&
          vars->contains(name)) {
        return ValueText((*vars)[name]);
      }
    }
    for (const YamlNode& vars :
         {FindEntry(value, "variables").value, top_variables}) {
      if (const Entry e = FindEntry(vars, name)) return VariableValue(e.value);
    }
    return std::nullopt;
  };
  const std::optional<std::string> min_text = text("GDT_NODES_MIN");
  const std::optional<int64_t> min =
      min_text.has_value() ? IntegerText(*min_text) : std::nullopt;
  if (min.has_value() && *min > spec.nodes) {
    report->At(
        place("GDT_NODES_MIN"), key,
        absl::StrCat(job, ": GDT_NODES_MIN is ", *min, " but the job has only ",
                     spec.nodes, spec.nodes == 1 ? " member" : " members",
                     " (parallel); an elastic gang's minimum must not "
                     "exceed them"));
    return false;
  }
  const std::optional<std::string> max_text = text("GDT_NODES_MAX");
  const std::optional<int64_t> max =
      max_text.has_value() ? IntegerText(*max_text) : std::nullopt;
  if (max.has_value() && *max != spec.nodes) {
    report->At(
        place("GDT_NODES_MAX"), key,
        absl::StrCat(job, ": GDT_NODES_MAX is ", *max, " but the job has ",
                     spec.nodes, spec.nodes == 1 ? " member" : " members",
                     " (parallel); parallel: N is the elastic maximum, "
                     "so the two must agree"));
    return false;
  }
  return true;
}

// Keywords that keep a gang job from ever running as one: GitLab runs one
// job of a resource group at a time (members 2..N would wait for member 1,
// which waits for them), and a trigger job runs no script on a runner
// (GitLab refuses tags and retry on it). False after reporting.
bool CheckGangKeywords(const std::string& job, const YamlNode& value,
                       Reporter* report) {
  bool ok = true;
  if (const Entry e = FindEntry(value, "resource_group")) {
    report->At(e.key, e.key,
               absl::StrCat(job,
                            ": resource_group lets GitLab run one job of the "
                            "group at a time, so a gang's members would wait "
                            "for each other and it would never form; remove "
                            "it from the gang job"));
    ok = false;
  }
  if (const Entry e = FindEntry(value, "trigger")) {
    report->At(e.key, e.key,
               absl::StrCat(job,
                            ": a trigger job starts a pipeline and runs "
                            "nothing on a runner, so it cannot be a gdt gang "
                            "(GitLab refuses tags and retry on it)"));
    ok = false;
  }
  return ok;
}

// `effective`: the job's configuration with what it inherits (null when it
// cannot be computed); inherited GDT_* variables, tags and parallel count.
// `included_top`: the top-level variables of included files, in merge
// order (the main file's, `top_variables`, win over them).
std::string MatrixGang(const std::string& job) {
  return absl::StrCat(job,
                      ": a gdt gang needs parallel: N (or "
                      "parallel:distributed), not parallel:matrix: matrix "
                      "makes differently configured jobs named 'job: "
                      "[values]', not N identical members of one gang");
}

void LintPlainJob(const std::string& job, const YamlNode& key,
                  const YamlNode& value, const YamlNode& top_variables,
                  const std::vector<YamlNode>& included_top,
                  const CiValue* effective, const GangSpec* template_spec,
                  const CiExpandOptions& options,
                  std::vector<GangSpec>* gangs,  // Null for a hidden job.
                  Reporter* report,
                  std::vector<std::string>* untagged = nullptr) {
  if (!value.IsMap()) return;  // Not a job (ci_yaml reports it on use).
  GangSpec spec;
  spec.job = job;
  spec.line = key.Mark().line + 1;
  // Top-level variables were checked once; here they only fill `spec`.
  std::vector<CiDiagnostic> reported_elsewhere;
  Reporter quiet(&reported_elsewhere);
  quiet.inputs = report->inputs;
  bool top_gdt = false;
  for (const YamlNode& variables : included_top) {
    top_gdt = CheckVariables(job, variables, NotInherited(value, variables),
                             &spec, &quiet) ||
              top_gdt;
  }
  const std::set<std::string> not_inherited =
      NotInherited(value, top_variables);
  top_gdt = CheckVariables(job, top_variables, not_inherited, &spec, &quiet) ||
            top_gdt;
  CheckRulesVariables(job, value, nullptr, /*lint=*/true, report);
  const bool job_gdt = CheckVariables(job, FindEntry(value, "variables").value,
                                      {}, &spec, report);
  bool tagged = false;
  if (const Entry tags = FindEntry(value, "tags");
      tags && tags.value.IsSequence() && !options.runner_tag.empty()) {
    for (const YamlNode& tag : tags.value) {
      tagged = tagged || (tag.IsScalar() && tag.Scalar() == options.runner_tag);
    }
  }
  bool inherited = false;
  if (effective != nullptr) {
    inherited = SpecFromInherited(*effective, template_spec, &spec);
    if (const auto tags = effective->find("tags");
        tags != effective->end() && tags->is_array() &&
        !options.runner_tag.empty()) {
      tagged = tagged || std::find(tags->begin(), tags->end(),
                                   CiValue(options.runner_tag)) != tags->end();
    }
  }
  // Top-level GDT_* variables reach every job, but only the jobs that go
  // to gdt's runner (its tag) run as gangs: a job they alone would make
  // one is listed once in a warning instead.
  const bool top_only = top_gdt && !job_gdt && !tagged && !inherited &&
                        !options.runner_tag.empty() && untagged != nullptr;
  if (top_only && gangs != nullptr) untagged->push_back(job);
  const bool gang = !top_only && (top_gdt || job_gdt || tagged || inherited);
  const int max_nodes =
      std::min(kGitLabParallelLimit, std::max(1, options.max_nodes));
  // `parallel: null` (or `~`) is how a job drops an inherited parallel.
  if (const Entry parallel = FindEntry(value, "parallel");
      parallel && !parallel.value.IsNull() &&
      parallel.value.Tag() != "!reference") {
    if (parallel.value.IsMap()) {
      if (parallel.value.size() == 0) {
        report->At(parallel.value, parallel.key,
                   absl::StrCat(job,
                                ": parallel is an empty mapping; GitLab "
                                "accepts an integer or matrix (gdt adds "
                                "distributed)"));
      }
      for (const auto& entry : parallel.value) {
        const std::string k =
            entry.first.IsScalar() ? entry.first.Scalar() : std::string("?");
        if (k != "matrix") {
          report->At(entry.first, parallel.key,
                     absl::StrCat(job, ": unknown key '", Shown(k),
                                  "' in parallel; GitLab accepts an integer "
                                  "or matrix (gdt adds distributed)"));
        } else if (gang && template_spec == nullptr) {
          // Under a template with the block, CheckJobUnderTemplate
          // reports it, for expand too.
          report->At(entry.first, parallel.key, MatrixGang(job));
        }
      }
      return;
    }
    std::optional<int64_t> n;
    std::string shown = Describe(parallel.value);
    std::string from_input;
    bool unknown = false;
    if (parallel.value.IsScalar() &&
        parallel.value.Scalar().find("$[[") != std::string::npos) {
      // A CI/CD component input: GitLab fills it in before the job exists
      // and checks the number then; for a gang gdt checks the default.
      if (!gang || report->inputs == nullptr) return;
      const FilledInput input =
          FillInDefaults(parallel.value.Scalar(), *report->inputs);
      if (input.error) {
        report->At(parallel.value, parallel.key,
                   absl::StrCat(job, ": parallel: ", input.problem));
        return;
      }
      if (!input.text.has_value()) {
        unknown = true;
        if (report->warnings != nullptr) {
          report->warnings->At(
              parallel.value, parallel.key,
              absl::StrCat(job, ": parallel is set from an input (",
                           input.problem,
                           "), so gdt cannot check the gang's size before "
                           "the job runs"));
        }
      } else {
        n = IntegerText(*input.text);
        shown = absl::StrCat("'", Shown(*input.text), "'");
        from_input =
            absl::StrCat(" (the default of input '", input.input, "')");
      }
    } else {
      n = PlainInteger(parallel.value);
    }
    if (!unknown && (!n.has_value() || *n < 1 || *n > kGitLabParallelLimit)) {
      report->At(parallel.value, parallel.key,
                 absl::StrCat(job,
                              ": parallel must be an integer from 1 to 200 "
                              "(GitLab's limit), not ",
                              shown, from_input));
      return;
    }
    if (!unknown && gang && *n > max_nodes) {
      report->At(parallel.value, parallel.key,
                 absl::StrCat(job, ": parallel is ", *n, from_input,
                              " but this cluster allows at most ", max_nodes,
                              " nodes per job (--max-nodes)"));
      return;
    }
    if (!unknown) spec.nodes = static_cast<int>(*n);
  }
  if (gang && !CheckElasticRange(job, key, value, top_variables, effective,
                                 spec, report)) {
    return;
  }
  if (gang) {
    CheckGangKeywords(job, value, report);
    CheckGdtOwnedVariables(job, top_variables, spec.launcher, report,
                           not_inherited);
    CheckGdtOwnedVariables(job, FindEntry(value, "variables").value,
                           spec.launcher, report);
    if (gangs != nullptr) gangs->push_back(std::move(spec));
  }
}

// The anchors (`&name`) defined in `node` between text positions `begin`
// and `end` (an alias inside may name a node defined elsewhere).
void AnchorsWithin(const YamlNode& node, size_t begin, size_t end, int depth,
                   std::vector<std::string>* anchors) {
  const YamlMark at = node.PropertiesMark();
  if (depth > kMaxDepth || at.is_null() ||
      static_cast<size_t>(at.pos) < begin ||
      static_cast<size_t>(at.pos) >= end) {
    return;
  }
  if (!node.Anchor().empty()) anchors->push_back("&" + node.Anchor());
  if (node.IsMap()) {
    for (const auto& entry : node) {
      AnchorsWithin(entry.first, begin, end, depth + 1, anchors);
      AnchorsWithin(entry.second, begin, end, depth + 1, anchors);
    }
  } else if (node.IsSequence()) {
    for (const YamlNode& item : node) {
      AnchorsWithin(item, begin, end, depth + 1, anchors);
    }
  }
}

// GitLab's limit on `workflow:name`: it checks the name as written (it
// expands variables in it only when it creates the pipeline, and checks
// the result again).
void CheckWorkflowName(const YamlNode& workflow, Reporter* report) {
  const Entry name = FindEntry(workflow, "name");
  if (!name || !name.value.IsScalar()) return;
  const std::string& written = name.value.Scalar();
  const size_t characters = static_cast<size_t>(std::count_if(
      written.begin(), written.end(),
      [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
  if (characters > kMaxWorkflowNameCharacters) {
    report->At(
        name.value, name.key,
        absl::StrCat("workflow name is too long (maximum is ",
                     kMaxWorkflowNameCharacters, " characters; this one has ",
                     characters, "), so GitLab refuses the file"));
  }
}

// A job's `extends` parents that this file does not define. Without
// `include:` GitLab refuses the file ("unknown keys in `extends`"); with
// one, a parent listed after the one that gives the job its
// parallel:distributed block is merged over it (later parents win), so its
// tags, parallel or variables, unseen here, could undo the expansion.
// False after reporting.
CiValue InheritedBlock(const CiConfigModel& model, const std::string& job);

bool CheckUnseenParents(const CiConfigModel& model, const std::string& job,
                        const YamlNode& key, const YamlNode& value, bool lint,
                        const CiIncludingConfig* including, Reporter* report) {
  const Entry extends = FindEntry(value, "extends");
  if (!extends) return true;
  const std::vector<std::string> parents =
      ExtendsList(CiValue::object({{"extends", ToCiValue(extends.value)}}));
  std::vector<std::string> missing;
  for (const std::string& parent : parents) {
    if (!model.HasJob(parent)) missing.push_back(parent);
  }
  if (missing.empty()) return true;
  const Entry own = FindEntry(value, "parallel");
  if (!(own && own.value.IsMap() && FindEntry(own.value, "distributed")) &&
      !InheritedBlock(model, job).is_object()) {
    // Any other job: GitLab merges every include before it resolves
    // `extends`, and refuses a name it does not find ("unknown keys") or
    // finds as something other than a mapping ("invalid base hashes").
    // With an include gdt does not read, the name may come from there;
    // expand also works on a file that another one includes, which may
    // name that file's templates, so only lint reports it.
    if (!lint || model.has_include()) return true;
    // A file that the project's main file includes: the names of the whole
    // configuration count, unless some of it is not read.
    if (including != nullptr) {
      if (including->unseen) return true;
      missing.erase(std::remove_if(missing.begin(), missing.end(),
                                   [including](const std::string& m) {
                                     return including->names.count(m) != 0;
                                   }),
                    missing.end());
      if (missing.empty()) return true;
    }
    std::vector<std::string> unknown;
    std::vector<std::string> not_maps;
    for (const std::string& m : missing) {
      (model.Top(m).has_value() ? not_maps : unknown).push_back(Shown(m));
    }
    report->At(
        extends.value, extends.key,
        absl::StrCat(
            job, ": ",
            unknown.empty()
                ? absl::StrCat("invalid base hashes in `extends` (",
                               absl::StrJoin(not_maps, ", "),
                               "): not jobs or templates, so GitLab refuses "
                               "it")
                : absl::StrCat(
                      "unknown keys in `extends` (",
                      absl::StrJoin(unknown, ", "),
                      including != nullptr && !including->trigger_job.empty()
                          ? absl::StrCat(
                                "): not in this file nor in the other files "
                                "of the child pipeline that job '",
                                including->trigger_job, "' of ",
                                including->main_path,
                                " starts (trigger:include), so GitLab refuses "
                                "it; a child pipeline does not see its "
                                "parent's templates")
                      : including != nullptr
                          ? absl::StrCat("): not in this file nor in ",
                                         including->main_path,
                                         ", which includes it, or the files "
                                         "that includes, so GitLab refuses it")
                      : model.file_count() > 1
                          ? "): not in this file nor in the files it "
                            "includes, so GitLab refuses it"
                          : "): not in this file, which includes none, so "
                            "GitLab refuses it (if another file includes "
                            "this one, lint that file)")));
    return false;
  }
  // Lint says what GitLab would refuse were this the whole configuration;
  // expand also works on a file that another one includes, where a parent
  // listed after the gang's is refused as below.
  if (!model.has_include() && lint) {
    std::vector<std::string> shown;
    for (const std::string& m : missing) shown.push_back(Shown(m));
    report->At(extends.value, extends.key,
               absl::StrCat(job, ": unknown keys in `extends` (",
                            absl::StrJoin(shown, ", "),
                            model.file_count() > 1
                                ? "): not in this file nor in the files it "
                                  "includes, so GitLab refuses it"
                                : "): not in this file, which includes none, "
                                  "so gdt cannot see what the gang inherits "
                                  "(GitLab refuses it unless a file that "
                                  "includes this one defines them)"));
    return false;
  }
  // The first parent whose configuration holds a block.
  std::string gang_parent;
  for (const std::string& parent : parents) {
    if (gang_parent.empty()) {
      std::string unknown;
      const absl::StatusOr<CiValue> base = model.Extended(parent, 0, &unknown);
      if (base.ok() && base->is_object()) {
        const auto p = base->find("parallel");
        if (p != base->end() && p->is_object() && p->contains("distributed")) {
          gang_parent = parent;
        }
      }
      continue;
    }
    if (std::find(missing.begin(), missing.end(), parent) == missing.end()) {
      continue;
    }
    report->At(
        extends.value, key,
        absl::StrCat(
            job, ": extends '", Shown(parent), "' after '", Shown(gang_parent),
            "', which gives it parallel:distributed, but '", Shown(parent),
            "' is not in this file: GitLab merges later "
            "parents over earlier ones, so its tags, "
            "parallel or variables could undo the gang; "
            "list it before '",
            Shown(gang_parent), "', or copy it into this file"));
    return false;
  }
  return true;
}

// The first scalar under `node` that holds a CI/CD component input
// (`$[[ inputs.x ]]`), which GitLab interpolates when the component is
// included; a null node when none.
YamlNode InputInterpolation(const YamlNode& node, int depth) {
  if (!node || depth > kMaxDepth) return YamlNode();
  if (node.IsScalar()) {
    return node.Scalar().find("$[[") != std::string::npos ? node : YamlNode();
  }
  if (node.IsMap()) {
    for (const auto& entry : node) {
      if (const YamlNode found = InputInterpolation(entry.second, depth + 1)) {
        return found;
      }
    }
  } else if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i) {
      if (const YamlNode found = InputInterpolation(node.Item(i), depth + 1)) {
        return found;
      }
    }
  }
  return YamlNode();
}

// A job that is no gang but takes its `entry` (tags, variables,
// artifacts) from one with a parallel:distributed block
// (`tags: !reference [.gpu, tags]`): GitLab resolves the reference in the
// expanded file, where that entry holds gdt's additions (the runner tag,
// the GDT_* variables, checkpoints/). Returns the gang job it names, or "".
std::string GangEntryReferenced(const CiConfigModel& model,
                                const YamlNode& node, const std::string& entry,
                                bool whole_only = false) {
  const CiValue value = ToCiValue(node);
  std::vector<CiValue> references;
  if (value.is_object()) references.push_back(value);
  if (value.is_array()) {
    for (const CiValue& item : value) {
      if (item.is_object()) references.push_back(item);
    }
  }
  for (const CiValue& reference : references) {
    const auto path = reference.find("!reference");
    if (path == reference.end() || !path->is_array() || path->size() < 2 ||
        !(*path)[0].is_string() || (*path)[1] != CiValue(entry) ||
        (whole_only && path->size() != 2)) {
      continue;
    }
    const std::string target = (*path)[0].get<std::string>();
    std::string unknown;
    const absl::StatusOr<CiValue> config = model.Extended(target, 0, &unknown);
    if (!config.ok() || !config->is_object()) continue;
    const auto parallel = config->find("parallel");
    if (parallel != config->end() && parallel->is_object() &&
        parallel->contains("distributed")) {
      return target;
    }
  }
  return "";
}

// A job (or template) of an included file that is no gang but whose own
// `tags`, `variables` or `artifacts` is a `!reference` to the whole entry
// of a job with a parallel:distributed block. GitLab resolves references
// after merging the files, so after expansion the entry holds what expand
// adds to the gang's (the runner tag, the GDT_* variables, checkpoints/),
// and the job would run as a gang member or carry the gang's settings;
// expand rewrites only the main file, so it cannot write the entry out
// there as it does in the main file. False after reporting that.
// `replaced(name)`: a later file's definition of the job sets that entry
// itself, which replaces the reference.
bool ReferencesExpandedGang(
    const CiConfigModel& model, const std::string& job, const YamlNode& value,
    const CiExpandOptions& options, Reporter* report,
    const std::function<bool(const std::string&)>& replaced) {
  bool ok = true;
  for (const char* name : {"tags", "variables", "artifacts"}) {
    const Entry own = FindEntry(value, name);
    if (!own || replaced(name)) continue;
    const std::string gang = GangEntryReferenced(model, own.value, name, true);
    if (gang.empty()) continue;
    const std::string entry = name;
    std::string added;
    if (entry == "tags") {
      if (options.runner_tag.empty()) continue;
      added = absl::StrCat("the runner tag ", options.runner_tag,
                           ", so the job would run on gdt as an unplanned "
                           "one-member gang");
    } else if (entry == "variables") {
      added =
          "the GDT_* variables expand adds, so the job would look like "
          "a gang member";
    } else {
      std::string unknown;
      const absl::StatusOr<CiValue> config = model.Extended(gang, 0, &unknown);
      if (!config.ok()) continue;
      std::vector<CiDiagnostic> ignored;  // Reported at the gang.
      const std::optional<GangSpec> spec = SpecOfValue(
          gang, config->value("parallel", CiValue()), options, &ignored);
      if (!spec || spec->checkpoint_store != "artifacts") continue;
      added = absl::StrCat("the ", kCheckpointPath,
                           " path and when: always expand adds for the "
                           "gang's checkpoints");
    }
    report->At(
        own.value, own.key,
        absl::StrCat(job, ": its ", entry, " are a !reference to ", Shown(gang),
                     "'s, which has parallel:distributed; GitLab "
                     "resolves it in the expanded pipeline, where "
                     "they hold ",
                     added,
                     ", and gdt does not rewrite an included file; "
                     "write its ",
                     entry, " out"));
    ok = false;
  }
  return ok;
}

// Whether `job`'s own `parallel` entry, written as something else (a
// merge key inside it, a `!reference`), stands for a parallel:distributed
// block: GitLab would receive the block unexpanded, or the expanded
// template's bare `parallel: N`.
bool HidesABlock(const CiConfigModel& model, const std::string& job,
                 const Entry& parallel) {
  const auto is_block = [](const CiValue& value) {
    return value.is_object() && value.contains("distributed");
  };
  if (parallel.value.Tag() != "!reference") {
    return parallel.value.IsMap() && is_block(ToCiValue(parallel.value));
  }
  const absl::StatusOr<CiConfigModel::Effective> effective =
      model.Resolve(job, InspectedKeys());
  if (!effective.ok() || effective->unresolved.count("parallel") != 0) {
    return false;
  }
  const auto found = effective->config.find("parallel");
  return found != effective->config.end() && is_block(*found);
}

// The parallel:distributed block `job` inherits through extends (its
// parents' merged), or null.
CiValue InheritedBlock(const CiConfigModel& model, const std::string& job) {
  // Only `parallel`: every job asks, and templates may hold much else.
  static const std::vector<std::string> kParallel = {"parallel"};
  const absl::StatusOr<CiValue> parents = model.FromParents(job, kParallel);
  if (!parents.ok()) return nullptr;
  const auto parallel = parents->find("parallel");
  if (parallel == parents->end() || !parallel->is_object()) return nullptr;
  const auto distributed = parallel->find("distributed");
  if (distributed == parallel->end() || !distributed->is_object()) {
    return nullptr;
  }
  return *parallel;
}

// A job with its own block that extends a template with one: GitLab merges
// mappings key by key through extends, so the two blocks are merged the
// same way (the job's keys win) into `spec`. The template's expansion
// writes GDT_* variables that GitLab merges into this job's too: those
// that the merged block does not write are written empty (unset), unless
// the job's configuration sets them in plain form. False after reporting.
bool MergeWithTemplate(const CiConfigModel& model, const std::string& job,
                       const Entry& parallel, const CiExpandOptions& options,
                       GangSpec* spec, Reporter* report) {
  const absl::StatusOr<CiConfigModel::Effective> effective =
      model.Resolve(job, InspectedKeys());
  if (!effective.ok()) return true;  // Reported where the job is rewritten.
  std::vector<CiDiagnostic> errors;
  const auto merged_block = effective->config.find("parallel");
  std::optional<GangSpec> merged =
      merged_block == effective->config.end()
          ? std::nullopt
          : SpecOfValue(job, *merged_block, options, &errors);
  if (!merged.has_value()) {
    for (const CiDiagnostic& d : errors) {
      report->At(parallel.key, parallel.key,
                 absl::StrCat(d.message,
                              " (in its block merged with the one it "
                              "inherits through extends)"));
    }
    return errors.empty();
  }
  merged->line = spec->line;
  // What each parent's expansion writes (a later parent's values replace
  // an earlier one's, but not the names the later one leaves out).
  std::set<std::string> inherited;
  const std::optional<CiValue> own = model.Top(job);
  for (const std::string& parent : ExtendsList(*own)) {
    const absl::StatusOr<CiConfigModel::Effective> base =
        model.Resolve(parent, InspectedKeys());
    if (!base.ok()) continue;
    const auto block = base->config.find("parallel");
    if (block == base->config.end()) continue;
    std::vector<CiDiagnostic> ignored;  // Reported at the parent.
    if (const std::optional<GangSpec> parent_spec =
            SpecOfValue(parent, *block, options, &ignored)) {
      for (const auto& [name, value] : parent_spec->Variables()) {
        inherited.insert(name);
      }
    }
  }
  std::set<std::string> written;
  for (const auto& [name, value] : merged->Variables()) written.insert(name);
  const auto plain = effective->config.find("variables");
  for (const std::string& name : OptionalBlockVariables()) {
    if (written.count(name) != 0 || inherited.count(name) == 0) continue;
    if (plain != effective->config.end() && plain->is_object() &&
        plain->contains(name)) {
      continue;
    }
    merged->cleared.push_back(name);
  }
  *spec = std::move(*merged);
  return true;
}

// Top-level variables reach every job that inherits them, a job with the
// block included: a GDT_* variable set there that the block does not write
// (GDT_NODES_MIN, GDT_TOPOLOGY_SAME, ...) would change the gang the block
// describes. Such names are written empty (unset), unless the job's own
// configuration sets them in plain form (the job's value wins in GitLab).
void ClearTopLevelValues(const CiConfigModel& model, const std::string& job,
                         const YamlNode& value,
                         const std::vector<YamlNode>& pipeline_variables,
                         GangSpec* spec) {
  std::set<std::string> inherited;
  for (const YamlNode& variables : pipeline_variables) {
    if (!variables.IsMap()) continue;
    const std::set<std::string> not_inherited = NotInherited(value, variables);
    for (const std::string& name : OptionalBlockVariables()) {
      if (MergedEntry(variables, name, 0) && not_inherited.count(name) == 0) {
        inherited.insert(name);
      }
    }
  }
  if (inherited.empty()) return;
  std::set<std::string> written;
  for (const auto& [name, v] : spec->Variables()) written.insert(name);
  const absl::StatusOr<CiConfigModel::Effective> effective =
      model.Resolve(job, InspectedKeys());
  const CiValue* own = nullptr;
  if (effective.ok()) {
    const auto found = effective->config.find("variables");
    if (found != effective->config.end() && found->is_object()) own = &*found;
  }
  for (const std::string& name : OptionalBlockVariables()) {
    if (written.count(name) != 0 || inherited.count(name) == 0 ||
        (own != nullptr && own->contains(name))) {
      continue;
    }
    spec->cleared.push_back(name);
  }
}

// A job without a block of its own that extends a template with one
// (`template`, its parents' merged): what it sets itself must not undo the
// template's expansion, which GitLab merges into it. Reports a job whose
// own `parallel` replaces an elastic block (its GDT_NODES_MIN/MAX would
// not match) or is a matrix (its jobs would keep the gang's tags and
// GDT_* variables but differ), whose own variables set what the block sets
// (the two would disagree), whose own tags lack the runner tag, or whose
// own artifacts:paths drop checkpoints/.
void CheckJobUnderTemplate(const std::string& job, const YamlNode& value,
                           const GangSpec& tpl, const CiExpandOptions& options,
                           Reporter* report) {
  const Entry own_parallel = FindEntry(value, "parallel");
  if (const Entry matrix = FindEntry(own_parallel.value, "matrix")) {
    report->At(matrix.key, own_parallel.key, MatrixGang(job));
  } else if (own_parallel && tpl.nodes_min > 0 &&
             (own_parallel.value.IsNull() ||
              PlainInteger(own_parallel.value) != tpl.nodes)) {
    report->At(own_parallel.value, own_parallel.key,
               absl::StrCat(job,
                            ": its own parallel replaces the elastic "
                            "parallel:distributed block (nodes ",
                            tpl.nodes_min, "..", tpl.nodes,
                            ") it inherits through extends, but not the "
                            "GDT_NODES_MIN/GDT_NODES_MAX that block sets, so "
                            "its members would be refused; give the job a "
                            "block of its own (nodes: ...), which is merged "
                            "with the template's"));
  }
  if (const Entry vars = FindEntry(value, "variables");
      vars && vars.value.IsMap()) {
    for (const auto& [name, v] : tpl.Variables()) {
      if (const Entry mine = FindEntry(vars.value, name)) {
        report->At(mine.key, vars.key,
                   absl::StrCat(job, ": variables:", name,
                                " is also set by the parallel:distributed "
                                "block it inherits through extends; set it "
                                "in one place (a block of the job's own is "
                                "merged with the template's)"));
      }
    }
  }
  if (const Entry tags = FindEntry(value, "tags");
      tags && tags.value.IsSequence() && !options.runner_tag.empty()) {
    bool tagged = false;
    for (const YamlNode& tag : tags.value) {
      tagged = tagged || (tag.IsScalar() && tag.Scalar() == options.runner_tag);
    }
    if (!tagged) {
      report->At(tags.key, tags.key,
                 absl::StrCat(job,
                              ": gets parallel:distributed from a template, "
                              "but its own tags replace the template's; add ",
                              options.runner_tag, " to them"));
    }
  }
  if (tpl.checkpoint_store != "artifacts") return;
  const Entry paths = FindEntry(FindEntry(value, "artifacts").value, "paths");
  if (!paths || !paths.value.IsSequence()) return;
  for (const YamlNode& path : paths.value) {
    if (path.IsScalar() && path.Scalar() == kCheckpointPath) return;
  }
  report->At(paths.key, paths.key,
             absl::StrCat(job,
                          ": its own artifacts:paths replace the ones it "
                          "inherits, and with them ",
                          kCheckpointPath,
                          ", where the checkpoints of the template's "
                          "checkpoint block are kept; add ",
                          kCheckpointPath, " to them"));
}

// Whether the merge key value `merged` (an alias or a list of them) names
// a top-level job with its own parallel:distributed block: expand rewrites
// that job, and the alias follows.
// A mapping that merges such a job in turn (`.mid: {<<: *gang}`, then
// `<<: *mid`) follows it too.
bool MergesTopLevelBlockJob(const YamlNode& merged,
                            const std::unordered_set<uint32_t>& top_values,
                            int depth = 0) {
  if (depth > kMaxDepth) return false;
  std::vector<YamlNode> sources;
  if (merged.IsSequence()) {
    for (const YamlNode& item : merged) sources.push_back(item);
  } else {
    sources.push_back(merged);
  }
  for (const YamlNode& source : sources) {
    const Entry parallel = FindEntry(source, "parallel");
    if (parallel) {
      if (parallel.value.IsMap() && FindEntry(parallel.value, "distributed") &&
          top_values.count(source.index()) != 0) {
        return true;
      }
      continue;  // Its own parallel wins over what it merges.
    }
    // A mapping may hold several merge keys (`<<: *a` and `<<: *b`).
    for (const auto& entry : source) {
      if (entry.first.IsScalar() && entry.first.Scalar() == "<<" &&
          MergesTopLevelBlockJob(entry.second, top_values, depth + 1)) {
        return true;
      }
    }
  }
  return false;
}

// ---------------------------------------------------------------------.
// The types GitLab's configuration schema gives the common job keywords.

// What a keyword's value must be.
enum class Want {
  kString,       // A scalar.
  kBool,         // true or false.
  kStrings,      // A list of scalars.
  kScript,       // A scalar, or a list of scalars and lists of them.
  kMap,          // A mapping.
  kList,         // A list.
  kStringOrMap,  // A scalar or a mapping.
  kBoolOrMap,    // true, false or a mapping.
  kMapOrList,    // A mapping or a list.
  kVariables,    // A mapping (of variables).
  kAnyOf,        // One scalar of a fixed set (`choices`).
};

struct KeywordType {
  std::string_view key;
  Want want;
  std::vector<std::string> choices = {};
};

// GitLab's words for each kind ("jobs:x:key config should be ...").
std::string_view ShouldBe(const KeywordType& type) {
  switch (type.want) {
    case Want::kString:
      return "a string";
    case Want::kBool:
      return "a boolean value";
    case Want::kStrings:
      return "an array of strings";
    case Want::kScript:
      return "a string or a nested array of strings up to 10 levels deep";
    case Want::kMap:
      return "a hash";
    case Want::kList:
      return "an array";
    case Want::kStringOrMap:
      return "a hash or a string";
    case Want::kBoolOrMap:
      return "a hash or a boolean value";
    case Want::kMapOrList:
      return "a hash or an array";
    case Want::kVariables:
      return "a hash of key value pairs";
    case Want::kAnyOf:
      return "";
  }
  return "";
}

// A value GitLab replaces before it checks types: a `!reference`, or a
// scalar holding a CI/CD input (`$[[ inputs.x ]]`).
bool FilledInLater(const YamlNode& node) {
  return node.Tag() == "!reference" ||
         (node.IsScalar() && node.Scalar().find("$[[") != std::string::npos);
}

// Whether `node` or anything in it is FilledInLater.
bool HoldsFilledInLater(const YamlNode& node, int depth) {
  if (FilledInLater(node)) return true;
  if (depth > kMaxDepth || node.IsScalar()) return false;
  if (node.IsMap()) {
    for (const auto& entry : node) {
      if (HoldsFilledInLater(entry.first, depth + 1) ||
          HoldsFilledInLater(entry.second, depth + 1)) {
        return true;
      }
    }
    return false;
  }
  if (node.IsSequence()) {
    for (const YamlNode& item : node) {
      if (HoldsFilledInLater(item, depth + 1)) return true;
    }
  }
  return false;
}

bool IsYamlBool(const YamlNode& node) {
  if (!IsPlain(node)) return node.Tag() == "tag:yaml.org,2002:bool";
  // Ruby's YAML 1.1 reader: yes/no and on/off are booleans too.
  static const std::set<std::string> kBools = {
      "true", "True", "TRUE", "false", "False", "FALSE", "yes", "Yes", "YES",
      "no",   "No",   "NO",   "on",    "On",    "ON",    "off", "Off", "OFF"};
  return kBools.count(node.Scalar()) != 0;
}

bool IsStringItem(const YamlNode& node) {
  return (node.IsScalar() && !IsYamlBool(node)) || FilledInLater(node);
}

bool ScriptLines(const YamlNode& node, int depth) {
  if (IsStringItem(node)) return true;
  // The script's own list is level 0; GitLab takes lists nested in it
  // down to level 9 (10 levels in all).
  if (!node.IsSequence() || depth > 9) return false;
  for (const YamlNode& item : node) {
    if (!ScriptLines(item, depth + 1)) return false;
  }
  return true;
}

bool HasType(const YamlNode& node, const KeywordType& type) {
  switch (type.want) {
    case Want::kString:
      return node.IsScalar();
    case Want::kBool:
      return IsYamlBool(node);
    case Want::kStrings:
      if (!node.IsSequence()) return false;
      for (const YamlNode& item : node) {
        if (!IsStringItem(item)) return false;
      }
      return true;
    case Want::kScript:
      return ScriptLines(node, 0);
    case Want::kMap:
      return node.IsMap();
    case Want::kList:
      return node.IsSequence();
    case Want::kStringOrMap:
      return node.IsScalar() || node.IsMap();
    case Want::kBoolOrMap:
      return IsYamlBool(node) || node.IsMap();
    case Want::kMapOrList:
      return node.IsMap() || node.IsSequence();
    case Want::kVariables:
      return node.IsMap();
    case Want::kAnyOf:
      return node.IsScalar() && Contains(type.choices, node.Scalar());
  }
  return true;
}

// Checks the entries of `map` listed in `types`; `where` is GitLab's name
// for the map ("jobs:build", "jobs:build:artifacts").
void CheckTypes(const std::string& where, const YamlNode& map,
                const std::vector<KeywordType>& types, Reporter* report) {
  for (const KeywordType& type : types) {
    const Entry e = FindEntry(map, type.key);
    // An empty value unsets an inherited one.
    if (!e || e.value.IsNull() || FilledInLater(e.value)) continue;
    if (HasType(e.value, type)) continue;
    const std::string should =
        type.want == Want::kAnyOf
            ? absl::StrCat("one of ", absl::StrJoin(type.choices, ", "))
            : std::string(ShouldBe(type));
    report->At(
        e.value, e.key,
        absl::StrCat(where, where.empty() ? "" : ":", std::string(type.key),
                     " config should be ", should, ", not ", Describe(e.value),
                     " (GitLab refuses the pipeline)"));
  }
}

// The common keywords of job `job` (GitLab's ci.json schema): a value of
// the wrong type makes GitLab refuse the whole pipeline.
void CheckJobKeywordTypes(const std::string& job, const YamlNode& value,
                          Reporter* report) {
  // GitLab checks only that a hidden key (a template, a snippet for
  // `!reference`) is not empty: its entries may be anything until a job
  // extends or references them.
  if (!job.empty() && job[0] == '.') return;
  static const std::vector<KeywordType> kJob = {
      {"script", Want::kScript},
      {"before_script", Want::kScript},
      {"after_script", Want::kScript},
      {"stage", Want::kString},
      {"tags", Want::kStrings},
      {"variables", Want::kVariables},
      {"artifacts", Want::kMap},
      {"cache", Want::kMapOrList},
      // GitLab takes one need written as a mapping too (needs: {job: x}).
      {"needs", Want::kMapOrList},
      {"dependencies", Want::kStrings},
      {"rules", Want::kList},
      {"image", Want::kStringOrMap},
      {"services", Want::kList},
      {"environment", Want::kStringOrMap},
      {"allow_failure", Want::kBoolOrMap},
      {"interruptible", Want::kBool},
      {"timeout", Want::kString},
      {"coverage", Want::kString},
      {"resource_group", Want::kString},
      {"inherit", Want::kMap},
      {"id_tokens", Want::kMap},
      {"secrets", Want::kMap},
      {"hooks", Want::kMap},
      {"when",
       Want::kAnyOf,
       {"on_success", "on_failure", "always", "manual", "delayed", "never"}},
  };
  static const std::vector<KeywordType> kArtifacts = {
      {"paths", Want::kStrings},
      {"exclude", Want::kStrings},
      {"name", Want::kString},
      {"expose_as", Want::kString},
      {"expire_in", Want::kString},
      {"untracked", Want::kBool},
      {"public", Want::kBool},
      {"reports", Want::kMap},
      {"when", Want::kAnyOf, {"on_success", "on_failure", "always"}},
  };
  const std::string where = absl::StrCat("jobs:", Shown(job));
  // A gang's tags are checked with its parallel:distributed block.
  const Entry parallel = FindEntry(value, "parallel");
  const bool block = parallel && parallel.value.IsMap() &&
                     FindEntry(parallel.value, "distributed");
  std::vector<KeywordType> types;
  for (const KeywordType& type : kJob) {
    if (!block || type.key != "tags") types.push_back(type);
  }
  CheckTypes(where, value, types, report);
  // Deeper checks of what GitLab validates in depth, on values written out
  // (a `!reference` or an input is filled in first).
  for (const auto& [key, message] :
       CheckJobKeywordValues(ToCiValue(value), job)) {
    const Entry e = FindEntry(value, key);
    // A bad only/except:variables expression is reported at its place
    // (CheckRuleExpressions).
    if (!e || HoldsFilledInLater(e.value, 0) ||
        message.find("invalid expression") != std::string::npos) {
      continue;
    }
    const size_t from = message.rfind("job ", 0) == 0 ? 4 : 0;
    report->At(
        e.value, e.key,
        absl::StrCat(message.substr(from), " (GitLab refuses the pipeline)"));
  }
  if (const Entry artifacts = FindEntry(value, "artifacts");
      artifacts && artifacts.value.IsMap()) {
    CheckTypes(where + ":artifacts", artifacts.value, kArtifacts, report);
  }
}

// Whether `value`, an item of a script list at nesting `level` (the
// list's own items are at 1), stays within GitLab's 10 levels (the list
// and 9 more) once its
// `!reference`s are filled in: GitLab nests a referenced list where the
// reference stands (and flattens the script only after this check).
// What ScriptNestsWithin() found for a reference (its path, dumped) at a
// level: nested references repeat (a "reference bomb" names one list
// millions of times), and each is looked at once.
using ScriptDepthMemo = std::map<std::pair<std::string, int>, bool>;

bool ScriptNestsWithin(const CiConfigModel& model, const CiValue& value,
                       int level, int hops, ScriptDepthMemo* memo) {
  if (value.is_object() && value.size() == 1 && value.contains("!reference")) {
    const CiValue& path = value["!reference"];
    // A loop, or a reference that does not resolve, is reported elsewhere.
    if (hops > 10 || !path.is_array() || path.empty() || !path[0].is_string()) {
      return true;
    }
    const std::pair<std::string, int> key = {path.dump(), level};
    if (const auto known = memo->find(key); known != memo->end()) {
      return known->second;
    }
    // While it is looked at (a loop reaches it again): within.
    (*memo)[key] = true;
    // A job (after its extends), or any other top-level entry (a list).
    std::string unknown;
    absl::StatusOr<CiValue> target =
        model.Extended(path[0].get<std::string>(), 0, &unknown);
    if (!target.ok() || !target->is_object()) {
      std::optional<CiValue> top = model.Top(path[0].get<std::string>());
      if (!top.has_value()) return true;
      target = *std::move(top);
    }
    const CiValue* at = &*target;
    for (size_t i = 1; i < path.size(); ++i) {
      if (!path[i].is_string() || !at->is_object()) return true;
      const auto found = at->find(path[i].get<std::string>());
      if (found == at->end()) return true;
      at = &*found;
    }
    const bool within = ScriptNestsWithin(model, *at, level, hops + 1, memo);
    (*memo)[key] = within;
    return within;
  }
  if (!value.is_array()) return true;
  if (level > 9) return false;
  for (const CiValue& item : value) {
    if (!ScriptNestsWithin(model, item, level + 1, hops, memo)) return false;
  }
  return true;
}

// A job's script lists that hold `!reference`s nest, once those are filled
// in, at most 10 levels deep, as GitLab requires (written-out lists are
// checked by CheckJobKeywordTypes).
void CheckReferencedScriptDepth(const CiConfigModel& model,
                                const std::string& job, const YamlNode& value,
                                Reporter* report) {
  for (const char* key : {"before_script", "script", "after_script"}) {
    const Entry e = FindEntry(value, key);
    if (!e || !HoldsFilledInLater(e.value, 0)) continue;
    const CiValue script = ToCiValue(e.value);
    ScriptDepthMemo memo;
    bool within = true;
    if (script.is_array()) {
      for (const CiValue& item : script) {
        within = within && ScriptNestsWithin(model, item, 1, 0, &memo);
      }
    } else {
      // `script: !reference [...]`: the list it names is the script.
      within = ScriptNestsWithin(model, script, 0, 0, &memo);
    }
    if (!within) {
      report->At(e.value, e.key,
                 absl::StrCat("jobs:", Shown(job), ":", key,
                              " config should be a string or a nested array "
                              "of strings up to 10 levels deep, not one that "
                              "its !reference values nest deeper (GitLab "
                              "refuses the pipeline)"));
    }
  }
}

// The top-level keywords' types, as CheckJobKeywordTypes.
void CheckTopLevelTypes(const YamlNode& root, Reporter* report) {
  static const std::vector<KeywordType> kTop = {
      {"variables", Want::kVariables},
      {"stages", Want::kStrings},
      {"default", Want::kMap},
      {"workflow", Want::kMap},
  };
  CheckTypes("", root, kTop, report);
}

// Whether jobs have script:, run: or trigger:, their own or through
// extends, for GitLab's check that every job that runs has one. The
// definitions of each name in the main file and the files it includes;
// each name is worked out once (thousands of jobs may share a template).
class RunsKeyword {
 public:
  explicit RunsKeyword(const std::vector<std::vector<YamlNode>>& files) {
    for (const std::vector<YamlNode>& documents : files) {
      for (const YamlNode& root : documents) {
        for (const auto& entry : root) {
          if (entry.first.IsScalar()) {
            definitions_[entry.first.Scalar()].push_back(entry.second);
          }
        }
      }
    }
  }

  // nullopt when it depends on a job gdt does not see.
  std::optional<bool> Has(const std::string& job, int depth = 0) {
    if (const auto known = memo_.find(job); known != memo_.end()) {
      return known->second;
    }
    const auto found = definitions_.find(job);
    if (found == definitions_.end() || depth > 12) return std::nullopt;
    memo_[job] = std::nullopt;  // A cycle stays unknown.
    std::optional<bool> has = false;
    for (const YamlNode& value : found->second) {
      for (const char* key : {"script", "run", "trigger"}) {
        if (MergedEntry(value, key, 0)) has = true;
      }
    }
    for (const YamlNode& value : found->second) {
      if (*has) break;
      const YamlNode extends = MergedEntry(value, "extends", 0);
      std::vector<std::string> parents;
      if (extends.IsScalar()) parents.push_back(extends.Scalar());
      if (extends.IsSequence()) {
        for (const YamlNode& parent : extends) {
          if (parent.IsScalar()) parents.push_back(parent.Scalar());
        }
      }
      for (const std::string& parent : parents) {
        const std::optional<bool> inherited = Has(parent, depth + 1);
        if (!inherited.has_value()) {
          has = std::nullopt;
          break;
        }
        if (*inherited) {
          has = true;
          break;
        }
      }
      if (!has.has_value()) break;
    }
    memo_[job] = has;
    return has;
  }

 private:
  std::unordered_map<std::string, std::vector<YamlNode>> definitions_;
  std::unordered_map<std::string, std::optional<bool>> memo_;
};

// A job that runs (not hidden) needs script:, run: or trigger:, its own
// or inherited through extends or from an included job of the same name;
// GitLab refuses the pipeline otherwise. Not checked where gdt cannot see
// everything the job inherits (an include it does not read).
void CheckJobRuns(const CiConfigModel& model, RunsKeyword* runs,
                  const std::string& job, const YamlNode& key,
                  const YamlNode& value, Reporter* report) {
  if (job.empty() || job[0] == '.') return;
  const std::string message =
      absl::StrCat("jobs ", Shown(job),
                   " config should implement the script:, run:, or trigger: "
                   "keyword (GitLab refuses the pipeline); the job is ");
  if (!value.IsMap()) {
    report->At(value, key, message + Describe(value));
    return;
  }
  if (model.has_include()) return;
  const std::optional<bool> has = runs->Has(job);
  if (!has.has_value() || *has) return;
  report->At(key, key,
             message + (value.size() == 0 ? "an empty mapping"
                                          : "without any of them"));
}

// The keys GitLab accepts in a job (its Job, Processable and Bridge entries,
// with the Premium ones); any other key makes it refuse the pipeline. Hidden
// jobs are not checked, as GitLab does not check them: a template or a
// snippet for `!reference` may hold anything.
void CheckJobKeys(const std::string& job, const YamlNode& value,
                  Reporter* report) {
  if (job.empty() || job[0] == '.' || !value.IsMap()) return;
  static const std::vector<std::string> kKeys = absl::StrSplit(
      "after_script allow_failure artifacts before_script cache coverage "
      "dast_configuration dependencies environment except extends hooks "
      "id_tokens identity image inherit inputs interruptible "
      "manual_confirmation needs only pages pages_path_prefix parallel "
      "publish release resource_group retry rules run script secrets "
      "services stage start_in tags timeout trigger type variables when",
      ' ');
  std::vector<std::string> unknown;
  YamlNode first;
  // Merged-in keys count as the job's own, as GitLab reads them.
  for (const Entry& entry : MergedEntries(value)) {
    if (!entry.key.IsScalar()) continue;
    const std::string& name = entry.key.Scalar();
    // MergedEntries names each key once.
    if (std::find(kKeys.begin(), kKeys.end(), name) != kKeys.end()) continue;
    if (unknown.empty()) first = entry.key;
    unknown.push_back(name);
  }
  // GitLab's rules replace only and except; a job may not have both.
  if (FindEntry(value, "rules")) {
    std::vector<std::string> both;
    YamlNode at;
    for (const char* old : {"only", "except"}) {
      if (const Entry e = FindEntry(value, old)) {
        if (both.empty()) at = e.key;
        both.push_back(old);
      }
    }
    if (!both.empty()) {
      report->At(at, at,
                 absl::StrCat("jobs:", Shown(job),
                              " config key may not be used with `rules`: ",
                              absl::StrJoin(both, ", "),
                              " (GitLab refuses the pipeline)"));
    }
  }
  if (unknown.empty()) return;
  report->At(
      first, first,
      absl::StrCat("jobs:", Shown(job), " config contains unknown keys: ",
                   Shown(absl::StrJoin(unknown, ", ")),
                   unknown.size() == 1 ? DidYouMean(unknown[0], kKeys) : "",
                   " (GitLab refuses the pipeline)"));
}

// GitLab refuses a project's pipeline without a job that runs (one whose
// name does not start with a dot): "jobs config should contain at least one
// visible job", and an empty file with "Please provide content of
// .gitlab-ci.yml". The same file is fine as an included one, so lint warns.
void WarnWithoutVisibleJob(const std::vector<std::vector<YamlNode>>& files,
                           std::vector<CiDiagnostic>* warnings) {
  bool empty = true;
  for (const std::vector<YamlNode>& documents : files) {
    for (const YamlNode& root : documents) {
      for (const auto& entry : root) {
        empty = false;
        if (!entry.first.IsScalar()) continue;
        const std::string& name = entry.first.Scalar();
        if (!name.empty() && name[0] != '.' && !IsCiKeyword(name)) return;
      }
    }
  }
  warnings->push_back(CiDiagnostic{
      1, 1,
      absl::StrCat(empty ? "the file is empty" : "the file has no visible job",
                   ": GitLab refuses it as a project's pipeline (",
                   empty ? "Please provide content of .gitlab-ci.yml"
                         : "jobs config should contain at least one visible "
                           "job",
                   "); as a file that another one includes it is fine"),
      ""});
}

// GitLab reads one document of a file (DocumentsGitLabReads): lint warns at
// every other document but the header, since nothing there runs.
void WarnAboutIgnoredDocuments(std::string_view text,
                               const std::vector<YamlNode>& documents,
                               Reporter* warn) {
  if (documents.empty()) return;
  const GitLabDocuments read = DocumentsGitLabReads(text, documents);
  for (size_t i = 0; i < documents.size(); ++i) {
    if (i == read.loaded || (read.header && i == 0)) continue;
    warn->At(documents[i], documents[i],
             "GitLab ignores this document: it reads only one document of "
             "a file (the first, or the jobs after a component's spec: "
             "header), so nothing here runs");
  }
}

// GitLab's default limit on one job's needs (ci_needs_size_limit).
constexpr int kGitLabNeedsLimit = 50;

// A job that needs a gang needs each of its members (GitLab expands a need
// of a parallel job to every instance), and GitLab refuses a job with more
// than 50 needs: reported at the job's needs.
// `rules:if` and `only`/`except` `variables:` expressions GitLab would
// refuse the file for, in jobs, templates and `workflow:`.
// A file with a `spec:` header (a pipeline that takes inputs): GitLab
// fills in every `$[[ ... ]]` block of its configuration from the header's
// inputs before the jobs exist, and refuses the pipeline for a block that
// names no declared input ("unknown interpolation key"), except blocks of
// the matrix context (and a component's own data), which it leaves for
// later. `documents`: the configuration after the header.
// A value already reported (a gang's input, checked with its default) is
// not reported again: `errors` are those so far.
void CheckHeaderInterpolations(const std::vector<YamlNode>& documents,
                               const ComponentInputs& inputs,
                               const std::vector<CiDiagnostic>& errors,
                               Reporter* report) {
  std::set<std::string> reported;
  std::set<std::pair<int, int>> known;
  for (const CiDiagnostic& d : errors) {
    if (d.file.empty()) known.insert({d.line, d.column});
  }
  const auto check = [&](const YamlNode& node) {
    const std::string& text = node.Scalar();
    size_t at = 0;
    while (true) {
      const size_t open = text.find("$[[", at);
      if (open == std::string::npos) return;
      const size_t close = text.find("]]", open + 3);
      if (close == std::string::npos) return;
      at = close + 2;
      const std::string data(absl::StripAsciiWhitespace(
          absl::string_view(text).substr(open + 3, close - open - 3)));
      // GitLab's block needs two characters or more inside.
      if (data.size() < 2) continue;
      const std::string access(absl::StripAsciiWhitespace(
          absl::string_view(data).substr(0, data.find('|'))));
      const std::vector<std::string> objects =
          absl::StrSplit(access, absl::MaxSplits('.', 4));
      if (objects[0] == "matrix") continue;
      std::string why;
      if (objects[0] == "component" && objects.size() == 2 &&
          inputs.component_fields.count(objects[1]) != 0) {
        // Filled in only where the file is included as a component.
        if (report->warnings != nullptr && reported.insert(access).second) {
          report->warnings->At(
              node, node,
              absl::StrCat("'$[[ ", data,
                           " ]]': GitLab fills in the component context "
                           "only when the file is included as a CI/CD "
                           "component (include: component:); as a "
                           "project's pipeline or a local include GitLab "
                           "refuses the file"));
        }
        continue;
      }
      if (objects.size() <= 1) {
        why = "invalid interpolation access pattern";
      } else if (objects[0] == "component") {
        why = absl::StrCat(
            "unknown interpolation key: `",
            objects.size() == 2 ? objects[1] : objects[2],
            "` (the spec: header's component: list, GitLab's component "
            "data for the file, does not give it)");
      } else if (objects[0] != "inputs") {
        why = absl::StrCat("unknown interpolation key: `", objects[0], "`");
      } else if (inputs.defaults.count(objects[1]) == 0) {
        why = absl::StrCat("unknown interpolation key: `", objects[1],
                           "` (the spec: inputs header does not declare it)");
      } else {
        continue;
      }
      const YamlMark mark = node.Mark();
      if (known.count({mark.line + 1, mark.column + 1}) != 0) return;
      if (!reported.insert(access).second) continue;
      report->At(node, node,
                 absl::StrCat("'$[[ ", data, " ]]': ", why,
                              "; GitLab fills in this file's $[[ ... ]] "
                              "from its spec: inputs header and refuses "
                              "the pipeline"));
    }
  };
  std::function<void(const YamlNode&, int)> walk = [&](const YamlNode& node,
                                                       int depth) {
    if (!node || depth > kMaxDepth) return;
    if (node.IsScalar()) {
      if (node.Scalar().find("$[[") != std::string::npos) check(node);
      return;
    }
    for (size_t i = 0; i < node.size(); ++i) {
      if (node.IsMap()) {
        walk(node.Entry(i).first, depth + 1);
        walk(node.Entry(i).second, depth + 1);
      } else if (node.IsSequence()) {
        walk(node.Item(i), depth + 1);
      }
    }
  };
  for (const YamlNode& root : documents) walk(root, 0);
}

void CheckRuleExpressions(const std::vector<YamlNode>& documents,
                          Reporter* report) {
  const auto check = [&](const std::string& owner, const YamlNode& expression) {
    if (!expression.IsScalar()) return;
    if (absl::Status ok = CheckExpression(expression.Scalar()); !ok.ok()) {
      report->At(
          expression, expression,
          absl::StrCat(owner, ": invalid expression '", expression.Scalar(),
                       "': ", ok.message(), "; GitLab refuses the file"));
    }
  };
  for (const YamlNode& root : documents) {
    if (!root.IsMap()) continue;
    for (const auto& entry : root) {
      const YamlNode& key = entry.first;
      const YamlNode& value = entry.second;
      if (!key.IsScalar() || !value.IsMap()) continue;
      const std::string& name = key.Scalar();
      if (IsCiKeyword(name) && name != "workflow") continue;
      if (const Entry rules = FindEntry(value, "rules");
          rules && rules.value.IsSequence()) {
        for (size_t i = 0; i < rules.value.size(); ++i) {
          if (const Entry condition = FindEntry(rules.value.Item(i), "if")) {
            check(absl::StrCat(name, ": rules[", i, "]: if"), condition.value);
          }
        }
      }
      for (const char* policy : {"only", "except"}) {
        const Entry found = FindEntry(value, policy);
        const Entry variables =
            found ? FindEntry(found.value, "variables") : Entry();
        if (!variables || !variables.value.IsSequence()) continue;
        for (size_t i = 0; i < variables.value.size(); ++i) {
          check(absl::StrCat(name, ": ", policy, ":variables[", i, "]"),
                variables.value.Item(i));
        }
      }
    }
  }
}

void CheckNeedsLimit(const std::vector<YamlNode>& documents,
                     const std::vector<GangSpec>& gangs, Reporter* report) {
  std::unordered_map<std::string, int> members;
  for (const GangSpec& gang : gangs) members[gang.job] = gang.nodes;
  if (members.empty()) return;
  for (const YamlNode& root : documents) {
    for (const auto& entry : root) {
      const YamlNode& key = entry.first;
      const Entry needs = FindEntry(entry.second, "needs");
      if (!needs || !(needs.value.IsSequence() || needs.value.IsMap())) {
        continue;
      }
      // One need may be written as a mapping (`needs: {job: x}`).
      std::vector<YamlNode> list;
      if (needs.value.IsMap()) list.push_back(needs.value);
      for (size_t i = 0; needs.value.IsSequence() && i < needs.value.size();
           ++i) {
        list.push_back(needs.value.Item(i));
      }
      int total = 0;
      std::string largest;
      int largest_size = 0;
      for (const YamlNode& need : list) {
        std::string name;
        if (need.IsScalar()) {
          name = need.Scalar();
        } else if (const Entry job = FindEntry(need, "job");
                   job && job.value.IsScalar()) {
          name = job.value.Scalar();
        }
        const auto gang = members.find(name);
        const int size = gang == members.end() ? 1 : gang->second;
        total += size;
        if (gang != members.end() && size > largest_size) {
          largest = name;
          largest_size = size;
        }
      }
      if (total > kGitLabNeedsLimit && !largest.empty()) {
        report->At(
            needs.key, needs.key,
            absl::StrCat(key.IsScalar() ? key.Scalar() : "?", ": needs ", total,
                         " jobs, since each member of a gang counts ("
                         "gang ",
                         largest, " has ", largest_size,
                         " members); GitLab allows at most ", kGitLabNeedsLimit,
                         " needs per job (its default limit), so it "
                         "would refuse the pipeline"));
      }
    }
  }
}

// GitLab's matrix expressions (`$[[ matrix.NAME ]]`), which it fills in,
// in the `needs` of each job of a `parallel: matrix:`, with the values of
// that job. Returns `text` filled in from `variables`; a name they lack is
// added to `missing` and its expression left as it is.
std::string FillMatrixExpressions(
    const std::string& text,
    const std::vector<std::pair<std::string, std::string>>& variables,
    std::vector<std::string>* missing) {
  std::string out;
  size_t at = 0;
  while (true) {
    const size_t open = text.find("$[[", at);
    if (open == std::string::npos) break;
    size_t i = open + 3;
    const auto skip_space = [&] {
      while (i < text.size() && absl::ascii_isspace(text[i])) ++i;
    };
    skip_space();
    size_t name_begin = 0;
    size_t name_end = 0;
    bool matched = false;
    if (text.compare(i, 7, "matrix.") == 0) {
      i += 7;
      name_begin = i;
      while (i < text.size() && (absl::ascii_isalnum(text[i]) ||
                                 text[i] == '_' || text[i] == '-')) {
        ++i;
      }
      name_end = i;
      skip_space();
      matched = name_end > name_begin && text.compare(i, 2, "]]") == 0;
    }
    if (!matched) {
      out.append(text, at, open + 3 - at);
      at = open + 3;
      continue;
    }
    const std::string name = text.substr(name_begin, name_end - name_begin);
    out.append(text, at, open - at);
    at = i + 2;
    const auto value = std::find_if(
        variables.begin(), variables.end(),
        [&](const auto& variable) { return variable.first == name; });
    if (value == variables.end()) {
      missing->push_back(name);
      out.append(text, open, at - open);
    } else {
      out += value->second;
    }
  }
  out.append(text, at, std::string::npos);
  return out;
}

// `value` with every string in it filled in as by FillMatrixExpressions.
CiValue FillMatrixValue(
    const CiValue& value,
    const std::vector<std::pair<std::string, std::string>>& variables,
    std::vector<std::string>* missing) {
  if (value.is_string()) {
    return FillMatrixExpressions(value.get<std::string>(), variables, missing);
  }
  if (!value.is_array() && !value.is_object()) return value;
  CiValue out = value;
  for (auto it = out.begin(); it != out.end(); ++it) {
    *it = FillMatrixValue(*it, variables, missing);
  }
  return out;
}

// The first scalar at or below `node` (a few levels deep) whose text holds
// `part`; an empty node when none does.
YamlNode ScalarHolding(const YamlNode& node, std::string_view part,
                       int depth = 0) {
  if (!node || depth > 8) return YamlNode();
  if (node.IsScalar()) {
    return node.Scalar().find(part) != std::string::npos ? node : YamlNode();
  }
  for (size_t i = 0; i < node.size(); ++i) {
    if (node.IsMap()) {
      if (YamlNode found =
              ScalarHolding(node.Entry(i).second, part, depth + 1)) {
        return found;
      }
    } else if (node.IsSequence()) {
      if (YamlNode found = ScalarHolding(node.Item(i), part, depth + 1)) {
        return found;
      }
    }
  }
  return YamlNode();
}

// Calls `check` with each job of `documents` that runs (not hidden, not a
// keyword), its key and its mapping, unless `skip` holds for it.
void ForEachRunningJob(
    const std::vector<YamlNode>& documents,
    const std::function<bool(const std::string&)>& skip,
    const std::function<void(const std::string&, const YamlNode&,
                             const YamlNode&)>& check) {
  for (const YamlNode& root : documents) {
    for (const auto& entry : root) {
      const YamlNode& key = entry.first;
      if (!key.IsScalar() || !entry.second.IsMap()) continue;
      const std::string& job = key.Scalar();
      if (job.empty() || job[0] == '.' || IsCiKeyword(job)) continue;
      if (skip && skip(job)) continue;
      check(job, key, entry.second);
    }
  }
}

// Two references GitLab refuses the pipeline for, by name: a job's stage
// that `stages:` does not list (.pre and .post always exist; without
// `stages:`, build, test and deploy), and a need of a job that the
// configuration does not define. Not judged where gdt cannot see it all (an
// include it does not read, `types:`), nor for values filled in later
// (`$[[ ... ]]`, `!reference` left unresolved), optional needs, needs of
// another pipeline or project, or needs with `parallel` (CheckMatrixNeeds).
// A need of a job that exists but that rules leave out of the pipeline
// depends on the pipeline, so it is not judged here. Jobs for which `skip`
// holds are not checked.
void CheckStagesAndNeeds(
    const std::vector<YamlNode>& documents, const CiConfigModel& model,
    const CiIncludingConfig* including, Reporter* report,
    const std::function<bool(const std::string&)>& skip = nullptr) {
  if (model.has_include() || model.Top("types").has_value()) return;
  // A file that another one includes: the stages are that configuration's
  // and so are the jobs, by name.
  if (including != nullptr && including->unseen) return;
  static const std::vector<std::string> kKeys = {"stage", "needs"};
  std::vector<std::string> stages;
  bool stages_known = true;
  if (including != nullptr) {
    if (including->stages.has_value()) {
      stages = *including->stages;
    } else {
      stages_known = false;
    }
  } else if (const std::optional<CiValue> listed = model.Top("stages")) {
    // A type GitLab refuses is reported elsewhere.
    std::optional<std::vector<std::string>> names = CiStageNames(*listed);
    stages_known = names.has_value();
    if (names.has_value()) stages = *std::move(names);
  } else {
    stages = {"build", "test", "deploy"};
  }
  stages.insert(stages.begin(), ".pre");
  stages.push_back(".post");
  std::vector<std::string> jobs;  // This file's, for suggestions.
  // A file alone may be a piece that another file includes.
  const std::string alone =
      including != nullptr
          ? ""
          : "; if another file includes this one, lint that file";
  ForEachRunningJob(
      documents, skip,
      [&](const std::string& job, const YamlNode& key, const YamlNode& value) {
        const absl::StatusOr<CiConfigModel::Effective> effective =
            model.Resolve(job, kKeys);
        if (!effective.ok()) return;
        const CiValue& config = effective->config;
        const auto stage = config.find("stage");
        if (stages_known && effective->Known("stage") &&
            stage != config.end() && stage->is_string() &&
            stage->get<std::string>().find("$[[") == std::string::npos &&
            effective->unresolved.count("stage") == 0 &&
            std::find(stages.begin(), stages.end(),
                      stage->get<std::string>()) == stages.end()) {
          const Entry own = FindEntry(value, "stage");
          report->At(own ? own.value : key, own ? own.key : key,
                     absl::StrCat(Shown(job), " job: chosen stage ",
                                  Shown(stage->get<std::string>()),
                                  " does not exist; available stages are ",
                                  Shown(absl::StrJoin(stages, ", ")),
                                  DidYouMean(stage->get<std::string>(), stages),
                                  " (GitLab refuses the pipeline", alone, ")"));
        }
        const auto needs = config.find("needs");
        if (!effective->Known("needs") || needs == config.end() ||
            effective->unresolved.count("needs") != 0) {
          return;
        }
        const CiValue list = needs->is_object()  ? CiValue::array({*needs})
                             : needs->is_array() ? *needs
                                                 : CiValue::array();
        for (const CiValue& need : list) {
          std::string name;
          if (need.is_string()) {
            name = need.get<std::string>();
          } else if (need.is_object()) {
            const auto named = need.find("job");
            const auto optional = need.find("optional");
            if (named == need.end() || !named->is_string() ||
                need.contains("pipeline") || need.contains("project") ||
                need.contains("parallel") ||
                (optional != need.end() && *optional == true)) {
              continue;
            }
            name = named->get<std::string>();
          } else {
            continue;
          }
          // The job of a matrix ("build: [a, b]") or of parallel: N ("build
          // 1/3") is named after the job that makes it.
          std::string made_by = name;
          if (const size_t matrix = made_by.find(": [");
              matrix != std::string::npos) {
            made_by.resize(matrix);
          } else if (const size_t space = made_by.rfind(' ');
                     space != std::string::npos &&
                     made_by.find('/', space) != std::string::npos) {
            made_by.resize(space);
          }
          const auto defined = [&](const std::string& job_name) {
            return model.HasJob(job_name) ||
                   (including != nullptr &&
                    including->names.count(job_name) != 0);
          };
          if (name.find("$[[") != std::string::npos || defined(name) ||
              defined(made_by)) {
            continue;
          }
          // Where: the job's own need naming it, else its needs, else the job.
          YamlNode at = key;
          YamlNode at_key = key;
          if (const Entry own = FindEntry(value, "needs")) {
            at = own.value;
            at_key = own.key;
            if (const YamlNode item = ScalarHolding(own.value, name)) at = item;
          }
          if (jobs.empty()) {  // For suggestions; read once.
            for (const YamlNode& document : documents) {
              for (const auto& other : document) {
                if (other.first.IsScalar() && other.second.IsMap() &&
                    !IsCiKeyword(other.first.Scalar())) {
                  jobs.push_back(other.first.Scalar());
                }
              }
            }
          }
          report->At(at, at_key,
                     absl::StrCat(Shown(job), " job: undefined need: ",
                                  Shown(name), DidYouMean(name, jobs),
                                  " (GitLab refuses the pipeline", alone, ")"));
          break;  // GitLab names the first.
        }
      });
}

// What GitLab refuses in `needs` that select jobs of a matrix (`needs:
// {job: X, parallel: {matrix: [...]}}`): it names each selected job
// "X: [values]", and a name that X's jobs do not have is an undefined
// need (X with `parallel: N` names its jobs "X 1/N", so no selector
// matches them; X without `parallel` keeps the need as X, which GitLab
// accepts). The name is made of the selector's values alone, so a
// selector that names only some of X's variables selects nothing unless a
// job of the pipeline has exactly that name. Matrix expressions are filled
// in first, in each job of the needing job's matrix; one naming a variable
// that matrix lacks is refused. A job or parallel value gdt cannot see (an
// unread include) is not judged; an optional need is not either. Jobs for
// which `skip` holds are not checked (jobs another file defines last).
void CheckMatrixNeeds(
    const std::vector<YamlNode>& documents, const CiConfigModel& model,
    Reporter* report,
    const std::function<bool(const std::string&)>& skip = nullptr) {
  static const std::vector<std::string> kKeys = {"parallel", "needs"};
  static const std::vector<std::string> kParallel = {"parallel"};
  const auto matrix_of = [](const CiValue& config) -> const CiValue* {
    const auto parallel = config.find("parallel");
    if (parallel == config.end() || !parallel->is_object()) return nullptr;
    const auto matrix = parallel->find("matrix");
    return matrix == parallel->end() ? nullptr : &*matrix;
  };
  ForEachRunningJob(
      documents, skip,
      [&](const std::string& job, const YamlNode& key, const YamlNode& value) {
        const absl::StatusOr<CiConfigModel::Effective> effective =
            model.Resolve(job, kKeys);
        if (!effective.ok() || !effective->Known("needs") ||
            !effective->Known("parallel")) {
          return;
        }
        const CiValue& config = effective->config;
        const auto needs = config.find("needs");
        if (needs == config.end() ||
            !(needs->is_array() || needs->is_object())) {
          return;
        }
        const std::string text = needs->dump();
        if (text.find("\"parallel\"") == std::string::npos &&
            text.find("$[[") == std::string::npos) {
          return;
        }
        // Where to report: the job's own needs (its entry `index`), else the
        // job's name.
        const Entry own = FindEntry(value, "needs");
        const auto place = [&](size_t index) {
          if (!own) return key;
          if (own.value.IsSequence() && index < own.value.size()) {
            const YamlNode item = own.value.Item(index);
            if (const Entry parallel = FindEntry(item, "parallel")) {
              return parallel.key;
            }
            return item;
          }
          return own.key;
        };
        std::vector<CiMatrixJob> instances;
        const CiValue* matrix = matrix_of(config);
        if (matrix != nullptr) {
          if (!ReadCiMatrix(*matrix, job, &instances).ok()) return;
        } else {
          instances.push_back(CiMatrixJob{job, {}});
        }
        std::set<std::string> reported_missing;
        std::set<size_t> reported_needs;
        for (const CiMatrixJob& instance : instances) {
          std::vector<std::string> missing;
          const CiValue filled =
              matrix == nullptr
                  ? *needs
                  : FillMatrixValue(*needs, instance.variables, &missing);
          if (!missing.empty()) {
            for (const std::string& name : missing) {
              if (!reported_missing.insert(name).second) continue;
              const YamlNode at = ScalarHolding(own ? own.value : YamlNode(),
                                                absl::StrCat("matrix.", name));
              report->At(at, own ? own.key : key,
                         absl::StrCat(job, " job: '", name,
                                      "' does not exist in matrix "
                                      "configuration (its parallel:matrix "
                                      "has no variable ",
                                      name, "); GitLab refuses the pipeline"));
            }
            continue;  // GitLab keeps such a job's needs unfilled.
          }
          const CiValue list =
              filled.is_object() ? CiValue::array({filled}) : filled;
          for (size_t i = 0; i < list.size(); ++i) {
            const CiValue& need = list[i];
            if (reported_needs.count(i) != 0 || !need.is_object()) continue;
            const auto optional = need.find("optional");
            if (optional != need.end() && *optional == true) continue;
            std::string producer;
            const auto job_name = need.find("job");
            if (job_name == need.end() || !CiScalarText(*job_name, &producer)) {
              continue;
            }
            const CiValue* selector = matrix_of(need);
            if (selector == nullptr || !model.HasJob(producer)) continue;
            const absl::StatusOr<CiConfigModel::Effective> made =
                model.Resolve(producer, kParallel);
            if (!made.ok() || !made->Known("parallel")) continue;
            const auto parallel = made->config.find("parallel");
            if (parallel == made->config.end() || parallel->is_null()) continue;
            std::vector<CiMatrixJob> selected;
            if (!ReadCiMatrix(*selector, producer, &selected).ok()) continue;
            std::vector<CiMatrixJob> jobs;
            // A gang's block becomes `parallel: N`: its members are
            // numbered jobs, as for a number.
            const bool gang =
                parallel->is_object() && parallel->contains("distributed");
            if (const CiValue* jobs_matrix = matrix_of(made->config)) {
              if (!ReadCiMatrix(*jobs_matrix, producer, &jobs).ok()) continue;
            } else if (parallel->is_object() && !gang) {
              continue;  // Not a number or a matrix: reported elsewhere.
            }
            // GitLab names the selected job "X: [values]" from the
            // selector's values alone, in the selector's order, and looks
            // that name up among all jobs: a selector naming only some of
            // X's variables (or naming them in another order) selects no
            // job of X whose name has more values.
            const auto selects = [&](const CiMatrixJob& one) {
              return model.HasJob(one.name) ||
                     std::any_of(jobs.begin(), jobs.end(),
                                 [&](const CiMatrixJob& made_job) {
                                   return made_job.name == one.name;
                                 });
            };
            for (const CiMatrixJob& one : selected) {
              if (selects(one)) continue;
              std::string why;
              if (gang) {
                why = absl::StrCat(producer,
                                   " is a gang, whose members are numbered "
                                   "jobs (",
                                   producer, " 1/N), not a matrix; need ",
                                   producer, " by its name");
              } else if (parallel->is_object()) {
                why = absl::StrCat("no job of ", producer,
                                   "'s parallel:matrix has these values");
                // Some of a job's values, or all in another order: GitLab
                // matches the whole name, not the variables.
                for (const CiMatrixJob& made_job : jobs) {
                  if (std::all_of(one.variables.begin(), one.variables.end(),
                                  [&](const auto& variable) {
                                    return std::find(made_job.variables.begin(),
                                                     made_job.variables.end(),
                                                     variable) !=
                                           made_job.variables.end();
                                  })) {
                    why = absl::StrCat(
                        "GitLab names the job from the selector's values "
                        "alone and in its order, and no job is named so; ",
                        producer, "'s jobs are named like ", made_job.name,
                        ", so give every variable of the job, in ", producer,
                        "'s order");
                    break;
                  }
                }
              } else {
                std::string count;
                if (!CiScalarText(*parallel, &count)) count = parallel->dump();
                why = absl::StrCat(producer, " has parallel: ", count,
                                   ", whose jobs are numbered, not a matrix");
              }
              if (matrix == nullptr &&
                  one.name.find("$[[") != std::string::npos) {
                why = absl::StrCat(
                    "GitLab fills in $[[ matrix.* ]] only in a job with "
                    "parallel:matrix, which ",
                    job, " has not");
              }
              report->At(place(i), key,
                         absl::StrCat(instance.name,
                                      " job: undefined need: ", one.name, " (",
                                      why, "); GitLab refuses the pipeline"));
              reported_needs.insert(i);
              break;
            }
          }
        }
      });
}

CiExpansion Process(std::string_view text, const CiExpandOptions& options,
                    bool lint) {
  CiExpansion result;
  Reporter report(&result.errors);
  if (const std::string encoding = OtherEncoding(text); !encoding.empty()) {
    report.AtLine(
        0, 0,
        absl::StrCat("the file is ", encoding,
                     "; GitLab reads CI files as UTF-8 (convert it, "
                     "e.g. iconv -f ",
                     encoding.substr(0, encoding.find(' ')), " -t UTF-8)"));
    return result;
  }
  const Lines lines = SplitLines(text);
  CheckCharacters(lines, &report);
  if (!result.ok()) return result;
  YamlError error;
  const std::unique_ptr<YamlTree> tree = YamlTree::Parse(text, &error);
  if (!error.message.empty()) {
    // A tab in the indentation at or above the error (the last one) is
    // what YAML refused.
    const size_t last =
        error.mark.is_null()
            ? 0
            : std::min(lines.lines.size(),
                       static_cast<size_t>(error.mark.line) + 1);
    for (size_t i = last; i-- > 0;) {
      const std::string_view line = lines.lines[i];
      const size_t c = line.find_first_not_of(' ');
      if (c != std::string_view::npos && line[c] == '\t') {
        report.AtLine(static_cast<int>(i + 1), static_cast<int>(c + 1),
                      "tab character in indentation; YAML indents with "
                      "spaces only");
        return result;
      }
    }
    report.AtMark(error.mark,
                  absl::StrCat("YAML syntax error: ", error.message));
    return result;
  }
  // The documents that hold configuration: all of them, except a component's
  // `spec:` header before the first `---`.
  std::vector<YamlNode> documents;
  for (const YamlNode& root : tree->documents()) {
    if (root.IsNull()) continue;  // Empty, or comments only.
    if (!root.IsMap()) {
      report.At(root, root,
                "the CI file must be a mapping of jobs and keywords, not " +
                    Describe(root));
      return result;
    }
    documents.push_back(root);
  }
  if (documents.empty()) {
    result.text = std::string(text);
    if (lint) WarnWithoutVisibleJob({}, &result.warnings);
    return result;
  }
  // A `spec:` header (the first of two or more documents): its inputs are
  // filled in by GitLab before the jobs exist.
  ComponentInputs inputs;
  if (DocumentsGitLabReads(text, documents).header) {
    if (const Entry spec = FindEntry(documents[0], "spec")) {
      inputs.header = true;
      // GitLab's component data: name, sha, version and reference.
      if (const Entry component = FindEntry(spec.value, "component")) {
        static const std::set<std::string> kFields = {"name", "sha", "version",
                                                      "reference"};
        YamlNode bad = component.value;
        if (component.value.IsSequence()) {
          bad = YamlNode();
          for (size_t i = 0; i < component.value.size(); ++i) {
            const YamlNode field = component.value.Item(i);
            if (field.IsScalar() && kFields.count(field.Scalar()) != 0) {
              inputs.component_fields.insert(field.Scalar());
            } else if (!bad) {
              bad = field;
            }
          }
        }
        if (bad) {
          report.At(bad, component.key,
                    "spec: component: must be a list of name, sha, version "
                    "and reference (the component data GitLab gives a "
                    "CI/CD component), not " +
                        Describe(bad) + "; GitLab refuses the file");
        }
      }
      if (const Entry declared = FindEntry(spec.value, "inputs");
          declared && declared.value.IsMap()) {
        for (const auto& input : declared.value) {
          if (!input.first.IsScalar()) continue;
          std::optional<std::string> value;
          if (const Entry d = FindEntry(input.second, "default");
              d && d.value.IsScalar()) {
            value = d.value.Scalar();
          }
          inputs.defaults.emplace(input.first.Scalar(), std::move(value));
        }
      }
    }
  }
  // The files it includes from its project: read with it, never rewritten.
  struct IncludedDocuments {
    const CiIncludedFile* file = nullptr;
    std::unique_ptr<YamlTree> tree;
    std::vector<YamlNode> documents;
  };
  std::vector<IncludedDocuments> included;
  if (options.includes != nullptr) {
    for (const CiIncludes::Problem& problem : options.includes->errors) {
      result.errors.push_back(CiDiagnostic{problem.line, problem.column,
                                           OneLine(problem.message),
                                           problem.file});
    }
    if (!result.ok()) return result;
    for (const CiIncludedFile& file : options.includes->files) {
      Reporter at(&result.errors);
      at.file = file.path;
      IncludedDocuments one;
      one.file = &file;
      YamlError syntax;
      one.tree = YamlTree::Parse(file.text, &syntax);
      if (!syntax.message.empty()) {
        at.AtMark(syntax.mark,
                  absl::StrCat("YAML syntax error: ", syntax.message));
        continue;
      }
      for (const YamlNode& root : one.tree->documents()) {
        if (root.IsNull()) continue;
        if (!root.IsMap()) {
          at.At(root, root,
                "an included CI file must be a mapping of jobs and "
                "keywords, not " +
                    Describe(root));
          break;
        }
        one.documents.push_back(root);
      }
      // GitLab takes one document of an included file (not a component's
      // `spec:` header, and not the documents it ignores).
      if (!one.documents.empty()) {
        const GitLabDocuments read =
            DocumentsGitLabReads(file.text, one.documents);
        one.documents = {one.documents[read.loaded]};
      }
      if (lint) {
        // GitLab checks an included file as it checks the main one.
        std::vector<bool> visited(one.tree->node_count());
        for (const YamlNode& root : one.documents) {
          FindDuplicateKeys(root, 0, &visited, &at);
          CheckTopLevelTypes(root, &at);
          for (const auto& entry : root) {
            if (entry.first.IsScalar() && !IsCiKeyword(entry.first.Scalar()) &&
                entry.second.IsMap()) {
              CheckJobKeywordTypes(entry.first.Scalar(), entry.second, &at);
            }
          }
        }
      }
      included.push_back(std::move(one));
    }
    if (!result.ok()) return result;
  }
  std::vector<CiDiagnostic> warnings;
  Reporter warn(&warnings);
  if (lint && options.includes != nullptr) {
    for (const CiIncludes::Problem& note : options.includes->unread) {
      warnings.push_back(CiDiagnostic{note.line, note.column,
                                      OneLine(note.message), note.file});
    }
  }
  report.inputs = &inputs;
  if (lint) report.warnings = &warn;
  if (lint && documents.size() > 1)
    WarnAboutIgnoredDocuments(text, documents, &warn);

  // A duplicate key is legal for GitLab (the last one wins) but almost
  // always a mistake: lint reports every one; expand refuses only the jobs
  // it rewrites, where it could not tell which entry to keep.
  std::vector<bool> visited(tree->node_count());
  std::unordered_map<std::string, int> top_keys;
  if (lint) {
    // Within a document, every duplicate key; across documents, jobs.
    std::unordered_map<std::string, int> first_line;
    for (const YamlNode& root : documents) {
      FindDuplicateKeys(root, 0, &visited, &report);
      std::unordered_map<std::string, int> here;
      for (const auto& entry : root) {
        if (!entry.first.IsScalar()) continue;
        const std::string& name = entry.first.Scalar();
        if (const auto before = first_line.find(name);
            before != first_line.end() && !IsCiKeyword(name)) {
          report.At(entry.first, entry.first,
                    absl::StrCat("job '", Shown(name),
                                 "' is also in an earlier document (line ",
                                 before->second,
                                 "); GitLab keeps only the last one"));
        }
        here.emplace(name, entry.first.Mark().line + 1);
      }
      for (const auto& [name, line] : here) first_line.emplace(name, line);
    }
    if (!result.ok()) return result;
    for (const YamlNode& root : documents) CheckTopLevelTypes(root, &report);
  } else {
    for (const YamlNode& root : documents) {
      for (const auto& entry : root) {
        if (entry.first.IsScalar()) ++top_keys[entry.first.Scalar()];
      }
    }
  }

  YamlNode top_variables;
  YamlNode top_variables_key;
  for (const YamlNode& root : documents) {
    if (const Entry e = FindEntry(root, "variables")) {
      top_variables = e.value;
      top_variables_key = e.key;
    }
  }
  // Jobs that only top-level GDT_* variables would make gangs, without
  // gdt's runner tag (lint).
  std::vector<std::string> untagged;
  // The variables of `workflow:rules` are the pipeline's when their rule
  // matches, over the top-level ones, and reach the same jobs; so do the
  // top-level variables of included files, which GitLab merges under the
  // main file's.
  std::vector<YamlNode> pipeline_variables = {top_variables};
  std::vector<std::string> pipeline_owners = {"variables"};
  std::vector<std::string> pipeline_files = {""};
  const auto add_workflow_variables = [&](const std::vector<YamlNode>& roots,
                                          const std::string& file) {
    for (const YamlNode& root : roots) {
      const Entry rules = FindEntry(FindEntry(root, "workflow").value, "rules");
      if (!rules || !rules.value.IsSequence()) continue;
      for (size_t i = 0; i < rules.value.size(); ++i) {
        if (const Entry vars = FindEntry(rules.value.Item(i), "variables")) {
          pipeline_variables.push_back(vars.value);
          pipeline_owners.push_back(absl::StrCat("workflow: rules[", i, "]"));
          pipeline_files.push_back(file);
        }
      }
    }
  };
  add_workflow_variables(documents, "");
  std::vector<YamlNode> included_top;  // Their top-level variables.
  for (const IncludedDocuments& one : included) {
    for (const YamlNode& root : one.documents) {
      if (const Entry e = FindEntry(root, "variables")) {
        included_top.push_back(e.value);
        pipeline_variables.push_back(e.value);
        pipeline_owners.push_back("variables");
        pipeline_files.push_back(one.file->path);
      }
    }
    add_workflow_variables(one.documents, one.file->path);
  }
  if (lint) {
    // GitLab deep-merges `workflow` of the included files under the main
    // file's and checks the name of the result: an included file's name
    // counts unless the main file, or a file merged later, writes one.
    bool main_names = false;
    for (const YamlNode& root : documents) {
      main_names =
          main_names || FindEntry(FindEntry(root, "workflow").value, "name");
    }
    for (auto one = included.rbegin(); !main_names && one != included.rend();
         ++one) {
      const YamlNode workflow =
          one->documents.empty()
              ? YamlNode()
              : FindEntry(one->documents.back(), "workflow").value;
      if (!FindEntry(workflow, "name")) continue;
      Reporter at(&result.errors);
      at.file = one->file->path;
      CheckWorkflowName(workflow, &at);
      break;
    }
    for (size_t i = 0; i < pipeline_variables.size(); ++i) {
      GangSpec ignored;
      Reporter at(&result.errors);
      at.file = pipeline_files[i];
      CheckVariables(pipeline_owners[i], pipeline_variables[i], {}, &ignored,
                     &at);
    }
  }

  std::vector<Edit> edits;
  // A rewritten job: its gang, its lines and its edits (in `edits`).
  struct PlannedJob {
    size_t gang = 0;
    int begin_line = 0;
    int end_line = 0;
    size_t first_edit = 0;
    size_t last_edit = 0;
    std::vector<std::string> anchors;  // Defined inside the replaced block.
  };
  std::vector<PlannedJob> planned;
  // Jobs whose inherited tags already hold the runner tag (see ReadsBack).
  std::unordered_set<std::string> tag_inherited;
  std::vector<std::vector<YamlNode>> files;
  for (const IncludedDocuments& one : included) files.push_back(one.documents);
  files.push_back(documents);
  CiConfigModel model = options.includes == nullptr
                            ? CiConfigModel(documents)
                            : CiConfigModel(files, options.includes->unseen,
                                            options.includes->unseen_over_seen);
  if (options.includes != nullptr) {
    model.set_unseen_names(options.includes->unread_names,
                           options.includes->unread_over_seen_names);
  }
  // GitLab refuses a file in which any entry's extends chain is too long
  // or loops ("nesting too deep" / "circular dependency detected in
  // `extends`"), whatever the job; one line, at the first, and nothing
  // else (every job below it would fail the same way).
  for (const YamlNode& root : documents) {
    for (const auto& entry : root) {
      if (!entry.first.IsScalar() || !entry.second.IsMap() ||
          !FindEntry(entry.second, "extends") ||
          !model.ExtendsTooDeep(entry.first.Scalar())) {
        continue;
      }
      report.At(entry.first, entry.first,
                absl::StrCat(Shown(entry.first.Scalar()),
                             ": its extends chain loops or nests more than ",
                             CiConfigModel::kMaxExtendsDepth,
                             " levels deep; GitLab refuses the file (nesting "
                             "too deep, or circular dependency, in extends)"));
      result.gangs.clear();
      return result;
    }
  }
  RunsKeyword runs(files);
  if (lint && !model.has_include()) {
    // Of the main file, only the document GitLab reads has jobs.
    std::vector<std::vector<YamlNode>> read = files;
    read.back() = {documents[DocumentsGitLabReads(text, documents).loaded]};
    WarnWithoutVisibleJob(read, &warnings);
  }
  // The nodes of top-level entries (a merged block must be one of them).
  std::unordered_set<uint32_t> top_values;
  for (const YamlNode& root : documents) {
    for (const auto& entry : root) top_values.insert(entry.second.index());
  }
  // The jobs of the main file.
  std::unordered_set<std::string> main_jobs;
  for (const YamlNode& root : documents) {
    for (const auto& entry : root) {
      if (entry.first.IsScalar()) main_jobs.insert(entry.first.Scalar());
    }
  }
  // A parallel:distributed block in an included file stays there: expanding
  // the main file cannot rewrite it, and GitLab would get it unexpanded.
  // Unless the main file sets the job's `parallel` itself, which replaces
  // it. Both commands refuse it.
  const size_t errors_before_blocks = result.errors.size();
  for (const IncludedDocuments& one : included) {
    Reporter at(&result.errors);
    at.file = one.file->path;
    for (const YamlNode& root : one.documents) {
      for (const auto& entry : root) {
        if (!entry.first.IsScalar() || !entry.second.IsMap()) continue;
        const std::string& job = entry.first.Scalar();
        const Entry parallel = FindEntry(entry.second, "parallel");
        if (!parallel || !parallel.value.IsMap() ||
            !FindEntry(parallel.value, "distributed")) {
          continue;
        }
        bool replaced = false;
        for (const YamlNode& main_root : documents) {
          if (const Entry own = FindEntry(main_root, job)) {
            replaced = ToCiValue(own.value).contains("parallel");
          }
        }
        if (replaced) continue;
        at.At(
            parallel.key, parallel.key,
            absl::StrCat(
                job, ": its parallel:distributed block is in ", one.file->path,
                ", an included file, which gdt does not rewrite when it "
                "expands the file that includes it (GitLab would get the "
                "block as it is); move the job, or its block, into the "
                "main file, or expand the included file on its own "
                "(gdt-ci expand --file ",
                one.file->path, " -o ...) and include that"));
      }
    }
  }
  // A problem in the pipeline's variables (reported above) is independent
  // of the jobs' own: lint goes on to list theirs too, as GitLab's lint
  // lists every error it finds.
  if (result.errors.size() != errors_before_blocks) return result;
  for (size_t d = 0; d < documents.size(); ++d) {
    const YamlNode& root = documents[d];
    // A job's text ends where the next top-level key, or the next
    // document, begins.
    // The text between the two (a `...` end marker, a `%YAML` directive)
    // belongs to neither, so it stays where it is whatever the last job
    // becomes.
    int document_end = d + 1 < documents.size()
                           ? documents[d + 1].PropertiesMark().line
                           : static_cast<int>(lines.lines.size());
    if (root.size() > 0) {
      // From the line after the last value (a line it ends on may hold a
      // quoted scalar's last line, which may start with `%`).
      const YamlMark last = root.Entry(root.size() - 1).second.EndMark();
      for (int l = last.line + (last.column > 0 ? 1 : 0); l < document_end;
           ++l) {
        if (IsDocumentBoundary(lines.lines[static_cast<size_t>(l)])) {
          document_end = l;
          break;
        }
      }
    }
    for (size_t i = 0; i < root.size(); ++i) {
      const auto [key, value] = root.Entry(i);
      if (!key.IsScalar()) continue;
      const std::string& job = key.Scalar();
      if (job == "default" && value.IsMap() && lint) {
        // GitLab's default: takes no variables (top-level variables: are
        // every job's) and refuses the file.
        if (const Entry vars = FindEntry(value, "variables")) {
          report.At(vars.key, vars.key,
                    "default: GitLab does not accept variables under "
                    "default; write them as top-level variables:");
        }
      }
      if (job == "workflow" && value.IsMap() && lint) {
        CheckWorkflowName(value, &report);
      }
      if (job == "default" && value.IsMap()) {
        // Written there, or merged in (`<<: *gang`).
        const Entry own = FindEntry(value, "parallel");
        const Entry parallel = own ? own : FindEntry(value, "<<");
        const CiValue merged = ToCiValue(value);
        const auto p = merged.find("parallel");
        if (parallel && p != merged.end() && p->is_object() &&
            p->contains("distributed")) {
          report.At(parallel.key, parallel.key,
                    "default: GitLab does not accept parallel under default; "
                    "put parallel:distributed in each gang job, or in a "
                    "hidden job that they extend");
        }
      }
      if (lint && !IsCiKeyword(job)) {
        if (value.IsMap()) {
          CheckJobKeywordTypes(job, value, &report);
          CheckJobKeys(job, value, &report);
          CheckReferencedScriptDepth(model, job, value, &report);
        }
        CheckJobRuns(model, &runs, job, key, value, &report);
      }
      if (IsCiKeyword(job) || !value.IsMap()) continue;
      if (const Entry extends = FindEntry(value, "extends"); lint && extends) {
        // GitLab refuses anything but a name or a list of names; gdt's
        // model would skip it silently.
        const CiValue parents = ToCiValue(extends.value);
        bool names = parents.is_string();
        if (parents.is_array()) {
          names = std::all_of(parents.begin(), parents.end(),
                              [](const CiValue& p) { return p.is_string(); });
        }
        if (!names) {
          std::string what = Describe(extends.value);
          if (parents.is_array()) {
            for (const CiValue& p : parents) {
              if (!p.is_string()) {
                what = absl::StrCat("a list holding ", OneLine(p.dump()));
                break;
              }
            }
          }
          report.At(extends.value, extends.key,
                    absl::StrCat(job,
                                 ": extends must be a job name or a list of "
                                 "them, not ",
                                 what));
        }
      }
      if (!CheckUnseenParents(model, job, key, value, lint, options.including,
                              &report))
        continue;
      // An alias (`job: *other`) is expanded where its anchor is written.
      if (value.Mark().pos < key.Mark().pos) continue;
      const Entry parallel = FindEntry(value, "parallel");
      const bool block = parallel && parallel.value.IsMap() &&
                         FindEntry(parallel.value, "distributed");
      if (!block && parallel && HidesABlock(model, job, parallel)) {
        report.At(
            parallel.key, parallel.key,
            absl::StrCat(job,
                         ": its parallel is a parallel:distributed "
                         "block reached through ",
                         parallel.value.Tag() == "!reference" ? "!reference"
                                                              : "a merge key",
                         ", which gdt cannot expand where it is used; "
                         "write the block in the job, or share it "
                         "through extends:"));
        continue;
      }
      if (!block) {
        // A block merged in (`<<: *gang`) is expanded where its anchor is
        // written, if that is a top-level job; from anywhere else it would
        // reach GitLab unexpanded.
        if (const Entry merge = FindEntry(value, "<<")) {
          const CiValue merged = ToCiValue(value);
          const auto p = merged.find("parallel");
          // A job may hold several merge keys; Ruby applies them in order,
          // so the block is the last one's that brings a parallel.
          bool from_job = false;
          for (const auto& entry : value) {
            if (!entry.first.IsScalar() || entry.first.Scalar() != "<<") {
              continue;
            }
            const CiValue brought = ToCiValue(entry.second);
            bool has_parallel =
                brought.is_object() && brought.contains("parallel");
            if (brought.is_array()) {
              for (const CiValue& item : brought) {
                has_parallel = has_parallel ||
                               (item.is_object() && item.contains("parallel"));
              }
            }
            if (has_parallel) {
              from_job = MergesTopLevelBlockJob(entry.second, top_values);
            }
          }
          if (p != merged.end() && p->is_object() &&
              p->contains("distributed") && !from_job) {
            report.At(merge.key, merge.key,
                      absl::StrCat(job,
                                   ": gets parallel:distributed through a "
                                   "merge key from a mapping that is not a "
                                   "job; gdt expands only jobs and hidden "
                                   "jobs, so merge one of those or write the "
                                   "block in the job"));
            continue;
          }
          // A merge key is shallow: the job's own variables (or tags)
          // replace the gang job's whole entry, GDT_* variables (or the
          // runner tag) that expand writes there included.
          if (p != merged.end() && p->is_object() &&
              p->contains("distributed")) {
            bool replaced = false;
            for (const char* entry : {"variables", "tags"}) {
              const Entry own = FindEntry(value, entry);
              if (!own) continue;
              if (std::string_view(entry) == "tags" && own.value.IsSequence()) {
                bool has_tag = options.runner_tag.empty();
                for (const YamlNode& tag : own.value) {
                  has_tag = has_tag || (tag.IsScalar() &&
                                        tag.Scalar() == options.runner_tag);
                }
                if (has_tag) continue;
              }
              report.At(
                  own.key, own.key,
                  absl::StrCat(job,
                               ": merges a gang job with <<: and sets its "
                               "own ",
                               entry,
                               ", which replace the merged ones whole (merge "
                               "keys are shallow), so the gang's ",
                               std::string_view(entry) == "tags"
                                   ? "runner tag is"
                                   : "GDT_* variables are",
                               " lost; use extends:, which merges them"));
              replaced = true;
            }
            if (replaced) continue;
          }
        }
        const CiValue inherited = InheritedBlock(model, job);
        if (const Entry tags = FindEntry(value, "tags");
            tags && !inherited.is_object() && !options.runner_tag.empty() &&
            !FindEntry(value, "parallel")) {
          if (const std::string gang =
                  GangEntryReferenced(model, tags.value, "tags");
              !gang.empty()) {
            report.At(tags.value, tags.key,
                      absl::StrCat(job, ": its tags are a !reference to ",
                                   Shown(gang),
                                   "'s, which has parallel:distributed, so "
                                   "after expansion they carry the runner "
                                   "tag ",
                                   options.runner_tag,
                                   " and the job would run on gdt as an "
                                   "unplanned one-member gang; write its "
                                   "tags out"));
            continue;
          }
        }
        if (!lint && !inherited.is_object()) {
          // Its `variables` or `artifacts` written as a !reference to a
          // gang job's: GitLab would resolve it in the expanded file, with
          // gdt's additions (the GDT_* variables, checkpoints/), so the job
          // would look like a gang member. The entry is written out as the
          // reference reads before expansion: what the user wrote there.
          const int job_end =
              i + 1 < root.size()
                  ? root.Entry(i + 1).first.PropertiesMark().line
                  : document_end;
          const size_t first_edit = edits.size();
          std::optional<absl::StatusOr<CiConfigModel::Effective>> effective;
          for (const char* name : {"variables", "artifacts"}) {
            const Entry own = FindEntry(value, name);
            if (!own || own.value.Tag() != "!reference" ||
                GangEntryReferenced(model, own.value, name).empty()) {
              continue;
            }
            if (!effective) effective = model.Resolve(job, InspectedKeys());
            if (!effective->ok() || (*effective)->unresolved.count(name) != 0) {
              continue;
            }
            const auto found = (*effective)->config.find(name);
            if (found == (*effective)->config.end()) continue;
            JobRewriter rewriter(lines, job, value, job_end, **effective,
                                 options, &report);
            rewriter.WriteOut(own, *found, &edits);
          }
          SortEdits(edits.begin() + static_cast<std::ptrdiff_t>(first_edit),
                    edits.end());
        }
        std::optional<GangSpec> template_spec;
        if (inherited.is_object()) {
          std::vector<CiDiagnostic> ignored;  // Reported at the template.
          template_spec = SpecOfValue(job, inherited, options, &ignored);
          if (template_spec.has_value()) {
            CheckJobUnderTemplate(job, value, *template_spec, options, &report);
          }
        }
        // Hidden jobs (templates for `extends`) are checked too, but only
        // the jobs that run are gangs.
        if (lint) {
          // Lint reads only gdt's variables of what a job inherits.
          static const std::vector<std::string> kLinted = {"tags", "parallel",
                                                           "variables/GDT_"};
          const absl::StatusOr<CiConfigModel::Effective> effective =
              model.Resolve(job, kLinted);
          LintPlainJob(job, key, value, top_variables, included_top,
                       effective.ok() ? &effective->config : nullptr,
                       template_spec ? &*template_spec : nullptr, options,
                       job[0] == '.' ? nullptr : &result.gangs, &report,
                       &untagged);
        }
        continue;
      }
      if (MergesDeeperThan(value, kMaxMergeDepth)) {
        // gdt reads a job only kMaxDepth levels deep, and each merge key
        // (`<<: *tpl`) counts as one: the tags or variables of a template
        // at the end of a longer chain would be dropped, not refused.
        report.At(key, key,
                  absl::StrCat(job, ": its merge keys (<<:) nest more than ",
                               kMaxMergeDepth,
                               " levels deep, deeper than gdt reads a job; "
                               "shorten the chain, e.g. with extends:"));
        continue;
      }
      if (!lint) {
        const size_t errors_before = report.count();
        if (top_keys[job] > 1) {
          report.At(key, key,
                    absl::StrCat("duplicate job '", Shown(job),
                                 "'; GitLab keeps only the last one, so gdt "
                                 "will not rewrite either"));
        }
        FindDuplicateKeys(value, 1, &visited, &report);
        if (report.count() != errors_before) continue;
      }
      if (const YamlNode input = InputInterpolation(parallel.value, 0)) {
        // Expand writes the gang's variables from the block's values, and
        // GitLab fills in inputs only after that.
        const FilledInput filled = FillInDefaults(input.Scalar(), inputs);
        std::string what = "the value";
        if (filled.text.has_value()) {
          what = absl::StrCat("the value (input '", filled.input,
                              "' defaults to '", Shown(*filled.text), "')");
        }
        report.At(input, parallel.key,
                  absl::StrCat(job,
                               ": parallel:distributed does not support CI/CD "
                               "component inputs (",
                               Shown(input.Scalar()),
                               "): gdt writes the gang before GitLab fills "
                               "them in; write ",
                               what,
                               " in the block, or write the gang in the plain "
                               "form (parallel: N and GDT_* variables), "
                               "which may use inputs"));
        continue;
      }
      GangSpec spec;
      spec.job = job;
      spec.line = key.Mark().line + 1;
      spec.from_block = true;
      const CiValue inherited = InheritedBlock(model, job);
      if (!ParseBlock(job, parallel, options, &spec, &report,
                      inherited.is_object() &&
                          inherited["distributed"].contains("nodes"))) {
        continue;
      }
      if (inherited.is_object() &&
          !MergeWithTemplate(model, job, parallel, options, &spec, &report)) {
        continue;
      }
      ClearTopLevelValues(model, job, value, pipeline_variables, &spec);
      if (!CheckGangKeywords(job, value, &report)) continue;
      CheckRulesVariables(job, value, &spec, lint, &report);
      if (lint) {
        // The job's other GDT_* variables must still make sense (the ones
        // the block sets are conflicts, reported by the rewriter).
        GangSpec ignored;
        std::set<std::string> skip;
        for (const auto& [name, v] : spec.Variables()) skip.insert(name);
        CheckVariables(job, FindEntry(value, "variables").value, skip, &ignored,
                       &report);
        CheckGdtOwnedVariables(job, top_variables, spec.launcher, &report,
                               NotInherited(value, top_variables));
        CheckGdtOwnedVariables(job, FindEntry(value, "variables").value,
                               spec.launcher, &report);
      }
      const int job_line = key.Mark().line;
      const int job_end = i + 1 < root.size()
                              ? root.Entry(i + 1).first.PropertiesMark().line
                              : document_end;
      const bool block_job =
          !value.IsFlow() && value.Mark().line > job_line &&
          parallel.key.Mark().column ==
              static_cast<int>(FirstNonSpace(
                  lines.lines[static_cast<size_t>(parallel.key.Mark().line)]));
      if (!block_job) {
        report.At(key, key,
                  absl::StrCat(job,
                               ": write the job as a block mapping (one key "
                               "per line) to use parallel:distributed"));
        continue;
      }
      absl::StatusOr<CiConfigModel::Effective> effective =
          model.Resolve(job, InspectedKeys());
      if (effective.ok()) {
        for (const char* touched :
             {"tags", "variables", "artifacts", "retry"}) {
          if (const auto bad = effective->unresolved.find(touched);
              bad != effective->unresolved.end()) {
            effective = absl::InvalidArgumentError(
                absl::StrCat(touched, ": ", bad->second,
                             "; gdt cannot tell what it adds to"));
            break;
          }
        }
      }
      if (!effective.ok()) {
        report.At(key, key,
                  absl::StrCat(job, ": ", effective.status().message()));
        continue;
      }
      JobRewriter rewriter(lines, job, value, job_end, *effective, options,
                           &report);
      {
        // GitLab merges extends before it resolves references, so a
        // parent's `variables: !reference [...]` is replaced, not merged,
        // by a variables entry of the job's own.
        static const std::vector<std::string> kVariables = {"variables"};
        const absl::StatusOr<CiValue> parents =
            model.FromParents(job, kVariables);
        if (parents.ok() && parents->is_object()) {
          const auto v = parents->find("variables");
          rewriter.set_inherits_variables_by_reference(
              v != parents->end() && v->is_object() && v->size() == 1 &&
              v->contains("!reference"));
        }
      }
      if (const auto tags = effective->config.find("tags");
          !FindEntry(value, "tags") && tags != effective->config.end() &&
          tags->is_array() &&
          std::find(tags->begin(), tags->end(), CiValue(options.runner_tag)) !=
              tags->end()) {
        tag_inherited.insert(job);
      }
      if (spec.preemptible) {
        spec.preempt_retries = PreemptRetries(job, effective->config);
        if (spec.preempt_retries == 0 && report.warnings != nullptr) {
          report.warnings->At(
              parallel.value, key,
              absl::StrCat(job,
                           ": preemptible, but its retry: never brings back "
                           "a preempted job (exit code ",
                           kPreemptedJobExitCode,
                           "), so gdt never preempts it; give it a retry: "
                           "with max 1 or 2 that covers script_failure"));
        }
      }
      const size_t first_edit = edits.size();
      if (rewriter.Plan(spec, parallel, &edits)) {
        SortEdits(edits.begin() + static_cast<std::ptrdiff_t>(first_edit),
                  edits.end());
        std::vector<std::string> anchors;
        AnchorsWithin(parallel.value, parallel.key.Mark().pos,
                      parallel.value.EndMark().pos, 0, &anchors);
        planned.push_back(PlannedJob{result.gangs.size(), job_line, job_end,
                                     first_edit, edits.size(),
                                     std::move(anchors)});
        result.gangs.push_back(std::move(spec));
      }
    }
  }
  // Jobs that only included files define: checked as the main file's
  // jobs without a block are, at the last file that defines them (GitLab
  // merges the others under it), and never rewritten.
  std::unordered_map<std::string, size_t> last_file;
  for (size_t f = 0; f < included.size(); ++f) {
    for (const YamlNode& root : included[f].documents) {
      for (const auto& entry : root) {
        if (entry.first.IsScalar()) last_file[entry.first.Scalar()] = f;
      }
    }
  }
  // Every definition in an included file of a job that is no gang whose
  // tags, variables or artifacts are a !reference to a gang job's, unless
  // a later file's definition of the job (a later include, or the main
  // file, which GitLab merges over them) sets that entry itself.
  for (size_t f = 0; f < included.size(); ++f) {
    Reporter at(&result.errors);
    at.file = included[f].file->path;
    for (const YamlNode& root : included[f].documents) {
      for (const auto& entry : root) {
        if (!entry.first.IsScalar() || !entry.second.IsMap()) continue;
        const std::string& job = entry.first.Scalar();
        if (IsCiKeyword(job)) continue;
        // The later definitions of the job.
        std::vector<YamlNode> later;
        for (size_t g = f + 1; g < included.size(); ++g) {
          for (const YamlNode& other : included[g].documents) {
            if (const Entry e = FindEntry(other, job)) later.push_back(e.value);
          }
        }
        for (const YamlNode& other : documents) {
          if (const Entry e = FindEntry(other, job)) later.push_back(e.value);
        }
        const auto has = [&](const std::string& name) {
          if (FindEntry(entry.second, name)) return true;
          for (const YamlNode& one : later) {
            if (FindEntry(one, name)) return true;
          }
          return false;
        };
        // A gang itself (a block of its own or inherited) is planned
        // elsewhere.
        if (has("parallel") || InheritedBlock(model, job).is_object()) {
          continue;
        }
        ReferencesExpandedGang(model, job, entry.second, options, &at,
                               [&](const std::string& name) {
                                 for (const YamlNode& one : later) {
                                   if (FindEntry(one, name)) return true;
                                 }
                                 return false;
                               });
      }
    }
  }
  for (size_t f = 0; f < included.size(); ++f) {
    Reporter at(&result.errors);
    at.file = included[f].file->path;
    Reporter warn_at(&warnings);
    warn_at.file = at.file;
    if (lint) at.warnings = &warn_at;
    for (const YamlNode& root : included[f].documents) {
      for (const auto& entry : root) {
        const YamlNode& key = entry.first;
        const YamlNode& value = entry.second;
        if (!key.IsScalar()) continue;
        const std::string& job = key.Scalar();
        if (IsCiKeyword(job) || !value.IsMap() || main_jobs.count(job) != 0 ||
            last_file[job] != f) {
          continue;
        }
        if (!CheckUnseenParents(model, job, key, value, lint, options.including,
                                &at))
          continue;
        const CiValue inherited = InheritedBlock(model, job);
        std::optional<GangSpec> template_spec;
        if (inherited.is_object()) {
          std::vector<CiDiagnostic> ignored;  // Reported at the template.
          template_spec = SpecOfValue(job, inherited, options, &ignored);
          if (template_spec.has_value()) {
            CheckJobUnderTemplate(job, value, *template_spec, options, &at);
          }
        }
        if (!lint) continue;
        static const std::vector<std::string> kLinted = {"tags", "parallel",
                                                         "variables/GDT_"};
        const absl::StatusOr<CiConfigModel::Effective> effective =
            model.Resolve(job, kLinted);
        const size_t gangs_before = result.gangs.size();
        LintPlainJob(job, key, value, top_variables, included_top,
                     effective.ok() ? &effective->config : nullptr,
                     template_spec ? &*template_spec : nullptr, options,
                     job[0] == '.' ? nullptr : &result.gangs, &at, &untagged);
        for (size_t g = gangs_before; g < result.gangs.size(); ++g) {
          result.gangs[g].file = at.file;
        }
      }
    }
  }
  if (!model.reference_bomb().empty()) {
    // Every later reference failed too: one line, at the first job.
    result.errors.clear();
    YamlMark mark;
    for (const YamlNode& root : documents) {
      if (const Entry e = FindEntry(root, model.reference_bomb())) {
        mark = e.key.Mark();
      }
    }
    report.AtMark(mark,
                  absl::StrCat(Shown(model.reference_bomb()),
                               ": its !reference values stand for more than ",
                               CiConfigModel::kMaxReferenceValues,
                               " values (a reference bomb?); GitLab refuses "
                               "a configuration this large"));
    result.gangs.clear();
    return result;
  }
  CheckNeedsLimit(documents, result.gangs, &report);
  if (lint) {
    CheckRuleExpressions(documents, &report);
    if (inputs.header) {
      // GitLab fills in the text of the piece it loads, every document
      // of it: the ones after the second `---` line too.
      const GitLabDocuments read = DocumentsGitLabReads(text, documents);
      CheckHeaderInterpolations(
          std::vector<YamlNode>(documents.begin() + read.loaded,
                                documents.begin() + read.piece_end),
          inputs, result.errors, &report);
    }
    CheckMatrixNeeds(documents, model, &report);
    CheckStagesAndNeeds(documents, model, options.including, &report);
    // Jobs that only included files define, at the last file that
    // defines them (with or without a spec: header: GitLab leaves
    // $[[ matrix.* ]] to the needs of each matrix job either way).
    for (size_t f = 0; f < included.size(); ++f) {
      Reporter at(&result.errors);
      at.file = included[f].file->path;
      const auto skip = [&](const std::string& job) {
        const auto last = last_file.find(job);
        return main_jobs.count(job) != 0 || last == last_file.end() ||
               last->second != f;
      };
      CheckMatrixNeeds(included[f].documents, model, &at, skip);
      CheckStagesAndNeeds(included[f].documents, model, options.including, &at,
                          skip);
    }
  }
  if (!result.ok()) {
    result.gangs.clear();
    return result;
  }
  // An anchor inside a replaced block goes with it: an alias of it
  // elsewhere would be left undefined. True after reporting that.
  std::vector<std::pair<int, std::string>> anchored;
  for (const PlannedJob& job : planned) {
    if (!job.anchors.empty()) {
      const GangSpec& spec = result.gangs[job.gang];
      anchored.emplace_back(
          spec.line,
          absl::StrCat(spec.job,
                       ": gdt replaces its parallel:distributed block, and "
                       "with it the anchor ",
                       absl::StrJoin(job.anchors, ", "),
                       " that the file uses elsewhere (an alias); share "
                       "the block through extends:, or write the value out "
                       "where the alias is"));
    }
  }
  const auto anchors_lost = [&](const std::string& expanded) {
    if (anchored.empty()) return false;
    YamlError reread;
    YamlTree::Parse(expanded, &reread);
    if (reread.message.rfind("unknown alias", 0) != 0) return false;
    for (const auto& [line, message] : anchored) {
      report.AtLine(line, 1, message);
    }
    return true;
  };
  // The whole file as expand writes it (lint checks it too).
  std::string expanded;
  ApplyEdits(lines, 0, static_cast<int>(lines.lines.size()), edits.cbegin(),
             edits.cend(), &expanded);
  if (lint && anchors_lost(expanded)) {
    result.gangs.clear();
    return result;
  }
  if (result.ok()) {
    // Each gang job as GitLab will merge it once expanded.
    CheckGangsAfterExpansion(expanded, documents, files, model, options,
                             &report);
  }
  if (!lint) {
    // Each rewritten job must read back as planned. A job is read on its
    // own (its lines are a whole top-level entry), which keeps memory to
    // one job; a job that uses an alias defined elsewhere is checked in
    // the whole file instead.
    const auto edit_at = [&](size_t i) {
      return edits.cbegin() + static_cast<std::ptrdiff_t>(i);
    };
    std::vector<const GangSpec*> in_context;
    for (const PlannedJob& job : planned) {
      std::string slice;
      ApplyEdits(lines, job.begin_line, job.end_line, edit_at(job.first_edit),
                 edit_at(job.last_edit), &slice);
      bool unresolved = false;
      const GangSpec* spec = &result.gangs[job.gang];
      if (ReadsBack(slice, {spec}, options, tag_inherited, &unresolved)) {
        continue;
      }
      if (unresolved) {
        in_context.push_back(spec);
        continue;
      }
      report.AtLine(spec->line, 1,
                    absl::StrCat(spec->job,
                                 ": gdt could not rewrite this job in place "
                                 "(please report it); write it as a plain "
                                 "block mapping"));
    }
    if (result.ok()) {
      result.text = std::move(expanded);
      if (!anchors_lost(result.text) && !in_context.empty() &&
          !ReadsBack(result.text, in_context, options, tag_inherited)) {
        report.AtLine(in_context[0]->line, 1,
                      "gdt could not rewrite this file in place (please "
                      "report it); write the jobs with parallel:distributed "
                      "as plain block mappings");
      }
    }
    if (!result.ok()) {
      result.text.clear();
      result.gangs.clear();
      return result;
    }
  }
  std::stable_sort(result.gangs.begin(), result.gangs.end(),
                   [](const GangSpec& a, const GangSpec& b) {
                     return std::tie(a.file, a.line) < std::tie(b.file, b.line);
                   });
  if (lint && !untagged.empty()) {
    std::vector<std::string> shown;
    for (size_t i = 0; i < untagged.size() && i < 5; ++i) {
      shown.push_back(Shown(untagged[i]));
    }
    if (untagged.size() > 5) {
      shown.push_back(absl::StrCat("and ", untagged.size() - 5, " more"));
    }
    const std::string message = absl::StrCat(
        "variables: top-level GDT_* variables reach every job, but ",
        untagged.size(), untagged.size() == 1 ? " job" : " jobs",
        " without the ", Shown(options.runner_tag), " tag (",
        absl::StrJoin(shown, ", "),
        untagged.size() == 1 ? ") goes to other runners and is not a gang"
                             : ") go to other runners and are not gangs",
        " (unless a gdt runner also takes untagged jobs); set GDT_* in the "
        "gang jobs or a template they extend");
    if (top_variables_key) {
      warn.At(top_variables_key, top_variables_key, message);
    } else {
      warn.AtLine(0, 0, message);
    }
  }
  result.warnings = std::move(warnings);
  if (lint) WarnAboutManualGangs(documents, model, result.gangs, &result);

  std::stable_sort(result.warnings.begin(), result.warnings.end(),
                   [](const CiDiagnostic& a, const CiDiagnostic& b) {
                     return std::tie(a.file, a.line) < std::tie(b.file, b.line);
                   });
  return result;
}

}  // namespace

std::string FormatDiagnostic(std::string_view main_file,
                             const CiDiagnostic& diagnostic) {
  const std::string_view file =
      diagnostic.file.empty() ? main_file : std::string_view(diagnostic.file);
  if (diagnostic.line <= 0) {
    return absl::StrCat(std::string(file), ": ", diagnostic.message);
  }
  return absl::StrCat(std::string(file), ":", diagnostic.line, ":",
                      std::max(1, diagnostic.column), ": ", diagnostic.message);
}

absl::Status CheckRunnerTag(std::string_view tag) {
  if (tag.size() > 255) {
    return absl::InvalidArgumentError(
        "--tag: a runner tag has at most 255 characters");
  }
  for (char c : tag) {
    if (!std::isalnum(static_cast<unsigned char>(c)) &&
        std::string_view("-_.:/+=@").find(c) == std::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--tag '", OneLine(std::string(tag)),
          "': a runner tag may hold only letters, digits and - _ . : / + = @"));
    }
  }
  return absl::OkStatus();
}

std::vector<std::pair<std::string, std::string>> GangSpec::Variables() const {
  std::vector<std::pair<std::string, std::string>> v = {
      {"GDT_GPUS_PER_NODE", std::to_string(gpus_per_node)},
      {"GDT_NPROC_PER_NODE", std::to_string(procs_per_node)},
      {"GDT_LAUNCHER", launcher}};
  if (nodes_min > 0) {
    v.emplace_back("GDT_NODES_MIN", std::to_string(nodes_min));
    v.emplace_back("GDT_NODES_MAX", std::to_string(nodes));
  }
  if (gang_timeout_seconds.has_value()) {
    v.emplace_back("GDT_GANG_TIMEOUT", std::to_string(*gang_timeout_seconds));
  }
  if (priority.has_value()) {
    v.emplace_back("GDT_PRIORITY", std::to_string(*priority));
  }
  if (!topology_same.empty()) {
    v.emplace_back("GDT_TOPOLOGY_SAME", topology_same);
    v.emplace_back("GDT_TOPOLOGY_MODE",
                   topology_mode.empty() ? "required" : topology_mode);
  }
  if (checkpoint_notice_seconds.has_value()) {
    v.emplace_back("GDT_CHECKPOINT_NOTICE",
                   std::to_string(*checkpoint_notice_seconds));
  }
  if (checkpoint_keep.has_value()) {
    v.emplace_back("GDT_CHECKPOINT_KEEP", std::to_string(*checkpoint_keep));
  }
  if (!checkpoint_store.empty()) {
    v.emplace_back("GDT_CHECKPOINT_STORE", checkpoint_store);
  }
  if (preemptible) {
    v.emplace_back("GDT_PREEMPTIBLE", "1");
    v.emplace_back("GDT_PREEMPT_RETRIES", std::to_string(preempt_retries));
  }
  for (const std::string& name : cleared) v.emplace_back(name, "");
  return v;
}

std::string GangSpec::Describe() const {
  std::string text = absl::StrCat(
      nodes_min > 0 ? absl::StrCat(nodes_min, "..") : std::string(), nodes,
      nodes == 1 && nodes_min == 0 ? " node" : " nodes", " x ", gpus_per_node,
      gpus_per_node == 1 ? " GPU" : " GPUs", ", ", procs_per_node,
      procs_per_node == 1 ? " process" : " processes", " per node (world size ",
      nodes_min > 0
          ? absl::StrCat(static_cast<int64_t>(nodes_min) * procs_per_node, "..")
          : std::string(),
      static_cast<int64_t>(nodes) * procs_per_node, "), launcher ", launcher);
  if (nodes_min > 0) absl::StrAppend(&text, ", elastic");
  if (priority.has_value()) absl::StrAppend(&text, ", priority ", *priority);
  if (!topology_same.empty()) {
    // The executor's default mode when only the label is set.
    absl::StrAppend(&text, ", same ", topology_same, " (",
                    topology_mode.empty() ? "required" : topology_mode, ")");
  }
  if (gang_timeout_seconds.has_value()) {
    absl::StrAppend(&text, ", gang timeout ", *gang_timeout_seconds, "s");
  }
  if (!checkpoint_store.empty()) {
    absl::StrAppend(&text, ", checkpoints: ", checkpoint_store);
  }
  if (preemptible) absl::StrAppend(&text, ", preemptible");
  return text;
}

namespace {

// Diagnostics in file order (those without a place first), whatever
// order the checks found them in.
CiExpansion InFileOrder(CiExpansion result) {
  // The main file's first, then each included file's.
  std::stable_sort(result.errors.begin(), result.errors.end(),
                   [](const CiDiagnostic& a, const CiDiagnostic& b) {
                     return std::tie(a.file, a.line, a.column) <
                            std::tie(b.file, b.line, b.column);
                   });
  return result;
}

}  // namespace

CiExpansion ExpandCiYaml(std::string_view text,
                         const CiExpandOptions& options) {
  return InFileOrder(Process(text, options, /*lint=*/false));
}

CiExpansion LintCiYaml(std::string_view text, const CiExpandOptions& options) {
  CiExpansion result = InFileOrder(Process(text, options, /*lint=*/true));
  result.text.clear();
  // Hidden jobs (templates for extends) never run: linted, not listed.
  std::erase_if(result.gangs, [](const GangSpec& g) {
    return !g.job.empty() && g.job[0] == '.';
  });
  return result;
}

std::string FormatLintReport(std::string_view file, const CiExpansion& lint,
                             bool json) {
  if (json) {
    nlohmann::ordered_json doc;
    doc["file"] = std::string(file);
    doc["ok"] = lint.ok();
    doc["errors"] = nlohmann::ordered_json::array();
    for (const CiDiagnostic& d : lint.errors) {
      doc["errors"].push_back(
          {{"line", d.line}, {"column", d.column}, {"message", d.message}});
      if (!d.file.empty()) doc["errors"].back()["file"] = d.file;
    }
    doc["warnings"] = nlohmann::ordered_json::array();
    for (const CiDiagnostic& d : lint.warnings) {
      doc["warnings"].push_back(
          {{"line", d.line}, {"column", d.column}, {"message", d.message}});
      if (!d.file.empty()) doc["warnings"].back()["file"] = d.file;
    }
    doc["gangs"] = nlohmann::ordered_json::array();
    for (const GangSpec& g : lint.gangs) {
      nlohmann::ordered_json variables = nlohmann::ordered_json::object();
      for (const auto& [key, value] : g.Variables()) variables[key] = value;
      doc["gangs"].push_back(
          {{"job", g.job},
           {"line", g.line},
           {"form", g.from_block ? "distributed" : "parallel"},
           {"nodes", g.nodes},
           {"gpus_per_node", g.gpus_per_node},
           {"procs_per_node", g.procs_per_node},
           {"launcher", g.launcher},
           {"variables", variables}});
      if (!g.file.empty()) doc["gangs"].back()["file"] = g.file;
    }
    return doc.dump(2, ' ', false,
                    nlohmann::ordered_json::error_handler_t::replace) +
           "\n";
  }
  std::string text;
  if (!lint.ok()) {
    for (const CiDiagnostic& d : lint.errors) {
      absl::StrAppend(&text, FormatDiagnostic(file, d), "\n");
    }
    return text;
  }
  for (const CiDiagnostic& d : lint.warnings) {
    absl::StrAppend(
        &text,
        FormatDiagnostic(file, CiDiagnostic{d.line, d.column,
                                            "warning: " + d.message, d.file}),
        "\n");
  }
  for (const GangSpec& g : lint.gangs) {
    // A job name may hold any character (quoted keys): one line each.
    absl::StrAppend(
        &text,
        OneLine(absl::StrCat(g.file.empty() ? std::string(file) : g.file, ":",
                             g.line, ": ", g.job, ": ", g.Describe(),
                             g.from_block ? " [parallel:distributed]"
                                          : " [parallel + GDT_* variables]")),
        "\n");
  }
  absl::StrAppend(&text, std::string(file), ": ok (", lint.gangs.size(),
                  lint.gangs.size() == 1 ? " gang job)" : " gang jobs)", "\n");
  return text;
}

}  // namespace gdt::ci
