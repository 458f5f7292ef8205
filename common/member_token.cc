#include "common/member_token.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/secret.h"
#include "common/sha256.h"

namespace gdt {
namespace {

constexpr char kPrefix[] = "gdt-mt2";

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// Lowercase hex back to bytes; false for anything else.
bool HexDecode(std::string_view hex, std::string* bytes) {
  if (hex.size() % 2 != 0) return false;
  bytes->clear();
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int high = HexDigit(hex[i]);
    const int low = HexDigit(hex[i + 1]);
    if (high < 0 || low < 0) return false;
    bytes->push_back(static_cast<char>(high * 16 + low));
  }
  return true;
}

// The signed text: one field a line, so no field can run into another.
std::string ClaimsText(const MemberClaims& claims) {
  return absl::StrCat(claims.gang_id, "\n", claims.epoch, "\n", claims.job_id,
                      "\n", claims.host_name, "\n", claims.expires_unix_ms);
}

absl::Status Malformed() {
  return absl::InvalidArgumentError(
      "member token is malformed (not one a gdt coordinator issued)");
}

}  // namespace

std::string MemberClaims::member_id() const {
  return absl::StrCat(gang_id, "/", job_id);
}

std::string MintMemberToken(std::string_view key, const MemberClaims& claims) {
  const std::string text = ClaimsText(claims);
  return absl::StrCat(kPrefix, ".", HexEncode(text), ".",
                      HmacSha256Hex(key, absl::StrCat(kPrefix, "\n", text)));
}

absl::StatusOr<MemberClaims> VerifyMemberToken(std::string_view key,
                                               std::string_view token) {
  const std::vector<std::string> parts =
      absl::StrSplit(absl::string_view(token.data(), token.size()), '.');
  std::string text;
  if (parts.size() != 3 || parts[0] != kPrefix || !HexDecode(parts[1], &text)) {
    return Malformed();
  }
  if (!SameSecret(HmacSha256Hex(key, absl::StrCat(kPrefix, "\n", text)),
                  parts[2])) {
    return absl::PermissionDeniedError(
        "member token was not issued by this coordinator (forged or altered)");
  }
  const std::vector<std::string> fields = absl::StrSplit(text, '\n');
  MemberClaims claims;
  if (fields.size() != 5 || !absl::SimpleAtoi(fields[1], &claims.epoch) ||
      !absl::SimpleAtoi(fields[2], &claims.job_id) ||
      !absl::SimpleAtoi(fields[4], &claims.expires_unix_ms)) {
    return Malformed();
  }
  claims.gang_id = fields[0];
  claims.host_name = fields[3];
  return claims;
}

}  // namespace gdt
