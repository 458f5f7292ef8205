#include "agent/isolation.h"

#include <fcntl.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/mount_info.h"
#include "common/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/few_descriptors.h"
#include "testing/stuck_fuse.h"
#include "testing/temp_dir.h"

namespace gdt::agent {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::Pair;

// Accounts no other test uses (numeric, without a passwd entry), so that a
// purge here never meets another test's members: ctest runs tests two at a
// time, and a live process of the account makes the purge hold back.
// Each purging test below has its own, for the same reason: one's live
// process or System V objects would be the other's. (61001-61002: most
// end-to-end tests; 61011-61012, 61021-61022 and 61031-61034: the
// isolation tests' own; 61108-61111: DiskLimitOpenTest's; 61120-61123:
// DiskLimitMapTest's.)
constexpr uid_t kUid = 61091;
constexpr uid_t kOtherUid = 61092;
constexpr uid_t kBusyUid = 61093;
constexpr uid_t kBoundedUid = 61094;
constexpr uid_t kDeepUid = 61104;
constexpr uid_t kStarvedUid = 61105;
constexpr uid_t kKeptUid = 61106;
constexpr uid_t kChainUid = 61107;
constexpr uid_t kManyUid = 61112;
constexpr uid_t kLiftUid = 61113;
constexpr uid_t kLiftBoundUid = 61114;
constexpr uid_t kMountUid = 61124;
constexpr uid_t kFuseUid = 61125;

void Make(const std::string& path, uid_t uid, gid_t gid, mode_t mode) {
  std::ofstream(path) << "secret of " << uid << "\n";
  ASSERT_EQ(chown(path.c_str(), uid, gid), 0) << path;
  ASSERT_EQ(chmod(path.c_str(), mode), 0) << path;
}

void MakeDir(const std::string& path, uid_t uid, gid_t gid, mode_t mode) {
  ASSERT_TRUE(fs::create_directory(path)) << path;
  ASSERT_EQ(chown(path.c_str(), uid, gid), 0) << path;
  ASSERT_EQ(chmod(path.c_str(), mode), 0) << path;
}

bool Exists(const std::string& path) {
  struct stat info = {};
  return lstat(path.c_str(), &info) == 0;
}

// System V objects made by root and handed to `uid` (as IPC_SET allows),
// or left to root.
int SharedMemory(uid_t uid) {
  const int id = shmget(IPC_PRIVATE, 4096, IPC_CREAT | 0600);
  shmid_ds info = {};
  if (id >= 0 && shmctl(id, IPC_STAT, &info) == 0) {
    info.shm_perm.uid = uid;
    shmctl(id, IPC_SET, &info);
  }
  return id;
}
int Semaphores(uid_t uid) {
  const int id = semget(IPC_PRIVATE, 2, IPC_CREAT | 0600);
  semid_ds info = {};
  if (id >= 0 && semctl(id, 0, IPC_STAT, &info) == 0) {
    info.sem_perm.uid = uid;
    semctl(id, 0, IPC_SET, &info);
  }
  return id;
}
int MessageQueue(uid_t uid) {
  const int id = msgget(IPC_PRIVATE, IPC_CREAT | 0600);
  msqid_ds info = {};
  if (id >= 0 && msgctl(id, IPC_STAT, &info) == 0) {
    info.msg_perm.uid = uid;
    msgctl(id, IPC_SET, &info);
  }
  return id;
}
bool ShmAlive(int id) {
  shmid_ds info = {};
  return shmctl(id, IPC_STAT, &info) == 0;
}
bool SemAlive(int id) {
  semid_ds info = {};
  return semctl(id, 0, IPC_STAT, &info) == 0;
}
bool MsgAlive(int id) {
  msqid_ds info = {};
  return msgctl(id, IPC_STAT, &info) == 0;
}

class PurgeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) {
      GTEST_SKIP() << "needs root: it makes files and IPC objects of other "
                      "accounts (CI runs the suite as root)";
    }
    // Like /tmp: everyone may write, the sticky bit keeps them apart.
    MakeDir(shared_, 0, 0, 01777);
  }
  void TearDown() override {
    for (int id : shm_) shmctl(id, IPC_RMID, nullptr);
    for (int id : sem_) semctl(id, 0, IPC_RMID);
    for (int id : msg_) msgctl(id, IPC_RMID, nullptr);
  }

  PurgeOptions Options() const {
    PurgeOptions options;
    options.roots = {shared_, temp_.Sub("missing")};
    return options;
  }

  // Purges the files `uid` left (not its System V objects) with `options`.
  static PurgeCounts PurgeFiles(uid_t uid, PurgeOptions options) {
    options.sysv_ipc = false;
    absl::StatusOr<PurgeCounts> purged =
        PurgeAccountLeftovers(uid, uid, options);
    EXPECT_TRUE(purged.ok()) << purged.status();
    return purged.value_or(PurgeCounts{});
  }

  test::TempDir temp_;
  const std::string shared_ = temp_.Sub("shared");
  std::vector<int> shm_, sem_, msg_;
};

