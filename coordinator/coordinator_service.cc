#include "coordinator/coordinator_service.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <list>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/member_token.h"
#include "common/retry_after.h"
#include "common/secret.h"
#include "common/status_macros.h"
#include "common/terminal_text.h"
#include "grpc/grpc_security_constants.h"
#include "grpcpp/security/auth_context.h"
#include "rendezvous/grpc_status.h"
#include "rendezvous/operator_input.h"
#include "spdlog/spdlog.h"

namespace gdt::coordinator {
namespace {

state::HostSpec FromProto(const v1::HostSpec& proto) {
  state::HostSpec spec;
  spec.name = proto.name();
  spec.address = proto.address();
  spec.agent_endpoint = proto.agent_endpoint();
  for (const v1::Gpu& gpu : proto.gpus()) {
    spec.gpus.push_back(state::GpuInfo{gpu.index(), gpu.uuid(), gpu.model(),
                                       gpu.memory_bytes()});
  }
  spec.labels.insert(proto.labels().begin(), proto.labels().end());
  spec.network_interface = proto.network_interface();
  spec.cpu_slots = proto.cpu_slots();
  spec.runner_slots = proto.runner_slots();
  return spec;
}

void ToProto(const state::HostSpec& spec, v1::HostSpec* proto) {
  proto->set_name(spec.name);
  proto->set_address(spec.address);
  proto->set_agent_endpoint(spec.agent_endpoint);
  for (const state::GpuInfo& gpu : spec.gpus) {
    v1::Gpu* out = proto->add_gpus();
    out->set_index(gpu.index);
    out->set_uuid(gpu.uuid);
    out->set_model(gpu.model);
    out->set_memory_bytes(gpu.memory_bytes);
  }
  proto->mutable_labels()->insert(spec.labels.begin(), spec.labels.end());
  proto->set_network_interface(spec.network_interface);
  proto->set_cpu_slots(spec.cpu_slots);
  proto->set_runner_slots(spec.runner_slots);
}

state::GangKey FromProto(const v1::GangKey& proto) {
  return state::GangKey{proto.instance(), proto.project_id(),
                        proto.pipeline_id(), proto.group_name(), proto.size()};
}

void ToProto(const state::GangKey& key, v1::GangKey* proto) {
  proto->set_instance(key.instance);
  proto->set_project_id(key.project_id);
  proto->set_pipeline_id(key.pipeline_id);
  proto->set_group_name(key.group_name);
  proto->set_size(key.size);
}

JoinRequest FromProto(const v1::JoinGangRequest& proto) {
  JoinRequest request;
  request.key = FromProto(proto.key());
  request.member_index = proto.member_index();
  request.job_id = proto.job_id();
  request.job_name = proto.job_name();
  request.gpus_per_node = proto.gpus_per_node();
  request.procs_per_node = proto.procs_per_node();
  request.launcher = proto.launcher();
  request.arrival_host = proto.arrival_host();
  request.job_timeout_seconds = proto.job_timeout_seconds();
  request.priority = proto.priority();
  request.topology_same = proto.topology_same();
  request.topology_required = proto.topology_required();
  request.preemptible = proto.preemptible();
  if (proto.has_preempt_retries()) {
    request.preempt_retries = proto.preempt_retries();
  }
  request.nodes_min = proto.nodes_min();
  return request;
}

// `compact`: leave the peer list out (the member fetches it with GetPeers).
void ToProto(const state::Assignment& assignment, const std::string& endpoint,
             bool compact, v1::Assignment* proto) {
  proto->set_gang_id(assignment.gang_id);
  proto->set_epoch(assignment.epoch);
  if (assignment.not_needed) {
    proto->set_num_nodes(assignment.num_nodes);
    proto->set_not_needed(true);
    return;
  }
  proto->set_node_rank(assignment.node_rank);
  proto->set_num_nodes(assignment.num_nodes);
  proto->set_procs_per_node(assignment.procs_per_node);
  proto->set_world_size(assignment.world_size);
  proto->set_host_name(assignment.host_name);
  proto->set_host_address(assignment.host_address);
  proto->set_agent_endpoint(assignment.agent_endpoint);
  for (uint32_t gpu : assignment.gpu_indices) proto->add_gpu_indices(gpu);
  proto->set_master_addr(assignment.master_addr);
  proto->set_master_port(assignment.master_port);
  if (assignment.peers != nullptr) {
    proto->set_peers_sha256(assignment.peers->sha256);
    if (!compact) {
      proto->mutable_peers()->Reserve(
          static_cast<int>(assignment.peers->addresses.size()));
      for (const std::string& peer : assignment.peers->addresses) {
        proto->add_peers(peer);
      }
    }
  }
  proto->set_network_interface(assignment.network_interface);
  proto->set_launcher(static_cast<v1::Launcher>(assignment.launcher));
  proto->set_coordinator_endpoint(endpoint);
  proto->set_kv_token(assignment.kv_token);
  proto->set_member_token(assignment.member_token);
}

void ToProto(const state::WaitingInfo& waiting, v1::WaitingEvent* proto) {
  proto->set_members_present(waiting.members_present);
  proto->set_members_total(waiting.members_total);
  for (uint32_t index : waiting.missing_indices) {
    proto->add_missing_indices(index);
  }
  proto->set_reason(waiting.reason);
  proto->set_queue_position(waiting.queue_position);
}

void ToProto(const HostView& view, v1::HostStatus* host) {
  ToProto(view.host.spec, host->mutable_host());
  host->set_state(view.state != state::HostState::kUp ? v1::HOST_STATE_DOWN
                  : view.drained                      ? v1::HOST_STATE_DRAINED
                                                      : v1::HOST_STATE_UP);
  for (uint32_t gpu : view.leased_gpus) host->add_leased_gpus(gpu);
  host->set_members_running(view.members_running);
  host->set_last_heartbeat_unix_ms(view.host.last_heartbeat_unix_ms);
  if (view.state == state::HostState::kUp && !view.not_ready_reason.empty()) {
    host->set_state(v1::HOST_STATE_DRAINED);
    host->set_not_ready_reason(view.not_ready_reason);
  }
}

void ToProto(const state::Gang& gang, v1::GangStatus* out) {
  out->set_gang_id(gang.id);
  ToProto(gang.key, out->mutable_key());
  out->set_state(static_cast<v1::GangState>(static_cast<int>(gang.state)));
  out->set_epoch(gang.epoch);
  out->set_reason(gang.reason);
  out->set_master_addr(gang.master_addr);
  out->set_master_port(gang.master_port);
  out->set_created_unix_ms(gang.created_unix_ms);
  out->set_preemptible(
      !gang.members.empty() &&
      std::all_of(gang.members.begin(), gang.members.end(),
                  [](const auto& entry) { return entry.second.preemptible; }));
  out->set_preemption_planned_by(gang.preemption_planned_by);
  out->set_preemptions(gang.preemptions);
  out->set_preempted_epoch(gang.preempted_epoch);
  out->set_preempted_by(gang.preempted_by);
  out->set_nodes_min(gang.Elastic() ? gang.nodes_min : 0);
  out->set_preempted_lost_gpu_hours(
      static_cast<double>(gang.preempted_lost_gpu_seconds) / 3600.0);
  if (gang.state == state::GangState::kRunning && gang.preempt_notice_ms != 0) {
    out->set_preemption_stop_by_unix_ms(gang.preempt_stop_by_ms);
  }
  for (const auto& [index, member] : gang.members) {
    v1::MemberStatus* status = out->add_members();
    status->set_member_index(index);
    status->set_job_id(member.job_id);
    status->set_job_name(member.job_name);
    status->set_present(member.present);
    status->set_left(member.left);
    status->set_node_rank(member.node_rank);
    status->set_host_name(member.host_name);
    for (uint32_t gpu : member.gpu_indices) status->add_gpu_indices(gpu);
    status->set_exit_code(member.exit_code);
  }
}

void ToProto(const Snapshot& snapshot, v1::GetStatusResponse* proto) {
  for (const HostView& view : snapshot.hosts) ToProto(view, proto->add_hosts());
  for (const state::Gang& gang : snapshot.gangs) {
    ToProto(gang, proto->add_gangs());
  }
}

// Where a page starts: the first host and gang index after `page_token`
// (see StatusPage for its forms).
absl::StatusOr<std::pair<size_t, size_t>> PageStart(
    const Snapshot& snapshot, const std::string& page_token) {
  if (page_token.empty()) return std::pair<size_t, size_t>{0, 0};
  const absl::Status bad = absl::InvalidArgumentError(
      absl::StrCat("page_token '", TruncateDisplay(page_token, 64),
                   "' is not one this coordinator's GetStatus issued"));
  if (page_token.size() < 3 || page_token[1] != ':') return bad;
  const std::string rest = page_token.substr(2);
  const std::vector<HostView>& hosts = snapshot.hosts;
  if (page_token[0] == 'h') {
    // Hosts come by name: continue after the last one shown.
    const auto next =
        std::upper_bound(hosts.begin(), hosts.end(), rest,
                         [](const std::string& name, const HostView& view) {
                           return name < view.host.spec.name;
                         });
    return std::pair<size_t, size_t>{next - hosts.begin(), 0};
  }
  int64_t sequence = 0;
  if ((page_token[0] != 'l' && page_token[0] != 'f') ||
      !absl::SimpleAtoi(rest, &sequence)) {
    return bad;
  }
  // Live gangs by arrival (ascending sequence), then finished ones most
  // recent first (descending).
  const std::vector<state::Gang>& gangs = snapshot.gangs;
  size_t index = page_token[0] == 'l' ? 0 : snapshot.live_gangs;
  while (index < snapshot.live_gangs && gangs[index].sequence <= sequence) {
    ++index;
  }
  if (page_token[0] == 'f') {
    while (index < gangs.size() && gangs[index].sequence >= sequence) ++index;
  }
  return std::pair<size_t, size_t>{hosts.size(), index};
}

// The value of metadata `key`, empty when absent.
std::string MetadataValue(const grpc::ServerContextBase* context,
                          const char* key) {
  const auto& metadata = context->client_metadata();
  auto it = metadata.find(key);
  if (it == metadata.end()) return "";
  return std::string(it->second.data(), it->second.size());
}

// The names the caller's client certificate (verified by the TLS
// handshake against tls.ca_file) gives itself: its DNS subjectAltNames,
// then its common name; each once. Empty without a certificate.
std::vector<std::string> PeerCertificateNames(
    const grpc::ServerContextBase* context) {
  std::vector<std::string> names;
  const std::shared_ptr<const grpc::AuthContext> auth = context->auth_context();
  if (auth == nullptr) return names;
  for (const char* property :
       {GRPC_PEER_DNS_PROPERTY_NAME, GRPC_X509_CN_PROPERTY_NAME}) {
    for (const grpc::string_ref& value : auth->FindPropertyValues(property)) {
      std::string name(value.data(), value.size());
      if (std::find(names.begin(), names.end(), name) == names.end()) {
        names.push_back(std::move(name));
      }
    }
  }
  return names;
}

// True for callers on 127.0.0.0/8, ::1 or a unix socket.
bool IsLoopbackPeer(const std::string& peer) {
  return peer.rfind("ipv4:127.", 0) == 0 || peer.rfind("ipv6:[::1]", 0) == 0 ||
         peer.rfind("ipv6:[::ffff:127.", 0) == 0 || peer.rfind("unix:", 0) == 0;
}

// Why a call that needs a member check is refused when every member-check
// thread is taken and the backlog is full.
constexpr char kChecksBusy[] =
    "member verification is busy (every check thread is taken and the "
    "backlog is full); the member retries";
// How long a member refused for kChecksBusy waits before it tries again.
constexpr std::chrono::milliseconds kChecksBusyRetryAfter{1000};

// Finishes a unary call with `status`.
grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* context,
                                 const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(rendezvous::ToGrpcStatus(status));
  return reactor;
}

}  // namespace

