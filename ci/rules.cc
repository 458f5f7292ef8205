#include "ci/rules.h"

#include <algorithm>
#include <cctype>
#include <memory>
#include <set>

#include "absl/strings/str_cat.h"
#include "re2/re2.h"

namespace gdt::ci {
namespace {

constexpr size_t kMaxTokens = 100;

// A value an expression computes with.
struct Value {
  enum class Kind { kNull, kBool, kString, kRegex };
  Kind kind = Kind::kNull;
  bool boolean = false;
  std::string text;                  // kString; kRegex: its source.
  std::shared_ptr<const RE2> regex;  // kRegex.

  static Value String(std::string s) {
    Value v;
    v.kind = Kind::kString;
    v.text = std::move(s);
    return v;
  }
  static Value Bool(bool b) {
    Value v;
    v.kind = Kind::kBool;
    v.boolean = b;
    return v;
  }
};

// Ruby's truthiness, which `&&` and `||` use: only null and false are false.
bool Truthy(const Value& v) {
  return v.kind != Value::Kind::kNull &&
         !(v.kind == Value::Kind::kBool && !v.boolean);
}

// ActiveSupport's present?, which decides the whole expression and `!`.
bool Present(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kNull:
      return false;
    case Value::Kind::kBool:
      return v.boolean;
    case Value::Kind::kString:
      for (char c : v.text) {
        if (!std::isspace(static_cast<unsigned char>(c))) return true;
      }
      return false;
    case Value::Kind::kRegex:
      return true;
  }
  return false;
}

// Ruby's to_s of a value, the text `=~` matches.
std::string Text(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kNull:
      return "";
    case Value::Kind::kBool:
      return v.boolean ? "true" : "false";
    case Value::Kind::kString:
      return v.text;
    case Value::Kind::kRegex:
      return absl::StrCat("/", v.text, "/");
  }
  return "";
}

// "/body/flags" (the flags i, m, s and U) as an RE2, or nullptr when the
// text is no such pattern or RE2 refuses it. `*error` says which.
std::shared_ptr<const RE2> CompilePattern(std::string_view text,
                                          std::string* error) {
  static const RE2 kShape(R"(/((?:[^/]|\\/)+[^\\])/([ismU]*))");
  std::string body;
  std::string flags;
  if (!RE2::FullMatch(text, kShape, &body, &flags)) {
    *error = "not a /pattern/";
    return nullptr;
  }
  std::string unescaped;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] == '\\' && i + 1 < body.size() && body[i + 1] == '/') continue;
    unescaped.push_back(body[i]);
  }
  RE2::Options options;
  options.set_log_errors(false);
  auto regex = std::make_shared<const RE2>(
      flags.empty() ? unescaped : absl::StrCat("(?", flags, ")", unescaped),
      options);
  if (!regex->ok()) {
    *error = regex->error();
    return nullptr;
  }
  return regex;
}

enum class Tok {
  kOpen,
  kClose,
  kVariable,
  kString,
  kPattern,
  kNull,
  kTrue,
  kFalse,
  kEquals,
  kNotEquals,
  kMatches,
  kNotMatches,
  kAnd,
  kOr,
  kNot,
};

struct Token {
  Tok type;
  std::string text;  // kVariable: the name; kString: the contents.
  std::shared_ptr<const RE2> regex;  // kPattern.
};

bool IsValue(Tok t) {
  return t == Tok::kVariable || t == Tok::kString || t == Tok::kPattern ||
         t == Tok::kNull || t == Tok::kTrue || t == Tok::kFalse;
}

bool IsOperator(Tok t) {
  return !IsValue(t) && t != Tok::kOpen && t != Tok::kClose;
}

// Lower binds tighter, as in GitLab (Ruby's operator precedence table).
int Precedence(Tok t) {
  switch (t) {
    case Tok::kNot:
      return 1;
    case Tok::kEquals:
    case Tok::kNotEquals:
    case Tok::kMatches:
    case Tok::kNotMatches:
      return 10;
    case Tok::kAnd:
      return 11;
    case Tok::kOr:
      return 12;
    default:
      return 100;
  }
}