TEST_F(PurgeTest, RemovesWhatTheAccountLeftAndNothingElse) {
  const std::string s = shared_ + "/";
  Make(s + "secret", kUid, kUid, 0600);
  // A link planted for the account's next holder; its target stays.
  Make(s + "target", 0, 0, 0644);
  ASSERT_EQ(symlink((s + "target").c_str(), (s + "trap").c_str()), 0);
  ASSERT_EQ(lchown((s + "trap").c_str(), kUid, kUid), 0);
  // The account's directory goes whole, whoever owns what is in it.
  MakeDir(s + "mine", kUid, kUid, 0700);
  MakeDir(s + "mine/deeper", kUid, kUid, 0700);
  Make(s + "mine/deeper/file", kUid, kUid, 0600);
  Make(s + "mine/roots", 0, 0, 0600);
  // In another world-writable directory, and in one the account's group
  // may write: found.
  MakeDir(s + "sticky", 0, 0, 01777);
  Make(s + "sticky/hidden", kUid, kUid, 0600);
  MakeDir(s + "group", 0, kUid, 0770);
  Make(s + "group/hidden", kUid, kUid, 0600);
  // Not the account's: kept, also where the account could not have
  // written, behind a link, or in a directory the agent keeps.
  Make(s + "other", kOtherUid, kOtherUid, 0600);
  MakeDir(s + "closed", 0, 0, 0755);
  Make(s + "closed/made-by-root-for-it", kUid, kUid, 0600);
  MakeDir(temp_.Sub("elsewhere"), 0, 0, 01777);
  Make(temp_.Sub("elsewhere/file"), kUid, kUid, 0600);
  ASSERT_EQ(symlink(temp_.Sub("elsewhere").c_str(), (s + "link").c_str()), 0);
  MakeDir(s + "kept", kUid, kUid, 0700);
  Make(s + "kept/file", kUid, kUid, 0600);
  shm_ = {SharedMemory(kUid), SharedMemory(kOtherUid)};
  sem_ = {Semaphores(kUid), Semaphores(kOtherUid)};
  msg_ = {MessageQueue(kUid), MessageQueue(kOtherUid)};
  for (int id : {shm_[0], shm_[1], sem_[0], sem_[1], msg_[0], msg_[1]}) {
    ASSERT_GE(id, 0) << std::strerror(errno);
  }
  PurgeOptions options = Options();
  options.keep = {s + "kept"};

  absl::StatusOr<PurgeCounts> purged =
      PurgeAccountLeftovers(kUid, kUid, options);

  ASSERT_TRUE(purged.ok()) << purged.status();
  EXPECT_EQ(purged->live_processes, 0u);
  EXPECT_FALSE(purged->truncated);
  EXPECT_EQ(purged->failed, 0u);
  // secret, trap, sticky/hidden, group/hidden, mine/deeper/file, mine/roots.
  EXPECT_EQ(purged->files, 6u);
  EXPECT_EQ(purged->dirs, 2u);  // mine, mine/deeper
  EXPECT_EQ(purged->shm, 1u);
  EXPECT_EQ(purged->sem, 1u);
  EXPECT_EQ(purged->msg, 1u);
  for (const char* gone :
       {"secret", "trap", "mine", "sticky/hidden", "group/hidden"}) {
    EXPECT_FALSE(Exists(s + gone)) << gone;
  }
  for (const char* kept : {"target", "sticky", "group", "other",
                           "closed/made-by-root-for-it", "link", "kept/file"}) {
    EXPECT_TRUE(Exists(s + kept)) << kept;
  }
  EXPECT_TRUE(Exists(temp_.Sub("elsewhere/file")));
  EXPECT_FALSE(ShmAlive(shm_[0]));
  EXPECT_FALSE(SemAlive(sem_[0]));
  EXPECT_FALSE(MsgAlive(msg_[0]));
  EXPECT_TRUE(ShmAlive(shm_[1]));
  EXPECT_TRUE(SemAlive(sem_[1]));
  EXPECT_TRUE(MsgAlive(msg_[1]));
}

