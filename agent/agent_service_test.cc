#include "agent/agent_service.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "agent/port_check.h"
#include "common/cgroup.h"
#include "common/member_token.h"
#include "common/mutex.h"
#include "common/subprocess.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "rendezvous/agent_client.h"
#include "testing/free_ports.h"
#include "testing/joined_thread.h"
#include "testing/log_capture.h"
#include "testing/stuck_fuse.h"
#include "testing/temp_dir.h"
#include "testing/wait.h"

namespace gdt::agent {
namespace {

namespace fs = std::filesystem;
using ::gdt::test::JoinedThread;
using ::gdt::test::WaitFor;
using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

// Every stage a test runs is SIGKILLed after this long, so a broken agent
// fails the test instead of hanging it.
constexpr seconds kStageDeadline(30);

// True once `pid` is gone or a zombie waiting for init.
bool ProcessGone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return true;
  std::string line;
  std::getline(stat, line);
  const size_t paren = line.rfind(')');
  return paren == std::string::npos || line.size() < paren + 3 ||
         line[paren + 2] == 'Z' || line[paren + 2] == 'X';
}

// What a stage produced, as the executor would see it.
struct StageResult {
  absl::StatusOr<v1::StageExit> exit = absl::UnknownError("not run");
  std::string out;
  std::string err;
};

// Output seen so far, shared with the signal poller on another thread.
class OutputLog {
 public:
  void Append(v1::OutputStream stream, std::string_view data) {
    MutexLock lock(mu_);
    (stream == v1::OUTPUT_STREAM_STDOUT ? out_ : err_).append(data);
  }
  bool StdoutContains(const std::string& text) {
    MutexLock lock(mu_);
    return out_.find(text) != std::string::npos;
  }
  std::string out() {
    MutexLock lock(mu_);
    return out_;
  }
  std::string err() {
    MutexLock lock(mu_);
    return err_;
  }

 private:
  Mutex mu_;
  std::string out_ ABSL_GUARDED_BY(mu_);
  std::string err_ ABSL_GUARDED_BY(mu_);
};

class AgentServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(root_.empty());
    StartAgent(IsolationOptions{});
  }

  // (Re)starts the supervisor, service and server with `isolation`.
  void StartAgent(IsolationOptions isolation) {
    if (supervisor_ != nullptr) TearDown();
    supervisor_ = std::make_unique<Supervisor>(
        root_ + "/scratch", seconds(10),
        std::map<std::string, std::string>{{"PATH", "/usr/bin:/bin"},
                                           {"BASE_ONLY", "base"},
                                           {"OVERRIDDEN", "base"}},
        std::move(isolation));
    service_ = std::make_unique<AgentService>(*supervisor_);
    absl::StatusOr<std::unique_ptr<AgentServer>> server =
        AgentServer::Start("127.0.0.1:0", *service_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    endpoint_ = "127.0.0.1:" + std::to_string(server_->port());
    client_ = std::make_unique<rendezvous::AgentClient>(endpoint_);
  }

  void TearDown() override {
    supervisor_->Shutdown();
    server_->Shutdown(std::chrono::system_clock::now() + seconds(5));
    server_.reset();
    service_.reset();
    supervisor_.reset();
  }

  static v1::StartStage Start(const std::string& member,
                              const std::string& script) {
    v1::StartStage start;
    start.set_member_id(member);
    start.set_stage("build_script");
    start.set_script(script);
    return start;
  }

  // Sets member `member` up with its builds dir `builds`.
  absl::Status SetUpMember(const std::string& member,
                           const std::string& builds) {
    v1::SetupMemberRequest setup;
    setup.set_member_id(member);
    setup.set_builds_dir(builds);
    return client_->SetupMember(setup, seconds(5));
  }

  // Tears member `member` down, its builds dir too with `remove_builds`:
  // how many processes the agent had to stop.
  absl::StatusOr<uint32_t> TearDownMember(const std::string& member,
                                          bool remove_builds,
                                          seconds deadline = seconds(5)) {
    v1::TeardownMemberRequest teardown;
    teardown.set_member_id(member);
    teardown.set_remove_builds_dir(remove_builds);
    return client_->TeardownMember(teardown, deadline);
  }

  // Runs g1/1's stage "echo ready; sleep 300" on a thread until the member
  // is torn down, its output into `log` and its end into `exit`. A test
  // that ends early shuts the supervisor down to let it go.
  JoinedThread RunSleepingStage(OutputLog& log,
                                absl::StatusOr<v1::StageExit>& exit) {
    return JoinedThread(
        [this, &log, &exit] {
          exit = client_->RunStage(
              Start("g1/1", "echo ready\nsleep 300\n"),
              [&](v1::OutputStream s, std::string_view d) { log.Append(s, d); },
              nullptr);
        },
        [this] { supervisor_->Shutdown(); });
  }

  // Runs a stage to its end. `signal_when` is asked about the output so far
  // every 50 ms; each signal it returns is sent once.
  StageResult Run(const v1::StartStage& start,
                  const std::function<std::optional<v1::Signal>(OutputLog&)>&
                      signal_when = nullptr) {
    OutputLog log;
    const auto deadline = steady_clock::now() + kStageDeadline;
    bool killed = false;
    StageResult result;
    result.exit = client_->RunStage(
        start,
        [&](v1::OutputStream stream, std::string_view data) {
          log.Append(stream, data);
        },
        [&]() -> std::optional<v1::Signal> {
          if (!killed && steady_clock::now() >= deadline) {
            killed = true;
            ADD_FAILURE() << "stage ran past the test deadline";
            return v1::SIGNAL_KILL;
          }
          return signal_when ? signal_when(log) : std::nullopt;
        });
    result.out = log.out();
    result.err = log.err();
    return result;
  }

  // Returns `signal` once, as soon as stdout contains `marker`.
  static std::function<std::optional<v1::Signal>(OutputLog&)> SignalAfter(
      const std::string& marker, v1::Signal signal,
      steady_clock::time_point* sent_at) {
    auto sent = std::make_shared<bool>(false);
    return [=](OutputLog& log) -> std::optional<v1::Signal> {
      if (*sent || !log.StdoutContains(marker)) return std::nullopt;
      *sent = true;
      if (sent_at != nullptr) *sent_at = steady_clock::now();
      return signal;
    };
  }

  test::TempDir temp_;
  const std::string root_ = temp_.path();
  std::unique_ptr<Supervisor> supervisor_;
  std::unique_ptr<AgentService> service_;
  std::unique_ptr<AgentServer> server_;
  std::string endpoint_;
  std::unique_ptr<rendezvous::AgentClient> client_;
};

TEST_F(AgentServiceTest, StreamsStdoutAndStderrInOrderThenTheExitCode) {
  StageResult result =
      Run(Start("g1/1",
                "echo out1; echo err1 >&2; echo out2\n"
                "echo err2 >&2; printf 'no newline'; exit 7\n"));

  ASSERT_TRUE(result.exit.ok()) << result.exit.status();
  EXPECT_EQ(result.exit->exit_code(), 7);
  EXPECT_EQ(result.exit->signal(), 0);
  EXPECT_EQ(result.out, "out1\nout2\nno newline");
  EXPECT_EQ(result.err, "err1\nerr2\n");
}

TEST_F(AgentServiceTest, OutputArrivesWhileTheStageRuns) {
  // The stage waits for its own output to have reached the client, so it
  // only ends if chunks are streamed rather than buffered until exit.
  const std::string flag = root_ + "/seen";
  v1::StartStage start =
      Start("g1/1",
            "echo partial-line-without-newline | tr -d '\\n'\n"
            "while [ ! -e " +
                flag + " ]; do sleep 0.02; done\necho done\n");
  bool created = false;
  StageResult result = Run(start, [&](OutputLog& log) {
    if (!created && log.StdoutContains("partial-line")) {
      std::ofstream(flag.c_str()) << "x";
      created = true;
    }
    return std::optional<v1::Signal>();
  });

  ASSERT_TRUE(result.exit.ok()) << result.exit.status();
  EXPECT_EQ(result.exit->exit_code(), 0);
  EXPECT_EQ(result.out, "partial-line-without-newlinedone\n");
}

