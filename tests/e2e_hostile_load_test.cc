// End to end under hostile load: a real 2-member DDP gang (torchrun, gloo)
// trains through run-local (gdt-ci → gdt-executor → gdt-coord → gdt-agent
// on loopback) against a coordinator that verifies every member with a
// (fake) GitLab answering in 1 s, while someone who can reach the
// coordinator attacks it from this process. Whatever the attack, the gang
// succeeds, `gdt-coord status` keeps answering, and the coordinator's memory
// and CPU return to about where they were. Each attack is bounded in count
// and time.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/host_port.h"
#include "gdt/v1/coordinator.grpc.pb.h"
#include "gitlab/fake_gitlab_api.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "testing/cluster.h"
#include "testing/fake_gitlab_jobs.h"
#include "testing/stalled_streams.h"
#include "tests/e2e_util.h"

namespace gdt::test {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

// VmRSS of `pid` in MiB; -1 when unreadable.
double RssMiB(int pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024;
  }
  return -1;
}

// CPU time (user + system) of `pid` in seconds; -1 when unreadable.
double CpuSeconds(int pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(stat)),
                   std::istreambuf_iterator<char>());
  const size_t end = text.rfind(')');
  if (end == std::string::npos) return -1;
  std::istringstream fields(text.substr(end + 2));
  std::string field;
  double ticks = 0;
  // Fields after the command: state is 3; utime and stime are 14 and 15.
  for (int index = 3; index <= 15 && fields >> field; ++index) {
    if (index == 14 || index == 15) ticks += std::stod(field);
  }
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// A member's JoinGang stream that is started and forgotten; counts how it
// ended.
class FireAndForgetJoin final
    : public grpc::ClientReadReactor<v1::JoinGangEvent> {
 public:
  struct Outcomes {
    std::atomic<int> outstanding{0};
    std::atomic<int> ok{0};
    std::atomic<int> refused{0};    // Unauthenticated, permission.
    std::atomic<int> retry{0};      // Unavailable: the member retries.
    std::atomic<int> exhausted{0};  // Resource exhausted (a limit).
    std::atomic<int> invalid{0};    // Invalid argument.
    std::atomic<int> deadline{0};   // Still waiting at its deadline.
    std::atomic<int> other{0};
  };

  FireAndForgetJoin(v1::Coordinator::Stub* stub, v1::JoinGangRequest request,
                    const std::string& job_token, milliseconds deadline,
                    Outcomes* outcomes)
      : request_(std::move(request)), outcomes_(outcomes) {
    context_.AddMetadata("gdt-job-token", job_token);
    context_.set_deadline(DeadlineIn(deadline));
    ++outcomes_->outstanding;
    stub->async()->JoinGang(&context_, &request_, this);
    StartRead(&event_);
    StartCall();
  }
  void OnReadDone(bool ok) override {
    if (ok) StartRead(&event_);
  }
  void OnDone(const grpc::Status& status) override {
    switch (status.error_code()) {
      case grpc::StatusCode::OK:
        ++outcomes_->ok;
        break;
      case grpc::StatusCode::UNAUTHENTICATED:
      case grpc::StatusCode::PERMISSION_DENIED:
        ++outcomes_->refused;
        break;
      case grpc::StatusCode::UNAVAILABLE:
        ++outcomes_->retry;
        break;
      case grpc::StatusCode::RESOURCE_EXHAUSTED:
        ++outcomes_->exhausted;
        break;
      case grpc::StatusCode::INVALID_ARGUMENT:
        ++outcomes_->invalid;
        break;
      case grpc::StatusCode::DEADLINE_EXCEEDED:
        ++outcomes_->deadline;
        break;
      default:
        ++outcomes_->other;
    }
    --outcomes_->outstanding;
    delete this;
  }

 private:
  grpc::ClientContext context_;
  v1::JoinGangRequest request_;
  v1::JoinGangEvent event_;
  FireAndForgetJoin::Outcomes* outcomes_;
};

// What an executor of job `job_id` ("<group> <index>/<size>") sends.
v1::JoinGangRequest JoinRequest(const std::string& instance, int64_t pipeline,
                                const std::string& group, uint32_t size,
                                uint32_t index, int64_t job_id) {
  v1::JoinGangRequest request;
  request.mutable_key()->set_instance(instance);
  request.mutable_key()->set_project_id(1);
  request.mutable_key()->set_pipeline_id(pipeline);
  request.mutable_key()->set_group_name(group);
  request.mutable_key()->set_size(size);
  request.set_member_index(index);
  request.set_job_id(job_id);
  request.set_job_name(absl::StrCat(group, " ", index, "/", size));
  request.set_procs_per_node(1);
  request.set_launcher(v1::LAUNCHER_NONE);
  return request;
}