TEST_F(PurgeTest, NothingGoesWhileAProcessOfTheAccountRuns) {
  Make(shared_ + "/in-use", kBusyUid, kBusyUid, 0600);
  SpawnOptions spawn;
  spawn.argv = {"sleep", "120"};
  spawn.die_with_parent = true;
  spawn.capture_output = false;
  spawn.credentials = SpawnOptions::Credentials{kBusyUid, kBusyUid, {}};
  absl::StatusOr<std::unique_ptr<Subprocess>> holder = Subprocess::Spawn(spawn);
  ASSERT_TRUE(holder.ok()) << holder.status();

  absl::StatusOr<PurgeCounts> busy =
      PurgeAccountLeftovers(kBusyUid, kBusyUid, Options());

  ASSERT_TRUE(busy.ok()) << busy.status();
  EXPECT_EQ(busy->live_processes, 1u);
  EXPECT_EQ(busy->files, 0u);
  EXPECT_TRUE(Exists(shared_ + "/in-use"));
  // Once it is gone (a zombie counts as gone), the purge proceeds.
  (*holder)->Terminate(std::chrono::milliseconds(0));
  absl::StatusOr<PurgeCounts> done =
      PurgeAccountLeftovers(kBusyUid, kBusyUid, Options());
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->live_processes, 0u);
  EXPECT_EQ(done->files, 1u);
  EXPECT_FALSE(Exists(shared_ + "/in-use"));
}

TEST_F(PurgeTest, TheWalkIsBounded) {
  for (int i = 0; i < 20; ++i) {
    Make(shared_ + "/f" + std::to_string(i), kBoundedUid, kBoundedUid, 0600);
  }
  PurgeOptions options = Options();
  options.max_entries = 5;

  const PurgeCounts purged = PurgeFiles(kBoundedUid, options);

  EXPECT_TRUE(purged.truncated);
  EXPECT_EQ(purged.files, 5u);
}

// Below max_depth levels nothing is looked at, and the purge says so.
TEST_F(PurgeTest, TheDepthIsBoundedAndSaysSo) {
  const std::string s = shared_ + "/";
  MakeDir(s + "d1", 0, 0, 01777);
  MakeDir(s + "d1/d2", 0, 0, 01777);
  MakeDir(s + "d1/d2/d3", 0, 0, 01777);
  Make(s + "d1/shallow", kDeepUid, kDeepUid, 0600);
  Make(s + "d1/d2/d3/deep", kDeepUid, kDeepUid, 0600);
  PurgeOptions options = Options();
  options.max_depth = 2;  // The root's entries and theirs.

  const PurgeCounts purged = PurgeFiles(kDeepUid, options);

  EXPECT_TRUE(purged.truncated);
  EXPECT_EQ(purged.files, 1u);
  EXPECT_FALSE(Exists(s + "d1/shallow"));
  EXPECT_TRUE(Exists(s + "d1/d2/d3/deep"));
}