absl::StatusOr<std::vector<Token>> Lex(std::string_view input) {
  std::vector<Token> tokens;
  size_t i = 0;
  const auto starts = [&](std::string_view s) {
    return input.substr(i, s.size()) == s;
  };
  while (true) {
    while (i < input.size() &&
           std::isspace(static_cast<unsigned char>(input[i]))) {
      ++i;
    }
    if (i == input.size()) return tokens;
    if (tokens.size() == kMaxTokens) {
      return absl::InvalidArgumentError(
          absl::StrCat("more than ", kMaxTokens, " tokens"));
    }
    const char c = input[i];
    Token token;
    if (c == '(' || c == ')') {
      token.type = c == '(' ? Tok::kOpen : Tok::kClose;
      ++i;
    } else if (c == '$' && i + 1 < input.size() &&
               (std::isalnum(static_cast<unsigned char>(input[i + 1])) ||
                input[i + 1] == '_')) {
      size_t end = i + 1;
      while (end < input.size() &&
             (std::isalnum(static_cast<unsigned char>(input[end])) ||
              input[end] == '_')) {
        ++end;
      }
      token.type = Tok::kVariable;
      token.text = std::string(input.substr(i + 1, end - i - 1));
      i = end;
    } else if (c == '"' || c == '\'') {
      const size_t end = input.find(c, i + 1);
      if (end == std::string_view::npos) {
        return absl::InvalidArgumentError(absl::StrCat(
            "unterminated string at '", std::string(input.substr(i, 20)), "'"));
      }
      token.type = Tok::kString;
      token.text = std::string(input.substr(i + 1, end - i - 1));
      i = end + 1;
    } else if (c == '/') {
      // The pattern ends at the first '/' that no backslash escapes, and
      // its body has at least two characters, as GitLab's lexer reads it.
      static const RE2 kPattern(R"((/(?:[^/]|\\/)+[^\\]/[ismU]*))");
      re2::StringPiece rest(input.data() + i, input.size() - i);
      std::string matched;
      if (!RE2::Consume(&rest, kPattern, &matched)) {
        return absl::InvalidArgumentError(
            absl::StrCat("unterminated regular expression at '",
                         std::string(input.substr(i, 20)), "'"));
      }
      std::string error;
      token.regex = CompilePattern(matched, &error);
      if (token.regex == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("invalid regular expression ", matched, ": ", error));
      }
      token.type = Tok::kPattern;
      token.text = matched;
      i += matched.size();
    } else if (starts("null")) {
      token.type = Tok::kNull;
      i += 4;
    } else if (starts("true")) {
      token.type = Tok::kTrue;
      i += 4;
    } else if (starts("false")) {
      token.type = Tok::kFalse;
      i += 5;
    } else if (starts("==")) {
      token.type = Tok::kEquals;
      i += 2;
    } else if (starts("=~")) {
      token.type = Tok::kMatches;
      i += 2;
    } else if (starts("!=")) {
      token.type = Tok::kNotEquals;
      i += 2;
    } else if (starts("!~")) {
      token.type = Tok::kNotMatches;
      i += 2;
    } else if (starts("&&")) {
      token.type = Tok::kAnd;
      i += 2;
    } else if (starts("||")) {
      token.type = Tok::kOr;
      i += 2;
    } else if (c == '!') {
      token.type = Tok::kNot;
      ++i;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown token at '", std::string(input.substr(i, 20)), "'"));
    }
    tokens.push_back(std::move(token));
  }
}

struct Node {
  Token token;
  std::unique_ptr<Node> left;   // Binary operators.
  std::unique_ptr<Node> right;  // Binary operators; `!`'s operand.
};

