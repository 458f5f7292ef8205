#ifndef GDT_RENDEZVOUS_COORDINATOR_CLIENT_H_
#define GDT_RENDEZVOUS_COORDINATOR_CLIENT_H_

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/mutex.h"
#include "gdt/v1/coordinator.grpc.pb.h"
#include "rendezvous/channel.h"

namespace gdt::rendezvous {

// HA.
// A standby gdt-coord answers every RPC with UNAVAILABLE and a message that
// contains kLeaderIsAt followed by the leader's host:port.
inline constexpr char kLeaderIsAt[] = "the leader is at ";
// The leader's host:port named by such a message; empty when it names none.
std::string LeaderFromMessage(absl::string_view message);

// Checks a coordinator address as clients take it: host:port, or several
// (replicas) separated by commas. InvalidArgument naming the bad one, e.g.
// a port above 65535, which gRPC would otherwise wrap to another port.
absl::Status CheckCoordinatorAddress(const std::string& endpoints);

// Lets another thread end a blocking streaming call (WatchGang) early.
// Cancel() ends the call in flight, any backoff sleep, and every later call
// made with this canceller. Thread-safe; must outlive the calls using it.
class CallCanceller {
 public:
  void Cancel();
  bool cancelled();

 private:
  friend class CoordinatorClient;
  // Registers the context of the call in flight; returns false (and
  // registers nothing) when already cancelled. Detach() before the context
  // goes away.
  bool Attach(grpc::ClientContext* context);
  void Detach();
  // Sleeps until `deadline` or Cancel(); returns false when cancelled.
  bool SleepUntil(std::chrono::system_clock::time_point deadline);

  Mutex mu_;
  CondVar cv_;
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

// The only class that calls the coordinator's stub. Every call has a
// deadline; JoinGang also owns the reconnect policy. Thread-safe (gRPC stubs
// are).
class CoordinatorClient {
 public:
  using Deadline = std::chrono::system_clock::time_point;

  // `endpoint` is host:port, or several comma-separated (HA replicas):
  // calls go to one at a time and move to the next one — or to
  // the leader a standby names (kLeaderIsAt) — when it is unavailable;
  // unary calls try the others at once within their timeout, JoinGang and
  // WatchGang on their next reconnect. Connects lazily.
  explicit CoordinatorClient(const std::string& endpoint);
  // The same over TLS when `security` says so (docs/security.md "TLS"). A
  // failed TLS handshake is one clear UNAVAILABLE line (see
  // ExplainConnectFailure) and is not retried.
  CoordinatorClient(const std::string& endpoint,
                    const ClientSecurity& security);

  // As given to the constructor.
  const std::string& endpoint() const { return endpoint_; }
  // The endpoint calls go to now.
  std::string current_endpoint();
  // How many coordinator endpoints were given (more than one: HA replicas,
  // where a call that found no leader may succeed once one is elected).
  size_t endpoint_count() const { return endpoints_.size(); }

  // Sends metadata `key: value` with every later call: how callers present
  // secrets (job token, host token, "authorization: Bearer <admin token>";
  // docs/security.md) without putting them into messages. Call before the
  // first call; not thread-safe.
  void AddMetadata(std::string key, std::string value);

  // Registers or updates a host; returns the heartbeat interval in seconds.
  // Remembers the coordinator's liveness server (RegisterHostResponse) for
  // Heartbeat.
  absl::StatusOr<uint32_t> RegisterHost(const v1::HostSpec& host,
                                        std::chrono::milliseconds timeout);

  // Where Heartbeat goes first: the liveness server the last RegisterHost
  // named (its liveness_endpoint, else the answering endpoint's host with
  // its liveness_port); empty when there is none or it stopped answering.
  std::string liveness_endpoint();

  // The master_port_range the last RegisterHost named, {min, max}; {0, 0}
  // before one answered or from a coordinator that does not say.
  std::pair<uint32_t, uint32_t> master_port_range();

