// End to end, as an attacker who got hold of what a job or a host holds:
// a member token (its executor's state file) or the host token. A secured
// cluster (admin token, required host tokens) runs real run-local jobs
// through gdt-executor on a gdt-agent; the test then talks to that agent
// and the coordinator directly with the stolen secrets, and checks that
// nothing it tries runs, and that the gangs it aimed at are untouched.
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/member_token.h"
#include "common/secret.h"
#include "common/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "rendezvous/agent_client.h"
#include "rendezvous/coordinator_client.h"
#include "rendezvous/metadata.h"
#include "testing/cluster.h"
#include "tests/e2e_util.h"

namespace gdt::test {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

// A coordinator that requires host tokens and an agent "local" (4 CPU
// slots) holding the token an operator issued for it.
class MemberTokenAttackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string admin = cluster_.dir().Sub("admin.token");
    WriteFile(admin, "e2e-admin-secret\n");
    cluster_.SetCoordinatorExtraConfig(absl::StrCat(
        "admin_token_file: ", admin, "\nrequire_host_tokens: true\n"));
    ASSERT_TRUE(cluster_.StartCoordinator().ok()) << cluster_.Logs();
    CommandResult created =
        RunProcess({BinaryPath("gdt-coord"), "hosts", "token", "create",
                    "local", "--coordinator", cluster_.coordinator_endpoint()},
                   {{"GDT_ADMIN_TOKEN_FILE", admin}}, seconds(20));
    ASSERT_TRUE(created.status.success()) << created.output;
    host_token_ = std::string(absl::StripAsciiWhitespace(created.output));
    const std::string token_file = cluster_.dir().Sub("host.token");
    WriteFile(token_file, created.output);
    ASSERT_EQ(chmod(token_file.c_str(), 0600), 0);
    AgentSpec agent;
    agent.name = "local";
    agent.cpu_slots = 4;
    agent.host_token_file = token_file;
    ASSERT_TRUE(cluster_.StartAgent(agent).ok()) << cluster_.Logs();
    ASSERT_TRUE(cluster_.WaitForHosts(1, seconds(20)).ok()) << cluster_.Logs();