// Shunting-yard into a tree, as GitLab parses (operators of equal
// precedence group to the left; `!` to the right).
absl::StatusOr<std::unique_ptr<Node>> Parse(std::vector<Token> tokens) {
  if (tokens.empty()) return absl::InvalidArgumentError("empty expression");
  std::vector<std::unique_ptr<Node>> operands;
  std::vector<Token> operators;
  const auto bad = [] {
    return absl::InvalidArgumentError("an operator lacks an operand");
  };
  const auto reduce = [&]() -> absl::Status {
    Token op = std::move(operators.back());
    operators.pop_back();
    auto node = std::make_unique<Node>();
    const bool unary = op.type == Tok::kNot;
    node->token = std::move(op);
    if (operands.size() < (unary ? 1u : 2u)) return bad();
    node->right = std::move(operands.back());
    operands.pop_back();
    if (!unary) {
      node->left = std::move(operands.back());
      operands.pop_back();
    }
    operands.push_back(std::move(node));
    return absl::OkStatus();
  };
  for (Token& token : tokens) {
    if (IsValue(token.type)) {
      auto leaf = std::make_unique<Node>();
      leaf->token = std::move(token);
      operands.push_back(std::move(leaf));
    } else if (token.type == Tok::kOpen) {
      operators.push_back(std::move(token));
    } else if (token.type == Tok::kClose) {
      while (!operators.empty() && IsOperator(operators.back().type)) {
        if (absl::Status s = reduce(); !s.ok()) return s;
      }
      if (operators.empty()) {
        return absl::InvalidArgumentError("unmatched parenthesis");
      }
      operators.pop_back();
    } else {
      while (token.type != Tok::kNot && !operators.empty() &&
             IsOperator(operators.back().type) &&
             Precedence(token.type) >= Precedence(operators.back().type)) {
        if (absl::Status s = reduce(); !s.ok()) return s;
      }
      operators.push_back(std::move(token));
    }
  }
  while (!operators.empty()) {
    if (operators.back().type == Tok::kOpen) {
      return absl::InvalidArgumentError("unmatched parenthesis");
    }
    if (absl::Status s = reduce(); !s.ok()) return s;
  }
  if (operands.size() != 1) {
    return absl::InvalidArgumentError("values without an operator between");
  }
  return std::move(operands.back());
}

bool Matches(const Value& text, const Value& pattern) {
  switch (pattern.kind) {
    case Value::Kind::kRegex:
      return RE2::PartialMatch(Text(text), *pattern.regex);
    case Value::Kind::kString: {
      // A variable holding "/regex/" is that regex; holding anything else,
      // GitLab looks for the text within it.
      std::string error;
      if (std::shared_ptr<const RE2> regex =
              CompilePattern(pattern.text, &error)) {
        return RE2::PartialMatch(Text(text), *regex);
      }
      return pattern.text.find(Text(text)) != std::string::npos;
    }
    default:
      return false;
  }
}

bool Equal(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.kind == K::kNull || b.kind == K::kNull) return a.kind == b.kind;
  if (a.kind == K::kRegex || b.kind == K::kRegex) {
    return a.kind == b.kind && a.text == b.text;
  }
  if (a.kind == K::kBool && b.kind == K::kBool) return a.boolean == b.boolean;
  return Text(a) == Text(b);  // A boolean compares as "true" / "false".
}

Value Evaluate(const Node& node, const ExpressionVariables& variables) {
  const Token& t = node.token;
  switch (t.type) {
    case Tok::kVariable: {
      const auto found = variables.find(t.text);
      return found == variables.end() ? Value() : Value::String(found->second);
    }
    case Tok::kString:
      return Value::String(t.text);
    case Tok::kPattern: {
      Value v;
      v.kind = Value::Kind::kRegex;
      v.text = t.text.substr(1, t.text.rfind('/') - 1);
      v.regex = t.regex;
      return v;
    }
    case Tok::kNull:
      return Value();
    case Tok::kTrue:
    case Tok::kFalse:
      return Value::Bool(t.type == Tok::kTrue);
    case Tok::kNot:
      return Value::Bool(!Present(Evaluate(*node.right, variables)));
    case Tok::kAnd: {
      Value left = Evaluate(*node.left, variables);
      return Truthy(left) ? Evaluate(*node.right, variables) : left;
    }
    case Tok::kOr: {
      Value left = Evaluate(*node.left, variables);
      return Truthy(left) ? left : Evaluate(*node.right, variables);
    }
    case Tok::kEquals:
    case Tok::kNotEquals: {
      const bool equal = Equal(Evaluate(*node.left, variables),
                               Evaluate(*node.right, variables));
      return Value::Bool(t.type == Tok::kEquals ? equal : !equal);
    }
    case Tok::kMatches:
    case Tok::kNotMatches: {
      const Value text = Evaluate(*node.left, variables);
      const Value pattern = Evaluate(*node.right, variables);
      if (!Truthy(pattern)) return Value::Bool(t.type == Tok::kNotMatches);
      const bool matches = Matches(text, pattern);
      return Value::Bool(t.type == Tok::kMatches ? matches : !matches);
    }
    default:
      return Value();
  }
}