// Others' directories nested past the depth bound in one root (they stay,
// and so does what the account has at their bottom, never reached) do not
// spare the roots after it.
TEST_F(PurgeTest, ADirectoryTooDeepInOneRootDoesNotSpareTheNext) {
  std::string chain = shared_;
  for (int i = 0; i < 4; ++i) {
    chain += "/c";
    MakeDir(chain, 0, 0, 01777);
  }
  Make(chain + "/unreached", kChainUid, kChainUid, 0600);
  const std::string next = temp_.Sub("next");
  MakeDir(next, 0, 0, 01777);
  Make(next + "/left", kChainUid, kChainUid, 0600);
  PurgeOptions options = Options();
  options.roots = {shared_, next};
  options.max_depth = 2;

  const PurgeCounts purged = PurgeFiles(kChainUid, options);

  EXPECT_TRUE(purged.truncated);
  EXPECT_TRUE(Exists(chain + "/unreached"));
  EXPECT_FALSE(Exists(next + "/left")) << "the root after the deep one";
}

// Makes `levels` directories of `uid`, each in the last, below `top`, with
// a file in each; returns the deepest.
std::string MakeChain(const std::string& top, int levels, uid_t uid) {
  std::string chain = top;
  for (int i = 0; i < levels; ++i) {
    chain += "/c";
    MakeDir(chain, uid, uid, 0700);
    Make(chain + "/f", uid, uid, 0600);
  }
  return chain;
}

// The names in `dir`.
std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// A chain of the account's directories deeper than the purge goes is
// removed all the same (a stretch at a time, moved up), whether it starts
// at the top of a root or in a world-writable directory below; the walk
// holds no more descriptors than its depth bound, and nothing of the
// account's is left, neither under its own name nor under another.
TEST_F(PurgeTest, AChainDeeperThanTheDepthBoundGoesToo) {
  MakeChain(shared_, 40, kLiftUid);
  MakeDir(shared_ + "/public", 0, 0, 01777);
  MakeChain(shared_ + "/public", 25, kLiftUid);
  Make(shared_ + "/public/theirs", kOtherUid, kOtherUid, 0600);
  PurgeOptions options = Options();
  options.max_depth = 4;

  const PurgeCounts purged = PurgeFiles(kLiftUid, options);

  EXPECT_FALSE(purged.truncated);
  EXPECT_FALSE(purged.incomplete) << purged.error;
  EXPECT_EQ(purged.failed, 0u);
  EXPECT_EQ(purged.dirs, 65u);
  EXPECT_EQ(purged.files, 65u);
  EXPECT_EQ(Names(shared_), std::vector<std::string>{"public"});
  EXPECT_EQ(Names(shared_ + "/public"), std::vector<std::string>{"theirs"});

  // With the agent's bounds (32 levels), a chain ten times as deep.
  MakeChain(shared_, 320, kLiftUid);
  const PurgeCounts deep = PurgeFiles(kLiftUid, Options());
  EXPECT_FALSE(deep.truncated);
  EXPECT_EQ(deep.failed, 0u);
  EXPECT_EQ(deep.dirs, 320u);
  EXPECT_EQ(Names(shared_), std::vector<std::string>{"public"});
}

