#ifndef GDT_RENDEZVOUS_AGENT_CLIENT_H_
#define GDT_RENDEZVOUS_AGENT_CLIENT_H_

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "gdt/v1/agent.grpc.pb.h"
#include "rendezvous/channel.h"

namespace gdt::rendezvous {

// The only class that calls a gdt-agent's stub. Thread-safe.
class AgentClient {
 public:
  // `endpoint` is host:port. Connects lazily.
  explicit AgentClient(const std::string& endpoint);
  // The same over TLS when `security` says so (docs/security.md "TLS").
  AgentClient(const std::string& endpoint, const ClientSecurity& security);

  const std::string& endpoint() const { return endpoint_; }

  // Sends metadata `key: value` with every later call (the member
  // token, docs/security.md). Call before the first call; not thread-safe.
  void AddMetadata(std::string key, std::string value);

  // Waits up to `timeout` for the agent to become reachable (the call is
  // idempotent). Errors: the RPC's, e.g. DEADLINE_EXCEEDED or UNAVAILABLE
  // when the agent stayed unreachable.
  absl::Status SetupMember(const v1::SetupMemberRequest& request,
                           std::chrono::milliseconds timeout);

  // Waits up to `timeout` for a connection to the agent (no call is made).
  // RunStage fails at once when the agent cannot be reached; calling this
  // first rides out an agent that is slow to accept or restarting. Errors:
  // Unavailable when no connection came up in time.
  absl::Status WaitUntilReachable(std::chrono::milliseconds timeout);

  // Runs a stage on the agent and blocks until it exits, passing its output
  // to `on_output` in order. `poll_signal` is called about every 50 ms from
  // another thread; when it returns a signal, that signal is sent to the
  // stage (each returned value is sent once). Returns the stage's exit.
  // Errors: Unavailable when the agent cannot be reached or the stream broke
  // before the exit arrived; whatever the agent rejected the start with.
  // `on_hang` (may be empty) sees the agent's HangDetected, if any.
  absl::StatusOr<v1::StageExit> RunStage(
      const v1::StartStage& start,
      const std::function<void(v1::OutputStream, std::string_view)>& on_output,
      const std::function<std::optional<v1::Signal>()>& poll_signal,
      const std::function<void(const v1::HangDetected&)>& on_hang = {});

  // Returns the number of process groups that had to be killed.
  absl::StatusOr<uint32_t> TeardownMember(
      const v1::TeardownMemberRequest& request,
      std::chrono::milliseconds timeout);

  // Returns whether `port` is free on the agent's host.
  absl::StatusOr<bool> CheckPort(uint32_t port,
                                 std::chrono::milliseconds timeout);

  // gdt-rsh: runs `request.argv` in the member of
  // `request.gang_id` on the agent's host, passing its output to
  // `on_output` in order; blocks until it exits (no deadline: the command
  // runs as long as it runs). Errors: the agent's refusal (NotFound,
  // PermissionDenied, InvalidArgument); Unavailable when the agent cannot be
  // reached or the stream broke before the exit arrived. When `stop` is
  // given it is polled while the command runs; once it returns true the
  // call is cancelled (the agent then stops the command's process group)
  // and Cancelled is returned.
  absl::StatusOr<v1::StageExit> ExecInMember(
      const v1::ExecInMemberRequest& request,
      const std::function<void(v1::OutputStream, std::string_view)>& on_output,
      const std::function<bool()>& stop = nullptr);

 private:
  void AddMetadataTo(grpc::ClientContext& context) const;
  absl::Status Convert(const grpc::Status& status) const;

  std::string endpoint_;
  ClientSecurity security_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Agent::Stub> stub_;
  std::vector<std::pair<std::string, std::string>> metadata_;
};

}  // namespace gdt::rendezvous

#endif  // GDT_RENDEZVOUS_AGENT_CLIENT_H_