// A server stream that writes queued events one at a time and ends after a
// final event, on cancellation, or when told to. Subclasses add what the
// stream means to the coordinator and delete themselves in OnDone.
template <typename Event>
class EventWriter : public grpc::ServerWriteReactor<Event> {
 public:
  // Queues `event`; `final` ends the stream once it is written. Events after
  // the final one are dropped.
  void Send(Event event, bool final) {
    MutexLock lock(mu_);
    if (finish_status_.has_value()) return;
    queue_.push_back(std::move(event));
    if (final) finish_status_ = grpc::Status::OK;
    if (!writing_) {
      writing_ = true;
      this->StartWrite(&queue_.front());
    }
  }

  // Ends the stream with `status` after any write in flight.
  void End(const grpc::Status& status) { EndWith(status, nullptr); }
  // The same, and when `status` carries a retry hint (common/retry_after.h)
  // the hint goes to the client as trailing metadata of `context`, the
  // stream's: the client waits that long and tries again.
  void End(const absl::Status& status, grpc::ServerContextBase& context) {
    EndWith(rendezvous::ToGrpcStatus(status), [&status, &context] {
      rendezvous::AddRetryAfterTrailer(status, context);
    });
  }

  // Keeps the stream from finishing until Release(): work on another thread
  // still refers to this object. End() and cancellation take effect on
  // Release().
  void Hold() {
    MutexLock lock(mu_);
    held_ = true;
  }
  void Release() {
    std::optional<grpc::Status> finish;
    {
      MutexLock lock(mu_);
      held_ = false;
      finish = TakeFinishLocked();
    }
    if (finish.has_value()) this->Finish(*finish);
  }
  // True once the stream was told to end (or was cancelled).
  bool Ending() {
    MutexLock lock(mu_);
    return finish_status_.has_value();
  }

