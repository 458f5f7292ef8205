// End to end: the fault matrix. A 2-member gang, each member running 2 local
// ranks under real torchrun (CPU, gloo), goes through run-local, the real
// executor, coordinator and agent; one fault hits it in one phase of its
// life. Every cell then checks what an operator and a user would notice:
//   - the leases (slots, GPUs) and any forming gang are gone within the
//     documented bound (docs/states.md) after the jobs ended;
//   - where one member caused the failure, every member's log names it;
//   - a retried pipeline (GitLab's Retry: new job ids) succeeds;
//   - no process of the jobs is left.
// Faults: kill -9 / SIGTERM of one rank, kill -9 of a member's process
// group, kill -9 of the agent (restarted), kill -9 / SIGTERM of the
// coordinator (restarted), kill -9 of the runner (run-local). Phases:
// waiting (the gang is forming, a blocker gang holds the slots), training,
// after_script, cleanup. Coordinator outages while a rank dies are cells of
// their own: 10 s, and one that lasts until the jobs have ended, past the
// executors' retries of their exit reports (shortened to
// kExitReportRetrySeconds there). Only the training cells train: in the
// others the job runs `true` in place of torchrun.
//
// Cells that cannot exist are not instantiated: no rank runs while a gang
// waits, in after_script or in cleanup.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/cluster.h"
#include "tests/e2e_util.h"

namespace gdt::test {
namespace {

using std::chrono::seconds;
using ::testing::HasSubstr;

enum class Fault {
  kKillRank,
  kTermRank,
  kKillMemberGroup,
  kKillAgent,
  kKillCoordinator,
  kTermCoordinator,
  kKillRunner,
  kOutage10s,
  kLongOutage,
};
enum class Phase { kWaiting, kTraining, kAfterScript, kCleanup };

struct Cell {
  Fault fault;
  Phase phase;
};

// The bounds the matrix's coordinator runs with (shortened from the
// defaults so that a cell takes seconds; docs/states.md names each).
constexpr int kMemberGoneAfterSeconds = 4;
constexpr int kFailedGangReleaseSeconds = 20;
constexpr int kFormingGangAbandonSeconds = 10;
constexpr int kHostDownAfterSeconds = 6;
// The long-outage cell's executors give up their exit reports after this
// (default 120 s); its outage lasts until both members' jobs have ended
// (their reports given up), which must happen within kLongOutageSeconds.
constexpr int kExitReportRetrySeconds = 15;
constexpr int kLongOutageSeconds = 90;
// What a lease may outlive its gang by, at most: a member whose leave was
// lost is found absent after member_gone_after, counted from when its agent
// is back (host_down_after covers a restarted agent); a failed gang's
// leases go after failed_gang_release whatever its members do.
constexpr int kLeaseBoundSeconds = kFailedGangReleaseSeconds;
// Time for processes to notice and for the test's polling.
constexpr int kSlackSeconds = 10;

constexpr int kPipeline = 5100;
constexpr int kFirstJob = 5100000;  // Member i is job kFirstJob + i.
constexpr int kRetryFirstJob = 5100500;

// Slots and GPUs leased and gangs still forming, from `gdt-coord status`.
struct Leases {
  int slots = -1;
  int gpus = -1;
  int forming = -1;
  bool Free() const { return slots == 0 && gpus == 0 && forming == 0; }
  std::string Describe() const {
    return absl::StrCat(slots, " slots, ", gpus, " GPUs leased, ", forming,
                        " gangs forming");
  }
};

Leases CurrentLeases(GdtCluster& cluster) {
  Leases leases;
  absl::StatusOr<nlohmann::json> status = cluster.Status();
  if (!status.ok()) return leases;
  leases.slots = (*status)["summary"].value("cpu_slots_used", -1);
  leases.gpus = (*status)["summary"].value("gpus_leased", -1);
  leases.forming = 0;
  for (const auto& gang : (*status)["gangs"]) {
    if (gang.value("state", "") == "forming") ++leases.forming;
  }
  return leases;
}

class FaultMatrixTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_.SetCoordinatorExtraConfig(absl::StrCat(
        "member_gone_after_seconds: ", kMemberGoneAfterSeconds,
        "\nfailed_gang_release_seconds: ", kFailedGangReleaseSeconds,
        "\nforming_gang_abandon_seconds: ", kFormingGangAbandonSeconds,
        "\nhost_down_after_seconds: ", kHostDownAfterSeconds, "\n"));
    ASSERT_TRUE(cluster_.StartCoordinator().ok()) << cluster_.Logs();
    agent_.name = "local";
    agent_.cpu_slots = 2;
    ASSERT_TRUE(cluster_.StartAgent(agent_).ok()) << cluster_.Logs();
    ASSERT_TRUE(cluster_.WaitForHosts(1, seconds(20)).ok()) << cluster_.Logs();
    WriteProject();
    WriteRunnerConfig();
  }

