#include "ci/include.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <system_error>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "ci/inheritance.h"
#include "ci/job_file.h"
#include "ci/rules.h"
#include "ci/yaml_tree.h"
#include "common/file.h"
#include "re2/re2.h"

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
// pattern and path, 64 places of the path to a machine word: bit j of a row
// says the tokens so far match the path's first j characters. A path costs
// (tokens + 1) x words of steps; `budget` is what all paths together may
// still cost.
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
    char_index_.fill(-1);
    for (size_t i = 0; i < pattern.size(); ++i) {
      if (pattern[i] != '*') {
        const auto c = static_cast<unsigned char>(pattern[i]);
        if (char_index_[c] < 0) char_index_[c] = char_count_++;
        tokens_.push_back({kLiteral, char_index_[c]});
        ++literals_;
      } else if (i + 1 < pattern.size() && pattern[i + 1] == '*') {
        tokens_.push_back({kAny, 0});
        while (i + 1 < pattern.size() && pattern[i + 1] == '*') ++i;
      } else {
        tokens_.push_back({kSegment, 0});
      }
    }
  }

  // nullopt when matching `path` would go past `budget`.
  std::optional<bool> Matches(std::string_view path, uint64_t* budget) {
    if (path.size() < literals_ || path.substr(0, prefix_.size()) != prefix_ ||
        path.substr(path.size() - suffix_.size()) != suffix_) {
      return false;
    }
    const size_t places = path.size() + 1;
    words_ = (places + 63) / 64;
    const uint64_t cost = (tokens_.size() + 1) * words_;
    if (cost > *budget) return std::nullopt;
    *budget -= cost;
    // Per place j > 0: which literal path[j - 1] is, and whether a `*` may
    // take it (it is not `/`).
    letters_.assign(static_cast<size_t>(char_count_) * words_, 0);
    open_.assign(words_, 0);
    for (size_t j = 1; j < places; ++j) {
      const auto c = static_cast<unsigned char>(path[j - 1]);
      const uint64_t bit = uint64_t{1} << (j % 64);
      if (char_index_[c] >= 0) {
        letters_[static_cast<size_t>(char_index_[c]) * words_ + j / 64] |= bit;
      }
      if (c != '/') open_[j / 64] |= bit;
    }
    const uint64_t last_word =
        places % 64 == 0 ? ~uint64_t{0} : (uint64_t{1} << (places % 64)) - 1;
    can_.assign(words_, 0);
    can_[0] = 1;
    next_.resize(words_);
    for (const Token& token : tokens_) {
      bool any = false;
      if (token.kind == kLiteral) {
        // The literal takes the next character where it is that letter.
        const uint64_t* letter =
            &letters_[static_cast<size_t>(token.index) * words_];
        uint64_t carry = 0;
        for (size_t k = 0; k < words_; ++k) {
          next_[k] = ((can_[k] << 1) | carry) & letter[k];
          carry = can_[k] >> 63;
          any |= next_[k] != 0;
        }
      } else if (token.kind == kAny) {
        // `**` reaches every place from the first one matched so far.
        size_t k = 0;
        while (k < words_ && can_[k] == 0) next_[k++] = 0;
        if (k < words_) {
          next_[k] = ~((can_[k] & -can_[k]) - 1);
          for (++k; k < words_; ++k) next_[k] = ~uint64_t{0};
          next_[words_ - 1] &= last_word;
          any = true;
        }
      } else {
        // `*` runs on from each place matched so far through the
        // characters that are not `/`. Adding the starts to the runs of
        // such characters carries through each run; what the carry flips
        // is the reach.
        uint64_t shift = 0;
        uint64_t sum_carry = 0;
        for (size_t k = 0; k < words_; ++k) {
          const uint64_t starts = ((can_[k] << 1) | shift) & open_[k];
          shift = can_[k] >> 63;
          const uint64_t partial = open_[k] + starts;
          const uint64_t sum = partial + sum_carry;
          sum_carry = (partial < open_[k] || sum < partial) ? 1 : 0;
          next_[k] = can_[k] | (((sum ^ open_[k]) | starts) & open_[k]);
          any |= next_[k] != 0;
        }
      }
      can_.swap(next_);
      if (!any) return false;
    }
    return ((can_[path.size() / 64] >> (path.size() % 64)) & 1) != 0;
  }

 private:
  enum Kind { kLiteral, kSegment, kAny };
  struct Token {
    Kind kind;
    int index;  // Of a literal's character.
  };
  std::vector<Token> tokens_;
  std::array<int, 256> char_index_{};
  int char_count_ = 0;
  size_t literals_ = 0;
  std::string_view prefix_;
  std::string_view suffix_;
  size_t words_ = 0;
  std::vector<uint64_t> letters_;
  std::vector<uint64_t> open_;
  std::vector<uint64_t> can_;
  std::vector<uint64_t> next_;
};

bool HasYamlExtension(std::string_view path) {
  const auto ends = [&](std::string_view suffix) {
    return path.size() > suffix.size() &&
           path.substr(path.size() - suffix.size()) == suffix;
  };
  return ends(".yml") || ends(".yaml");
}

// ---------------------------------------------------------------------.
// `rules:` of an include entry.

// The variables an expression names (`$NAME`).
std::vector<std::string> NamedVariables(std::string_view expression) {
  std::vector<std::string> names;
  for (size_t i = 0; i < expression.size(); ++i) {
    if (expression[i] != '$') continue;
    size_t end = i + 1;
    while (end < expression.size() &&
           (std::isalnum(static_cast<unsigned char>(expression[end])) ||
            expression[end] == '_')) {
      ++end;
    }
    if (end > i + 1) names.emplace_back(expression.substr(i + 1, end - i - 1));
    i = end - 1;
  }
  return names;
}

