#ifndef GDT_COORDINATOR_AGENT_PORT_CHECKER_H_
#define GDT_COORDINATOR_AGENT_PORT_CHECKER_H_

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "common/mutex.h"
#include "coordinator/port_checker.h"
#include "rendezvous/agent_client.h"

namespace gdt::coordinator {

// Asks the host's gdt-agent (v1::Agent.CheckPort) whether a port is free,
// with a timeout per question. Keeps one AgentClient per endpoint.
// Thread-safe.
class AgentPortChecker final : public PortChecker {
 public:
  explicit AgentPortChecker(
      std::chrono::milliseconds timeout = std::chrono::seconds(2))
      : timeout_(timeout) {}

  // How to reach agents (TLS, docs/security.md); call before the first
  // question.
  void SetSecurity(const rendezvous::ClientSecurity& security) {
    MutexLock lock(mu_);
    security_ = security;
  }

  absl::StatusOr<bool> IsPortFree(const std::string& agent_endpoint,
                                  uint32_t port) override;

 private:
  const std::chrono::milliseconds timeout_;
  Mutex mu_;
  rendezvous::ClientSecurity security_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<rendezvous::AgentClient>> clients_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace gdt::coordinator

#endif  // GDT_COORDINATOR_AGENT_PORT_CHECKER_H_
