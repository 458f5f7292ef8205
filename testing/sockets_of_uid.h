#ifndef GDT_TESTING_SOCKETS_OF_UID_H_
#define GDT_TESTING_SOCKETS_OF_UID_H_
// TCP sockets made by another account, for tests that need connections a
// server sees as coming from that account (a job's uid) while the test, as
// root, drives them. A child process switches to the account, makes the
// sockets and hands them over (SCM_RIGHTS); the kernel keeps the maker's uid
// on each socket (what /proc/net/tcp shows), whoever binds, connects or
// holds it later.
//
// The test accounts in use: 61115..61120 (61115-61116: the connection
// gate's tests, 61117: the agent daemon's, 61118: TcpSocketOwner's).
#include <grp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace gdt::test {

// Below SCM_MAX_FD (253): the most descriptors one message of
// TcpSocketsMadeBy carries.
inline constexpr int kSocketsPerMessage = 200;

// One byte and room for kSocketsPerMessage descriptors, as one message of
// TcpSocketsMadeBy is sent and received. Memory only, nothing allocated: the
// child of a process that may have threads uses it too.
struct SocketsMessage {
  SocketsMessage() {
    header.msg_iov = &data;
    header.msg_iovlen = 1;
    header.msg_control = control;
    header.msg_controllen = sizeof(control);
  }
  SocketsMessage(const SocketsMessage&) = delete;
  SocketsMessage& operator=(const SocketsMessage&) = delete;

  static constexpr size_t kControlSize =
      CMSG_SPACE(sizeof(int) * kSocketsPerMessage);
  char byte = 0;
  iovec data = {&byte, 1};
  alignas(cmsghdr) char control[kControlSize] = {};
  msghdr header = {};
};

// `count` unconnected TCP sockets of `family` (AF_INET, AF_INET6) made by
// uid:gid `uid`:`uid`, close-on-exec, now the caller's to close. Needs root.
inline absl::StatusOr<std::vector<int>> TcpSocketsMadeBy(uid_t uid, int family,
                                                         int count) {
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
    return absl::InternalError(absl::StrCat("socketpair: ", strerror(errno)));
  }
  const pid_t pid = fork();
  if (pid < 0) {
    const int error = errno;
    close(pair[0]);
    close(pair[1]);
    return absl::InternalError(absl::StrCat("fork: ", strerror(error)));
  }
  if (pid == 0) {
    // The child of a process that may have threads: system calls only.
    close(pair[0]);
    if (setgroups(0, nullptr) != 0 || setresgid(uid, uid, uid) != 0 ||
        setresuid(uid, uid, uid) != 0) {
      _exit(2);
    }
    for (int sent = 0; sent < count;) {
      const int batch = std::min(kSocketsPerMessage, count - sent);
      int fds[kSocketsPerMessage];
      for (int i = 0; i < batch; ++i) {
        fds[i] = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fds[i] < 0) _exit(3);
      }
      SocketsMessage message;
      message.header.msg_controllen = CMSG_SPACE(sizeof(int) * batch);
      cmsghdr* header = CMSG_FIRSTHDR(&message.header);
      header->cmsg_level = SOL_SOCKET;
      header->cmsg_type = SCM_RIGHTS;
      header->cmsg_len = CMSG_LEN(sizeof(int) * batch);
      std::memcpy(CMSG_DATA(header), fds, sizeof(int) * batch);
      if (sendmsg(pair[1], &message.header, MSG_NOSIGNAL) != 1) _exit(4);
      for (int i = 0; i < batch; ++i) close(fds[i]);
      sent += batch;
    }
    _exit(0);
  }
  close(pair[1]);
  std::vector<int> received;
  std::string error;
  while (static_cast<int>(received.size()) < count) {
    pollfd ready = {pair[0], POLLIN, 0};
    if (poll(&ready, 1, 10000) != 1) {
      error = "no sockets from the child within 10 s";
      break;
    }
    SocketsMessage message;
    if (recvmsg(pair[0], &message.header, MSG_CMSG_CLOEXEC) != 1) {
      error = "the child ended before it made every socket";
      break;
    }
    for (cmsghdr* header = CMSG_FIRSTHDR(&message.header); header != nullptr;
         header = CMSG_NXTHDR(&message.header, header)) {
      if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) {
        continue;
      }
      const size_t n = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < n; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(header) + i * sizeof(int), sizeof(int));
        received.push_back(fd);
      }
    }
  }
  close(pair[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (error.empty() && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
    error =
        absl::StrCat("the child as uid ", uid, " failed (status ", status, ")");
  }
  if (!error.empty()) {
    for (int fd : received) close(fd);
    return absl::InternalError(error);
  }
  return received;
}

}  // namespace gdt::test

#endif  // GDT_TESTING_SOCKETS_OF_UID_H_
