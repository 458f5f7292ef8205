#include "ci/go_duration.h"

#include <chrono>
#include <cstdint>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gdt::ci {
namespace {

using std::chrono::nanoseconds;
using namespace std::chrono_literals;

nanoseconds Parsed(const std::string& text) {
  absl::StatusOr<nanoseconds> d = ParseGoDuration(text);
  EXPECT_TRUE(d.ok()) << text << ": " << d.status();
  return d.ok() ? *d : nanoseconds(-1);
}

TEST(GoDurationTest, ReadsWhatGoReads) {
  EXPECT_EQ(Parsed("1500ms"), 1500ms);
  EXPECT_EQ(Parsed("1h2m3.5s"), 1h + 2min + 3500ms);
  EXPECT_EQ(Parsed("0"), 0ns);
  EXPECT_EQ(Parsed("-0"), 0ns);
  EXPECT_EQ(Parsed("+5s"), 5s);
  EXPECT_EQ(Parsed("-1.5h"), -90min);
  EXPECT_EQ(Parsed(".5s"), 500ms);
  EXPECT_EQ(Parsed("1.s"), 1s);
  EXPECT_EQ(Parsed("0s"), 0ns);
  EXPECT_EQ(Parsed("3us"), 3us);
  EXPECT_EQ(Parsed("3\xC2\xB5s"), 3us);  // Micro sign.
  EXPECT_EQ(Parsed("3\xCE\xBCs"), 3us);  // Greek mu.
  EXPECT_EQ(Parsed("7ns"), 7ns);
  EXPECT_EQ(Parsed("1s1s"), 2s);
  EXPECT_EQ(Parsed("2562047h47m16.854775807s"), nanoseconds(INT64_MAX));
  EXPECT_EQ(Parsed("-2562047h47m16.854775808s"), nanoseconds(INT64_MIN));
  // Fraction digits past what fits only lose precision.
  EXPECT_EQ(Parsed("1.00000000000000000000000001s"), 1s);
}

TEST(GoDurationTest, RefusesWhatGoRefuses) {
  for (const char* text : {"",
                           "2",
                           "-",
                           "+",
                           "s",
                           ".s",
                           "1.5",
                           "1 s",
                           " 1s",
                           "1s ",
                           "1d",
                           "1S",
                           "inf",
                           "-inf",
                           "1h30",
                           "00",
                           "2562047h47m16.854775808s",
                           "9223372036854775808ns",
                           "99999999999999999999s",
                           "1e3s",
                           "1,5s"}) {
    EXPECT_FALSE(ParseGoDuration(text).ok()) << "'" << text << "'";
  }
  EXPECT_THAT(ParseGoDuration("2").status().message(),
              ::testing::HasSubstr("invalid duration '2': missing unit"));
}

}  // namespace
}  // namespace gdt::ci
