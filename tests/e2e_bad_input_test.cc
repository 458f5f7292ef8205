// Bad input to the real binaries: one clear line naming the problem, the
// runner's exit code for the kind of failure (the executor reads both codes
// from its environment, so unusual values prove nothing is hard-coded), no
// crash, and no member left in a gang.
#include <signal.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/cluster.h"

namespace gdt::test {
namespace {

using std::chrono::seconds;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr int kBuildFailure = 41;
constexpr int kSystemFailure = 42;

std::string Payload(const std::string& name) {
  return absl::StrCat(
      R"({"id":1002,"token":"glcbt-TEST-1002","allow_git_fetch":true,)",
      R"("job_info":{"name":")", name,
      R"(","stage":"test","pipeline_id":77,"project_id":5,)",
      R"("project_name":"model","project_full_path":"ml/model"},)",
      R"("git_info":{"repo_url":"https://gitlab.test/ml/model.git",)",
      R"("ref":"main","sha":"0123456789abcdef0123456789abcdef01234567"},)",
      R"("runner_info":{"timeout":600},"variables":[],"steps":[],)",
      R"("artifacts":[],"cache":[],"dependencies":[],"services":[]})", "\n");
}

class BadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartCoordinator().ok()) << cluster_.Logs();
    job_dir_ = cluster_.dir().Sub("job");
    std::filesystem::create_directories(job_dir_);
    WriteFile(job_dir_ + "/response.json", Payload("train 2/4"));
    WriteConfig("");
    env_ = {
        {"TMPDIR", job_dir_},
        {"BUILD_FAILURE_EXIT_CODE", std::to_string(kBuildFailure)},
        {"SYSTEM_FAILURE_EXIT_CODE", std::to_string(kSystemFailure)},
        {"BUILD_EXIT_CODE_FILE", job_dir_ + "/build_exit_code"},
        {"JOB_RESPONSE_FILE", job_dir_ + "/response.json"},
        {"CUSTOM_ENV_CI_SERVER_URL", "https://gitlab.test"},
        {"CUSTOM_ENV_CI_PIPELINE_ID", "77"},
        {"CUSTOM_ENV_CI_JOB_TIMEOUT", "600"},
        {"CUSTOM_ENV_CI_NODE_INDEX", "2"},
        {"CUSTOM_ENV_CI_NODE_TOTAL", "4"},
        {"CUSTOM_ENV_CI_BUILDS_DIR", cluster_.dir().Sub("builds/1002")},
        {"CUSTOM_ENV_CI_PROJECT_DIR",
         cluster_.dir().Sub("builds/1002/ml/model")},
    };
  }

  void WriteConfig(const std::string& extra,
                   const std::string& coordinator = "") {
    config_ = cluster_.dir().Sub("executor.yaml");
    WriteFile(config_,
              absl::StrCat("coordinator: ",
                           coordinator.empty() ? cluster_.coordinator_endpoint()
                                               : coordinator,
                           "\nbuilds_root: ", cluster_.dir().Sub("builds"),
                           "\ncache_root: ", cluster_.dir().Sub("cache"),
                           "\njoin_timeout_seconds: 3\n", extra));
  }

  CommandResult Executor(const std::vector<std::string>& stage) {
    std::vector<std::string> argv = {BinaryPath("gdt-executor"), "--config",
                                     config_};
    argv.insert(argv.end(), stage.begin(), stage.end());
    return RunProcess(argv, env_, seconds(30));
  }

  // One clear line: the message is there and nothing crashed.
  void ExpectClearFailure(const CommandResult& result, int code,
                          const std::string& message) {
    EXPECT_EQ(result.status.code(), code) << result.output;
    EXPECT_THAT(result.output, HasSubstr(message));
    EXPECT_THAT(result.output, Not(HasSubstr("Sanitizer")));
    EXPECT_THAT(result.output, Not(HasSubstr("terminate called")));
  }

  void ExpectNoGangMember() {
    absl::StatusOr<nlohmann::json> status = cluster_.Status();
    ASSERT_TRUE(status.ok()) << status.status();
    for (const auto& gang : (*status)["gangs"]) {
      for (const auto& member : gang["members"]) {
        EXPECT_FALSE(member.value("present", false)) << gang.dump();
      }
    }
  }

  std::string BuildExitCode() {
    return ReadFile(job_dir_ + "/build_exit_code");
  }

  GdtCluster cluster_;
  std::string job_dir_;
  std::string config_;
  std::map<std::string, std::string> env_;
};