// The sanitizer build keeps freed memory in a 256 MiB quarantine and gives
// pages back to the system lazily; with a small quarantine and prompt
// release the coordinator's RSS shows what it still holds. The daemons
// inherit this environment.
void SmallSanitizerQuarantine() {
  const char* asan = getenv("ASAN_OPTIONS");
  if (asan != nullptr && strstr(asan, "quarantine_size_mb=8") != nullptr) {
    return;
  }
  const std::string asan_options =
      absl::StrCat(asan != nullptr && *asan != '\0' ? asan : "",
                   asan != nullptr && *asan != '\0' ? ":" : "",
                   "quarantine_size_mb=8:thread_local_quarantine_size_kb=64:"
                   "allocator_release_to_os_interval_ms=100");
  setenv("ASAN_OPTIONS", asan_options.c_str(), 1);
}

// The GitLab instance run-local's jobs name (CI_SERVER_URL).
constexpr char kInstance[] = "http://gitlab.local";

class HostileLoadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SmallSanitizerQuarantine();
    gitlab::FakeGitLabApi::Options options;
    options.job_answer_delay = seconds(1);
    gitlab_ = StartFakeGitLab(
        {// The gang: jobs 7001 and 7002 of pipeline 7 (run-local's job ids
         // with --first-job-id 7000 and its job tokens).
         RunLocalJob(7001, "train 1/2", 7), RunLocalJob(7002, "train 2/2", 7),
         // A valid job of another pipeline whose token an attacker holds.
         RunLocalJob(9001, "attack 1/2", 9)},
        options);
    ASSERT_NE(gitlab_, nullptr);
    cluster_.SetCoordinatorExtraConfig(
        absl::StrCat("gitlab_url: ", gitlab_->url(),
                     // What run-local's jobs name as their instance.
                     "\ngitlab_instance_url: http://gitlab.local\n"));
    ASSERT_TRUE(cluster_.StartCoordinator().ok()) << cluster_.Logs();
    AgentSpec agent;
    agent.name = "local";
    agent.cpu_slots = 2;
    agent.member_uid_pool = MemberAccountsIfRoot();
    ASSERT_TRUE(cluster_.StartAgent(agent).ok()) << cluster_.Logs();
    ASSERT_TRUE(cluster_.WaitForHosts(1, seconds(20)).ok()) << cluster_.Logs();
    stub_ = v1::Coordinator::NewStub(grpc::CreateChannel(
        cluster_.coordinator_endpoint(), grpc::InsecureChannelCredentials()));
  }

  std::string MemberLog(int index) {
    return ReadFile(
        absl::StrCat(cluster_.run_dir(), "/logs/train-", index, "-2.log"));
  }

  // Starts the gang (about 20 s of training) and waits until both members
  // have trained a step.
  std::unique_ptr<Subprocess> StartTraining() {
    const std::string project = MakeDdpProject(cluster_.dir(), /*nodes=*/2,
                                               /*procs_per_node=*/1);
    std::unique_ptr<Subprocess> run =
        StartRunLocal(cluster_, project, "train",
                      {"--pipeline-id", "7", "--first-job-id", "7000", "--var",
                       "DDP_STEPS=400", "--var", "DDP_STEP_SECONDS=0.05"});
    if (run == nullptr) return nullptr;
    const bool training = WaitFor(
        [&] {
          return MemberLog(1).find("first step done") != std::string::npos &&
                 MemberLog(2).find("first step done") != std::string::npos;
        },
        seconds(90));
    EXPECT_TRUE(training) << MemberLog(1) << MemberLog(2) << cluster_.Logs();
    return run;
  }

  // Runs `attack` on its own thread while reading status every 500 ms the
  // way an operator does (`gdt-coord status --json`); every read must
  // answer, within 10 s. Returns how many reads answered; `read_times()`
  // says how long each took and how long the attack ran.
  int WhileStatusAnswers(const std::function<void()>& attack) {
    std::atomic<bool> done{false};
    const auto attack_start = std::chrono::steady_clock::now();
    std::thread attacker([&] {
      attack();
      done = true;
    });
    int reads = 0;
    read_times_.clear();
    while (!done) {
      const auto start = std::chrono::steady_clock::now();
      absl::StatusOr<nlohmann::json> status = cluster_.Status();
      const auto took = std::chrono::steady_clock::now() - start;
      absl::StrAppend(&read_times_, read_times_.empty() ? "" : ", ",
                      std::chrono::duration_cast<milliseconds>(took).count(),
                      " ms");
      EXPECT_TRUE(status.ok()) << status.status();
      EXPECT_LT(took, seconds(10)) << "status reads: " << read_times_;
      if (status.ok()) {
        ++reads;
        // The gang never fails meanwhile.
        for (const auto& gang : (*status)["gangs"]) {
          EXPECT_NE(gang.value("state", ""), "failed") << gang.dump();
        }
      }
      std::this_thread::sleep_for(milliseconds(500));
    }
    attacker.join();
    absl::StrAppend(&read_times_, "; the attack ran ",
                    std::chrono::duration_cast<milliseconds>(
                        std::chrono::steady_clock::now() - attack_start)
                        .count(),
                    " ms");
    return reads;
  }

  // How long each status read of the last WhileStatusAnswers took.
  const std::string& read_times() const { return read_times_; }

  // The gang ends successfully; every member's log says so.
  void ExpectGangSucceeds(Subprocess& run) {
    CommandResult result = FinishRun(run, seconds(120));
    EXPECT_TRUE(result.status.success()) << result.output << cluster_.Logs();
    for (int index = 1; index <= 2; ++index) {
      EXPECT_THAT(MemberLog(index), HasSubstr("Job succeeded"))
          << MemberLog(index);
    }
  }

  // Within 30 s the coordinator is back near `baseline_mib` of memory and
  // idle again (under a quarter of a core over one second).
  void ExpectCoordinatorSettles(double baseline_mib) {
    const int pid = cluster_.coordinator_pid();
    ASSERT_GT(pid, 0);
    double rss = 0;
    EXPECT_TRUE(WaitFor(
        [&] {
          rss = RssMiB(pid);
          return rss >= 0 && rss <= baseline_mib + kRssSlackMiB;
        },
        seconds(30)))
        << "coordinator RSS " << rss << " MiB, baseline " << baseline_mib
        << " MiB";
    double busy = 0;
    EXPECT_TRUE(WaitFor(
        [&] {
          const double before = CpuSeconds(pid);
          std::this_thread::sleep_for(seconds(1));
          busy = CpuSeconds(pid) - before;
          return busy < 0.25;
        },
        seconds(30)))
        << "coordinator used " << busy << " s of CPU in the last second";
  }

  // The sanitizer build's allocator keeps freed memory in quarantine; what
  // an attack must not do is keep growing with what it sends.
  static constexpr double kRssSlackMiB = 96;

  std::unique_ptr<gitlab::FakeGitLabApi> gitlab_;
  GdtCluster cluster_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
  std::string read_times_;
};