// ---------------------------------------------------------------------.
// CI/CD inputs: `include: {local: ..., inputs: {...}}` and the included
// file's `spec: inputs:` header.

struct InputSpec {
  std::string type = "string";
  std::optional<CiValue> fallback;  // The default.
  std::optional<std::vector<CiValue>> options;
  std::string regex;
  // `rules:` (conditional options and default): each rule's `if:` (empty
  // for the fallback rule), options and default, in order.
  struct Rule {
    std::string condition;
    std::optional<std::vector<CiValue>> options;
    std::optional<CiValue> fallback;
  };
  std::optional<std::vector<Rule>> rules;
};

// A rule's `if:` with each `$[[ inputs.NAME ]]` replaced by a variable
// that `variables` gives the input's value; false when it names an input
// not in `values` (not known yet).
bool InputCondition(const std::string& condition,
                    const std::map<std::string, CiValue>& values,
                    std::string* expression, ExpressionVariables* variables) {
  expression->clear();
  size_t pos = 0;
  while (true) {
    const size_t open = condition.find("$[[", pos);
    const size_t close =
        open == std::string::npos ? open : condition.find("]]", open);
    if (close == std::string::npos) break;
    const std::string inside(absl::StripAsciiWhitespace(
        absl::string_view(condition).substr(open + 3, close - open - 3)));
    if (inside.rfind("inputs.", 0) != 0) return false;
    // The input's value as it is (functions after `|` are left out).
    std::string name = inside.substr(7, inside.find('|') - 7);
    name.erase(name.find_last_not_of(' ') + 1);
    const auto value = values.find(name);
    if (value == values.end()) return false;
    const std::string variable = absl::StrCat("GDT_INPUT_", variables->size());
    expression->append(condition, pos, open - pos);
    absl::StrAppend(expression, "$", variable);
    std::string text;
    if (!CiScalarText(value->second, &text)) text = value->second.dump();
    variables->emplace(variable, text);
    pos = close + 2;
  }
  expression->append(condition, pos, std::string::npos);
  return true;
}

// One input's value as text inside a longer string.
std::string InputText(const CiValue& value) {
  std::string text;
  if (CiScalarText(value, &text)) return text;
  return value.dump();
}

// `value` escaped for a POSIX shell (each special character behind a
// backslash).
std::string PosixEscape(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (!std::isalnum(static_cast<unsigned char>(c)) &&
        std::string_view("_-.,:/@\n").find(c) == std::string_view::npos) {
      out.push_back('\\');
    }
    out.push_back(c);
  }
  return out;
}

// $VAR and ${VAR} of `value` replaced by the known variables' values
// (others stay as written).
std::string ExpandVars(std::string_view value,
                       const ExpressionVariables& variables) {
  std::string out;
  for (size_t i = 0; i < value.size(); ++i) {
    if (value[i] != '$' || i + 1 == value.size()) {
      out.push_back(value[i]);
      continue;
    }
    const bool braced = value[i + 1] == '{';
    size_t start = i + (braced ? 2 : 1);
    size_t end = start;
    while (end < value.size() &&
           (std::isalnum(static_cast<unsigned char>(value[end])) ||
            value[end] == '_')) {
      ++end;
    }
    if (end == start ||
        (braced && (end == value.size() || value[end] != '}'))) {
      out.push_back(value[i]);
      continue;
    }
    const auto found =
        variables.find(std::string(value.substr(start, end - start)));
    const size_t next = braced ? end + 1 : end;
    if (found == variables.end()) {
      out.append(value.substr(i, next - i));
    } else {
      out += found->second;
    }
    i = next - 1;
  }
  return out;
}

// One function of an interpolation block (`$[[ inputs.x | truncate(0,8) ]]`),
// as GitLab matches it: the whole text is one function, else none.
struct InputFunction {
  std::string name;
  size_t offset = 0;  // truncate
  size_t length = 0;
  std::string separator;  // split
};

std::optional<InputFunction> ParseInputFunction(const std::string& text) {
  InputFunction call;
  if (text == "expand_vars" || text == "posix_escape") {
    call.name = text;
    return call;
  }
  // GitLab's pattern leaves the closing parenthesis optional.
  static const RE2 kTruncate(R"(truncate\(\s*(\d+)\s*,\s*(\d+)\s*\)?)");
  static const RE2 kSplit(R"(split\('([^']*)'\))");
  std::string offset;
  std::string length;
  if (RE2::FullMatch(text, kTruncate, &offset, &length)) {
    call.name = "truncate";
    // Past the end of any text is as good as larger.
    const auto number = [](const std::string& digits) {
      return digits.size() > 12 ? size_t{1} << 40
                                : static_cast<size_t>(std::stoull(digits));
    };
    call.offset = number(offset);
    call.length = number(length);
    return call;
  }
  if (RE2::FullMatch(text, kSplit, &call.separator)) {
    call.name = "split";
    return call;
  }
  return std::nullopt;
}

