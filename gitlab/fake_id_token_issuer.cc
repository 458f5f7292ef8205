#include "gitlab/fake_id_token_issuer.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace gdt::gitlab {
namespace {

std::string SigningInput(absl::string_view header_json,
                         absl::string_view payload_json) {
  return absl::StrCat(absl::WebSafeBase64Escape(header_json), ".",
                      absl::WebSafeBase64Escape(payload_json));
}

}  // namespace

absl::StatusOr<FakeIdTokenIssuer> FakeIdTokenIssuer::Create(std::string kid,
                                                            int bits) {
  absl::StatusOr<IdTokenSigner> signer =
      IdTokenSigner::Generate(std::move(kid), bits);
  if (!signer.ok()) return signer.status();
  return FakeIdTokenIssuer(*std::move(signer));
}

std::string FakeIdTokenIssuer::ClaimsJson(const FakeIdToken& token) {
  IdTokenGrant grant;
  grant.issuer = token.issuer;
  grant.audiences = {token.audience};
  grant.project_id = token.project_id;
  grant.pipeline_id = token.pipeline_id;
  grant.job_id = token.job_id;
  grant.ref = token.ref;
  grant.issued_at = token.issued_at;
  grant.expires_at = token.expires_at;
  return IdTokenClaimsJson(grant);
}

std::string FakeIdTokenIssuer::SignHs256(absl::string_view header_json,
                                         absl::string_view payload_json,
                                         absl::string_view secret) {
  const std::string input = SigningInput(header_json, payload_json);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(input.data()), input.size(), mac,
       &size);
  return absl::StrCat(input, ".",
                      absl::WebSafeBase64Escape(absl::string_view(
                          reinterpret_cast<const char*>(mac), size)));
}

std::string FakeIdTokenIssuer::Unsigned(absl::string_view header_json,
                                        absl::string_view payload_json) {
  return absl::StrCat(SigningInput(header_json, payload_json), ".");
}

}  // namespace gdt::gitlab
