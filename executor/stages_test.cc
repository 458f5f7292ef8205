// Drives the stage functions in-process against a fake coordinator and a
// fake agent, each a real gRPC service on 127.0.0.1:0.
#include "executor/stages.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/mutex.h"
#include "common/sha256.h"
#include "executor/member_state.h"
#include "gdt/v1/agent.grpc.pb.h"
#include "gdt/v1/coordinator.grpc.pb.h"
#include "gitlab/job_payload.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/fake_agent.h"
#include "testing/fake_coordinator.h"
#include "testing/temp_dir.h"

namespace gdt::executor {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Key;
using ::testing::Not;
using ::testing::Pair;

using test::FakeAgent;
using test::FakeCoordinator;

// A port nothing listens on: bound once, then released.
std::string ClosedEndpoint() {
  FakeAgent unused;
  const std::string endpoint = unused.Serve();
  unused.Stop();
  return endpoint;
}

class StagesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    coordinator_endpoint_ = coordinator_.Serve();
    agent_endpoint_ = agent_.Serve();
    ASSERT_FALSE(coordinator_endpoint_.empty());
    ASSERT_FALSE(agent_endpoint_.empty());

    ASSERT_FALSE(dir_.empty());

    v1::Assignment assignment;
    assignment.set_gang_id("g77");
    assignment.set_epoch(1);
    assignment.set_node_rank(1);
    assignment.set_num_nodes(4);
    assignment.set_procs_per_node(2);
    assignment.set_world_size(8);
    assignment.set_host_name("gpu-02");
    assignment.set_host_address("10.0.0.2");
    assignment.set_agent_endpoint(agent_endpoint_);
    assignment.add_gpu_indices(0);
    assignment.add_gpu_indices(1);
    assignment.set_master_addr("10.0.0.1");
    assignment.set_master_port(31000);
    for (const char* peer : {"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"}) {
      assignment.add_peers(peer);
    }
    assignment.set_launcher(v1::LAUNCHER_TORCHRUN);
    assignment.set_coordinator_endpoint(coordinator_endpoint_);
    coordinator_.set_assignment(assignment);

    gitlab::JobPayload payload;
    payload.id = 1002;
    payload.token = "glcbt-TEST-1002";
    payload.name = "train 2/4";
    payload.project_id = 5;
    payload.pipeline_id = 77;
    payload.timeout_seconds = 600;
    std::ofstream(dir_ + "/response.json")
        << gitlab::SerializeJobPayload(payload);
    environment_ = {
        {"TMPDIR", dir_},
        {"BUILD_FAILURE_EXIT_CODE", "1"},
        {"SYSTEM_FAILURE_EXIT_CODE", "2"},
        {"BUILD_EXIT_CODE_FILE", dir_ + "/build_exit_code"},
        {"JOB_RESPONSE_FILE", dir_ + "/response.json"},
        {"CUSTOM_ENV_CI_SERVER_URL", "https://gitlab.test"},
        {"CUSTOM_ENV_CI_NODE_INDEX", "2"},
        {"CUSTOM_ENV_CI_NODE_TOTAL", "4"},
        {"CUSTOM_ENV_CI_PROJECT_DIR", dir_ + "/builds/1002/ml/model"},
        {"CUSTOM_ENV_GDT_GPUS_PER_NODE", "2"},
        {"CUSTOM_ENV_GDT_NPROC_PER_NODE", "2"},
    };
    config_.coordinator = coordinator_endpoint_;
    config_.builds_root = dir_ + "/builds";
    config_.cache_root = dir_ + "/cache";
    config_.arrival_host = "runner-1";
    config_.join_timeout = std::chrono::seconds(5);
    config_.rpc_timeout = std::chrono::seconds(5);
  }

  void TearDown() override {
    coordinator_.Stop();
    agent_.Stop();
  }

  Outcome Run(const std::vector<std::string>& args) {
    env_ = ReadJobEnv(environment_);
    absl::StatusOr<Invocation> invocation = ParseInvocation(args, {});
    if (!invocation.ok()) return Outcome::SystemFailure("bad test args");
    const StageContext context{config_, env_, signal_, out_, err_, security_};
    return RunInvocation(*invocation, context);
  }

  std::string WriteScript(const std::string& body) {
    const std::string path = dir_ + "/script";
    std::ofstream(path) << body;
    return path;
  }

  std::string ExitCodeFile() {
    std::ifstream file(dir_ + "/build_exit_code");
    std::stringstream text;
    text << file.rdbuf();
    return text.str();
  }

  FakeCoordinator coordinator_;
  FakeAgent agent_;
  std::string coordinator_endpoint_;
  std::string agent_endpoint_;
  test::TempDir temp_;
  const std::string dir_ = temp_.path();
  Environment environment_;
  JobEnv env_;
  Config config_;
  std::atomic<int> signal_{0};
  std::ostringstream out_;
  std::ostringstream err_;
  rendezvous::ClientSecurity security_;
};