class IncludeReader {
 public:
  IncludeReader(const std::string& project_dir, ExpressionVariables variables,
                const CiIncludeVariables& known, CiIncludes* out)
      : out_(out),
        variables_(std::move(variables)),
        complete_(known.complete),
        path_variables_(known.predefined) {
    for (const auto& [name, value] : known.pipeline) {
      path_variables_[name] = value;
    }
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
      YamlNode inputs;
      if (const YamlNode rules = Find(item, "rules")) {
        const std::optional<bool> included = RulesInclude(file, rules);
        if (failed()) return;
        if (included.has_value() && !*included) continue;
      }
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
        inputs = Find(item, "inputs");
      } else {
        At(file, item,
           "include: an entry must be a path or a mapping with local, "
           "project, remote, template or component");
        return;
      }
      // GitLab fills in the pipeline's variables it knows (not the
      // file's own variables: section).
      if (local.find('$') != std::string::npos) {
        local = ExpandVars(local, path_variables_);
      }
      if (local.find('$') != std::string::npos) {
        // A variable GitLab fills in from the pipeline: not known here.
        Unread(file, item, absl::StrCat("local '", local, "'"),
               "its path holds a variable, which GitLab fills in from the "
               "pipeline");
        continue;
      }
      ReadLocal(file, item, local, inputs, depth);
    }
  }

 private:
  // Whether an entry's `rules:` let GitLab include it: nullopt when it
  // depends on what only the pipeline knows (a variable the file does not
  // set), or after reporting an error.
  std::optional<bool> RulesInclude(const std::string& file,
                                   const YamlNode& rules) {
    absl::StatusOr<std::vector<CiRule>> read =
        ReadRules(ToCiValue(rules), "include", /*job_rules=*/false);
    if (!read.ok()) {
      At(file, rules, std::string(read.status().message()));
      return std::nullopt;
    }
    for (const CiRule& rule : *read) {
      if (!rule.variables.empty()) {
        At(file, rules,
           "include: rules take if, exists, changes and when "
           "only, not variables");
        return std::nullopt;
      }
      if (rule.if_expression.has_value()) {
        for (const std::string& name : NamedVariables(*rule.if_expression)) {
          if (!complete_ && !variables_.contains(name)) return std::nullopt;
        }
        if (!ExpressionHolds(*rule.if_expression, variables_)) continue;
      }
      if (rule.has_exists) {
        const std::vector<std::string>* all = ProjectFiles(file, rules);
        if (all == nullptr) return std::nullopt;
        bool found = false;
        for (const std::string& pattern : rule.exists) {
          for (const std::string& path : *all) {
            if (ExistsGlobMatches(pattern, path)) {
              found = true;
              break;
            }
          }
          if (found) break;
        }
        if (!found) continue;
      }
      // `changes:` holds: a local check has no earlier commit to compare
      // with, like a new branch's first pipeline, for which GitLab takes
      // every change as made.
      return !(rule.when.has_value() && *rule.when == "never");
    }
    return false;
  }

  // The values of the inputs a file declares in its `spec:` header, from
  // `given` (the include's `inputs:`, null when none) and the defaults;
  // false after reporting what GitLab refuses.
  bool InputValues(const std::string& file, const YamlNode& where,
                   const std::string& path, const YamlNode& spec,
                   const YamlNode& given, std::map<std::string, CiValue>* out) {
    const auto fail = [&](const std::string& what) {
      At(file, where, absl::StrCat("include: '", path, "': ", what));
      return false;
    };
    std::map<std::string, InputSpec> specs;
    const YamlNode declared = Find(spec, "inputs");
    if (declared && !declared.IsNull() && !declared.IsMap()) {
      return fail("its spec: inputs must be a mapping of input names");
    }
    if (declared && declared.IsMap()) {
      for (const auto& entry : declared) {
        if (!entry.first.IsScalar()) continue;
        InputSpec one;
        if (const YamlNode type = Find(entry.second, "type")) {
          one.type = type.IsScalar() ? type.Scalar() : "?";
        }
        if (one.type != "string" && one.type != "number" &&
            one.type != "boolean" && one.type != "array") {
          return fail(absl::StrCat("input '", entry.first.Scalar(),
                                   "' has type '", one.type,
                                   "'; GitLab knows string, number, boolean "
                                   "and array"));
        }
        if (const YamlNode d = Find(entry.second, "default")) {
          one.fallback = ToCiValue(d);
        }
        if (const YamlNode options = Find(entry.second, "options");
            options && options.IsSequence()) {
          one.options.emplace();
          for (const YamlNode& option : options) {
            one.options->push_back(ToCiValue(option));
          }
        }
        if (const YamlNode regex = Find(entry.second, "regex");
            regex && regex.IsScalar()) {
          one.regex = regex.Scalar();
        }
        if (const YamlNode rules = Find(entry.second, "rules");
            rules && rules.IsSequence()) {
          one.rules.emplace();
          for (const YamlNode& rule : rules) {
            InputSpec::Rule r;
            if (const YamlNode condition = Find(rule, "if");
                condition && condition.IsScalar()) {
              r.condition = condition.Scalar();
            }
            if (const YamlNode options = Find(rule, "options");
                options && options.IsSequence()) {
              r.options.emplace();
              for (const YamlNode& option : options) {
                r.options->push_back(ToCiValue(option));
              }
            }
            if (const YamlNode d = Find(rule, "default")) {
              r.fallback = ToCiValue(d);
            }
            one.rules->push_back(std::move(r));
          }
        }
        specs.emplace(entry.first.Scalar(), std::move(one));
      }
    }
    const CiValue values = given ? ToCiValue(given) : CiValue::object();
    if (!values.is_object() && !values.is_null()) {
      return fail("inputs must be a mapping of input names to values");
    }
    if (values.is_object()) {
      for (const auto& [name, value] : values.items()) {
        if (specs.count(name) == 0) {
          return fail(absl::StrCat(
              "unknown input arguments: ", name,
              " (the file's spec: inputs header does not declare it)"));
        }
      }
    }
    // An input with `rules:` takes the options and default of its first
    // rule whose `if:` holds for the other inputs (a rule without `if:` always
    // does), so those are worked out first; one whose rules name each other
    // is refused. Without a default (or a matching rule) it is empty.
    std::vector<std::pair<std::string, InputSpec>> order;
    for (const auto& [name, one] : specs) {
      if (!one.rules.has_value()) order.emplace_back(name, one);
    }
    std::map<std::string, CiValue> known;
    for (const auto& [name, one] : specs) {
      if (values.is_object() && values.contains(name)) {
        known[name] = values[name];
      } else if (one.fallback.has_value()) {
        known[name] = *one.fallback;
      }
    }
    std::set<std::string> pending;
    for (const auto& [name, one] : specs) {
      if (one.rules.has_value()) pending.insert(name);
    }
    while (!pending.empty()) {
      bool progress = false;
      for (auto it = pending.begin(); it != pending.end();) {
        InputSpec one = specs.at(*it);
        bool ready = true;
        const InputSpec::Rule* chosen = nullptr;
        for (const InputSpec::Rule& rule : *one.rules) {
          std::string expression;
          ExpressionVariables variables;
          if (rule.condition.empty()) {
            chosen = &rule;
            break;
          }
          if (!InputCondition(rule.condition, known, &expression, &variables)) {
            ready = false;
            break;
          }
          if (ExpressionHolds(expression, variables)) {
            chosen = &rule;
            break;
          }
        }
        if (!ready) {
          ++it;
          continue;
        }
        one.options = chosen != nullptr ? chosen->options : std::nullopt;
        one.fallback = chosen != nullptr && chosen->fallback.has_value()
                           ? chosen->fallback
                           : std::optional<CiValue>(CiValue(""));
        if (!(values.is_object() && values.contains(*it))) {
          known[*it] = *one.fallback;
          // An empty value for want of a default is not an option.
          if (chosen == nullptr || !chosen->fallback.has_value()) {
            one.options.reset();
          }
        }
        order.emplace_back(*it, std::move(one));
        it = pending.erase(it);
        progress = true;
      }
      if (!progress) {
        return fail(absl::StrCat("`", *pending.begin(),
                                 "` input: its rules name an input that the "
                                 "header does not declare, or one whose rules "
                                 "name it in turn"));
      }
    }
    for (const auto& [name, one] : order) {
      CiValue value;
      if (values.is_object() && values.contains(name)) {
        value = values[name];
      } else if (one.fallback.has_value()) {
        value = *one.fallback;
      } else {
        return fail(absl::StrCat("`", name,
                                 "` input: required value has not been "
                                 "provided"));
      }
      const bool typed = (one.type == "string" && value.is_string()) ||
                         (one.type == "number" && value.is_number()) ||
                         (one.type == "boolean" && value.is_boolean()) ||
                         (one.type == "array" && value.is_array());
      if (!typed) {
        return fail(absl::StrCat("`", name, "` input: provided value is not ",
                                 one.type == "array" ? "an " : "a ", one.type,
                                 " (", InputText(value), ")"));
      }
      if (one.options.has_value() &&
          std::find(one.options->begin(), one.options->end(), value) ==
              one.options->end()) {
        return fail(absl::StrCat("`", name, "` input: `", InputText(value),
                                 "` cannot be used because it is not in the "
                                 "list of allowed options"));
      }
      if (!one.regex.empty()) {
        std::string pattern = one.regex;
        // GitLab writes the pattern between slashes or bare.
        if (pattern.size() >= 2 && pattern.front() == '/' &&
            pattern.back() == '/') {
          pattern = pattern.substr(1, pattern.size() - 2);
        }
        const RE2 re(pattern, RE2::Quiet);
        if (!re.ok()) {
          return fail(absl::StrCat("`", name, "` input: its regex /", pattern,
                                   "/ is not a regular expression gdt reads (",
                                   re.error(), ")"));
        }
        if (!value.is_string() ||
            !RE2::PartialMatch(value.get<std::string>(), re)) {
          return fail(absl::StrCat("`", name,
                                   "` input: provided value does not match "
                                   "required RegEx pattern /",
                                   pattern, "/"));
        }
      }
      (*out)[name] = std::move(value);
    }
    return true;
  }

  // `text` (the included file `path`, parsed as `tree`) with every
  // `$[[ inputs.NAME ]]` of its configuration documents filled in, as GitLab
  // does after reading the header: a value that is one block alone takes
  // the input's type; text around one makes a string. Each changed scalar
  // is written anew, quoted, on as many lines as before (so later places
  // stay). nullopt after reporting an error.
  std::optional<std::string> Interpolate(
      const std::string& path, const std::string& text,
      const std::vector<YamlNode>& documents, size_t node_count,
      const std::map<std::string, CiValue>& values) {
    struct Edit {
      size_t begin;
      size_t end;
      std::string text;
    };
    std::vector<Edit> edits;
    // A mark's byte offset: libyaml counts characters, not bytes.
    std::vector<size_t> line_starts = {0};
    for (size_t i = 0; i < text.size(); ++i) {
      if (text[i] == '\n') line_starts.push_back(i + 1);
    }
    const auto byte_at = [&](const YamlMark& mark) {
      if (mark.is_null() ||
          static_cast<size_t>(mark.line) >= line_starts.size()) {
        return text.size();
      }
      size_t at = line_starts[static_cast<size_t>(mark.line)];
      for (int c = 0; c < mark.column && at < text.size(); ++c) {
        ++at;
        while (at < text.size() &&
               (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) {
          ++at;
        }
      }
      return at;
    };
    std::vector<bool> visited(node_count);
    std::vector<YamlNode> stack(documents.rbegin(), documents.rend());
    while (!stack.empty()) {
      const YamlNode node = stack.back();
      stack.pop_back();
      if (!node || visited[node.index()]) continue;
      visited[node.index()] = true;
      if (node.IsMap()) {
        for (size_t i = node.size(); i-- > 0;) {
          stack.push_back(node.Entry(i).second);
          stack.push_back(node.Entry(i).first);
        }
        continue;
      }
      if (node.IsSequence()) {
        for (size_t i = node.size(); i-- > 0;) stack.push_back(node.Item(i));
        continue;
      }
      if (!node.IsScalar() || node.Scalar().find("$[[") == std::string::npos) {
        continue;
      }
      const auto problem = [&](std::string message) {
        const YamlMark mark = node.Mark();
        out_->errors.push_back(CiIncludes::Problem{
            path, mark.line + 1, mark.column + 1, std::move(message)});
        return std::nullopt;
      };
      const std::string& scalar = node.Scalar();
      std::string filled;
      std::optional<CiValue> whole;
      size_t at = 0;
      while (true) {
        const size_t open = scalar.find("$[[", at);
        if (open == std::string::npos) break;
        const size_t close = scalar.find("]]", open + 3);
        if (close == std::string::npos) break;
        filled += scalar.substr(at, open - at);
        std::vector<std::string> parts =
            absl::StrSplit(scalar.substr(open + 3, close - open - 3), '|');
        for (std::string& part : parts) {
          part = std::string(absl::StripAsciiWhitespace(part));
        }
        // GitLab leaves every block whose access starts with the matrix
        // context as written (`$[[ matrix ]]` and functions on it too).
        if (parts[0].rfind("component.", 0) == 0) {
          // GitLab has component data only for a file included as a
          // CI/CD component.
          return problem(absl::StrCat(
              "'$[[ ", parts[0],
              " ]]': GitLab fills in the component context only in a file "
              "included as a CI/CD component (include: component:), not in "
              "a local include, and refuses the file"));
        }
        if (parts[0] == "matrix" || parts[0].rfind("matrix.", 0) == 0) {
          // The matrix context GitLab fills in later (needs of a matrix
          // job): kept as written.
          filled += scalar.substr(open, close + 2 - open);
          at = close + 2;
          continue;
        }
        if (parts[0].rfind("inputs.", 0) != 0) {
          return problem(absl::StrCat("'$[[ ", parts[0],
                                      " ]]': GitLab interpolates only "
                                      "$[[ inputs.NAME ]]"));
        }
        const std::string name = parts[0].substr(7);
        const auto value = values.find(name);
        if (value == values.end()) {
          return problem(absl::StrCat("unknown input name provided: `", name,
                                      "` (the spec: inputs header does not "
                                      "declare it)"));
        }
        if (parts.size() > 4) {
          return problem(absl::StrCat("input '", name,
                                      "': too many functions in "
                                      "interpolation block (at most 3)"));
        }
        std::optional<CiValue> listed;  // What split() made of the text.
        std::string piece = InputText(value->second);
        for (size_t f = 1; f < parts.size(); ++f) {
          const std::string& function = parts[f];
          const std::optional<InputFunction> call =
              ParseInputFunction(function);
          if (!call.has_value()) {
            return problem(absl::StrCat(
                "input '", name, "': no function matching `", function,
                "`: check that the function name, arguments, and types are "
                "correct (GitLab has expand_vars, posix_escape, "
                "truncate(offset,length) and split('separator'))"));
          }
          if (!value->second.is_string()) {
            return problem(absl::StrCat("input '", name,
                                        "': invalid input type: ", call->name,
                                        " can only be used with string "
                                        "inputs"));
          }
          if (call->name == "split" && f + 1 < parts.size()) {
            return problem(absl::StrCat(
                "input '", name,
                "': split() must be the last function in a chain (it returns "
                "an array, not a string)"));
          }
          if (call->name == "expand_vars") {
            piece = ExpandVars(piece, variables_);
          } else if (call->name == "posix_escape") {
            piece = PosixEscape(piece);
          } else if (call->name == "truncate") {
            piece = call->offset >= piece.size()
                        ? std::string()
                        : piece.substr(call->offset, call->length);
          } else if (call->separator.empty()) {
            return problem(absl::StrCat("input '", name,
                                        "': invalid argument: separator "
                                        "cannot be empty"));
          } else {
            listed = CiValue::array();
            for (absl::string_view item :
                 absl::StrSplit(piece, call->separator)) {
              item = absl::StripAsciiWhitespace(item);
              if (!item.empty()) listed->push_back(std::string(item));
            }
            piece = listed->dump();
          }
        }
        if (open == 0 && close + 2 == scalar.size() && listed.has_value()) {
          whole = *listed;
        }
        if (open == 0 && close + 2 == scalar.size() && parts.size() == 1) {
          whole = value->second;
        }
        filled += piece;
        at = close + 2;
      }
      filled += scalar.substr(at);
      std::string written;
      if (whole.has_value() && !whole->is_string()) {
        written = whole->dump();
      } else {
        written = CiValue(filled).dump(-1, ' ', false,
                                       CiValue::error_handler_t::replace);
      }
      const size_t begin = byte_at(node.Mark());
      const size_t end = byte_at(node.EndMark());
      if (begin >= end) continue;
      // As many line breaks as the scalar took, after it.
      written.append(
          static_cast<size_t>(std::count(
              text.begin() + static_cast<std::ptrdiff_t>(begin),
              text.begin() + static_cast<std::ptrdiff_t>(end), '\n')),
          '\n');
      edits.push_back(Edit{begin, end, std::move(written)});
    }
    std::sort(edits.begin(), edits.end(),
              [](const Edit& a, const Edit& b) { return a.begin > b.begin; });
    std::string result = text;
    size_t limit = result.size();
    for (const Edit& edit : edits) {
      if (edit.end > limit) continue;  // Overlapping: cannot happen.
      result.replace(edit.begin, edit.end - edit.begin, edit.text);
      limit = edit.begin;
    }
    return result;
  }

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
    std::string name = absl::StrCat(what, " (", file, ":", mark.line + 1, ")");
    // Files read so far merge under this one.
    if (!out_->files.empty()) {
      out_->unseen_over_seen = true;
      out_->unread_over_seen_names.push_back(name);
    }
    out_->unread_names.push_back(std::move(name));
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
                 std::string local, const YamlNode& inputs, int depth) {
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
      ReadOne(file, where, path, inputs, depth);
    }
  }

  // The file `path` names, relative to the project's root with links
  // followed; nullopt, said at `where`, when it is not a file of the
  // project. Each path is looked up once: a list that names one file
  // thousands of times costs its length, not thousands of lookups.
  std::optional<std::string> Resolve(const std::string& file,
                                     const YamlNode& where,
                                     const std::string& path) {
    if (const auto known = resolved_.find(path); known != resolved_.end()) {
      return known->second;
    }
    std::error_code error;
    const fs::path full = root_ / path;
    if (!fs::exists(fs::symlink_status(full, error))) {
      At(file, where,
         absl::StrCat("include: '", path, "' does not exist in the project ",
                      root_.string()));
      return std::nullopt;
    }
    const fs::path real = fs::canonical(full, error);
    if (error) {
      At(file, where,
         absl::StrCat("include: '", path,
                      "' cannot be followed (a broken link?)"));
      return std::nullopt;
    }
    std::string rel = real.lexically_relative(root_).generic_string();
    if (rel.empty() || rel == "." || rel.rfind("..", 0) == 0) {
      At(file, where,
         absl::StrCat("include: '", path,
                      "' leads outside the project directory (a symbolic "
                      "link to ",
                      real.string(), ")"));
      return std::nullopt;
    }
    if (fs::is_directory(real, error)) {
      At(file, where,
         absl::StrCat("include: '", path,
                      "' is a directory; include its files (e.g. '", path,
                      "/*.yml')"));
      return std::nullopt;
    }
    resolved_.emplace(path, rel);
    return rel;
  }

  void ReadOne(const std::string& file, const YamlNode& where,
               const std::string& path, const YamlNode& inputs, int depth) {
    if (!HasYamlExtension(path)) {
      At(file, where,
         absl::StrCat("include: '", path,
                      "' is not a .yml or .yaml file, which GitLab "
                      "refuses to include"));
      return;
    }
    const std::optional<std::string> resolved = Resolve(file, where, path);
    if (!resolved.has_value()) return;
    const std::string& rel = *resolved;
    if (std::find(stack_.begin(), stack_.end(), rel) != stack_.end()) {
      At(file, where,
         absl::StrCat("include: '", path, "' includes itself (through ", file,
                      "); GitLab refuses an include cycle"));
      return;
    }
    // Read once, as GitLab does; with other inputs it is another file.
    if (!seen_
             .insert(inputs ? absl::StrCat(rel, "\n", ToCiValue(inputs).dump())
                            : rel)
             .second) {
      return;
    }
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
        ReadTextFile((root_ / rel).string(), kMaxIncludedBytes - bytes_);
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
    std::vector<YamlNode> documents;
    for (const YamlNode& root : tree->documents()) {
      if (!root.IsNull()) documents.push_back(root);
    }
    // A `spec:` header (the first of two or more documents) declares the
    // inputs GitLab fills in.
    YamlNode spec;
    const GitLabDocuments read = DocumentsGitLabReads(*text, documents);
    if (read.header) spec = Find(documents[0], "spec");
    if (spec) {
      std::map<std::string, CiValue> values;
      if (!InputValues(file, where, path, spec, inputs, &values)) return;
      // GitLab fills in the text of the piece it loads, every document of
      // it, and nothing before (documents it ignores).
      std::optional<std::string> filled =
          Interpolate(path, *text,
                      std::vector<YamlNode>(documents.begin() + read.loaded,
                                            documents.begin() + read.piece_end),
                      tree->node_count(), values);
      if (!filled.has_value()) return;
      *text = *std::move(filled);
    } else if (inputs) {
      At(file, where,
         absl::StrCat("include: '", path,
                      "' is given inputs but has no spec: inputs header; "
                      "GitLab refuses given inputs not defined in the spec "
                      "section of the included file"));
      return;
    }
    // The file's own includes as filled in: a path or rule may hold an
    // input (`local: ci/$[[ inputs.stage ]].yml`).
    std::unique_ptr<YamlTree> filled_tree;
    if (spec) {
      YamlError filled_error;
      filled_tree = YamlTree::Parse(*text, &filled_error);
      if (!filled_error.message.empty()) {
        out_->errors.push_back(CiIncludes::Problem{
            path, filled_error.mark.line + 1, filled_error.mark.column + 1,
            absl::StrCat("with its inputs filled in, not valid YAML: ",
                         filled_error.message)});
        return;
      }
    }
    // Of the one document GitLab takes.
    YamlNode include;
    std::vector<YamlNode> taken;
    for (const YamlNode& root :
         (filled_tree ? filled_tree : tree)->documents()) {
      if (!root.IsNull()) taken.push_back(root);
    }
    if (!taken.empty()) {
      include =
          Find(taken[DocumentsGitLabReads(*text, taken).loaded], "include");
    }
    stack_.push_back(rel);
    Visit(path, include, depth + 1);
    stack_.pop_back();
    // Its own includes first, then the file over them.
    out_->files.push_back(CiIncludedFile{path, *std::move(text)});
  }

  CiIncludes* out_;
  // The variables include rules and expand_vars see: the pipeline's
  // predefined ones, the main file's top-level ones, the pipeline's own.
  ExpressionVariables variables_;
  bool complete_ = false;  // No other variable is set.
  // The variables a path may name: the pipeline's, predefined or its own.
  ExpressionVariables path_variables_;
  std::string main_;  // The main file, as named.
  fs::path root_;
  std::optional<std::vector<std::string>> files_;
  std::vector<std::string> stack_;
  std::set<std::string> seen_;
  size_t bytes_ = 0;
  size_t count_ = 0;
  // Steps all wildcards together may still take.
  uint64_t glob_budget_ = kMaxGlobSteps;
  std::map<std::string, std::string> resolved_;  // Resolve()'s answers.
};

