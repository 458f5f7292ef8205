#include "agent/disk_use.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "testing/few_descriptors.h"
#include "testing/temp_dir.h"

namespace gdt::agent {
namespace {

namespace fs = std::filesystem;

// Writes `bytes` of data (allocated, not a hole) to `path`.
void WriteBytes(const std::string& path, size_t bytes) {
  std::ofstream out(path, std::ios::binary);
  const std::string chunk(64 << 10, 'x');
  for (size_t written = 0; written < bytes; written += chunk.size()) {
    out.write(chunk.data(), static_cast<std::streamsize>(
                                std::min(chunk.size(), bytes - written)));
  }
}

TEST(DiskUseTest, CountsTheDirsAndTheOwnersFilesOnceWithoutFollowingLinks) {
  test::TempDir temp;
  const std::string builds = temp.Sub("builds");
  const std::string shared = temp.Sub("tmp");
  const std::string outside = temp.Sub("outside");
  for (const std::string& dir : {builds + "/deep/er", shared, outside}) {
    fs::create_directories(dir);
  }
  chmod(shared.c_str(), 01777);
  WriteBytes(builds + "/deep/er/a", 1 << 20);
  // A second link to the same file counts once; a link to a big file
  // elsewhere counts as the link only.
  ASSERT_EQ(link((builds + "/deep/er/a").c_str(), (builds + "/b").c_str()), 0);
  WriteBytes(outside + "/big", 4 << 20);
  fs::create_symlink(outside + "/big", builds + "/link");
  fs::create_directory_symlink(outside, builds + "/dirlink");

  DiskUseScope scope;
  scope.dirs = {builds};
  const DiskUse own = MeasureDiskUse(scope);
  EXPECT_GE(own.bytes, 1u << 20);
  EXPECT_LT(own.bytes, 2u << 20);
  EXPECT_FALSE(own.truncated);

  // What the account owns in a shared root counts too (here the test's own
  // uid; the real agent gives a member's pool account).
  WriteBytes(shared + "/mine", 2 << 20);
  scope.owner = geteuid();
  scope.owner_gid = getegid();
  scope.shared_roots = {shared};
  const DiskUse with_shared = MeasureDiskUse(scope);
  EXPECT_GE(with_shared.bytes, own.bytes + (2u << 20));
  EXPECT_LT(with_shared.bytes, own.bytes + (3u << 20));
  // Another uid holds none of it.
  scope.owner = geteuid() + 4242;
  EXPECT_EQ(MeasureDiskUse(scope).bytes, own.bytes);

  // The walk is bounded.
  scope.max_entries = 2;
  EXPECT_TRUE(MeasureDiskUse(scope).truncated);
}

// Entries of others in a shared root beyond the bound leave the walk
// incomplete (they are not the member's doing); the member's own there are
// its own, and beyond the bound truncate it.
TEST(DiskUseTest, TheBoundInASharedRootCountsTheMembersOwnEntries) {
  test::TempDir temp;
  const std::string shared = temp.Sub("tmp");
  fs::create_directories(shared);
  chmod(shared.c_str(), 01777);
  const uid_t other = geteuid() + 4242;
  for (int i = 0; i < 5; ++i) {
    const std::string path = absl::StrCat(shared, "/other-", i);
    WriteBytes(path, 0);
    ASSERT_EQ(chown(path.c_str(), other, other), 0);
  }
  DiskUseScope scope;
  scope.owner = geteuid();
  scope.owner_gid = getegid();
  scope.shared_roots = {shared};
  scope.max_entries = 3;
  const DiskUse others = MeasureDiskUse(scope);
  EXPECT_TRUE(others.incomplete);
  EXPECT_FALSE(others.truncated);
  // Fewer of others' than the bound, more of its own.
  for (int i = 0; i < 3; ++i) fs::remove(absl::StrCat(shared, "/other-", i));
  for (int i = 0; i < 5; ++i) WriteBytes(absl::StrCat(shared, "/mine-", i), 0);
  const DiskUse own = MeasureDiskUse(scope);
  EXPECT_TRUE(own.truncated);
}

TEST(DiskWatchTest, StopsOnlyAMemberAboveTheBound) {
  test::TempDir temp;
  const std::string big = temp.Sub("big");
  const std::string small = temp.Sub("small");
  fs::create_directories(big);
  fs::create_directories(small);
  WriteBytes(big + "/data", 3 << 20);
  WriteBytes(small + "/data", 1 << 20);
  std::vector<std::string> stopped;
  std::string where;
  DiskWatch::Options options;
  options.member_max = 2 << 20;
  options.cost_factor = 0;  // Walks as often as it is asked to.
  DiskWatch watch(
      options,
      [&] {
        std::vector<DiskWatch::Member> members(2);
        members[0].member_id = "big";
        members[0].scope.dirs = {big};
        members[1].member_id = "small";
        members[1].scope.dirs = {small};
        return members;
      },
      [&](const std::string& member_id, const DiskUse& use,
          const std::string& dirs, const std::string& line, bool first) {
        EXPECT_GT(use.bytes, 2u << 20);
        EXPECT_TRUE(first);
        stopped.push_back(member_id);
        where = dirs;
        EXPECT_TRUE(absl::StartsWith(
            line, absl::StrCat("gdt: disk limit: this member holds ", use.bytes,
                               " bytes in ", big,
                               ", above member_disk_max (2097152 bytes")))
            << line;
      });
  watch.CheckOnce();
  EXPECT_EQ(stopped, std::vector<std::string>{"big"});
  EXPECT_EQ(where, big);
  // Below the bound again (measured again: its upper bound was above):
  // not stopped.
  fs::remove(big + "/data");
  stopped.clear();
  const size_t walks = watch.walks();
  watch.CheckOnce();
  EXPECT_GT(watch.walks(), walks);
  EXPECT_TRUE(stopped.empty());
}

// One member in `dir`, measured whenever it may be above `max` (and at
// every CheckOnce() with `every_time`); `stopped` gets the lines of its
// stops.
struct OneMemberWatch {
  OneMemberWatch(const std::string& dir, uint64_t max, size_t max_entries,
                 bool every_time)
      : watch(
            Options(max, every_time),
            [dir, max_entries] {
              std::vector<DiskWatch::Member> members(1);
              members[0].member_id = "member";
              members[0].scope.dirs = {dir};
              members[0].scope.max_entries = max_entries;
              return members;
            },
            [this](const std::string&, const DiskUse&, const std::string&,
                   const std::string& line,
                   bool) { stopped.push_back(line); }) {}
  static DiskWatch::Options Options(uint64_t max, bool every_time) {
    DiskWatch::Options options;
    options.member_max = max;
    if (every_time) options.full_every = std::chrono::seconds(0);
    options.cost_factor = 0;
    return options;
  }
  std::vector<std::string> stopped;
  DiskWatch watch;
};

TEST(DiskWatchTest, AMemberWithMoreEntriesThanAWalkLooksAtIsStopped) {
  test::TempDir temp;
  const std::string builds = temp.Sub("builds");
  fs::create_directories(builds);
  // Empty files: a few bytes, yet more entries than the walk looks at;
  // what lies behind them is not seen.
  for (int i = 0; i < 20; ++i) WriteBytes(absl::StrCat(builds, "/e", i), 0);
  OneMemberWatch member(builds, /*max=*/1 << 30, /*max_entries=*/10,
                        /*every_time=*/true);
  member.watch.CheckOnce();
  ASSERT_EQ(member.stopped.size(), 1u);
  EXPECT_EQ(member.stopped[0],
            absl::StrCat("gdt: disk limit: this member holds more than 10 "
                         "entries (or directories deeper than 128 levels) in ",
                         builds,
                         ", more than the agent measures (member_disk_max is "
                         "set); its processes were stopped\n"));
}

TEST(DiskWatchTest, AWalkThatRunsOutOfDescriptorsNeitherStopsNorForgets) {
  test::TempDir temp;
  const std::string builds = temp.Sub("builds");
  const std::string deep = builds + "/a/b/c/d/e/f";
  fs::create_directories(deep);
  WriteBytes(deep + "/data", 3 << 20);

  // The walk says it missed what it could not open.
  EXPECT_EQ(test::WithFewDescriptors([&] {
              DiskUseScope scope;
              scope.dirs = {builds};
              const DiskUse use = MeasureDiskUse(scope);
              if (!use.incomplete) return 1;
              if (use.error.find("Too many open files") == std::string::npos)
                return 2;
              return use.bytes < (3u << 20) ? 0 : 3;
            }),
            0);
  // Not stopped for what it missed, yet measured again (its upper bound
  // stays above the bound) rather than trusted.
  EXPECT_EQ(test::WithFewDescriptors([&] {
              OneMemberWatch member(builds, /*max=*/2 << 20, 1000, false);
              member.watch.CheckOnce();
              if (!member.stopped.empty()) return 1;
              if (member.watch.walks() != 1) return 2;
              member.watch.CheckOnce();
              if (member.watch.walks() != 2) return 3;
              return member.stopped.empty() ? 0 : 4;
            }),
            0);
  // What it did count, above the bound, stops it.
  WriteBytes(builds + "/top", 3 << 20);
  EXPECT_EQ(test::WithFewDescriptors([&] {
              OneMemberWatch member(builds, /*max=*/2 << 20, 1000, false);
              member.watch.CheckOnce();
              return member.stopped.size() == 1 ? 0 : 1;
            }),
            0);
}

// A walk holds one descriptor per level it is down: with four free, a
// tree four levels deep (the root and three below it) is counted whole.
TEST(DiskUseTest, AWalkHoldsOneDescriptorPerLevel) {
  test::TempDir temp;
  const std::string builds = temp.Sub("builds");
  fs::create_directories(builds + "/a/b/c");
  WriteBytes(builds + "/a/b/c/data", 1 << 20);
  EXPECT_EQ(test::WithFewDescriptors([&] {
              DiskUseScope scope;
              scope.dirs = {builds};
              const DiskUse use = MeasureDiskUse(scope);
              if (use.incomplete) return 1;
              return use.bytes >= (1u << 20) ? 0 : 2;
            }),
            0);
}

TEST(DiskUseTest, ACancelledWalkEndsAtOnce) {
  test::TempDir temp;
  const std::string builds = temp.Sub("builds");
  fs::create_directories(builds + "/a");
  WriteBytes(builds + "/a/data", 1 << 20);
  DiskUseScope scope;
  scope.dirs = {builds};
  std::atomic<bool> cancel{true};
  const DiskUse use = MeasureDiskUse(scope, &cancel);
  EXPECT_TRUE(use.cancelled);
  EXPECT_EQ(use.entries, 0u);
  cancel = false;
  EXPECT_FALSE(MeasureDiskUse(scope, &cancel).cancelled);
}

}  // namespace
}  // namespace gdt::agent
