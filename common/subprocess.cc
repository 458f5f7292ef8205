#include "common/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace gdt {
namespace {

// The child of Spawn runs on its own stack and, mostly, in this process's
// memory (clone with CLONE_VM | CLONE_VFORK, as posix_spawn does), until
// it executes. So its code calls only system calls: no allocation, no lock, no
// glibc wrapper that acts on the whole process (glibc's setuid family
// signals every thread it knows of; the child uses the raw calls). Sanitizer
// instrumentation stays out of it: it would account the child's stack to
// the thread that started it.
#define GDT_CHILD_CODE __attribute__((no_sanitize("address", "undefined")))

ExitStatus FromWaitStatus(int status) {
  ExitStatus exit;
  if (WIFSIGNALED(status)) {
    exit.signal = WTERMSIG(status);
  } else if (WIFEXITED(status)) {
    exit.exit_code = WEXITSTATUS(status);
  }
  return exit;
}

// Writes a message to fd 2 without allocating; for use in the child before
// it executes.
GDT_CHILD_CODE void ChildFail(const char* what, const char* arg) {
  const char* err = strerrordesc_np(errno);
  if (err == nullptr) err = "unknown error";
  (void)!write(2, what, strlen(what));
  (void)!write(2, arg, strlen(arg));
  (void)!write(2, ": ", 2);
  (void)!write(2, err, strlen(err));
  (void)!write(2, "\n", 1);
}

// Marks every descriptor above 2 close-on-exec, so that the program gets
// only stdin, stdout and stderr: descriptors this process inherited or
// opened without O_CLOEXEC (another thread's, between its open and exec)
// must not reach a job. Marked rather than closed so that the exec pipe
// still reports a failure before exec. For use in the child: no allocation.
GDT_CHILD_CODE void CloseOnExecAbove2() {
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif
#ifdef SYS_close_range
  if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) == 0) return;
#endif
  // Kernels before 5.11: the open descriptors from /proc/self/fd.
  const int dir = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) {
    for (int fd = 3; fd < 65536; ++fd) fcntl(fd, F_SETFD, FD_CLOEXEC);
    return;
  }
  alignas(8) char buffer[4096];
  while (true) {
    const long n = syscall(SYS_getdents64, dir, buffer, sizeof(buffer));
    if (n <= 0) break;
    for (long offset = 0; offset < n;) {
      // struct linux_dirent64: ino (8), off (8), reclen (2), type (1), name.
      unsigned short length = 0;
      memcpy(&length, buffer + offset + 16, sizeof(length));
      const char* name = buffer + offset + 19;
      int fd = 0;
      bool number = *name != '\0';
      for (const char* c = name; *c != '\0'; ++c) {
        if (*c < '0' || *c > '9') {
          number = false;
          break;
        }
        fd = fd * 10 + (*c - '0');
      }
      if (number && fd > 2 && fd != dir) fcntl(fd, F_SETFD, FD_CLOEXEC);
      offset += length;
    }
  }
  close(dir);
}

// What the child of Spawn needs, prepared by the parent.
struct ChildPlan {
  const SpawnOptions* options = nullptr;
  char** argv = nullptr;
  char** envp = nullptr;
  int out_fd = -1;  // Write ends of the output pipes (capture_output).
  int err_fd = -1;
  int exec_fd = -1;  // Closed on exec; carries errno otherwise.
  pid_t parent = 0;
  uint64_t open_files = 0;
};

// Ends the child before it executes: errno to the parent through the exec
// pipe, a line on stderr when `what` is set.
[[noreturn]] GDT_CHILD_CODE void ChildExit(const ChildPlan& plan,
                                           const char* what, const char* arg) {
  const int err = errno;
  (void)!write(plan.exec_fd, &err, sizeof(err));
  if (what != nullptr) {
    errno = err;
    ChildFail(what, arg);
  }
  _exit(127);
}

// Signal handlers are this process's code: none may run in the child, which
// shares its memory. Every caught signal goes back to its default; those a
// job expects at their default go back to it even when ignored here.
GDT_CHILD_CODE void DefaultSignals() {
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    struct sigaction current {};
    if (sigaction(sig, nullptr, &current) != 0) continue;  // Reserved ones.
    const bool caught =
        (current.sa_flags & SA_SIGINFO) != 0 ||
        (current.sa_handler != SIG_DFL && current.sa_handler != SIG_IGN);
    const bool job_default = sig == SIGTERM || sig == SIGINT || sig == SIGHUP ||
                             sig == SIGPIPE || sig == SIGQUIT || sig == SIGCHLD;
    if (!caught && !job_default) continue;
    struct sigaction default_action {};
    default_action.sa_handler = SIG_DFL;
    sigaction(sig, &default_action, nullptr);
  }
}

