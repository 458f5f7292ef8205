#include "launch/head_worker.h"

#include <signal.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gdt::launch {
namespace {

using ::testing::HasSubstr;

// Workers see rank 0's code after `polls_before_done` empty polls; the gang
// "ends" (an error) instead when `end_gang` is set.
class FakeDoneSignal : public DoneSignal {
 public:
  absl::Status Announce(int exit_code) override {
    announced = exit_code;
    return absl::OkStatus();
  }
  absl::StatusOr<std::optional<int>> WaitUntil(
      std::chrono::system_clock::time_point) override {
    ++polls;
    if (end_gang) return absl::AbortedError("gang g ended");
    if (polls <= polls_before_done || !done_when()) return std::nullopt;
    return rank0_code;
  }
  std::optional<int> announced;
  int polls = 0;
  int polls_before_done = 2;
  int rank0_code = 0;
  bool end_gang = false;
  std::function<bool()> done_when = [] { return true; };
};

class HeadWorkerTest : public ::testing::Test {
 protected:
  HeadWorkerTest() {
    char tmpl[] = "/tmp/gdt-launch-test-XXXXXX";
    dir_ = mkdtemp(tmpl);
    options_.recipe_name = "fake";
    options_.env = CurrentEnvironment();
    options_.env["T"] = dir_;
    options_.num_workers = 2;
    options_.poll_interval = std::chrono::milliseconds(20);
    options_.stop_grace = std::chrono::milliseconds(2000);
    options_.log = &log_;
  }
  ~HeadWorkerTest() override { std::filesystem::remove_all(dir_); }

