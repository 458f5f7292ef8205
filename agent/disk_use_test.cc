#include "agent/disk_use.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
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
          const std::string& dirs) {
        EXPECT_GT(use.bytes, 2u << 20);
        stopped.push_back(member_id);
        where = dirs;
      });
  watch.CheckOnce();
  EXPECT_EQ(stopped, std::vector<std::string>{"big"});
  EXPECT_EQ(where, big);
  // Below the bound again: not stopped.
  fs::remove(big + "/data");
  stopped.clear();
  watch.CheckOnce();
  EXPECT_TRUE(stopped.empty());
}

}  // namespace
}  // namespace gdt::agent