// The scalar values of a `variables:` mapping (`value:` of the long form),
// as text; `only`, when given, names the ones taken.
void AddScalarVariables(const CiValue& variables,
                        const std::optional<std::set<std::string>>& only,
                        ExpressionVariables* out) {
  if (!variables.is_object()) return;
  for (const auto& [name, value] : variables.items()) {
    if (only.has_value() && only->count(name) == 0) continue;
    std::string shown;
    if (CiScalarText(value.is_object() && value.contains("value")
                         ? value["value"]
                         : value,
                     &shown)) {
      (*out)[name] = shown;
    }
  }
}

}  // namespace

CiIncludeVariables PipelineVariablesOf(
    const std::vector<std::pair<std::string, std::string>>& vars) {
  CiIncludeVariables known;
  for (const auto& [key, value] : vars) {
    const bool predefined =
        absl::StartsWith(key, "CI_") || absl::StartsWith(key, "GITLAB_");
    (predefined ? known.predefined : known.pipeline)[key] = value;
  }
  return known;
}

CiIncludes ReadLocalIncludes(std::string_view file, std::string_view text,
                             const std::string& project_dir,
                             const CiIncludeVariables& known) {
  CiIncludes result;
  YamlError error;
  const std::unique_ptr<YamlTree> tree = YamlTree::Parse(text, &error);
  if (!error.message.empty()) return result;  // Reported by lint/expand.
  // The one document GitLab takes: its include: and variables: count.
  std::vector<YamlNode> documents;
  for (const YamlNode& root : tree->documents()) {
    if (!root.IsNull()) documents.push_back(root);
  }
  if (documents.empty()) return result;
  const YamlNode taken =
      documents[DocumentsGitLabReads(text, documents).loaded];
  const YamlNode include = Find(taken, "include");
  if (!include) return result;
  ExpressionVariables variables = known.predefined;
  if (const YamlNode declared = Find(taken, "variables")) {
    AddScalarVariables(ToCiValue(declared), std::nullopt, &variables);
  }
  for (const auto& [name, value] : known.pipeline) variables[name] = value;
  IncludeReader reader(project_dir, std::move(variables), known, &result);
  if (reader.failed()) return result;
  reader.StartAt(std::string(file));
  reader.Visit(std::string(file), include, 1);
  return result;
}

