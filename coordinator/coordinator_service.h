#ifndef GDT_COORDINATOR_COORDINATOR_SERVICE_H_
#define GDT_COORDINATOR_COORDINATOR_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/log_throttle.h"
#include "common/mutex.h"
#include "common/work_queue.h"
#include "coordinator/coordinator.h"
#include "coordinator/id_token_member_verifier.h"
#include "coordinator/member_verifier.h"
#include "gdt/v1/coordinator.grpc.pb.h"
#include "rendezvous/metadata.h"

namespace gdt::coordinator {

// The gRPC face of the coordinator (callback API). Each handler converts the
// request into a Coordinator call and the result back; no scheduling rules
// live here. JoinGang and WatchGang streams are reactors that hold no thread
// while they wait; the Coordinator's member events are routed to them by
// stream id (one id space for both).
//
// Thread-safe. Keeps a reference to `coordinator`, which must outlive it;
// installs itself as the coordinator's event sink.
// Who may do what (docs/security.md). The default checks nothing (the local
// demo).
struct ServiceSecurity {
  // Checks every JoinGang's job token; null = members are not verified.
  MemberVerifier* verifier = nullptr;
  // Checks every JoinGang's ID token instead (when `verifier` is null).
  IdTokenMemberVerifier* id_token_verifier = nullptr;
  // Non-empty: the GitLab instance every JoinGang must name in its key
  // (CheckClaimedInstance), checked before any GitLab call.
  std::string trusted_instance;
  // SHA-256 (hex) of the operators' admin token; empty = operator RPCs open.
  std::string admin_token_sha256;
  // With an admin token, who reads status without it: "loopback", "anyone"
  // or "nobody".
  std::string status_without_token = "loopback";
  // RegisterHost, Heartbeat and lost/hung reports need the host's token.
  bool require_host_tokens = false;
  // Every call that acts for a host (RegisterHost, Heartbeat,
  // CheckMemberToken, an agent's member reports) must come with a client
  // certificate whose DNS subjectAltName or common name is that host's name.
  // Only meaningful when the server requires client certificates.
  bool agent_cert_must_match_host = false;
  // With a verifier: the threads that check joining members (and wait on
  // GitLab) instead of gRPC's, and how many joins may wait for one of them
  // before further joins are refused at once with UNAVAILABLE. More
  // threads than the verifier's GitLab calls in flight, so that answers it
  // already knows are not stuck behind a slow GitLab.
  size_t verification_threads = 12;
  size_t max_queued_verifications = 256;
};
// -----------------------------------------------.

class CoordinatorService final : public v1::Coordinator::CallbackService {
 public:
  CoordinatorService(Coordinator& coordinator,
                     std::chrono::seconds heartbeat_interval);
  ~CoordinatorService() override;

  // Sets the access rules; call before serving. `security.verifier` and
  // `security.id_token_verifier` must outlive this object.
  void SetSecurity(ServiceSecurity security);

  // Sets Assignment.coordinator_endpoint (known once the server is bound).
  void SetAdvertiseEndpoint(const std::string& endpoint);
  // What RegisterHost tells agents about the liveness server: its port and,
  // when set, the full endpoint to use (RegisterHostResponse).
  void SetLivenessEndpoint(uint32_t port, const std::string& endpoint);
  // The master_port_range RegisterHost tells agents.
  void SetMasterPortRange(uint32_t min, uint32_t max);

  // Ends every open JoinGang and WatchGang stream with UNAVAILABLE (clients
  // reconnect), so that server shutdown does not wait on them.
  void EndAllStreams(const std::string& why);