absl::StatusOr<std::unique_ptr<Node>> Compile(std::string_view expression) {
  absl::StatusOr<std::vector<Token>> tokens = Lex(expression);
  if (!tokens.ok()) return tokens.status();
  return Parse(*std::move(tokens));
}

// Whether the rest `p` of a brace-free pattern matches the rest `s` of a
// path (File.fnmatch with FNM_PATHNAME | FNM_DOTMATCH). `failed` remembers
// the (rest of pattern, rest of path) pairs found not to match, by their
// lengths (`path_size` is the whole path's), so that many stars cost
// polynomial time, not exponential.
bool GlobMatch(std::string_view p, std::string_view s, size_t path_size,
               std::vector<bool>* failed) {
  const size_t key = p.size() * (path_size + 1) + s.size();
  if ((*failed)[key]) return false;
  const auto fail = [&] {
    (*failed)[key] = true;
    return false;
  };
  while (!p.empty()) {
    if (p.substr(0, 3) == "**/") {
      const std::string_view rest = p.substr(3);
      if (GlobMatch(rest, s, path_size, failed)) return true;
      for (size_t slash = s.find('/'); slash != std::string_view::npos;
           slash = s.find('/', slash + 1)) {
        if (GlobMatch(rest, s.substr(slash + 1), path_size, failed)) {
          return true;
        }
      }
      return fail();
    }
    const char c = p[0];
    if (c == '*') {
      size_t stars = 0;
      while (stars < p.size() && p[stars] == '*') ++stars;
      const std::string_view rest = p.substr(stars);
      for (size_t n = 0;; ++n) {
        if (GlobMatch(rest, s.substr(n), path_size, failed)) return true;
        if (n == s.size() || s[n] == '/') return fail();
      }
    }
    if (s.empty()) return fail();
    size_t used = 1;  // Pattern bytes the character takes.
    if (c == '?') {
      if (s[0] == '/') return fail();
    } else if (c == '[') {
      size_t i = 1;
      const bool negate = i < p.size() && (p[i] == '!' || p[i] == '^');
      if (negate) ++i;
      bool found = false;
      bool closed = false;
      for (bool first = true; i < p.size(); first = false) {
        if (p[i] == ']' && !first) {
          closed = true;
          break;
        }
        char lo = p[i];
        if (lo == '\\' && i + 1 < p.size()) lo = p[++i];
        char hi = lo;
        if (i + 2 < p.size() && p[i + 1] == '-' && p[i + 2] != ']') {
          hi = p[i + 2];
          i += 2;
        }
        if (s[0] >= lo && s[0] <= hi) found = true;
        ++i;
      }
      if (!closed) {  // A '[' without ']' is a literal.
        if (s[0] != '[') return fail();
      } else if (s[0] == '/' || found == negate) {
        return fail();
      } else {
        used = i + 1;
      }
    } else if (c == '\\' && p.size() > 1) {
      if (s[0] != p[1]) return fail();
      used = 2;
    } else if (s[0] != c) {
      return fail();
    }
    p.remove_prefix(used);
    s.remove_prefix(1);
  }
  return s.empty() || fail();
}