// Attack 1: 300 joins a second for 8 s, each with its own forged job token
// (no refusal can be reused) while GitLab takes 1 s per answer.
TEST_F(HostileLoadTest, ForgedJoinFloodWithASlowGitLab) {
  std::unique_ptr<Subprocess> run = StartTraining();
  ASSERT_NE(run, nullptr);
  const double baseline = RssMiB(cluster_.coordinator_pid());
  FireAndForgetJoin::Outcomes outcomes;
  int sent = 0;
  const int reads = WhileStatusAnswers([&] {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 2400; ++i) {
      std::this_thread::sleep_until(start + milliseconds(i * 1000 / 300));
      new FireAndForgetJoin(
          stub_.get(), JoinRequest(kInstance, 8, "train", 2, 1, 7001),
          absl::StrCat("forged-token-", i), seconds(10), &outcomes);
      ++sent;
    }
    WaitFor([&] { return outcomes.outstanding == 0; }, seconds(30));
  });
  // Every read answered within 10 s (WhileStatusAnswers checks each); how
  // many fit into the 8 s flood depends on the machine's load, since each
  // read starts a `gdt-coord status` process (0.4-1.8 s apiece under the
  // sanitizers on a loaded 2-core machine).
  std::cout << "status reads during the flood: " << read_times() << "\n";
  EXPECT_GE(reads, 2) << read_times();
  EXPECT_EQ(outcomes.outstanding.load(), 0);
  EXPECT_EQ(outcomes.ok.load(), 0);
  EXPECT_EQ(outcomes.refused + outcomes.retry, sent)
      << "deadline " << outcomes.deadline << " exhausted " << outcomes.exhausted
      << " invalid " << outcomes.invalid << " other " << outcomes.other;
  EXPECT_GT(outcomes.refused.load(), 0);
  ExpectGangSucceeds(*run);
  ExpectCoordinatorSettles(baseline);
}

