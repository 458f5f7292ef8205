#ifndef GDT_COORDINATOR_ETCD_TEST_SERVER_H_
#define GDT_COORDINATOR_ETCD_TEST_SERVER_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/subprocess.h"

namespace gdt::test {

// For tests: Debian's etcd (/usr/bin/etcd) as one node or a cluster of
// nodes on free 127.0.0.1 ports, with its data in a fresh directory. The
// destructor stops every node and deletes the directory.
class EtcdTestServer {
 public:
  // Starts `nodes` members (each with `extra_args` added to etcd's command
  // line) and waits up to `timeout` until the cluster serves requests.
  // Errors: NotFound when etcd is not installed; DeadlineExceeded when it
  // does not come up (its log is in the message).
  static absl::StatusOr<std::unique_ptr<EtcdTestServer>> Start(
      int nodes = 1,
      std::chrono::milliseconds timeout = std::chrono::seconds(20),
      const std::vector<std::string>& extra_args = {});
  // The same inside a network namespace: every node runs under `prefix`
  // (e.g. NetworkNamespaces::Exec(host)) on `address`, ports from 2379 up;
  // readiness is checked with etcdctl under the same prefix.
  static absl::StatusOr<std::unique_ptr<EtcdTestServer>> StartIn(
      const std::vector<std::string>& prefix, const std::string& address,
      int nodes = 1,
      std::chrono::milliseconds timeout = std::chrono::seconds(20),
      const std::vector<std::string>& extra_args = {});
  ~EtcdTestServer();
  EtcdTestServer(const EtcdTestServer&) = delete;
  EtcdTestServer& operator=(const EtcdTestServer&) = delete;

  // "127.0.0.1:PORT" of every node's client URL.
  const std::vector<std::string>& endpoints() const { return endpoints_; }
  // The same, comma-separated (the form of the etcd_endpoints setting).
  std::string joined_endpoints() const;

  // Freezes (SIGSTOP) or thaws (SIGCONT) every node: etcd stops answering
  // without closing connections, as when a coordinator is cut off from it.
  void Pause();
  void Resume();
  // Stops node `index` for good (SIGTERM, then SIGKILL).
  void StopNode(int index);

 private:
  EtcdTestServer() = default;
  std::string dir_;
  std::vector<std::string> endpoints_;
  std::vector<std::unique_ptr<Subprocess>> processes_;
};

}  // namespace gdt::test

#endif  // GDT_COORDINATOR_ETCD_TEST_SERVER_H_