// `{a,b}` alternatives (nested ones too) expanded into whole patterns; at
// most `budget` of them.
void ExpandBraces(const std::string& pattern, std::vector<std::string>* out,
                  size_t budget) {
  if (out->size() >= budget) return;
  const size_t open = pattern.find('{');
  if (open == std::string::npos) {
    out->push_back(pattern);
    return;
  }
  int depth = 0;
  std::vector<size_t> commas;
  size_t close = std::string::npos;
  for (size_t i = open; i < pattern.size(); ++i) {
    if (pattern[i] == '{') ++depth;
    if (pattern[i] == '}' && --depth == 0) {
      close = i;
      break;
    }
    if (pattern[i] == ',' && depth == 1) commas.push_back(i);
  }
  if (close == std::string::npos) {
    out->push_back(pattern);
    return;
  }
  size_t start = open + 1;
  commas.push_back(close);
  for (size_t end : commas) {
    ExpandBraces(absl::StrCat(pattern.substr(0, open),
                              pattern.substr(start, end - start),
                              pattern.substr(close + 1)),
                 out, budget);
    start = end + 1;
  }
}

absl::Status RuleError(std::string_view where, size_t index,
                       std::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(
      std::string(where), ": rules[", index, "]: ", std::string(message)));
}

absl::Status ReadPatterns(const CiValue& node, std::string_view where,
                          size_t index, std::string_view key,
                          std::vector<std::string>* out) {
  const CiValue* list = &node;
  if (node.is_object()) {
    const auto paths = node.find("paths");
    if (paths == node.end()) {
      return RuleError(where, index,
                       absl::StrCat(std::string(key), " needs paths"));
    }
    list = &*paths;
  }
  if (list->is_string()) {
    out->push_back(list->get<std::string>());
    return absl::OkStatus();
  }
  if (!list->is_array()) {
    return RuleError(
        where, index,
        absl::StrCat(std::string(key), " must be a list of paths"));
  }
  for (const CiValue& entry : *list) {
    if (!entry.is_string()) {
      return RuleError(
          where, index,
          absl::StrCat(std::string(key), " entries must be strings"));
    }
    out->push_back(entry.get<std::string>());
  }
  return absl::OkStatus();
}

// GitLab compares at most this many (glob pattern, file) pairs for one
// `exists:`; past that a glob counts as matched.
constexpr size_t kMaxExistsComparisons = 10000;

bool ExistsHolds(const std::vector<std::string>& patterns,
                 const std::vector<std::string>& files) {
  size_t comparisons = 0;
  for (const std::string& pattern : patterns) {
    if (pattern.find_first_of("*?[{\\") == std::string::npos) {
      if (std::find(files.begin(), files.end(), pattern) != files.end()) {
        return true;
      }
      continue;
    }
    for (const std::string& file : files) {
      if (++comparisons > kMaxExistsComparisons) return true;
      if (ExistsGlobMatches(pattern, file)) return true;
    }
  }
  return false;
}

}  // namespace

absl::Status CheckExpression(std::string_view expression) {
  return Compile(expression).status();
}

bool ExpressionHolds(std::string_view expression,
                     const ExpressionVariables& variables) {
  absl::StatusOr<std::unique_ptr<Node>> tree = Compile(expression);
  return tree.ok() && Present(Evaluate(**tree, variables));
}

bool ExistsGlobMatches(std::string_view pattern, std::string_view path) {
  // Longer ones are no path and no pattern of a real file.
  constexpr size_t kMaxLength = 4096;
  if (pattern.size() > kMaxLength || path.size() > kMaxLength) return false;
  std::vector<std::string> alternatives;
  ExpandBraces(std::string(pattern), &alternatives, 256);
  for (const std::string& alternative : alternatives) {
    std::vector<bool> failed((alternative.size() + 1) * (path.size() + 1));
    if (GlobMatch(alternative, path, path.size(), &failed)) return true;
  }
  return false;
}

