#include "coordinator/agent_port_checker.h"

namespace gdt::coordinator {

absl::StatusOr<bool> AgentPortChecker::IsPortFree(
    const std::string& agent_endpoint, uint32_t port) {
  std::shared_ptr<rendezvous::AgentClient> client;
  {
    MutexLock lock(mu_);
    std::shared_ptr<rendezvous::AgentClient>& slot = clients_[agent_endpoint];
    if (slot == nullptr) {
      slot =
          std::make_shared<rendezvous::AgentClient>(agent_endpoint, security_);
    }
    client = slot;
  }
  return client->CheckPort(port, timeout_);
}

}  // namespace gdt::coordinator
