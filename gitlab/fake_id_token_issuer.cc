#include "gitlab/fake_id_token_issuer.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>

#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace gdt::gitlab {
namespace {

std::string Base64Url(absl::string_view bytes) {
  return absl::WebSafeBase64Escape(bytes);
}

std::string BigNumParam(evp_pkey_st* key, const char* name) {
  BIGNUM* bn = nullptr;
  if (EVP_PKEY_get_bn_param(key, name, &bn) != 1) return "";
  std::string bytes(BN_num_bytes(bn), '\0');
  BN_bn2bin(bn, reinterpret_cast<unsigned char*>(bytes.data()));
  BN_free(bn);
  return Base64Url(bytes);
}

std::string SigningInput(absl::string_view header_json,
                         absl::string_view payload_json) {
  return absl::StrCat(Base64Url(header_json), ".", Base64Url(payload_json));
}

}  // namespace

absl::StatusOr<FakeIdTokenIssuer> FakeIdTokenIssuer::Create(std::string kid,
                                                            int bits) {
  EVP_PKEY* key = EVP_RSA_gen(static_cast<unsigned int>(bits));
  if (key == nullptr) {
    return absl::InternalError("cannot generate an RSA key for ID tokens");
  }
  return FakeIdTokenIssuer(std::move(kid),
                           std::shared_ptr<evp_pkey_st>(key, EVP_PKEY_free));
}

std::string FakeIdTokenIssuer::Jwks() const {
  nlohmann::json key = {{"kty", "RSA"},
                        {"kid", kid_},
                        {"use", "sig"},
                        {"alg", "RS256"},
                        {"n", BigNumParam(key_.get(), OSSL_PKEY_PARAM_RSA_N)},
                        {"e", BigNumParam(key_.get(), OSSL_PKEY_PARAM_RSA_E)}};
  return nlohmann::json{{"keys", nlohmann::json::array({key})}}.dump();
}

std::string FakeIdTokenIssuer::PublicKeyPem() const {
  BIO* bio = BIO_new(BIO_s_mem());
  if (bio == nullptr) return "";
  std::string pem;
  if (PEM_write_bio_PUBKEY(bio, key_.get()) == 1) {
    char* data = nullptr;
    const long size = BIO_get_mem_data(bio, &data);
    pem.assign(data, static_cast<size_t>(size));
  }
  BIO_free(bio);
  return pem;
}

std::string FakeIdTokenIssuer::ClaimsJson(const FakeIdToken& token) {
  // GitLab writes ids as strings.
  return nlohmann::json{
      {"iss", token.issuer},
      {"aud", token.audience},
      {"sub", absl::StrCat("project_path:local/project:ref_type:branch:ref:",
                           token.ref)},
      {"namespace_id", "1"},
      {"namespace_path", "local"},
      {"project_id", std::to_string(token.project_id)},
      {"project_path", "local/project"},
      {"pipeline_id", std::to_string(token.pipeline_id)},
      {"pipeline_source", "push"},
      {"job_id", std::to_string(token.job_id)},
      {"ref", token.ref},
      {"ref_type", "branch"},
      {"ref_protected", "true"},
      {"ci_config_ref_uri",
       absl::StrCat("gitlab.local/local/project//.gitlab-ci.yml@refs/heads/",
                    token.ref)},
      {"jti", absl::StrCat("jti-", token.job_id)},
      {"iat", token.issued_at},
      {"nbf", token.issued_at},
      {"exp", token.expires_at}}
      .dump();
}

std::string FakeIdTokenIssuer::Header() const {
  return nlohmann::json{{"alg", "RS256"}, {"kid", kid_}, {"typ", "JWT"}}.dump();
}

std::string FakeIdTokenIssuer::Issue(const FakeIdToken& token) const {
  return SignRs256(Header(), ClaimsJson(token));
}

std::string FakeIdTokenIssuer::SignRs256(absl::string_view header_json,
                                         absl::string_view payload_json) const {
  const std::string input = SigningInput(header_json, payload_json);
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  size_t size = 0;
  std::vector<unsigned char> signature;
  const auto* data = reinterpret_cast<const unsigned char*>(input.data());
  if (ctx != nullptr &&
      EVP_DigestSignInit(ctx, nullptr, EVP_sha256(), nullptr, key_.get()) ==
          1 &&
      EVP_DigestSign(ctx, nullptr, &size, data, input.size()) == 1) {
    signature.resize(size);
    if (EVP_DigestSign(ctx, signature.data(), &size, data, input.size()) != 1) {
      size = 0;
    }
  }
  EVP_MD_CTX_free(ctx);
  return absl::StrCat(
      input, ".",
      Base64Url(absl::string_view(
          reinterpret_cast<const char*>(signature.data()), size)));
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
  return absl::StrCat(
      input, ".",
      Base64Url(absl::string_view(reinterpret_cast<const char*>(mac), size)));
}

std::string FakeIdTokenIssuer::Unsigned(absl::string_view header_json,
                                        absl::string_view payload_json) {
  return absl::StrCat(SigningInput(header_json, payload_json), ".");
}

}  // namespace gdt::gitlab