GDT_CHILD_CODE int RunChild(void* arg) {
  const ChildPlan& plan = *static_cast<const ChildPlan*>(arg);
  const SpawnOptions& options = *plan.options;
  DefaultSignals();
  if (!options.cgroup_procs.empty()) {
    const int procs = open(options.cgroup_procs.c_str(), O_WRONLY | O_CLOEXEC);
    if (procs < 0 || write(procs, "0", 1) != 1) {
      ChildExit(plan, "cannot join cgroup ", options.cgroup_procs.c_str());
    }
    close(procs);
  }
  if (options.new_process_group) setpgid(0, 0);
  if (plan.open_files != 0) {
    rlimit limit{};
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0) {
      limit.rlim_cur = std::min<rlim_t>(plan.open_files, limit.rlim_max);
      setrlimit(RLIMIT_NOFILE, &limit);
    }
  }
  if (options.die_with_parent) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != plan.parent) _exit(127);
  }
  const int in = open(options.stdin_path.c_str(), O_RDONLY);
  if (in >= 0) {
    dup2(in, 0);
    close(in);
  }
  if (options.capture_output) {
    dup2(plan.out_fd, 1);
    dup2(plan.err_fd, 2);
  } else if (!options.output_path.empty()) {
    const int out = open(options.output_path.c_str(),
                         O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (out < 0) ChildExit(plan, nullptr, nullptr);
    dup2(out, 1);
    dup2(out, 2);
  }
  if (options.credentials.has_value()) {
    // The raw calls: the child is a process of its own, but glibc's
    // wrappers would go through the thread list of the one whose memory it
    // shares.
    const SpawnOptions::Credentials& who = *options.credentials;
    if (syscall(SYS_setgroups, who.groups.size(), who.groups.data()) != 0 ||
        syscall(SYS_setgid, who.gid) != 0 ||
        syscall(SYS_setuid, who.uid) != 0) {
      ChildExit(plan, "cannot switch user", "");
    }
    // A change of credentials clears the parent-death signal.
    if (options.die_with_parent) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != plan.parent) _exit(127);
    }
  }
  CloseOnExecAbove2();
  if (!options.working_dir.empty() && chdir(options.working_dir.c_str()) != 0) {
    ChildExit(plan, "cannot change directory to ", options.working_dir.c_str());
  }
  // The parent blocked every signal around the start; the program gets an
  // empty mask.
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  execvpe(plan.argv[0], plan.argv, plan.envp);
  ChildExit(plan, "cannot execute ", plan.argv[0]);
}

// Starts RunChild(plan) as a new process. Sharing this process's memory,
// it copies none of its page tables: in a daemon with a large address space
// and many threads, fork holds the memory map locked for milliseconds to
// tens of milliseconds per child under load, and every other thread that
// touches new memory (gRPC's pollers answering keepalive pings,
// heartbeats) waits for it. Without sharing, the child gets a copy as fork
// makes it (SpawnSharesMemory says when). Either way the calling thread
// waits until the child has executed or failed.
absl::StatusOr<pid_t> StartChild(ChildPlan& plan, bool share_memory) {
  // The child's stack: execvpe's path search and script fallback keep
  // their buffers there. The lowest page guards against an overflow.
  constexpr size_t kStackBytes = 1 << 20;
  const long page = sysconf(_SC_PAGESIZE);
  void* stack =
      mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK | MAP_NORESERVE, -1, 0);
  if (stack == MAP_FAILED) {
    return absl::InternalError(
        absl::StrCat("cannot map a stack for the child: ", strerror(errno)));
  }
  mprotect(stack, static_cast<size_t>(page), PROT_NONE);
  // No handler of this process may run in the child before it has put its
  // signals back to their defaults.
  sigset_t all;
  sigset_t before;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &before);
  const int flags = (share_memory ? CLONE_VM : 0) | CLONE_VFORK | SIGCHLD;
  const pid_t pid =
      clone(RunChild, static_cast<char*>(stack) + kStackBytes, flags, &plan);
  const int clone_errno = errno;
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  munmap(stack, kStackBytes);
  if (pid < 0) {
    return absl::InternalError(
        absl::StrCat("cannot start a process: ", strerror(clone_errno)));
  }
  return pid;
}

}  // namespace

