#ifndef GDT_RENDEZVOUS_COORDINATOR_CLIENT_H_
#define GDT_RENDEZVOUS_COORDINATOR_CLIENT_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "gdt/v1/coordinator.grpc.pb.h"

namespace gdt::rendezvous {

// The only class that calls the coordinator's stub. Every call has a
// deadline; JoinGang also owns the reconnect policy. Thread-safe (gRPC stubs
// are).
class CoordinatorClient {
 public:
  using Deadline = std::chrono::system_clock::time_point;

  // `endpoint` is host:port. Connects lazily.
  explicit CoordinatorClient(const std::string& endpoint);

  const std::string& endpoint() const { return endpoint_; }

  // Registers or updates a host; returns the heartbeat interval in seconds.
  absl::StatusOr<uint32_t> RegisterHost(const v1::HostSpec& host,
                                        std::chrono::milliseconds timeout);

  // Returns true when the coordinator asks the agent to register again.
  absl::StatusOr<bool> Heartbeat(const std::string& host_name,
                                 std::chrono::milliseconds timeout);

  // Joins a gang and blocks until it is admitted. `on_waiting` sees every
  // waiting event; `on_reconnect` sees each transient failure (coordinator
  // unreachable or restarting) before the call retries with backoff. Either
  // may be empty. Returns the assignment.
  // Errors: Aborted (with the coordinator's reason) when the gang was
  // aborted; DeadlineExceeded at `deadline`; InvalidArgument,
  // FailedPrecondition, ResourceExhausted as the coordinator rejected the
  // join (not retried).
  absl::StatusOr<v1::Assignment> JoinGang(
      const v1::JoinGangRequest& request, Deadline deadline,
      const std::function<void(const v1::WaitingEvent&)>& on_waiting,
      const std::function<void(const absl::Status&)>& on_reconnect);

  absl::Status ReportExit(const v1::ReportExitRequest& request,
                          std::chrono::milliseconds timeout);
  absl::Status LeaveGang(const v1::LeaveGangRequest& request,
                         std::chrono::milliseconds timeout);
  absl::StatusOr<v1::GetStatusResponse> GetStatus(
      const v1::GetStatusRequest& request, std::chrono::milliseconds timeout);

 private:
  std::string endpoint_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

}  // namespace gdt::rendezvous

#endif  // GDT_RENDEZVOUS_COORDINATOR_CLIENT_H_
