#include "agent/process_ledger.h"

#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "common/subprocess.h"
#include "gtest/gtest.h"
#include "testing/temp_dir.h"

namespace gdt::agent {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;

class ProcessLedgerTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(root_.empty()); }
  void TearDown() override {
    for (auto& child : children_) {
      if (!child->exit_status().has_value()) child->Terminate(milliseconds(0));
    }
  }

  // bash in its own process group running `script`; returns once the
  // script printed "ready" (or ended).
  Subprocess& Start(const std::string& script) {
    SpawnOptions options;
    options.argv = {"/bin/bash", "-c", script};
    options.new_process_group = true;
    options.die_with_parent = true;
    options.capture_output = true;
    absl::StatusOr<std::unique_ptr<Subprocess>> child =
        Subprocess::Spawn(options);
    EXPECT_TRUE(child.ok()) << child.status();
    children_.push_back(std::move(*child));
    std::string output;
    const auto deadline = steady_clock::now() + seconds(10);
    while (output.find("ready") == std::string::npos &&
           steady_clock::now() < deadline &&
           children_.back()->PumpOutput(
               milliseconds(100),
               [&](OutputSource, std::string_view data) { output += data; })) {
    }
    return *children_.back();
  }

  test::TempDir temp_;
  const std::string root_ = temp_.path();
  const std::string dir_ = root_ + "/.process-groups";
  std::vector<std::unique_ptr<Subprocess>> children_;
};

TEST_F(ProcessLedgerTest, TheNextAgentEndsAGroupTheDeadOneLeftRunning) {
  Subprocess& training = Start("sleep 300 & echo ready; wait");
  ASSERT_TRUE(ProcessLedger(dir_).Record(training.pid()).ok());

  // A new agent on the same scratch dir.
  const std::vector<ProcessLedger::Reaped> reaped =
      ProcessLedger(dir_).ReapLeftovers(seconds(10));

  ASSERT_EQ(reaped.size(), 1u);
  EXPECT_EQ(reaped[0].pgid, training.pid());
  EXPECT_EQ(reaped[0].processes, 2u);  // bash and its sleep.
  EXPECT_FALSE(reaped[0].killed);
  std::optional<ExitStatus> status =
      training.WaitUntil(steady_clock::now() + seconds(10));
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->signal, SIGTERM);
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(ProcessLedgerTest, AGroupThatIgnoresSigtermIsKilledAfterTheGrace) {
  Subprocess& stubborn = Start("trap '' TERM; sleep 300 & echo ready; wait");
  ASSERT_TRUE(ProcessLedger(dir_).Record(stubborn.pid()).ok());

  const std::vector<ProcessLedger::Reaped> reaped =
      ProcessLedger(dir_).ReapLeftovers(milliseconds(300));

  ASSERT_EQ(reaped.size(), 1u);
  EXPECT_TRUE(reaped[0].killed);
  std::optional<ExitStatus> status =
      stubborn.WaitUntil(steady_clock::now() + seconds(10));
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->signal, SIGKILL);
}

TEST_F(ProcessLedgerTest, AReusedProcessNumberIsLeftAlone) {
  Subprocess& other = Start("sleep 300 & echo ready; wait");
  ASSERT_TRUE(ProcessLedger(dir_).Record(other.pid()).ok());
  // The recorded group was older than the process now holding its number.
  const std::string entry = dir_ + "/" + std::to_string(other.pid());
  const uint64_t start = *ProcessStartTime(other.pid());
  std::ofstream(entry, std::ios::trunc) << start - 1 << "\n";

  EXPECT_TRUE(ProcessLedger(dir_).ReapLeftovers(seconds(1)).empty());

  EXPECT_FALSE(other.TryWait().has_value()) << "a stranger was signalled";
  EXPECT_FALSE(fs::exists(entry));
}

TEST_F(ProcessLedgerTest, GroupsThatEndedAndJunkEntriesAreForgotten) {
  Subprocess& done = Start("exit 0");
  const pid_t pgid = done.pid();
  ASSERT_TRUE(done.WaitUntil(steady_clock::now() + seconds(10)).has_value());
  fs::create_directories(dir_);
  std::ofstream(dir_ + "/" + std::to_string(pgid)) << "12345\n";
  std::ofstream(dir_ + "/not-a-pid") << "x\n";
  std::ofstream(dir_ + "/4242") << "garbage\n";

  EXPECT_TRUE(ProcessLedger(dir_).ReapLeftovers(seconds(1)).empty());
  EXPECT_TRUE(fs::is_empty(dir_));
  // Recording a process that is gone is NotFound, not an error to log.
  EXPECT_TRUE(absl::IsNotFound(ProcessLedger(dir_).Record(pgid)));
}

TEST_F(ProcessLedgerTest, ForgottenGroupsAreNotReaped) {
  Subprocess& stage = Start("sleep 300 & echo ready; wait");
  const ProcessLedger ledger(dir_);
  ASSERT_TRUE(ledger.Record(stage.pid()).ok());
  ledger.Forget(stage.pid());

  EXPECT_TRUE(ProcessLedger(dir_).ReapLeftovers(seconds(1)).empty());
  EXPECT_FALSE(stage.TryWait().has_value());
}

}  // namespace
}  // namespace gdt::agent