  void OnWriteDone(bool ok) override {
    std::optional<grpc::Status> finish;
    {
      MutexLock lock(mu_);
      queue_.pop_front();
      writing_ = false;
      if (!ok) {
        if (!finish_status_.has_value()) {
          finish_status_ =
              grpc::Status(grpc::StatusCode::UNAVAILABLE, "stream broke");
        }
        queue_.clear();
      } else if (!queue_.empty()) {
        writing_ = true;
        this->StartWrite(&queue_.front());
        return;
      }
      finish = TakeFinishLocked();
    }
    if (finish.has_value()) this->Finish(*finish);
  }

 protected:
  // Ends the stream after the client cancelled it. Once this returns, OnDone
  // may have deleted the object: copy what you need first.
  void EndCancelled() {
    std::optional<grpc::Status> finish;
    {
      MutexLock lock(mu_);
      if (!finish_status_.has_value()) {
        finish_status_ =
            grpc::Status(grpc::StatusCode::CANCELLED, "stream cancelled");
      }
      DropUnsentLocked();
      finish = TakeFinishLocked();
    }
    if (finish.has_value()) this->Finish(*finish);
  }

  Mutex mu_;

 private:
  // End(), running `before_finish` (when not empty) first if this ends the
  // stream: under the lock, so that no Finish() can come between.
  void EndWith(const grpc::Status& status,
               const std::function<void()>& before_finish) {
    std::optional<grpc::Status> finish;
    {
      MutexLock lock(mu_);
      if (finish_status_.has_value()) return;
      if (before_finish) before_finish();
      finish_status_ = status;
      DropUnsentLocked();
      finish = TakeFinishLocked();
    }
    if (finish.has_value()) this->Finish(*finish);
  }

  // Keeps only the event being written (its buffer must stay valid).
  void DropUnsentLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    while (queue_.size() > (writing_ ? 1u : 0u)) queue_.pop_back();
  }

  // Returns the status to Finish() with when the stream may end now. The
  // caller calls Finish() after unlocking: OnDone() deletes this object.
  std::optional<grpc::Status> TakeFinishLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_ || writing_ || held_ || !queue_.empty() ||
        !finish_status_.has_value()) {
      return std::nullopt;
    }
    finished_ = true;
    return finish_status_;
  }

  // A list, not a deque: an idle stream (a member waiting for its gang)
  // holds no buffer here, and the event being written stays where it is.
  std::list<Event> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool held_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> finish_status_ ABSL_GUARDED_BY(mu_);
};