absl::StatusOr<std::vector<CiRule>> ReadRules(const CiValue& node,
                                              std::string_view where,
                                              bool job_rules) {
  std::vector<CiRule> rules;
  if (node.is_null()) return rules;
  if (!node.is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(where), ": rules must be a list"));
  }
  static const std::set<std::string, std::less<>> kJobKeys = {
      "if",        "changes", "exists",   "when",         "allow_failure",
      "variables", "needs",   "start_in", "interruptible"};
  static const std::set<std::string, std::less<>> kWorkflowKeys = {
      "if", "changes", "exists", "when", "variables", "auto_cancel"};
  for (size_t i = 0; i < node.size(); ++i) {
    const CiValue& entry = node[i];
    if (!entry.is_object()) {
      return RuleError(where, i, "must be a map (if:, when:, ...)");
    }
    CiRule rule;
    for (const auto& [key, value] : entry.items()) {
      if ((job_rules ? kJobKeys : kWorkflowKeys).count(key) == 0) {
        return RuleError(where, i, absl::StrCat("unknown key '", key, "'"));
      }
      if (key == "if") {
        if (!value.is_string()) {
          return RuleError(where, i, "if must be a string");
        }
        const std::string text = value.get<std::string>();
        if (absl::Status ok = CheckExpression(text); !ok.ok()) {
          return RuleError(where, i,
                           absl::StrCat("if: invalid expression '", text,
                                        "': ", ok.message()));
        }
        rule.if_expression = text;
      } else if (key == "changes") {
        std::vector<std::string> ignored;
        if (absl::Status ok = ReadPatterns(value, where, i, key, &ignored);
            !ok.ok()) {
          return ok;
        }
        rule.has_changes = true;
      } else if (key == "exists") {
        if (absl::Status ok = ReadPatterns(value, where, i, key, &rule.exists);
            !ok.ok()) {
          return ok;
        }
        rule.has_exists = true;
      } else if (key == "when") {
        static const std::set<std::string, std::less<>> kJobWhen = {
            "on_success", "on_failure", "always", "manual", "delayed", "never"};
        std::string when;
        if (!value.is_string() ||
            (job_rules ? kJobWhen.count(value.get<std::string>()) == 0
                       : value != "always" && value != "never")) {
          return RuleError(where, i,
                           job_rules ? "when must be on_success, on_failure, "
                                       "always, manual, delayed or never"
                                     : "when must be always or never");
        }
        rule.when = value.get<std::string>();
      } else if (key == "allow_failure") {
        if (!value.is_boolean()) {
          return RuleError(where, i, "allow_failure must be true or false");
        }
        rule.allow_failure = value.get<bool>();
      } else if (key == "variables") {
        if (!value.is_object()) {
          return RuleError(where, i, "variables must be a map");
        }
        for (const auto& [name, text] : value.items()) {
          std::string scalar;
          if (!CiScalarText(text, &scalar)) {
            return RuleError(
                where, i, absl::StrCat("variable ", name, " must be a string"));
          }
          rule.variables.emplace_back(name, scalar);
        }
      } else if (key == "needs") {
        // One need may be written as a mapping (`needs: {job: x}`).
        if (!value.is_array() && !value.is_object()) {
          return RuleError(where, i, "needs must be a list or one {job: name}");
        }
        const CiValue list =
            value.is_object() ? CiValue::array({value}) : value;
        std::vector<std::string> names;
        for (const CiValue& need : list) {
          std::string name;
          if (CiScalarText(need, &name) ||
              (need.is_object() && need.contains("job") &&
               CiScalarText(need["job"], &name))) {
            names.push_back(name);
          } else {
            return RuleError(where, i,
                             "needs entries must be job names or {job: name}");
          }
        }
        rule.needs = std::move(names);
      }
    }
    rules.push_back(std::move(rule));
  }
  return rules;
}

std::optional<size_t> FirstMatchingRule(const std::vector<CiRule>& rules,
                                        const ExpressionVariables& variables,
                                        const std::vector<std::string>& files) {
  for (size_t i = 0; i < rules.size(); ++i) {
    const CiRule& rule = rules[i];
    if (rule.if_expression.has_value() &&
        !ExpressionHolds(*rule.if_expression, variables)) {
      continue;
    }
    if (rule.has_exists && !ExistsHolds(rule.exists, files)) continue;
    return i;
  }
  return std::nullopt;
}