  // A cell that fails before its gates open would leave the stages that
  // wait on them behind: open them all (the waits also end once the
  // cluster's dir is gone).
  void TearDown() override {
    for (const char* gate : {"go-after", "go-cleanup", "release"}) Open(gate);
  }

  std::string Gate(const std::string& name) const {
    return cluster_.dir().Sub(name);
  }
  void Open(const std::string& gate) const { WriteFile(Gate(gate), ""); }

  // train.py plus a CI file with the training job `train` (2 members x 2
  // ranks; its after_script waits for the gate `go-after`) and the blocker
  // job `hold` (2 one-slot members that wait for the gate `release`). Each
  // stage writes its shell's pid to `<stage>-pid-<member>`.
  void WriteProject() {
    project_ = MakeDdpExampleProject(
        cluster_.dir(),
        absl::StrCat("train:\n"
                     "  parallel: 2\n"
                     "  timeout: 10 minutes\n"
                     "  variables:\n"
                     "    GDT_GPUS_PER_NODE: \"0\"\n"
                     "    GDT_NPROC_PER_NODE: \"2\"\n"
                     "    GDT_LAUNCHER: torchrun\n"
                     "    DDP_STEPS: \"30\"\n"
                     "    DDP_STEP_SECONDS: \"0.1\"\n"
                     "    TRAIN_COMMAND: torchrun examples/ddp/train.py\n"
                     "  script:\n"
                     "    - echo $$ > ",
                     Gate("script-pid-"),
                     "$CI_NODE_INDEX\n"
                     "    - $TRAIN_COMMAND\n"
                     "  after_script:\n"
                     "    - 'echo $$ > ",
                     Gate("after-pid-"), "$CI_NODE_INDEX; while [ -d ",
                     cluster_.dir().path(), " ] && [ ! -e ", Gate("go-after"),
                     " ]; do sleep 0.1; done'\n"
                     "hold:\n"
                     "  parallel: 2\n"
                     "  timeout: 10 minutes\n"
                     "  variables:\n"
                     "    GDT_GPUS_PER_NODE: \"0\"\n"
                     "    GDT_LAUNCHER: none\n"
                     "  script:\n"
                     "    - 'touch ",
                     Gate("hold-"), "$CI_NODE_INDEX; while [ -d ",
                     cluster_.dir().path(), " ] && [ ! -e ", Gate("release"),
                     " ]; do sleep 0.1; done'\n"));
  }

  // A runner config.toml with the real executor for config, prepare and
  // run, and a cleanup that first writes its pid to `cleanup-pid-<member>`
  // and waits for the gate `go-cleanup`, so that a fault can hit a member
  // between after_script and its leave.
  void WriteRunnerConfig() {
    const std::string executor = BinaryPath("gdt-executor");
    // RunLocalArgv() writes the executor's config there.
    const std::string config = cluster_.dir().Sub("executor.yaml");
    runner_config_ = cluster_.dir().Sub("config.toml");
    WriteFile(
        runner_config_,
        absl::StrCat(
            "[[runners]]\n"
            "  name = \"fault matrix\"\n"
            "  url = \"https://gitlab.example.com\"\n"
            "  token = \"glrt-fault-matrix\"\n"
            "  executor = \"custom\"\n"
            "  [runners.custom]\n"
            "    config_exec = \"",
            executor, "\"\n    config_args = [\"--config\", \"", config,
            "\", \"config\"]\n    prepare_exec = \"", executor,
            "\"\n    prepare_args = [\"--config\", \"", config,
            "\", \"prepare\"]\n    run_exec = \"", executor,
            "\"\n    run_args = [\"--config\", \"", config,
            "\", \"run\"]\n    cleanup_exec = \"/bin/sh\"\n"
            "    cleanup_args = [\"-c\", \"echo $$ > ",
            Gate("cleanup-pid-"), "$CUSTOM_ENV_CI_NODE_INDEX; while [ -d ",
            cluster_.dir().path(), " ] && [ ! -e ", Gate("go-cleanup"),
            " ]; do sleep 0.1; done; exec ", executor, " --config ", config,
            " cleanup\"]\n"
            "    graceful_kill_timeout = 30\n"));
  }

