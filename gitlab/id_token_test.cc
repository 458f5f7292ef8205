#include "gitlab/id_token.h"

#include <atomic>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/fake_clock.h"
#include "gitlab/curl_gitlab_api.h"
#include "gitlab/fake_gitlab_api.h"
#include "gitlab/fake_id_token_issuer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/joined_thread.h"

namespace gdt::gitlab {
namespace {

using ::testing::HasSubstr;

constexpr char kIssuer[] = "https://gitlab.example.com";
constexpr char kAudience[] = "https://gdt-coord.example.com";
constexpr int64_t kNow = 1767225600;  // What FakeClock starts at (+1 s).

// Keys are generated once: RSA key generation is the slow part.
class IdTokenTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto gitlab = FakeIdTokenIssuer::Create("gitlab-key-1");
    auto other = FakeIdTokenIssuer::Create("gitlab-key-1");
    ASSERT_TRUE(gitlab.ok() && other.ok());
    gitlab_ = new FakeIdTokenIssuer(*gitlab);
    impostor_ = new FakeIdTokenIssuer(*other);
  }
  static void TearDownTestSuite() {
    delete gitlab_;
    delete impostor_;
  }

  static FakeIdToken Token() {
    FakeIdToken token;
    token.issuer = kIssuer;
    token.audience = kAudience;
    token.project_id = 4;
    token.pipeline_id = 77;
    token.job_id = 1002;
    token.issued_at = kNow - 10;
    token.expires_at = kNow + 3600;
    return token;
  }
  static IdTokenPolicy Policy() {
    IdTokenPolicy policy;
    policy.issuer = kIssuer;
    policy.audience = kAudience;
    return policy;
  }
  static JsonWebKeys Keys() {
    absl::StatusOr<JsonWebKeys> keys = JsonWebKeys::Parse(gitlab_->Jwks());
    EXPECT_TRUE(keys.ok()) << keys.status();
    return *keys;
  }
  static absl::StatusOr<IdTokenClaims> Check(const std::string& token) {
    return VerifyIdToken(token, Keys(), Policy(), kNow);
  }

  static FakeIdTokenIssuer* gitlab_;
  static FakeIdTokenIssuer* impostor_;
};

FakeIdTokenIssuer* IdTokenTest::gitlab_ = nullptr;
FakeIdTokenIssuer* IdTokenTest::impostor_ = nullptr;

void ExpectRefused(const absl::StatusOr<IdTokenClaims>& claims,
                   const std::string& reason) {
  ASSERT_FALSE(claims.ok());
  EXPECT_EQ(claims.status().code(), absl::StatusCode::kUnauthenticated)
      << claims.status();
  EXPECT_THAT(claims.status().message(), HasSubstr("ID token refused: "));
  EXPECT_THAT(claims.status().message(), HasSubstr(reason));
}

TEST_F(IdTokenTest, AcceptsGitLabsTokenAndReadsItsClaims) {
  absl::StatusOr<IdTokenClaims> claims = Check(gitlab_->Issue(Token()));
  ASSERT_TRUE(claims.ok()) << claims.status();
  EXPECT_EQ(claims->project_id, 4);
  EXPECT_EQ(claims->pipeline_id, 77);
  EXPECT_EQ(claims->job_id, 1002);
  EXPECT_EQ(claims->ref, "main");
  EXPECT_EQ(claims->issuer, kIssuer);
  EXPECT_EQ(claims->expires_at, kNow + 3600);
  EXPECT_THAT(claims->ci_config_ref_uri, HasSubstr(".gitlab-ci.yml@"));
}

TEST_F(IdTokenTest, WrongAudienceIsRefused) {
  FakeIdToken token = Token();
  token.audience = "https://vault.example.com";
  ExpectRefused(Check(gitlab_->Issue(token)),
                "aud 'https://vault.example.com' is not "
                "'https://gdt-coord.example.com'");
}

TEST_F(IdTokenTest, ExpiredTokenIsRefusedAfterTheLeeway) {
  FakeIdToken token = Token();
  token.expires_at = kNow - 30;  // Within the 60 s leeway.
  EXPECT_TRUE(Check(gitlab_->Issue(token)).ok());
  token.expires_at = kNow - 120;
  ExpectRefused(Check(gitlab_->Issue(token)), "it expired 120 s ago");
}

TEST_F(IdTokenTest, TokenFromTheFutureIsRefused) {
  FakeIdToken token = Token();
  token.issued_at = kNow + 600;
  ExpectRefused(Check(gitlab_->Issue(token)), "not valid for another 600 s");
}

