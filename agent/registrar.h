#ifndef GDT_AGENT_REGISTRAR_H_
#define GDT_AGENT_REGISTRAR_H_

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"
#include "gdt/v1/coordinator.pb.h"
#include "rendezvous/coordinator_client.h"

namespace gdt::agent {

// Keeps this host registered with the coordinator: registers (retrying with
// backoff while the coordinator is unreachable), then heartbeats at the
// interval the coordinator asked for, and registers again when the
// coordinator says it no longer knows the host. Logs once per change between
// reachable and unreachable.
//
// Thread-safe. Keeps a reference to `client`, which must outlive it.
class Registrar {
 public:
  struct Options {
    std::chrono::milliseconds rpc_timeout{5000};
    std::chrono::milliseconds initial_backoff{200};
    std::chrono::milliseconds max_backoff{5000};
  };

  // `running_members` (may be empty) lists the members that run a stage on
  // this host; every heartbeat carries it, so that the coordinator can tell
  // members that are gone from ones still at work.
  using RunningMembers = std::function<std::vector<std::string>()>;
  // `watched_progress` (may be empty) gives the last progress of the
  // member stages here that have a hang watchdog; every heartbeat carries
  // it too.
  using WatchedProgress = std::function<std::vector<v1::MemberProgress>()>;
  // `idle_members` (may be empty) lists the members this host holds that
  // run no stage; every heartbeat asks the coordinator which of them have
  // left their gang, and `members_left` (called on the registration
  // thread; it must not block) gets those it names.
  // `not_ready` (may be empty) says why the agent cannot take new members
  // now (empty = it can); every heartbeat carries it.
  using NotReady = std::function<std::string()>;
  struct IdleMembers {
    std::function<std::vector<std::string>()> list;
    std::function<void(const std::vector<std::string>&)> members_left;
  };
  Registrar(rendezvous::CoordinatorClient& client, v1::HostSpec host,
            Options options, RunningMembers running_members = nullptr,
            WatchedProgress watched_progress = nullptr,
            IdleMembers idle_members = {}, NotReady not_ready = nullptr);
  // Stops the loop.
  ~Registrar();
  Registrar(const Registrar&) = delete;
  Registrar& operator=(const Registrar&) = delete;

  // Starts the registration loop on its own thread. Call once.
  void Start();
  // Stops the loop and waits for it; an RPC in flight finishes first (at
  // most `rpc_timeout`). Idempotent.
  void Stop();

 private:
  void Run();
  // Waits `duration` unless Stop() is called; returns false when stopping.
  bool Sleep(std::chrono::milliseconds duration);

  rendezvous::CoordinatorClient& client_;
  const v1::HostSpec host_;
  const Options options_;
  const RunningMembers running_members_;
  const WatchedProgress watched_progress_;
  const IdleMembers idle_members_;
  const NotReady not_ready_;

  Mutex mu_;
  CondVar wake_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace gdt::agent

#endif  // GDT_AGENT_REGISTRAR_H_
