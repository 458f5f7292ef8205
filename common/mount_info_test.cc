#include "common/mount_info.h"

#include "gtest/gtest.h"

namespace gdt {
namespace {

TEST(MountInfoTest, ReadsEachMountWithItsPathsUnescaped) {
  const std::vector<MountInfo> mounts = ParseMountInfo(
      "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
      "35 22 0:30 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n"
      "41 22 0:45 /sub /home/a\\040b\\134c rw master:3 shared:9 - "
      "fuse.sshfs host:/x rw,user_id=1000\n"
      "garbage line\n"
      "\n");
  ASSERT_EQ(mounts.size(), 3u);
  EXPECT_EQ(mounts[0].mount_point, "/");
  EXPECT_EQ(mounts[0].type, "ext4");
  EXPECT_EQ(mounts[1].mount_point, "/sys/fs/cgroup");
  EXPECT_EQ(mounts[1].type, "cgroup2");
  EXPECT_EQ(mounts[2].root, "/sub");
  EXPECT_EQ(mounts[2].mount_point, "/home/a b\\c");
  EXPECT_EQ(mounts[2].type, "fuse.sshfs");
  EXPECT_EQ(mounts[2].source, "host:/x");
  EXPECT_EQ(mounts[2].super_options, "rw,user_id=1000");
  EXPECT_EQ(mounts[0].super_options, "rw");
}

TEST(MountInfoTest, ThisProcessHasARoot) {
  bool root = false;
  for (const MountInfo& mount : ReadMountInfo()) {
    root = root || mount.mount_point == "/";
  }
  EXPECT_TRUE(root);
}

}  // namespace
}  // namespace gdt