TEST_F(IdTokenTest, WrongIssuerIsRefused) {
  FakeIdToken token = Token();
  token.issuer = "https://gitlab.evil.example";
  ExpectRefused(Check(gitlab_->Issue(token)),
                "iss 'https://gitlab.evil.example' is not "
                "'https://gitlab.example.com'");
  token.issuer = absl::StrCat(kIssuer, "/");  // Same instance.
  EXPECT_TRUE(Check(gitlab_->Issue(token)).ok());
}

TEST_F(IdTokenTest, TokenSignedWithAnotherKeyUnderTheSameKidIsRefused) {
  ExpectRefused(Check(impostor_->Issue(Token())),
                "signature does not verify with key 'gitlab-key-1'");
}

TEST_F(IdTokenTest, UnknownKidIsNotFoundSoTheCallerCanRefresh) {
  absl::StatusOr<FakeIdTokenIssuer> stranger =
      FakeIdTokenIssuer::Create("stranger");
  ASSERT_TRUE(stranger.ok());
  absl::StatusOr<IdTokenClaims> claims = Check(stranger->Issue(Token()));
  EXPECT_EQ(claims.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(claims.status().message(), HasSubstr("no key 'stranger'"));
}

TEST_F(IdTokenTest, AlgNoneIsRefused) {
  const std::string payload = FakeIdTokenIssuer::ClaimsJson(Token());
  ExpectRefused(
      Check(FakeIdTokenIssuer::Unsigned(
          R"({"alg":"none","kid":"gitlab-key-1","typ":"JWT"})", payload)),
      "alg 'none' is not accepted (only RS256)");
  // Whatever the case, and with no alg at all.
  ExpectRefused(Check(FakeIdTokenIssuer::Unsigned(
                    R"({"alg":"None","kid":"gitlab-key-1"})", payload)),
                "alg 'None' is not accepted");
  ExpectRefused(
      Check(FakeIdTokenIssuer::Unsigned(R"({"kid":"gitlab-key-1"})", payload)),
      "names no alg");
}

TEST_F(IdTokenTest, Hs256KeyedWithThePublicKeyIsRefused) {
  // The classic key confusion: an HMAC "signed" with the public key, which
  // anyone can fetch from the JWKS.
  const std::string token = FakeIdTokenIssuer::SignHs256(
      R"({"alg":"HS256","kid":"gitlab-key-1","typ":"JWT"})",
      FakeIdTokenIssuer::ClaimsJson(Token()), gitlab_->PublicKeyPem());
  ExpectRefused(Check(token), "alg 'HS256' is not accepted (only RS256)");
  ExpectRefused(
      Check(gitlab_->SignRs256(R"({"alg":"RS512","kid":"gitlab-key-1"})",
                               FakeIdTokenIssuer::ClaimsJson(Token()))),
      "alg 'RS512' is not accepted");
}

TEST_F(IdTokenTest, TamperedPayloadIsRefused) {
  const std::string good = gitlab_->Issue(Token());
  std::vector<std::string> parts = absl::StrSplit(good, '.');
  ASSERT_EQ(parts.size(), 3u);
  FakeIdToken other = Token();
  other.pipeline_id = 78;  // Another pipeline's gang.
  parts[1] = absl::WebSafeBase64Escape(FakeIdTokenIssuer::ClaimsJson(other));
  ExpectRefused(Check(absl::StrJoin(parts, ".")), "signature does not verify");
}

TEST_F(IdTokenTest, MalformedTokensAreRefusedWithAReason) {
  ExpectRefused(Check(""), "not a JWT");
  ExpectRefused(Check("a.b"), "not a JWT");
  ExpectRefused(Check("!!.??.**"), "not base64url");
  ExpectRefused(Check(absl::StrCat(absl::WebSafeBase64Escape("[1]"), ".",
                                   absl::WebSafeBase64Escape("{}"), ".")),
                "header is not a JSON object");
  ExpectRefused(Check(std::string(20000, 'a')), "at most 16384");
  // Header values an attacker controls are cut in messages.
  absl::StatusOr<IdTokenClaims> long_alg = Check(FakeIdTokenIssuer::Unsigned(
      absl::StrCat(R"({"alg":")", std::string(5000, 'x'), R"("})"), "{}"));
  ExpectRefused(long_alg, "...' is not accepted");
  EXPECT_LT(long_alg.status().message().size(), 200u);
  FakeIdToken token = Token();
  token.job_id = 0;
  ExpectRefused(Check(gitlab_->Issue(token)),
                "claim 'job_id' is missing or not a positive id");
}

TEST_F(IdTokenTest, JwksErrorsNameTheProblem) {
  EXPECT_THAT(JsonWebKeys::Parse("<html>").status().message(),
              HasSubstr("not a JSON object"));
  EXPECT_THAT(JsonWebKeys::Parse("{}").status().message(),
              HasSubstr("no \"keys\" array"));
  EXPECT_THAT(JsonWebKeys::Parse(R"({"keys":[{"kty":"EC","kid":"x"}]})")
                  .status()
                  .message(),
              HasSubstr("no RSA signing key"));
  absl::StatusOr<FakeIdTokenIssuer> weak =
      FakeIdTokenIssuer::Create("weak", 1024);
  ASSERT_TRUE(weak.ok());
  EXPECT_THAT(JsonWebKeys::Parse(weak->Jwks()).status().message(),
              HasSubstr("has 1024 bits; at least 2048 are required"));
}

// What run-local signs with: a key read from PEM, its kid derived from it;
// an audience array holding ours is accepted.
TEST_F(IdTokenTest, SignerFromPemIssuesTokensItsJwksVerifies) {
  absl::StatusOr<IdTokenSigner> signer =
      IdTokenSigner::FromPrivateKeyPem(gitlab_->PrivateKeyPem());
  ASSERT_TRUE(signer.ok()) << signer.status();
  EXPECT_EQ(signer->kid().size(), 16u);
  absl::StatusOr<JsonWebKeys> keys = JsonWebKeys::Parse(signer->Jwks());
  ASSERT_TRUE(keys.ok()) << keys.status();
  IdTokenGrant grant;
  grant.issuer = kIssuer;
  grant.audiences = {"https://vault.example.com", kAudience};
  grant.project_id = 4;
  grant.pipeline_id = 77;
  grant.job_id = 1003;
  grant.issued_at = kNow;
  grant.expires_at = kNow + 60;
  absl::StatusOr<IdTokenClaims> claims =
      VerifyIdToken(signer->Issue(grant), *keys, Policy(), kNow);
  ASSERT_TRUE(claims.ok()) << claims.status();
  EXPECT_EQ(claims->job_id, 1003);
  EXPECT_EQ(IdTokenSigner::FromPrivateKeyPem("not a key").status().message(),
            "not a PEM private key");
}

// The caching verifier, fed by a counted fake fetch.
class IdTokenVerifierTest : public IdTokenTest {
 protected:
  IdTokenVerifier::Options VerifierOptions() {
    IdTokenVerifier::Options options;
    options.policy = Policy();
    options.min_refresh_interval = std::chrono::seconds(30);
    options.max_key_age = std::chrono::seconds(3600);
    return options;
  }
  IdTokenVerifier MakeVerifier() {
    return IdTokenVerifier(
        [this]() -> absl::StatusOr<std::string> {
          ++fetches_;
          if (!jwks_.has_value()) {
            return absl::UnavailableError("GET https://gitlab/keys: HTTP 502");
          }
          return *jwks_;
        },
        clock_, VerifierOptions());
  }

  FakeClock clock_;
  std::optional<std::string> jwks_ = gitlab_->Jwks();
  int fetches_ = 0;
};

TEST_F(IdTokenVerifierTest, FetchesKeysOnceAndReusesThem) {
  IdTokenVerifier verifier = MakeVerifier();
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<IdTokenClaims> claims =
        verifier.Verify(gitlab_->Issue(Token()));
    ASSERT_TRUE(claims.ok()) << claims.status();
  }
  EXPECT_EQ(fetches_, 1);
  clock_.Advance(std::chrono::seconds(3601));  // Keys grow old.
  FakeIdToken later = Token();
  later.issued_at += 3601;
  later.expires_at += 3601;
  EXPECT_TRUE(verifier.Verify(gitlab_->Issue(later)).ok());
  EXPECT_EQ(fetches_, 2);
}