namespace {

// Reads a configuration made of `texts`, each parsed once: the top-level
// names of their documents go into *names, and the result is its stages
// as CiIncludingConfig::stages, in GitLab's merge order (the last file that
// lists them wins).
std::optional<std::vector<std::string>> NamesAndStagesOf(
    const std::vector<std::string_view>& texts, std::set<std::string>* names) {
  std::optional<std::vector<std::string>> stages =
      std::vector<std::string>{"build", "test", "deploy"};
  for (const std::string_view text : texts) {
    YamlError parse_error;
    const std::unique_ptr<YamlTree> tree = YamlTree::Parse(text, &parse_error);
    if (!parse_error.message.empty()) {
      stages = std::nullopt;
      continue;
    }
    std::vector<YamlNode> documents;
    for (const YamlNode& root : tree->documents()) {
      if (root.IsMap()) {
        for (const auto& entry : root) {
          if (entry.first.IsScalar()) names->insert(entry.first.Scalar());
        }
      }
      if (!root.IsNull()) documents.push_back(root);
    }
    if (documents.empty() || !stages.has_value()) continue;
    const YamlNode root =
        documents[DocumentsGitLabReads(text, documents).loaded];
    if (Find(root, "types")) {
      stages = std::nullopt;
      continue;
    }
    const YamlNode listed = Find(root, "stages");
    if (listed) stages = CiStageNames(ToCiValue(listed));
  }
  return stages;
}

// Whether `includes` read the file `self` (a canonical path).
bool ReadsFile(const CiIncludes& includes, const std::string& project_dir,
               const fs::path& self) {
  return std::any_of(includes.files.begin(), includes.files.end(),
                     [&](const CiIncludedFile& f) {
                       std::error_code ignored;
                       return fs::weakly_canonical(
                                  fs::path(project_dir) / f.path, ignored) ==
                              self;
                     });
}

// A child pipeline that a job of a configuration starts: the job, the
// files its configuration reads, and the variables its include rules see.
struct ChildPipeline {
  std::string job;
  CiIncludes includes;
  CiIncludeVariables variables;
};

// The `trigger:forward:<key>` of a trigger job, `fallback` when unset or not
// a boolean.
bool Forwards(const CiValue& trigger, const char* key, bool fallback) {
  const auto forward = trigger.find("forward");
  if (forward == trigger.end() || !forward->is_object()) return fallback;
  const auto value = forward->find(key);
  if (value == forward->end() || !value->is_boolean()) return fallback;
  return value->get<bool>();
}

// At most this many child pipelines are read in looking for a file.
constexpr size_t kMaxChildPipelines = 100;

// The child pipelines that the jobs of the configuration made of `texts`
// (in GitLab's merge order) start with `trigger:include`; `known` are the
// variables of the pipeline they are in. GitLab makes a child's
// configuration a file of just `include:` with that value, started by the
// parent (CI_PIPELINE_SOURCE parent_pipeline), and gives the child as its
// pipeline variables the trigger job's YAML variables (its own over the
// top-level ones that `inherit:variables` lets it have) unless
// `forward:yaml_variables` is false, then the parent's pipeline variables
// when `forward:pipeline_variables` is true.
std::vector<ChildPipeline> ChildPipelines(
    const std::vector<std::string_view>& texts, const std::string& project_dir,
    const CiIncludeVariables& known) {
  std::vector<std::unique_ptr<YamlTree>> trees;
  std::vector<std::vector<YamlNode>> files;
  for (const std::string_view text : texts) {
    YamlError parse_error;
    std::unique_ptr<YamlTree> tree = YamlTree::Parse(text, &parse_error);
    if (!parse_error.message.empty()) continue;
    std::vector<YamlNode> documents;
    for (const YamlNode& root : tree->documents()) {
      if (root.IsMap()) documents.push_back(root);
    }
    if (documents.empty()) continue;
    files.push_back({documents[DocumentsGitLabReads(text, documents).loaded]});
    trees.push_back(std::move(tree));
  }
  std::set<std::string> jobs;
  for (const std::vector<YamlNode>& documents : files) {
    for (const auto& entry : documents.front()) {
      if (!entry.first.IsScalar() || !entry.second.IsMap()) continue;
      const std::string& name = entry.first.Scalar();
      if (!name.empty() && name[0] != '.' && !IsCiKeyword(name)) {
        jobs.insert(name);
      }
    }
  }
  const CiConfigModel model(files, /*unseen_includes=*/false,
                            /*unseen_over_seen=*/false);
  const std::optional<CiValue> top = model.Top("variables");
  std::vector<ChildPipeline> children;
  for (const std::string& job : jobs) {
    if (children.size() >= kMaxChildPipelines) break;
    const absl::StatusOr<CiConfigModel::Effective> resolved =
        model.Resolve(job, {"trigger", "variables", "inherit"});
    if (!resolved.ok() || !resolved->config.is_object()) continue;
    const CiValue& config = resolved->config;
    const auto trigger = config.find("trigger");
    if (trigger == config.end() || !trigger->is_object() ||
        !trigger->contains("include")) {
      continue;
    }
    CiIncludeVariables child;
    child.predefined = known.predefined;
    child.predefined["CI_PIPELINE_SOURCE"] = "parent_pipeline";
    child.complete = known.complete;
    if (Forwards(*trigger, "yaml_variables", true)) {
      // inherit:variables: true (the default), false, or the names taken.
      bool globals = true;
      std::optional<std::set<std::string>> only;
      if (const auto inherit = config.find("inherit");
          inherit != config.end() && inherit->is_object()) {
        const auto v = inherit->find("variables");
        if (v != inherit->end() && v->is_boolean()) globals = v->get<bool>();
        if (v != inherit->end() && v->is_array()) {
          only.emplace();
          for (const CiValue& name : *v) {
            if (name.is_string()) only->insert(name.get<std::string>());
          }
        }
      }
      if (globals && top.has_value()) {
        AddScalarVariables(*top, only, &child.pipeline);
      }
      if (const auto own = config.find("variables"); own != config.end()) {
        AddScalarVariables(*own, std::nullopt, &child.pipeline);
      }
    }
    if (Forwards(*trigger, "pipeline_variables", false)) {
      for (const auto& [name, value] : known.pipeline) {
        child.pipeline[name] = value;
      }
    }
    const std::string child_text =
        CiValue::object({{"include", trigger->at("include")}}).dump();
    CiIncludes includes =
        ReadLocalIncludes(absl::StrCat("trigger:include of ", job), child_text,
                          project_dir, child);
    children.push_back(
        ChildPipeline{job, std::move(includes), std::move(child)});
  }
  return children;
}

}  // namespace

