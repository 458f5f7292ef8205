#ifndef GDT_GITLAB_ID_TOKEN_H_
#define GDT_GITLAB_ID_TOKEN_H_

// GitLab CI ID tokens (`id_tokens:` in .gitlab-ci.yml): JWTs that GitLab
// signs with RS256 and whose public keys it publishes as a JSON Web Key Set
// at <instance>/oauth/discovery/keys. A job presents its token; whoever
// trusts the instance checks the signature and the claims locally, with no
// call to GitLab per token. Crypto is OpenSSL's; only RS256 is accepted.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/clock.h"
#include "common/mutex.h"

// OpenSSL's EVP_PKEY, kept out of this header.
struct evp_pkey_st;

namespace gdt::gitlab {

// The claims gdt reads from a verified token. GitLab writes the ids as
// strings; integers are accepted too.
struct IdTokenClaims {
  std::string issuer;
  std::string subject;
  int64_t project_id = 0;
  std::string project_path;
  int64_t pipeline_id = 0;
  int64_t job_id = 0;
  std::string ref;
  std::string ci_config_ref_uri;
  // Unix seconds.
  int64_t expires_at = 0;
};

// What a token must satisfy besides its signature.
struct IdTokenPolicy {
  // `iss` must equal this (a trailing '/' on either side is ignored).
  std::string issuer;
  // `aud` (a string, or an array of them) must hold this.
  std::string audience;
  // Allowed clock difference for exp, nbf and iat.
  std::chrono::seconds leeway{60};
};

// The RSA signing keys of a JWKS document, by key id (`kid`). Keys that are
// not RSA signing keys are left out; RSA keys below 2048 bits are refused.
class JsonWebKeys {
 public:
  // InvalidArgument naming what is wrong: not JSON, no "keys" array, no
  // usable RSA key, or a malformed RSA key.
  static absl::StatusOr<JsonWebKeys> Parse(absl::string_view json);

  // nullptr when no key has this id.
  const evp_pkey_st* Find(const std::string& kid) const;
  size_t size() const { return keys_.size(); }

 private:
  std::map<std::string, std::shared_ptr<evp_pkey_st>> keys_;
};

// Checks `token` against `keys` and `policy` at `now_unix` (seconds).
// Errors, one line each, never containing the token:
//   NotFound: the header's `kid` names no key of `keys` (the caller may
//     refresh the key set and try again);
//   Unauthenticated: anything else wrong, e.g. "ID token refused: alg
//     'HS256' is not accepted (only RS256)", "... signature does not
//     verify", "... aud 'x' is not 'gdt-coord'", "... expired 120 s ago",
//     "... iss 'https://other' is not 'https://gitlab.example.com'".
absl::StatusOr<IdTokenClaims> VerifyIdToken(absl::string_view token,
                                            const JsonWebKeys& keys,
                                            const IdTokenPolicy& policy,
                                            int64_t now_unix);

// VerifyIdToken with the instance's key set fetched and cached: fetched on
// first use, again when older than `max_key_age`, and at once when a token
// names an unknown `kid` (GitLab rotated its key), but never more often
// than every `min_refresh_interval`, so tokens with made-up key ids cannot
// make the verifier hammer GitLab. Thread-safe; one fetch at a time.
class IdTokenVerifier {
 public:
  // Returns the JWKS document; errors name the URL (Unavailable).
  using FetchKeys = std::function<absl::StatusOr<std::string>()>;
  struct Options {
    IdTokenPolicy policy;
    std::chrono::seconds max_key_age{3600};
    std::chrono::seconds min_refresh_interval{30};
  };

  // Keeps a reference to `clock` (its UnixMillis() judges exp/nbf/iat).
  IdTokenVerifier(FetchKeys fetch, const Clock& clock, Options options);

  // The claims of a valid token. Errors: Unauthenticated as VerifyIdToken
  // (an unknown `kid` too, once a key set fetched after the call began
  // lacks it); Unavailable when the key set cannot be fetched, or when the
  // `kid` is unknown but the keys may not be fetched again yet (transient:
  // the key may be new; the caller retries).
  absl::StatusOr<IdTokenClaims> Verify(absl::string_view token);

