#ifndef GDT_AGENT_ENDPOINT_WATCH_H_
#define GDT_AGENT_ENDPOINT_WATCH_H_

#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "common/mutex.h"
#include "rendezvous/channel.h"

namespace gdt::agent {

// Whether the agent's own gRPC endpoint still accepts a new connection and
// answers a call on it, within `deadline`: one CheckPort call for port 0 (an
// argument error, no side effect) over a connection of its own, never a
// pooled one. Any answer from the agent's server counts, a refusal or a TLS
// handshake failure included (the server did accept and speak); only no
// connection (UNAVAILABLE) or no answer in time (DEADLINE_EXCEEDED) fail.
// `tls_target_name`: the name the agent's certificate is checked against
// with TLS (its advertised host); empty = the endpoint's host.
// Errors: UNAVAILABLE or DEADLINE_EXCEEDED with gRPC's message.
absl::Status ProbeAgentEndpoint(const std::string& endpoint,
                                const rendezvous::ClientSecurity& security,
                                const std::string& tls_target_name,
                                std::chrono::milliseconds deadline);

// This process's open descriptors and its soft RLIMIT_NOFILE, as
// "open files 1021 of 1024" (or what could be read), for reasons and logs.
std::string OpenFilesSummary();

// Watches the agent's own endpoint from a thread: probes it every
// `interval`; after `failures` probes in a row that fail the agent is not
// ready (NotReadyReason() says why, the heartbeat carries it and the
// coordinator places no new gang here), and one probe that succeeds makes it
// ready again. From `recover_after` failed probes in a row on it calls
// `recover` after each one (restart the listener once no stage runs: a
// listener that hit the descriptor limit never accepts again, while a busy
// one answers again within seconds); a recover error is part of the
// reason. Logs once per change.
//
// Thread-safe. Stop() (or the destructor) before what the callbacks use
// goes away.
class EndpointWatch {
 public:
  struct Options {
    std::chrono::milliseconds interval{2000};
    int failures = 2;
    int recover_after = 5;
  };
  using Probe = std::function<absl::Status()>;
  using Recover = std::function<absl::Status()>;

  EndpointWatch(std::string endpoint, Options options, Probe probe,
                Recover recover = nullptr);
  ~EndpointWatch();
  EndpointWatch(const EndpointWatch&) = delete;
  EndpointWatch& operator=(const EndpointWatch&) = delete;

  void Start();
  // Stops the thread and waits for it (a probe in flight finishes). Idempotent.
  void Stop();

  // Empty while the endpoint answers, else one line: why the host takes no
  // new members.
  std::string NotReadyReason() const;

 private:
  void Run();

  const std::string endpoint_;
  const Options options_;
  const Probe probe_;
  const Recover recover_;

  mutable Mutex mu_;
  CondVar wake_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::string reason_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace gdt::agent

#endif  // GDT_AGENT_ENDPOINT_WATCH_H_