  grpc::ServerUnaryReactor* RegisterHost(
      grpc::CallbackServerContext* context,
      const v1::RegisterHostRequest* request,
      v1::RegisterHostResponse* response) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* context,
                                      const v1::HeartbeatRequest* request,
                                      v1::HeartbeatResponse* response) override;
  // Heartbeat's checks and bookkeeping, for this service and the liveness
  // server (coordinator/liveness_server.h), whichever the call came to.
  absl::Status HandleHeartbeat(const grpc::ServerContextBase* context,
                               const v1::HeartbeatRequest& request,
                               v1::HeartbeatResponse& response);
  grpc::ServerUnaryReactor* CheckMemberToken(
      grpc::CallbackServerContext* context,
      const v1::CheckMemberTokenRequest* request,
      v1::CheckMemberTokenResponse* response) override;
  grpc::ServerWriteReactor<v1::JoinGangEvent>* JoinGang(
      grpc::CallbackServerContext* context,
      const v1::JoinGangRequest* request) override;
  grpc::ServerWriteReactor<v1::WatchGangEvent>* WatchGang(
      grpc::CallbackServerContext* context,
      const v1::WatchGangRequest* request) override;
  grpc::ServerUnaryReactor* ReportExit(
      grpc::CallbackServerContext* context,
      const v1::ReportExitRequest* request,
      v1::ReportExitResponse* response) override;
  grpc::ServerUnaryReactor* LeaveGang(grpc::CallbackServerContext* context,
                                      const v1::LeaveGangRequest* request,
                                      v1::LeaveGangResponse* response) override;
  grpc::ServerUnaryReactor* GetPeers(grpc::CallbackServerContext* context,
                                     const v1::GetPeersRequest* request,
                                     v1::GetPeersResponse* response) override;
  grpc::ServerUnaryReactor* RefuseMember(
      grpc::CallbackServerContext* context,
      const v1::RefuseMemberRequest* request,
      v1::RefuseMemberResponse* response) override;
  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* context,
                                      const v1::GetStatusRequest* request,
                                      v1::GetStatusResponse* response) override;
  grpc::ServerUnaryReactor* SetHostDrained(
      grpc::CallbackServerContext* context,
      const v1::SetHostDrainedRequest* request,
      v1::SetHostDrainedResponse* response) override;
  grpc::ServerUnaryReactor* RemoveHost(
      grpc::CallbackServerContext* context,
      const v1::RemoveHostRequest* request,
      v1::RemoveHostResponse* response) override;
  // Operator cancel.
  grpc::ServerUnaryReactor* CancelGang(
      grpc::CallbackServerContext* context,
      const v1::CancelGangRequest* request,
      v1::CancelGangResponse* response) override;
  grpc::ServerUnaryReactor* CancelFormingGangs(
      grpc::CallbackServerContext* context,
      const v1::CancelFormingGangsRequest* request,
      v1::CancelFormingGangsResponse* response) override;
  grpc::ServerUnaryReactor* CollectGangs(
      grpc::CallbackServerContext* context,
      const v1::CollectGangsRequest* request,
      v1::CollectGangsResponse* response) override;
  // Host tokens (admin).
  grpc::ServerUnaryReactor* CreateHostToken(
      grpc::CallbackServerContext* context,
      const v1::CreateHostTokenRequest* request,
      v1::CreateHostTokenResponse* response) override;
  grpc::ServerUnaryReactor* ListHostTokens(
      grpc::CallbackServerContext* context,
      const v1::ListHostTokensRequest* request,
      v1::ListHostTokensResponse* response) override;
  grpc::ServerUnaryReactor* RevokeHostToken(
      grpc::CallbackServerContext* context,
      const v1::RevokeHostTokenRequest* request,
      v1::RevokeHostTokenResponse* response) override;

 private:
  class JoinReactor;
  class WatchReactor;

  void Dispatch(std::vector<state::MemberEvent> events);
  void DispatchWatch(state::MemberEvent& event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Register(uint64_t stream_id, JoinReactor* reactor);
  void Unregister(uint64_t stream_id, JoinReactor* reactor);
  void Register(uint64_t stream_id, WatchReactor* reactor);
  void Unregister(uint64_t stream_id, WatchReactor* reactor);

  // OK when the caller presents the admin token (or none is configured).
  // Errors: Unauthenticated naming `what` when no token is presented;
  // PermissionDenied when it is wrong.
  absl::Status CheckAdmin(const grpc::ServerContextBase* context,
                          const char* what) const;
  // OK when the caller's host token is `host_name`'s; without
  // require_host_tokens also when it presents none. Errors: Unauthenticated
  // (none), PermissionDenied (wrong, revoked, or another host's).
  absl::Status CheckHost(const grpc::ServerContextBase* context,
                         const std::string& host_name);
  // OK unless agent_cert_must_match_host is on and the caller's client
  // certificate does not name `host_name`. Errors: PermissionDenied naming
  // what the certificate names.
  absl::Status CheckAgentCertificate(const grpc::ServerContextBase* context,
                                     const std::string& host_name) const;
  // OK when the caller may read status (see ServiceSecurity).
  absl::Status CheckStatusReader(const grpc::ServerContextBase* context) const;
  // OK when members are not verified or the caller's job token is job
  // `job_id`'s.
  absl::Status CheckJob(const grpc::ServerContextBase* context,
                        int64_t job_id) const;
  // Who may report about a member: an agent (it presents its host token)
  // only about members on its own host; an executor, when members are
  // verified, only about its own job.
  absl::Status CheckReporter(const grpc::ServerContextBase* context,
                             const v1::ReportExitRequest& request);
  // Returns `allowed`, logging it (one line for every RPC) when it refuses
  // the caller `rpc`.
  absl::Status Allow(const grpc::ServerContextBase* context,
                     std::string_view rpc, absl::Status allowed) const;
  // The shape of every operator RPC: refuses (logged) a caller without the
  // admin token, else runs `body` (returns absl::Status); finishes the call
  // with the outcome.
  // Finishes the unary call with `body()` (returns absl::Status), which may
  // wait on GitLab (a member's job-token check that is not cached): when
  // members are verified and `may_wait`, it runs on the member-check
  // threads, not on gRPC's; refused at once with UNAVAILABLE when those
  // are all busy and their backlog is full.
  template <typename Body>
  grpc::ServerUnaryReactor* MayWaitOnGitLab(
      grpc::CallbackServerContext* context, bool may_wait, Body body);
  template <typename Body>
  grpc::ServerUnaryReactor* AsAdmin(grpc::CallbackServerContext* context,
                                    const char* what, Body body);

  Coordinator& coordinator_;
  const std::chrono::seconds heartbeat_interval_;
  ServiceSecurity security_;  // Set before serving; constant afterwards.
  std::atomic<uint64_t> next_stream_id_{1};

  // Which refused calls get a log line (anyone who reaches the
  // coordinator can repeat them).
  mutable RefusalLog refusals_;
  Mutex mu_;  // Taken before any JoinReactor's own mutex, never after.
  std::map<uint64_t, JoinReactor*> streams_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, WatchReactor*> watches_ ABSL_GUARDED_BY(mu_);
  std::string advertise_endpoint_ ABSL_GUARDED_BY(mu_);
  uint32_t liveness_port_ ABSL_GUARDED_BY(mu_) = 0;
  std::string liveness_endpoint_ ABSL_GUARDED_BY(mu_);
  uint32_t master_port_min_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t master_port_max_ ABSL_GUARDED_BY(mu_) = 0;
  // Where joins are verified when members are (SetSecurity); last, so that
  // its threads end before anything they use.
  std::unique_ptr<WorkQueue> verifications_;
};

// GetStatus answers in pages of at most kStatusPageItems items (hosts, then
// gangs) and about kStatusPageBytes, far below gRPC's 4 MiB message limit,
// whatever the number and size of hosts and gangs.
inline constexpr uint32_t kStatusPageItems = 1000;
inline constexpr size_t kStatusPageBytes = 1 << 20;

// The page of `snapshot` that follows `page_token` (empty: the first page)
// with at most `page_size` items (0 or above kStatusPageItems:
// kStatusPageItems); next_page_token is set when more follow. A token names
// the last item shown ("h:<host name>", "l:<sequence>" for a live gang,
// "f:<sequence>" for a finished one), so pages of a changing snapshot
// neither repeat nor skip items that stayed put.
// Errors: InvalidArgument for a token no page carried.
absl::StatusOr<v1::GetStatusResponse> StatusPage(const Snapshot& snapshot,
                                                 uint32_t page_size,
                                                 const std::string& page_token);

// GetStatus's answer for `snapshot`, for in-process readers (the dashboard).
v1::GetStatusResponse StatusResponseOf(const Snapshot& snapshot);

}  // namespace gdt::coordinator

#endif  // GDT_COORDINATOR_COORDINATOR_SERVICE_H_
