#include "common/member_token.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gdt {
namespace {

using ::testing::HasSubstr;

MemberClaims Claims() {
  return {"train-p5-pl77-n2", 3, 1002, "gpu-07.example.com", 1700000000123};
}

TEST(MemberTokenTest, VerifiesWhatItMinted) {
  const std::string token = MintMemberToken("coordinator key", Claims());
  EXPECT_EQ(token.rfind("gdt-mt2.", 0), 0u);
  absl::StatusOr<MemberClaims> claims =
      VerifyMemberToken("coordinator key", token);
  ASSERT_TRUE(claims.ok()) << claims.status();
  EXPECT_EQ(*claims, Claims());
  EXPECT_EQ(claims->member_id(), "train-p5-pl77-n2/1002");
}

TEST(MemberTokenTest, AnotherKeyOrAlteredClaimsAreRefused) {
  const std::string token = MintMemberToken("coordinator key", Claims());
  absl::StatusOr<MemberClaims> other = VerifyMemberToken("host token", token);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(other.status().message(),
              HasSubstr("not issued by this coordinator"));

  // The claims of another job under the original signature.
  MemberClaims changed = Claims();
  changed.job_id = 1003;
  const std::string forged_claims =
      MintMemberToken("coordinator key", changed).substr(0, token.rfind('.')) +
      token.substr(token.rfind('.'));
  EXPECT_EQ(VerifyMemberToken("coordinator key", forged_claims).status().code(),
            absl::StatusCode::kPermissionDenied);
}

TEST(MemberTokenTest, MalformedTokensAreInvalid) {
  for (const char* token :
       {"", "abc", "gdt-mt2.zz.00", "gdt-mt1.00.00", "gdt-mt2.616263"}) {
    EXPECT_EQ(VerifyMemberToken("k", token).status().code(),
              absl::StatusCode::kInvalidArgument)
        << token;
  }
}

}  // namespace
}  // namespace gdt