// Attack 2: 40 MiB of gRPC metadata over 10 calls (4 MiB each, 4 at once),
// far beyond the 16 KiB a call may carry.
TEST_F(HostileLoadTest, HugeMetadata) {
  std::unique_ptr<Subprocess> run = StartTraining();
  ASSERT_NE(run, nullptr);
  const double baseline = RssMiB(cluster_.coordinator_pid());
  std::atomic<int> refused{0};
  const int reads = WhileStatusAnswers([&] {
    std::vector<std::thread> senders;
    for (int sender = 0; sender < 4; ++sender) {
      senders.emplace_back([&, sender] {
        for (int call = sender; call < 10; call += 4) {
          auto stub = v1::Coordinator::NewStub(
              grpc::CreateChannel(cluster_.coordinator_endpoint(),
                                  grpc::InsecureChannelCredentials()));
          grpc::ClientContext context;
          context.set_deadline(DeadlineIn(seconds(30)));
          context.AddMetadata("x-junk", std::string(size_t{4} << 20, 'a'));
          v1::GetStatusRequest request;
          v1::GetStatusResponse response;
          if (!stub->GetStatus(&context, request, &response).ok()) ++refused;
        }
      });
    }
    for (std::thread& sender : senders) sender.join();
  });
  EXPECT_GT(reads, 0);
  EXPECT_EQ(refused.load(), 10);
  ExpectGangSucceeds(*run);
  ExpectCoordinatorSettles(baseline);
}

// Attack 3: one valid job token, 1,000 joins that each name another GitLab
// instance (each would be a gang of its own).
TEST_F(HostileLoadTest, ThousandInstancesFromOneValidToken) {
  std::unique_ptr<Subprocess> run = StartTraining();
  ASSERT_NE(run, nullptr);
  const double baseline = RssMiB(cluster_.coordinator_pid());
  FireAndForgetJoin::Outcomes outcomes;
  const int reads = WhileStatusAnswers([&] {
    for (int i = 0; i < 1000; ++i) {
      new FireAndForgetJoin(
          stub_.get(),
          JoinRequest(absl::StrCat("https://gitlab-", i, ".example.com"), 9,
                      "attack", 2, 1, 9001),
          "glcbt-local-9001", seconds(5), &outcomes);
      if (i % 100 == 99) std::this_thread::sleep_for(milliseconds(200));
    }
    WaitFor([&] { return outcomes.outstanding == 0; }, seconds(60));
  });
  EXPECT_GT(reads, 0);
  EXPECT_EQ(outcomes.outstanding.load(), 0);
  EXPECT_EQ(outcomes.ok.load(), 0);
  EXPECT_EQ(outcomes.other.load(), 0);
  // None of them names the GitLab the coordinator trusts: each is refused
  // (or told to retry under load), and no gang is left forming for it.
  EXPECT_EQ(outcomes.refused.load() + outcomes.retry.load(), 1000);
  EXPECT_GT(outcomes.refused.load(), 0);
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<nlohmann::json> status = cluster_.Status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(10));
  EXPECT_EQ(status->dump().find("gitlab-1.example.com"), std::string::npos);
  ExpectGangSucceeds(*run);
  ExpectCoordinatorSettles(baseline);
}