  std::vector<std::string> RunArgv(const std::string& job,
                                   const std::string& work_dir,
                                   int first_job) const {
    std::vector<std::string> argv = cluster_.RunLocalArgv(
        project_, job,
        {"--runner-config", runner_config_, "--pipeline-id",
         std::to_string(job == "hold" ? kPipeline + 1 : kPipeline),
         "--first-job-id", std::to_string(first_job)});
    for (size_t i = 0; i + 1 < argv.size(); ++i) {
      if (argv[i] == "--work-dir") argv[i + 1] = work_dir;
    }
    return argv;
  }

  std::unique_ptr<Subprocess> Start(const std::vector<std::string>& argv) {
    SpawnOptions options;
    options.argv = argv;
    options.env = CurrentEnvironment();
    options.die_with_parent = true;
    absl::StatusOr<std::unique_ptr<Subprocess>> process =
        Subprocess::Spawn(options);
    EXPECT_TRUE(process.ok()) << process.status();
    return process.ok() ? std::move(*process) : nullptr;
  }

  std::string MemberLog(int index) const {
    return ReadFile(
        absl::StrCat(cluster_.run_dir(), "/logs/train-", index, "-2.log"));
  }
  std::string Pid(const std::string& stage, int member) const {
    return ReadFile(Gate(absl::StrCat(stage, "-pid-", member)));
  }

  // Waits until the gang is in `phase`; the gates of the other phases are
  // open.
  void ReachPhase(Phase phase) {
    if (phase != Phase::kAfterScript) Open("go-after");
    if (phase != Phase::kCleanup) Open("go-cleanup");
    switch (phase) {
      case Phase::kWaiting:
        // Both members joined; the blocker holds the slots they need.
        ASSERT_TRUE(cluster_.WaitForStatus(
            [](const nlohmann::json& status) {
              return MembersPresent(status) == 2;
            },
            seconds(90)))
            << cluster_.Logs();
        return;
      case Phase::kTraining:
        ASSERT_TRUE(WaitFor(
            [&] {
              return MemberLog(1).find("first step done") !=
                         std::string::npos &&
                     MemberLog(2).find("first step done") != std::string::npos;
            },
            seconds(150)))
            << MemberLog(1) << MemberLog(2) << cluster_.Logs();
        return;
      case Phase::kAfterScript:
      case Phase::kCleanup: {
        const std::string stage =
            phase == Phase::kAfterScript ? "after" : "cleanup";
        ASSERT_TRUE(WaitFor(
            [&] { return !Pid(stage, 1).empty() && !Pid(stage, 2).empty(); },
            seconds(150)))
            << MemberLog(1) << MemberLog(2) << cluster_.Logs();
        return;
      }
    }
  }

  // The process group of member 2's current stage: its prepare exec while
  // the gang waits, else the stage shell that wrote its pid.
  pid_t MemberGroup(Phase phase) {
    pid_t pid = 0;
    if (phase == Phase::kWaiting) {
      for (const ProcessInfo& process :
           JobProcesses(cluster_, "CUSTOM_ENV_CI_NODE_INDEX=2")) {
        if (process.cmdline.find("gdt-executor") != std::string::npos &&
            process.cmdline.find(" prepare") != std::string::npos) {
          pid = process.pid;
        }
      }
    } else {
      const char* stage = phase == Phase::kTraining      ? "script"
                          : phase == Phase::kAfterScript ? "after"
                                                         : "cleanup";
      pid = std::atoi(Pid(stage, 2).c_str());
    }
    if (pid <= 0) return 0;
    const pid_t group = getpgid(pid);
    // Never this test's own group or the coordinator's.
    if (group <= 0 || group == getpgrp() ||
        group == getpgid(cluster_.coordinator_pid())) {
      return 0;
    }
    return group;
  }

