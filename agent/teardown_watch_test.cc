#include "agent/teardown_watch.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "agent/stage.h"
#include "common/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/temp_dir.h"
#include "testing/wait.h"

namespace gdt::agent {
namespace {

using ::gdt::test::WaitFor;
using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;
using ::testing::HasSubstr;
using ::testing::Optional;

// A launcher (pid 10) with two ranks (11, 12) under a shell (1).
GroupProcess Shell() { return {.pid = 1, .parent = 0, .start = 1}; }
GroupProcess Launcher() { return {.pid = 10, .parent = 1, .start = 2}; }
GroupProcess Rank(pid_t pid, int rank) {
  return {.pid = pid,
          .parent = 10,
          .start = 3,
          .has_local_rank = true,
          .rank = rank};
}

class TeardownWatchTest : public ::testing::Test {
 protected:
  std::optional<std::string> At(int second,
                                const std::vector<GroupProcess>& group) {
    return watch_.Observe(group, t0_ + seconds(second));
  }

  const steady_clock::time_point t0_ = steady_clock::now();
  TeardownWatch watch_{seconds(10)};
};

TEST_F(TeardownWatchTest, RankLeftBehindAfterItsSiblingEndedIsStuck) {
  EXPECT_EQ(At(0, {Shell(), Launcher(), Rank(11, 2), Rank(12, 3)}),
            std::nullopt);
  // Training runs for a long while: nothing ended, nothing to say.
  EXPECT_EQ(At(100, {Shell(), Launcher(), Rank(11, 2), Rank(12, 3)}),
            std::nullopt);
  // Rank 2 finished at 101; rank 3 stays, idle.
  EXPECT_EQ(At(101, {Shell(), Launcher(), Rank(12, 3)}), std::nullopt);
  EXPECT_EQ(At(110, {Shell(), Launcher(), Rank(12, 3)}), std::nullopt);
  EXPECT_THAT(At(111, {Shell(), Launcher(), Rank(12, 3)}),
              Optional(std::string(
                  "rank 3 stuck in teardown for 10 s after finishing; ended")));
}

TEST_F(TeardownWatchTest, LauncherLeftAfterAllRanksEndedIsStuck) {
  At(0, {Shell(), Launcher(), Rank(11, 0), Rank(12, 1)});
  At(5, {Shell(), Launcher()});
  EXPECT_EQ(At(14, {Shell(), Launcher()}), std::nullopt);
  EXPECT_THAT(At(15, {Shell(), Launcher()}),
              Optional(HasSubstr("all 2 ranks finished; their launcher was "
                                 "still running 10 s later")));
}

TEST_F(TeardownWatchTest, OutputIsActivity) {
  At(0, {Shell(), Launcher(), Rank(11, 0), Rank(12, 1)});
  At(1, {Shell(), Launcher(), Rank(12, 1)});
  // Rank 1 still writes at 8.
  watch_.OnOutput(t0_ + seconds(8));
  EXPECT_EQ(At(17, {Shell(), Launcher(), Rank(12, 1)}), std::nullopt);
  EXPECT_TRUE(At(18, {Shell(), Launcher(), Rank(12, 1)}).has_value());
}

// A rank whose environment cannot be read in its last look (it is exiting)
// still counts as a rank that ended.
TEST_F(TeardownWatchTest, RankKeepsItsKindWhileExiting) {
  At(0, {Shell(), Launcher(), Rank(11, 0), Rank(12, 1)});
  GroupProcess exiting = Rank(11, 0);
  exiting.has_local_rank = false;
  exiting.rank.reset();
  At(1, {Shell(), Launcher(), exiting, Rank(12, 1)});
  At(2, {Shell(), Launcher(), Rank(12, 1)});
  EXPECT_THAT(At(12, {Shell(), Launcher(), Rank(12, 1)}),
              Optional(HasSubstr("rank 1 stuck in teardown for 10 s")));
}

TEST_F(TeardownWatchTest, NewProcessAfterTheRanksMeansTheScriptMovedOn) {
  At(0, {Shell(), Launcher(), Rank(11, 0), Rank(12, 1)});
  At(1, {Shell()});
  // `torchrun train.py && python3 upload.py`: the upload may take its time.
  const GroupProcess upload{.pid = 20, .parent = 1, .start = 9};
  EXPECT_EQ(At(2, {Shell(), upload}), std::nullopt);
  EXPECT_EQ(At(500, {Shell(), upload}), std::nullopt);
}

TEST_F(TeardownWatchTest, NewRanksStartAfresh) {
  At(0, {Shell(), Launcher(), Rank(11, 0), Rank(12, 1)});
  At(1, {Shell(), Launcher(), Rank(12, 1)});
  // The launcher restarts its workers.
  GroupProcess again = Rank(13, 0);
  again.start = 7;
  GroupProcess again1 = Rank(14, 1);
  again1.start = 7;
  EXPECT_EQ(At(2, {Shell(), Launcher(), again, again1}), std::nullopt);
  EXPECT_EQ(At(50, {Shell(), Launcher(), again, again1}), std::nullopt);
}

TEST_F(TeardownWatchTest, ChildrenOfRanksAreNotRanks) {
  // A data loader worker inherits LOCAL_RANK from its rank.
  GroupProcess worker = Rank(30, 0);
  worker.parent = 11;
  At(0, {Shell(), Launcher(), Rank(11, 0), worker, Rank(12, 1)});
  At(1, {Shell(), Launcher(), Rank(11, 0), Rank(12, 1)});
  EXPECT_EQ(At(60, {Shell(), Launcher(), Rank(11, 0), Rank(12, 1)}),
            std::nullopt);
}

// Options for a stage that runs `body` as its script, written into `dir`.
StageOptions ScriptStage(const test::TempDir& dir, const std::string& body) {
  const std::string script = dir.Sub("stage.sh");
  std::ofstream(script) << body;
  StageOptions options;
  options.script_path = script;
  options.env = {{"PATH", "/usr/bin:/bin"}};
  options.working_dir = dir.path();
  return options;
}

// Records a stage's output and exit.
class Recorder : public StageObserver {
 public:
  void OnOutput(OutputSource, std::string_view data) override {
    MutexLock lock(mu_);
    output_.append(data);
  }
  void OnExit(const ExitStatus& status) override {
    MutexLock lock(mu_);
    status_ = status;
  }
  std::string output() {
    MutexLock lock(mu_);
    return output_;
  }
  std::optional<ExitStatus> status() {
    MutexLock lock(mu_);
    return status_;
  }

