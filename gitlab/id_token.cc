#include "gitlab/id_token.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>

#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/sha256.h"
#include "nlohmann/json.hpp"

namespace gdt::gitlab {
namespace {

// GitLab's tokens are about 1 KiB; anything far larger is not one.
constexpr size_t kMaxTokenBytes = 16 << 10;
constexpr int kMinRsaBits = 2048;

struct BnFree {
  void operator()(BIGNUM* bn) const { BN_free(bn); }
};
struct ParamBldFree {
  void operator()(OSSL_PARAM_BLD* bld) const { OSSL_PARAM_BLD_free(bld); }
};
struct ParamFree {
  void operator()(OSSL_PARAM* params) const { OSSL_PARAM_free(params); }
};
struct PkeyCtxFree {
  void operator()(EVP_PKEY_CTX* ctx) const { EVP_PKEY_CTX_free(ctx); }
};
struct MdCtxFree {
  void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
};

absl::Status Refused(absl::string_view why) {
  return absl::UnauthenticatedError(absl::StrCat("ID token refused: ", why));
}

// Base64url without padding (RFC 7515), as JWTs and JWKs use it.
bool DecodeBase64Url(absl::string_view text, std::string& out) {
  if (text.find('=') != absl::string_view::npos) return false;
  return absl::WebSafeBase64Unescape(text, &out);
}

// An unverified header value as messages show it: at most 64 bytes, so a
// crafted token cannot blow up a log line.
std::string Shown(const std::string& value) {
  return value.size() <= 64 ? value : absl::StrCat(value.substr(0, 61), "...");
}

// The `kid` of a token's header, unverified and cut to 64 characters, for
// messages.
std::string KidOf(absl::string_view token) {
  std::string header;
  if (!DecodeBase64Url(token.substr(0, token.find('.')), header)) return "";
  const nlohmann::json json = nlohmann::json::parse(header, nullptr, false);
  if (!json.is_object() || !json.contains("kid") || !json["kid"].is_string()) {
    return "";
  }
  return Shown(json["kid"].get<std::string>());
}

// An RSA public key from a JWK's base64url modulus and exponent.
absl::StatusOr<std::shared_ptr<evp_pkey_st>> RsaKey(const std::string& kid,
                                                    const std::string& n64,
                                                    const std::string& e64) {
  std::string n;
  std::string e;
  if (!DecodeBase64Url(n64, n) || !DecodeBase64Url(e64, e) || n.empty() ||
      e.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("JWKS key '", Shown(kid),
                     "': n and e must be non-empty base64url strings"));
  }
  std::unique_ptr<BIGNUM, BnFree> bn_n(BN_bin2bn(
      reinterpret_cast<const unsigned char*>(n.data()), n.size(), nullptr));
  std::unique_ptr<BIGNUM, BnFree> bn_e(BN_bin2bn(
      reinterpret_cast<const unsigned char*>(e.data()), e.size(), nullptr));
  std::unique_ptr<OSSL_PARAM_BLD, ParamBldFree> build(OSSL_PARAM_BLD_new());
  if (!bn_n || !bn_e || !build ||
      OSSL_PARAM_BLD_push_BN(build.get(), OSSL_PKEY_PARAM_RSA_N, bn_n.get()) !=
          1 ||
      OSSL_PARAM_BLD_push_BN(build.get(), OSSL_PKEY_PARAM_RSA_E, bn_e.get()) !=
          1) {
    return absl::InternalError("out of memory building an RSA key");
  }
  std::unique_ptr<OSSL_PARAM, ParamFree> params(
      OSSL_PARAM_BLD_to_param(build.get()));
  std::unique_ptr<EVP_PKEY_CTX, PkeyCtxFree> ctx(
      EVP_PKEY_CTX_new_from_name(nullptr, "RSA", nullptr));
  EVP_PKEY* key = nullptr;
  if (!params || !ctx || EVP_PKEY_fromdata_init(ctx.get()) != 1 ||
      EVP_PKEY_fromdata(ctx.get(), &key, EVP_PKEY_PUBLIC_KEY, params.get()) !=
          1 ||
      key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "JWKS key '", Shown(kid), "' is not a usable RSA public key"));
  }
  std::shared_ptr<evp_pkey_st> owned(key, EVP_PKEY_free);
  if (EVP_PKEY_get_bits(key) < kMinRsaBits) {
    return absl::InvalidArgumentError(
        absl::StrCat("JWKS key '", Shown(kid), "' has ", EVP_PKEY_get_bits(key),
                     " bits; at least ", kMinRsaBits, " are required"));
  }
  return owned;
}