  void RestartCoordinator() {
    ASSERT_TRUE(cluster_.StartCoordinator().ok()) << cluster_.Logs();
  }

  // Kills rank 2 (member 2's first local rank) with `signal`.
  void SignalRank(int signal) {
    const std::vector<ProcessInfo> workers = DdpWorkers(cluster_, "RANK=2");
    ASSERT_EQ(workers.size(), 1u) << DescribeAll(JobProcesses(cluster_));
    ASSERT_EQ(kill(workers[0].pid, signal), 0);
  }

  // Runs the cell: the fault, then the recovery an operator would make
  // (restarting what was killed), then opens every gate.
  void Inject(const Cell& cell, Subprocess& run) {
    switch (cell.fault) {
      case Fault::kKillRank:
        SignalRank(SIGKILL);
        break;
      case Fault::kTermRank:
        SignalRank(SIGTERM);
        break;
      case Fault::kKillMemberGroup: {
        const pid_t group = MemberGroup(cell.phase);
        ASSERT_GT(group, 0) << DescribeAll(JobProcesses(cluster_));
        ASSERT_EQ(kill(-group, SIGKILL), 0);
        break;
      }
      case Fault::kKillAgent:
        cluster_.StopAgent(0, SIGKILL);
        ASSERT_TRUE(cluster_.StartAgent(agent_).ok()) << cluster_.Logs();
        break;
      case Fault::kKillCoordinator:
      case Fault::kTermCoordinator:
        cluster_.StopCoordinator(
            cell.fault == Fault::kKillCoordinator ? SIGKILL : SIGTERM);
        if (cell.phase == Phase::kAfterScript ||
            cell.phase == Phase::kCleanup) {
          // The jobs end while the coordinator is down: their leaves are
          // lost and only reconciliation can free the leases.
          Open("go-after");
          Open("go-cleanup");
          ASSERT_TRUE(
              run.WaitUntil(std::chrono::steady_clock::now() + seconds(120),
                            [&](OutputSource, std::string_view data) {
                              early_output_.append(data);
                            })
                  .has_value())
              << early_output_;
        }
        RestartCoordinator();
        break;
      case Fault::kKillRunner:
        ASSERT_EQ(kill(run.pid(), SIGKILL), 0);
        break;
      case Fault::kOutage10s:
      case Fault::kLongOutage: {
        // The coordinator goes down, then member 2's rank dies: the
        // failure happens while nobody can hear of it.
        cluster_.StopCoordinator(SIGKILL);
        SignalRank(SIGKILL);
        // run-local's output is collected so that it never blocks on it.
        const bool long_outage = cell.fault == Fault::kLongOutage;
        const auto down = std::chrono::steady_clock::now();
        const auto end = down + seconds(long_outage ? kLongOutageSeconds : 10);
        bool jobs_ended = false;
        while (!jobs_ended && std::chrono::steady_clock::now() < end) {
          jobs_ended = run.WaitUntil(end,
                                     [&](OutputSource, std::string_view data) {
                                       early_output_.append(data);
                                     })
                           .has_value();
        }
        if (long_outage) {
          // The cell's premise: both jobs end while nobody can hear of them
          // (their exit reports give up); the outage ends with them.
          std::cout << "[fault matrix] the jobs ended "
                    << std::chrono::duration_cast<seconds>(
                           std::chrono::steady_clock::now() - down)
                           .count()
                    << " s into the outage" << std::endl;
          EXPECT_TRUE(jobs_ended) << "the jobs still ran " << kLongOutageSeconds
                                  << " s into the outage:\n"
                                  << early_output_;
        } else if (std::chrono::steady_clock::now() < end) {
          // The short outage lasts its full length whatever the jobs do.
          WaitFor([] { return false; },
                  std::chrono::duration_cast<std::chrono::milliseconds>(
                      end - std::chrono::steady_clock::now()));
        }
        RestartCoordinator();
        break;
      }
    }
    Open("go-after");
    Open("go-cleanup");
    Open("release");
  }

  // Whether the fault hits the training itself; the other cells' jobs run
  // `true` in place of torchrun.
  static bool Trains(const Cell& cell) {
    return cell.phase == Phase::kTraining;
  }
  static constexpr const char* kNoTraining = "TRAIN_COMMAND=true";