// One JoinGang stream: ends after an Admitted or Aborted event; a cancelled
// stream withdraws the member's presence.
class CoordinatorService::JoinReactor final
    : public EventWriter<v1::JoinGangEvent> {
 public:
  // `context` is the stream's; it outlives this object.
  JoinReactor(CoordinatorService& service, grpc::CallbackServerContext& context,
              uint64_t stream_id, bool compact, std::string executor)
      : service_(service),
        context_(context),
        stream_id_(stream_id),
        compact_(compact),
        executor_(std::move(executor)) {}

  // Whether the member asked for a compact assignment (no peer list).
  bool compact() const { return compact_; }

  // Registers the stream and joins; on a rejected join ends the stream with
  // the error. When members are verified (with GitLab or by ID token, which
  // may wait on GitLab for up to its timeout), the check and the join run on
  // the service's verification threads, never on gRPC's: a flood of joins
  // that wait on a slow GitLab cannot hold up heartbeats or any other call.
  // When those threads are all busy and their backlog is full, the join is
  // refused at once with UNAVAILABLE and a retry hint of a second (the
  // member waits and retries). Every refusal with a retry hint (rate limits,
  // paused checks) sends it as trailing metadata.
  void Start(const v1::JoinGangRequest& request, const std::string& job_token,
             const std::string& id_token, const std::string& peer) {
    service_.Register(stream_id_, this);
    WorkQueue* verifications = service_.verifications_.get();
    if (verifications == nullptr) {
      VerifyAndJoin(request, job_token, id_token, peer);
      return;
    }
    Hold();
    const bool accepted =
        verifications->TrySubmit([this, request, job_token, id_token, peer] {
          if (!Ending()) VerifyAndJoin(request, job_token, id_token, peer);
          Release();  // This object may be gone from here on.
        });
    if (!accepted) {
      spdlog::warn("event=member_check_busy job={} member={} group={}",
                   request.job_id(), request.member_index(),
                   LogValue(request.key().group_name()));
      End(WithRetryAfter(absl::UnavailableError(kChecksBusy),
                         kChecksBusyRetryAfter),
          context_);
      Release();
    }
  }

  void OnCancel() override {
    // Copied first: once the stream ends, OnDone() may delete this.
    Coordinator& coordinator = service_.coordinator_;
    const uint64_t stream_id = stream_id_;
    std::string gang_id;
    uint32_t member_index;
    {
      MutexLock lock(mu_);
      cancelled_ = true;
      gang_id = gang_id_;
      member_index = member_index_;
    }
    EndCancelled();
    if (!gang_id.empty()) coordinator.Detach(gang_id, member_index, stream_id);
  }

  void OnDone() override {
    service_.Unregister(stream_id_, this);
    delete this;
  }

 private:
  // Verifies the member when configured (before any scheduler lock is
  // taken) and joins. A join that lands after the client cancelled is
  // withdrawn here, since OnCancel found no gang to withdraw it from.
  void VerifyAndJoin(const v1::JoinGangRequest& request,
                     const std::string& job_token, const std::string& id_token,
                     const std::string& peer) {
    JoinRequest join = FromProto(request);
    join.executor = executor_;
    absl::Status verified;
    // A made-up instance is refused before any GitLab call.
    if (const std::string& trusted = service_.security_.trusted_instance;
        !trusted.empty()) {
      verified = CheckClaimedInstance(trusted, request.key().instance());
    }
    if (!verified.ok()) {
      service_.coordinator_.observer().JoinRefused("instance");
    } else if (MemberVerifier* verifier = service_.security_.verifier) {
      verified = verifier->Verify(job_token, join, peer);
    } else if (IdTokenMemberVerifier* by_id_token =
                   service_.security_.id_token_verifier) {
      verified = by_id_token->Verify(id_token, join);
    }
    if (!verified.ok()) {
      spdlog::warn("event=member_unverified job={} member={} group={} error={}",
                   request.job_id(), request.member_index(),
                   LogValue(request.key().group_name()),
                   LogValue(verified.ToString()));
      End(verified, context_);
      return;
    }
    if (Ending()) return;  // Cancelled while it was checked.
    absl::StatusOr<std::string> gang_id =
        service_.coordinator_.Join(join, stream_id_);
    if (!gang_id.ok()) {
      spdlog::warn("event=join_rejected job={} member={} group={} error={}",
                   request.job_id(), request.member_index(),
                   LogValue(request.key().group_name()),
                   LogValue(gang_id.status().ToString()));
      End(gang_id.status(), context_);
      return;
    }
    spdlog::info("event=member_joined gang={} member={} job={}",
                 LogValue(*gang_id), request.member_index(), request.job_id());
    // Either OnCancel sees the gang and withdraws the member, or this sees
    // the cancellation and does it; the object lives on until this returns
    // (inline: the handler has not returned; else: Hold()).
    bool cancelled = false;
    {
      MutexLock lock(mu_);
      gang_id_ = *gang_id;
      member_index_ = request.member_index();
      cancelled = cancelled_;
    }
    if (cancelled) {
      service_.coordinator_.Detach(*gang_id, request.member_index(),
                                   stream_id_);
    }
  }

  CoordinatorService& service_;
  grpc::CallbackServerContext& context_;
  const uint64_t stream_id_;
  const bool compact_;
  const std::string executor_;  // rendezvous::kExecutorMetadata; may be "".
  std::string gang_id_ ABSL_GUARDED_BY(mu_);
  uint32_t member_index_ ABSL_GUARDED_BY(mu_) = 0;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

// One WatchGang stream: ends after a Failed or Succeeded event; forgets the
// watch when it is done.
class CoordinatorService::WatchReactor final
    : public EventWriter<v1::WatchGangEvent> {
 public:
  WatchReactor(CoordinatorService& service, uint64_t stream_id)
      : service_(service), stream_id_(stream_id) {}

  // Registers the stream and, when `allowed` (the caller's access, checked
  // by the handler) is OK, opens the watch; on a refusal or rejection ends
  // the stream with the error.
  void Start(const v1::WatchGangRequest& request, absl::Status allowed) {
    service_.Register(stream_id_, this);
    if (!allowed.ok()) {  // Logged by the handler.
      End(rendezvous::ToGrpcStatus(allowed));
      return;
    }
    absl::Status status = service_.coordinator_.Watch(
        request.gang_id(), request.epoch(), request.member_index(),
        request.job_id(), stream_id_);
    if (!status.ok()) {
      spdlog::warn("event=watch_rejected gang={} member={} job={} error={}",
                   LogValue(request.gang_id()), request.member_index(),
                   request.job_id(), LogValue(status.ToString()));
      End(rendezvous::ToGrpcStatus(status));
    }
  }

  void OnCancel() override { EndCancelled(); }

  void OnDone() override {
    service_.Unregister(stream_id_, this);
    service_.coordinator_.Unwatch(stream_id_);
    delete this;
  }

 private:
  CoordinatorService& service_;
  const uint64_t stream_id_;
};

CoordinatorService::CoordinatorService(Coordinator& coordinator,
                                       std::chrono::seconds heartbeat_interval)
    : coordinator_(coordinator), heartbeat_interval_(heartbeat_interval) {
  coordinator_.SetEventSink([this](std::vector<state::MemberEvent> events) {
    Dispatch(std::move(events));
  });
}

CoordinatorService::~CoordinatorService() {
  verifications_.reset();  // Runs what it accepted, joins its threads.
  coordinator_.SetEventSink(nullptr);
}

void CoordinatorService::SetSecurity(ServiceSecurity security) {
  security_ = std::move(security);
  if (security_.verifier != nullptr || security_.id_token_verifier != nullptr) {
    verifications_ = std::make_unique<WorkQueue>(
        security_.verification_threads, security_.max_queued_verifications);
  }
}

absl::Status CoordinatorService::CheckAdmin(
    const grpc::ServerContextBase* context, const char* what) const {
  if (security_.admin_token_sha256.empty()) return absl::OkStatus();
  const std::string value =
      MetadataValue(context, rendezvous::kAuthorizationMetadata);
  constexpr std::string_view kBearer = "Bearer ";
  if (value.size() <= kBearer.size() || value.rfind(kBearer, 0) != 0) {
    return absl::UnauthenticatedError(absl::StrCat(
        what,
        " needs the coordinator's admin token: pass --admin-token-file "
        "or set GDT_ADMIN_TOKEN_FILE"));
  }
  if (!SameSecret(SecretSha256Hex(value.substr(kBearer.size())),
                  security_.admin_token_sha256)) {
    return absl::PermissionDeniedError(
        absl::StrCat(what, " refused: wrong admin token"));
  }
  return absl::OkStatus();
}

absl::Status CoordinatorService::CheckAgentCertificate(
    const grpc::ServerContextBase* context,
    const std::string& host_name) const {
  if (!security_.agent_cert_must_match_host) return absl::OkStatus();
  const std::vector<std::string> names = PeerCertificateNames(context);
  // Exact names only (DNS names ignore case): a wildcard certificate or one
  // shared by every host must not let one host act for another.
  for (const std::string& name : names) {
    if (absl::EqualsIgnoreCase(name, host_name)) return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "agent certificate names ",
      names.empty() ? "nothing"
                    : absl::StrCat("'", absl::StrJoin(names, "', '"), "'"),
      ", not host '", host_name,
      "' (tls.agent_cert_must_match_host: an agent acts only for the host "
      "its certificate names)"));
}

absl::Status CoordinatorService::CheckHost(
    const grpc::ServerContextBase* context, const std::string& host_name) {
  GDT_RETURN_IF_ERROR(CheckAgentCertificate(context, host_name));
  const std::string token =
      MetadataValue(context, rendezvous::kHostTokenMetadata);
  // A token presented is checked even when none is required: an agent with
  // a wrong or revoked token hears so at once instead of having every stage
  // refused later for want of member tokens.
  if (token.empty() && !security_.require_host_tokens) return absl::OkStatus();
  absl::StatusOr<std::string> host = coordinator_.HostOfToken(token);
  if (!host.ok()) return host.status();
  if (*host != host_name) {
    return absl::PermissionDeniedError(
        absl::StrCat("the host token of ", *host, " cannot act for host ",
                     host_name, " (a host acts only for itself)"));
  }
  return absl::OkStatus();
}