bool VerifyRs256(evp_pkey_st* key, absl::string_view signed_part,
                 const std::string& signature) {
  std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestVerifyInit(ctx.get(), nullptr, EVP_sha256(), nullptr,
                                   key) != 1) {
    return false;
  }
  return EVP_DigestVerify(
             ctx.get(),
             reinterpret_cast<const unsigned char*>(signature.data()),
             signature.size(),
             reinterpret_cast<const unsigned char*>(signed_part.data()),
             signed_part.size()) == 1;
}

absl::string_view WithoutTrailingSlash(absl::string_view url) {
  while (absl::EndsWith(url, "/")) url.remove_suffix(1);
  return url;
}

// A NumericDate claim; nullopt when absent, error when not a number.
absl::StatusOr<std::optional<int64_t>> TimeClaim(const nlohmann::json& payload,
                                                 const char* name) {
  auto it = payload.find(name);
  if (it == payload.end()) return std::nullopt;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_number_float()) return static_cast<int64_t>(it->get<double>());
  return Refused(absl::StrCat("claim '", name, "' is not a number"));
}

// A positive id GitLab writes as a string ("42"); integers are accepted.
absl::StatusOr<int64_t> IdClaim(const nlohmann::json& payload,
                                const char* name) {
  auto it = payload.find(name);
  int64_t id = 0;
  if (it != payload.end()) {
    if (it->is_number_integer()) {
      id = it->get<int64_t>();
    } else if (it->is_string() &&
               !absl::SimpleAtoi(it->get<std::string>(), &id)) {
      id = 0;
    }
  }
  if (id <= 0) {
    return Refused(
        absl::StrCat("claim '", name, "' is missing or not a positive id"));
  }
  return id;
}

std::string StringClaim(const nlohmann::json& payload, const char* name) {
  auto it = payload.find(name);
  return it != payload.end() && it->is_string() ? it->get<std::string>() : "";
}

absl::Status CheckAudience(const nlohmann::json& payload,
                           const std::string& audience) {
  auto it = payload.find("aud");
  if (it == payload.end()) {
    return Refused(absl::StrCat("it has no aud; '", audience, "' is required"));
  }
  if (it->is_string()) {
    if (it->get<std::string>() == audience) return absl::OkStatus();
    return Refused(absl::StrCat("aud '", Shown(it->get<std::string>()),
                                "' is not '", audience, "'"));
  }
  if (it->is_array()) {
    for (const nlohmann::json& entry : *it) {
      if (entry.is_string() && entry.get<std::string>() == audience) {
        return absl::OkStatus();
      }
    }
  }
  return Refused(absl::StrCat("aud does not name '", audience, "'"));
}

