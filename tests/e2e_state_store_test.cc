// End to end: the coordinator's SQLite state under an operator's bad day,
// with the real gdt-coord, gdt-agent, executor and run-local. The state file
// lives on a small tmpfs of the test's own, which the test fills from
// outside, or whose file it holds locked, while a gang forms or runs.
#include <fcntl.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sqlite3.h"
#include "testing/cluster.h"
#include "tests/e2e_util.h"

namespace gdt::test {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;
using ::testing::HasSubstr;

// The coordinator's lines with `event` in the log of its `start`th start.
int CountEvents(const GdtCluster& cluster, int start,
                const std::string& event) {
  int count = 0;
  const std::string log =
      ReadFile(cluster.dir().Sub(absl::StrCat("coord-", start, ".log")));
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    if (absl::StrContains(line, absl::StrCat("event=", event, " "))) ++count;
  }
  return count;
}

// Writes `path` until its file system is full; true when it is.
bool FillUp(const std::string& path) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return false;
  const std::string chunk(64 * 1024, 'x');
  bool full = false;
  while (true) {
    const ssize_t written = write(fd, chunk.data(), chunk.size());
    if (written < 0) {
      full = errno == ENOSPC;
      break;
    }
  }
  close(fd);
  return full;
}

class StateStoreFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root: mounts a tmpfs";
    state_dir_ = cluster_.dir().Sub("state");
    fs::create_directories(state_dir_);
    ASSERT_EQ(mount("tmpfs", state_dir_.c_str(), "tmpfs", 0, "size=4m"), 0)
        << "mount tmpfs on " << state_dir_ << ": " << strerror(errno);
    mounted_ = true;
    cluster_.SetStatePath(state_dir_ + "/coord.db");
    ASSERT_TRUE(cluster_.StartCoordinator().ok()) << cluster_.Logs();
    ASSERT_TRUE(cluster_.StartAgent({.name = "local", .cpu_slots = 2}).ok())
        << cluster_.Logs();
    ASSERT_TRUE(cluster_.WaitForHosts(1, seconds(20)).ok()) << cluster_.Logs();
  }
  void TearDown() override {
    // Detached: the coordinator, stopped with the cluster after this, lets
    // go of its files when it ends.
    if (mounted_) umount2(state_dir_.c_str(), MNT_DETACH);
  }

  // Starts a run of one gang whose members wait for Go(), then print
  // "finished" and end, into `run`, and waits until the coordinator's status
  // shows the gang running (60 s); its id into `gang` when given.
  void StartAGangThatWaits(std::unique_ptr<Subprocess>* run,
                           std::string* gang = nullptr) {
    flags_ = cluster_.dir().Sub("flags");
    fs::create_directories(flags_);
    fs::permissions(flags_, fs::perms::all);
    const std::string project = MakeShellProject(
        cluster_.dir(),
        absl::StrCat("until [ -e ", flags_,
                     "/go ]; do sleep 0.2; done; echo finished"));
    *run = StartRunLocal(cluster_, project, "train");
    ASSERT_NE(*run, nullptr);
    const std::string running = cluster_.WaitForRunningGang(seconds(60));
    ASSERT_FALSE(running.empty()) << cluster_.Logs();
    if (gang != nullptr) *gang = running;
  }

  // Lets the members of StartAGangThatWaits's gang go on.
  void Go() { WriteFile(flags_ + "/go", ""); }

  // No lease is held and no job process is left (10 s).
  void ExpectLeasesAndJobsGone() {
    ExpectLeasesReleased(cluster_);
    EXPECT_TRUE(
        WaitFor([&] { return JobProcesses(cluster_).empty(); }, seconds(10)))
        << DescribeAll(JobProcesses(cluster_));
  }

  GdtCluster cluster_;
  std::string state_dir_;
  bool mounted_ = false;
  std::string flags_;  // Where Go() writes.
};

