#include "launch/rsh_cli.h"

#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gdt::launch {
namespace {

using ::testing::HasSubstr;

struct RshResult {
  int code = -1;
  std::string out, err;
};

RshResult Rsh(std::vector<std::string> args,
              const std::map<std::string, std::string>& env) {
  args.insert(args.begin(), "gdt-rsh");
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  std::ostringstream out, err;
  RshResult result;
  result.code = RunRshCli(
      static_cast<int>(argv.size()), argv.data(), env, [] { return 1; }, out,
      err);
  result.out = out.str();
  result.err = err.str();
  return result;
}

const std::map<std::string, std::string> kMember = {
    {"GDT_COORDINATOR", "127.0.0.1:1"},
    {"GDT_GANG_ID", "g"},
    {"GDT_EPOCH", "1"},
    {"GDT_KV_TOKEN", "t"}};

TEST(RshCliTest, UsageErrorsAreOneLineWithExitTwo) {
  RshResult none = Rsh({}, kMember);
  EXPECT_EQ(none.code, 2);
  EXPECT_THAT(none.err, HasSubstr("usage: gdt-rsh"));

  RshResult no_env = Rsh({"10.0.0.2", "true"}, {});
  EXPECT_EQ(no_env.code, 2);
  EXPECT_THAT(no_env.err, HasSubstr("gdt-rsh: GDT_COORDINATOR"));

  // ssh options (with their values) are skipped; a host alone is not enough.
  RshResult no_command =
      Rsh({"-x", "-o", "StrictHostKeyChecking=no", "10.0.0.2"}, kMember);
  EXPECT_EQ(no_command.code, 2);
  EXPECT_EQ(no_command.err,
            "gdt-rsh: give HOST and COMMAND (gdt-rsh --help)\n");

  RshResult serve = Rsh({"--serve"}, kMember);
  EXPECT_EQ(serve.code, 2);
  EXPECT_THAT(serve.err, HasSubstr("needs GDT_SELF_ADDR"));

  RshResult ready = Rsh({"--ready"}, kMember);
  EXPECT_EQ(ready.code, 2);
  EXPECT_EQ(ready.err,
            "gdt-rsh --ready: GDT_PEERS is not set (run inside a gdt job)\n");
}

TEST(RshCliTest, ReadyNamesWhyMembersCouldNotBeLookedUp) {
  std::map<std::string, std::string> member = kMember;  // Nothing on :1.
  member["GDT_PEERS"] = "10.0.0.2";
  RshResult ready = Rsh({"--ready"}, member);
  EXPECT_EQ(ready.code, 1);
  EXPECT_EQ(ready.out, "0 of 1 members serve gdt-rsh\n");
  EXPECT_THAT(ready.err, HasSubstr("coordinator 127.0.0.1:1 unavailable"));
}

TEST(RshCliTest, HelpGoesToStdout) {
  RshResult help = Rsh({"--help"}, {});
  EXPECT_EQ(help.code, 0);
  EXPECT_THAT(help.out, HasSubstr("No sshd, no keys"));
}

}  // namespace
}  // namespace gdt::launch