absl::Status CoordinatorService::CheckStatusReader(
    const grpc::ServerContextBase* context) const {
  if (security_.admin_token_sha256.empty() ||
      security_.status_without_token == "anyone") {
    return absl::OkStatus();
  }
  if (security_.status_without_token == "loopback" &&
      IsLoopbackPeer(context->peer())) {
    return absl::OkStatus();
  }
  return CheckAdmin(context, "reading status from this address");
}

void CoordinatorService::SetAdvertiseEndpoint(const std::string& endpoint) {
  MutexLock lock(mu_);
  advertise_endpoint_ = endpoint;
}

void CoordinatorService::SetLivenessEndpoint(uint32_t port,
                                             const std::string& endpoint) {
  MutexLock lock(mu_);
  liveness_port_ = port;
  liveness_endpoint_ = endpoint;
}

void CoordinatorService::SetMasterPortRange(uint32_t min, uint32_t max) {
  MutexLock lock(mu_);
  master_port_min_ = min;
  master_port_max_ = max;
}

void CoordinatorService::EndAllStreams(const std::string& why) {
  MutexLock lock(mu_);
  for (auto& [id, reactor] : streams_) {
    reactor->End(grpc::Status(grpc::StatusCode::UNAVAILABLE, why));
  }
  for (auto& [id, reactor] : watches_) {
    reactor->End(grpc::Status(grpc::StatusCode::UNAVAILABLE, why));
  }
}

void CoordinatorService::Register(uint64_t stream_id, JoinReactor* reactor) {
  MutexLock lock(mu_);
  streams_[stream_id] = reactor;
}

void CoordinatorService::Unregister(uint64_t stream_id, JoinReactor* reactor) {
  MutexLock lock(mu_);
  auto it = streams_.find(stream_id);
  if (it != streams_.end() && it->second == reactor) streams_.erase(it);
}

void CoordinatorService::Register(uint64_t stream_id, WatchReactor* reactor) {
  MutexLock lock(mu_);
  watches_[stream_id] = reactor;
}

void CoordinatorService::Unregister(uint64_t stream_id, WatchReactor* reactor) {
  MutexLock lock(mu_);
  auto it = watches_.find(stream_id);
  if (it != watches_.end() && it->second == reactor) watches_.erase(it);
}

void CoordinatorService::DispatchWatch(state::MemberEvent& event) {
  auto it = watches_.find(event.stream_id);
  if (it == watches_.end()) return;  // The stream is gone already.
  v1::WatchGangEvent message;
  switch (event.kind) {
    case state::MemberEvent::Kind::kGangRunning: {
      v1::GangRunningEvent* running = message.mutable_running();
      running->set_members_total(event.progress.members_total);
      for (uint32_t index : event.progress.unfinished_indices) {
        running->add_unfinished_indices(index);
      }
      it->second->Send(std::move(message), /*final=*/false);
      break;
    }
    case state::MemberEvent::Kind::kGangFailed:
      message.mutable_failed()->set_reason(event.reason);
      message.mutable_failed()->set_member_index(event.failed_member);
      message.mutable_failed()->set_job_id(event.failed_job_id);
      message.mutable_failed()->set_collect_evidence(event.collect_evidence);
      message.mutable_failed()->set_preempted(event.preempted);
      it->second->Send(std::move(message), /*final=*/true);
      break;
    case state::MemberEvent::Kind::kGangSucceeded:
      message.mutable_succeeded();
      it->second->Send(std::move(message), /*final=*/true);
      break;
    default:
      break;
  }
}

void CoordinatorService::Dispatch(std::vector<state::MemberEvent> events) {
  MutexLock lock(mu_);
  for (state::MemberEvent& event : events) {
    if (event.kind == state::MemberEvent::Kind::kGangRunning ||
        event.kind == state::MemberEvent::Kind::kGangFailed ||
        event.kind == state::MemberEvent::Kind::kGangSucceeded) {
      DispatchWatch(event);
      continue;
    }
    auto it = streams_.find(event.stream_id);
    if (it == streams_.end()) continue;  // The stream is gone already.
    JoinReactor* reactor = it->second;
    v1::JoinGangEvent message;
    switch (event.kind) {
      case state::MemberEvent::Kind::kWaiting:
        ToProto(event.waiting, message.mutable_waiting());
        reactor->Send(std::move(message), /*final=*/false);
        break;
      case state::MemberEvent::Kind::kAdmitted:
        ToProto(event.assignment, advertise_endpoint_, reactor->compact(),
                message.mutable_admitted()->mutable_assignment());
        reactor->Send(std::move(message), /*final=*/true);
        break;
      case state::MemberEvent::Kind::kAborted:
        message.mutable_aborted()->set_reason(event.reason);
        reactor->Send(std::move(message), /*final=*/true);
        break;
      case state::MemberEvent::Kind::kSuperseded:
        reactor->End(grpc::Status(
            grpc::StatusCode::UNAVAILABLE,
            absl::StrCat("member ", event.member_index, " of gang ",
                         event.gang_id, " joined again on another stream")));
        break;
      default:
        break;
    }
  }
}

absl::Status CoordinatorService::CheckJob(
    const grpc::ServerContextBase* context, int64_t job_id) const {
  if (security_.id_token_verifier != nullptr && security_.verifier == nullptr) {
    return security_.id_token_verifier->VerifyJobId(
        MetadataValue(context, rendezvous::kIdTokenMetadata), job_id);
  }
  if (security_.verifier == nullptr) return absl::OkStatus();
  return security_.verifier->VerifyJobId(
      MetadataValue(context, rendezvous::kJobTokenMetadata), job_id,
      context->peer());
}

absl::Status CoordinatorService::CheckReporter(
    const grpc::ServerContextBase* context,
    const v1::ReportExitRequest& request) {
  const std::string host_token =
      MetadataValue(context, rendezvous::kHostTokenMetadata);
  if (host_token.empty()) return CheckJob(context, request.job_id());
  absl::StatusOr<std::string> host = coordinator_.HostOfToken(host_token);
  if (!host.ok()) return host.status();
  GDT_RETURN_IF_ERROR(CheckAgentCertificate(context, *host));
  if (coordinator_.MemberHost(request.gang_id(), request.member_index()) !=
      *host) {
    return absl::PermissionDeniedError(absl::StrCat(
        "host ", *host, " cannot report about member ", request.member_index(),
        " of gang ", request.gang_id(), ": it does not run there"));
  }
  return absl::OkStatus();
}

absl::Status CoordinatorService::Allow(const grpc::ServerContextBase* context,
                                       std::string_view rpc,
                                       absl::Status allowed) const {
  if (!allowed.ok()) {
    if (std::optional<uint64_t> refused = refusals_.Occur(std::string(rpc))) {
      spdlog::warn("event=rpc_refused rpc={} peer={} error={} refused={}",
                   LogValue(rpc), LogValue(context->peer()),
                   LogValue(allowed.ToString()), *refused);
    }
  }
  return allowed;
}

