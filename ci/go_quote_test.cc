#include "ci/go_quote.h"

#include "gtest/gtest.h"

namespace gdt::ci {
namespace {

// What Go's strconv.Quote makes of each kind of text (the expected strings
// are Go's own output).
TEST(GoQuoteTest, QuotesAsGosStrconvQuote) {
  EXPECT_EQ(GoQuote("box \"q\" a\\b"), R"("box \"q\" a\\b")");
  EXPECT_EQ(GoQuote("\a\b\f\n\r\t\v\x01\x1f\x7f"),
            R"("\a\b\f\n\r\t\v\x01\x1f\x7f")");
  // Printable non-ASCII text stays as it is.
  EXPECT_EQ(GoQuote("gpu-nœud-é-日本-🚀"), "\"gpu-nœud-é-日本-🚀\"");
  // C1 controls, spaces other than U+0020, format characters and private
  // use are escaped.
  EXPECT_EQ(
      GoQuote("\u0085\u00a0\u00ad\u1680\u2007\u200b\u200e\u2028"
              "\u202f\u2060\u3000\ufeff\ue000"),
      R"("\u0085\u00a0\u00ad\u1680\u2007\u200b\u200e\u2028\u202f\u2060\u3000\ufeff\ue000")");
  // Format characters the simple ranges miss: the Arabic letter mark and
  // number sign, the Mongolian vowel separator, tag characters.
  EXPECT_EQ(GoQuote("\u061c\u0600\u180e\U000E0041"),
            R"("\u061c\u0600\u180e\U000e0041")");
  // Unassigned and noncharacter code points are escaped; planes 15 and 16
  // are private use.
  EXPECT_EQ(GoQuote("\u0378\ufffe\U0001FFFF\U000F0000"),
            R"("\u0378\ufffe\U0001ffff\U000f0000")");
  // Unicode 15.0 additions are printable (CJK extension H, Kawi).
  EXPECT_EQ(GoQuote("\U00031350\U00011F00"), "\"\U00031350\U00011F00\"");
  // Bytes that are not UTF-8 are escaped one by one: a lone continuation
  // byte, a truncated sequence, an overlong one, a surrogate, past U+10FFFF.
  EXPECT_EQ(GoQuote("\x80|\xe2\x82|\xc0\xaf|\xed\xa0\x80|\xf4\x90\x80\x80"),
            R"("\x80|\xe2\x82|\xc0\xaf|\xed\xa0\x80|\xf4\x90\x80\x80")");
}

TEST(GoQuoteTest, IsPrintFollowsGosTables) {
  EXPECT_TRUE(GoIsPrint(' '));
  EXPECT_FALSE(GoIsPrint('\t'));
  EXPECT_FALSE(GoIsPrint(0xad));
  EXPECT_TRUE(GoIsPrint(0xe9));
  EXPECT_TRUE(GoIsPrint(0x1f680));
  EXPECT_FALSE(GoIsPrint(0x1f6d8));  // Assigned after Unicode 15.0.
  EXPECT_TRUE(GoIsPrint(0x2a6df));
  EXPECT_FALSE(GoIsPrint(0x2a6e0));
  EXPECT_FALSE(GoIsPrint(0x110000));
}

}  // namespace
}  // namespace gdt::ci
