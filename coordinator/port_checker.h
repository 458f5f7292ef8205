#ifndef GDT_COORDINATOR_PORT_CHECKER_H_
#define GDT_COORDINATOR_PORT_CHECKER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace gdt::coordinator {

// Asks a host's agent whether a TCP port is free there. The real one
// (AgentPortChecker, in the service library) calls the agent over gRPC; tests
// use a fake.
class PortChecker {
 public:
  virtual ~PortChecker() = default;
  // Returns whether `port` is free on the host whose agent listens at
  // `agent_endpoint`.
  // Errors: Unavailable (or another code) when the agent cannot answer.
  virtual absl::StatusOr<bool> IsPortFree(const std::string& agent_endpoint,
                                          uint32_t port) = 0;
};

}  // namespace gdt::coordinator

#endif  // GDT_COORDINATOR_PORT_CHECKER_H_