 private:
  Mutex mu_;
  std::string output_ ABSL_GUARDED_BY(mu_);
  std::optional<ExitStatus> status_ ABSL_GUARDED_BY(mu_);
};

// The progress file is in the member's own directory; the agent reads it
// as root on its heartbeat thread. A member that swaps a FIFO in for it
// between the agent's look at the file and its open must not block that
// thread (heartbeats would stop and every gang on the host fail as lost),
// and a link must not make the agent read another file.
TEST(StageProgressTest, AProgressFileSwappedForAFifoOrALinkIsNotFollowed) {
  test::TempDir dir;
  const std::string path = dir.Sub("progress");
  const auto started = std::chrono::system_clock::now();
  const std::string other = dir.Sub("root-only");
  { std::ofstream(other) << "4711\n"; }
  ASSERT_EQ(symlink(other.c_str(), path.c_str()), 0);
  EXPECT_EQ(ReadStageProgress(path, started).step, std::nullopt);
  ASSERT_EQ(unlink(path.c_str()), 0);

  // One regular file ("5") and one FIFO, renamed over the path in turn
  // through links of their own, so that the FIFO can be opened below
  // whatever name it has then.
  const std::string regular = dir.Sub("regular");
  const std::string fifo = dir.Sub("fifo");
  { std::ofstream(regular) << "5\n"; }
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  std::atomic<bool> stop{false};
  std::thread swapper([&] {
    const std::string next = dir.Sub("next");
    for (bool use_fifo = false; !stop.load(); use_fifo = !use_fifo) {
      if (link((use_fifo ? fifo : regular).c_str(), next.c_str()) == 0) {
        rename(next.c_str(), path.c_str());
      }
    }
  });
  std::atomic<int> reads{0};
  std::atomic<bool> done{false};
  std::thread reader([&] {
    const auto until = steady_clock::now() + seconds(3);
    while (steady_clock::now() < until) {
      (void)ReadStageProgress(path, started);
      ++reads;
    }
    done = true;
  });
  const auto deadline = steady_clock::now() + seconds(15);
  while (!done.load() && steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  const bool returned = done.load();
  stop = true;
  swapper.join();
  // A reader stuck opening the FIFO goes on once a writer opens it.
  while (!done.load()) {
    const int writer = open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (writer >= 0) close(writer);
    std::this_thread::sleep_for(milliseconds(10));
  }
  reader.join();
  EXPECT_TRUE(returned) << "the progress read blocked after " << reads.load()
                        << " reads";
  EXPECT_GT(reads.load(), 0);
}

// An observer whose client does not read: it is full from the start.
class FullObserver : public StageObserver {
 public:
  bool ReadyForOutput() override { return false; }
  void OnOutput(OutputSource, std::string_view data) override {
    bytes_ += data.size();
  }
  void OnExit(const ExitStatus&) override {}
  size_t bytes() const { return bytes_.load(); }

 private:
  std::atomic<size_t> bytes_{0};
};

// A process that left the script's group writes without end after the
// script exited. While its output is collected the stage reads nothing the
// observer cannot take, as while the script ran: the agent must not queue
// all the pipe carries in that second (gigabytes here) for an executor
// that does not read.
TEST(StageOutputTest, OutputAfterTheScriptExitedIsReadOnlyAsFastAsItIsTaken) {
  test::TempDir dir;
  const StageOptions options =
      ScriptStage(dir,
                  "setsid sh -c 'exec timeout 60 cat /dev/zero' &\n"
                  "sleep 0.5\n"
                  "exit 0\n");
  FullObserver observer;
  {
    absl::StatusOr<std::shared_ptr<Stage>> stage =
        Stage::Start(options, &observer, nullptr);
    ASSERT_TRUE(stage.ok()) << stage.status();
    ASSERT_TRUE((*stage)->WaitFinished(steady_clock::now() + seconds(30)));
    // Dropping the stage closes its pipes: the writer dies of SIGPIPE.
  }
  // Nothing at all, or at most the pipe's last buffer.
  EXPECT_LT(observer.bytes(), 1u << 20);
}

// An observer that takes no output while the script runs (so that the
// stage keeps collecting it for a while after the script exited), and
// records what it is given at the end.
class HoldingObserver : public Recorder {
 public:
  bool ReadyForOutput() override { return false; }
};

// The agent stops a running stage: killed, its output ends in why. A stop
// that comes after the script exited (while the stage still collects its
// output) kills nothing, and the job's log does not say it was stopped.
TEST(StageStopTest, OnlyAStopThatKilledTheScriptEndsItsOutput) {
  const std::string line = "gdt: disk limit: stopped for the test\n";
  {
    test::TempDir dir;
    Recorder recorder;
    absl::StatusOr<std::shared_ptr<Stage>> stage = Stage::Start(
        ScriptStage(dir, "echo started\nexec sleep 60\n"), &recorder, nullptr);
    ASSERT_TRUE(stage.ok()) << stage.status();
    ASSERT_TRUE(test::WaitFor([&] { return recorder.output() == "started\n"; },
                              seconds(10)));
    (*stage)->StopWith(line);
    ASSERT_TRUE((*stage)->WaitFinished(steady_clock::now() + seconds(10)));
    ASSERT_TRUE(test::WaitFor([&] { return recorder.status().has_value(); },
                              seconds(5)));
    EXPECT_EQ(recorder.status()->signal, SIGKILL);
    EXPECT_EQ(recorder.output(), "started\n" + line);
  }
  test::TempDir dir;
  const std::string pid_file = dir.Sub("script.pid");
  HoldingObserver observer;
  absl::StatusOr<std::shared_ptr<Stage>> stage = Stage::Start(
      ScriptStage(dir, absl::StrCat("echo $$ > ", pid_file, "\nexit 0\n")),
      &observer, nullptr);
  ASSERT_TRUE(stage.ok()) << stage.status();
  // The script was reaped: the stage saw it exit.
  ASSERT_TRUE(test::WaitFor(
      [&] {
        std::ifstream in(pid_file);
        pid_t pid = 0;
        return (in >> pid) && pid > 0 && kill(pid, 0) != 0 && errno == ESRCH;
      },
      seconds(10)));
  EXPECT_FALSE((*stage)->finished());
  (*stage)->StopWith(line);
  ASSERT_TRUE((*stage)->WaitFinished(steady_clock::now() + seconds(10)));
  ASSERT_TRUE(
      test::WaitFor([&] { return observer.status().has_value(); }, seconds(5)));
  EXPECT_TRUE(observer.status()->success()) << observer.status()->code();
  EXPECT_EQ(observer.output(), "");
}

// Two ranks under a launcher shell: rank 0 finishes, rank 1 never leaves.
// The stage ends as a success once rank 1 has been idle for the bound, and
// nothing of it is left.
TEST(StageTeardownTest, StageWhoseRankNeverLeavesEndsAsSuccess) {
  test::TempDir dir;
  const std::string pid_file = dir.Sub("rank1.pid");
  StageOptions options = ScriptStage(
      dir, absl::StrCat(
               "echo training\n",
               // Rank 0 works a while (long enough to be seen), then ends.
               "LOCAL_RANK=0 RANK=0 bash -c 'sleep 2; echo rank 0 done' &\n",
               "LOCAL_RANK=1 RANK=1 bash -c 'echo $$ > ", pid_file,
               "; exec sleep 1000' &\n", "wait\n", "exit 1\n"));
  options.teardown_timeout = seconds(2);
  Recorder recorder;
  const auto start = steady_clock::now();
  absl::StatusOr<std::shared_ptr<Stage>> stage =
      Stage::Start(options, &recorder, nullptr);
  ASSERT_TRUE(stage.ok()) << stage.status();
  ASSERT_TRUE((*stage)->WaitFinished(steady_clock::now() + seconds(30)))
      << recorder.output();
  const auto elapsed = steady_clock::now() - start;
  EXPECT_LT(elapsed, seconds(12));
  EXPECT_GE(elapsed, seconds(4));
  // OnExit comes right after the finish.
  for (int i = 0; i < 100 && !recorder.status().has_value(); ++i) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  ASSERT_TRUE(recorder.status().has_value());
  EXPECT_TRUE(recorder.status()->success()) << recorder.status()->code();
  EXPECT_THAT(recorder.output(),
              HasSubstr("gdt: rank 1 stuck in teardown for "));
  EXPECT_THAT(recorder.output(), HasSubstr(" s after finishing; ended\n"));
  std::ifstream pid_in(pid_file);
  pid_t rank1 = 0;
  pid_in >> rank1;
  ASSERT_GT(rank1, 0);
  // Killed with its group (and reaped by whoever adopted it).
  EXPECT_TRUE(WaitFor([&] { return kill(rank1, 0) != 0; }, seconds(5)))
      << "rank 1 (pid " << rank1 << ") is still alive";
}

// Without a bound the stage keeps waiting (the behaviour the watch
// replaces): here the stage is stopped by the test after a while.
TEST(StageTeardownTest, WithoutABoundTheStageWaits) {
  test::TempDir dir;
  const StageOptions options = ScriptStage(dir,
                                           "LOCAL_RANK=0 RANK=0 true &\n"
                                           "LOCAL_RANK=1 RANK=1 sleep 1000 &\n"
                                           "wait\n");
  Recorder recorder;
  absl::StatusOr<std::shared_ptr<Stage>> stage =
      Stage::Start(options, &recorder, nullptr);
  ASSERT_TRUE(stage.ok()) << stage.status();
  EXPECT_FALSE((*stage)->WaitFinished(steady_clock::now() + seconds(4)));
  (*stage)->Signal(StageSignal::kKill);
  ASSERT_TRUE((*stage)->WaitFinished(steady_clock::now() + seconds(10)));
}

// SnapshotProcessGroup reads ranks from /proc.
TEST(SnapshotProcessGroupTest, FindsRanksAndTheirNumbers) {
  test::TempDir dir;
  const std::string ready = dir.Sub("ready");
  const StageOptions options =
      ScriptStage(dir, absl::StrCat("LOCAL_RANK=1 RANK=5 sleep 1000 &\n",
                                    "touch ", ready, "\n", "wait\n"));
  Recorder recorder;
  absl::StatusOr<std::shared_ptr<Stage>> stage =
      Stage::Start(options, &recorder, nullptr);
  ASSERT_TRUE(stage.ok()) << stage.status();
  EXPECT_TRUE(WaitFor(
      [&] {
        for (const GroupProcess& process :
             SnapshotProcessGroup((*stage)->process_group())) {
          if (process.has_local_rank && process.rank == 5 &&
              process.parent == (*stage)->process_group()) {
            return true;
          }
        }
        return false;
      },
      seconds(10)));
  (*stage)->Signal(StageSignal::kKill);
  ASSERT_TRUE((*stage)->WaitFinished(steady_clock::now() + seconds(10)));
}

}  // namespace
}  // namespace gdt::agent
