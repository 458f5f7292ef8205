#include "common/subprocess.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gdt {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;
using ::testing::Not;

SpawnOptions Shell(const std::string& script) {
  SpawnOptions options;
  options.argv = {"/bin/sh", "-c", script};
  options.env = {{"PATH", "/usr/bin:/bin"}, {"GREETING", "hello"}};
  options.die_with_parent = true;
  return options;
}

TEST(SubprocessTest, CapturesBothStreamsAndExitCode) {
  auto child =
      Subprocess::Spawn(Shell("echo $GREETING; echo oops >&2; exit 3"));
  ASSERT_TRUE(child.ok()) << child.status();
  std::string out, err;

  ExitStatus status = (*child)->Wait([&](OutputSource s, std::string_view d) {
    (s == OutputSource::kStdout ? out : err).append(d);
  });

  EXPECT_EQ(status.code(), 3);
  EXPECT_EQ(out, "hello\n");
  EXPECT_EQ(err, "oops\n");
}

TEST(SubprocessTest, TheChildGetsNoDescriptorButItsStandardOnes) {
  // Opened without O_CLOEXEC, as a library or an inherited descriptor may
  // be: a job must not read from it.
  int leaked[2] = {-1, -1};
  ASSERT_EQ(pipe(leaked), 0);
  // Far from the descriptor the listing itself opens.
  ASSERT_EQ(dup2(leaked[0], 77), 77);
  ASSERT_EQ(dup2(leaked[1], 78), 78);
  close(leaked[0]);
  close(leaked[1]);
  auto child = Subprocess::Spawn(
      Shell("for fd in /proc/self/fd/*; do echo \"${fd##*/}\"; done"));
  ASSERT_TRUE(child.ok()) << child.status();
  std::string out;

  ExitStatus status = (*child)->Wait([&](OutputSource s, std::string_view d) {
    if (s == OutputSource::kStdout) out.append(d);
  });

  EXPECT_TRUE(status.success());
  // 0, 1, 2 and the one the listing itself holds open.
  std::vector<std::string> fds = absl::StrSplit(out, '\n', absl::SkipEmpty());
  EXPECT_THAT(fds, ::testing::IsSupersetOf({"0", "1", "2"}));
  EXPECT_LE(fds.size(), 4u) << out;
  EXPECT_THAT(fds, ::testing::Not(::testing::Contains("77"))) << out;
  EXPECT_THAT(fds, ::testing::Not(::testing::Contains("78"))) << out;
  close(77);
  close(78);
}

TEST(SubprocessTest, MissingProgramIsNotFound) {
  SpawnOptions options = Shell("");
  options.argv = {"/nonexistent/program"};

  auto child = Subprocess::Spawn(options);

  EXPECT_EQ(child.status().code(), absl::StatusCode::kNotFound);
}

bool ProcessIsZombie(pid_t pid) {
  FILE* f = fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
  if (f == nullptr) return true;
  char buf[512] = {0};
  const size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  return std::string(buf, n).find(") Z") != std::string::npos;
}

TEST(SubprocessTest, TerminateKillsTheWholeGroupAfterGrace) {
  // The shell ignores SIGTERM and has a grandchild: both must be gone.
  auto child =
      Subprocess::Spawn(Shell("trap '' TERM; sleep 30 & echo $!; wait"));
  ASSERT_TRUE(child.ok()) << child.status();
  std::string out;
  while (out.find('\n') == std::string::npos) {
    ASSERT_TRUE((*child)->PumpOutput(
        milliseconds(1000),
        [&](OutputSource, std::string_view d) { out.append(d); }));
  }
  const pid_t grandchild = std::stoi(out);
  ASSERT_GT(grandchild, 0);

  ExitStatus status = (*child)->Terminate(milliseconds(200));

  EXPECT_EQ(status.signal, SIGKILL);
  // The grandchild was in the same group, so it got SIGKILL too; once it is
  // reaped by init, kill(pid, 0) fails.
  const auto deadline = std::chrono::steady_clock::now() + seconds(5);
  while (kill(grandchild, 0) == 0 && !ProcessIsZombie(grandchild) &&
         std::chrono::steady_clock::now() < deadline) {
    usleep(10000);
  }
  EXPECT_TRUE(kill(grandchild, 0) != 0 || ProcessIsZombie(grandchild))
      << "grandchild " << grandchild << " survived Terminate()";
}