TEST_F(BadInputTest, MissingJobResponseFileIsASystemFailure) {
  env_["JOB_RESPONSE_FILE"] = job_dir_ + "/missing.json";

  CommandResult result = Executor({"prepare"});

  ExpectClearFailure(result, kSystemFailure, "JOB_RESPONSE_FILE");
  ExpectNoGangMember();
}

TEST_F(BadInputTest, GarbledJobResponseFileIsASystemFailure) {
  WriteFile(job_dir_ + "/response.json", "{\"id\": 1002, \"token\": ");

  CommandResult result = Executor({"config"});

  ExpectClearFailure(result, kSystemFailure, "JOB_RESPONSE_FILE");
}

TEST_F(BadInputTest, NodeIndexOutsideGangIsTheUsersMistake) {
  env_["CUSTOM_ENV_CI_NODE_INDEX"] = "5";

  CommandResult result = Executor({"prepare"});

  ExpectClearFailure(result, kBuildFailure, "CI_NODE_INDEX");
  EXPECT_EQ(BuildExitCode().substr(0, 1), "1");
  ExpectNoGangMember();
}

TEST_F(BadInputTest, NodeIndexDisagreeingWithJobNameIsTheUsersMistake) {
  env_["CUSTOM_ENV_CI_NODE_INDEX"] = "3";  // The job name says 2/4.

  CommandResult result = Executor({"prepare"});

  ExpectClearFailure(result, kBuildFailure, "CI_NODE_INDEX");
  ExpectNoGangMember();
}

TEST_F(BadInputTest, NonNumericNodeTotalIsTheUsersMistake) {
  env_["CUSTOM_ENV_CI_NODE_TOTAL"] = "four";

  CommandResult result = Executor({"prepare"});

  ExpectClearFailure(result, kBuildFailure, "CI_NODE_TOTAL");
  ExpectNoGangMember();
}

TEST_F(BadInputTest, NonNumericHangTimeoutIsTheUsersMistake) {
  env_["CUSTOM_ENV_GDT_HANG_TIMEOUT"] = "soon";

  CommandResult result = Executor({"prepare"});

  ExpectClearFailure(result, kBuildFailure, "GDT_HANG_TIMEOUT");
  ExpectNoGangMember();
}

TEST_F(BadInputTest, UnknownExecutorConfigKeyIsASystemFailure) {
  WriteConfig("coordinatr: 127.0.0.1:1\n");

  CommandResult result = Executor({"config"});

  ExpectClearFailure(result, kSystemFailure, "coordinatr");
}

TEST_F(BadInputTest, UnreachableCoordinatorIsASystemFailure) {
  WriteConfig("", "127.0.0.1:1");

  CommandResult result = Executor({"prepare"});

  ExpectClearFailure(result, kSystemFailure, "127.0.0.1:1");
}

TEST_F(BadInputTest, UnreachableAgentIsASystemFailure) {
  ASSERT_TRUE(cluster_.StartAgent({.name = "doomed", .cpu_slots = 1}).ok())
      << cluster_.Logs();
  ASSERT_TRUE(cluster_.WaitForHosts(1, seconds(20)).ok()) << cluster_.Logs();
  WriteFile(job_dir_ + "/response.json", Payload("train 1/1"));
  env_["CUSTOM_ENV_CI_NODE_INDEX"] = "1";
  env_["CUSTOM_ENV_CI_NODE_TOTAL"] = "1";
  CommandResult prepare = Executor({"prepare"});
  ASSERT_TRUE(prepare.status.success()) << prepare.output << cluster_.Logs();
  WriteFile(job_dir_ + "/script", "#!/usr/bin/env bash\necho hi\n");
  cluster_.StopAgents(SIGKILL);

  CommandResult result =
      Executor({"run", job_dir_ + "/script", "build_script"});

  ExpectClearFailure(result, kSystemFailure, "agent");
  Executor({"cleanup"});
}

TEST(BadConfigTest, CoordinatorRejectsUnknownConfigKey) {
  TempDir dir;
  WriteFile(dir.Sub("coord.yaml"), "listen_adress: 127.0.0.1:0\n");

  CommandResult result = RunProcess(
      {BinaryPath("gdt-coord"), "serve", "--config", dir.Sub("coord.yaml")}, {},
      seconds(20));

  EXPECT_EQ(result.status.code(), 2) << result.output;
  EXPECT_THAT(result.output, HasSubstr("listen_adress"));
}