  // Returns true when the coordinator asks the agent to register again.
  // `running_members`: the members that run a stage on the host now
  // (nullopt: the caller does not say). Sent to the liveness server when
  // there is one, with half of `timeout`; when that fails as unreachable
  // (UNAVAILABLE, DEADLINE_EXCEEDED, UNIMPLEMENTED: a firewalled port, an
  // older or restarted coordinator), the same heartbeat goes to the main
  // endpoint with the rest, and so do later ones until the next
  // RegisterHost. `progress`: the last progress of the member stages on
  // the host that have a hang watchdog. `idle_members`: the members the
  // agent holds that run no stage; those the coordinator says have left
  // their gang go to `members_left` (when not null; cleared first).
  // `not_ready_reason`: empty while the agent takes new members, else why
  // it cannot.
  absl::StatusOr<bool> Heartbeat(
      const std::string& host_name, std::chrono::milliseconds timeout,
      const std::optional<std::vector<std::string>>& running_members =
          std::nullopt,
      const std::vector<v1::MemberProgress>& progress = {},
      const std::vector<std::string>& idle_members = {},
      std::vector<std::string>* members_left = nullptr,
      const std::string& not_ready_reason = "");

  // Joins a gang and blocks until it is admitted. `on_waiting` sees every
  // waiting event; `on_reconnect` sees each transient failure before the
  // call retries. Either may be empty. Returns the assignment.
  // Transient failures: the coordinator unreachable or restarting (retried
  // with 200 ms to 2 s backoff, moving through the endpoints), and a
  // refusal with a retry hint (common/retry_after.h; a per-project join
  // rate limit, paused member checks), retried at the same endpoint after
  // the hint (at most kMaxRetryAfter) plus a jitter that grows from 0.5 s
  // to 8 s with each refusal in a row. For a refusal, the status
  // `on_reconnect` sees carries as its RetryAfter() the whole wait before
  // the next attempt.
  // Errors: Aborted (with the coordinator's reason) when the gang was
  // aborted; DeadlineExceeded at `deadline`, or at once when the next
  // attempt would come after it, naming the last failure; InvalidArgument,
  // FailedPrecondition, ResourceExhausted without a retry hint as the
  // coordinator rejected the join (not retried).
  absl::StatusOr<v1::Assignment> JoinGang(
      const v1::JoinGangRequest& request, Deadline deadline,
      const std::function<void(const v1::WaitingEvent&)>& on_waiting,
      const std::function<void(const absl::Status&)>& on_reconnect);

  // Agents: what member token `token` grants this host (the host token
  // presented through AddMetadata names the host). Errors as the RPC
  // (docs/protocol.md): PermissionDenied with the reason the token is no
  // longer good.
  absl::StatusOr<v1::CheckMemberTokenResponse> CheckMemberToken(
      const std::string& token, std::chrono::milliseconds timeout);

  absl::Status ReportExit(const v1::ReportExitRequest& request,
                          std::chrono::milliseconds timeout);

  // Watches a gang until it fails or succeeds: passes every event to
  // `on_event` (on this thread; may be empty) and returns the final one
  // (`failed` or `succeeded`). Reconnects on transient failures with 200 ms
  // to 2 s backoff, calling `on_reconnect` (may be empty) each time.
  // Errors: Cancelled after `canceller.Cancel()`; DeadlineExceeded at
  // `deadline`; NotFound or FailedPrecondition as the coordinator rejected
  // the watch (not retried).
  absl::StatusOr<v1::WatchGangEvent> WatchGang(
      const v1::WatchGangRequest& request, Deadline deadline,
      const std::function<void(const v1::WatchGangEvent&)>& on_event,
      const std::function<void(const absl::Status&)>& on_reconnect,
      CallCanceller& canceller);

  absl::Status LeaveGang(const v1::LeaveGangRequest& request,
                         std::chrono::milliseconds timeout);
  // The peer list of the caller's running gang (after a compact assignment).
  absl::StatusOr<v1::GetPeersResponse> GetPeers(
      const v1::GetPeersRequest& request, std::chrono::milliseconds timeout);