  // Where one member caused the failure, the cell's culprit: member 2.
  static bool HasCulprit(const Cell& cell) {
    switch (cell.fault) {
      case Fault::kKillRank:
      case Fault::kTermRank:
      case Fault::kOutage10s:
      case Fault::kLongOutage:
        return true;
      case Fault::kKillMemberGroup:
        return cell.phase == Phase::kTraining;
      default:
        return false;
    }
  }

  void RunCell(const Cell& cell);

  GdtCluster cluster_;
  AgentSpec agent_;
  std::string project_;
  std::string runner_config_;
  // run-local's output collected before FinishRun().
  std::string early_output_;
};

// One cell: the gang reaches `cell.phase`, the fault hits, then the checks
// of the file comment.
void FaultMatrixTest::RunCell(const Cell& cell) {
  if (cell.fault == Fault::kLongOutage) {
    cluster_.SetExecutorExtraConfig(absl::StrCat(
        "exit_report_retry_seconds: ", kExitReportRetrySeconds, "\n"));
  }
  std::unique_ptr<Subprocess> blocker;
  if (cell.phase == Phase::kWaiting) {
    blocker = Start(RunArgv("hold", cluster_.dir().Sub("hold"), 5101000));
    ASSERT_NE(blocker, nullptr);
    ASSERT_TRUE(WaitFor(
        [&] {
          return std::filesystem::exists(Gate("hold-1")) &&
                 std::filesystem::exists(Gate("hold-2"));
        },
        seconds(90)))
        << cluster_.Logs();
  }
  std::vector<std::string> first_argv =
      RunArgv("train", cluster_.run_dir(), kFirstJob);
  if (!Trains(cell)) {
    // No rank runs when this fault hits: the stage that would train only
    // has to succeed (starting torchrun and its ranks is most of a cell's
    // time on two cores).
    first_argv.insert(first_argv.end(), {"--var", kNoTraining});
  }
  std::unique_ptr<Subprocess> run = Start(first_argv);
  ASSERT_NE(run, nullptr);
  ReachPhase(cell.phase);
  if (HasFatalFailure()) return;
  Inject(cell, *run);
  if (HasFatalFailure()) return;

  // The jobs end by themselves (the orphaned executors of a killed runner
  // included: the runner is gone, its execs are not).
  CommandResult first = FinishRun(*run, seconds(420));
  first.output = early_output_ + first.output;
  if (cell.fault == Fault::kKillRunner) {
    // The runner is gone, its execs are not: the jobs' stages end by
    // themselves; the bound counts from then.
    EXPECT_TRUE(
        WaitFor([&] { return JobProcesses(cluster_).empty(); }, seconds(120)))
        << DescribeAll(JobProcesses(cluster_));
  }
  EXPECT_THAT(first.output, ::testing::Not(HasSubstr("killed at its deadline")))
      << first.output << cluster_.Logs();
  if (blocker != nullptr) {
    // The blocker is scaffolding; a fault may fail it too (its stages die
    // with a killed agent), it only has to end.
    const CommandResult held = FinishRun(*blocker, seconds(60));
    EXPECT_THAT(held.output,
                ::testing::Not(HasSubstr("killed at its deadline")))
        << held.output;
  }
  const std::string log1 = MemberLog(1);
  const std::string log2 = MemberLog(2);

  // No lease outlives the gang by more than the bound.
  const auto ended = std::chrono::steady_clock::now();
  Leases leases;
  EXPECT_TRUE(WaitFor(
      [&] {
        leases = CurrentLeases(cluster_);
        return leases.Free();
      },
      seconds(kLeaseBoundSeconds + kSlackSeconds)))
      << leases.Describe() << "\n"
      << (cluster_.Status().ok() ? cluster_.Status()->dump(1) : "")
      << cluster_.Logs();
  const auto freed_after = std::chrono::duration_cast<std::chrono::seconds>(
      std::chrono::steady_clock::now() - ended);
  RecordProperty("leases_freed_after_seconds",
                 static_cast<int>(freed_after.count()));
  // One line per cell for the table in docs/states.md.
  std::cout << "[fault matrix] first run exit " << first.status.code()
            << ", leases free " << freed_after.count()
            << " s after the jobs ended" << std::endl;

  if (HasCulprit(cell)) {
    const std::regex culprit(
        absl::StrCat("gang \\S+ failed: member 2/2 \\(job ", kFirstJob + 2,
                     " on host local\\) (exited|was)"));
    if (cell.fault == Fault::kLongOutage) {
      // Both members' jobs ended during the outage (their peers lost the
      // gloo connection, their exit reports gave up): the true cause is in
      // the coordinator's record, delivered by the agent's outbox.
      absl::StatusOr<nlohmann::json> status = cluster_.Status();
      ASSERT_TRUE(status.ok()) << status.status();
      ASSERT_FALSE((*status)["recent_failures"].empty()) << status->dump(1);
      const std::string reason =
          (*status)["recent_failures"][0].value("reason", "");
      EXPECT_TRUE(std::regex_search(reason, culprit)) << reason << "\n"
                                                      << cluster_.Logs();
    } else {
      EXPECT_TRUE(std::regex_search(log1, culprit)) << log1 << cluster_.Logs();
      EXPECT_TRUE(std::regex_search(log2, culprit)) << log2;
      EXPECT_THAT(log1, HasSubstr(absl::StrCat("Job failed: exit status ",
                                               kPeerFailureExitCode, "\n")))
          << log1;
    }
  }

  // GitLab's Retry of the pipeline: new job ids, a short training.
  if (!first.status.success()) {
    std::vector<std::string> argv =
        RunArgv("train", cluster_.dir().Sub("retry"), kRetryFirstJob);
    argv.insert(argv.end(),
                {"--var", Trains(cell) ? "DDP_STEPS=4" : kNoTraining});
    const CommandResult retry = RunProcess(argv, {}, seconds(180));
    EXPECT_TRUE(retry.status.success()) << "first run:\n"
                                        << first.output << "\nretry:\n"
                                        << retry.output << cluster_.Logs();
    EXPECT_TRUE(WaitFor([&] { return CurrentLeases(cluster_).Free(); },
                        seconds(kSlackSeconds)))
        << CurrentLeases(cluster_).Describe();
  }

  // Nothing of either job is left.
  EXPECT_TRUE(WaitFor([&] { return JobProcesses(cluster_).empty(); },
                      seconds(kSlackSeconds)))
      << DescribeAll(JobProcesses(cluster_));
}

