#ifndef GDT_GITLAB_FAKE_ID_TOKEN_ISSUER_H_
#define GDT_GITLAB_FAKE_ID_TOKEN_ISSUER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

struct evp_pkey_st;

namespace gdt::gitlab {

// The claims of a token as GitLab would issue it to one job.
struct FakeIdToken {
  std::string issuer;
  std::string audience;
  int64_t project_id = 1;
  int64_t pipeline_id = 1;
  int64_t job_id = 1;
  std::string ref = "main";
  // Unix seconds.
  int64_t issued_at = 0;
  int64_t expires_at = 0;
};

// Issues ID tokens the way GitLab does (RS256, header with `kid`), from an
// RSA key it generates, and publishes the matching JWKS; for tests and for
// the fake GitLab API. Copies share the key.
class FakeIdTokenIssuer {
 public:
  // A fresh RSA key of `bits` bits named `kid`.
  static absl::StatusOr<FakeIdTokenIssuer> Create(std::string kid,
                                                  int bits = 2048);

  const std::string& kid() const { return kid_; }
  // {"keys":[{"kty":"RSA","kid":...,"use":"sig","alg":"RS256","n":...,"e":...}]}
  std::string Jwks() const;
  // The public key as PEM (what a key-confusion attack would use as an
  // HMAC secret).
  std::string PublicKeyPem() const;

  // GitLab's claims of `token` as a JSON object.
  static std::string ClaimsJson(const FakeIdToken& token);
  // A signed token for `token`.
  std::string Issue(const FakeIdToken& token) const;
  // base64url(header).base64url(payload).base64url(RS256 signature).
  std::string SignRs256(absl::string_view header_json,
                        absl::string_view payload_json) const;
  // The same with an HMAC-SHA256 signature keyed with `secret`.
  static std::string SignHs256(absl::string_view header_json,
                               absl::string_view payload_json,
                               absl::string_view secret);
  // base64url(header).base64url(payload). (no signature, as with alg none).
  static std::string Unsigned(absl::string_view header_json,
                              absl::string_view payload_json);
  // The header this issuer writes: {"alg":"RS256","kid":...,"typ":"JWT"}.
  std::string Header() const;

 private:
  FakeIdTokenIssuer(std::string kid, std::shared_ptr<evp_pkey_st> key)
      : kid_(std::move(kid)), key_(std::move(key)) {}

  std::string kid_;
  std::shared_ptr<evp_pkey_st> key_;
};

}  // namespace gdt::gitlab

#endif  // GDT_GITLAB_FAKE_ID_TOKEN_ISSUER_H_