  // A member refused before it joined tells its gang; returns the
  // root-cause line. Errors as the coordinator rejected it.
  absl::StatusOr<std::string> RefuseMember(
      const v1::RefuseMemberRequest& request,
      std::chrono::milliseconds timeout);
  absl::StatusOr<v1::GetStatusResponse> GetStatus(
      const v1::GetStatusRequest& request, std::chrono::milliseconds timeout);
  // An operator cancels a gang; returns its root-cause line.
  // Errors: NotFound, FailedPrecondition as the coordinator rejected it.
  absl::StatusOr<std::string> CancelGang(const v1::CancelGangRequest& request,
                                         std::chrono::milliseconds timeout);
  // Cancels the forming gangs `request` names; returns how many.
  absl::StatusOr<uint32_t> CancelFormingGangs(
      const v1::CancelFormingGangsRequest& request,
      std::chrono::milliseconds timeout);
  // Ends forming gangs with no present member; returns their ids.
  absl::StatusOr<std::vector<std::string>> CollectGangs(
      std::chrono::milliseconds timeout);

  // Host inventory (operators). Errors as the RPCs (docs/protocol.md).
  absl::Status SetHostDrained(const std::string& host_name, bool drained,
                              std::chrono::milliseconds timeout);
  absl::Status RemoveHost(const std::string& host_name,
                          std::chrono::milliseconds timeout);
  // Host tokens (operators). Errors as the RPCs.
  absl::StatusOr<std::string> CreateHostToken(
      const std::string& host_name, std::chrono::milliseconds timeout);
  absl::StatusOr<v1::ListHostTokensResponse> ListHostTokens(
      std::chrono::milliseconds timeout);
  absl::Status RevokeHostToken(const std::string& host_name,
                               std::chrono::milliseconds timeout);

 private:
  // HA.
  // The stub of the endpoint calls go to now, and that endpoint.
  std::pair<v1::Coordinator::Stub*, std::string> Current();
  // After a call to `used` failed with `status`: on UNAVAILABLE, moves to
  // the leader the message names, else to the next endpoint of the list.
  // Returns whether calls now go elsewhere (worth trying again at once).
  bool Failover(const std::string& used, const absl::Status& status);
  // With several endpoints: waits until `used` is connected, at most until
  // `by`. UNAVAILABLE when it stayed silent (nothing refused, nothing
  // answered), so that the call moves on to the next endpoint having sent
  // nothing; OK otherwise, a refused connection included (the call then
  // fails at once with gRPC's own reason).
  absl::Status AwaitConnection(const std::string& used,
                               std::chrono::system_clock::time_point by);
  // One unary call, moving through the endpoints while they are
  // unavailable, until `timeout`.
  template <typename Rpc>
  absl::Status Unary(std::chrono::milliseconds timeout, Rpc rpc);
  // Unary() for one of the stub's methods: its response, or the error.
  template <typename Request, typename Response>
  absl::StatusOr<Response> Call(
      std::chrono::milliseconds timeout,
      grpc::Status (v1::Coordinator::Stub::*method)(grpc::ClientContext*,
                                                    const Request&, Response*),
      const Request& request);

  void AddMetadataTo(grpc::ClientContext& context) const;
  // A call's status, a TLS handshake failure with `used` as one clear line.
  absl::Status Convert(const grpc::Status& status,
                       const std::string& used) const;

  std::string endpoint_;
  ClientSecurity security_;
  std::vector<std::string> endpoints_;
  // Set before the first call (AddMetadata); read by every call.
  std::vector<std::pair<std::string, std::string>> metadata_;
  Mutex mu_;
  std::string current_ ABSL_GUARDED_BY(mu_);
  std::string liveness_ ABSL_GUARDED_BY(mu_);  // See liveness_endpoint().
  std::pair<uint32_t, uint32_t> master_ports_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<v1::Coordinator::Stub>> stubs_
      ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace gdt::rendezvous

#endif  // GDT_RENDEZVOUS_COORDINATOR_CLIENT_H_