TEST(BadConfigTest, AgentRejectsUnknownConfigKey) {
  TempDir dir;
  WriteFile(dir.Sub("agent.yaml"),
            "coordinator: 127.0.0.1:1\nhost:\n  nmae: gpu-01\n");

  CommandResult result =
      RunProcess({BinaryPath("gdt-agent"), "--config", dir.Sub("agent.yaml")},
                 {}, seconds(20));

  EXPECT_EQ(result.status.code(), 2) << result.output;
  EXPECT_THAT(result.output, HasSubstr("nmae"));
}

// The agent keeps its members' records in scratch_dir: a path that is a
// file stops it at start, not each member later.
TEST(BadConfigTest, AgentRefusesAScratchDirThatIsNoDirectory) {
  TempDir dir;
  WriteFile(dir.Sub("file"), "not a directory\n");
  WriteFile(dir.Sub("agent.yaml"),
            absl::StrCat("coordinator: 127.0.0.1:1\nlisten_address: "
                         "127.0.0.1:0\nscratch_dir: ",
                         dir.Sub("file"),
                         "\nhost:\n  name: gpu-01\n  address: 127.0.0.1\n"
                         "  gpus: 0\n"));

  CommandResult result =
      RunProcess({BinaryPath("gdt-agent"), "--config", dir.Sub("agent.yaml")},
                 {}, seconds(20));

  EXPECT_EQ(result.status.code(), 1) << result.output;
  EXPECT_THAT(result.output, HasSubstr("scratch_dir " + dir.Sub("file") +
                                       " is not a directory"));
}

// Plaintext never by accident: a daemon that other machines could reach
// without a tls section does not start; `tls: off` says it is on purpose.
TEST(BadConfigTest, PlaintextOnAReachableAddressNeedsTlsOff) {
  TempDir dir;
  WriteFile(dir.Sub("coord.yaml"),
            absl::StrCat("listen_address: 0.0.0.0:0\nstate_path: ",
                         dir.Sub("coord.db"), "\n"));
  WriteFile(dir.Sub("agent.yaml"),
            "coordinator: 127.0.0.1:1\nlisten_address: 0.0.0.0:0\n"
            "host:\n  name: gpu-01\n  address: 127.0.0.1\n  gpus: 0\n");

  for (const std::vector<std::string>& argv :
       {std::vector<std::string>{BinaryPath("gdt-coord"), "serve", "--config",
                                 dir.Sub("coord.yaml")},
        std::vector<std::string>{BinaryPath("gdt-agent"), "--config",
                                 dir.Sub("agent.yaml")}}) {
    CommandResult result = RunProcess(argv, {}, seconds(20));

    EXPECT_EQ(result.status.code(), 2) << result.output;
    EXPECT_THAT(result.output, HasSubstr("listen_address 0.0.0.0:0 is "
                                         "reachable from other machines"));
    EXPECT_THAT(result.output, HasSubstr("`tls: off`"));
  }

  // Written explicitly, plaintext starts (with its warning).
  WriteFile(dir.Sub("coord.yaml"),
            absl::StrCat("listen_address: 0.0.0.0:0\nstate_path: ",
                         dir.Sub("coord.db"), "\ntls: off\n"));
  absl::StatusOr<std::unique_ptr<Daemon>> coordinator = Daemon::Start(
      {}, {BinaryPath("gdt-coord"), "serve", "--config", dir.Sub("coord.yaml")},
      {}, dir.Sub("coord.log"), std::chrono::milliseconds(20000));
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  EXPECT_THAT(ReadFile(dir.Sub("coord.log")),
              HasSubstr("WARNING: TLS is off (tls: off)"));
}

// A missing config file gets one line that names the path once.
TEST(BadConfigTest, MissingConfigFileIsNamedOnce) {
  TempDir dir;
  const std::string missing = dir.Sub("absent.yaml");

  for (const std::vector<std::string>& argv :
       {std::vector<std::string>{BinaryPath("gdt-coord"), "serve", "--config",
                                 missing},
        std::vector<std::string>{BinaryPath("gdt-agent"), "--config",
                                 missing}}) {
    CommandResult result = RunProcess(argv, {}, seconds(20));

    EXPECT_EQ(result.status.code(), 2) << result.output;
    EXPECT_THAT(result.output, HasSubstr("cannot read " + missing))
        << result.output;
    EXPECT_EQ(result.output.find(missing), result.output.rfind(missing))
        << result.output;
  }
}

}  // namespace
}  // namespace gdt::test