TEST_F(IdTokenVerifierTest, UnknownKidRefreshesAtMostEveryInterval) {
  IdTokenVerifier verifier = MakeVerifier();
  ASSERT_TRUE(verifier.Verify(gitlab_->Issue(Token())).ok());
  absl::StatusOr<FakeIdTokenIssuer> made_up =
      FakeIdTokenIssuer::Create("made-up");
  ASSERT_TRUE(made_up.ok());
  // Just fetched: a flood of made-up key ids costs no fetch. The keys
  // predate these tokens, so the answer is "retry" (the key could be new).
  for (int i = 0; i < 20; ++i) {
    absl::StatusOr<IdTokenClaims> claims =
        verifier.Verify(made_up->Issue(Token()));
    ASSERT_EQ(claims.status().code(), absl::StatusCode::kUnavailable)
        << claims.status();
    EXPECT_THAT(claims.status().message(),
                HasSubstr("ID token key 'made-up' is not among GitLab's keys "
                          "fetched 0 s ago; they are fetched again at most "
                          "every 30 s; the member retries"));
  }
  EXPECT_EQ(fetches_, 1);
  // Once allowed, one fetch; keys fetched after the token arrived decide.
  clock_.Advance(std::chrono::seconds(31));
  absl::StatusOr<IdTokenClaims> refused =
      verifier.Verify(made_up->Issue(Token()));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("ID token refused: no key 'made-up' among GitLab's 1 "
                        "ID token keys"));
  EXPECT_EQ(verifier.Verify(made_up->Issue(Token())).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(fetches_, 2);
}