  static std::vector<std::string> Sh(const std::string& script) {
    return {"/bin/sh", "-c", script};
  }
  std::string Read(const std::string& name) {
    std::ifstream in(dir_ + "/" + name);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  // The process whose pid `name` holds is gone (stopped and reaped).
  bool Gone(const std::string& name) {
    const int pid = std::atoi(Read(name).c_str());
    return pid > 0 && kill(pid, 0) != 0;
  }

  std::string dir_;
  HeadWorkerOptions options_;
  std::ostringstream log_;
  FakeDoneSignal done_;
};

TEST_F(HeadWorkerTest, ScriptRunsOnlyOnceReadyThenHeadIsStopped) {
  options_.commands.head = Sh("echo $$ > $T/head.pid; exec sleep 60");
  // Passes on its third run; the script records how many runs it saw.
  options_.commands.ready_check =
      Sh("n=$(cat $T/checks 2>/dev/null || echo 0); echo $((n+1)) > $T/checks; "
         "[ $n -ge 2 ]");
  options_.commands.script_env["FRAMEWORK_ADDRESS"] = "tcp://head:1";
  options_.script =
      Sh("cat $T/checks > $T/seen; echo $FRAMEWORK_ADDRESS >> $T/seen; "
         "exit 3");

  EXPECT_EQ(RunHead(options_, done_), 3) << log_.str();

  EXPECT_EQ(Read("seen"), "3\ntcp://head:1\n");
  EXPECT_EQ(done_.announced, 3);
  EXPECT_TRUE(Gone("head.pid")) << "the head must be stopped";
  EXPECT_THAT(log_.str(), HasSubstr("script ended with code 3"));
}

TEST_F(HeadWorkerTest, HeadExitingEarlyFailsWithoutRunningTheScript) {
  options_.commands.head = Sh("exit 4");
  options_.commands.ready_check = Sh("false");
  options_.script = Sh("touch $T/ran");

  EXPECT_EQ(RunHead(options_, done_), 4);

  EXPECT_THAT(log_.str(), HasSubstr("fake: the head exited with code 4 before "
                                    "the 2 workers were ready"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/ran"));
}

TEST_F(HeadWorkerTest, ReadyTimeoutNamesTheLastCheckOutput) {
  options_.commands.head = Sh("echo $$ > $T/head.pid; exec sleep 60");
  options_.commands.ready_check = Sh("echo only 1 of 2 joined; false");
  options_.ready_timeout = std::chrono::seconds(3);
  options_.script = Sh("touch $T/ran");

  EXPECT_EQ(RunHead(options_, done_), 1);

  EXPECT_THAT(log_.str(),
              HasSubstr("the 2 workers were not ready after 3 s "
                        "(ready_timeout_seconds); last ready_check said: "
                        "only 1 of 2 joined"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/ran"));
  EXPECT_TRUE(Gone("head.pid"));
}

// A check still running at the deadline (a slow or loaded machine) must not
// hide what the last finished check said.
TEST_F(HeadWorkerTest, ReadyTimeoutKeepsTheLastFinishedCheckOverACutOffOne) {
  options_.commands.head = Sh("echo $$ > $T/head.pid; exec sleep 60");
  // The first check answers at once; every later one outlives the deadline.
  options_.commands.ready_check =
      Sh("if [ -e $T/checked ]; then exec sleep 30; fi; touch $T/checked; "
         "echo only 1 of 2 joined; false");
  options_.ready_timeout = std::chrono::seconds(3);
  options_.script = Sh("touch $T/ran");

  EXPECT_EQ(RunHead(options_, done_), 1);

  EXPECT_THAT(log_.str(), HasSubstr("last ready_check said: "
                                    "only 1 of 2 joined"));
  EXPECT_TRUE(Gone("head.pid"));
}

TEST_F(HeadWorkerTest, StopRequestStopsHeadAndScript) {
  options_.commands.head = Sh("echo $$ > $T/head.pid; exec sleep 60");
  options_.script = Sh("echo $$ > $T/script.pid; exec sleep 60");
  // Asked to stop once the script runs.
  const std::string script_pid = dir_ + "/script.pid";
  options_.stop_requested = [&script_pid] {
    return std::filesystem::exists(script_pid) &&
                   std::filesystem::file_size(script_pid) > 0
               ? SIGTERM
               : 0;
  };

  EXPECT_EQ(RunHead(options_, done_), 128 + SIGTERM);

  EXPECT_TRUE(Gone("head.pid"));
  EXPECT_TRUE(Gone("script.pid"));
}

TEST_F(HeadWorkerTest, WorkerStaysUpUntilRankZeroFinishes) {
  options_.rank = 1;
  options_.commands.worker = Sh("echo $$ > $T/worker.pid; exec sleep 60");
  done_.rank0_code = 5;
  // Rank 0 finishes only after the worker is up (its pid file written).
  done_.done_when = [this] { return !Read("worker.pid").empty(); };

  EXPECT_EQ(RunWorker(options_, done_), 0);

  EXPECT_GE(done_.polls, 3);
  EXPECT_TRUE(Gone("worker.pid"));
  EXPECT_THAT(log_.str(), HasSubstr("rank 0's script ended with code 5; "
                                    "stopping the worker on rank 1"));
}

TEST_F(HeadWorkerTest, WorkerDyingFailsWithItsCode) {
  options_.rank = 2;
  options_.commands.worker = Sh("exit 7");
  done_.polls_before_done = 1000000;

  EXPECT_EQ(RunWorker(options_, done_), 7);

  EXPECT_THAT(log_.str(), HasSubstr("fake: the worker on rank 2 exited with "
                                    "code 7 before rank 0's script finished"));
}

TEST_F(HeadWorkerTest, WorkerStopsWhenTheGangEnds) {
  options_.rank = 1;
  options_.commands.worker = Sh("echo $$ > $T/worker.pid; exec sleep 60");
  done_.polls_before_done = 1000000;
  done_.end_gang = true;

  EXPECT_EQ(RunWorker(options_, done_), 1);

  EXPECT_THAT(log_.str(), HasSubstr("stopping the worker on rank 1: gang g "
                                    "ended"));
}

TEST_F(HeadWorkerTest, MissingProgramIsOneLine) {
  options_.commands.head = {"/nonexistent/dask-scheduler"};
  options_.script = Sh("true");
  EXPECT_EQ(RunHead(options_, done_), 127);
  EXPECT_THAT(log_.str(), HasSubstr("cannot start the head "
                                    "(/nonexistent/dask-scheduler)"));
}

}  // namespace
}  // namespace gdt::launch
