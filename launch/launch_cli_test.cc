#include "launch/launch_cli.h"

#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace gdt::launch {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct Result {
  int code = -1;
  std::string out, err;
};

Result RunCli(std::vector<std::string> args,
              const std::map<std::string, std::string>& env) {
  args.insert(args.begin(), "gdt-launch");
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  std::ostringstream out, err;
  Result result;
  result.code = RunLaunchCli(
      static_cast<int>(argv.size()), argv.data(), env,
      {std::string(GDT_SOURCE_DIR) + "/launch/recipes"}, [] { return 0; }, out,
      err);
  result.out = out.str();
  result.err = err.str();
  return result;
}

std::map<std::string, std::string> Member(int rank) {
  return {{"GDT_NODE_RANK", std::to_string(rank)},
          {"GDT_NUM_NODES", "2"},
          {"GDT_MASTER_ADDR", "10.0.0.1"},
          {"GDT_MASTER_PORT", "41000"},
          {"GDT_PEERS", "10.0.0.1\n10.0.0.2\n"}};
}

TEST(LaunchCliTest, PrintShowsThisMembersRenderedCommand) {
  Result result = RunCli({"--print", "dask"}, Member(1));
  ASSERT_EQ(result.code, 0) << result.err;
  nlohmann::json json = nlohmann::json::parse(result.out);
  EXPECT_EQ(json["role"], "worker");
  EXPECT_EQ(json["command"][1], "tcp://10.0.0.1:41000");
  EXPECT_EQ(json["script_env"]["DASK_SCHEDULER_ADDRESS"],
            "tcp://10.0.0.1:41000");
}

TEST(LaunchCliTest, BadInputIsOneLineAndExitTwo) {
  struct Case {
    std::vector<std::string> args;
    std::map<std::string, std::string> env;
    std::string message;
  };
  std::map<std::string, std::string> no_peers = Member(0);
  no_peers.erase("GDT_PEERS");
  for (const Case& c : std::vector<Case>{
           {{"flink", "--", "true"}, Member(0), "no launcher recipe 'flink'"},
           {{"dask", "--", "true"}, no_peers, "GDT_PEERS is not set"},
           {{"dask"}, Member(0), "give the command rank 0 runs after `--`"},
           {{"generic", "--", "true"},
            Member(0),
            "`head` uses ${GDT_HEAD_COMMAND}, which is not set"},
           // A worker needs the gang's store to learn when rank 0 is done.
           {{"dask"}, Member(1), "GDT_COORDINATOR"},
       }) {
    Result result = RunCli(c.args, c.env);
    EXPECT_EQ(result.code, 2) << c.message;
    EXPECT_THAT(result.err, HasSubstr(c.message));
    EXPECT_EQ(result.err.find('\n'), result.err.size() - 1) << result.err;
  }
  EXPECT_EQ(RunCli({"--no-such-flag", "dask"}, Member(0)).code, 2);
}

TEST(LaunchCliTest, HelpExplainsTheCommand) {
  Result result = RunCli({"--help"}, {});
  EXPECT_EQ(result.code, 0);
  EXPECT_THAT(result.out, HasSubstr("gdt-launch dask -- python3 job.py"));
}

}  // namespace
}  // namespace gdt::launch
