#ifndef GDT_GITLAB_FAKE_ID_TOKEN_ISSUER_H_
#define GDT_GITLAB_FAKE_ID_TOKEN_ISSUER_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gitlab/id_token.h"

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

// GitLab's side of ID tokens for tests: good tokens from an RSA key of its
// own (IdTokenSigner), the matching JWKS, and the bad tokens an attacker
// would try (unsigned, HMAC-keyed with the public key). Copies share the
// key.
class FakeIdTokenIssuer {
 public:
  // A fresh RSA key of `bits` bits named `kid`.
  static absl::StatusOr<FakeIdTokenIssuer> Create(std::string kid,
                                                  int bits = 2048);

  const std::string& kid() const { return signer_.kid(); }
  std::string Jwks() const { return signer_.Jwks(); }
  // The public key as PEM (what a key-confusion attack would use as an
  // HMAC secret).
  std::string PublicKeyPem() const { return signer_.PublicKeyPem(); }
  std::string PrivateKeyPem() const { return signer_.PrivateKeyPem(); }

  // GitLab's claims of `token` as a JSON object.
  static std::string ClaimsJson(const FakeIdToken& token);
  // A signed token for `token`.
  std::string Issue(const FakeIdToken& token) const {
    return signer_.SignRs256(signer_.Header(), ClaimsJson(token));
  }
  // base64url(header).base64url(payload).base64url(RS256 signature).
  std::string SignRs256(absl::string_view header_json,
                        absl::string_view payload_json) const {
    return signer_.SignRs256(header_json, payload_json);
  }
  // The same with an HMAC-SHA256 signature keyed with `secret`.
  static std::string SignHs256(absl::string_view header_json,
                               absl::string_view payload_json,
                               absl::string_view secret);
  // base64url(header).base64url(payload). (no signature, as with alg none).
  static std::string Unsigned(absl::string_view header_json,
                              absl::string_view payload_json);

 private:
  explicit FakeIdTokenIssuer(IdTokenSigner signer)
      : signer_(std::move(signer)) {}

  IdTokenSigner signer_;
};

}  // namespace gdt::gitlab

#endif  // GDT_GITLAB_FAKE_ID_TOKEN_ISSUER_H_
