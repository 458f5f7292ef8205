#include "common/subprocess.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
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

ExitStatus FromWaitStatus(int status) {
  ExitStatus exit;
  if (WIFSIGNALED(status)) {
    exit.signal = WTERMSIG(status);
  } else if (WIFEXITED(status)) {
    exit.exit_code = WEXITSTATUS(status);
  }
  return exit;
}

// Writes a message to fd 2 without allocating; for use between fork and exec.
void ChildFail(const char* what, const char* arg) {
  const char* err = strerror(errno);
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
// still reports a failure before exec. For use between fork and exec: no
// allocation.
void CloseOnExecAbove2() {
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

}  // namespace

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

  // Everything the child needs is prepared before fork: no allocation after.
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
  const pid_t parent = getpid();
  const uint64_t open_files = child_open_files.load();

  const pid_t pid = fork();
  if (pid < 0) {
    return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  }
  if (pid == 0) {
    if (!options.cgroup_procs.empty()) {
      const int procs =
          open(options.cgroup_procs.c_str(), O_WRONLY | O_CLOEXEC);
      if (procs < 0 || write(procs, "0", 1) != 1) {
        const int err = errno;
        (void)!write(exec_pipe[1], &err, sizeof(err));
        ChildFail("cannot join cgroup ", options.cgroup_procs.c_str());
        _exit(127);
      }
      close(procs);
    }
    if (options.new_process_group) setpgid(0, 0);
    if (open_files != 0) {
      rlimit limit{};
      if (getrlimit(RLIMIT_NOFILE, &limit) == 0) {
        limit.rlim_cur = std::min<rlim_t>(open_files, limit.rlim_max);
        setrlimit(RLIMIT_NOFILE, &limit);
      }
    }
    if (options.die_with_parent) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);
    }
    // Restore default signal handling and an empty mask for the child.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGPIPE, SIGQUIT, SIGCHLD}) {
      signal(sig, SIG_DFL);
    }
    const int in = open(options.stdin_path.c_str(), O_RDONLY);
    if (in >= 0) {
      dup2(in, 0);
      close(in);
    }
    if (options.capture_output) {
      dup2(out_pipe[1], 1);
      dup2(err_pipe[1], 2);
    } else if (!options.output_path.empty()) {
      const int out = open(options.output_path.c_str(),
                           O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (out < 0) {
        const int err = errno;
        (void)!write(exec_pipe[1], &err, sizeof(err));
        _exit(127);
      }
      dup2(out, 1);
      dup2(out, 2);
    }
    if (options.credentials.has_value()) {
      const SpawnOptions::Credentials& who = *options.credentials;
      if (setgroups(who.groups.size(), who.groups.data()) != 0 ||
          setgid(who.gid) != 0 || setuid(who.uid) != 0) {
        const int err = errno;
        (void)!write(exec_pipe[1], &err, sizeof(err));
        ChildFail("cannot switch user", "");
        _exit(127);
      }
      // A change of credentials clears the parent-death signal.
      if (options.die_with_parent) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127);
      }
    }
    CloseOnExecAbove2();
    if (!options.working_dir.empty() &&
        chdir(options.working_dir.c_str()) != 0) {
      const int err = errno;
      (void)!write(exec_pipe[1], &err, sizeof(err));
      ChildFail("cannot change directory to ", options.working_dir.c_str());
      _exit(127);
    }
    execvpe(argv[0], argv.data(), envp.data());
    const int err = errno;
    (void)!write(exec_pipe[1], &err, sizeof(err));
    ChildFail("cannot execute ", argv[0]);
    _exit(127);
  }

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