bool SpawnSharesMemory(const SpawnOptions& options) {
  if (options.credentials.has_value()) return false;
  const std::string& procs = options.cgroup_procs;
  const size_t slash = procs.rfind('/');
  if (procs.empty() || slash == std::string::npos) return true;
  const std::string oom_group = procs.substr(0, slash) + "/memory.oom.group";
  const int fd = open(oom_group.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return true;  // No memory controller there: no group kill.
  char value = '0';
  const bool read_one = read(fd, &value, 1) == 1;
  close(fd);
  return !(read_one && value == '1');
}

namespace {
// See Subprocess::SetChildOpenFilesLimit.
std::atomic<uint64_t> child_open_files{0};
}  // namespace

void Subprocess::SetChildOpenFilesLimit(uint64_t soft) {
  child_open_files.store(soft);
}

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Spawn(
    const SpawnOptions& options) {
  if (options.argv.empty()) {
    return absl::InvalidArgumentError("cannot spawn an empty command");
  }
  int out_pipe[2] = {-1, -1};
  int err_pipe[2] = {-1, -1};
  int exec_pipe[2] = {-1, -1};  // Closed on exec; carries errno otherwise.
  if (options.capture_output) {
    if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) {
      return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
    }
  }
  if (pipe2(exec_pipe, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
  }

  // Everything the child needs is prepared before it starts: it allocates
  // nothing.
  std::vector<std::string> env_strings;
  env_strings.reserve(options.env.size());
  for (const auto& [key, value] : options.env) {
    env_strings.push_back(key + "=" + value);
  }
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_strings = options.argv;
  std::vector<char*> argv;
  for (std::string& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  ChildPlan plan;
  plan.options = &options;
  plan.argv = argv.data();
  plan.envp = envp.data();
  plan.out_fd = out_pipe[1];
  plan.err_fd = err_pipe[1];
  plan.exec_fd = exec_pipe[1];
  plan.parent = getpid();
  plan.open_files = child_open_files.load();

  absl::StatusOr<pid_t> started = StartChild(plan, SpawnSharesMemory(options));
  if (!started.ok()) {
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1],
                   exec_pipe[0], exec_pipe[1]}) {
      if (fd >= 0) close(fd);
    }
    return started.status();
  }
  const pid_t pid = *started;

  auto child = std::unique_ptr<Subprocess>(new Subprocess());
  child->pid_ = pid;
  child->own_group_ = options.new_process_group;
  if (options.new_process_group) setpgid(pid, pid);  // Close the race.
  // The child is unreaped, so its pid cannot be reused under us. Without
  // pidfd_open (kernels before 5.3, or a filter that refuses it) WaitUntil
  // falls back to looking for the exit between polls.
  child->pid_fd_ = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (child->pid_fd_ < 0) child->pid_fd_ = -1;
  close(exec_pipe[1]);
  if (options.capture_output) {
    close(out_pipe[1]);
    close(err_pipe[1]);
    child->out_fd_ = out_pipe[0];
    child->err_fd_ = err_pipe[0];
  }
  int child_errno = 0;
  ssize_t n;
  do {
    n = read(exec_pipe[0], &child_errno, sizeof(child_errno));
  } while (n < 0 && errno == EINTR);
  close(exec_pipe[0]);
  if (n == sizeof(child_errno)) {
    child->Wait();
    return absl::NotFoundError(absl::StrCat("cannot execute ", options.argv[0],
                                            ": ", strerror(child_errno)));
  }
  return child;
}

Subprocess::~Subprocess() {
  if (pid_ > 0 && !exit_.has_value()) {
    SignalGroup(SIGKILL);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  CloseFd(out_fd_);
  CloseFd(err_fd_);
  CloseFd(pid_fd_);
}

void Subprocess::CloseFd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

bool Subprocess::PumpOutput(std::chrono::milliseconds timeout,
                            const OutputCallback& callback) {
  return Poll(timeout, /*with_exit=*/false, callback);
}

bool Subprocess::Poll(std::chrono::milliseconds timeout, bool with_exit,
                      const OutputCallback& callback) {
  with_exit = with_exit && pid_fd_ >= 0;
  if (out_fd_ < 0 && err_fd_ < 0 && !with_exit) return false;
  pollfd fds[3];
  int count = 0;
  if (out_fd_ >= 0) fds[count++] = {out_fd_, POLLIN, 0};
  if (err_fd_ >= 0) fds[count++] = {err_fd_, POLLIN, 0};
  if (with_exit) fds[count++] = {pid_fd_, POLLIN, 0};
  const int ready = poll(fds, count, static_cast<int>(timeout.count()));
  if (ready <= 0) return out_fd_ >= 0 || err_fd_ >= 0;
  char buffer[16384];
  for (int i = 0; i < count; ++i) {
    if (fds[i].fd == pid_fd_) continue;
    if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
    const ssize_t n = read(fds[i].fd, buffer, sizeof(buffer));
    if (n > 0) {
      if (callback) {
        callback(fds[i].fd == out_fd_ ? OutputSource::kStdout
                                      : OutputSource::kStderr,
                 std::string_view(buffer, static_cast<size_t>(n)));
      }
    } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
      CloseFd(fds[i].fd == out_fd_ ? out_fd_ : err_fd_);
    }
  }
  return out_fd_ >= 0 || err_fd_ >= 0;
}

