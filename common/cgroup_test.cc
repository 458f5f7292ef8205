#include "common/cgroup.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/subprocess.h"
#include "gtest/gtest.h"

namespace gdt {
namespace {

using std::chrono::seconds;
using std::chrono::steady_clock;

// A tree of this test's own below the process's cgroup, or a skip saying
// why there is none.
class CgroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> own = OwnCgroupDir();
    if (!own.ok()) GTEST_SKIP() << "no cgroup v2 here: " << own.status();
    parent_ = absl::StrCat(*own, "/gdt-cgroup-test-", getpid());
    absl::StatusOr<std::unique_ptr<CgroupTree>> tree =
        CgroupTree::Open(parent_);
    if (!tree.ok()) {
      GTEST_SKIP() << "cgroup v2 is not writable for this user: "
                   << tree.status();
    }
    tree_ = std::move(*tree);
  }
  void TearDown() override {
    if (tree_ != nullptr) tree_->RemoveParent();
  }

  std::string parent_;
  std::unique_ptr<CgroupTree> tree_;
};

TEST_F(CgroupTest, DestroyEndsProcessesThatLeftTheirGroupAndRemovesIt) {
  absl::StatusOr<std::string> dir = tree_->Create("member");
  ASSERT_TRUE(dir.ok()) << dir.status();
  SpawnOptions spawn;
  // The shell leaves a session-leading sleep behind and exits at once.
  spawn.argv = {"/bin/sh", "-c",
                "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $!"};
  spawn.env = {{"PATH", "/usr/bin:/bin"}};
  spawn.cgroup_procs = *dir + "/cgroup.procs";
  absl::StatusOr<std::unique_ptr<Subprocess>> shell = Subprocess::Spawn(spawn);
  ASSERT_TRUE(shell.ok()) << shell.status();
  std::string output;
  const ExitStatus exit = (*shell)->Wait(
      [&](OutputSource, std::string_view data) { output.append(data); });
  ASSERT_TRUE(exit.success()) << output;
  const pid_t escaped = std::stoi(output);
  ASSERT_EQ(kill(escaped, 0), 0) << "the sleep should still run";
  EXPECT_EQ(tree_->Children(), std::vector<std::string>{"member"});

  absl::StatusOr<size_t> killed =
      tree_->Destroy("member", steady_clock::now() + seconds(10));

  ASSERT_TRUE(killed.ok()) << killed.status();
  EXPECT_EQ(*killed, 1u);
  EXPECT_FALSE(std::filesystem::exists(*dir));
  EXPECT_TRUE(tree_->Children().empty());
  // Gone or a zombie of init's, no longer running.
  const std::string stat = [&] {
    std::ifstream file(absl::StrCat("/proc/", escaped, "/stat"));
    std::string text;
    std::getline(file, text);
    return text;
  }();
  EXPECT_TRUE(stat.empty() || stat.find(") Z ") != std::string::npos) << stat;
  // Again: nothing there, nothing to do.
  EXPECT_EQ(
      tree_->Destroy("member", steady_clock::now() + seconds(1)).value_or(9),
      0u);
}

TEST_F(CgroupTest, SpawnIntoAMissingCgroupFails) {
  SpawnOptions spawn;
  spawn.argv = {"/bin/true"};
  spawn.cgroup_procs = parent_ + "/absent/cgroup.procs";
  EXPECT_FALSE(Subprocess::Spawn(spawn).ok());
}

}  // namespace
}  // namespace gdt