// Attack 4: three joins whose `instance` is 3.5 MB (under the 4 MiB message
// limit, so they reach the coordinator).
TEST_F(HostileLoadTest, HugeInstanceStrings) {
  std::unique_ptr<Subprocess> run = StartTraining();
  ASSERT_NE(run, nullptr);
  const double baseline = RssMiB(cluster_.coordinator_pid());
  FireAndForgetJoin::Outcomes outcomes;
  const int reads = WhileStatusAnswers([&] {
    for (int i = 0; i < 3; ++i) {
      new FireAndForgetJoin(
          stub_.get(),
          JoinRequest(std::string(3500000, 'a' + i), 9, "attack", 2, 1, 9001),
          "glcbt-local-9001", seconds(20), &outcomes);
    }
    WaitFor([&] { return outcomes.outstanding == 0; }, seconds(60));
  });
  EXPECT_GT(reads, 0);
  // Refused before they reach the scheduler: none names the GitLab the
  // coordinator trusts (without that setting the length bound refuses them
  // as INVALID_ARGUMENT, which the scheduler tests cover).
  EXPECT_EQ(outcomes.refused.load(), 3);
  // The operator views still answer, in full.
  for (const std::vector<std::string>& command :
       {std::vector<std::string>{"status"},
        std::vector<std::string>{"status", "--all"},
        std::vector<std::string>{"hosts", "list"}}) {
    std::vector<std::string> argv = {BinaryPath("gdt-coord")};
    argv.insert(argv.end(), command.begin(), command.end());
    argv.insert(argv.end(), {"--coordinator", cluster_.coordinator_endpoint()});
    CommandResult result = RunProcess(argv, {}, seconds(30));
    EXPECT_TRUE(result.status.success()) << command[0] << ": " << result.output;
    EXPECT_THAT(result.output, HasSubstr("local")) << result.output;
  }
  ExpectGangSucceeds(*run);
  ExpectCoordinatorSettles(baseline);
}

// Calls whose request never comes: a client that can reach the coordinator
// opens 200 connections from one address (127.0.0.2) and starts 100 such
// calls on each, which gRPC holds (about 15 KB each, 300 MB in all) for as
// long as the client likes. The coordinator keeps at most
// max_connections_per_peer (16) of the connections and closes the rest at
// once, logging a line with a count; a gang whose jobs run on the same host
// (from 127.0.0.1) forms and succeeds meanwhile, status answers, and the
// coordinator's memory grows only by what the 16 connections' calls cost.
// (The calls on one connection are not bounded: docs/security.md, "What
// stays open".)
TEST(StalledStreamTest, AFloodFromOneAddressIsCappedWhileAGangRuns) {
  SmallSanitizerQuarantine();
  GdtCluster cluster;
  cluster.SetCoordinatorExtraConfig("max_connections_per_peer: 16\n");
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  AgentSpec agent;
  agent.name = "local";
  agent.cpu_slots = 2;
  agent.member_uid_pool = MemberAccountsIfRoot();
  ASSERT_TRUE(cluster.StartAgent(agent).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForHosts(1, seconds(20)).ok()) << cluster.Logs();
  const int pid = cluster.coordinator_pid();
  const double baseline = RssMiB(pid);

  constexpr int kConnections = 200;
  StalledStreams flood;
  ASSERT_NO_FATAL_FAILURE(flood.Open("127.0.0.2",
                                     cluster.coordinator_endpoint(),
                                     kConnections, /*streams=*/100));
  int closed = 0;
  EXPECT_TRUE(WaitFor(
      [&] {
        closed = flood.Closed();
        return closed >= kConnections - 16;
      },
      seconds(20)))
      << "the coordinator closed " << closed << " of " << kConnections
      << " connections from one address; it keeps 16\n"
      << cluster.Logs();
  absl::StatusOr<nlohmann::json> status = cluster.Status();
  EXPECT_TRUE(status.ok()) << status.status();
  const std::string project = MakeShellProject(cluster.dir(), "echo trained");
  CommandResult run = cluster.RunLocal(project, "train", {}, seconds(90));
  EXPECT_TRUE(run.status.success()) << run.output << cluster.Logs();
  EXPECT_THAT(run.output, HasSubstr("trained"));

  // Still held (the flood is open): what the coordinator kept.
  const double rss = RssMiB(pid);
  EXPECT_LT(rss, baseline + 96)
      << "coordinator RSS " << rss << " MiB with the flood open, " << baseline
      << " MiB before it";
  EXPECT_EQ(flood.Closed(), kConnections - 16);
  EXPECT_THAT(cluster.Logs(),
              HasSubstr("event=connection_refused who=coordinator "
                        "peer=127.0.0.2 limit=per_peer"));
}