// The state's file system fills up while a gang runs and its members end:
// their exit reports cannot be stored. The gang does not fail; the
// coordinator says why in one line (not one per refused write), the
// executors wait, and once there is space again the gang ends DONE by
// itself, and a restart on the same state finds it so, its leases free.
TEST_F(StateStoreFaultTest, AFullStateDiskDelaysExitReportsAndLosesNothing) {
  std::unique_ptr<Subprocess> run;
  ASSERT_NO_FATAL_FAILURE(StartAGangThatWaits(&run));

  const std::string filler = state_dir_ + "/filler";
  ASSERT_TRUE(FillUp(filler));
  Go();
  ASSERT_TRUE(WaitFor(
      [&] { return CountEvents(cluster_, 0, "state_store_failing") > 0; },
      seconds(60)))
      << cluster_.Logs();
  // Both members' executors and the agent retry meanwhile.
  ASSERT_TRUE(WaitFor(
      [&] {
        for (int index : {1, 2}) {
          if (!absl::StrContains(
                  ReadFile(absl::StrCat(cluster_.run_dir(), "/logs/train-",
                                        index, "-2.log")),
                  "retrying the exit report")) {
            return false;
          }
        }
        return absl::StrContains(
            ReadFile(cluster_.dir().Sub("agent-local.log")),
            "event=exit_reports_waiting");
      },
      seconds(30)))
      << cluster_.Logs();
  absl::StatusOr<nlohmann::json> status = cluster_.Status();
  ASSERT_TRUE(status.ok()) << status.status();
  for (const auto& gang : (*status)["gangs"]) {
    EXPECT_EQ(gang.value("state", ""), "running") << gang.dump();
  }
  // Many refused writes, one line a minute; not one per refused report.
  EXPECT_EQ(CountEvents(cluster_, 0, "state_store_failing"), 1)
      << cluster_.Logs();
  EXPECT_EQ(CountEvents(cluster_, 0, "exit_report_rejected"), 0)
      << cluster_.Logs();

  fs::remove(filler);
  CommandResult result = FinishRun(*run, seconds(150));
  EXPECT_TRUE(result.status.success()) << result.output << cluster_.Logs();
  EXPECT_EQ(CountEvents(cluster_, 0, "state_store_recovered"), 1)
      << cluster_.Logs();
  ExpectLeasesReleased(cluster_);

  // Nothing acknowledged was lost: a restart on the same state agrees.
  cluster_.StopCoordinator(SIGKILL);
  ASSERT_TRUE(cluster_.StartCoordinator().ok()) << cluster_.Logs();
  ExpectLeasesAndJobsGone();
}

// The state's file system is full when a gang's members join: the gang is
// not admitted, says why in its waiting reason, and the coordinator logs
// one line, not one per admission pass. Once there is space the gang is
// admitted, runs and succeeds.
TEST_F(StateStoreFaultTest, AFullStateDiskHoldsAnAdmissionUntilThereIsSpace) {
  const std::string filler = state_dir_ + "/filler";
  ASSERT_TRUE(FillUp(filler));
  const std::string project = MakeShellProject(cluster_.dir(), "echo finished");
  std::unique_ptr<Subprocess> run = StartRunLocal(cluster_, project, "train");
  ASSERT_NE(run, nullptr);
  nlohmann::json last;
  ASSERT_TRUE(cluster_.WaitForStatus(
      [](const nlohmann::json& status) {
        return absl::StrContains(status.dump(), "state store to accept writes");
      },
      seconds(60), &last))
      << last.dump() << cluster_.Logs();
  // Several admission passes (one a second) while the disk stays full: the
  // gang keeps waiting with its reason.
  const auto until = std::chrono::steady_clock::now() + seconds(4);
  while (std::chrono::steady_clock::now() < until) {
    absl::StatusOr<nlohmann::json> status = cluster_.Status();
    ASSERT_TRUE(status.ok()) << status.status();
    EXPECT_THAT(status->dump(), HasSubstr("state store to accept writes"));
  }
  EXPECT_EQ(CountEvents(cluster_, 0, "gang_admitted"), 0) << cluster_.Logs();
  EXPECT_EQ(CountEvents(cluster_, 0, "state_store_failing"), 1)
      << cluster_.Logs();
  EXPECT_EQ(CountEvents(cluster_, 0, "gang_not_admitted"), 0)
      << cluster_.Logs();

  fs::remove(filler);
  CommandResult result = FinishRun(*run, seconds(150));
  EXPECT_TRUE(result.status.success()) << result.output << cluster_.Logs();
  EXPECT_EQ(CountEvents(cluster_, 0, "state_store_recovered"), 1)
      << cluster_.Logs();
  ExpectLeasesReleased(cluster_);
}