template <typename Body>
grpc::ServerUnaryReactor* CoordinatorService::MayWaitOnGitLab(
    grpc::CallbackServerContext* context, bool may_wait, Body body) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (verifications_ == nullptr || !may_wait) {
    reactor->Finish(rendezvous::ToGrpcStatus(body()));
    return reactor;
  }
  // The call (request, response, context) lives until Finish.
  if (!verifications_->TrySubmit([reactor, body] {
        reactor->Finish(rendezvous::ToGrpcStatus(body()));
      })) {
    reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, kChecksBusy));
  }
  return reactor;
}

template <typename Body>
grpc::ServerUnaryReactor* CoordinatorService::AsAdmin(
    grpc::CallbackServerContext* context, const char* what, Body body) {
  absl::Status status = Allow(context, what, CheckAdmin(context, what));
  if (status.ok()) status = body();
  return Finish(context, status);
}

grpc::ServerWriteReactor<v1::JoinGangEvent>* CoordinatorService::JoinGang(
    grpc::CallbackServerContext* context, const v1::JoinGangRequest* request) {
  auto* reactor =
      new JoinReactor(*this, *context, next_stream_id_.fetch_add(1),
                      request->compact_assignment(),
                      MetadataValue(context, rendezvous::kExecutorMetadata));
  reactor->Start(
      *request, MetadataValue(context, rendezvous::kJobTokenMetadata),
      MetadataValue(context, rendezvous::kIdTokenMetadata), context->peer());
  return reactor;
}