std::optional<ExitStatus> Subprocess::TryWait() {
  if (exit_.has_value()) return exit_;
  int status = 0;
  const pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) exit_ = FromWaitStatus(status);
  return exit_;
}

ExitStatus Subprocess::Wait(const OutputCallback& callback) {
  return *WaitUntil(std::chrono::steady_clock::time_point::max(), callback);
}

std::optional<ExitStatus> Subprocess::WaitUntil(
    std::chrono::steady_clock::time_point deadline,
    const OutputCallback& callback) {
  using std::chrono::milliseconds;
  bool exit_seen = false;  // The pidfd reported the exit.
  while (true) {
    if (TryWait().has_value()) {
      // Collect what the child wrote before it went, without waiting on
      // grandchildren that may still hold the pipes open.
      for (int i = 0; i < 1000 && (out_fd_ >= 0 || err_fd_ >= 0); ++i) {
        pollfd fds[2];
        int count = 0;
        if (out_fd_ >= 0) fds[count++] = {out_fd_, POLLIN, 0};
        if (err_fd_ >= 0) fds[count++] = {err_fd_, POLLIN, 0};
        if (poll(fds, count, 0) <= 0) break;
        PumpOutput(milliseconds(0), callback);
      }
      return exit_;
    }
    if (exit_seen) {
      // Exited but not ours to reap (reaped elsewhere): the pidfd would
      // stay readable, so wait as without one.
      CloseFd(pid_fd_);
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return std::nullopt;
    const milliseconds left =
        std::chrono::duration_cast<milliseconds>(deadline - now) +
        milliseconds(1);
    if (pid_fd_ >= 0) {
      // One poll over the pipes and the exit; a day at most per call keeps
      // the timeout within an int.
      Poll(std::min<milliseconds>(left, std::chrono::hours(24)),
           /*with_exit=*/true, callback);
      pollfd exit_fd = {pid_fd_, POLLIN, 0};
      exit_seen = poll(&exit_fd, 1, 0) > 0;
      continue;
    }
    const milliseconds wait = std::min(milliseconds(20), left);
    if (!PumpOutput(wait, callback))
      usleep(
          static_cast<useconds_t>(std::min<int64_t>(wait.count(), 5) * 1000));
  }
}

bool Subprocess::SignalGroup(int signal) {
  if (pid_ <= 0 || exit_.has_value()) {
    // The leader is gone, but its group may live on.
    if (own_group_ && pid_ > 0) return kill(-pid_, signal) == 0;
    return false;
  }
  if (own_group_ && kill(-pid_, signal) == 0) return true;
  return kill(pid_, signal) == 0;
}

ExitStatus Subprocess::Terminate(std::chrono::milliseconds grace,
                                 const OutputCallback& callback) {
  if (exit_.has_value()) {
    if (own_group_) kill(-pid_, SIGKILL);
    return *exit_;
  }
  SignalGroup(SIGTERM);
  std::optional<ExitStatus> status =
      WaitUntil(std::chrono::steady_clock::now() + grace, callback);
  SignalGroup(SIGKILL);
  if (!status.has_value()) status = Wait(callback);
  return *status;
}

std::map<std::string, std::string> CurrentEnvironment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view entry(*e);
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    env[std::string(entry.substr(0, eq))] = std::string(entry.substr(eq + 1));
  }
  return env;
}

absl::StatusOr<ExitStatus> RunCommand(const std::vector<std::string>& argv,
                                      std::chrono::milliseconds timeout,
                                      std::string* output) {
  SpawnOptions options;
  options.argv = argv;
  options.env = CurrentEnvironment();
  absl::StatusOr<std::unique_ptr<Subprocess>> child =
      Subprocess::Spawn(options);
  if (!child.ok()) return child.status();
  auto collect = [output](OutputSource, std::string_view data) {
    if (output != nullptr) output->append(data);
  };
  std::optional<ExitStatus> status =
      (*child)->WaitUntil(std::chrono::steady_clock::now() + timeout, collect);
  if (!status.has_value()) {
    (*child)->Terminate(std::chrono::milliseconds(500), collect);
    return absl::DeadlineExceededError(absl::StrCat(
        argv[0], " did not finish within ", timeout.count(), " ms"));
  }
  return *status;
}

}  // namespace gdt