    // Two 2-member gangs whose scripts wait until the test releases them.
    project_ = cluster_.dir().Sub("project");
    fs::create_directories(project_);
    std::string yaml;
    for (const char* job : {"train", "victim"}) {
      const std::string flag = cluster_.dir().Sub(absl::StrCat(job, ".go"));
      absl::StrAppend(
          &yaml,
          GangJobYaml({.name = job,
                       .script = absl::StrCat("while [ ! -e ", flag,
                                              " ]; do sleep 0.1; done\n"
                                              "echo member $CI_NODE_INDEX of ",
                                              job, " ran")}));
    }
    WriteFile(project_ + "/.gitlab-ci.yml", yaml);
  }

  // Starts run-local for `job` as pipeline `pipeline`, its executors keeping
  // their state under TMPDIR <dir>/<job>-tmp (where the test steals it).
  std::unique_ptr<Subprocess> StartJob(const std::string& job,
                                       int64_t pipeline) {
    const std::string tmp = TmpOf(job);
    fs::create_directories(tmp);
    SpawnOptions options;
    options.argv = cluster_.RunLocalArgv(
        project_, job,
        {"--pipeline-id", std::to_string(pipeline), "--first-job-id",
         std::to_string(pipeline * 100)});
    for (std::string& arg : options.argv) {
      if (arg.starts_with("TMPDIR=")) arg = "TMPDIR=" + tmp;
    }
    options.env = CurrentEnvironment();
    options.die_with_parent = true;
    absl::StatusOr<std::unique_ptr<Subprocess>> process =
        Subprocess::Spawn(options);
    EXPECT_TRUE(process.ok()) << process.status();
    return process.ok() ? std::move(*process) : nullptr;
  }

  std::string TmpOf(const std::string& job) {
    return cluster_.dir().Sub(job + "-tmp");
  }

  // The executor state (gdt-member.json) of each member of `job` whose job
  // runs, once both members have one with a member token.
  std::vector<nlohmann::json> StealStates(const std::string& job) {
    std::vector<nlohmann::json> states;
    EXPECT_TRUE(WaitFor(
        [&] {
          states.clear();
          // Executors come and go meanwhile: no throwing iteration.
          std::error_code error;
          for (fs::directory_iterator it(TmpOf(job), error), end;
               !error && it != end; it.increment(error)) {
            const std::string text =
                ReadFile(it->path().string() + "/gdt-member.json");
            nlohmann::json state = nlohmann::json::parse(text, nullptr, false);
            if (state.is_discarded() || TokenOf(state).empty()) continue;
            states.push_back(std::move(state));
          }
          return states.size() == 2;
        },
        seconds(60)))
        << cluster_.Logs();
    return states;
  }

  static std::string TokenOf(const nlohmann::json& state) {
    if (!state.contains("assignment")) return "";
    const nlohmann::json& assignment = state["assignment"];
    return assignment.value("member_token", "");
  }

  // The StartStage an executor sends for `state`'s build_script, running
  // `script`.
  static v1::StartStage StartFor(const nlohmann::json& state,
                                 const std::string& script) {
    v1::StartStage start;
    start.set_member_id(state["member_id"].get<std::string>());
    start.set_stage("build_script");
    start.set_script(script);
    start.set_gang_id(state["assignment"]["gang_id"].get<std::string>());
    start.set_epoch(state["assignment"].value("epoch", 1u));
    start.set_member_index(state["member_index"].get<uint32_t>());
    start.set_job_id(state["job_id"].get<int64_t>());
    return start;
  }

  // Runs `start` on the agent presenting `token`; returns how it ended.
  absl::StatusOr<v1::StageExit> RunWith(const std::string& token,
                                        const v1::StartStage& start) {
    rendezvous::AgentClient agent(agent_endpoint_);
    agent.AddMetadata(rendezvous::kMemberTokenMetadata, token);
    return agent.RunStage(
        start, [](v1::OutputStream, std::string_view) {},
        []() -> std::optional<v1::Signal> { return std::nullopt; });
  }

  void Release(const std::string& job) {
    WriteFile(cluster_.dir().Sub(job + ".go"), "");
  }

  void ExpectRan(Subprocess& run, const std::string& job) {
    CommandResult result = FinishRun(run, seconds(120));
    EXPECT_TRUE(result.status.success()) << result.output << cluster_.Logs();
    for (int index = 1; index <= 2; ++index) {
      const std::string log = ReadFile(absl::StrCat(
          cluster_.run_dir(), "/logs/", job, "-", index, "-2.log"));
      EXPECT_THAT(
          log, HasSubstr(absl::StrCat("member ", index, " of ", job, " ran\n")))
          << log;
    }
  }

  GdtCluster cluster_;
  std::string host_token_;
  std::string project_;
  std::string agent_endpoint_;
};

// A member token stolen from a running job stops working once its gang is
// done, and no token computed from the host token is accepted.
TEST_F(MemberTokenAttackTest, StolenOrForgedMemberTokensRunNothing) {
  std::unique_ptr<Subprocess> run = StartJob("train", 11);
  ASSERT_NE(run, nullptr);
  const std::vector<nlohmann::json> states = StealStates("train");
  ASSERT_EQ(states.size(), 2u);
  const nlohmann::json& state = states[0];
  agent_endpoint_ = state["agent_endpoint"].get<std::string>();
  const std::string marker = cluster_.dir().Sub("attacker-ran");
  const v1::StartStage start = StartFor(state, "touch " + marker + "\n");

  // Forged from the host token: as its HMAC key, its SHA-256 as key, and
  // signed in the new format with either.
  const std::string member_id = start.member_id();
  const MemberClaims claims{start.gang_id(), start.epoch(), start.job_id(),
                            "local", 4102444800000};
  for (const std::string& forged :
       {HmacSha256Hex(SecretSha256Hex(host_token_),
                      absl::StrCat("gdt-member-v1:", member_id)),
        HmacSha256Hex(host_token_, absl::StrCat("gdt-member-v1:", member_id)),
        MintMemberToken(host_token_, claims),
        MintMemberToken(SecretSha256Hex(host_token_), claims)}) {
    absl::StatusOr<v1::StageExit> refused = RunWith(forged, start);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied)
        << refused.status();
  }
  EXPECT_FALSE(fs::exists(marker));

  Release("train");
  ExpectRan(*run, "train");

  // The gang is done: its members' own tokens with their own ids open
  // nothing any more, neither a stage nor a setup nor a teardown.
  for (const nlohmann::json& done : states) {
    const v1::StartStage own = StartFor(done, "touch " + marker + "\n");
    absl::StatusOr<v1::StageExit> refused = RunWith(TokenOf(done), own);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied)
        << refused.status();
    EXPECT_THAT(refused.status().message(), HasSubstr(" refused: "));
    rendezvous::AgentClient agent(agent_endpoint_);
    agent.AddMetadata(rendezvous::kMemberTokenMetadata, TokenOf(done));
    v1::SetupMemberRequest setup;
    setup.set_member_id(own.member_id());
    setup.set_builds_dir(cluster_.dir().Sub("attacker-builds"));
    EXPECT_EQ(agent.SetupMember(setup, seconds(10)).code(),
              absl::StatusCode::kPermissionDenied);
    v1::TeardownMemberRequest teardown;
    teardown.set_member_id(own.member_id());
    EXPECT_EQ(agent.TeardownMember(teardown, seconds(10)).status().code(),
              absl::StatusCode::kPermissionDenied);
  }
  EXPECT_FALSE(fs::exists(marker));
  EXPECT_FALSE(fs::exists(cluster_.dir().Sub("attacker-builds")));
}