grpc::ServerWriteReactor<v1::WatchGangEvent>* CoordinatorService::WatchGang(
    grpc::CallbackServerContext* context, const v1::WatchGangRequest* request) {
  auto* reactor = new WatchReactor(*this, next_stream_id_.fetch_add(1));
  if (verifications_ == nullptr) {
    reactor->Start(*request, Allow(context, "WatchGang",
                                   CheckJob(context, request->job_id())));
    return reactor;
  }
  // The job-token check may wait on GitLab: not on gRPC's threads. The
  // request and context live until the stream is done, which Hold() defers.
  reactor->Hold();
  if (!verifications_->TrySubmit([this, context, request, reactor] {
        reactor->Start(*request, Allow(context, "WatchGang",
                                       CheckJob(context, request->job_id())));
        reactor->Release();
      })) {
    reactor->Start(*request, absl::UnavailableError(kChecksBusy));
    reactor->Release();
  }
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorService::RegisterHost(
    grpc::CallbackServerContext* context,
    const v1::RegisterHostRequest* request,
    v1::RegisterHostResponse* response) {
  absl::Status status = Allow(context, "RegisterHost",
                              CheckHost(context, request->host().name()));
  if (!status.ok()) return Finish(context, status);
  status = coordinator_.RegisterHost(FromProto(request->host()));
  if (!status.ok()) {
    spdlog::warn("event=register_rejected host={} error={}",
                 LogValue(request->host().name()), LogValue(status.ToString()));
  } else {
    spdlog::info("event=host_registered host={} gpus={} agent={}",
                 LogValue(request->host().name()), request->host().gpus_size(),
                 LogValue(request->host().agent_endpoint()));
    response->set_heartbeat_interval_seconds(
        static_cast<uint32_t>(heartbeat_interval_.count()));
    MutexLock lock(mu_);
    response->set_liveness_port(liveness_port_);
    response->set_liveness_endpoint(liveness_endpoint_);
    response->set_master_port_min(master_port_min_);
    response->set_master_port_max(master_port_max_);
  }
  return Finish(context, status);
}

grpc::ServerUnaryReactor* CoordinatorService::Heartbeat(
    grpc::CallbackServerContext* context, const v1::HeartbeatRequest* request,
    v1::HeartbeatResponse* response) {
  return Finish(context, HandleHeartbeat(context, *request, *response));
}

absl::Status CoordinatorService::HandleHeartbeat(
    const grpc::ServerContextBase* context, const v1::HeartbeatRequest& request,
    v1::HeartbeatResponse& response) {
  const absl::Status allowed =
      Allow(context, "Heartbeat", CheckHost(context, request.host_name()));
  if (allowed.ok()) {
    std::optional<std::set<std::string>> running;
    if (request.reports_running_members()) {
      running.emplace(request.running_members().begin(),
                      request.running_members().end());
    }
    std::map<std::string, MemberProgress> progress;
    for (const v1::MemberProgress& member : request.progress()) {
      MemberProgress& entry = progress[member.member()];
      entry.last_unix_ms = member.last_progress_unix_ms();
      if (member.has_step()) entry.step = member.step();
    }
    const std::vector<std::string> idle(request.idle_members().begin(),
                                        request.idle_members().end());
    std::vector<std::string> left;
    response.set_reregister(!coordinator_.Heartbeat(
        request.host_name(), std::move(running), std::move(progress), idle,
        &left, request.not_ready_reason()));
    for (std::string& id : left) response.add_members_left(std::move(id));
  }
  return allowed;
}

grpc::ServerUnaryReactor* CoordinatorService::CheckMemberToken(
    grpc::CallbackServerContext* context,
    const v1::CheckMemberTokenRequest* request,
    v1::CheckMemberTokenResponse* response) {
  // Only an agent may ask, and only about its own host: the answer is
  // whether a token is good for the host whose token the caller holds.
  absl::StatusOr<std::string> host = coordinator_.HostOfToken(
      MetadataValue(context, rendezvous::kHostTokenMetadata));
  absl::Status status = host.status();
  if (status.ok()) status = CheckAgentCertificate(context, *host);
  status = Allow(context, "CheckMemberToken", status);
  if (!status.ok()) return Finish(context, status);
  absl::StatusOr<MemberClaims> claims =
      coordinator_.CheckMemberToken(request->member_token(), *host);
  if (!claims.ok()) {
    spdlog::warn("event=member_token_refused host={} error={}", LogValue(*host),
                 LogValue(claims.status().ToString()));
    return Finish(context, claims.status());
  }
  response->set_gang_id(claims->gang_id);
  response->set_epoch(claims->epoch);
  response->set_job_id(claims->job_id);
  response->set_expires_unix_ms(claims->expires_unix_ms);
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* CoordinatorService::ReportExit(
    grpc::CallbackServerContext* context, const v1::ReportExitRequest* request,
    v1::ReportExitResponse* response) {
  // An executor's report is checked with GitLab (its job token); an
  // agent's by its host token, at once.
  const bool may_wait =
      MetadataValue(context, rendezvous::kHostTokenMetadata).empty();
  return MayWaitOnGitLab(context, may_wait, [this, context, request] {
    absl::Status status =
        Allow(context, "ReportExit", CheckReporter(context, *request));
    if (!status.ok()) return status;
    if (request->hung_seconds() > 0) {
      MemberProgress progress;
      progress.last_unix_ms = request->last_progress_unix_ms();
      if (request->has_progress_step()) {
        progress.step = request->progress_step();
      }
      status = coordinator_.MemberHung(
          request->gang_id(), request->epoch(), request->member_index(),
          request->job_id(), request->hung_seconds(), std::move(progress));
      spdlog::log(status.ok() ? spdlog::level::info : spdlog::level::warn,
                  "member hung gang={} member={} seconds={} ({})",
                  request->gang_id(), request->member_index(),
                  request->hung_seconds(), status.ToString());
      return status;
    }
    if (!request->lost_reason().empty()) {
      status = coordinator_.MemberLost(
          request->gang_id(), request->epoch(), request->member_index(),
          request->job_id(), request->lost_reason());
      spdlog::log(status.ok() ? spdlog::level::info : spdlog::level::warn,
                  "member lost gang={} member={}: {} ({})", request->gang_id(),
                  request->member_index(), request->lost_reason(),
                  status.ToString());
      return status;
    }
    status = coordinator_.ReportExit(
        request->gang_id(), request->epoch(), request->member_index(),
        request->job_id(), request->exit_code(), request->cancelled(),
        request->peer_suspected(), request->exited_unix_ms());
    if (status.ok()) {
      spdlog::info("event=member_exited gang={} member={} code={} cancelled={}",
                   LogValue(request->gang_id()), request->member_index(),
                   request->exit_code(), request->cancelled());
    } else if (absl::IsUnavailable(status)) {
      // Not stored (the store logs why, once a minute); the reporter retries.
      spdlog::debug("event=exit_report_deferred gang={} member={} error={}",
                    LogValue(request->gang_id()), request->member_index(),
                    LogValue(status.ToString()));
    } else {
      spdlog::warn("event=exit_report_rejected gang={} member={} error={}",
                   LogValue(request->gang_id()), request->member_index(),
                   LogValue(status.ToString()));
    }
    return status;
  });
}

grpc::ServerUnaryReactor* CoordinatorService::LeaveGang(
    grpc::CallbackServerContext* context, const v1::LeaveGangRequest* request,
    v1::LeaveGangResponse* response) {
  // Only the job itself, when members are verified.
  return MayWaitOnGitLab(context, true, [this, context, request] {
    absl::Status status =
        Allow(context, "LeaveGang", CheckJob(context, request->job_id()));
    if (!status.ok()) return status;
    status = coordinator_.Leave(
        FromProto(request->key()), request->member_index(), request->job_id(),
        MetadataValue(context, rendezvous::kExecutorMetadata));
    if (!status.ok()) {
      spdlog::error("event=leave_failed group={} member={} error={}",
                    LogValue(request->key().group_name()),
                    request->member_index(), LogValue(status.ToString()));
    }
    return status;
  });
}

grpc::ServerUnaryReactor* CoordinatorService::GetPeers(
    grpc::CallbackServerContext* context, const v1::GetPeersRequest* request,
    v1::GetPeersResponse* response) {
  // Only the job itself, when members are verified.
  absl::Status status =
      Allow(context, "GetPeers", CheckJob(context, request->job_id()));
  if (!status.ok()) return Finish(context, status);
  absl::StatusOr<std::shared_ptr<const state::PeerList>> peers =
      coordinator_.Peers(request->gang_id(), request->epoch(),
                         request->member_index(), request->job_id());
  if (!peers.ok()) {
    spdlog::warn("event=peers_refused gang={} member={} job={} error={}",
                 LogValue(request->gang_id()), request->member_index(),
                 request->job_id(), LogValue(peers.status().ToString()));
    return Finish(context, peers.status());
  }
  response->mutable_peers()->Reserve(
      static_cast<int>((*peers)->addresses.size()));
  for (const std::string& peer : (*peers)->addresses) response->add_peers(peer);
  response->set_peers_sha256((*peers)->sha256);
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* CoordinatorService::RefuseMember(
    grpc::CallbackServerContext* context,
    const v1::RefuseMemberRequest* request,
    v1::RefuseMemberResponse* response) {
  // Only the job itself, verified as its join would be: it may fail only
  // its own gang.
  const JoinRequest member = FromProto(request->member());
  absl::Status verified;
  if (MemberVerifier* verifier = security_.verifier) {
    verified =
        verifier->Verify(MetadataValue(context, rendezvous::kJobTokenMetadata),
                         member, context->peer());
  } else if (IdTokenMemberVerifier* by_id_token = security_.id_token_verifier) {
    verified = by_id_token->Verify(
        MetadataValue(context, rendezvous::kIdTokenMetadata), member);
  }
  absl::Status status = Allow(context, "RefuseMember", verified);
  if (!status.ok()) return Finish(context, status);
  absl::StatusOr<std::string> root_cause = coordinator_.RefuseMember(
      member.key, member.member_index, member.job_id, request->reason());
  if (!root_cause.ok()) {
    spdlog::warn("event=refusal_rejected group={} member={} job={} error={}",
                 LogValue(member.key.group_name), member.member_index,
                 member.job_id, LogValue(root_cause.status().ToString()));
    return Finish(context, root_cause.status());
  }
  response->set_root_cause(*root_cause);
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* CoordinatorService::GetStatus(
    grpc::CallbackServerContext* context, const v1::GetStatusRequest* request,
    v1::GetStatusResponse* response) {
  const absl::Status allowed =
      Allow(context, "GetStatus", CheckStatusReader(context));
  if (!allowed.ok()) return Finish(context, allowed);
  absl::StatusOr<v1::GetStatusResponse> page =
      StatusPage(*coordinator_.SharedSnapshot(request->include_finished()),
                 request->page_size(), request->page_token());
  if (!page.ok()) return Finish(context, page.status());
  *response = *std::move(page);
  return Finish(context, absl::OkStatus());
}

// Operator RPCs: the admin token, then the change.

grpc::ServerUnaryReactor* CoordinatorService::SetHostDrained(
    grpc::CallbackServerContext* context,
    const v1::SetHostDrainedRequest* request,
    v1::SetHostDrainedResponse* response) {
  return AsAdmin(context,
                 request->drained() ? "draining a host" : "undraining a host",
                 [&] {
                   return coordinator_.SetDrained(request->host_name(),
                                                  request->drained());
                 });
}

grpc::ServerUnaryReactor* CoordinatorService::RemoveHost(
    grpc::CallbackServerContext* context, const v1::RemoveHostRequest* request,
    v1::RemoveHostResponse* response) {
  return AsAdmin(context, "removing a host",
                 [&] { return coordinator_.RemoveHost(request->host_name()); });
}

grpc::ServerUnaryReactor* CoordinatorService::CancelGang(
    grpc::CallbackServerContext* context, const v1::CancelGangRequest* request,
    v1::CancelGangResponse* response) {
  return AsAdmin(context, "cancelling a gang", [&]() -> absl::Status {
    GDT_RETURN_IF_ERROR(rendezvous::CheckCancelReason(request->reason()));
    absl::StatusOr<std::string> root_cause =
        request->force()
            ? coordinator_.ForceCancel(request->gang_id(), request->reason())
            : coordinator_.Cancel(request->gang_id(), request->reason());
    if (!root_cause.ok()) {
      spdlog::warn("event=cancel_rejected gang={} error={}",
                   LogValue(request->gang_id()),
                   LogValue(root_cause.status().ToString()));
      return root_cause.status();
    }
    spdlog::info("event=gang_cancelled_by_operator gang={} force={}",
                 LogValue(request->gang_id()), request->force());
    response->set_root_cause(*root_cause);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* CoordinatorService::CancelFormingGangs(
    grpc::CallbackServerContext* context,
    const v1::CancelFormingGangsRequest* request,
    v1::CancelFormingGangsResponse* response) {
  return AsAdmin(context, "cancelling forming gangs", [&]() -> absl::Status {
    GDT_RETURN_IF_ERROR(rendezvous::CheckCancelReason(request->reason()));
    absl::StatusOr<std::vector<std::string>> cancelled =
        coordinator_.CancelForming(request->project_id(),
                                   request->pipeline_id(), request->reason());
    if (!cancelled.ok()) {
      spdlog::error("event=forming_gangs_cancel_failed error={}",
                    LogValue(cancelled.status().ToString()));
      return cancelled.status();
    }
    // One audit line for the whole removal, however many gangs it ended.
    spdlog::info(
        "event=forming_gangs_cancelled_by_operator project={} pipeline={} "
        "cancelled={} reason={}",
        request->project_id(), request->pipeline_id(), cancelled->size(),
        LogValue(request->reason()));
    response->set_cancelled(static_cast<uint32_t>(cancelled->size()));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* CoordinatorService::CollectGangs(
    grpc::CallbackServerContext* context,
    const v1::CollectGangsRequest* /*request*/,
    v1::CollectGangsResponse* response) {
  return AsAdmin(context, "collecting abandoned gangs", [&] {
    for (const std::string& id : coordinator_.EndAbandonedFormingGangs()) {
      response->add_ended_gang_ids(id);
    }
    spdlog::info("event=gangs_collected_by_operator ended={}",
                 response->ended_gang_ids_size());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* CoordinatorService::CreateHostToken(
    grpc::CallbackServerContext* context,
    const v1::CreateHostTokenRequest* request,
    v1::CreateHostTokenResponse* response) {
  return AsAdmin(context, "creating a host token", [&]() -> absl::Status {
    GDT_RETURN_IF_ERROR(rendezvous::CheckHostTokenName(request->host_name()));
    absl::StatusOr<std::string> token =
        coordinator_.CreateHostToken(request->host_name());
    if (!token.ok()) return token.status();
    response->set_token(*token);
    spdlog::info("event=host_token_created host={}",
                 LogValue(request->host_name()));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* CoordinatorService::ListHostTokens(
    grpc::CallbackServerContext* context,
    const v1::ListHostTokensRequest* request,
    v1::ListHostTokensResponse* response) {
  return AsAdmin(context, "listing host tokens", [&] {
    for (const state::HostTokenRecord& record : coordinator_.ListHostTokens()) {
      v1::HostTokenInfo* info = response->add_tokens();
      info->set_host_name(record.host_name);
      info->set_created_unix_ms(record.created_unix_ms);
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* CoordinatorService::RevokeHostToken(
    grpc::CallbackServerContext* context,
    const v1::RevokeHostTokenRequest* request,
    v1::RevokeHostTokenResponse* response) {
  return AsAdmin(context, "revoking a host token", [&]() -> absl::Status {
    GDT_RETURN_IF_ERROR(coordinator_.RevokeHostToken(request->host_name()));
    spdlog::info("event=host_token_revoked host={}",
                 LogValue(request->host_name()));
    return absl::OkStatus();
  });
}

absl::StatusOr<v1::GetStatusResponse> StatusPage(
    const Snapshot& snapshot, uint32_t page_size,
    const std::string& page_token) {
  absl::StatusOr<std::pair<size_t, size_t>> start =
      PageStart(snapshot, page_token);
  if (!start.ok()) return start.status();
  const uint32_t max_items = page_size == 0 || page_size > kStatusPageItems
                                 ? kStatusPageItems
                                 : page_size;
  v1::GetStatusResponse page;
  uint32_t items = 0;
  size_t bytes = 0;
  // Takes an item of `size` bytes unless the page is full; a page holds at
  // least one item, however large.
  const auto fits = [&](size_t size) {
    if (items > 0 && (items >= max_items || bytes + size > kStatusPageBytes)) {
      return false;
    }
    ++items;
    bytes += size + 8;  // The field's tag and length.
    return true;
  };
  size_t host = start->first;
  for (; host < snapshot.hosts.size(); ++host) {
    v1::HostStatus* out = page.add_hosts();
    ToProto(snapshot.hosts[host], out);
    if (!fits(out->ByteSizeLong())) {
      page.mutable_hosts()->RemoveLast();
      page.set_next_page_token(
          absl::StrCat("h:", snapshot.hosts[host - 1].host.spec.name));
      return page;
    }
  }
  for (size_t gang = start->second; gang < snapshot.gangs.size(); ++gang) {
    v1::GangStatus* out = page.add_gangs();
    ToProto(snapshot.gangs[gang], out);
    if (fits(out->ByteSizeLong())) continue;
    page.mutable_gangs()->RemoveLast();
    if (gang == start->second) {
      // Every host of the page but no gang: go on with the gangs.
      page.set_next_page_token(
          absl::StrCat("h:", snapshot.hosts.back().host.spec.name));
    } else {
      const state::Gang& last = snapshot.gangs[gang - 1];
      page.set_next_page_token(absl::StrCat(
          gang - 1 < snapshot.live_gangs ? "l:" : "f:", last.sequence));
    }
    return page;
  }
  return page;
}

v1::GetStatusResponse StatusResponseOf(const Snapshot& snapshot) {
  v1::GetStatusResponse response;
  ToProto(snapshot, &response);
  return response;
}

}  // namespace gdt::coordinator