absl::StatusOr<CiRefPolicy> ReadRefPolicy(const CiValue& node,
                                          std::string_view job,
                                          std::string_view key) {
  const auto bad = [&](std::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("job ", std::string(job),
                                                   ": ", std::string(key), ": ",
                                                   std::string(what)));
  };
  const auto strings = [&](const CiValue& list, std::string_view name,
                           std::vector<std::string>* out) -> absl::Status {
    if (list.is_string()) {
      out->push_back(list.get<std::string>());
      return absl::OkStatus();
    }
    if (!list.is_array()) {
      return bad(absl::StrCat(std::string(name), " must be a list"));
    }
    for (const CiValue& entry : list) {
      std::string text;
      if (!CiScalarText(entry, &text)) {
        return bad(absl::StrCat(std::string(name), " entries must be strings"));
      }
      out->push_back(text);
    }
    return absl::OkStatus();
  };
  CiRefPolicy policy;
  if (!node.is_object()) {
    std::vector<std::string> refs;
    if (absl::Status ok = strings(node, "refs", &refs); !ok.ok()) return ok;
    policy.refs = std::move(refs);
    return policy;
  }
  for (const auto& [name, value] : node.items()) {
    if (name == "refs") {
      std::vector<std::string> refs;
      if (absl::Status ok = strings(value, name, &refs); !ok.ok()) return ok;
      policy.refs = std::move(refs);
    } else if (name == "variables") {
      std::vector<std::string> expressions;
      if (absl::Status ok = strings(value, name, &expressions); !ok.ok()) {
        return ok;
      }
      for (const std::string& expression : expressions) {
        if (absl::Status ok = CheckExpression(expression); !ok.ok()) {
          return bad(absl::StrCat("variables: invalid expression '", expression,
                                  "': ", ok.message()));
        }
      }
      policy.variables = std::move(expressions);
    } else if (name == "changes") {
      policy.has_changes = true;
    } else if (name == "kubernetes") {
      policy.kubernetes = true;
    } else {
      return bad(absl::StrCat("unknown key '", name, "'"));
    }
  }
  return policy;
}

bool RefPolicyMatches(const CiRefPolicy& policy,
                      const ExpressionVariables& variables) {
  const auto get = [&](const char* name) -> std::string {
    const auto found = variables.find(name);
    return found == variables.end() ? "" : found->second;
  };
  if (policy.refs.has_value()) {
    static const absl::flat_hash_map<std::string, std::string> kSources = {
        {"pushes", "push"},
        {"web", "web"},
        {"api", "api"},
        {"schedules", "schedule"},
        {"triggers", "trigger"},
        {"pipelines", "pipeline"},
        {"merge_requests", "merge_request_event"},
        {"chat", "chat"},
        {"external", "external"},
        {"external_pull_requests", "external_pull_request_event"}};
    const std::string source = get("CI_PIPELINE_SOURCE");
    const std::string ref = get("CI_COMMIT_REF_NAME");
    const bool tag = !get("CI_COMMIT_TAG").empty();
    bool any = false;
    for (const std::string& entry : *policy.refs) {
      // `ref@group/project` limits an entry to one project: the local
      // pipeline's project is no fork, so only the ref part counts.
      const std::string pattern = entry.substr(0, entry.find('@'));
      if (pattern == "branches") {
        any = !tag && source != "merge_request_event";
      } else if (pattern == "tags") {
        any = tag;
      } else if (const auto found = kSources.find(pattern);
                 found != kSources.end()) {
        any = source == found->second;
      } else if (std::string error; pattern.size() > 1 && pattern[0] == '/') {
        std::shared_ptr<const RE2> regex = CompilePattern(pattern, &error);
        any = regex != nullptr && RE2::PartialMatch(ref, *regex);
      } else {
        any = pattern == ref;
      }
      if (any) break;
    }
    if (!any) return false;
  }
  if (policy.variables.has_value() &&
      std::none_of(policy.variables->begin(), policy.variables->end(),
                   [&](const std::string& expression) {
                     return ExpressionHolds(expression, variables);
                   })) {
    return false;
  }
  return !policy.kubernetes;
}

}  // namespace gdt::ci