absl::Status CheckTimes(const nlohmann::json& payload,
                        const IdTokenPolicy& policy, int64_t now) {
  const int64_t leeway = policy.leeway.count();
  absl::StatusOr<std::optional<int64_t>> exp = TimeClaim(payload, "exp");
  if (!exp.ok()) return exp.status();
  if (!exp->has_value()) return Refused("it has no exp (expiry)");
  if (now > **exp + leeway) {
    return Refused(absl::StrCat("it expired ", now - **exp, " s ago"));
  }
  absl::StatusOr<std::optional<int64_t>> nbf = TimeClaim(payload, "nbf");
  if (!nbf.ok()) return nbf.status();
  if (nbf->has_value() && **nbf > now + leeway) {
    return Refused(
        absl::StrCat("it is not valid for another ", **nbf - now, " s (nbf)"));
  }
  absl::StatusOr<std::optional<int64_t>> iat = TimeClaim(payload, "iat");
  if (!iat.ok()) return iat.status();
  if (iat->has_value() && **iat > now + leeway) {
    return Refused(
        absl::StrCat("it was issued ", **iat - now, " s in the future (iat)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<JsonWebKeys> JsonWebKeys::Parse(absl::string_view json) {
  const nlohmann::json document = nlohmann::json::parse(json, nullptr, false);
  if (!document.is_object()) {
    return absl::InvalidArgumentError("the JWKS is not a JSON object");
  }
  auto list = document.find("keys");
  if (list == document.end() || !list->is_array()) {
    return absl::InvalidArgumentError("the JWKS has no \"keys\" array");
  }
  JsonWebKeys keys;
  for (const nlohmann::json& jwk : *list) {
    if (!jwk.is_object()) continue;
    if (StringClaim(jwk, "kty") != "RSA") continue;
    if (jwk.contains("use") && StringClaim(jwk, "use") != "sig") continue;
    if (jwk.contains("alg") && StringClaim(jwk, "alg") != "RS256") continue;
    const std::string kid = StringClaim(jwk, "kid");
    if (kid.empty()) continue;  // A token could never name it.
    absl::StatusOr<std::shared_ptr<evp_pkey_st>> key =
        RsaKey(kid, StringClaim(jwk, "n"), StringClaim(jwk, "e"));
    if (!key.ok()) return key.status();
    keys.keys_[kid] = std::move(*key);
  }
  if (keys.keys_.empty()) {
    return absl::InvalidArgumentError(
        "the JWKS holds no RSA signing key with a kid");
  }
  return keys;
}

const evp_pkey_st* JsonWebKeys::Find(const std::string& kid) const {
  auto it = keys_.find(kid);
  return it == keys_.end() ? nullptr : it->second.get();
}

absl::StatusOr<IdTokenClaims> VerifyIdToken(absl::string_view token,
                                            const JsonWebKeys& keys,
                                            const IdTokenPolicy& policy,
                                            int64_t now_unix) {
  if (token.size() > kMaxTokenBytes) {
    return Refused(absl::StrCat("it is ", token.size(), " bytes long; at most ",
                                kMaxTokenBytes, " are accepted"));
  }
  const std::vector<absl::string_view> parts = absl::StrSplit(token, '.');
  if (parts.size() != 3) {
    return Refused("it is not a JWT (header.payload.signature)");
  }
  std::string header_text;
  std::string payload_text;
  std::string signature;
  if (!DecodeBase64Url(parts[0], header_text) ||
      !DecodeBase64Url(parts[1], payload_text) ||
      !DecodeBase64Url(parts[2], signature)) {
    return Refused("it is not base64url-encoded");
  }
  const nlohmann::json header =
      nlohmann::json::parse(header_text, nullptr, false);
  if (!header.is_object()) return Refused("its header is not a JSON object");
  auto alg = header.find("alg");
  if (alg == header.end() || !alg->is_string()) {
    return Refused("its header names no alg (only RS256 is accepted)");
  }
  if (alg->get<std::string>() != "RS256") {
    return Refused(absl::StrCat("alg '", Shown(alg->get<std::string>()),
                                "' is not accepted (only RS256)"));
  }
  if (header.contains("crit")) {
    return Refused("its header has critical extensions (crit)");
  }
  const std::string kid = StringClaim(header, "kid");
  if (kid.empty()) return Refused("its header names no key (kid)");
  const evp_pkey_st* key = keys.Find(kid);
  if (key == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        "ID token refused: no key '", Shown(kid), "' among GitLab's ",
        keys.size(),
        " ID token keys (signed by another instance, or a made-up key)"));
  }
  const absl::string_view signed_part(parts[0].data(),
                                      parts[0].size() + 1 + parts[1].size());
  if (!VerifyRs256(const_cast<evp_pkey_st*>(key), signed_part, signature)) {
    return Refused(absl::StrCat("its signature does not verify with key '",
                                Shown(kid), "'"));
  }

  const nlohmann::json payload =
      nlohmann::json::parse(payload_text, nullptr, false);
  if (!payload.is_object()) return Refused("its payload is not a JSON object");
  IdTokenClaims claims;
  claims.issuer = StringClaim(payload, "iss");
  if (WithoutTrailingSlash(claims.issuer) !=
      WithoutTrailingSlash(policy.issuer)) {
    return Refused(absl::StrCat("iss '", Shown(claims.issuer), "' is not '",
                                WithoutTrailingSlash(policy.issuer), "'"));
  }
  if (absl::Status audience = CheckAudience(payload, policy.audience);
      !audience.ok()) {
    return audience;
  }
  if (absl::Status times = CheckTimes(payload, policy, now_unix); !times.ok()) {
    return times;
  }
  absl::StatusOr<int64_t> project = IdClaim(payload, "project_id");
  if (!project.ok()) return project.status();
  absl::StatusOr<int64_t> pipeline = IdClaim(payload, "pipeline_id");
  if (!pipeline.ok()) return pipeline.status();
  absl::StatusOr<int64_t> job = IdClaim(payload, "job_id");
  if (!job.ok()) return job.status();
  claims.project_id = *project;
  claims.pipeline_id = *pipeline;
  claims.job_id = *job;
  claims.subject = StringClaim(payload, "sub");
  claims.project_path = StringClaim(payload, "project_path");
  claims.ref = StringClaim(payload, "ref");
  claims.ci_config_ref_uri = StringClaim(payload, "ci_config_ref_uri");
  claims.expires_at = payload["exp"].is_number_integer()
                          ? payload["exp"].get<int64_t>()
                          : static_cast<int64_t>(payload["exp"].get<double>());
  return claims;
}

IdTokenVerifier::IdTokenVerifier(FetchKeys fetch, const Clock& clock,
                                 Options options)
    : fetch_(std::move(fetch)), clock_(clock), options_(std::move(options)) {}

std::optional<absl::StatusOr<std::shared_ptr<const JsonWebKeys>>>
IdTokenVerifier::SettledLocked(bool force) {
  const Clock::TimePoint now = clock_.Now();
  const bool needed =
      keys_ == nullptr || force || now - keys_fetched_ >= options_.max_key_age;
  const bool allowed =
      !attempted_ || now - last_attempt_ >= options_.min_refresh_interval;
  if (needed && allowed) return std::nullopt;
  if (keys_ != nullptr) return keys_;
  return last_error_;
}

absl::StatusOr<std::shared_ptr<const JsonWebKeys>> IdTokenVerifier::Keys(
    bool force) {
  {
    MutexLock lock(mu_);
    if (auto answer = SettledLocked(force)) return *answer;
    // Keys that merely grew old stay in use while another caller fetches:
    // only the first key set, and unknown key ids, wait for a fetch.
    if (fetching_ && keys_ != nullptr && !force) return keys_;
  }
  MutexLock fetching(fetch_mu_);
  {
    MutexLock lock(mu_);
    if (auto answer = SettledLocked(force)) return *answer;
    fetching_ = true;
  }
  absl::StatusOr<std::string> document = fetch_();
  absl::StatusOr<JsonWebKeys> parsed =
      document.ok() ? JsonWebKeys::Parse(*document)
                    : absl::StatusOr<JsonWebKeys>(document.status());
  MutexLock lock(mu_);
  fetching_ = false;
  ++fetches_;
  attempted_ = true;
  last_attempt_ = clock_.Now();
  if (parsed.ok()) {
    keys_ = std::make_shared<const JsonWebKeys>(std::move(*parsed));
    keys_fetched_ = last_attempt_;
    ++generation_;
    last_error_ = absl::OkStatus();
    return keys_;
  }
  last_error_ = absl::UnavailableError(absl::StrCat(
      "cannot get GitLab's ID token keys: ", parsed.status().message(),
      "; the member retries"));
  // Old keys stay in use while GitLab cannot be asked.
  if (keys_ != nullptr) return keys_;
  return last_error_;
}

absl::StatusOr<IdTokenClaims> IdTokenVerifier::Verify(absl::string_view token) {
  int64_t generation = 0;
  {
    MutexLock lock(mu_);
    generation = generation_;
  }
  absl::StatusOr<std::shared_ptr<const JsonWebKeys>> keys = Keys(false);
  if (!keys.ok()) return keys.status();
  const auto now = [this] { return clock_.UnixMillis() / 1000; };
  absl::StatusOr<IdTokenClaims> claims =
      VerifyIdToken(token, **keys, options_.policy, now());
  if (claims.status().code() != absl::StatusCode::kNotFound) return claims;
  // An unknown key: GitLab may have rotated its keys since the last fetch.
  absl::StatusOr<std::shared_ptr<const JsonWebKeys>> fresh = Keys(true);
  if (!fresh.ok()) return fresh.status();
  if (*fresh != *keys) {
    claims = VerifyIdToken(token, **fresh, options_.policy, now());
  }
  if (claims.status().code() != absl::StatusCode::kNotFound) return claims;
  MutexLock lock(mu_);
  // Keys fetched after the token arrived do not hold its key: refused.
  if (generation_ != generation) {
    return absl::UnauthenticatedError(claims.status().message());
  }
  // Keys fetched earlier may predate a rotation: the member retries and a
  // later call, after the next allowed fetch, decides.
  const auto age = std::chrono::duration_cast<std::chrono::seconds>(
      clock_.Now() - keys_fetched_);
  return absl::UnavailableError(absl::StrCat(
      "ID token key '", KidOf(token), "' is not among GitLab's keys fetched ",
      age.count(), " s ago; they are fetched again at most every ",
      options_.min_refresh_interval.count(), " s; the member retries"));
}

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

// The PEM that `write` puts into a memory BIO.
template <typename Write>
std::string Pem(Write write) {
  BIO* bio = BIO_new(BIO_s_mem());
  if (bio == nullptr) return "";
  std::string pem;
  if (write(bio) == 1) {
    char* data = nullptr;
    const long size = BIO_get_mem_data(bio, &data);
    pem.assign(data, static_cast<size_t>(size));
  }
  BIO_free(bio);
  return pem;
}

}  // namespace

