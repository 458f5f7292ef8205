#include "common/sha256.h"

#include <string>

#include "common/secret.h"
#include "gtest/gtest.h"

namespace gdt {
namespace {

TEST(HexEncodeTest, TwoLowercaseDigitsPerByte) {
  EXPECT_EQ(HexEncode(""), "");
  EXPECT_EQ(HexEncode(std::string("\x00\x0f\xa0\xff", 4)), "000fa0ff");
}

TEST(Sha1Test, MatchesSha1sum) {
  // printf abc | sha1sum
  EXPECT_EQ(Sha1Hex("abc"), "a9993e364706816aba3e25717850c26c9cd0d89d");
}

TEST(Sha256Test, MatchesSha256sum) {
  // printf abc | sha256sum
  const std::string abc =
      "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
  EXPECT_EQ(Sha256Hex("abc"), abc);
  Sha256 incremental;
  incremental.Update("a");
  incremental.Update("bc");
  EXPECT_EQ(incremental.FinishHex(), abc);
  EXPECT_EQ(SecretSha256Hex("abc"), abc);
}

}  // namespace
}  // namespace gdt