TEST(SubprocessTest, WaitUntilGivesUpAtDeadline) {
  auto child = Subprocess::Spawn(Shell("sleep 30"));
  ASSERT_TRUE(child.ok()) << child.status();

  auto status =
      (*child)->WaitUntil(std::chrono::steady_clock::now() + milliseconds(100));

  EXPECT_FALSE(status.has_value());
}

// How long WaitUntil takes to return after the child exited, the exit seen
// by a thread blocked in waitid(WNOWAIT) (which leaves the child to be
// reaped). The child exits while WaitUntil waits; looking for the exit only
// between polls of the output costs at least 5 ms after the pipes close.
TEST(SubprocessTest, WaitUntilReturnsAsSoonAsTheChildExits) {
  std::vector<std::chrono::steady_clock::duration> took;
  for (int run = 0; run < 21; ++run) {
    SpawnOptions options = Shell("");
    options.argv = {"sleep", "0.03"};
    auto child = Subprocess::Spawn(options);
    ASSERT_TRUE(child.ok()) << child.status();
    const pid_t pid = (*child)->pid();
    std::chrono::steady_clock::time_point exited;
    std::thread watcher([pid, &exited] {
      siginfo_t info = {};
      while (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT) !=
                 0 &&
             errno == EINTR) {
      }
      exited = std::chrono::steady_clock::now();
    });

    const std::optional<ExitStatus> status =
        (*child)->WaitUntil(std::chrono::steady_clock::now() + seconds(30));

    const auto returned = std::chrono::steady_clock::now();
    watcher.join();
    ASSERT_TRUE(status.has_value()) << "sleep 0.03 did not exit within 30 s";
    EXPECT_TRUE(status->success());
    took.push_back(returned - exited);
  }
  // The median of 21: both threads wake on the same exit, so a loaded
  // machine delays either; the 5 ms after the pipes close delay all.
  std::sort(took.begin(), took.end());
  EXPECT_LT(took[took.size() / 2], std::chrono::microseconds(2500))
      << "median return after the exit took "
      << std::chrono::duration_cast<std::chrono::microseconds>(
             took[took.size() / 2])
             .count()
      << " us";
}

// A process the child left behind keeps the pipes open: the wait still
// ends with the child, with everything the child wrote.
TEST(SubprocessTest, WaitUntilEndsWithTheChildWhileAGrandchildHoldsThePipes) {
  auto child = Subprocess::Spawn(Shell("sleep 30 & echo started; exit 4"));
  ASSERT_TRUE(child.ok()) << child.status();
  std::string out;

  const std::optional<ExitStatus> status = (*child)->WaitUntil(
      std::chrono::steady_clock::now() + seconds(20),
      [&](OutputSource, std::string_view data) { out.append(data); });

  (*child)->SignalGroup(SIGKILL);  // The sleep.
  ASSERT_TRUE(status.has_value()) << "the wait ran into its deadline";
  EXPECT_EQ(status->code(), 4);
  EXPECT_EQ(out, "started\n");
}