std::string IdTokenClaimsJson(const IdTokenGrant& grant) {
  nlohmann::json audience = grant.audiences.size() == 1
                                ? nlohmann::json(grant.audiences.front())
                                : nlohmann::json(grant.audiences);
  std::string host = grant.issuer;
  if (const size_t scheme = host.find("://"); scheme != std::string::npos) {
    host = host.substr(scheme + 3);
  }
  const size_t slash = grant.project_path.rfind('/');
  const std::string namespace_path =
      slash == std::string::npos ? "" : grant.project_path.substr(0, slash);
  return nlohmann::json{
      {"iss", grant.issuer},
      {"aud", audience},
      {"sub", absl::StrCat("project_path:", grant.project_path,
                           ":ref_type:branch:ref:", grant.ref)},
      {"namespace_path", namespace_path},
      {"project_id", std::to_string(grant.project_id)},
      {"project_path", grant.project_path},
      {"pipeline_id", std::to_string(grant.pipeline_id)},
      {"pipeline_source", "push"},
      {"job_id", std::to_string(grant.job_id)},
      {"ref", grant.ref},
      {"ref_type", "branch"},
      {"ref_path", absl::StrCat("refs/heads/", grant.ref)},
      {"ci_config_ref_uri",
       absl::StrCat(host, "/", grant.project_path,
                    "//.gitlab-ci.yml@refs/heads/", grant.ref)},
      {"jti", absl::StrCat("job-", grant.job_id, "-", grant.issued_at)},
      {"iat", grant.issued_at},
      {"nbf", grant.issued_at},
      {"exp", grant.expires_at}}
      .dump();
}