// Idle connections: anyone who reaches the coordinator (any job) opens
// more TCP connections than the coordinator was started with descriptors
// for (soft limit 256, the hard one 4096) and sends nothing on them. gRPC's
// listener, once accept() fails with EMFILE, never accepts again: status
// and every later join would fail for good. The coordinator raises its soft
// limit to the hard one, so it keeps accepting (a gang runs meanwhile), and
// closes the connections that never finish their handshake.
TEST(DescriptorFloodTest, IdleConnectionsNeitherStopTheCoordinatorNorStay) {
  GdtCluster cluster;
  cluster.SetCoordinatorLauncher(
      GdtCluster::DescriptorStarvedLauncher("256:4096"));
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  AgentSpec agent;
  agent.name = "local";
  agent.cpu_slots = 2;
  agent.member_uid_pool = MemberAccountsIfRoot();
  ASSERT_TRUE(cluster.StartAgent(agent).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForHosts(1, seconds(20)).ok()) << cluster.Logs();

  IdleConnections idle;
  ASSERT_NO_FATAL_FAILURE(idle.Open(cluster.coordinator_endpoint(), 400));
  // The coordinator still answers while they are open.
  const bool accepted = cluster.WaitForStatus(
      [](const nlohmann::json&) { return true; }, seconds(10));
  EXPECT_TRUE(accepted) << "gdt-coord status fails while " << 400
                        << " idle connections are open\n"
                        << cluster.Logs();
  // A gang still forms, runs and ends.
  const std::string project = MakeShellProject(cluster.dir(), "echo trained");
  CommandResult run = cluster.RunLocal(project, "train", {}, seconds(60));
  EXPECT_TRUE(run.status.success()) << run.output << cluster.Logs();

  // Each idle connection is closed by the coordinator (its handshake never
  // finished): reading it ends, after what the server sent, in EOF.
  const auto deadline = std::chrono::steady_clock::now() + seconds(30);
  int closed = 0;
  for (int fd : idle.Release()) {
    char buffer[4096];
    while (true) {
      const auto left = std::chrono::duration_cast<milliseconds>(
          deadline - std::chrono::steady_clock::now());
      pollfd one{fd, POLLIN, 0};
      if (left.count() <= 0 ||
          poll(&one, 1, static_cast<int>(left.count())) <= 0) {
        break;
      }
      const ssize_t got = read(fd, buffer, sizeof(buffer));
      if (got <= 0) {
        closed += got == 0 ? 1 : 0;
        break;
      }
    }
    close(fd);
  }
  EXPECT_EQ(closed, 400) << "the coordinator still held " << 400 - closed
                         << " idle connections 30 s "
                         << "after they were opened";
}

// Idle connections beyond the coordinator's hard descriptor limit (256):
// accept() fails with EMFILE, which in gRPC's own listener stopped it for
// good, and even the connections it had are of no use to anyone else
// meanwhile. The main port's listener is the coordinator's own (it caps
// connections per address) and only pauses while descriptors are out; the
// liveness server's is gRPC's, and the coordinator's check of that endpoint
// restarts it. Once the flood ends status answers and a gang runs again,
// without restarting the coordinator.
TEST(DescriptorFloodTest,
     AFloodAboveTheHardLimitDoesNotStopTheListenerForGood) {
  GdtCluster cluster;
  cluster.SetCoordinatorLauncher(
      GdtCluster::DescriptorStarvedLauncher("256:256"));
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  AgentSpec agent;
  agent.name = "local";
  agent.cpu_slots = 2;
  agent.member_uid_pool = MemberAccountsIfRoot();
  ASSERT_TRUE(cluster.StartAgent(agent).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForHosts(1, seconds(20)).ok()) << cluster.Logs();

  {
    IdleConnections idle;
    ASSERT_NO_FATAL_FAILURE(idle.Open(cluster.coordinator_endpoint(), 400));
    // The coordinator accepts until it has no descriptor left; then its
    // listener fails accept() with EMFILE.
    ASSERT_TRUE(WaitFor(
        [&] {
          return cluster.Logs().find("Too many open files") !=
                 std::string::npos;
        },
        seconds(20)))
        << "the coordinator never ran out of descriptors\n"
        << cluster.Logs();
  }  // The flood ends: every connection is closed.

  const bool answers = cluster.WaitForStatus(
      [](const nlohmann::json&) { return true; }, seconds(45));
  ASSERT_TRUE(answers) << "gdt-coord status still fails 45 s after the "
                          "flood ended\n"
                       << cluster.Logs();
  EXPECT_THAT(cluster.Logs(),
              HasSubstr("event=accept_failed who=coordinator error=\"Too "
                        "many open files\""));
  const std::string project = MakeShellProject(cluster.dir(), "echo trained");
  CommandResult run = cluster.RunLocal(project, "train", {}, seconds(60));
  EXPECT_TRUE(run.status.success()) << run.output << cluster.Logs();
  EXPECT_THAT(run.output, HasSubstr("trained"));
}

}  // namespace
}  // namespace gdt::test
