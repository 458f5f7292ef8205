#include "common/secret.h"

#include <fstream>
#include <set>

#include "gtest/gtest.h"

namespace gdt {
namespace {

TEST(SecretTest, TokensAreRandomHex) {
  std::set<std::string> seen;
  for (int i = 0; i < 8; ++i) {
    absl::StatusOr<std::string> token = NewSecretToken();
    ASSERT_TRUE(token.ok()) << token.status();
    EXPECT_EQ(token->size(), 64u);
    EXPECT_EQ(token->find_first_not_of("0123456789abcdef"), std::string::npos);
    seen.insert(*token);
  }
  EXPECT_EQ(seen.size(), 8u);
}

TEST(SecretTest, KnownDigests) {
  EXPECT_EQ(SecretSha256Hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // RFC 4231 test case 2.
  EXPECT_EQ(HmacSha256Hex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(SecretTest, SameSecretComparesWholeStrings) {
  EXPECT_TRUE(SameSecret("abc", "abc"));
  EXPECT_FALSE(SameSecret("abc", "abd"));
  EXPECT_FALSE(SameSecret("abc", "ab"));
  EXPECT_FALSE(SameSecret("", "a"));
}

TEST(SecretTest, ReadTokenFileTakesTheFirstLineTrimmed) {
  const std::string path =
      testing::TempDir() + "/secret_test_token_" + std::to_string(getpid());
  { std::ofstream(path) << "  s3cret \nignored\n"; }
  absl::StatusOr<std::string> token = ReadTokenFile(path, "admin_token_file");
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, "s3cret");
  { std::ofstream(path) << "\n"; }
  EXPECT_EQ(ReadTokenFile(path, "admin_token_file").status().message(),
            "admin_token_file " + path + " is empty");
  std::remove(path.c_str());
  absl::StatusOr<std::string> missing = ReadTokenFile(path, "host_token_file");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("host_token_file"),
            std::string::npos);
}

// A directory opens and reads as nothing; it must not be called empty.
TEST(SecretTest, ReadTokenFileNamesADirectoryAndAReadError) {
  const std::string dir = testing::TempDir();
  EXPECT_EQ(ReadTokenFile(dir, "admin_token_file").status().message(),
            "admin_token_file " + dir + " is a directory, not a token file");
  // Opens, then every read fails (EIO): a real read error, also for root.
  absl::StatusOr<std::string> unreadable =
      ReadTokenFile("/proc/self/mem", "host_token_file");
  EXPECT_EQ(unreadable.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(unreadable.status().message(),
            "cannot read host_token_file /proc/self/mem: Input/output error");
}

}  // namespace
}  // namespace gdt
