#include "common/cli_parse.h"

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gdt {
namespace {

struct Parsed {
  std::optional<int> code;
  std::string out;
  std::string err;
  int hosts = 0;
};

// Parses `args` (first argument first) with a --hosts flag.
Parsed Parse(std::vector<std::string> args, const CliExitCodes& codes = {}) {
  Parsed parsed;
  CLI::App app("a test tool", "tool");
  app.add_option("--hosts", parsed.hosts, "how many")
      ->check(CLI::Range(1, 1000));
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  std::ostringstream out;
  std::ostringstream err;
  parsed.code = ParseCommandLine(app, reversed, out, err, codes);
  parsed.out = out.str();
  parsed.err = err.str();
  return parsed;
}

TEST(CliParseTest, GoodFlagsGoOn) {
  const Parsed parsed = Parse({"--hosts", "4"});
  EXPECT_FALSE(parsed.code.has_value());
  EXPECT_EQ(parsed.hosts, 4);
  EXPECT_EQ(parsed.out + parsed.err, "");
}

TEST(CliParseTest, EmptyNumbersAndNegativeUnsignedOnesAreRefused) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{
           {"--seed", "-1"}, {"--seed", ""}, {"--ratio", ""}}) {
    CLI::App app("a test tool", "tool");
    uint64_t seed = 7;
    double ratio = 0.5;
    app.add_option("--seed", seed, "seed");
    app.add_option("--ratio", ratio, "ratio");
    std::vector<std::string> reversed(args.rbegin(), args.rend());
    std::ostringstream out;
    std::ostringstream err;
    EXPECT_EQ(ParseCommandLine(app, reversed, out, err), kExitUsage)
        << args[0] << " '" << args[1] << "'";
    EXPECT_NE(err.str().find(args[0] + ": "), std::string::npos) << err.str();
    EXPECT_EQ(seed, 7u);
    EXPECT_EQ(ratio, 0.5);
  }
}

TEST(CliParseTest, IntegersBeyondTheirRangeAreRefused) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{
           {"--seed", "99999999999999999999"},
           {"--offset", "-99999999999999999999"},
           {"--offset", "9223372036854775808"}}) {
    CLI::App app("a test tool", "tool");
    uint64_t seed = 7;
    int64_t offset = 5;
    app.add_option("--seed", seed, "seed");
    app.add_option("--offset", offset, "offset");
    std::vector<std::string> reversed(args.rbegin(), args.rend());
    std::ostringstream out;
    std::ostringstream err;
    EXPECT_EQ(ParseCommandLine(app, reversed, out, err), kExitUsage)
        << args[0] << " '" << args[1] << "'";
    EXPECT_THAT(err.str(), testing::HasSubstr("out of range")) << args[1];
    EXPECT_EQ(seed, 7u);
    EXPECT_EQ(offset, 5);
  }
}

TEST(CliParseTest, LeadingZerosAreDecimal) {
  CLI::App app("a test tool", "tool");
  uint64_t seed = 0;
  int64_t offset = 0;
  int hosts = 0;
  app.add_option("--seed", seed, "seed");
  app.add_option("--offset", offset, "offset");
  app.add_option("--hosts", hosts, "hosts")->check(CLI::Range(1, 100));
  std::vector<std::string> args = {"--seed", "010",     "--offset",
                                   "-0010",  "--hosts", "0009"};
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  std::ostringstream out;
  std::ostringstream err;
  EXPECT_FALSE(ParseCommandLine(app, reversed, out, err).has_value())
      << err.str();
  EXPECT_EQ(seed, 10u);
  EXPECT_EQ(offset, -10);
  EXPECT_EQ(hosts, 9);
  // The maximum itself and hexadecimal still parse.
  uint64_t largest = 0;
  int64_t hex = 0;
  CLI::App other("a test tool", "tool");
  other.add_option("--largest", largest, "largest");
  other.add_option("--hex", hex, "hex");
  args = {"--largest", "18446744073709551615", "--hex", "0x10"};
  reversed.assign(args.rbegin(), args.rend());
  EXPECT_FALSE(ParseCommandLine(other, reversed, out, err).has_value())
      << err.str();
  EXPECT_EQ(largest, UINT64_MAX);
  EXPECT_EQ(hex, 16);
}

TEST(CliParseTest, AnUnknownCommandIsNamedWithTheCommands) {
  CLI::App app("a test tool", "tool");
  app.add_subcommand("serve", "serve");
  app.add_subcommand("status", "status");
  app.require_subcommand(1);
  std::vector<std::string> reversed = {"bogus"};
  std::ostringstream out;
  std::ostringstream err;
  EXPECT_EQ(ParseCommandLine(app, reversed, out, err), kExitUsage);
  EXPECT_EQ(err.str(),
            "tool: unknown command 'bogus' (commands: serve, status; --help "
            "says more)\n");
}