TEST_F(AgentServiceTest, ScriptSeesAgentEnvironmentOverlaidWithStageEnv) {
  v1::StartStage start =
      Start("g1/1", "echo \"$BASE_ONLY $OVERRIDDEN $GDT_NODE_RANK\"\n");
  (*start.mutable_env())["OVERRIDDEN"] = "stage";
  (*start.mutable_env())["GDT_NODE_RANK"] = "3";

  StageResult result = Run(start);

  ASSERT_TRUE(result.exit.ok()) << result.exit.status();
  EXPECT_EQ(result.out, "base stage 3\n");
}

TEST_F(AgentServiceTest, StageFileIsWrittenAndItsVariablePointsToIt) {
  v1::StartStage start =
      Start("g1/1", "echo \"$GDT_HOSTFILE\"; cat \"$GDT_HOSTFILE\"\n");
  v1::StageFile* file = start.add_files();
  file->set_env_var("GDT_HOSTFILE");
  file->set_name("hostfile");
  file->set_content("10.0.0.1 slots=8\n10.0.0.2 slots=8\n");

  StageResult result = Run(start);

  ASSERT_TRUE(result.exit.ok()) << result.exit.status();
  const std::string path = supervisor_->ScratchDir("g1/1") + "/hostfile";
  EXPECT_EQ(path[0], '/');
  EXPECT_EQ(result.out, path + "\n10.0.0.1 slots=8\n10.0.0.2 slots=8\n");
}

TEST_F(AgentServiceTest, RunsInScratchDirOrInTheWorkingDirItCreates) {
  StageResult in_scratch = Run(Start("g1/1", "pwd\n"));
  v1::StartStage start = Start("g1/1", "pwd\n");
  start.set_working_dir(root_ + "/builds/project");
  StageResult in_working_dir = Run(start);

  ASSERT_TRUE(in_scratch.exit.ok()) << in_scratch.exit.status();
  EXPECT_EQ(in_scratch.out, supervisor_->ScratchDir("g1/1") + "\n");
  ASSERT_TRUE(in_working_dir.exit.ok()) << in_working_dir.exit.status();
  EXPECT_EQ(in_working_dir.out, root_ + "/builds/project\n");
  // The script itself is kept in the scratch dir, private to the agent.
  struct stat info {};
  ASSERT_EQ(
      stat((supervisor_->ScratchDir("g1/1") + "/build_script-1.sh").c_str(),
           &info),
      0);
  EXPECT_EQ(info.st_mode & 0777, 0700u);
}

TEST_F(AgentServiceTest, TermStopsALongStageAndItsChildWithinTheGrace) {
  v1::StartStage start =
      Start("g1/1", "sleep 300 & echo child=$!\nsleep 300\n");
  start.set_kill_grace_seconds(30);

  const auto begin = steady_clock::now();
  StageResult result =
      Run(start, SignalAfter("child=", v1::SIGNAL_TERM, nullptr));

  ASSERT_TRUE(result.exit.ok()) << result.exit.status();
  EXPECT_LT(steady_clock::now() - begin, seconds(10));  // Well inside 30 s.
  EXPECT_EQ(result.exit->signal(), SIGTERM);
  EXPECT_EQ(result.exit->exit_code(), 128 + SIGTERM);
  const pid_t child = std::stoi(result.out.substr(result.out.find('=') + 1));
  EXPECT_TRUE(WaitFor([&] { return ProcessGone(child); }, seconds(5)));
}

TEST_F(AgentServiceTest, StageIgnoringTermIsKilledAfterTheGrace) {
  v1::StartStage start = Start("g1/1", "trap '' TERM\necho ready\nsleep 300\n");
  start.set_kill_grace_seconds(1);

  steady_clock::time_point sent_at;
  StageResult result =
      Run(start, SignalAfter("ready", v1::SIGNAL_TERM, &sent_at));

  ASSERT_TRUE(result.exit.ok()) << result.exit.status();
  const auto elapsed = steady_clock::now() - sent_at;
  EXPECT_GE(elapsed, milliseconds(900));
  EXPECT_LT(elapsed, seconds(10));
  EXPECT_EQ(result.exit->signal(), SIGKILL);
  EXPECT_EQ(result.exit->exit_code(), 128 + SIGKILL);
}

TEST_F(AgentServiceTest, KillAndIntReachTheScript) {
  StageResult killed =
      Run(Start("g1/1", "trap '' TERM INT\necho ready\nsleep 300\n"),
          SignalAfter("ready", v1::SIGNAL_KILL, nullptr));
  StageResult interrupted =
      Run(Start("g1/1",
                "trap 'echo got-int; exit 5' INT\necho ready\n"
                "while true; do sleep 0.05; done\n"),
          SignalAfter("ready", v1::SIGNAL_INT, nullptr));

  ASSERT_TRUE(killed.exit.ok()) << killed.exit.status();
  EXPECT_EQ(killed.exit->exit_code(), 137);
  ASSERT_TRUE(interrupted.exit.ok()) << interrupted.exit.status();
  EXPECT_EQ(interrupted.exit->exit_code(), 5);
  EXPECT_EQ(interrupted.out, "ready\ngot-int\n");
}

TEST_F(AgentServiceTest, BackgroundProcessIsGoneWhenTheStageEnds) {
  StageResult result = Run(Start("g1/1", "sleep 300 &\necho $!\nexit 0\n"));

  ASSERT_TRUE(result.exit.ok()) << result.exit.status();
  EXPECT_EQ(result.exit->exit_code(), 0);
  const pid_t orphan = std::stoi(result.out);
  EXPECT_TRUE(WaitFor([&] { return ProcessGone(orphan); }, seconds(5)));
  EXPECT_EQ(supervisor_->running_stages(), 0u);
}

