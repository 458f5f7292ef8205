#ifndef GDT_TESTING_NETWORK_NAMESPACE_H_
#define GDT_TESTING_NETWORK_NAMESPACE_H_
// Running part of a test in a network namespace of its own, inside the test
// process: addresses it adds (IPv6 ones a CI host lacks) are seen by nobody
// else, and nothing is left behind.
//
// The namespace has no name: a thread enters it (unshare(CLONE_NEWNET)),
// and the threads and processes it starts are in it too (a ConnectionGate's
// accept thread, `ip`). It goes away by itself once that thread has ended
// and the sockets made in it are closed. Needs root (CAP_SYS_ADMIN).
// testing/cluster.h's NetworkNamespaces are the named kind, for daemons run
// as separate processes.
#include <sched.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/subprocess.h"

namespace gdt::test {

// Runs `body` on a new thread in a new network namespace whose loopback is
// up, with each of `addresses` ("2001:db8:1:2::10/64") added to it (without
// duplicate address detection, so usable at once), and waits for it.
// `body` must close every socket it makes. FailedPrecondition when the
// namespace cannot be made (not root), Internal when `ip` fails.
inline absl::Status InNewNetworkNamespace(
    const std::vector<std::string>& addresses,
    const std::function<void()>& body) {
  absl::Status status;
  std::thread inside([&] {
    if (unshare(CLONE_NEWNET) != 0) {
      status = absl::FailedPreconditionError(absl::StrCat(
          "cannot make a network namespace: ", std::strerror(errno)));
      return;
    }
    std::vector<std::vector<std::string>> commands = {
        {"ip", "link", "set", "lo", "up"}};
    for (const std::string& address : addresses) {
      commands.push_back(
          {"ip", "-6", "addr", "add", address, "dev", "lo", "nodad"});
    }
    for (const std::vector<std::string>& command : commands) {
      std::string output;
      absl::StatusOr<ExitStatus> ran =
          RunCommand(command, std::chrono::seconds(10), &output);
      if (!ran.ok() || !ran->success()) {
        status = absl::InternalError(absl::StrCat(
            absl::StrJoin(command, " "),
            " failed: ", ran.ok() ? output : ran.status().ToString()));
        return;
      }
    }
    body();
  });
  inside.join();
  return status;
}

}  // namespace gdt::test

#endif  // GDT_TESTING_NETWORK_NAMESPACE_H_