absl::StatusOr<IdTokenSigner> IdTokenSigner::Generate(std::string kid,
                                                      int bits) {
  EVP_PKEY* key = EVP_RSA_gen(static_cast<unsigned int>(bits));
  if (key == nullptr) {
    return absl::InternalError("cannot generate an RSA key for ID tokens");
  }
  return IdTokenSigner(std::move(kid),
                       std::shared_ptr<evp_pkey_st>(key, EVP_PKEY_free));
}

absl::StatusOr<IdTokenSigner> IdTokenSigner::FromPrivateKeyPem(
    absl::string_view pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  EVP_PKEY* key = bio == nullptr
                      ? nullptr
                      : PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  if (key == nullptr) {
    return absl::InvalidArgumentError("not a PEM private key");
  }
  std::shared_ptr<evp_pkey_st> owned(key, EVP_PKEY_free);
  if (EVP_PKEY_is_a(key, "RSA") != 1) {
    return absl::InvalidArgumentError("not an RSA key (ID tokens are RS256)");
  }
  IdTokenSigner signer("", std::move(owned));
  signer.kid_ = Sha256Hex(signer.PublicKeyPem()).substr(0, 16);
  return signer;
}

std::string IdTokenSigner::Jwks() const {
  nlohmann::json key = {{"kty", "RSA"},
                        {"kid", kid_},
                        {"use", "sig"},
                        {"alg", "RS256"},
                        {"n", BigNumParam(key_.get(), OSSL_PKEY_PARAM_RSA_N)},
                        {"e", BigNumParam(key_.get(), OSSL_PKEY_PARAM_RSA_E)}};
  return nlohmann::json{{"keys", nlohmann::json::array({key})}}.dump();
}