TEST_F(AgentServiceTest, TeardownRemovesScratchAndBuildsDirOnly) {
  const std::string builds = root_ + "/builds/g1-1";
  const std::string neighbour = root_ + "/builds/g1-2";
  const std::string cache = root_ + "/cache/g1-1";
  fs::create_directories(neighbour);
  v1::SetupMemberRequest setup;
  setup.set_member_id("g1/1");
  setup.set_builds_dir(builds);
  setup.add_extra_dirs(cache);
  ASSERT_TRUE(client_->SetupMember(setup, seconds(5)).ok());
  ASSERT_TRUE(client_->SetupMember(setup, seconds(5)).ok());  // Idempotent.
  struct stat info {};
  ASSERT_EQ(stat(builds.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0700u);  // Per job: private.
  ASSERT_EQ(stat((root_ + "/builds").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0755u);  // Shared parent.
  EXPECT_TRUE(fs::is_directory(cache));
  ASSERT_EQ(stat(supervisor_->ScratchDir("g1/1").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0700u);
  ASSERT_TRUE(Run(Start("g1/1", "touch " + builds + "/artifact\n")).exit.ok());

  absl::StatusOr<uint32_t> killed = TearDownMember("g1/1", true);

  ASSERT_TRUE(killed.ok()) << killed.status();
  EXPECT_EQ(*killed, 0u);
  EXPECT_FALSE(fs::exists(supervisor_->ScratchDir("g1/1")));
  EXPECT_FALSE(fs::exists(builds));
  EXPECT_TRUE(fs::is_directory(neighbour));
  EXPECT_TRUE(fs::is_directory(cache));
  // Again, and for a member never seen: nothing to do, no error.
  EXPECT_EQ(TearDownMember("g1/1", true).value_or(99), 0u);
  EXPECT_EQ(TearDownMember("never/seen", true).value_or(99), 0u);
}

TEST_F(AgentServiceTest,
       TeardownDetachesWhatTheMemberMountedAndRemovesItsDirs) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: mounts FUSE file systems";
  const std::string builds = root_ + "/builds/g1-1";
  ASSERT_TRUE(SetUpMember("g1/1", builds).ok());
  const std::string scratch = supervisor_->ScratchDir("g1/1");
  fs::create_directories(scratch + "/mnt");
  fs::create_directories(builds + "/mnt");
  // Mounted by the job (through fusermount), whose daemons died with it:
  // they answer nothing and hold their mount points.
  test::StuckFuse in_scratch(scratch + "/mnt");
  if (!in_scratch.error().empty()) GTEST_SKIP() << in_scratch.error();
  test::StuckFuse in_builds(builds + "/mnt");
  ASSERT_TRUE(in_builds.error().empty()) << in_builds.error();
  in_scratch.CloseDevice();
  in_builds.CloseDevice();

  absl::StatusOr<uint32_t> killed = TearDownMember("g1/1", true);

  ASSERT_TRUE(killed.ok()) << killed.status();
  EXPECT_FALSE(fs::exists(scratch));
  EXPECT_FALSE(fs::exists(builds));
}

TEST_F(AgentServiceTest, TeardownKeepsBuildsDirUnlessAsked) {
  const std::string builds = root_ + "/builds/g1-1";
  ASSERT_TRUE(SetUpMember("g1/1", builds).ok());

  ASSERT_TRUE(TearDownMember("g1/1", false).ok());

  EXPECT_TRUE(fs::is_directory(builds));
  EXPECT_FALSE(fs::exists(supervisor_->ScratchDir("g1/1")));
}

TEST_F(AgentServiceTest, TeardownTerminatesRunningStages) {
  OutputLog log;
  absl::StatusOr<v1::StageExit> exit = absl::UnknownError("not run");
  JoinedThread stage = RunSleepingStage(log, exit);
  ASSERT_TRUE(
      WaitFor([&] { return log.StdoutContains("ready"); }, seconds(10)));

  absl::StatusOr<uint32_t> killed = TearDownMember("g1/1", false, seconds(20));
  stage.Join();

  ASSERT_TRUE(killed.ok()) << killed.status();
  EXPECT_EQ(*killed, 1u);
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_EQ(exit->exit_code(), 128 + SIGTERM);
}

// What the heartbeat asks the coordinator about, and the teardown of a
// member its gang let go: never one that runs a stage.
TEST_F(AgentServiceTest, IdleTeardownLeavesAMemberThatRunsAStage) {
  OutputLog log;
  absl::StatusOr<v1::StageExit> exit = absl::UnknownError("not run");
  JoinedThread stage = RunSleepingStage(log, exit);
  ASSERT_TRUE(
      WaitFor([&] { return log.StdoutContains("ready"); }, seconds(10)));
  ASSERT_TRUE(supervisor_->SetupMember("g1/2", root_ + "/builds/2", {}).ok());
  EXPECT_THAT(supervisor_->IdleMembers(), ElementsAre("g1/2"));

  absl::StatusOr<uint32_t> running = supervisor_->TeardownIdleMember("g1/1");
  EXPECT_EQ(running.status().code(), absl::StatusCode::kFailedPrecondition)
      << running.status();
  EXPECT_TRUE(supervisor_->MemberRunning("g1/1"));
  absl::StatusOr<uint32_t> idle = supervisor_->TeardownIdleMember("g1/2");
  ASSERT_TRUE(idle.ok()) << idle.status();
  EXPECT_EQ(*idle, 0u);
  EXPECT_FALSE(std::filesystem::exists(supervisor_->ScratchDir("g1/2")));
  EXPECT_TRUE(std::filesystem::exists(root_ + "/builds/2"));  // Kept.
  EXPECT_THAT(supervisor_->IdleMembers(), IsEmpty());
  EXPECT_TRUE(supervisor_->TeardownIdleMember("unknown/1").ok());

  ASSERT_TRUE(supervisor_->TeardownMember("g1/1", false).ok());
  stage.Join();
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_THAT(supervisor_->IdleMembers(), IsEmpty());
}

TEST_F(AgentServiceTest, SetupErrorNamesThePath) {
  const std::string file = root_ + "/plain-file";
  std::ofstream(file.c_str()) << "x";
  absl::Status status = SetUpMember("g1/1", file + "/builds");

  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr(file + "/builds"));
}

// The executor sends the member's set-up with every stage: an agent that
// never saw a SetupMember (restarted) makes the directories before the
// stage starts, as SetupMember would, and again idempotently.
TEST_F(AgentServiceTest, StageSetsTheMemberUpBeforeItStarts) {
  const std::string builds = root_ + "/builds/g1-1";
  const std::string cache = root_ + "/cache/g1-1";
  v1::StartStage start = Start("g1/1", "pwd\n");
  start.set_working_dir(builds);
  start.mutable_setup()->set_builds_dir(builds);
  start.mutable_setup()->add_extra_dirs(cache);

  StageResult first = Run(start);
  StageResult second = Run(start);

  ASSERT_TRUE(first.exit.ok()) << first.exit.status();
  EXPECT_EQ(first.out, builds + "\n");
  ASSERT_TRUE(second.exit.ok()) << second.exit.status();
  struct stat info {};
  ASSERT_EQ(stat(builds.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0700u);  // As SetupMember makes it.
  EXPECT_TRUE(fs::is_directory(cache));
  // Made by this agent for the member: teardown may remove it.
  ASSERT_TRUE(TearDownMember("g1/1", true).ok());
  EXPECT_FALSE(fs::exists(builds));
}

TEST_F(AgentServiceTest, StageSetUpIsRefusedBeforeTheStageStarts) {
  const std::string file = root_ + "/plain-file";
  std::ofstream(file.c_str()) << "x";
  v1::StartStage bad_dir = Start("g1/1", "touch " + root_ + "/ran\n");
  bad_dir.mutable_setup()->set_builds_dir(file + "/builds");
  v1::StartStage other_member = Start("g1/1", "touch " + root_ + "/ran\n");
  other_member.mutable_setup()->set_member_id("g1/2");

  StageResult refused = Run(bad_dir);
  StageResult mismatch = Run(other_member);

  EXPECT_FALSE(refused.exit.ok());
  EXPECT_THAT(refused.exit.status().message(), HasSubstr(file + "/builds"));
  EXPECT_EQ(mismatch.exit.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(root_ + "/ran")) << "a refused stage ran";
}

TEST_F(AgentServiceTest, BadStartIsRejectedWithInvalidArgument) {
  v1::StartStage start = Start("g1/1", "echo never\n");
  v1::StageFile* file = start.add_files();
  file->set_env_var("X");
  file->set_name("../escape");

  StageResult result = Run(start);

  EXPECT_EQ(result.exit.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.exit.status().message(), HasSubstr("../escape"));
  EXPECT_EQ(result.out, "");
}

TEST_F(AgentServiceTest, FirstMessageMustBeStartStage) {
  auto stub = v1::Agent::NewStub(
      grpc::CreateChannel(endpoint_, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + seconds(10));
  auto stream = stub->RunStage(&context);
  v1::RunStageRequest request;
  request.mutable_signal()->set_signal(v1::SIGNAL_TERM);
  stream->Write(request);
  stream->WritesDone();
  v1::RunStageResponse response;
  while (stream->Read(&response)) {
  }

  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(AgentServiceTest, CancelledClientStopsTheStage) {
  auto stub = v1::Agent::NewStub(
      grpc::CreateChannel(endpoint_, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + seconds(20));
  auto stream = stub->RunStage(&context);
  v1::RunStageRequest request;
  *request.mutable_start() = Start("g1/1", "echo ready\nsleep 300\n");
  request.mutable_start()->set_kill_grace_seconds(5);
  ASSERT_TRUE(stream->Write(request));
  v1::RunStageResponse response;
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.output().data(), "ready\n");

  context.TryCancel();

  EXPECT_TRUE(
      WaitFor([&] { return supervisor_->running_stages() == 0; }, seconds(10)));
  stream->Finish().ok();
}

// The user script's exit goes to the exit handler (the durable outbox)
// before the executor hears of it, with the host's exit time, whether its
// output shows a lost peer, and whether its executor stopped it.
TEST_F(AgentServiceTest, UserScriptExitIsRecordedBeforeTheClientHearsOfIt) {
  Mutex mu;
  std::vector<ExitRecord> records;
  service_->SetExitHandler([&](const ExitRecord& record) {
    MutexLock lock(mu);
    records.push_back(record);
  });
  auto user_script = [](const std::string& script) {
    v1::StartStage start = Start("g1/1002", script);
    start.set_gang_id("g1");
    start.set_epoch(2);
    start.set_member_index(2);
    start.set_job_id(1002);
    start.set_agent_reports_exit(true);
    return start;
  };
  const int64_t before =
      std::chrono::duration_cast<milliseconds>(
          std::chrono::system_clock::now().time_since_epoch())
          .count();
  StageResult failed = Run(user_script(
      "echo 'RuntimeError: Read error: Connection reset by peer'\nexit 3\n"));
  ASSERT_TRUE(failed.exit.ok()) << failed.exit.status();
  {
    MutexLock lock(mu);
    ASSERT_EQ(records.size(), 1u);
    EXPECT_EQ(records[0].Key(), "g1#2#1002");
    EXPECT_EQ(records[0].member_index, 2u);
    EXPECT_EQ(records[0].exit_code, 3);
    EXPECT_TRUE(records[0].peer_suspected);
    EXPECT_FALSE(records[0].cancelled);
    EXPECT_GE(records[0].exited_unix_ms, before);
  }

  StageResult stopped = Run(user_script("echo ready\nsleep 300\n"),
                            SignalAfter("ready", v1::SIGNAL_TERM, nullptr));
  ASSERT_TRUE(stopped.exit.ok()) << stopped.exit.status();
  // Another stage (after_script) and a stage without a gang record nothing.
  v1::StartStage after = user_script("exit 4\n");
  after.set_agent_reports_exit(false);
  ASSERT_TRUE(Run(after).exit.ok());
  ASSERT_TRUE(Run(Start("g1/1002", "exit 5\n")).exit.ok());
  MutexLock lock(mu);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[1].exit_code, 128 + SIGTERM);
  EXPECT_EQ(records[1].signal, SIGTERM);
  EXPECT_TRUE(records[1].cancelled);
  EXPECT_FALSE(records[1].peer_suspected);
}

// torchrun's error file decides culprit or victim over the output: a
// member whose first failed worker raised its own error is the culprit even
// though its other ranks logged a lost peer; one whose recorded error is the
// lost peer is a victim.
TEST_F(AgentServiceTest, TorchrunErrorFileDecidesCulpritOrVictim) {
  Mutex mu;
  std::vector<ExitRecord> records;
  service_->SetExitHandler([&](const ExitRecord& record) {
    MutexLock lock(mu);
    records.push_back(record);
  });
  auto user_script = [](const std::string& script) {
    v1::StartStage start = Start("g1/1002", script);
    start.set_gang_id("g1");
    start.set_epoch(1);
    start.set_member_index(2);
    start.set_job_id(1002);
    start.set_agent_reports_exit(true);
    return start;
  };
  // What torchrun writes for a worker that raised (recorded with @record).
  ASSERT_TRUE(
      Run(user_script("echo 'gloo: Connection reset by peer'\n"
                      "echo '{\"message\": {\"message\": \"ValueError: "
                      "loss is NaN\"}}' > \"$TORCHELASTIC_ERROR_FILE\"\n"
                      "exit 1\n"))
          .exit.ok());
  ASSERT_TRUE(Run(user_script("echo '{\"message\": {\"message\": "
                              "\"RuntimeError: Connection closed by "
                              "peer\"}}' > \"$TORCHELASTIC_ERROR_FILE\"\n"
                              "exit 1\n"))
                  .exit.ok());
  // No error file: the output decides, as before.
  ASSERT_TRUE(
      Run(user_script("echo 'Connection reset by peer'\nexit 1\n")).exit.ok());
  // The error file holds a rank's recorded lost peer, but torchrun's
  // summary shows another rank of this member left with its own code
  // (sys.exit(3)): the culprit.
  ASSERT_TRUE(
      Run(user_script(
              "echo '{\"message\": {\"message\": \"RuntimeError: Connection "
              "closed by peer\"}}' > \"$TORCHELASTIC_ERROR_FILE\"\n"
              "printf 'Failures:\\n[0]:\\n  exitcode  : 3 (pid: 7)\\n"
              "  error_file: <N/A>\\n=====\\n'\n"
              "exit 1\n"))
          .exit.ok());
  MutexLock lock(mu);
  ASSERT_EQ(records.size(), 4u);
  EXPECT_FALSE(records[0].peer_suspected);
  EXPECT_TRUE(records[1].peer_suspected);
  EXPECT_TRUE(records[2].peer_suspected);
  EXPECT_FALSE(records[3].peer_suspected);
}

TEST_F(AgentServiceTest, HangReportAndHeartbeatCarryTheLastProgressAndStep) {
  v1::StartStage start = Start(
      "g1/7", "echo 41 > \"$GDT_PROGRESS_FILE\"; echo written; sleep 30\n");
  start.set_hang_timeout_seconds(1);
  const auto unix_ms = [] {
    return std::chrono::duration_cast<milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  const int64_t before = unix_ms();
  OutputLog log;
  // `hang` is written on this thread, the polls run on another.
  std::optional<v1::HangDetected> hang;
  std::atomic<bool> hung{false};
  std::vector<Supervisor::WatchedStage> watched;
  const auto deadline = steady_clock::now() + kStageDeadline;
  bool stopped = false;
  absl::StatusOr<v1::StageExit> exit = client_->RunStage(
      start,
      [&](v1::OutputStream stream, std::string_view data) {
        log.Append(stream, data);
      },
      [&]() -> std::optional<v1::Signal> {
        if (watched.empty() && log.StdoutContains("written")) {
          watched = supervisor_->WatchedProgress();
        }
        if (stopped || (!hung.load() && steady_clock::now() < deadline)) {
          return std::nullopt;
        }
        stopped = true;
        return v1::SIGNAL_KILL;
      },
      [&](const v1::HangDetected& detected) {
        hang = detected;
        hung.store(true);
      });

  ASSERT_TRUE(exit.ok()) << exit.status();
  ASSERT_TRUE(hang.has_value()) << log.out();
  EXPECT_EQ(hang->idle_seconds(), 1u);
  EXPECT_GE(hang->last_progress_unix_ms(), before);
  EXPECT_LE(hang->last_progress_unix_ms(), unix_ms() - 1000);
  ASSERT_TRUE(hang->has_step());
  EXPECT_EQ(hang->step(), 41u);
  // What the heartbeat sends for the running stage.
  ASSERT_EQ(watched.size(), 1u);
  EXPECT_EQ(watched[0].member_id, "g1/7");
  EXPECT_EQ(watched[0].progress.step, std::optional<uint64_t>(41));
  EXPECT_EQ(std::chrono::duration_cast<milliseconds>(
                watched[0].progress.last.time_since_epoch())
                .count(),
            hang->last_progress_unix_ms());
}

TEST(ReadStageProgressTest, StepOnlyForADecimalNumber) {
  test::TempDir dir;
  const std::string file = dir.path() + "/progress";
  const auto started = std::chrono::system_clock::now() - seconds(3600);
  auto step_of = [&](const std::string& content) {
    std::ofstream(file, std::ios::trunc) << content;
    return ReadStageProgress(file, started).step;
  };
  EXPECT_EQ(step_of(""), std::nullopt);
  EXPECT_EQ(step_of("12\n"), std::optional<uint64_t>(12));
  EXPECT_EQ(step_of("  7 "), std::optional<uint64_t>(7));
  EXPECT_EQ(step_of("-3"), std::nullopt);
  EXPECT_EQ(step_of("+3"), std::nullopt);
  EXPECT_EQ(step_of("step 3"), std::nullopt);
  EXPECT_EQ(step_of(std::string(80, '1')), std::nullopt);
  // The mtime counts, never earlier than the stage's start.
  EXPECT_GT(ReadStageProgress(file, started).last, started);
  const auto later = std::chrono::system_clock::now() + seconds(3600);
  EXPECT_EQ(ReadStageProgress(file, later).last, later);
  EXPECT_EQ(ReadStageProgress(dir.path() + "/missing", started).last, started);
}

// With cgroups that guard ports, a member binds, of the coordinator's
// master port range, only its gang's leased port, and only as rank 0: a
// stage with a new port (a new epoch) moves the exception, one without
// GDT_MASTER_PORT keeps it, one of another rank gets none.
TEST_F(AgentServiceTest, AMemberBindsOnlyItsGangsMasterPortOfTheRange) {
  absl::StatusOr<std::string> own = OwnCgroupDir();
  if (!own.ok()) GTEST_SKIP() << "no cgroup v2 here: " << own.status();
  absl::StatusOr<std::unique_ptr<CgroupTree>> tree =
      CgroupTree::Open(absl::StrCat(*own, "/gdt-agent-ports-", getpid()));
  if (!tree.ok()) GTEST_SKIP() << tree.status();
  std::shared_ptr<CgroupTree> cgroups = std::move(*tree);
  if (absl::Status check = cgroups->CheckPortGuard(); !check.ok()) {
    cgroups->RemoveParent();
    ASSERT_NE(geteuid(), 0u) << check;
    GTEST_SKIP() << "bind programs need privilege: " << check;
  }
  // Two ports in the middle of a range of 5 free ones.
  const int free_ports = test::FreePortRange(5);
  ASSERT_NE(free_ports, 0) << "no 5 free ports in a row";
  const uint32_t port = free_ports + 2;
  const std::string first = std::to_string(port);
  const std::string second = std::to_string(port + 1);
  IsolationOptions isolation;
  isolation.cgroups = cgroups;
  isolation.master_port_range = [port] {
    return std::pair<uint32_t, uint32_t>(port - 2, port + 2);
  };
  StartAgent(std::move(isolation));

  v1::StartStage start =
      Start("g1/1",
            "python3 -c 'import socket, sys\n"
            "for p in sys.argv[1:]:\n"
            "    s = socket.socket(socket.AF_INET6)\n"
            "    try:\n"
            "        s.bind((\"::\", int(p))); print(p, \"bound\")\n"
            "    except OSError as e:\n"
            "        print(p, e.strerror)\n"
            "' " +
                first + " " + second + "\n");
  const std::string refused = " Operation not permitted\n";
  (*start.mutable_env())["GDT_NODE_RANK"] = "0";
  (*start.mutable_env())["GDT_MASTER_PORT"] = first;
  EXPECT_EQ(Run(start).out, first + " bound\n" + second + refused);
  (*start.mutable_env())["GDT_MASTER_PORT"] = second;
  EXPECT_EQ(Run(start).out, first + refused + second + " bound\n")
      << "a new epoch's port";
  start.mutable_env()->clear();
  EXPECT_EQ(Run(start).out, first + refused + second + " bound\n")
      << "a stage without the variable";
  (*start.mutable_env())["GDT_NODE_RANK"] = "1";
  (*start.mutable_env())["GDT_MASTER_PORT"] = second;
  EXPECT_EQ(Run(start).out, first + refused + second + refused)
      << "another rank";

  TearDown();
  for (const std::string& name : cgroups->Children()) {
    EXPECT_TRUE(cgroups->Destroy(name, steady_clock::now() + seconds(10)).ok());
  }
  cgroups->RemoveParent();
  StartAgent(IsolationOptions{});
}

// With cgroups that guard ports, a member connects, of the coordinator's
// master port range, only to its gang's master port at its master's
// address (on this host: loopback too): a stage of a new epoch with another
// port or master moves it, one without GDT_MASTER_PORT keeps it.
TEST_F(AgentServiceTest, AMemberConnectsOnlyToItsGangsMasterEndpoint) {
  absl::StatusOr<std::string> own = OwnCgroupDir();
  if (!own.ok()) GTEST_SKIP() << "no cgroup v2 here: " << own.status();
  absl::StatusOr<std::unique_ptr<CgroupTree>> tree =
      CgroupTree::Open(absl::StrCat(*own, "/gdt-agent-connect-", getpid()));
  if (!tree.ok()) GTEST_SKIP() << tree.status();
  std::shared_ptr<CgroupTree> cgroups = std::move(*tree);
  if (absl::Status check = cgroups->CheckConnectGuard(); !check.ok()) {
    cgroups->RemoveParent();
    ASSERT_NE(geteuid(), 0u) << check;
    GTEST_SKIP() << "connect programs need privilege: " << check;
  }
  // Listeners (outside the member) on the middle two of a range of 5 free
  // ports.
  const int free_ports = test::FreePortRange(5);
  ASSERT_NE(free_ports, 0) << "no 5 free ports in a row";
  const uint32_t port = free_ports + 2;
  std::vector<int> listeners;
  for (uint32_t listened : {port, port + 1}) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<uint16_t>(listened));
    ASSERT_EQ(
        bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)),
        0)
        << "port " << listened << " taken meanwhile";
    ASSERT_EQ(listen(fd, 16), 0);
    listeners.push_back(fd);
  }
  const std::string first = std::to_string(port);
  const std::string second = std::to_string(port + 1);
  IsolationOptions isolation;
  isolation.cgroups = cgroups;
  isolation.master_port_range = [port] {
    return std::pair<uint32_t, uint32_t>(port - 2, port + 2);
  };
  StartAgent(std::move(isolation));

  v1::StartStage start =
      Start("g1/1",
            "python3 -c 'import socket, sys\n"
            "for p in sys.argv[1:]:\n"
            "    try:\n"
            "        socket.create_connection((\"127.0.0.1\", int(p)), 5)"
            ".close(); print(p, \"reached\")\n"
            "    except OSError as e:\n"
            "        print(p, e.strerror)\n"
            "' " +
                first + " " + second + "\n");
  const std::string refused = " Operation not permitted\n";
  (*start.mutable_env())["GDT_NODE_RANK"] = "1";
  (*start.mutable_env())["GDT_MASTER_ADDR"] = "127.0.0.1";
  (*start.mutable_env())["GDT_MASTER_PORT"] = first;
  EXPECT_EQ(Run(start).out, first + " reached\n" + second + refused);
  (*start.mutable_env())["GDT_MASTER_PORT"] = second;
  EXPECT_EQ(Run(start).out, first + refused + second + " reached\n")
      << "a new epoch's port";
  start.mutable_env()->clear();
  EXPECT_EQ(Run(start).out, first + refused + second + " reached\n")
      << "a stage without the variables";
  (*start.mutable_env())["GDT_NODE_RANK"] = "1";
  (*start.mutable_env())["GDT_MASTER_ADDR"] = "192.0.2.7";
  (*start.mutable_env())["GDT_MASTER_PORT"] = second;
  EXPECT_EQ(Run(start).out, first + refused + second + refused)
      << "the master on another host: the port here is another gang's";

  TearDown();
  for (const std::string& name : cgroups->Children()) {
    EXPECT_TRUE(cgroups->Destroy(name, steady_clock::now() + seconds(10)).ok());
  }
  cgroups->RemoveParent();
  for (const int fd : listeners) close(fd);
  StartAgent(IsolationOptions{});
}