// Moving a deep chain up does not lift the entry bound: a purge that
// reaches it ends and says so, and the next one removes what it left,
// under whatever name.
TEST_F(PurgeTest, ADeepChainStillEndsAtTheEntryBound) {
  MakeChain(shared_, 100, kLiftBoundUid);
  PurgeOptions options = Options();
  options.max_depth = 4;
  options.max_entries = 30;

  const PurgeCounts bounded = PurgeFiles(kLiftBoundUid, options);
  EXPECT_TRUE(bounded.truncated);
  EXPECT_FALSE(Names(shared_).empty());

  options.max_entries = 1000;
  const PurgeCounts rest = PurgeFiles(kLiftBoundUid, options);
  EXPECT_FALSE(rest.truncated);
  EXPECT_EQ(rest.failed, 0u);
  EXPECT_EQ(bounded.dirs + rest.dirs, 100u);
  EXPECT_EQ(bounded.files + rest.files, 100u);
  EXPECT_TRUE(Names(shared_).empty());
}

// A directory of many entries (the account's among others', and one of
// its own directories holding thousands) goes whole, on tmpfs and on the
// disk file system the tests' temp dir is on: each directory's entries
// are read before any is removed.
TEST_F(PurgeTest, ADirectoryOfManyEntriesGoesWhole) {
  const test::TempDir on_tmpfs("/dev/shm");
  ASSERT_FALSE(on_tmpfs.path().empty());
  for (const std::string& base : {temp_.Sub("disk"), on_tmpfs.path()}) {
    SCOPED_TRACE(base);
    const std::string root = base + "/root";
    if (!Exists(base)) MakeDir(base, 0, 0, 0755);
    MakeDir(root, 0, 0, 01777);
    for (int i = 0; i < 3000; ++i) {
      Make(absl::StrCat(root, "/m", i), kManyUid, kManyUid, 0600);
      if (i % 3 == 0) {
        Make(absl::StrCat(root, "/o", i), kOtherUid, kOtherUid, 0600);
      }
    }
    MakeDir(root + "/mine", kManyUid, kManyUid, 0700);
    for (int i = 0; i < 5000; ++i) {
      Make(absl::StrCat(root, "/mine/f", i), kManyUid, kManyUid, 0600);
    }
    PurgeOptions options = Options();
    options.roots = {root};

    const PurgeCounts purged = PurgeFiles(kManyUid, options);

    EXPECT_FALSE(purged.truncated);
    EXPECT_EQ(purged.failed, 0u);
    EXPECT_EQ(purged.files, 8000u);
    EXPECT_EQ(purged.dirs, 1u);
    const std::vector<std::string> left = Names(root);
    EXPECT_EQ(left.size(), 1000u);
    for (const std::string& name : left) EXPECT_EQ(name[0], 'o') << name;
  }
}

// A purge that runs out of descriptors says what it could not look at;
// the next one (with descriptors) removes what it left.
TEST_F(PurgeTest, AWalkThatRunsOutOfDescriptorsSaysSo) {
  const std::string deep = shared_ + "/a/b/c/d";
  for (const std::string& dir :
       {shared_ + "/a", shared_ + "/a/b", shared_ + "/a/b/c", deep}) {
    MakeDir(dir, 0, 0, 01777);
  }
  Make(deep + "/left", kStarvedUid, kStarvedUid, 0600);
  EXPECT_EQ(test::WithFewDescriptors([&] {
              const PurgeCounts purged = PurgeFiles(kStarvedUid, Options());
              if (!purged.incomplete) return 2;
              if (!absl::StrContains(purged.error, "Too many open files")) {
                return 3;
              }
              return purged.files == 0 ? 0 : 4;
            }),
            0);
  EXPECT_TRUE(Exists(deep + "/left"));

  const PurgeCounts purged = PurgeFiles(kStarvedUid, Options());
  EXPECT_FALSE(purged.incomplete) << purged.error;
  EXPECT_EQ(purged.files, 1u);
  EXPECT_FALSE(Exists(deep + "/left"));
}