// Each cell is a test of its own, so that ctest runs them side by side.
#define GDT_FAULT_CELL(fault, phase)             \
  TEST_F(FaultMatrixTest, fault##In##phase) {    \
    RunCell({Fault::k##fault, Phase::k##phase}); \
  }

GDT_FAULT_CELL(KillMemberGroup, Waiting)
GDT_FAULT_CELL(KillAgent, Waiting)
GDT_FAULT_CELL(KillCoordinator, Waiting)
GDT_FAULT_CELL(TermCoordinator, Waiting)
GDT_FAULT_CELL(KillRunner, Waiting)
GDT_FAULT_CELL(KillRank, Training)
GDT_FAULT_CELL(TermRank, Training)
GDT_FAULT_CELL(KillMemberGroup, Training)
GDT_FAULT_CELL(KillAgent, Training)
GDT_FAULT_CELL(KillCoordinator, Training)
GDT_FAULT_CELL(TermCoordinator, Training)
GDT_FAULT_CELL(KillRunner, Training)
GDT_FAULT_CELL(KillMemberGroup, AfterScript)
GDT_FAULT_CELL(KillAgent, AfterScript)
GDT_FAULT_CELL(KillCoordinator, AfterScript)
GDT_FAULT_CELL(TermCoordinator, AfterScript)
GDT_FAULT_CELL(KillRunner, AfterScript)
GDT_FAULT_CELL(KillMemberGroup, Cleanup)
GDT_FAULT_CELL(KillAgent, Cleanup)
GDT_FAULT_CELL(KillCoordinator, Cleanup)
GDT_FAULT_CELL(TermCoordinator, Cleanup)
GDT_FAULT_CELL(KillRunner, Cleanup)
GDT_FAULT_CELL(Outage10s, Training)

// The longest outage: longer than an executor retries its exit report (its
// ctest entry runs beside the other cells).
GDT_FAULT_CELL(LongOutage, Training)

#undef GDT_FAULT_CELL

}  // namespace
}  // namespace gdt::test