// Rank 0 fails while another account listens on the gang's master port
// (a job of another gang bound it first): the job's log says so. A stage
// of another rank, or one that succeeds, adds nothing.
TEST_F(AgentServiceTest, RankZeroNamesAnotherAccountHoldingItsMasterPort) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to listen as uid 61041";
  // A port nothing holds now.
  const int probe = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(
      bind(probe, reinterpret_cast<const sockaddr*>(&address), sizeof(address)),
      0);
  socklen_t length = sizeof(address);
  getsockname(probe, reinterpret_cast<sockaddr*>(&address), &length);
  close(probe);
  const std::string port = std::to_string(ntohs(address.sin_port));
  SpawnOptions squat;
  squat.argv = {"python3", "-c",
                "import socket, time\n"
                "s = socket.socket()\n"
                "s.bind(('0.0.0.0', " +
                    port +
                    "))\n"
                    "s.listen()\n"
                    "time.sleep(60)\n"};
  squat.credentials = SpawnOptions::Credentials{61041, 61041, {}};
  squat.die_with_parent = true;
  absl::StatusOr<std::unique_ptr<Subprocess>> squatter =
      Subprocess::Spawn(squat);
  ASSERT_TRUE(squatter.ok()) << squatter.status();
  const uint32_t port_number = ntohs(address.sin_port);
  ASSERT_TRUE(
      WaitFor([&] { return !ListenerUids(port_number).empty(); }, seconds(20)));
  EXPECT_THAT(ListenerUids(port_number), ElementsAre(61041u));

  v1::StartStage start = Start("g1/1", "echo bind failed >&2; exit 1\n");
  (*start.mutable_env())["GDT_NODE_RANK"] = "0";
  (*start.mutable_env())["GDT_MASTER_PORT"] = port;
  StageResult failed = Run(start);
  ASSERT_TRUE(failed.exit.ok()) << failed.exit.status();
  EXPECT_THAT(failed.err,
              HasSubstr("gdt: the master port " + port +
                        " leased to this gang is held by another account on "
                        "this host (uid 61041), which bound it before rank 0 "
                        "could; the gang cannot meet on it\n"));

  (*start.mutable_env())["GDT_NODE_RANK"] = "1";
  StageResult other_rank = Run(start);
  EXPECT_THAT(other_rank.err, Not(HasSubstr("master port")));
  (*start.mutable_env())["GDT_NODE_RANK"] = "0";
  start.set_script("exit 0\n");
  StageResult succeeded = Run(start);
  EXPECT_THAT(succeeded.err, Not(HasSubstr("master port")));

  (*squatter)->SignalGroup(SIGKILL);
  (*squatter)->WaitUntil(steady_clock::now() + seconds(10));
}

