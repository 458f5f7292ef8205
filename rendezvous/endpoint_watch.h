#ifndef GDT_RENDEZVOUS_ENDPOINT_WATCH_H_
#define GDT_RENDEZVOUS_ENDPOINT_WATCH_H_

#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "common/mutex.h"
#include "rendezvous/channel.h"

namespace gdt::rendezvous {

// A method no gdt server implements: every gRPC server answers it with
// UNIMPLEMENTED before any service code runs, so probing with it costs the
// server nothing and changes no state. Servers leave it out of their RPC
// metrics.
inline constexpr char kEndpointProbeMethod[] = "/gdt.v1.EndpointProbe/Probe";

// Whether a gRPC server's endpoint still accepts a new connection and
// answers a call on it, within `deadline`: one call of kEndpointProbeMethod
// with an empty request over a connection of its own,
// never a pooled one. Any answer from the server counts, a refusal,
// UNIMPLEMENTED or a TLS handshake failure included (the server did accept
// and speak); only no connection (UNAVAILABLE) or no answer in time
// (DEADLINE_EXCEEDED) fail. `who` names the server in messages ("agent",
// "coordinator"). `tls_target_name`: the name the server's certificate is
// checked against with TLS; empty = the endpoint's host.
// Errors: UNAVAILABLE or DEADLINE_EXCEEDED with gRPC's message, or
// UNAVAILABLE "cannot open a socket: ..." when this process has no
// descriptor left.
absl::Status ProbeEndpoint(const std::string& who, const std::string& endpoint,
                           const ClientSecurity& security,
                           const std::string& tls_target_name,
                           std::chrono::milliseconds deadline);

// Watches a daemon's own gRPC endpoint from a thread: probes it every
// `interval`; after `failures` probes in a row that fail the endpoint is
// unanswered (NotReadyReason() says why: the agent's heartbeat carries it
// and the coordinator places no new gang there), and one probe that
// succeeds clears it. From `recover_after` failed probes in a row on it
// calls `recover` after each one (restart the listener: gRPC's listener,
// once accept() failed with EMFILE, never accepts again, while a busy one
// answers again within seconds); a recover error is part of the reason.
// Logs once per change, as `event=<who>_endpoint_unanswered` and
// `event=<who>_endpoint_answers`. The agent and the coordinator use it
// (docs/security.md "Descriptor exhaustion").
//
// Thread-safe. Stop() (or the destructor) before what the callbacks use
// goes away.
class EndpointWatch {
 public:
  struct Options {
    std::chrono::milliseconds interval{2000};
    int failures = 2;
    int recover_after = 5;
    // Names the daemon in log events and reasons: "agent", "coordinator".
    std::string who = "agent";
    // What the daemon does while the endpoint is unanswered, for the log.
    std::string while_unanswered =
        "not ready: heartbeats tell the coordinator to place no new gang "
        "here until it answers again";
    // What it does once the endpoint answers again, for the log.
    std::string when_answered = "ready: takes new members again";
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

}  // namespace gdt::rendezvous

#endif  // GDT_RENDEZVOUS_ENDPOINT_WATCH_H_