// An operator opens the state with sqlite3 and leaves a write transaction
// open (`BEGIN EXCLUSIVE;`) while a gang's members end. Their exit reports
// cannot be stored meanwhile; the coordinator still answers everything else
// at once (a refused write does not hold it for seconds), logs why, and the
// gang ends DONE once the transaction is closed.
TEST_F(StateStoreFaultTest, AStateFileLockedFromOutsideDelaysOnlyWrites) {
  std::unique_ptr<Subprocess> run;
  ASSERT_NO_FATAL_FAILURE(StartAGangThatWaits(&run));

  sqlite3* operator_db = nullptr;
  ASSERT_EQ(sqlite3_open_v2((state_dir_ + "/coord.db").c_str(), &operator_db,
                            SQLITE_OPEN_READWRITE, nullptr),
            SQLITE_OK);
  std::unique_ptr<sqlite3, int (*)(sqlite3*)> closer(operator_db,
                                                     sqlite3_close_v2);
  ASSERT_EQ(
      sqlite3_exec(operator_db, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr),
      SQLITE_OK)
      << sqlite3_errmsg(operator_db);
  Go();
  ASSERT_TRUE(WaitFor(
      [&] { return CountEvents(cluster_, 0, "state_store_failing") > 0; },
      seconds(60)))
      << cluster_.Logs();
  // While the members' reports are refused and retried, status answers.
  std::chrono::milliseconds slowest{0};
  const auto until = std::chrono::steady_clock::now() + seconds(10);
  while (std::chrono::steady_clock::now() < until) {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<nlohmann::json> status = cluster_.Status();
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - start);
    ASSERT_TRUE(status.ok()) << status.status() << cluster_.Logs();
    slowest = std::max(slowest, took);
    for (const auto& gang : (*status)["gangs"]) {
      EXPECT_EQ(gang.value("state", ""), "running") << gang.dump();
    }
  }
  EXPECT_LT(slowest.count(), 3000) << cluster_.Logs();

  ASSERT_EQ(sqlite3_exec(operator_db, "COMMIT", nullptr, nullptr, nullptr),
            SQLITE_OK);
  closer.reset();
  CommandResult result = FinishRun(*run, seconds(150));
  EXPECT_TRUE(result.status.success()) << result.output << cluster_.Logs();
  EXPECT_GE(CountEvents(cluster_, 0, "state_store_recovered"), 1)
      << cluster_.Logs();
  ExpectLeasesAndJobsGone();
}

// An operator deletes the state file (`rm coord.db`) while a gang runs.
// The coordinator writes it anew from what it holds within seconds and
// says so; the gang goes on and ends DONE, and a coordinator restarted on
// the restored file still knows the finished gang.
TEST_F(StateStoreFaultTest,
       ADeletedStateFileIsRestoredAndARestartKnowsTheGang) {
  std::unique_ptr<Subprocess> run;
  std::string gang;
  ASSERT_NO_FATAL_FAILURE(StartAGangThatWaits(&run, &gang));

  const std::string path = state_dir_ + "/coord.db";
  ASSERT_TRUE(fs::remove(path));
  // Noticed with the next write or the once-a-second flush (at most every
  // 5 s), though nothing happens in the gang meanwhile.
  ASSERT_TRUE(WaitFor(
      [&] { return CountEvents(cluster_, 0, "state_file_restored") > 0; },
      seconds(30)))
      << cluster_.Logs();
  EXPECT_TRUE(fs::exists(path));
  Go();
  CommandResult result = FinishRun(*run, seconds(150));
  EXPECT_TRUE(result.status.success()) << result.output << cluster_.Logs();
  EXPECT_EQ(CountEvents(cluster_, 0, "state_file_restored"), 1)
      << cluster_.Logs();
  EXPECT_EQ(CountEvents(cluster_, 0, "state_file_moved"), 0) << cluster_.Logs();
  EXPECT_EQ(CountEvents(cluster_, 0, "state_store_failing"), 0)
      << cluster_.Logs();
  ExpectLeasesReleased(cluster_);

  // What the coordinator stored after the restore is in the new file.
  cluster_.StopCoordinator(SIGKILL);
  ASSERT_TRUE(cluster_.StartCoordinator().ok()) << cluster_.Logs();
  absl::StatusOr<nlohmann::json> status = cluster_.Status();
  ASSERT_TRUE(status.ok()) << status.status();
  std::vector<std::string> known;
  for (const auto& listed : (*status)["gangs"]) {
    known.push_back(absl::StrCat(listed.value("gang_id", ""), " ",
                                 listed.value("state", "")));
  }
  EXPECT_THAT(known, ::testing::ElementsAre(gang + " done")) << status->dump();
  ExpectLeasesAndJobsGone();
}

}  // namespace
}  // namespace gdt::test