// The heartbeat's list of members this host holds: a member whose stage
// ended before the heartbeat is still in that one (stages shorter than the
// heartbeat interval would otherwise never be seen, and the coordinator
// would take a member that runs only short stages for gone), not in the
// next.
TEST_F(AgentServiceTest, HeartbeatHoldsAMemberWhoseShortStageEndedMeanwhile) {
  EXPECT_THAT(supervisor_->RunningMembers(), IsEmpty());
  StageResult result = Run(Start("g1/1", "exit 0\n"));
  ASSERT_TRUE(result.exit.ok()) << result.exit.status();
  EXPECT_FALSE(supervisor_->MemberRunning("g1/1"));
  EXPECT_THAT(supervisor_->RunningMembers(), ElementsAre("g1/1"));
  EXPECT_THAT(supervisor_->RunningMembers(), IsEmpty());
}

TEST_F(AgentServiceTest, ShutdownTerminatesRunningStagesAndRefusesNewOnes) {
  OutputLog log;
  absl::StatusOr<v1::StageExit> exit = absl::UnknownError("not run");
  JoinedThread stage = RunSleepingStage(log, exit);
  ASSERT_TRUE(
      WaitFor([&] { return log.StdoutContains("ready"); }, seconds(10)));

  supervisor_->Shutdown();
  stage.Join();
  StageResult refused = Run(Start("g1/2", "echo never\n"));

  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_EQ(exit->exit_code(), 128 + SIGTERM);
  EXPECT_EQ(refused.exit.status().code(), absl::StatusCode::kUnavailable);
}