TEST_F(StagesTest, ConfigPrintsOnlyTheRunnerJson) {
  Outcome outcome = Run({"config"});

  ASSERT_EQ(outcome.kind, OutcomeKind::kSuccess) << outcome.message;
  const nlohmann::json json = nlohmann::json::parse(out_.str());
  EXPECT_EQ(json["builds_dir"], dir_ + "/builds/1002");
  EXPECT_EQ(json["cache_dir"], dir_ + "/cache");
  EXPECT_EQ(json["builds_dir_is_shared"], false);
  EXPECT_EQ(json["hostname"], "runner-1");
  EXPECT_EQ(json["driver"]["name"], "gdt");
  EXPECT_EQ(json["driver"]["version"], "0.1.0");
  EXPECT_EQ(json.size(), 5u);
}

TEST_F(StagesTest, ConfigFailsEarlyOnBadIdentity) {
  environment_["CUSTOM_ENV_CI_NODE_INDEX"] = "7";

  Outcome outcome = Run({"config"});

  EXPECT_EQ(outcome.kind, OutcomeKind::kUserError);
  EXPECT_THAT(outcome.message, HasSubstr("CI_NODE_INDEX"));
  EXPECT_EQ(out_.str(), "");
}

TEST_F(StagesTest, PrepareJoinsWritesStateAndSetsUpMember) {
  Outcome outcome = Run({"prepare"});

  ASSERT_EQ(outcome.kind, OutcomeKind::kSuccess) << outcome.message;
  ASSERT_EQ(coordinator_.joins().size(), 1u);
  const v1::JoinGangRequest join = coordinator_.joins()[0];
  EXPECT_EQ(join.key().instance(), "https://gitlab.test");
  EXPECT_EQ(join.key().project_id(), 5);
  EXPECT_EQ(join.key().pipeline_id(), 77);
  EXPECT_EQ(join.key().group_name(), "train");
  EXPECT_EQ(join.key().size(), 4u);
  EXPECT_EQ(join.member_index(), 2u);
  EXPECT_EQ(join.job_id(), 1002);
  EXPECT_EQ(join.gpus_per_node(), 2u);
  EXPECT_EQ(join.procs_per_node(), 2u);
  EXPECT_EQ(join.arrival_host(), "runner-1");

  absl::StatusOr<MemberState> state =
      ReadMemberState(dir_ + "/gdt-member.json");
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->assignment.gang_id(), "g77");
  EXPECT_EQ(state->assignment.node_rank(), 1u);
  EXPECT_EQ(state->member_id, "g77/1002");
  EXPECT_EQ(state->member_index, 2);
  EXPECT_EQ(state->job_id, 1002);
  EXPECT_EQ(state->agent_endpoint, agent_endpoint_);
  EXPECT_EQ(state->builds_dir, dir_ + "/builds/1002");
  EXPECT_EQ(state->gang_key.group_name(), "train");

  ASSERT_EQ(agent_.setups().size(), 1u);
  EXPECT_EQ(agent_.setups()[0].member_id(), "g77/1002");
  EXPECT_EQ(agent_.setups()[0].builds_dir(), dir_ + "/builds/1002");
  EXPECT_THAT(agent_.setups()[0].extra_dirs(), ElementsAre(dir_ + "/cache"));

  EXPECT_THAT(out_.str(),
              HasSubstr("gdt: gang train (pipeline 77): 3/4 members present"));
  EXPECT_THAT(out_.str(),
              HasSubstr("gdt: gang g77 admitted: member 2/4 is node rank 1 "
                        "of 4 on host gpu-02 (GPUs: 0,1), master "
                        "10.0.0.1:31000"));
  EXPECT_THAT(coordinator_.leaves(), IsEmpty());
}

// Turns the fixture's assignment into a compact one (no peers, their
// digest) and returns what GetPeers should answer for it.
v1::GetPeersResponse MakeCompact(FakeCoordinator& coordinator) {
  v1::Assignment compact = coordinator.assignment();
  v1::GetPeersResponse peers;
  *peers.mutable_peers() = compact.peers();
  peers.set_peers_sha256(Sha256Hex(absl::StrJoin(compact.peers(), "\n")));
  compact.clear_peers();
  compact.set_peers_sha256(peers.peers_sha256());
  coordinator.set_assignment(compact);
  return peers;
}

