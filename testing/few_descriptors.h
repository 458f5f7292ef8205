#ifndef GDT_TESTING_FEW_DESCRIPTORS_H_
#define GDT_TESTING_FEW_DESCRIPTORS_H_

// Running a piece of a test in a process that is short of descriptors.

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace gdt::test {

// Runs `body` in a child process that can open only `free` more
// descriptors (whatever it inherited); its exit code (0: passed; 90-93:
// the child could not be set up).
inline int WithFewDescriptors(const std::function<int()>& body, int free = 4) {
  const pid_t pid = fork();
  if (pid == 0) {
    int highest = 0;
    for (const auto& entry :
         std::filesystem::directory_iterator("/proc/self/fd")) {
      highest = std::max(highest, std::stoi(entry.path().filename()));
    }
    // Room for more than `free` above the highest inherited one, so that
    // giving back `free` leaves exactly that many however few it inherited.
    const rlimit limit = {static_cast<rlim_t>(highest + 1 + free),
                          static_cast<rlim_t>(highest + 1 + free)};
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0) _exit(90);
    std::vector<int> taken;
    for (int fd; (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) {
      taken.push_back(fd);
    }
    if (taken.size() < static_cast<size_t>(free)) _exit(93);
    for (int i = 0; i < free; ++i) {
      close(taken.back());
      taken.pop_back();
    }
    _exit(body());
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return 91;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 92;
}

}  // namespace gdt::test

#endif  // GDT_TESTING_FEW_DESCRIPTORS_H_