// A TCP socket listening on a kernel-chosen loopback port.
class Listener {
 public:
  Listener() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof(address));
    listen(fd_, 1);
    socklen_t length = sizeof(address);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
  }
  ~Listener() { Close(); }
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  uint32_t port() const { return port_; }

 private:
  int fd_ = -1;
  uint32_t port_ = 0;
};

TEST_F(AgentServiceTest, CheckPortTellsBusyFromFree) {
  Listener listener;
  ASSERT_GT(listener.port(), 0u);

  absl::StatusOr<bool> busy = client_->CheckPort(listener.port(), seconds(5));
  listener.Close();
  absl::StatusOr<bool> free = client_->CheckPort(listener.port(), seconds(5));

  ASSERT_TRUE(busy.ok()) << busy.status();
  EXPECT_FALSE(*busy);
  ASSERT_TRUE(free.ok()) << free.status();
  EXPECT_TRUE(*free);
  EXPECT_EQ(client_->CheckPort(0, seconds(5)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(EscapePathComponentTest, KeepsIdsDistinctAndInsideOneDirectory) {
  EXPECT_EQ(EscapePathComponent("gang-1_a.b"), "gang-1_a.b");
  EXPECT_EQ(EscapePathComponent("g1/12"), "g1%2F12");
  EXPECT_EQ(EscapePathComponent(".."), "%2E.");
  EXPECT_NE(EscapePathComponent("g1/12"), EscapePathComponent("g1_12"));
  EXPECT_NE(EscapePathComponent("a%2Fb"), EscapePathComponent("a/b"));
}

}  // namespace
}  // namespace gdt::agent

// Gdt-rsh.
namespace gdt::agent {
namespace {

struct ExecResult {
  absl::StatusOr<v1::StageExit> exit = absl::UnknownError("not run");
  std::string out;
};

ExecResult Exec(rendezvous::AgentClient& client, const std::string& gang,
                const std::string& token, const std::string& script,
                OutputLog* log = nullptr) {
  v1::ExecInMemberRequest request;
  request.set_gang_id(gang);
  request.set_token(token);
  for (const char* arg : {"/bin/sh", "-c"}) request.add_argv(arg);
  request.add_argv(script);
  OutputLog own;
  OutputLog& output = log != nullptr ? *log : own;
  ExecResult result;
  result.exit = client.ExecInMember(
      request, [&](v1::OutputStream stream, std::string_view data) {
        output.Append(stream, data);
      });
  result.out = output.out();
  return result;
}

TEST_F(AgentServiceTest, ExecInMemberNeedsTheGangTokenAndEndsWithTheMember) {
  const std::string flag = root_ + "/stage-may-end";
  v1::StartStage start =
      Start("g1/1", "while [ ! -e " + flag + " ]; do sleep 0.02; done\n");
  (*start.mutable_env())["GDT_GANG_ID"] = "g1";
  (*start.mutable_env())["GDT_KV_TOKEN"] = "secret";
  (*start.mutable_env())["MEMBER_ONLY"] = "m1";
  start.set_working_dir(root_ + "/work");
  const auto let_go = [&] {
    std::ofstream(flag).put('\n');
    supervisor_->Shutdown();
  };
  JoinedThread stage(
      [&] {
        StageResult result = Run(start);
        EXPECT_TRUE(result.exit.ok()) << result.exit.status();
      },
      let_go);
  ASSERT_TRUE(
      WaitFor([&] { return supervisor_->MemberRunning("g1/1"); }, seconds(10)));

  // The member's environment and working dir, its output and exit code.
  ExecResult ok = Exec(*client_, "g1", "secret",
                       "echo $MEMBER_ONLY $(pwd); echo e >&2; exit 4");
  ASSERT_TRUE(ok.exit.ok()) << ok.exit.status();
  EXPECT_EQ(ok.exit->exit_code(), 4);
  EXPECT_EQ(ok.out, "m1 " + root_ + "/work\n");
  // Wrong token, other gang: refused, nothing runs. Both get one answer of
  // one shape, so a caller without the token cannot tell a gang that runs
  // here from one that does not.
  ExecResult wrong = Exec(*client_, "g1", "secreT", "touch " + root_ + "/ran");
  EXPECT_EQ(wrong.exit.status().code(), absl::StatusCode::kPermissionDenied);
  ExecResult other = Exec(*client_, "g2", "secret", "touch " + root_ + "/ran");
  EXPECT_EQ(other.exit.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(wrong.exit.status().message(),
            absl::StrReplaceAll(other.exit.status().message(),
                                {{"gang g2", "gang g1"}}));
  EXPECT_EQ(wrong.exit.status().message(),
            "gang token refused for gang g1: no member of that gang with this "
            "token runs on this host (it has ended, or the token is wrong)");
  EXPECT_FALSE(fs::exists(root_ + "/ran"));

  // A command still running when the member's stage ends is stopped.
  OutputLog log;
  ExecResult long_running;
  JoinedThread exec(
      [&] {
        long_running =
            Exec(*client_, "g1", "secret", "echo up; exec sleep 60", &log);
      },
      let_go);
  ASSERT_TRUE(WaitFor([&] { return log.StdoutContains("up"); }, seconds(10)));
  std::ofstream(flag).put('\n');
  stage.Join();
  exec.Join();
  ASSERT_TRUE(long_running.exit.ok()) << long_running.exit.status();
  EXPECT_EQ(long_running.exit->signal(), SIGTERM);
  // The member runs no stage any more: its own token hears so, others the
  // same refusal as before.
  absl::StatusOr<v1::StageExit> ended =
      Exec(*client_, "g1", "secret", "true").exit;
  EXPECT_EQ(ended.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ended.status().message(),
            "member g1/1 of gang g1 runs no stage on this host now (its job's "
            "script has ended)");
  EXPECT_EQ(Exec(*client_, "g1", "secreT", "true").exit.status(),
            wrong.exit.status());
  // Torn down: the member is gone, and so is the difference.
  ASSERT_TRUE(supervisor_->TeardownMember("g1/1", false).ok());
  EXPECT_EQ(Exec(*client_, "g1", "secret", "true").exit.status(),
            wrong.exit.status());
}

// Each gdt-rsh command holds one of the agent's threads while it runs: a
// job that starts thousands at once must not make the agent start thousands
// of threads (tasks the agent's own cgroup pays for, and that the member's
// pids.max does not count). One member runs a bounded number at once.
TEST_F(AgentServiceTest, OneMemberRunsABoundedNumberOfCommandsAtOnce) {
  const std::string flag = root_ + "/stage-may-end";
  const std::string release = root_ + "/commands-may-end";
  v1::StartStage start =
      Start("g1/1", "while [ ! -e " + flag + " ]; do sleep 0.02; done\n");
  (*start.mutable_env())["GDT_GANG_ID"] = "g1";
  (*start.mutable_env())["GDT_KV_TOKEN"] = "secret";
  constexpr int kLimit = AgentService::kMaxExecsPerMember;
  std::vector<OutputLog> logs(kLimit);
  std::vector<ExecResult> results(kLimit);
  std::atomic<int> ended{0};
  std::vector<std::thread> execs;
  std::thread stage([&] {
    StageResult result = Run(start);
    EXPECT_TRUE(result.exit.ok()) << result.exit.status();
  });
  // However the test goes, the commands and the stage are let go and
  // joined, so that a failed expectation ends it with its message.
  absl::Cleanup let_go = [&] {
    std::ofstream(release).put('\n');
    std::ofstream(flag).put('\n');
    for (std::thread& exec : execs) exec.join();
    stage.join();
  };
  ASSERT_TRUE(
      WaitFor([&] { return supervisor_->MemberRunning("g1/1"); }, seconds(10)));

  for (int i = 0; i < kLimit; ++i) {
    execs.emplace_back([&, i] {
      results[i] =
          Exec(*client_, "g1", "secret",
               "echo up; while [ ! -e " + release + " ]; do sleep 0.2; done",
               &logs[i]);
      ++ended;
    });
  }
  const auto all_up = [&] {
    for (OutputLog& log : logs) {
      if (!log.StdoutContains("up")) return false;
    }
    return true;
  };
  // Until every command runs, or one has ended without.
  WaitFor([&] { return ended.load() > 0 || all_up(); }, seconds(60));
  if (!all_up()) {
    std::move(let_go).Invoke();
    for (int i = 0; i < kLimit; ++i) {
      if (logs[i].StdoutContains("up")) continue;
      ADD_FAILURE() << "command " << i << " did not run: "
                    << (results[i].exit.ok()
                            ? absl::StrCat("exit ",
                                           results[i].exit->exit_code())
                            : results[i].exit.status().ToString())
                    << ", output '" << logs[i].out() << "'";
    }
    return;
  }
  // One more is refused with one line naming the limit; nothing runs.
  ExecResult over = Exec(*client_, "g1", "secret", "touch " + root_ + "/ran");
  EXPECT_EQ(over.exit.status().code(), absl::StatusCode::kResourceExhausted)
      << over.exit.status();
  EXPECT_THAT(over.exit.status().message(),
              HasSubstr(absl::StrCat("member g1/1 already runs ", kLimit,
                                     " commands through gdt-rsh, the limit")));
  EXPECT_FALSE(fs::exists(root_ + "/ran"));

  // Once they have ended, the member may run commands again.
  std::ofstream(release).put('\n');
  for (std::thread& exec : execs) exec.join();
  execs.clear();
  for (const ExecResult& result : results) {
    ASSERT_TRUE(result.exit.ok()) << result.exit.status();
    EXPECT_EQ(result.exit->exit_code(), 0);
  }
  ExecResult again = Exec(*client_, "g1", "secret", "echo again");
  ASSERT_TRUE(again.exit.ok()) << again.exit.status();
  EXPECT_EQ(again.out, "again\n");
}

// Refusals answer whoever reaches the agent: a job that repeats a refused
// call as fast as it can gets a line for the first, then one per interval
// counting the rest, not a line per call.
TEST_F(AgentServiceTest, RepeatedRefusalsAreLoggedOncePerInterval) {
  test::LogCapture captured;
  const auto start = steady_clock::now();
  constexpr int kCalls = 300;
  for (int i = 0; i < kCalls; ++i) {
    EXPECT_EQ(
        Exec(*client_, "no-such-gang", "guess", "true").exit.status().code(),
        absl::StatusCode::kPermissionDenied);
  }
  const auto took = steady_clock::now() - start;
  const std::string log = captured.text();
  size_t lines = 0;
  for (size_t at = log.find("event=exec_refused"); at != std::string::npos;
       at = log.find("event=exec_refused", at + 1)) {
    ++lines;
  }
  EXPECT_THAT(log, HasSubstr("event=exec_refused gang=no-such-gang"));
  EXPECT_THAT(log, HasSubstr(" refused=1"));
  // One line, and one more per interval the calls took.
  EXPECT_LE(lines, 1 + static_cast<size_t>(took / RefusalLog::kInterval))
      << log;
}

// Stands in for the coordinator's member token check on `service`: "good"
// grants member g1/101 epoch 2, anything else is refused with `refusal`;
// `asked` counts the questions. Good answers are kept for `ttl`.
void GuardWithTokenCheck(AgentService& service, std::atomic<int>* asked,
                         std::string refusal,
                         std::chrono::steady_clock::duration ttl) {
  service.SetMemberTokenCheck(
      [asked, refusal = std::move(refusal)](
          const std::string& token) -> absl::StatusOr<MemberClaims> {
        ++*asked;
        if (token == "good") return MemberClaims{"g1", 2, 101, "", 0};
        return absl::PermissionDeniedError(refusal);
      },
      ttl);
}

// With a member token check configured, an executor without a token the
// coordinator finds good cannot make the agent run anything, and a good
// token opens only its own member: its gang, epoch and job.
TEST_F(AgentServiceTest, StagesRunOnlyForTheMemberToken) {
  // Stands in for the coordinator: "good" grants member g1/101 epoch 2;
  // anything else is refused as the coordinator would.
  std::atomic<int> asked{0};
  AgentService guarded(*supervisor_);
  GuardWithTokenCheck(guarded, &asked,
                      "member token of g1/101 epoch 2 refused: that gang "
                      "epoch has ended",
                      std::chrono::hours(1));
  absl::StatusOr<std::unique_ptr<AgentServer>> server =
      AgentServer::Start("127.0.0.1:0", guarded);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string endpoint = "127.0.0.1:" + std::to_string((*server)->port());
  const std::string marker = root_ + "/ran";
  v1::StartStage start = Start("g1/101", "touch " + marker + "\n");
  start.set_gang_id("g1");
  start.set_epoch(2);
  start.set_job_id(101);
  v1::SetupMemberRequest setup;
  setup.set_member_id("g1/101");
  setup.set_builds_dir(root_ + "/builds/101");
  v1::TeardownMemberRequest teardown;
  teardown.set_member_id("g1/101");
  const auto no_poll = []() -> std::optional<v1::Signal> {
    return std::nullopt;
  };
  const auto ignore = [](v1::OutputStream, std::string_view) {};

  rendezvous::AgentClient anonymous(endpoint);
  absl::Status setup_status = anonymous.SetupMember(setup, seconds(5));
  EXPECT_EQ(setup_status.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(setup_status.message(), HasSubstr("no member token"));
  absl::StatusOr<v1::StageExit> exit =
      anonymous.RunStage(start, ignore, no_poll);
  EXPECT_EQ(exit.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(anonymous.TeardownMember(teardown, seconds(5)).status().code(),
            absl::StatusCode::kUnauthenticated);

  rendezvous::AgentClient stale(endpoint);
  stale.AddMetadata("gdt-member-token", "ended");
  absl::StatusOr<v1::StageExit> refused =
      stale.RunStage(start, ignore, no_poll);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("that gang epoch has ended"));

  // A good token with another member's, gang's, epoch's or job's ids.
  rendezvous::AgentClient member(endpoint);
  member.AddMetadata("gdt-member-token", "good");
  v1::SetupMemberRequest other_setup = setup;
  other_setup.set_member_id("g2/201");
  absl::Status other = member.SetupMember(other_setup, seconds(5));
  EXPECT_EQ(other.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(other.message(),
            "the member token is for member g1/101 (epoch 2), not for member "
            "g2/201");
  for (const auto& forge : std::vector<std::function<void(v1::StartStage&)>>{
           [](v1::StartStage& s) { s.set_gang_id("g2"); },
           [](v1::StartStage& s) { s.set_epoch(3); },
           [](v1::StartStage& s) { s.set_job_id(201); },
           [](v1::StartStage& s) { s.set_member_id("g2/201"); }}) {
    v1::StartStage forged = start;
    forge(forged);
    absl::StatusOr<v1::StageExit> denied =
        member.RunStage(forged, ignore, no_poll);
    EXPECT_EQ(denied.status().code(), absl::StatusCode::kPermissionDenied);
    EXPECT_THAT(denied.status().message(),
                HasSubstr("the member token is for member g1/101 (epoch 2), "
                          "not for member "));
  }
  EXPECT_FALSE(fs::exists(marker));
  EXPECT_FALSE(fs::exists(root_ + "/builds/101"));

  const int before = asked.load();
  ASSERT_TRUE(member.SetupMember(setup, seconds(5)).ok());
  absl::StatusOr<v1::StageExit> ran = member.RunStage(start, ignore, no_poll);
  ASSERT_TRUE(ran.ok()) << ran.status();
  EXPECT_EQ(ran->exit_code(), 0);
  EXPECT_TRUE(fs::exists(marker));
  // The good answer was kept: one question for the whole member.
  EXPECT_EQ(asked.load(), before);
  EXPECT_TRUE(member.TeardownMember(teardown, seconds(5)).ok());
  // After its teardown the coordinator is asked again.
  ASSERT_TRUE(member.SetupMember(setup, seconds(5)).ok());
  EXPECT_EQ(asked.load(), before + 1);
  (*server)->Shutdown(std::chrono::system_clock::now() + seconds(5));
}

// A job on the host that repeats forged member tokens must not make the
// agent ask the coordinator (which serves every gang) once per call: the
// same token is asked about once, and a caller whose tokens keep being
// refused gets a few more questions and then one every interval. A member
// whose token was found good is not slowed by it.
TEST_F(AgentServiceTest, ForgedMemberTokensCostTheCoordinatorBoundedChecks) {
  std::atomic<int> asked{0};
  AgentService guarded(*supervisor_);
  GuardWithTokenCheck(guarded, &asked,
                      "member token was not issued by this coordinator "
                      "(forged or altered)",
                      // Good answers are not kept: every call of the member
                      // asks.
                      std::chrono::seconds(0));
  absl::StatusOr<std::unique_ptr<AgentServer>> server =
      AgentServer::Start("127.0.0.1:0", guarded);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string endpoint = "127.0.0.1:" + std::to_string((*server)->port());
  v1::SetupMemberRequest setup;
  setup.set_member_id("g1/101");
  setup.set_builds_dir(root_ + "/builds/101");
  rendezvous::AgentClient member(endpoint);
  member.AddMetadata("gdt-member-token", "good");
  ASSERT_TRUE(member.SetupMember(setup, seconds(5)).ok());
  ASSERT_EQ(asked.load(), 1);

  constexpr int kCalls = 200;
  const auto start = steady_clock::now();
  rendezvous::AgentClient same(endpoint);
  same.AddMetadata("gdt-member-token", "forged");
  for (int i = 0; i < kCalls; ++i) {
    EXPECT_EQ(same.SetupMember(setup, seconds(5)).code(),
              absl::StatusCode::kPermissionDenied);
  }
  // One question for the one token.
  EXPECT_EQ(asked.load(), 2);

  int exhausted = 0;
  std::string last;
  for (int i = 0; i < kCalls; ++i) {
    rendezvous::AgentClient forger(endpoint);
    forger.AddMetadata("gdt-member-token", "forged-" + std::to_string(i));
    absl::Status status = forger.SetupMember(setup, seconds(5));
    EXPECT_FALSE(status.ok());
    if (status.code() == absl::StatusCode::kResourceExhausted) {
      ++exhausted;
      last = std::string(status.message());
    }
  }
  const auto took = steady_clock::now() - start;
  const int bound = MemberTokenCache::kRefusalBurst + 1 +
                    static_cast<int>(took / MemberTokenCache::kRefusalInterval);
  EXPECT_LE(asked.load() - 2, bound);
  EXPECT_GT(exhausted, 0);
  // The caller is this test's account, found from its connection.
  EXPECT_THAT(
      last, HasSubstr(absl::StrCat("from this caller (uid ", geteuid(), ")")));

  // The member's own token still works right after, and is asked about.
  const int before = asked.load();
  EXPECT_TRUE(member.SetupMember(setup, seconds(5)).ok());
  EXPECT_EQ(asked.load(), before + 1);
  (*server)->Shutdown(std::chrono::system_clock::now() + seconds(5));
}

}  // namespace
}  // namespace gdt::agent