// A slow refresh of keys that grew old holds up no other call: they are
// answered with the old keys meanwhile.
TEST_F(IdTokenVerifierTest, OldKeysServeWhileARefreshIsSlow) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> calls{0};
  IdTokenVerifier verifier(
      [&]() -> absl::StatusOr<std::string> {
        if (calls.fetch_add(1) == 1) released.wait();  // The refresh hangs.
        return gitlab_->Jwks();
      },
      clock_, VerifierOptions());
  ASSERT_TRUE(verifier.Verify(gitlab_->Issue(Token())).ok());
  clock_.Advance(std::chrono::seconds(3601));
  FakeIdToken later = Token();
  later.issued_at += 3601;
  later.expires_at += 3601;
  const std::string token = gitlab_->Issue(later);
  bool let_go = false;
  const auto release_refresh = [&] {
    if (!std::exchange(let_go, true)) release.set_value();
  };
  test::JoinedThread refreshing(
      [&] { EXPECT_TRUE(verifier.Verify(token).ok()); }, release_refresh);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (calls.load() < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  ASSERT_EQ(calls.load(), 2);
  std::future<bool> other = std::async(
      std::launch::async, [&] { return verifier.Verify(token).ok(); });
  const bool answered =
      other.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  release_refresh();
  refreshing.Join();
  EXPECT_TRUE(answered) << "a call waited for the slow refresh";
  EXPECT_TRUE(other.get());
  EXPECT_EQ(calls.load(), 2);
}

TEST_F(IdTokenVerifierTest, RotatedKeyIsPickedUp) {
  IdTokenVerifier verifier = MakeVerifier();
  ASSERT_TRUE(verifier.Verify(gitlab_->Issue(Token())).ok());
  absl::StatusOr<FakeIdTokenIssuer> next =
      FakeIdTokenIssuer::Create("gitlab-key-2");
  ASSERT_TRUE(next.ok());
  jwks_ = next->Jwks();
  clock_.Advance(std::chrono::seconds(31));
  absl::StatusOr<IdTokenClaims> claims = verifier.Verify(next->Issue(Token()));
  EXPECT_TRUE(claims.ok()) << claims.status();
  EXPECT_EQ(fetches_, 2);
}

TEST_F(IdTokenVerifierTest, UnreachableKeysAreTransientAndRetriedLater) {
  jwks_.reset();
  IdTokenVerifier verifier = MakeVerifier();
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<IdTokenClaims> claims =
        verifier.Verify(gitlab_->Issue(Token()));
    EXPECT_EQ(claims.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(claims.status().message(),
                HasSubstr("cannot get GitLab's ID token keys: GET "
                          "https://gitlab/keys: HTTP 502"));
  }
  EXPECT_EQ(fetches_, 1);
  jwks_ = gitlab_->Jwks();
  clock_.Advance(std::chrono::seconds(31));
  EXPECT_TRUE(verifier.Verify(gitlab_->Issue(Token())).ok());
  EXPECT_EQ(fetches_, 2);
}

// The keys come from the fake instance's /oauth/discovery/keys over HTTP.
TEST_F(IdTokenTest, KeysAreFetchedFromTheInstance) {
  absl::StatusOr<std::unique_ptr<FakeGitLabApi>> fake =
      FakeGitLabApi::Start({});
  ASSERT_TRUE(fake.ok()) << fake.status();
  const std::string url = absl::StrCat((*fake)->url(), "/oauth/discovery/keys");
  absl::StatusOr<std::string> missing = CurlGetPublic(url, {});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  (*fake)->SetJwks(gitlab_->Jwks());
  absl::StatusOr<std::string> jwks = CurlGetPublic(url, {});
  ASSERT_TRUE(jwks.ok()) << jwks.status();
  absl::StatusOr<JsonWebKeys> keys = JsonWebKeys::Parse(*jwks);
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_NE(keys->Find("gitlab-key-1"), nullptr);
}

}  // namespace
}  // namespace gdt::gitlab