  // Key set fetches so far, successful or not.
  int64_t fetches() const {
    MutexLock lock(mu_);
    return fetches_;
  }

 private:
  // The current keys, fetching them when there are none or they are too
  // old; `force` fetches unless the last fetch is recent.
  absl::StatusOr<std::shared_ptr<const JsonWebKeys>> Keys(bool force);
  // Keys()'s answer without a fetch, or nullopt when it should fetch.
  std::optional<absl::StatusOr<std::shared_ptr<const JsonWebKeys>>>
  SettledLocked(bool force) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const FetchKeys fetch_;
  const Clock& clock_;
  const Options options_;
  // Held across a fetch so that only one runs; taken before mu_.
  Mutex fetch_mu_;
  mutable Mutex mu_;
  std::shared_ptr<const JsonWebKeys> keys_ ABSL_GUARDED_BY(mu_);
  Clock::TimePoint keys_fetched_ ABSL_GUARDED_BY(mu_){};
  Clock::TimePoint last_attempt_ ABSL_GUARDED_BY(mu_){};
  bool attempted_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status last_error_ ABSL_GUARDED_BY(mu_);
  int64_t fetches_ ABSL_GUARDED_BY(mu_) = 0;
  // Successful fetches so far; a fetch runs while `fetching_`.
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool fetching_ ABSL_GUARDED_BY(mu_) = false;
};

// What GitLab puts into one job's ID token (the claims gdt reads and a few
// more), for issuing tokens where gdt stands in for GitLab.
struct IdTokenGrant {
  std::string issuer;
  // One audience is written as a string, several as an array.
  std::vector<std::string> audiences;
  int64_t project_id = 1;
  std::string project_path = "local/project";
  int64_t pipeline_id = 1;
  int64_t job_id = 1;
  std::string ref = "main";
  // Unix seconds.
  int64_t issued_at = 0;
  int64_t expires_at = 0;
};

// The JSON claims GitLab writes for `grant` (ids as strings, as GitLab does).
std::string IdTokenClaimsJson(const IdTokenGrant& grant);

// Signs ID tokens as GitLab does (RS256, `kid` in the header) with an RSA
// key, and publishes the matching JWKS: `gdt-ci run-local` stands in for
// GitLab with it, tests use it as GitLab's key. Copies share the key.
class IdTokenSigner {
 public:
  // A fresh RSA key of `bits` bits named `kid`.
  static absl::StatusOr<IdTokenSigner> Generate(std::string kid,
                                                int bits = 2048);
  // An RSA private key in PEM; its `kid` is derived from the public key.
  // InvalidArgument when `pem` holds no RSA private key.
  static absl::StatusOr<IdTokenSigner> FromPrivateKeyPem(absl::string_view pem);

  const std::string& kid() const { return kid_; }
  // {"keys":[{"kty":"RSA","kid":...,"use":"sig","alg":"RS256","n":...,"e":...}]}
  std::string Jwks() const;
  std::string PrivateKeyPem() const;
  std::string PublicKeyPem() const;
  // {"alg":"RS256","kid":...,"typ":"JWT"}
  std::string Header() const;
  // base64url(header).base64url(payload).base64url(RS256 signature).
  std::string SignRs256(absl::string_view header_json,
                        absl::string_view payload_json) const;
  // The token of `grant`, as GitLab would issue it.
  std::string Issue(const IdTokenGrant& grant) const {
    return SignRs256(Header(), IdTokenClaimsJson(grant));
  }

 private:
  IdTokenSigner(std::string kid, std::shared_ptr<evp_pkey_st> key)
      : kid_(std::move(kid)), key_(std::move(key)) {}

  std::string kid_;
  std::shared_ptr<evp_pkey_st> key_;
};

}  // namespace gdt::gitlab

#endif  // GDT_GITLAB_ID_TOKEN_H_
