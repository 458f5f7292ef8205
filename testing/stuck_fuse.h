#ifndef GDT_TESTING_STUCK_FUSE_H_
#define GDT_TESTING_STUCK_FUSE_H_

// A FUSE file system that never answers, as a job can mount one (through
// fusermount) and leave unanswered: every request to it waits until the
// mount's device descriptor is closed. Test-only; needs root and
// /dev/fuse.

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <future>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gdt::test {

class StuckFuse {
 public:
  // Mounts it on the directory `dir`, as `owner` would through fusermount
  // (its user_id and group_id); error() says why it could not.
  explicit StuckFuse(std::string dir, uid_t owner = 0) : dir_(std::move(dir)) {
    device_ = open("/dev/fuse", O_RDWR | O_CLOEXEC);
    if (device_ < 0 && errno == ENOENT) {
      // A container without the node may still allow the device.
      const std::string node = dir_ + ".fuse-device";
      if (mknod(node.c_str(), S_IFCHR | 0600, makedev(10, 229)) == 0) {
        device_ = open(node.c_str(), O_RDWR | O_CLOEXEC);
        const int error = errno;
        unlink(node.c_str());
        errno = error;
      }
    }
    if (device_ < 0) {
      error_ = absl::StrCat("/dev/fuse: ", std::strerror(errno));
      return;
    }
    // The kernel's first request (INIT) is never read: until it is
    // answered, every other request waits.
    const std::string options = absl::StrCat(
        "fd=", device_, ",rootmode=40000,user_id=", owner, ",group_id=", owner);
    if (mount("gdt-stuck", dir_.c_str(), "fuse", MS_NOSUID | MS_NODEV,
              options.c_str()) != 0) {
      error_ = absl::StrCat("mount fuse on ", dir_, ": ", std::strerror(errno));
      Release();
      return;
    }
    mounted_ = true;
  }
  ~StuckFuse() { Release(); }
  StuckFuse(const StuckFuse&) = delete;
  StuckFuse& operator=(const StuckFuse&) = delete;

  const std::string& error() const { return error_; }

  // As when its daemon dies: requests fail (ENOTCONN) from now on, and it
  // stays mounted (until Release()).
  void CloseDevice() {
    if (device_ >= 0) close(device_);
    device_ = -1;
  }

  // Ends it: requests waiting on it fail (ENOTCONN), and it is unmounted.
  void Release() {
    if (device_ >= 0) close(device_);
    device_ = -1;
    if (mounted_) umount2(dir_.c_str(), MNT_DETACH);
    mounted_ = false;
  }

 private:
  std::string dir_;
  int device_ = -1;
  bool mounted_ = false;
  std::string error_;
};

// What `work` returns, run in a thread, when it ends within `bound`; none
// when it does not, after releasing each of `stuck` so that the calls
// waiting on them fail and the thread ends.
template <typename Work>
auto EndsWithin(std::chrono::seconds bound, Work work,
                std::initializer_list<StuckFuse*> stuck)
    -> std::optional<decltype(work())> {
  auto result = std::async(std::launch::async, std::move(work));
  if (result.wait_for(bound) == std::future_status::ready) return result.get();
  for (StuckFuse* fuse : stuck) fuse->Release();
  result.get();
  return std::nullopt;
}

}  // namespace gdt::test

#endif  // GDT_TESTING_STUCK_FUSE_H_