// A running job's own member token, with another running gang's ids: the
// agent refuses the stage (so no broken stream of it can report the other
// gang's member lost), and the other gang finishes normally.
TEST_F(MemberTokenAttackTest, OwnTokenCannotActForAnotherGang) {
  std::unique_ptr<Subprocess> victim = StartJob("victim", 21);
  ASSERT_NE(victim, nullptr);
  const std::vector<nlohmann::json> victims = StealStates("victim");
  ASSERT_EQ(victims.size(), 2u);
  std::unique_ptr<Subprocess> attacker = StartJob("train", 22);
  ASSERT_NE(attacker, nullptr);
  const std::vector<nlohmann::json> mine = StealStates("train");
  ASSERT_EQ(mine.size(), 2u);
  agent_endpoint_ = mine[0]["agent_endpoint"].get<std::string>();
  const std::string token = TokenOf(mine[0]);
  const std::string marker = cluster_.dir().Sub("attacker-ran");

  // The victim's ids throughout, or only its gang and job under one's own
  // member id: both are refused with one line naming the token's member.
  v1::StartStage theirs = StartFor(victims[0], "touch " + marker + "\n");
  v1::StartStage mixed = theirs;
  mixed.set_member_id(mine[0]["member_id"].get<std::string>());
  for (const v1::StartStage& start : {theirs, mixed}) {
    absl::StatusOr<v1::StageExit> refused = RunWith(token, start);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied)
        << refused.status();
    EXPECT_THAT(refused.status().message(),
                HasSubstr(absl::StrCat("the member token is for member ",
                                       mine[0]["member_id"].get<std::string>(),
                                       " (epoch ")));
  }
  // Nor may it tear the victim's member down.
  rendezvous::AgentClient agent(agent_endpoint_);
  agent.AddMetadata(rendezvous::kMemberTokenMetadata, token);
  v1::TeardownMemberRequest teardown;
  teardown.set_member_id(theirs.member_id());
  EXPECT_EQ(agent.TeardownMember(teardown, seconds(10)).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_FALSE(fs::exists(marker));

  Release("victim");
  Release("train");
  ExpectRan(*victim, "victim");
  ExpectRan(*attacker, "train");
  // No stage of the attacker's ever started, so none broke off.
  EXPECT_THAT(cluster_.Logs(),
              ::testing::Not(HasSubstr("event=executor_gone")));
}

// Someone with the host token registers the live host with an endpoint of
// theirs: refused while the real agent heartbeats, and the next job runs on
// the real agent.
TEST_F(MemberTokenAttackTest, LiveHostIsNotTakenOverByAnotherEndpoint) {
  rendezvous::CoordinatorClient rogue(cluster_.coordinator_endpoint());
  rogue.AddMetadata(rendezvous::kHostTokenMetadata, host_token_);
  v1::HostSpec spec;
  spec.set_name("local");
  spec.set_address("127.0.0.1");
  spec.set_agent_endpoint("127.0.0.1:1");
  spec.set_cpu_slots(4);
  absl::StatusOr<uint32_t> registered = rogue.RegisterHost(spec, seconds(10));
  EXPECT_EQ(registered.status().code(), absl::StatusCode::kFailedPrecondition)
      << registered.status();
  EXPECT_THAT(registered.status().message(),
              HasSubstr("host local is registered with the agent at "));
  EXPECT_THAT(registered.status().message(),
              HasSubstr("an agent at 127.0.0.1:1 may register it only after"));

  std::unique_ptr<Subprocess> run = StartJob("train", 31);
  ASSERT_NE(run, nullptr);
  Release("train");
  ExpectRan(*run, "train");
}

}  // namespace
}  // namespace gdt::test