std::optional<CiIncludingConfig> FindIncludingConfig(
    std::string_view file, const std::string& project_dir,
    const CiIncludeVariables& known) {
  std::error_code error;
  const fs::path main = fs::path(project_dir) / ".gitlab-ci.yml";
  const fs::path self = fs::weakly_canonical(fs::path(file), error);
  if (error) return std::nullopt;
  const fs::path main_real = fs::weakly_canonical(main, error);
  if (error || main_real == self || !fs::is_regular_file(main_real, error)) {
    return std::nullopt;
  }
  const absl::StatusOr<std::string> text =
      ReadTextFile(main.string(), kMaxIncludedBytes);
  if (!text.ok()) return std::nullopt;
  const CiIncludes includes =
      ReadLocalIncludes(".gitlab-ci.yml", *text, project_dir, known);
  CiIncludingConfig result;
  result.main_path = ".gitlab-ci.yml";
  if (ReadsFile(includes, project_dir, self)) {
    result.unseen = includes.unseen;
    std::vector<std::string_view> merged;
    for (const CiIncludedFile& f : includes.files) merged.push_back(f.text);
    merged.push_back(*text);  // The main file merges last.
    result.stages = NamesAndStagesOf(merged, &result.names);
    return result;
  }
  // Not a part of the main configuration: a child pipeline's, maybe. Its
  // configuration is only the files its trigger:include reads (the
  // parent's templates are not there); child pipelines nest two levels.
  std::vector<std::string_view> level = {*text};
  for (const CiIncludedFile& f : includes.files) level.push_back(f.text);
  std::vector<ChildPipeline> children =
      ChildPipelines(level, project_dir, known);
  bool found = false;
  for (int depth = 1; depth <= 2 && !children.empty(); ++depth) {
    std::vector<ChildPipeline> next;
    for (const ChildPipeline& child : children) {
      if (ReadsFile(child.includes, project_dir, self)) {
        std::vector<std::string_view> merged;
        for (const CiIncludedFile& f : child.includes.files) {
          merged.push_back(f.text);
        }
        // Children that read the file with other stages: not judged.
        const std::optional<std::vector<std::string>> stages =
            NamesAndStagesOf(merged, &result.names);
        result.stages =
            !found || result.stages == stages ? stages : std::nullopt;
        if (!found) result.trigger_job = child.job;
        found = true;
        result.unseen = result.unseen || child.includes.unseen;
      }
      if (depth < 2 && next.size() < kMaxChildPipelines) {
        std::vector<std::string_view> texts;
        for (const CiIncludedFile& f : child.includes.files) {
          texts.push_back(f.text);
        }
        for (ChildPipeline& grandchild :
             ChildPipelines(texts, project_dir, child.variables)) {
          next.push_back(std::move(grandchild));
        }
      }
    }
    children = std::move(next);
  }
  if (!found) return std::nullopt;
  return result;
}

}  // namespace gdt::ci