// A directory the agent keeps is neither entered nor removed, also inside
// a directory of the account's.
TEST_F(PurgeTest, AKeptDirectoryInTheAccountsOwnStays) {
  const std::string mine = shared_ + "/mine";
  MakeDir(mine, kKeptUid, kKeptUid, 0700);
  Make(mine + "/file", kKeptUid, kKeptUid, 0600);
  MakeDir(mine + "/kept", 0, 0, 0755);
  Make(mine + "/kept/file", 0, 0, 0600);
  PurgeOptions options = Options();
  options.keep = {mine + "/kept"};

  const PurgeCounts purged = PurgeFiles(kKeptUid, options);

  EXPECT_TRUE(Exists(mine + "/kept/file"));
  EXPECT_FALSE(Exists(mine + "/file"));
  EXPECT_EQ(purged.files, 1u);
  EXPECT_EQ(purged.failed, 1u);  // `mine` itself, not empty.
}

// A FUSE file system in the account's directory in /tmp that never
// answers and is not the account's (root mounted it, letting everyone in,
// as allow_other does): the purge neither waits on it nor enters it nor
// detaches it, and removes the rest.
TEST_F(PurgeTest, AFileSystemThatNeverAnswersHoldsNoPurge) {
  const std::string mine = shared_ + "/mine";
  MakeDir(mine, kMountUid, kMountUid, 0700);
  Make(mine + "/file", kMountUid, kMountUid, 0600);
  MakeDir(mine + "/mnt", kMountUid, kMountUid, 0700);
  test::StuckFuse stuck(mine + "/mnt");
  if (!stuck.error().empty()) GTEST_SKIP() << stuck.error();

  const std::optional<PurgeCounts> ended = test::EndsWithin(
      std::chrono::seconds(20),
      [&] { return PurgeFiles(kMountUid, Options()); }, {&stuck});
  ASSERT_TRUE(ended) << "the purge waited on a file system that never answers";
  const PurgeCounts& purged = *ended;

  EXPECT_FALSE(Exists(mine + "/file"));
  EXPECT_EQ(purged.files, 1u);
  // The mount point (a file system of its own, not entered) stays, and so
  // does `mine`, which holds it.
  EXPECT_EQ(purged.failed, 2u);
  EXPECT_FALSE(purged.incomplete) << purged.error;
}

bool MountedAt(const std::string& dir) {
  // The parent resolved: a dead FUSE mount answers no stat.
  const std::string real = (fs::weakly_canonical(fs::path(dir).parent_path()) /
                            fs::path(dir).filename())
                               .string();
  for (const MountInfo& mount : ReadMountInfo()) {
    if (mount.mount_point == real) return true;
  }
  return false;
}

// The account mounted FUSE file systems in its directory in /tmp, as
// fusermount does (user_id= the account), and its processes, their
// daemons among them, are gone: they are detached, one answering nothing
// at all and one whose daemon died, and the directory goes whole. A FUSE
// mount of another account, and one of root, stay.
TEST_F(PurgeTest, TheAccountsFuseMountsAreDetachedAndItsDirectoryGoes) {
  const std::string mine = shared_ + "/mine";
  const std::string theirs = shared_ + "/theirs";
  MakeDir(mine, kFuseUid, kFuseUid, 0700);
  MakeDir(mine + "/dead", kFuseUid, kFuseUid, 0700);
  MakeDir(mine + "/dead/deeper", kFuseUid, kFuseUid, 0700);
  MakeDir(mine + "/silent", kFuseUid, kFuseUid, 0700);
  Make(mine + "/file", kFuseUid, kFuseUid, 0600);
  MakeDir(theirs, kOtherUid, kOtherUid, 0700);
  MakeDir(theirs + "/mnt", kOtherUid, kOtherUid, 0700);
  MakeDir(shared_ + "/roots", 0, 0, 0755);
  test::StuckFuse dead(mine + "/dead", kFuseUid);
  if (!dead.error().empty()) GTEST_SKIP() << dead.error();
  test::StuckFuse silent(mine + "/silent", kFuseUid);
  test::StuckFuse other(theirs + "/mnt", kOtherUid);
  test::StuckFuse roots(shared_ + "/roots", 0);
  ASSERT_TRUE(silent.error().empty() && other.error().empty() &&
              roots.error().empty())
      << silent.error() << other.error() << roots.error();
  dead.CloseDevice();

  const std::optional<PurgeCounts> ended = test::EndsWithin(
      std::chrono::seconds(20), [&] { return PurgeFiles(kFuseUid, Options()); },
      {&silent});
  ASSERT_TRUE(ended) << "the purge waited on a file system that never answers";
  const PurgeCounts& purged = *ended;

  EXPECT_EQ(purged.mounts, 2u);
  EXPECT_FALSE(MountedAt(mine + "/dead"));
  EXPECT_FALSE(MountedAt(mine + "/silent"));
  EXPECT_FALSE(Exists(mine))
      << "failed=" << purged.failed << " " << purged.error;
  EXPECT_EQ(purged.failed, 0u) << purged.error;
  EXPECT_FALSE(purged.incomplete) << purged.error;
  EXPECT_TRUE(MountedAt(theirs + "/mnt"));
  EXPECT_TRUE(MountedAt(shared_ + "/roots"));
}

