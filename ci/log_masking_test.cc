#include "ci/log_masking.h"

#include <gtest/gtest.h>

#include <string>

namespace gdt::ci {
namespace {

TEST(LogMaskerTest, MasksEveryOccurrenceOfAMaskedValue) {
  const LogMasker masker({"hunter22", "  padded-secret \n"}, true);

  EXPECT_EQ(masker.Mask("key=hunter22 again hunter22"),
            "key=[MASKED] again [MASKED]");
  // Values are trimmed of white space, as the runner trims them.
  EXPECT_EQ(masker.Mask("x padded-secret y"), "x [MASKED] y");
  EXPECT_EQ(masker.Mask("nothing secret here"), "nothing secret here");
}

TEST(LogMaskerTest, TheLongestValueIsMaskedFirstAndMasksAreNotMaskedAgain) {
  // "ASK" is in "[MASKED]": a mask an earlier value wrote stays whole.
  const LogMasker masker({"abc", "abcdef", "ASK", ""}, true);

  EXPECT_EQ(masker.Mask("abcdef abc"), "[MASKED] [MASKED]");
  EXPECT_EQ(masker.Mask("ASK abcdef"), "[MASKED] [MASKED]");
}

TEST(LogMaskerTest, MasksGitLabTokensByTheirPrefix) {
  const LogMasker all({}, /*all_token_prefixes=*/true);
  const LogMasker personal_only({}, /*all_token_prefixes=*/false);

  EXPECT_EQ(all.Mask("clone https://gitlab-ci-token:glcbt-64_abc.DEF=@host/x"),
            "clone https://gitlab-ci-token:glcbt-[MASKED]@host/x");
  EXPECT_EQ(all.Mask("glpat-xyz glrt-1 glrtr-2 gldt-3"),
            "glpat-[MASKED] glrt-[MASKED] glrtr-[MASKED] gldt-[MASKED]");
  // A prefix alone, or before a character no token has, stays.
  EXPECT_EQ(all.Mask("the glpat- prefix, glrt-!"), "the glpat- prefix, glrt-!");
  // Without FF_MASK_ALL_DEFAULT_TOKENS only personal access tokens.
  EXPECT_EQ(personal_only.Mask("glpat-xyz glcbt-abc"),
            "glpat-[MASKED] glcbt-abc");
}

TEST(LogMaskerTest, MasksCredentialsInUrlParameters) {
  const LogMasker masker({}, true);

  EXPECT_EQ(masker.Mask("GET /api?private_token=abc123&page=2 done"),
            "GET /api?private_token=[MASKED]&page=2 done");
  EXPECT_EQ(masker.Mask("s3://b/k?X-Amz-Signature=ff00&X-Amz-Credential=AK/x"),
            "s3://b/k?X-Amz-Signature=[MASKED]&X-Amz-Credential=[MASKED]");
  EXPECT_EQ(masker.Mask("?rss_token="), "?rss_token=[MASKED]");
  EXPECT_EQ(masker.Mask("?page=2&token=abc"), "?page=2&token=abc");
}

}  // namespace
}  // namespace gdt::ci