TEST_F(StagesTest, PrepareFetchesThePeerListOfACompactAssignmentOnce) {
  coordinator_.set_peers(MakeCompact(coordinator_));

  Outcome outcome = Run({"prepare"});

  ASSERT_EQ(outcome.kind, OutcomeKind::kSuccess) << outcome.message;
  ASSERT_EQ(coordinator_.joins().size(), 1u);
  EXPECT_TRUE(coordinator_.joins()[0].compact_assignment());
  ASSERT_EQ(coordinator_.peer_requests().size(), 1u);
  const v1::GetPeersRequest request = coordinator_.peer_requests()[0];
  EXPECT_EQ(request.gang_id(), "g77");
  EXPECT_EQ(request.epoch(), 1u);
  EXPECT_EQ(request.member_index(), 2u);
  EXPECT_EQ(request.job_id(), 1002);

  // Every stage gets GDT_PEERS and the hostfile as with a full assignment.
  for (const char* stage : {"build_script", "after_script"}) {
    outcome = Run({"run", WriteScript("true\n"), stage});
    ASSERT_EQ(outcome.kind, OutcomeKind::kSuccess) << outcome.message;
  }
  EXPECT_THAT(out_.str(),
              HasSubstr("GDT_PEERS=10.0.0.1\n10.0.0.2\n10.0.0.3\n10.0.0.4\n"));
  EXPECT_THAT(out_.str(), HasSubstr("GDT_HOSTFILE=<10.0.0.1 slots=2\n"
                                    "10.0.0.2 slots=2\n10.0.0.3 slots=2\n"
                                    "10.0.0.4 slots=2\n>"));
  EXPECT_EQ(coordinator_.peer_requests().size(), 1u);
}

TEST_F(StagesTest, PrepareRefusesAPeerListThatIsNotTheAdmittedOne) {
  v1::GetPeersResponse peers = MakeCompact(coordinator_);
  peers.mutable_peers()->RemoveLast();
  coordinator_.set_peers(peers);

  Outcome outcome = Run({"prepare"});

  EXPECT_EQ(outcome.kind, OutcomeKind::kSystemFailure);
  EXPECT_THAT(outcome.message,
              HasSubstr("cannot fetch the peer list of gang g77"));
  EXPECT_THAT(outcome.message, HasSubstr("not the one admitted"));
  EXPECT_EQ(coordinator_.leaves().size(), 1u);
  EXPECT_TRUE(agent_.setups().empty());
}

TEST_F(StagesTest, InfeasibleGangIsUserErrorAndLeaves) {
  coordinator_.set_reject(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                       "gang needs 4 hosts, cluster has 2"));

  Outcome outcome = Run({"prepare"});

  EXPECT_EQ(outcome.kind, OutcomeKind::kUserError);
  EXPECT_THAT(outcome.message, HasSubstr("cluster has 2"));
  EXPECT_EQ(coordinator_.leaves().size(), 1u);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/gdt-member.json"));
}

// What gdt-coord says when the project joins too fast.
grpc::Status JoinRateRefusal() {
  return grpc::Status(
      grpc::StatusCode::RESOURCE_EXHAUSTED,
      "project 5 joins faster than 1 members a second (bursts of 1) "
      "(join_rate_per_project, join_burst_per_project); member 2 of gang "
      "train is refused for now");
}

int CountOf(const std::string& text, const std::string& what) {
  int count = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + what.size())) {
    ++count;
  }
  return count;
}

TEST_F(StagesTest, PrepareRefusedForNowWaitsAsToldAndJoins) {
  config_.join_timeout = std::chrono::seconds(30);
  coordinator_.set_refusals(2, JoinRateRefusal(),
                            std::chrono::milliseconds(300));

  Outcome outcome = Run({"prepare"});

  ASSERT_EQ(outcome.kind, OutcomeKind::kSuccess) << outcome.message;
  const std::vector<std::chrono::steady_clock::time_point> joins =
      coordinator_.join_times();
  ASSERT_EQ(joins.size(), 3u);
  // Each retry came after the coordinator's hint.
  for (size_t i = 1; i < joins.size(); ++i) {
    EXPECT_GE(joins[i] - joins[i - 1], std::chrono::milliseconds(300)) << i;
  }
  // One line for both refusals, with the coordinator's reason.
  EXPECT_EQ(CountOf(out_.str(), "gdt: coordinator refuses joins for now: "), 1)
      << out_.str();
  EXPECT_THAT(out_.str(),
              HasSubstr("gdt: coordinator refuses joins for now: project 5 "
                        "joins faster than 1 members a second"));
  EXPECT_THAT(out_.str(), HasSubstr("; retrying in "));
  EXPECT_THAT(out_.str(), Not(HasSubstr("coordinator unreachable")));
  EXPECT_THAT(out_.str(), HasSubstr("gdt: gang g77 admitted"));
}