TEST(CliParseTest, AnUnknownFlagIsNamedBeforeAMissingRequiredOne) {
  // A tool with a required flag, and one with a required subcommand: the
  // flag the user mistyped is what they need to hear about.
  CLI::App with_flag("a test tool", "tool");
  std::string config;
  with_flag.add_option("--config", config, "config")->required();
  CLI::App with_command("a test tool", "tool");
  with_command.add_subcommand("serve", "serve");
  with_command.require_subcommand(1);
  for (CLI::App* app : {&with_flag, &with_command}) {
    std::vector<std::string> reversed = {"--bogus-flag"};
    std::ostringstream out;
    std::ostringstream err;
    EXPECT_EQ(ParseCommandLine(*app, reversed, out, err), kExitUsage);
    EXPECT_THAT(err.str(), testing::HasSubstr("--bogus-flag"));
    EXPECT_THAT(err.str(), testing::Not(testing::HasSubstr("required")));
  }
  // Without an unknown flag the missing one is still named.
  CLI::App alone("a test tool", "tool");
  alone.add_option("--config", config, "config")->required();
  std::vector<std::string> none;
  std::ostringstream out;
  std::ostringstream err;
  EXPECT_EQ(ParseCommandLine(alone, none, out, err), kExitUsage);
  EXPECT_THAT(err.str(), testing::HasSubstr("--config is required"));
}

TEST(CliParseTest, HelpEndsWithTheOkCodeAndPrintsTheFlags) {
  const Parsed parsed = Parse({"--help"});
  EXPECT_EQ(parsed.code, kExitOk);
  EXPECT_NE(parsed.out.find("--hosts"), std::string::npos) << parsed.out;
  EXPECT_EQ(parsed.err, "");
}

TEST(CliParseTest, ABadFlagEndsWithTheUsageCodeAndOneLine) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"--hosts", "x"},
                                             {"--hosts", "-1"},
                                             {"--nodes", "2"},
                                             {"--hosts"}}) {
    const Parsed parsed = Parse(args);
    EXPECT_EQ(parsed.code, kExitUsage) << args[0];
    // One line naming the tool and what is wrong, with the way to --help.
    EXPECT_THAT(parsed.err, testing::StartsWith("tool: ")) << parsed.err;
    EXPECT_THAT(parsed.err, testing::HasSubstr("--h")) << parsed.err;
    EXPECT_THAT(parsed.err, testing::EndsWith(" (--help says more)\n"))
        << parsed.err;
    EXPECT_EQ(std::count(parsed.err.begin(), parsed.err.end(), '\n'), 1)
        << parsed.err;
    EXPECT_EQ(parsed.out, "");
  }
}

TEST(CliParseTest, FiniteRangeRefusesNanAndInfinity) {
  for (const char* value :
       {"nan", "NaN", "inf", "-inf", "0.05", "3601", "x", ""}) {
    double interval = 2;
    CLI::App app("a test tool", "tool");
    app.add_option("--interval", interval, "seconds")
        ->check(FiniteRange(0.1, 3600));
    std::vector<std::string> reversed = {value, "--interval"};
    std::ostringstream out;
    std::ostringstream err;
    EXPECT_EQ(ParseCommandLine(app, reversed, out, err), kExitUsage) << value;
    EXPECT_THAT(
        err.str(),
        ::testing::HasSubstr(*value == '\0'
                                 ? std::string("--interval: a number is needed")
                                 : std::string("--interval: Value ") + value +
                                       " not in range 0.1 to 3600"))
        << value;
  }
  double interval = 0;
  CLI::App app("a test tool", "tool");
  app.add_option("--interval", interval, "seconds")
      ->check(FiniteRange(0.1, 3600));
  std::vector<std::string> reversed = {"0.5", "--interval"};
  std::ostringstream out;
  std::ostringstream err;
  EXPECT_FALSE(ParseCommandLine(app, reversed, out, err).has_value());
  EXPECT_EQ(interval, 0.5);
}

TEST(CliParseTest, AToolMayKeepItsOwnCodes) {
  const CliExitCodes codes{.ok = 0, .usage = 64};
  EXPECT_EQ(Parse({"--help"}, codes).code, 0);
  EXPECT_EQ(Parse({"--hosts", "0"}, codes).code, 64);
}

}  // namespace
}  // namespace gdt
