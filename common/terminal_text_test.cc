#include "common/terminal_text.h"

#include <string>

#include "gtest/gtest.h"

namespace gdt {
namespace {

TEST(TerminalTextTest, PrintableUtf8PassesUnchanged) {
  EXPECT_EQ(TerminalSafe("train-8x <b>x</b> \\n"), "train-8x <b>x</b> \\n");
  EXPECT_EQ(TerminalSafe("üñí©ødé 日本語 🚀"), "üñí©ødé 日本語 🚀");
}

TEST(TerminalTextTest, ControlsBecomeVisibleEscapes) {
  EXPECT_EQ(TerminalSafe("a\nb\rc\td"), "a\\nb\\rc\\td");
  EXPECT_EQ(TerminalSafe("\x1b]0;pwned\x07\x1b[2J\x7f"),
            "\\x1b]0;pwned\\x07\\x1b[2J\\x7f");
  EXPECT_EQ(TerminalSafe(std::string("nul\0x", 5)), "nul\\x00x");
  // C1 CSI, a line separator and a right-to-left override.
  EXPECT_EQ(TerminalSafe("\xc2\x9b"
                         "2J \xe2\x80\xa8 \xe2\x80\xae"),
            "\\u009b2J \\u2028 \\u202e");
}

TEST(TerminalTextTest, BytesThatAreNotUtf8BecomeHexEscapes) {
  EXPECT_EQ(TerminalSafe("\xff"), "\\xff");
  EXPECT_EQ(TerminalSafe("caf\xc3"), "caf\\xc3");              // Cut in half.
  EXPECT_EQ(TerminalSafe("\xc0\xaf"), "\\xc0\\xaf");           // Overlong.
  EXPECT_EQ(TerminalSafe("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // Surrogate.
  const std::string once = TerminalSafe("\x1b[31m\xff\n");
  EXPECT_EQ(TerminalSafe(once), once);
}

TEST(TerminalTextTest, WidthAndTruncationCountCharacters) {
  EXPECT_EQ(DisplayWidth("abc"), 3u);
  EXPECT_EQ(DisplayWidth("日本語🚀"), 4u);
  EXPECT_EQ(DisplayWidth("\xff"
                         "a"),
            2u);
  EXPECT_EQ(TruncateDisplay("日本語🚀", 4), "日本語🚀");
  EXPECT_EQ(TruncateDisplay("日本語🚀🚀", 4), "日...");
  EXPECT_EQ(TruncateDisplay("ééééé", 3), "ééé");
  EXPECT_EQ(TruncateDisplay("abcdef", 5), "ab...");
  EXPECT_EQ(TruncateDisplay("", 0), "");
}

TEST(TerminalTextTest, IsValidUtf8RefusesWhatProtobufRefuses) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("gpu-07 \xc3\xa9\xe6\x97\xa5\xf0\x9f\x98\x80"));
  EXPECT_FALSE(IsValidUtf8("gpu\xff"));
  EXPECT_FALSE(IsValidUtf8("cut \xc3"));
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));          // Overlong '/'.
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));      // A surrogate.
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));  // Beyond U+10FFFF.
}

TEST(TerminalTextTest, FirstNonUtf8IsTheOffsetOfTheFirstBadByte) {
  EXPECT_EQ(FirstNonUtf8("caf\xc3\xa9 ok"), absl::string_view::npos);
  EXPECT_EQ(FirstNonUtf8("caf\xe9 and \xff"), 3u);  // Latin-1 'é'.
  EXPECT_EQ(FirstNonUtf8("\xc3\xa9\xc3"), 2u);      // Cut at the end.
}

}  // namespace
}  // namespace gdt
