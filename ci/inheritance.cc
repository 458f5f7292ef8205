#include "ci/inheritance.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <unordered_map>

#include "absl/strings/str_cat.h"

namespace gdt::ci {
namespace {

// GitLab documents eleven levels of `extends`.
constexpr int kMaxExtendsDepth = CiConfigModel::kMaxExtendsDepth;
// A height that stands for "too deep" (or a loop).
constexpr int kTooDeep = kMaxExtendsDepth + 1;
// Nesting of `!reference` inside referenced values.
constexpr int kMaxReferenceDepth = 10;
constexpr int kMaxValueDepth = 100;
const char kReference[] = "!reference";

bool AllDigits(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

}  // namespace

std::optional<int64_t> Yaml11Integer(std::string_view text) {
  size_t i = 0;
  bool negative = false;
  if (!text.empty() && (text[0] == '-' || text[0] == '+')) {
    negative = text[0] == '-';
    i = 1;
  }
  const std::string_view body = text.substr(i);
  if (body.empty()) return std::nullopt;
  if (body == "0") return 0;
  int base = 10;
  size_t start = 0;
  if (body.size() > 2 && body[0] == '0' && (body[1] == 'b' || body[1] == 'x')) {
    base = body[1] == 'b' ? 2 : 16;
    start = 2;
  } else if (body[0] == '0') {
    base = 8;
    start = 1;
  } else if (body[0] < '1' || body[0] > '9') {
    return std::nullopt;
  }
  int64_t value = 0;
  bool any = false;
  for (size_t k = start; k < body.size(); ++k) {
    const unsigned char c = static_cast<unsigned char>(body[k]);
    if (c == '_' || c == ',') {
      // In a decimal, each separator comes before a digit.
      if (base == 10 &&
          (k + 1 >= body.size() ||
           !std::isdigit(static_cast<unsigned char>(body[k + 1])))) {
        return std::nullopt;
      }
      continue;
    }
    int digit = -1;
    if (std::isdigit(c)) {
      digit = c - '0';
    } else if (base == 16 && std::isxdigit(c)) {
      digit = std::tolower(c) - 'a' + 10;
    }
    if (digit < 0 || digit >= base) return std::nullopt;
    if (value > (std::numeric_limits<int64_t>::max() - digit) / base) {
      return std::nullopt;  // Beyond 64 bits: left as written.
    }
    value = value * base + digit;
    any = true;
  }
  if (!any) return std::nullopt;
  return negative ? -value : value;
}

std::optional<std::vector<std::string>> CiStageNames(const CiValue& listed) {
  if (!listed.is_array()) return std::nullopt;
  std::vector<std::string> names;
  bool readable = true;
  const std::function<void(const CiValue&)> flatten =
      [&](const CiValue& value) {
        if (value.is_array()) {
          for (const CiValue& item : value) flatten(item);
        } else if (value.is_string() &&
                   value.get<std::string>().find("$[[") == std::string::npos) {
          names.push_back(value.get<std::string>());
        } else {
          readable = false;
        }
      };
  flatten(listed);
  if (!readable) return std::nullopt;
  return names;
}

namespace {

// A plain scalar typed as Ruby's YAML reader (YAML 1.1) types it.
CiValue PlainScalar(const std::string& text) {
  if (text.empty() || text == "~" || text == "null" || text == "Null" ||
      text == "NULL") {
    return nullptr;
  }
  static const char* const kTrue[] = {"true", "True", "TRUE", "yes", "Yes",
                                      "YES",  "on",   "On",   "ON"};
  static const char* const kFalse[] = {"false", "False", "FALSE", "no", "No",
                                       "NO",    "off",   "Off",   "OFF"};
  for (const char* t : kTrue) {
    if (text == t) return true;
  }
  for (const char* f : kFalse) {
    if (text == f) return false;
  }
  if (const std::optional<int64_t> integer = Yaml11Integer(text)) {
    return *integer;
  }
  std::string_view digits = text;
  if (digits[0] == '-' || digits[0] == '+') digits.remove_prefix(1);
  const size_t dot = digits.find('.');
  if (dot != std::string_view::npos && digits.size() <= 30) {
    const std::string_view whole = digits.substr(0, dot);
    const std::string_view fraction = digits.substr(dot + 1);
    if ((whole.empty() || AllDigits(whole)) &&
        (fraction.empty() || AllDigits(fraction)) &&
        !(whole.empty() && fraction.empty())) {
      return std::strtod(text.c_str(), nullptr);
    }
  }
  return text;
}

// An object's keys looked up through a hash index: ordered_json finds a
// key by scanning, so a mapping of 100,000 variables took minutes to build
// or merge key by key.
class KeyedObject {
 public:
  explicit KeyedObject(CiValue* object)
      : items_(object->get_ref<CiValue::object_t&>()) {
    for (size_t i = 0; i < items_.size(); ++i) at_.emplace(Item(i).first, i);
  }
  CiValue* Find(const std::string& key) {
    const auto found = at_.find(key);
    return found == at_.end() ? nullptr : &Item(found->second).second;
  }
  // Sets `key`, keeping its place when it is there already.
  void Put(const std::string& key, CiValue value) {
    const auto [found, fresh] = at_.emplace(key, items_.size());
    if (fresh) {
      items_.emplace_back(key, std::move(value));
    } else {
      Item(found->second).second = std::move(value);
    }
  }

