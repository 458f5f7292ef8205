#ifndef GDT_COMMON_MOUNT_INFO_H_
#define GDT_COMMON_MOUNT_INFO_H_

#include <string>
#include <string_view>
#include <vector>

namespace gdt {

// One line of /proc/PID/mountinfo (proc(5)), its paths unescaped.
struct MountInfo {
  std::string root;         // The directory of the file system mounted.
  std::string mount_point;  // Where, in this mount namespace.
  std::string type;         // "ext4", "cgroup2", "fuse.sshfs", ...
  std::string source;       // "/dev/sda1", "host:/x", ...
  // The file system's own options, comma-separated ("rw,user_id=1000").
  std::string super_options;
};

// The mounts that `text` (the contents of a mountinfo file) lists, in its
// order (a mount after those it is mounted on); a malformed line is
// skipped.
std::vector<MountInfo> ParseMountInfo(std::string_view text);

// The mounts of this process's mount namespace (/proc/self/mountinfo);
// none when it cannot be read.
std::vector<MountInfo> ReadMountInfo();

}  // namespace gdt

#endif  // GDT_COMMON_MOUNT_INFO_H_