TEST_F(StagesTest, PrepareStillRefusedAtTheJoinDeadlineFailsWithTheReason) {
  config_.join_timeout = std::chrono::seconds(2);
  coordinator_.set_refusals(-1, JoinRateRefusal(),
                            std::chrono::milliseconds(300));

  Outcome outcome = Run({"prepare"});

  EXPECT_EQ(outcome.kind, OutcomeKind::kSystemFailure);
  EXPECT_EQ(outcome.message,
            absl::StrCat("coordinator refused this join for 2 s, until the "
                         "join deadline: ",
                         JoinRateRefusal().error_message()));
  // Never faster than the hint: at most one attempt per 300 ms in 2 s.
  EXPECT_GE(coordinator_.joins().size(), 2u);
  EXPECT_LE(coordinator_.joins().size(), 7u);
  EXPECT_EQ(CountOf(out_.str(), "gdt: coordinator refuses joins for now: "), 1)
      << out_.str();
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/gdt-member.json"));
}

TEST_F(StagesTest, ResourceExhaustedWithoutARetryHintIsFinal) {
  coordinator_.set_reject(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                       "received message larger than max"));

  Outcome outcome = Run({"prepare"});

  EXPECT_EQ(outcome.kind, OutcomeKind::kSystemFailure);
  EXPECT_THAT(outcome.message, HasSubstr("received message larger than max"));
  EXPECT_EQ(coordinator_.joins().size(), 1u);
  EXPECT_THAT(out_.str(), Not(HasSubstr("retrying")));
}