std::string IdTokenSigner::PrivateKeyPem() const {
  return Pem([this](BIO* bio) {
    return PEM_write_bio_PrivateKey(bio, key_.get(), nullptr, nullptr, 0,
                                    nullptr, nullptr);
  });
}

std::string IdTokenSigner::PublicKeyPem() const {
  return Pem(
      [this](BIO* bio) { return PEM_write_bio_PUBKEY(bio, key_.get()); });
}

std::string IdTokenSigner::Header() const {
  return nlohmann::json{{"alg", "RS256"}, {"kid", kid_}, {"typ", "JWT"}}.dump();
}

std::string IdTokenSigner::SignRs256(absl::string_view header_json,
                                     absl::string_view payload_json) const {
  const std::string input =
      absl::StrCat(Base64Url(header_json), ".", Base64Url(payload_json));
  std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(EVP_MD_CTX_new());
  size_t size = 0;
  std::vector<unsigned char> signature;
  const auto* data = reinterpret_cast<const unsigned char*>(input.data());
  if (ctx != nullptr &&
      EVP_DigestSignInit(ctx.get(), nullptr, EVP_sha256(), nullptr,
                         key_.get()) == 1 &&
      EVP_DigestSign(ctx.get(), nullptr, &size, data, input.size()) == 1) {
    signature.resize(size);
    if (EVP_DigestSign(ctx.get(), signature.data(), &size, data,
                       input.size()) != 1) {
      size = 0;
    }
  }
  return absl::StrCat(
      input, ".",
      Base64Url(absl::string_view(
          reinterpret_cast<const char*>(signature.data()), size)));
}

}  // namespace gdt::gitlab
