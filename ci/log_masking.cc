#include "ci/log_masking.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"

namespace gdt::ci {
namespace {

constexpr std::string_view kMask = "[MASKED]";

// GitLab's token prefixes as the runner knows them; glpat- is masked
// always, the others with FF_MASK_ALL_DEFAULT_TOKENS.
constexpr std::string_view kPersonalTokenPrefix = "glpat-";
constexpr std::array<std::string_view, 13> kOtherTokenPrefixes = {
    "gloas-", "gldt-",  "glrt-",    "glcbt-",  "glrtr-",  "glptt-",
    "glft-",  "glimt-", "glagent-", "glsoat-", "glffct-", "_gitlab_session=",
    "gltok-"};

// URL parameters whose value is a credential (compared in lower case).
constexpr std::array<std::string_view, 6> kCredentialParameters = {
    "private_token",   "authenticity_token", "rss_token",
    "x-amz-signature", "x-amz-credential",   "x-amz-security-token"};

bool IsTokenCharacter(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' ||
         c == '.' || c == '_' || c == '=';
}

bool EndsParameter(char c) {
  const auto u = static_cast<unsigned char>(c);
  return c == '?' || c == '&' || std::isspace(u) != 0 || std::iscntrl(u) != 0;
}

void SortLongestFirst(std::vector<std::string>* texts) {
  std::sort(texts->begin(), texts->end(),
            [](const std::string& a, const std::string& b) {
              return a.size() != b.size() ? a.size() > b.size() : a < b;
            });
  texts->erase(std::unique(texts->begin(), texts->end()), texts->end());
}

// A line being masked for values: plain text and masks, in order. A later
// value is looked for in the plain pieces only, as the runner's writers pass
// a mask that an earlier one wrote through untouched. (The URL and token
// steps need no such care: no parameter name and no token prefix matches
// in or across "[MASKED]".)
struct Piece {
  std::string text;
  bool masked = false;
};
using Pieces = std::vector<Piece>;

// Each occurrence of `phrase` in the plain pieces, left to right, not
// overlapping.
Pieces MaskPhrase(const Pieces& pieces, std::string_view phrase) {
  Pieces out;
  for (const Piece& piece : pieces) {
    if (piece.masked) {
      out.push_back(piece);
      continue;
    }
    const std::string_view text = piece.text;
    size_t from = 0;
    for (size_t at = text.find(phrase); at != std::string_view::npos;
         at = text.find(phrase, from)) {
      if (at > from) out.push_back({std::string(text.substr(from, at - from))});
      out.push_back({std::string(kMask), true});
      from = at + phrase.size();
    }
    if (from < text.size()) out.push_back({std::string(text.substr(from))});
  }
  return out;
}

// `?KEY=VALUE` or `&KEY=VALUE` with a KEY of kCredentialParameters (in any
// case): VALUE, up to the character that ends a parameter, even when empty.
std::string MaskCredentialParameters(std::string_view text) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i++];
    out.push_back(c);
    if (c != '?' && c != '&') continue;
    const size_t eq = text.find_first_of("=?&", i);
    if (eq == std::string_view::npos || text[eq] != '=') continue;
    const std::string key =
        absl::AsciiStrToLower(std::string(text.substr(i, eq - i)));
    if (std::find(kCredentialParameters.begin(), kCredentialParameters.end(),
                  key) == kCredentialParameters.end()) {
      continue;
    }
    out.append(text.substr(i, eq + 1 - i));
    out.append(kMask);
    i = eq + 1;
    while (i < text.size() && !EndsParameter(text[i])) ++i;
  }
  return out;
}

// `prefix` followed by at least one token character: the prefix stays, the
// token characters after it are masked.
std::string MaskTokens(std::string_view text, std::string_view prefix) {
  std::string out;
  size_t from = 0;  // text[from, ...) is not in `out` yet.
  size_t at = text.find(prefix);
  while (at != std::string_view::npos) {
    const size_t value = at + prefix.size();
    size_t end = value;
    while (end < text.size() && IsTokenCharacter(text[end])) ++end;
    if (end > value) {
      out.append(text.substr(from, value - from));
      out.append(kMask);
      from = end;
    }
    at = text.find(prefix, end);
  }
  out.append(text.substr(from));
  return out;
}

}  // namespace

LogMasker::LogMasker(std::vector<std::string> phrases,
                     bool all_token_prefixes) {
  for (std::string& phrase : phrases) {
    std::string trimmed(absl::StripAsciiWhitespace(phrase));
    if (!trimmed.empty()) phrases_.push_back(std::move(trimmed));
  }
  SortLongestFirst(&phrases_);
  token_prefixes_.emplace_back(kPersonalTokenPrefix);
  if (all_token_prefixes) {
    token_prefixes_.insert(token_prefixes_.end(), kOtherTokenPrefixes.begin(),
                           kOtherTokenPrefixes.end());
  }
  SortLongestFirst(&token_prefixes_);
}

std::string LogMasker::Mask(std::string_view line) const {
  Pieces pieces = {{std::string(line)}};
  for (const std::string& phrase : phrases_) {
    pieces = MaskPhrase(pieces, phrase);
  }
  std::string text;
  for (const Piece& piece : pieces) text += piece.text;
  text = MaskCredentialParameters(text);
  for (const std::string& prefix : token_prefixes_) {
    text = MaskTokens(text, prefix);
  }
  return text;
}

}  // namespace gdt::ci