TEST_F(StagesTest, PrepareWithUnreachableCoordinatorIsSystemFailure) {
  config_.coordinator = ClosedEndpoint();
  config_.join_timeout = std::chrono::seconds(1);
  config_.rpc_timeout = std::chrono::seconds(1);

  Outcome outcome = Run({"prepare"});

  EXPECT_EQ(outcome.kind, OutcomeKind::kSystemFailure);
  EXPECT_THAT(outcome.message, HasSubstr(config_.coordinator));
  EXPECT_THAT(out_.str(), HasSubstr("coordinator unreachable"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/gdt-member.json"));
}

TEST_F(StagesTest, PrepareWithUnreachableAgentLeavesGang) {
  v1::Assignment assignment;
  assignment.set_gang_id("g77");
  assignment.set_agent_endpoint(ClosedEndpoint());
  coordinator_.set_assignment(assignment);

  Outcome outcome = Run({"prepare"});

  EXPECT_EQ(outcome.kind, OutcomeKind::kSystemFailure);
  EXPECT_THAT(outcome.message, HasSubstr(assignment.agent_endpoint()));
  EXPECT_EQ(coordinator_.leaves().size(), 1u);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/gdt-member.json"));
}

TEST_F(StagesTest, PrepareInterruptedBeforeJoinIsSystemFailure) {
  signal_ = SIGTERM;

  Outcome outcome = Run({"prepare"});

  EXPECT_EQ(outcome.kind, OutcomeKind::kSystemFailure);
  EXPECT_THAT(coordinator_.joins(), IsEmpty());
}

TEST_F(StagesTest, FailingBuildScriptIsBuildFailureWithItsCode) {
  ASSERT_EQ(Run({"prepare"}).kind, OutcomeKind::kSuccess);
  agent_.set_exit_code(3);
  const std::string script = WriteScript("#!/usr/bin/env bash\nexit 3\n");

  Outcome outcome = Run({"run", script, "build_script"});

  EXPECT_EQ(outcome.kind, OutcomeKind::kScriptFailure);
  EXPECT_EQ(outcome.script_exit_code, 3);
  EXPECT_EQ(FinishOutcome(outcome, env_.exit_codes, err_), 1);
  EXPECT_EQ(ExitCodeFile(), "3\n");
  ASSERT_EQ(coordinator_.exits().size(), 1u);
  EXPECT_EQ(coordinator_.exits()[0].exit_code(), 3);
  EXPECT_EQ(coordinator_.exits()[0].gang_id(), "g77");
  EXPECT_EQ(coordinator_.exits()[0].job_id(), 1002);
  EXPECT_FALSE(coordinator_.exits()[0].cancelled());
  // The failing member's log carries the same root-cause line as its peers'.
  EXPECT_THAT(err_.str(), HasSubstr("gdt: gang g77 failed: member 2/4 (job "
                                    "1002 on host gpu-02) exited 3 at "
                                    "10:42:13 UTC; stopping\n"));
}

TEST_F(StagesTest, PeerFailureStopsTheStageWithThePeerFailureCode) {
  ASSERT_EQ(Run({"prepare"}).kind, OutcomeKind::kSuccess);
  agent_.set_wait_for_signal(true);
  const std::string reason =
      "gang g77 failed: member 3/4 (job 1003 on host gpu-03) exited 137 at "
      "10:42:13 UTC; stopping";
  coordinator_.set_watch(FakeCoordinator::WatchMode::kFailAtOnce, reason, 1003);

  Outcome outcome = Run({"run", WriteScript("sleep 100\n"), "build_script"});

  EXPECT_EQ(outcome.kind, OutcomeKind::kScriptFailure);
  EXPECT_EQ(outcome.script_exit_code, kPeerFailureExitCode);
  EXPECT_EQ(outcome.message, reason);
  EXPECT_THAT(agent_.signals(), ElementsAre(v1::SIGNAL_TERM));
  EXPECT_EQ(FinishOutcome(outcome, env_.exit_codes, err_), 1);
  EXPECT_EQ(ExitCodeFile(), "75\n");
  EXPECT_THAT(err_.str(), HasSubstr("gdt: " + reason + "\n"));
  ASSERT_EQ(coordinator_.watches().size(), 1u);
  EXPECT_EQ(coordinator_.watches()[0].gang_id(), "g77");
  EXPECT_EQ(coordinator_.watches()[0].member_index(), 2u);
  EXPECT_EQ(coordinator_.watches()[0].job_id(), 1002);
  ASSERT_EQ(coordinator_.exits().size(), 1u);
  EXPECT_FALSE(coordinator_.exits()[0].cancelled());
}

TEST_F(StagesTest, ScriptBrokenByAnEarlierPeerFailureGetsThePeerCode) {
  ASSERT_EQ(Run({"prepare"}).kind, OutcomeKind::kSuccess);
  agent_.set_exit_code(1);  // e.g. a collective broke when the peer died.
  coordinator_.set_watch(FakeCoordinator::WatchMode::kFailAtOnce,
                         "gang g77 failed: member 1/4 (...)", 1001);

  Outcome outcome = Run({"run", WriteScript("false\n"), "build_script"});

  EXPECT_EQ(outcome.kind, OutcomeKind::kScriptFailure);
  EXPECT_EQ(outcome.script_exit_code, kPeerFailureExitCode);
  EXPECT_EQ(outcome.message, "gang g77 failed: member 1/4 (...)");
}

TEST_F(StagesTest, ExitBarrierWaitsForTheWholeGang) {
  ASSERT_EQ(Run({"prepare"}).kind, OutcomeKind::kSuccess);
  out_.str("");
  coordinator_.set_watch(FakeCoordinator::WatchMode::kFollowExits, "", 0,
                         std::chrono::milliseconds(300));

  Outcome outcome = Run({"run", WriteScript("true\n"), "build_script"});

  ASSERT_EQ(outcome.kind, OutcomeKind::kSuccess) << outcome.message;
  EXPECT_THAT(out_.str(), HasSubstr("gdt: waiting for 3 other members to "
                                    "finish\n"));
  ASSERT_EQ(coordinator_.exits().size(), 1u);
  EXPECT_EQ(coordinator_.exits()[0].exit_code(), 0);
}

TEST_F(StagesTest, ExitBarrierFailsWhenAPeerFailsLater) {
  ASSERT_EQ(Run({"prepare"}).kind, OutcomeKind::kSuccess);
  const std::string reason =
      "gang g77 failed: member 4/4 (job 1004 on host gpu-04) exited 3 at "
      "10:42:13 UTC; stopping";
  coordinator_.set_watch(FakeCoordinator::WatchMode::kFollowExits, reason, 1004,
                         std::chrono::milliseconds(100));

  Outcome outcome = Run({"run", WriteScript("true\n"), "build_script"});

  EXPECT_EQ(outcome.kind, OutcomeKind::kScriptFailure);
  EXPECT_EQ(outcome.script_exit_code, kPeerFailureExitCode);
  EXPECT_EQ(outcome.message, reason);
}

TEST_F(StagesTest, ExitBarrierIsBounded) {
  ASSERT_EQ(Run({"prepare"}).kind, OutcomeKind::kSuccess);
  coordinator_.set_watch(FakeCoordinator::WatchMode::kNeverEnd);
  config_.exit_barrier_timeout = std::chrono::seconds(1);

  Outcome outcome = Run({"run", WriteScript("true\n"), "build_script"});

  EXPECT_EQ(outcome.kind, OutcomeKind::kScriptFailure);
  EXPECT_EQ(outcome.script_exit_code, kPeerFailureExitCode);
  EXPECT_THAT(outcome.message, HasSubstr("exit barrier timed out after 1 s"));
  EXPECT_THAT(outcome.message, HasSubstr("members 1, 3, 4 had not finished"));
}

TEST_F(StagesTest, BuildScriptGetsContractAndStreamsOutput) {
  ASSERT_EQ(Run({"prepare"}).kind, OutcomeKind::kSuccess);
  out_.str("");
  const std::string script = WriteScript("#!/usr/bin/env bash\ntrue\n");

  config_.kill_grace = std::chrono::seconds(45);  // The runner's setting.

  Outcome outcome = Run({"run", script, "build_script"});

  ASSERT_EQ(outcome.kind, OutcomeKind::kSuccess) << outcome.message;
  ASSERT_EQ(agent_.starts().size(), 1u);
  const v1::StartStage start = agent_.starts()[0];
  EXPECT_EQ(start.kill_grace_seconds(), 45u);
  EXPECT_EQ(start.member_id(), "g77/1002");
  EXPECT_EQ(start.stage(), "build_script");
  EXPECT_EQ(start.script(), "#!/usr/bin/env bash\ntrue\n");
  EXPECT_EQ(start.working_dir(), dir_ + "/builds/1002");
  EXPECT_THAT(start.env(), Contains(Pair("GDT_NODE_RANK", "1")));
  EXPECT_THAT(start.env(), Contains(Pair("PET_NNODES", "4")));
  EXPECT_THAT(start.env(), Contains(Pair("CUDA_VISIBLE_DEVICES", "0,1")));
  EXPECT_THAT(start.env(),
              Contains(Pair("GDT_CHECKPOINT_DIR",
                            dir_ + "/builds/1002/ml/model/checkpoints")));
  ASSERT_EQ(start.files_size(), 1);
  EXPECT_EQ(start.files(0).env_var(), "GDT_HOSTFILE");
  EXPECT_THAT(out_.str(), HasSubstr("GDT_MASTER_PORT=31000\n"));
  EXPECT_THAT(err_.str(), HasSubstr("stderr line\n"));
  ASSERT_EQ(coordinator_.exits().size(), 1u);
  EXPECT_EQ(coordinator_.exits()[0].exit_code(), 0);
}

TEST_F(StagesTest, OtherStagesRunPlainly) {
  ASSERT_EQ(Run({"prepare"}).kind, OutcomeKind::kSuccess);
  const std::string script = WriteScript("git clone ...\n");

  for (const char* stage : {"get_sources", "clear_worktree", "after_script"}) {
    EXPECT_EQ(Run({"run", script, stage}).kind, OutcomeKind::kSuccess);
  }
  EXPECT_EQ(Run({"run", script, "step_release"}).kind, OutcomeKind::kSuccess);

  ASSERT_EQ(agent_.starts().size(), 4u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_THAT(agent_.starts()[i].env(), IsEmpty());
    EXPECT_EQ(agent_.starts()[i].files_size(), 0);
  }
  EXPECT_THAT(agent_.starts()[3].env(), Contains(Key("GDT_GANG_ID")));
  EXPECT_THAT(coordinator_.exits(), IsEmpty());
}

// The runner runs several short stages per job: a stage's run returns as
// soon as the agent reports the exit, not at the next look for a signal to
// forward (every 50 ms), which made every stage take at least 50 ms. Each
// stage runs 10 ms on the agent; the fastest of several runs is compared,
// so that a loaded machine slowing some of them does not fail the test.
TEST_F(StagesTest, ShortStagesReturnWithoutWaitingForTheSignalPoll) {
  ASSERT_EQ(Run({"prepare"}).kind, OutcomeKind::kSuccess);
  const std::string script = WriteScript("true\n");
  agent_.set_stage_duration(std::chrono::milliseconds(10));
  constexpr int kStages = 20;

  std::chrono::steady_clock::duration fastest =
      std::chrono::steady_clock::duration::max();
  for (int i = 0; i < kStages; ++i) {
    const auto start = std::chrono::steady_clock::now();
    ASSERT_EQ(Run({"run", script, "get_sources"}).kind, OutcomeKind::kSuccess);
    fastest = std::min(fastest, std::chrono::steady_clock::now() - start);
  }

  EXPECT_EQ(agent_.starts().size(), static_cast<size_t>(kStages));
  EXPECT_LT(fastest, std::chrono::milliseconds(50));
}

// A run stage is one call to the agent: the member's set-up (its builds
// and cache dirs, re-created by an agent that restarted) rides on the stage.
TEST_F(StagesTest, RunStageCarriesTheMemberSetUpInOneCall) {
  ASSERT_EQ(Run({"prepare"}).kind, OutcomeKind::kSuccess);
  ASSERT_EQ(agent_.setups().size(), 1u);

  for (const char* stage : {"get_sources", "build_script"}) {
    ASSERT_EQ(Run({"run", WriteScript("true\n"), stage}).kind,
              OutcomeKind::kSuccess);
  }

  EXPECT_EQ(agent_.setups().size(), 1u) << "a run stage called SetupMember";
  ASSERT_EQ(agent_.starts().size(), 2u);
  for (const v1::StartStage& start : agent_.starts()) {
    ASSERT_TRUE(start.has_setup()) << start.stage();
    EXPECT_EQ(start.setup().member_id(), "g77/1002");
    EXPECT_EQ(start.setup().builds_dir(), dir_ + "/builds/1002");
    EXPECT_THAT(start.setup().extra_dirs(), ElementsAre(dir_ + "/cache"));
  }
}

// A live agent that refuses the stage (here: the member's directories
// cannot be set up) is named as refusing it, with its reason, in the
// gang's root cause; only a broken stream is a lost agent.
TEST_F(StagesTest, AStageTheAgentRefusesIsNotReportedAsALostAgent) {
  ASSERT_EQ(Run({"prepare"}).kind, OutcomeKind::kSuccess);
  agent_.set_stage_refusal(
      grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                   "builds dir /srv/builds/1002 is not a directory"));

  Outcome outcome = Run({"run", WriteScript("true\n"), "build_script"});

  EXPECT_EQ(outcome.kind, OutcomeKind::kSystemFailure);
  ASSERT_EQ(coordinator_.exits().size(), 1u);
  const std::string reason = coordinator_.exits()[0].lost_reason();
  EXPECT_THAT(reason, HasSubstr("refused build_script: builds dir "
                                "/srv/builds/1002 is not a directory"));
  EXPECT_THAT(reason, Not(HasSubstr("unreachable")));
}

TEST_F(StagesTest, SignalIsForwardedToTheStage) {
  ASSERT_EQ(Run({"prepare"}).kind, OutcomeKind::kSuccess);
  agent_.set_wait_for_signal(true);
  signal_ = SIGTERM;

  Outcome outcome = Run({"run", WriteScript("sleep 100\n"), "build_script"});

  EXPECT_EQ(outcome.kind, OutcomeKind::kScriptFailure);
  EXPECT_EQ(outcome.script_exit_code, 143);
  EXPECT_THAT(agent_.signals(), ElementsAre(v1::SIGNAL_TERM));
  // A cancelled member fails its gang, and keeps its own code.
  ASSERT_EQ(coordinator_.exits().size(), 1u);
  EXPECT_TRUE(coordinator_.exits()[0].cancelled());
  EXPECT_THAT(outcome.message, HasSubstr("gang g77 failed: member 2/4"));
}

TEST_F(StagesTest, RunWithoutPrepareIsSystemFailure) {
  Outcome outcome = Run({"run", WriteScript("true\n"), "build_script"});

  EXPECT_EQ(outcome.kind, OutcomeKind::kSystemFailure);
  EXPECT_THAT(outcome.message, HasSubstr("prepare did not complete"));
  EXPECT_EQ(FinishOutcome(outcome, env_.exit_codes, err_), 2);
}

TEST_F(StagesTest, UnreachableAgentIsSystemFailureNamingIt) {
  ASSERT_EQ(Run({"prepare"}).kind, OutcomeKind::kSuccess);
  absl::StatusOr<MemberState> state =
      ReadMemberState(dir_ + "/gdt-member.json");
  ASSERT_TRUE(state.ok()) << state.status();
  state->agent_endpoint = ClosedEndpoint();
  ASSERT_TRUE(WriteMemberState(dir_ + "/gdt-member.json", *state).ok());

  Outcome outcome = Run({"run", WriteScript("true\n"), "build_script"});

  EXPECT_EQ(outcome.kind, OutcomeKind::kSystemFailure);
  EXPECT_THAT(outcome.message, HasSubstr(state->agent_endpoint));
}

TEST_F(StagesTest, CleanupTearsDownAndLeaves) {
  ASSERT_EQ(Run({"prepare"}).kind, OutcomeKind::kSuccess);

  Outcome outcome = Run({"cleanup"});

  EXPECT_EQ(outcome.kind, OutcomeKind::kSuccess);
  ASSERT_EQ(agent_.teardowns().size(), 1u);
  EXPECT_EQ(agent_.teardowns()[0].member_id(), "g77/1002");
  EXPECT_TRUE(agent_.teardowns()[0].remove_builds_dir());
  ASSERT_EQ(coordinator_.leaves().size(), 1u);
  EXPECT_EQ(coordinator_.leaves()[0].job_id(), 1002);
  EXPECT_EQ(coordinator_.leaves()[0].member_index(), 2u);
  EXPECT_EQ(coordinator_.leaves()[0].key().group_name(), "train");
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/gdt-member.json"));
}

// With HA replicas, a leave refused while no leader is elected is tried
// again until one is, so the member's slots are not held until
// reconciliation; a lone coordinator's refusal is not retried (its restart
// reconciles the member).
TEST_F(StagesTest, CleanupRetriesALeaveUntilAReplicaLeads) {
  ASSERT_EQ(Run({"prepare"}).kind, OutcomeKind::kSuccess);
  const grpc::Status no_leader(
      grpc::StatusCode::UNAVAILABLE,
      "gdt-coord at " + coordinator_endpoint_ +
          " is a standby and no leader is elected yet");
  coordinator_.set_leave_refusals(2, no_leader);
  config_.coordinator = ClosedEndpoint() + "," + coordinator_endpoint_;
  config_.rpc_timeout = std::chrono::seconds(2);

  EXPECT_EQ(Run({"cleanup"}).kind, OutcomeKind::kSuccess);
  EXPECT_EQ(coordinator_.leaves().size(), 3u);
}

TEST_F(StagesTest, CleanupLeavesOnceWithALoneCoordinator) {
  ASSERT_EQ(Run({"prepare"}).kind, OutcomeKind::kSuccess);
  coordinator_.set_leave_refusals(
      1, grpc::Status(grpc::StatusCode::UNAVAILABLE, "restarting"));

  EXPECT_EQ(Run({"cleanup"}).kind, OutcomeKind::kSuccess);
  EXPECT_EQ(coordinator_.leaves().size(), 1u);
}

TEST_F(StagesTest, CleanupWithoutAdmissionLeavesByPayloadKey) {
  Outcome outcome = Run({"cleanup"});

  EXPECT_EQ(outcome.kind, OutcomeKind::kSuccess);
  EXPECT_THAT(agent_.teardowns(), IsEmpty());
  ASSERT_EQ(coordinator_.leaves().size(), 1u);
  EXPECT_EQ(coordinator_.leaves()[0].key().pipeline_id(), 77);
  EXPECT_EQ(coordinator_.leaves()[0].key().size(), 4u);
}

TEST_F(StagesTest, CleanupAlwaysSucceeds) {
  config_.coordinator = ClosedEndpoint();
  config_.rpc_timeout = std::chrono::seconds(1);
  environment_.erase("JOB_RESPONSE_FILE");

  EXPECT_EQ(Run({"cleanup"}).kind, OutcomeKind::kSuccess);
}

TEST(InvocationTest, ParsesTheRunnersArgv) {
  absl::StatusOr<Invocation> run = ParseInvocation(
      {"--config", "/e.yaml", "run", "/tmp/s/script", "build_script"}, {});
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->stage, Invocation::Stage::kRun);
  EXPECT_EQ(run->config_path, "/e.yaml");
  EXPECT_EQ(run->script_path, "/tmp/s/script");
  EXPECT_EQ(run->stage_name, "build_script");

  absl::StatusOr<Invocation> config =
      ParseInvocation({"config", "--config=/f.yaml"}, {});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->stage, Invocation::Stage::kConfig);
  EXPECT_EQ(config->config_path, "/f.yaml");

  EXPECT_FALSE(ParseInvocation({}, {}).ok());
  EXPECT_FALSE(ParseInvocation({"run", "/s"}, {}).ok());
  EXPECT_FALSE(ParseInvocation({"prepare", "extra"}, {}).ok());
  EXPECT_FALSE(ParseInvocation({"deploy"}, {}).ok());
  EXPECT_FALSE(ParseInvocation({"--verbose", "config"}, {}).ok());
}

TEST(InvocationTest, ConfigLoadFailureSparesCleanup) {
  Invocation cleanup;
  cleanup.stage = Invocation::Stage::kCleanup;
  Invocation prepare;
  prepare.stage = Invocation::Stage::kPrepare;
  const absl::Status status = absl::NotFoundError("no file");

  EXPECT_EQ(ConfigLoadFailure(cleanup, status).kind, OutcomeKind::kSuccess);
  EXPECT_EQ(ConfigLoadFailure(prepare, status).kind,
            OutcomeKind::kSystemFailure);
}

}  // namespace
}  // namespace gdt::executor