TEST(SubprocessTest, RunCommandTimesOut) {
  auto status = RunCommand({"sleep", "30"}, milliseconds(100));

  EXPECT_EQ(status.status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(SubprocessTest, ChildRunsWithTheGivenCredentials) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to switch users";
  SpawnOptions spawn;
  spawn.argv = {"/bin/sh", "-c", "echo $(id -u):$(id -g):$(id -G)"};
  spawn.env = {{"PATH", "/usr/bin:/bin"}};
  spawn.credentials = SpawnOptions::Credentials{61001, 61002, {61003}};
  spawn.die_with_parent = true;
  absl::StatusOr<std::unique_ptr<Subprocess>> child = Subprocess::Spawn(spawn);
  ASSERT_TRUE(child.ok()) << child.status();
  std::string out;
  const ExitStatus exit = (*child)->Wait(
      [&](OutputSource, std::string_view data) { out.append(data); });
  EXPECT_TRUE(exit.success()) << out;
  EXPECT_EQ(out, "61001:61002:61002 61003\n");
}

// The child shares this process's memory until it executes: switching its
// user must leave every thread of this process (the agent) with its own,
// and the process dumpable.
TEST(SubprocessTest, AChildsCredentialsLeaveThisProcesssThreadsTheirOwn) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to switch users";
  std::atomic<bool> done{false};
  std::thread other([&] {
    while (!done.load()) std::this_thread::sleep_for(milliseconds(5));
  });
  SpawnOptions spawn;
  spawn.argv = {"/bin/sh", "-c", "id -u"};
  spawn.env = {{"PATH", "/usr/bin:/bin"}};
  spawn.credentials = SpawnOptions::Credentials{61127, 61127, {61127}};
  spawn.die_with_parent = true;
  const int dumpable = prctl(PR_GET_DUMPABLE);
  absl::StatusOr<std::unique_ptr<Subprocess>> child = Subprocess::Spawn(spawn);
  std::string out;
  if (child.ok()) {
    (*child)->Wait(
        [&](OutputSource, std::string_view data) { out.append(data); });
  }
  std::vector<std::string> threads;
  for (const auto& task :
       std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream status(task.path() / "status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.starts_with("Uid:") || line.starts_with("Gid:") ||
          line.starts_with("Groups:")) {
        threads.push_back(task.path().filename().string() + " " + line);
      }
    }
  }
  done = true;
  other.join();
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(out, "61127\n");
  // And this process can still leave a core dump.
  EXPECT_EQ(prctl(PR_GET_DUMPABLE), dumpable);
  ASSERT_GE(threads.size(), 6u);  // Two threads, three lines each.
  for (const std::string& line : threads) {
    EXPECT_THAT(line, Not(HasSubstr("61127"))) << "a thread of this process";
  }
}

// A child that switches accounts, or joins a cgroup the kernel may OOM-kill
// as a group, gets a copy of this process's memory (SpawnSharesMemory). The
// files stand in for a cgroup's (this host may have no memory controller in
// cgroup v2); the child still starts, writing its "0" into the stand-in
// cgroup.procs.
TEST(SubprocessTest, AChildJoiningAGroupKilledCgroupGetsACopyOfTheMemory) {
  char dir[] = "/tmp/gdt-subprocess-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string cgroup = dir;
  std::ofstream(cgroup + "/cgroup.procs").flush();
  SpawnOptions spawn = Shell("echo started");
  EXPECT_TRUE(SpawnSharesMemory(spawn));
  SpawnOptions other_account = spawn;
  other_account.credentials = SpawnOptions::Credentials{61127, 61127, {}};
  EXPECT_FALSE(SpawnSharesMemory(other_account));
  spawn.cgroup_procs = cgroup + "/cgroup.procs";
  // No memory controller there (no memory.oom.group), or no group kill.
  EXPECT_TRUE(SpawnSharesMemory(spawn));
  std::ofstream(cgroup + "/memory.oom.group") << "0\n";
  EXPECT_TRUE(SpawnSharesMemory(spawn));
  std::ofstream(cgroup + "/memory.oom.group") << "1\n";
  EXPECT_FALSE(SpawnSharesMemory(spawn));

  absl::StatusOr<std::unique_ptr<Subprocess>> child = Subprocess::Spawn(spawn);
  std::string out;
  if (child.ok()) {
    (*child)->Wait(
        [&](OutputSource, std::string_view data) { out.append(data); });
  }
  std::ifstream procs(cgroup + "/cgroup.procs");
  const std::string written((std::istreambuf_iterator<char>(procs)),
                            std::istreambuf_iterator<char>());
  std::filesystem::remove_all(cgroup);
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(out, "started\n");
  EXPECT_EQ(written, "0");
}

TEST(SubprocessTest, WorkingDirTheAccountCannotEnterFailsTheSpawn) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to switch users";
  char dir[] = "/tmp/gdt-subprocess-XXXXXX";  // mkdtemp: mode 0700, root's.
  ASSERT_NE(mkdtemp(dir), nullptr);
  SpawnOptions spawn;
  spawn.argv = {"/bin/true"};
  spawn.working_dir = dir;
  spawn.credentials = SpawnOptions::Credentials{61001, 61001, {}};
  absl::StatusOr<std::unique_ptr<Subprocess>> child = Subprocess::Spawn(spawn);
  rmdir(dir);
  EXPECT_FALSE(child.ok());
}

}  // namespace
}  // namespace gdt