// A member mounted FUSE file systems in its scratch dir (through
// fusermount); its processes, their daemons among them, are gone. Its
// directory cannot be removed until they are detached, and only they are.
TEST(DetachMountsTest, WhatAMemberMountedGoesAndItsDirectoryWithIt) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: mounts FUSE file systems";
  test::TempDir temp;
  const std::string dir = temp.Sub("scratch");
  const std::string beside = temp.Sub("scratch-beside");
  fs::create_directories(dir + "/a/mnt");
  fs::create_directories(dir + "/b");
  fs::create_directories(beside);
  test::StuckFuse deep(dir + "/a/mnt");
  if (!deep.error().empty()) GTEST_SKIP() << deep.error();
  test::StuckFuse top(dir + "/b");
  test::StuckFuse other(beside);
  ASSERT_TRUE(top.error().empty() && other.error().empty())
      << top.error() << other.error();
  deep.CloseDevice();
  top.CloseDevice();
  other.CloseDevice();
  std::error_code error;
  fs::remove_all(dir, error);
  ASSERT_TRUE(error) << "removed with the mounts in place";

  const absl::StatusOr<size_t> detached = DetachMountsUnder(dir + "/");

  ASSERT_TRUE(detached.ok()) << detached.status();
  EXPECT_EQ(*detached, 2u);
  fs::remove_all(dir, error);
  EXPECT_FALSE(error) << error.message();
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_TRUE(MountedAt(beside));  // Not below it, for all its name.
  EXPECT_EQ(DetachMountsUnder("relative/dir").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PurgeRefusalTest, NeverRootNorTheCallersOwnAccount) {
  EXPECT_EQ(PurgeAccountLeftovers(0, 0, PurgeOptions{}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PurgeAccountLeftovers(geteuid(), getegid(), PurgeOptions{})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(StageBaseEnvironmentTest, KeepsTheBasicsAndWhatIsPassedThrough) {
  const std::map<std::string, std::string> agent = {
      {"PATH", "/usr/bin:/bin"},
      {"HOME", "/root"},
      {"LANG", "C.UTF-8"},
      {"LC_ALL", "C"},
      {"TZ", "UTC"},
      {"AWS_SECRET_ACCESS_KEY", "agent-secret"},
      {"GDT_LOG_LEVEL", "debug"},
      {"NCCL_SOCKET_IFNAME", "eth0"},
      {"NCCL_IB_DISABLE", "1"},
      {"LD_LIBRARY_PATH", "/usr/local/cuda/lib64"},
      {"LD_PRELOAD", "/evil.so"}};

  EXPECT_THAT(StageBaseEnvironment(agent, {}),
              ElementsAre(Pair("HOME", "/root"), Pair("LANG", "C.UTF-8"),
                          Pair("LC_ALL", "C"), Pair("PATH", "/usr/bin:/bin"),
                          Pair("TZ", "UTC")));
  EXPECT_THAT(
      StageBaseEnvironment(agent, {"NCCL_*", "LD_LIBRARY_PATH", "NOT_SET"}),
      ElementsAre(
          Pair("HOME", "/root"), Pair("LANG", "C.UTF-8"), Pair("LC_ALL", "C"),
          Pair("LD_LIBRARY_PATH", "/usr/local/cuda/lib64"),
          Pair("NCCL_IB_DISABLE", "1"), Pair("NCCL_SOCKET_IFNAME", "eth0"),
          Pair("PATH", "/usr/bin:/bin"), Pair("TZ", "UTC")));
}

TEST(MemberPidsMaxTest, MembersTogetherLeaveAQuarterOfTheKernelsPids) {
  // A large kernel limit leaves the setting as it is.
  EXPECT_EQ(MemberPidsMax(32768, 4194304, 8), 32768u);
  // The kernel's default of 32768: two members at 32768 each could take
  // every pid of the host; each gets 3/4 of it shared out.
  EXPECT_EQ(MemberPidsMax(32768, 32768, 2), 12288u);
  EXPECT_EQ(MemberPidsMax(32768, 32768, 1), 24576u);
  EXPECT_LT(MemberPidsMax(32768, 32768, 8) * 8, 32768u);
  // No limit asked for, or the kernel's unknown: unchanged.
  EXPECT_EQ(MemberPidsMax(0, 32768, 2), 0u);
  EXPECT_EQ(MemberPidsMax(32768, 0, 2), 32768u);
  // Never 0, which would mean no limit at all.
  EXPECT_EQ(MemberPidsMax(32768, 3, 100), 1u);
  EXPECT_EQ(MemberPidsMax(32768, 32768, 0), 24576u);
}

TEST(MemberPidsMaxTest, TheKernelsLimitIsReadFromProc) {
  const uint64_t limit = KernelPidsLimit();
  EXPECT_GT(limit, 0u);
  std::ifstream pid_max("/proc/sys/kernel/pid_max");
  uint64_t value = 0;
  ASSERT_TRUE(pid_max >> value);
  EXPECT_LE(limit, value);
}

// A member reaches its master at what GDT_MASTER_ADDR resolves to and, when
// that is this host, at every address that leads here; a master elsewhere
// only at its own addresses.
TEST(MasterAddressesTest, ThisHostAddsLoopbackAndItsOwnAddresses) {
  auto texts = [](const std::vector<IpPrefix>& prefixes) {
    std::vector<std::string> out;
    for (const IpPrefix& prefix : prefixes) {
      out.push_back(FormatIpPrefix(prefix));
    }
    return out;
  };
  absl::StatusOr<std::vector<IpPrefix>> here = MasterAddresses("127.0.0.1");
  ASSERT_TRUE(here.ok()) << here.status();
  EXPECT_THAT(texts(*here),
              ::testing::IsSupersetOf({"127.0.0.1/32", "127.0.0.0/8", "::1/128",
                                       "0.0.0.0/32", "::/128"}));
  // Every address of an interface (loopback's at least).
  absl::StatusOr<std::vector<IpPrefix>> by_name = MasterAddresses("localhost");
  ASSERT_TRUE(by_name.ok()) << by_name.status();
  EXPECT_THAT(texts(*by_name), ::testing::Contains("127.0.0.0/8"));

  absl::StatusOr<std::vector<IpPrefix>> elsewhere =
      MasterAddresses("192.0.2.7");
  ASSERT_TRUE(elsewhere.ok()) << elsewhere.status();
  EXPECT_THAT(texts(*elsewhere), ElementsAre("192.0.2.7/32"));
  absl::StatusOr<std::vector<IpPrefix>> v6 = MasterAddresses("2001:db8::7");
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_THAT(texts(*v6), ElementsAre("2001:db8::7/128"));

  EXPECT_EQ(MasterAddresses("no-such-host.invalid").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace gdt::agent