 private:
  // ordered_map hides the vector's operator[].
  CiValue::object_t::value_type& Item(size_t i) {
    return *(items_.begin() + static_cast<std::ptrdiff_t>(i));
  }

  CiValue::object_t& items_;
  std::unordered_map<std::string, size_t> at_;
};

CiValue ToValue(const YamlNode& node, int depth) {
  if (!node || node.IsNull() || depth > kMaxValueDepth) return nullptr;
  if (node.Tag() == kReference && !node.IsSequence()) {
    // GitLab refuses it; resolving says so.
    CiValue reference = CiValue::object();
    reference[kReference] = node.IsScalar() ? CiValue(node.Scalar()) : nullptr;
    return reference;
  }
  if (node.IsSequence()) {
    CiValue list = CiValue::array();
    for (const YamlNode& item : node) list.push_back(ToValue(item, depth + 1));
    if (node.Tag() == kReference) {
      CiValue reference = CiValue::object();
      reference[kReference] = std::move(list);
      return reference;
    }
    return list;
  }
  if (node.IsMap()) {
    CiValue map = CiValue::object();
    KeyedObject keyed(&map);
    for (const auto& entry : node) {
      const std::string key =
          entry.first.IsScalar() ? entry.first.Scalar() : std::string("?");
      if (key == "<<" && entry.first.IsPlain()) {
        // Ruby: a mapping is merged over what is there; in a list the
        // earlier mapping wins.
        CiValue merged = CiValue::object();
        const YamlNode& value = entry.second;
        if (value.IsMap()) {
          merged = ToValue(value, depth + 1);
        } else if (value.IsSequence()) {
          for (size_t i = value.size(); i-- > 0;) {
            const CiValue one = ToValue(value.Item(i), depth + 1);
            if (!one.is_object()) continue;
            for (const auto& [k, v] : one.items()) merged[k] = v;
          }
        }
        if (merged.is_object()) {
          for (const auto& [k, v] : merged.items()) keyed.Put(k, v);
        }
        continue;
      }
      keyed.Put(key, ToValue(entry.second, depth + 1));
    }
    return map;
  }
  if (node.IsPlain()) return PlainScalar(node.Scalar());
  return node.Scalar();
}

// Whether `value` is a `!reference [...]` (kept as {"!reference": [...]}).
bool IsReference(const CiValue& value) {
  return value.is_object() && value.size() == 1 && value.contains(kReference);
}

// GitLab's deep merge: mappings key by key, anything else replaced. GitLab
// merges `extends` (and included files) before it resolves `!reference`s,
// so a reference is no mapping here: it replaces and is replaced whole.
void DeepMerge(CiValue* into, const CiValue& from, int depth = 0) {
  if (!into->is_object() || !from.is_object() || IsReference(*into) ||
      IsReference(from) || depth > kMaxValueDepth) {
    *into = from;
    return;
  }
  KeyedObject merged(into);
  for (const auto& [key, value] : from.items()) {
    CiValue* found = merged.Find(key);
    if (found != nullptr && found->is_object() && value.is_object() &&
        !IsReference(*found) && !IsReference(value)) {
      DeepMerge(found, value, depth + 1);
    } else {
      merged.Put(key, value);
    }
  }
}

absl::Status TooDeep(std::string_view job) {
  return absl::InvalidArgumentError(
      absl::StrCat("extends nests more than ", kMaxExtendsDepth,
                   " levels (or loops) at '", std::string(job), "'"));
}

// What of `key` a caller that asked for `only_keys` (all when empty) wants:
// nullopt nothing, "" all of it, else only its entries whose names start
// with the prefix given as "key/prefix".
std::optional<std::string> WantedPart(const std::vector<std::string>& only_keys,
                                      std::string_view key) {
  if (only_keys.empty()) return "";
  for (const std::string& wanted : only_keys) {
    if (wanted == key) return "";
    if (wanted.size() > key.size() && wanted[key.size()] == '/' &&
        std::string_view(wanted).substr(0, key.size()) == key) {
      return wanted.substr(key.size() + 1);
    }
  }
  return std::nullopt;
}

bool Wanted(const std::vector<std::string>& only_keys, std::string_view key) {
  return WantedPart(only_keys, key).has_value();
}

}  // namespace

// One name or a list of them.
std::vector<std::string> ExtendsList(const CiValue& job) {
  std::vector<std::string> parents;
  const auto extends = job.find("extends");
  if (extends == job.end()) return parents;
  if (extends->is_string()) parents.push_back(extends->get<std::string>());
  if (extends->is_array()) {
    for (const CiValue& parent : *extends) {
      if (parent.is_string()) parents.push_back(parent.get<std::string>());
    }
  }
  return parents;
}

CiValue ToCiValue(const YamlNode& node) { return ToValue(node, 0); }

CiConfigModel::CiConfigModel(const std::vector<YamlNode>& documents)
    : CiConfigModel(std::vector<std::vector<YamlNode>>{documents}, false,
                    false) {
  has_include_ = top_.count("include") != 0;
}

CiConfigModel::CiConfigModel(const std::vector<std::vector<YamlNode>>& files,
                             bool unseen_includes, bool unseen_over_seen)
    : has_include_(unseen_includes),
      unseen_over_seen_(unseen_over_seen),
      file_count_(files.size()) {
  for (const std::vector<YamlNode>& documents : files) {
    // Within a file the last entry of a name wins; across files they merge.
    std::unordered_map<std::string, YamlNode> own;
    for (const YamlNode& root : documents) {
      if (!root.IsMap()) continue;
      for (const auto& entry : root) {
        if (entry.first.IsScalar()) own[entry.first.Scalar()] = entry.second;
      }
    }
    for (auto& [name, node] : own) {
      const auto [found, fresh] = top_.emplace(name, node);
      if (!fresh) {
        underneath_[name].push_back(found->second);
        found->second = node;
      }
    }
  }
}

bool CiConfigModel::HasJob(std::string_view name) const {
  const auto found = top_.find(std::string(name));
  return found != top_.end() && found->second.IsMap();
}

std::optional<CiValue> CiConfigModel::Top(std::string_view name) const {
  const auto found = top_.find(std::string(name));
  if (found == top_.end()) return std::nullopt;
  const auto below = underneath_.find(found->first);
  if (below == underneath_.end()) return ToCiValue(found->second);
  // Defined in several files: each later one deep-merged over the earlier.
  CiValue merged = ToCiValue(below->second.front());
  for (size_t i = 1; i < below->second.size(); ++i) {
    DeepMerge(&merged, ToCiValue(below->second[i]));
  }
  DeepMerge(&merged, ToCiValue(found->second));
  return merged;
}

absl::StatusOr<CiValue> CiConfigModel::Extended(std::string_view job, int depth,
                                                std::string* unknown) const {
  const ExtendedMemo& memo = ExtendedOnce(job, nullptr);
  if (memo.status.ok() && depth + memo.height > kMaxExtendsDepth) {
    return TooDeep(job);
  }
  if (!memo.status.ok()) return memo.status;
  if (unknown->empty()) *unknown = memo.unknown;
  return memo.value;
}

bool CiConfigModel::ExtendsTooDeep(std::string_view job) const {
  return Height(job) > kMaxExtendsDepth;
}

int CiConfigModel::Height(std::string_view start) const {
  if (const auto known = heights_.find(std::string(start));
      known != heights_.end()) {
    return known->second < 0 ? kTooDeep : known->second;
  }
  // A depth-first walk with its own stack; -1 marks a job on the current
  // path, so meeting one again is a loop.
  struct Frame {
    std::string job;
    std::vector<std::string> parents;
    size_t next = 0;
    int height = 0;
  };
  std::vector<Frame> stack;
  const auto push = [&](const std::string& job) {
    heights_[job] = -1;
    Frame frame{job, {}, 0, 0};
    if (const std::optional<CiValue> own = Top(job);
        own.has_value() && own->is_object()) {
      frame.parents = ExtendsList(*own);
    }
    stack.push_back(std::move(frame));
  };
  const auto raise = [](Frame* frame, int parent_height) {
    frame->height =
        std::min(kTooDeep, std::max(frame->height, parent_height + 1));
  };
  push(std::string(start));
  while (!stack.empty()) {
    Frame& frame = stack.back();
    if (frame.height < kTooDeep && frame.next < frame.parents.size()) {
      const std::string parent = frame.parents[frame.next++];
      if (const auto known = heights_.find(parent); known != heights_.end()) {
        raise(&frame, known->second < 0 ? kTooDeep : known->second);
      } else if (HasJob(parent)) {
        push(parent);  // `frame` is not used again before it is read anew.
      }
      continue;
    }
    const int height = frame.height;
    heights_[frame.job] = height;
    stack.pop_back();
    if (!stack.empty()) raise(&stack.back(), height);
  }
  const int height = heights_[std::string(start)];
  return height < 0 ? kTooDeep : height;
}

// Each job's extends chain is merged once, however many jobs extend it: a
// lattice of templates costs its size, not its number of paths.
const CiConfigModel::ExtendedMemo& CiConfigModel::ExtendedOnce(
    std::string_view job, const std::vector<std::string>* only_keys) const {
  // unordered_map keeps references to its elements valid as it grows (and
  // std::map its values).
  ExtendedMemo& memo =
      (only_keys == nullptr ? extended_
                            : filtered_[*only_keys])[std::string(job)];
  if (memo.state == ExtendedMemo::kDone) return memo;
  if (memo.state == ExtendedMemo::kInProgress) {
    // A loop: every job on it fails, as a chain too long would.
    memo.state = ExtendedMemo::kDone;
    memo.status = TooDeep(job);
    return memo;
  }
  if (Height(job) > kMaxExtendsDepth) {
    // Refused before merging: a chain thousands of levels long would
    // otherwise be walked by recursion to its end first.
    memo.state = ExtendedMemo::kDone;
    memo.status = TooDeep(job);
    return memo;
  }
  memo.state = ExtendedMemo::kInProgress;
  const std::optional<CiValue> found = Top(job);
  if (!found.has_value() || !found->is_object()) {
    memo.state = ExtendedMemo::kDone;
    memo.status = absl::NotFoundError(
        absl::StrCat("no job '", std::string(job), "' in this file"));
    return memo;
  }
  const CiValue& own = *found;
  CiValue result = CiValue::object();
  int height = 0;
  absl::Status status;
  std::string unknown;
  {
    for (const std::string& parent : ExtendsList(own)) {
      const ExtendedMemo& base = ExtendedOnce(parent, only_keys);
      if (absl::IsNotFound(base.status)) {
        if (unknown.empty()) {
          unknown = absl::StrCat("it extends '", parent,
                                 "', which is not in this file");
        }
        continue;
      }
      if (!base.status.ok()) {
        status = base.status;
        break;
      }
      if (unknown.empty()) unknown = base.unknown;
      height = std::max(height, base.height + 1);
      if (height > kMaxExtendsDepth) {
        status = TooDeep(job);
        break;
      }
      DeepMerge(&result, base.value);
    }
  }
  // The loop check above may have finished this entry meanwhile.
  if (memo.state == ExtendedMemo::kDone && !memo.status.ok()) return memo;
  memo.state = ExtendedMemo::kDone;
  if (!status.ok()) {
    memo.status = status;
    return memo;
  }
  if (only_keys == nullptr) {
    DeepMerge(&result, own);
  } else {
    CiValue wanted = CiValue::object();
    for (const auto& [key, value] : own.items()) {
      const std::optional<std::string> part =
          key == "inherit" ? "" : WantedPart(*only_keys, key);
      if (!part.has_value()) continue;
      if (part->empty() || !value.is_object()) {
        wanted[key] = value;
        continue;
      }
      CiValue entries = CiValue::object();
      for (const auto& [name, entry] : value.items()) {
        if (name.rfind(*part, 0) == 0) entries[name] = entry;
      }
      wanted[key] = std::move(entries);
    }
    DeepMerge(&result, wanted);
  }
  memo.value = std::move(result);
  memo.height = height;
  memo.unknown = std::move(unknown);
  return memo;
}

absl::StatusOr<CiValue> CiConfigModel::FromParents(
    std::string_view job, const std::vector<std::string>& only_keys) const {
  const std::optional<CiValue> own = Top(job);
  if (!own.has_value() || !own->is_object()) {
    return absl::NotFoundError(
        absl::StrCat("no job '", std::string(job), "' in this file"));
  }
  CiValue result = CiValue::object();
  for (const std::string& parent : ExtendsList(*own)) {
    const ExtendedMemo& base =
        ExtendedOnce(parent, only_keys.empty() ? nullptr : &only_keys);
    if (absl::IsNotFound(base.status)) continue;
    if (!base.status.ok()) return base.status;
    DeepMerge(&result, base.value);
  }
  return result;
}

absl::StatusOr<CiConfigModel::Effective> CiConfigModel::Resolve(
    std::string_view job, const std::vector<std::string>& only_keys) const {
  Effective effective;
  const ExtendedMemo& memo =
      ExtendedOnce(job, only_keys.empty() ? nullptr : &only_keys);
  if (memo.status.ok() && memo.height > kMaxExtendsDepth) {
    return TooDeep(job);
  }
  if (!memo.status.ok()) return memo.status;
  effective.unknown = memo.unknown;
  effective.config = memo.value;
  CiValue& c = effective.config;

  // default: every key the job lacks, as `inherit: default:` allows.
  bool inherit_all = true;
  std::vector<std::string> inherit_keys;
  if (const auto inherit = c.find("inherit");
      inherit != c.end() && inherit->is_object()) {
    if (const auto d = inherit->find("default"); d != inherit->end()) {
      if (d->is_boolean()) inherit_all = d->get<bool>();
      if (d->is_array()) {
        inherit_all = false;
        for (const CiValue& key : *d) {
          if (key.is_string()) inherit_keys.push_back(key.get<std::string>());
        }
      }
    }
  }
  const bool inherits_some = inherit_all || !inherit_keys.empty();
  if (!default_.has_value()) default_ = Top("default");
  if (default_->has_value() && (*default_)->is_object()) {
    for (const auto& [key, value] : (*default_)->items()) {
      const bool allowed =
          inherit_all || std::find(inherit_keys.begin(), inherit_keys.end(),
                                   key) != inherit_keys.end();
      // A key written with no value (`tags:`) is unspecified for GitLab,
      // which then takes default's.
      if (allowed && Wanted(only_keys, key) &&
          (!c.contains(key) || c[key].is_null())) {
        c[key] = value;
      }
    }
  }
  // An unread include may add default: entries, and one that merges over
  // a file read may also add entries to that file's templates (GitLab
  // deep-merges templates of the same name), whatever `inherit:` says.
  const bool extends_some = memo.height > 0;
  if (has_include_ && effective.unknown.empty() &&
      (inherits_some || (unseen_over_seen_ && extends_some))) {
    const auto named = [](const std::vector<std::string>& names) {
      std::string out;
      for (size_t i = 0; i < names.size() && i < 3; ++i) {
        absl::StrAppend(&out, i == 0 ? "" : ", ", names[i]);
      }
      if (names.size() > 3)
        absl::StrAppend(&out, " and ", names.size() - 3, " more");
      return out;
    };
    if (unseen_names_.empty()) {
      effective.unknown =
          "the file includes other files, whose default: gdt cannot read";
    } else if (unseen_over_seen_ && extends_some) {
      effective.unknown = absl::StrCat(
          "the file includes ", named(unseen_over_seen_names_),
          ", which gdt does not read and which GitLab merges over the files "
          "gdt read: its default: or a template of the same name as one the "
          "job extends may add entries");
      effective.inherit_default_suffices = false;
    } else {
      effective.unknown =
          absl::StrCat("the file includes ", named(unseen_names_),
                       ", which gdt does not read and whose default: may add "
                       "entries");
    }
    effective.unknown_default_only = !unseen_over_seen_;
    effective.unknown_all = inherit_all || (unseen_over_seen_ && extends_some);
    effective.unknown_keys = inherit_keys;
  }

  // !reference, wherever it is, in lists spliced.
  std::unique_ptr<absl::Status> failure;
  uint64_t values = 0;  // Reached through references.
  // `hops`: references followed to reach `value`.
  std::function<void(CiValue*, int, int)> resolve = [&](CiValue* value,
                                                        int depth, int hops) {
    if (failure != nullptr) return;
    if (depth > kMaxValueDepth) return;
    if (hops > 0 &&
        (!reference_bomb_.empty() || ++values > kMaxReferenceValues)) {
      if (reference_bomb_.empty()) reference_bomb_ = std::string(job);
      failure = std::make_unique<absl::Status>(absl::InvalidArgumentError(
          absl::StrCat("!reference values stand for more than ",
                       kMaxReferenceValues, " values")));
      return;
    }
    if (IsReference(*value)) {
      if (hops >= kMaxReferenceDepth) {
        failure = std::make_unique<absl::Status>(
            absl::InvalidArgumentError(absl::StrCat(
                "!reference nests more than ", kMaxReferenceDepth,
                " levels (or loops) at ", (*value)[kReference].dump())));
        return;
      }
      const CiValue& path = (*value)[kReference];
      if (!path.is_array() || path.empty() || !path[0].is_string()) {
        failure = std::make_unique<absl::Status>(
            absl::InvalidArgumentError("!reference needs [job, key, ...]"));
        return;
      }
      std::string ignored;
      absl::StatusOr<CiValue> target =
          Extended(path[0].get<std::string>(), 0, &ignored);
      if (!target.ok()) {
        failure = std::make_unique<absl::Status>(
            absl::InvalidArgumentError(absl::StrCat(
                "!reference ", path.dump(), ": ", target.status().message())));
        return;
      }
      CiValue at = *std::move(target);
      for (size_t i = 1; i < path.size(); ++i) {
        if (!path[i].is_string() || !at.is_object() ||
            !at.contains(path[i].get<std::string>())) {
          failure = std::make_unique<absl::Status>(absl::InvalidArgumentError(
              absl::StrCat("!reference ", path.dump(), " does not resolve")));
          return;
        }
        at = CiValue(at[path[i].get<std::string>()]);
      }
      *value = std::move(at);
      resolve(value, depth, hops + 1);
      return;
    }
    if (value->is_object()) {
      for (auto& [key, child] : value->items()) {
        resolve(&child, depth + 1, hops);
      }
    } else if (value->is_array()) {
      CiValue spliced = CiValue::array();
      for (CiValue& item : *value) {
        const bool was_reference = IsReference(item);
        resolve(&item, depth + 1, hops);
        if (was_reference && item.is_array()) {
          for (const CiValue& inner : item) spliced.push_back(inner);
        } else {
          spliced.push_back(item);
        }
      }
      *value = std::move(spliced);
    }
  };
  for (auto& [key, value] : c.items()) {
    failure.reset();
    CiValue resolved = value;
    resolve(&resolved, 1, 0);
    if (failure == nullptr) {
      value = std::move(resolved);
    } else {
      effective.unresolved[key] = std::string(failure->message());
    }
  }
  return effective;
}

absl::StatusOr<CiConfigModel::Effective> EffectiveJobConfig(
    std::string_view text, std::string_view job) {
  YamlError error;
  const std::unique_ptr<YamlTree> tree = YamlTree::Parse(text, &error);
  if (!error.message.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("YAML syntax error: ", error.message));
  }
  return CiConfigModel(tree->documents()).Resolve(job);
}

bool CiScalarText(const CiValue& value, std::string* out) {
  if (value.is_string()) {
    *out = value.get<std::string>();
  } else if (value.is_boolean()) {
    *out = value.get<bool>() ? "true" : "false";
  } else if (value.is_number()) {
    *out = value.dump();
  } else {
    return false;
  }
  return true;
}

}  // namespace gdt::ci
