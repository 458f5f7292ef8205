// libFuzzer target for GitLab CI ID tokens and key sets: whatever a job
// presents as its ID token, or a GitLab instance serves as its JWKS,
// VerifyIdToken and JsonWebKeys::Parse return a value or one short error
// line (no crash, hang or sanitizer report), and nothing but a token signed
// with the known key is accepted. Built by gdt_fuzzer()
// (cmake/GdtCompilerOptions.cmake); docs/security.md "Fuzzing". The first
// byte picks the input: even = an ID token, odd = a JWKS document.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "gitlab/id_token.h"

namespace {

void Fail(const char* what, std::string_view text) {
  std::fprintf(stderr, "id_token_fuzzer: %s\n--- input ---\n%.*s\n", what,
               static_cast<int>(text.size()), text.data());
  std::abort();
}

void CheckMessage(const absl::Status& status, std::string_view text) {
  if (status.message().empty()) Fail("an error without a message", text);
  if (status.message().size() > 512) Fail("an error over 512 bytes", text);
  if (status.message().find('\n') != std::string_view::npos) {
    Fail("an error of more than one line", text);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > 64 * 1024) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1,
                              size - 1);
  if (data[0] % 2 == 1) {
    const absl::StatusOr<gdt::gitlab::JsonWebKeys> keys =
        gdt::gitlab::JsonWebKeys::Parse(std::string(text));
    if (!keys.ok()) {
      CheckMessage(keys.status(), text);
    } else if (keys->size() == 0) {
      Fail("an accepted key set without keys", text);
    }
    return 0;
  }
  // The known key: generated once; random input cannot be signed with it.
  static const gdt::gitlab::IdTokenSigner* const signer = [] {
    absl::StatusOr<gdt::gitlab::IdTokenSigner> generated =
        gdt::gitlab::IdTokenSigner::Generate("fuzz-key");
    if (!generated.ok()) std::abort();
    return new gdt::gitlab::IdTokenSigner(*generated);
  }();
  static const gdt::gitlab::JsonWebKeys* const keys = [] {
    absl::StatusOr<gdt::gitlab::JsonWebKeys> parsed =
        gdt::gitlab::JsonWebKeys::Parse(signer->Jwks());
    if (!parsed.ok()) std::abort();
    return new gdt::gitlab::JsonWebKeys(*parsed);
  }();
  gdt::gitlab::IdTokenPolicy policy;
  policy.issuer = "https://gitlab.example.com";
  policy.audience = "gdt";
  const absl::StatusOr<gdt::gitlab::IdTokenClaims> claims =
      gdt::gitlab::VerifyIdToken(std::string(text), *keys, policy, 1767225600);
  if (claims.ok()) Fail("accepted a token nobody signed", text);
  CheckMessage(claims.status(), text);
  return 0;
}
