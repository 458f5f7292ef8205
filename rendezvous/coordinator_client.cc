#include "rendezvous/coordinator_client.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <optional>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/backoff.h"
#include "common/clock.h"
#include "common/host_port.h"
#include "common/retry_after.h"
#include "grpcpp/grpcpp.h"
#include "rendezvous/channel.h"
#include "rendezvous/grpc_status.h"

namespace gdt::rendezvous {
namespace {

// Between attempts of a gang stream (JoinGang, WatchGang) while the
// coordinator is unreachable: short, since a restarted coordinator is back
// within seconds, and jittered, since a whole gang loses it at once.
constexpr Backoff::Options kStreamBackoff{std::chrono::milliseconds(200),
                                          std::chrono::milliseconds(2000),
                                          Backoff::Jitter::kDecorrelated};

// Added to a refusal's retry hint (rendezvous/metadata.h) before the join
// asks again: full jitter growing with each refusal in a row, so that the
// members a limit refused together do not all come back in the same
// instant, and a long wait thins out to one attempt every few seconds.
constexpr Backoff::Options kRefusalJitter{std::chrono::milliseconds(500),
                                          std::chrono::milliseconds(8000),
                                          Backoff::Jitter::kFull};

// Codes that mean "try again": the coordinator is down, restarting, or the
// connection broke.
bool IsTransient(const absl::Status& status) {
  // A certificate problem does not go away by retrying.
  if (IsTlsHandshakeFailure(status)) return false;
  return status.code() == absl::StatusCode::kUnavailable ||
         status.code() == absl::StatusCode::kUnknown ||
         status.code() == absl::StatusCode::kInternal ||
         status.code() == absl::StatusCode::kCancelled;
}

}  // namespace

void CallCanceller::Cancel() {
  MutexLock lock(mu_);
  cancelled_ = true;
  if (context_ != nullptr) context_->TryCancel();
  cv_.NotifyAll();
}

bool CallCanceller::cancelled() {
  MutexLock lock(mu_);
  return cancelled_;
}

bool CallCanceller::Attach(grpc::ClientContext* context) {
  MutexLock lock(mu_);
  if (cancelled_) return false;
  context_ = context;
  return true;
}

void CallCanceller::Detach() {
  MutexLock lock(mu_);
  context_ = nullptr;
}

bool CallCanceller::SleepUntil(std::chrono::system_clock::time_point deadline) {
  MutexLock lock(mu_);
  while (!cancelled_ && std::chrono::system_clock::now() < deadline) {
    cv_.WaitUntil(mu_, deadline);
  }
  return !cancelled_;
}

// HA.

std::string LeaderFromMessage(absl::string_view message) {
  const size_t at = message.find(kLeaderIsAt);
  if (at == absl::string_view::npos) return "";
  absl::string_view rest = message.substr(at + std::strlen(kLeaderIsAt));
  const size_t end = rest.find_first_of(" ;,)\n");
  return std::string(rest.substr(0, end));
}

absl::Status CheckCoordinatorAddress(const std::string& endpoints) {
  bool any = false;
  for (absl::string_view part : absl::StrSplit(endpoints, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (part.empty()) continue;
    any = true;
    absl::StatusOr<HostPort> parsed =
        ParseHostPort(std::string_view(part.data(), part.size()));
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("coordinator address ", parsed.status().message()));
    }
    if (parsed->port == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "coordinator address '", part, "' has port 0, which no server has"));
    }
  }
  if (!any) return absl::InvalidArgumentError("no coordinator address given");
  return absl::OkStatus();
}

CoordinatorClient::CoordinatorClient(const std::string& endpoint)
    : CoordinatorClient(endpoint, ClientSecurity()) {}

CoordinatorClient::CoordinatorClient(const std::string& endpoint,
                                     const ClientSecurity& security)
    : endpoint_(endpoint), security_(security) {
  for (absl::string_view part : absl::StrSplit(endpoint, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (!part.empty()) endpoints_.emplace_back(part);
  }
  if (endpoints_.empty()) endpoints_.push_back(endpoint);
  current_ = endpoints_.front();
}

std::pair<v1::Coordinator::Stub*, std::string> CoordinatorClient::Current() {
  MutexLock lock(mu_);
  std::unique_ptr<v1::Coordinator::Stub>& stub = stubs_[current_];
  if (stub == nullptr) {
    std::shared_ptr<grpc::Channel> channel = NewChannel(current_, security_);
    channels_[current_] = channel;
    stub = v1::Coordinator::NewStub(channel);
  }
  return {stub.get(), current_};
}

bool CoordinatorClient::Failover(const std::string& used,
                                 const absl::Status& status) {
  if (status.code() != absl::StatusCode::kUnavailable) return false;
  const std::string leader = LeaderFromMessage(status.message());
  MutexLock lock(mu_);
  if (current_ != used) return true;  // Another call moved on already.
  if (!leader.empty() && leader != used) {
    current_ = leader;
    return true;
  }
  if (endpoints_.size() < 2) return false;
  auto it = std::find(endpoints_.begin(), endpoints_.end(), used);
  current_ = (it == endpoints_.end() || std::next(it) == endpoints_.end())
                 ? endpoints_.front()
                 : *std::next(it);
  return true;
}

std::string CoordinatorClient::current_endpoint() {
  MutexLock lock(mu_);
  return current_;
}

absl::Status CoordinatorClient::AwaitConnection(
    const std::string& used, std::chrono::system_clock::time_point by) {
  std::shared_ptr<grpc::Channel> channel;
  {
    MutexLock lock(mu_);
    auto it = channels_.find(used);
    if (it == channels_.end()) return absl::OkStatus();
    channel = it->second;
  }
  grpc_connectivity_state state = channel->GetState(/*try_to_connect=*/true);
  while (state != GRPC_CHANNEL_READY) {
    if (state == GRPC_CHANNEL_TRANSIENT_FAILURE ||
        state == GRPC_CHANNEL_SHUTDOWN) {
      return absl::OkStatus();
    }
    if (!channel->WaitForStateChange(state, by)) {
      return absl::UnavailableError(
          absl::StrCat("no connection to ", used,
                       " within its share of the "
                       "call's deadline; trying the next coordinator"));
    }
    state = channel->GetState(/*try_to_connect=*/true);
  }
  return absl::OkStatus();
}

template <typename Rpc>
absl::Status CoordinatorClient::Unary(std::chrono::milliseconds timeout,
                                      Rpc rpc) {
  const auto deadline = DeadlineIn(timeout);
  absl::Status status;
  // Each endpoint once, plus a redirect to a leader not in the list.
  for (size_t attempt = 0; attempt <= endpoints_.size(); ++attempt) {
    auto [stub, used] = Current();
    if (endpoints_.size() > 1 && attempt + 1 < endpoints_.size()) {
      // A silent endpoint (a replica's host that is off or cut off: no
      // refusal, no answer) would hold the call until its deadline; each
      // endpoint not yet tried gets an equal share for connecting instead.
      const auto now = std::chrono::system_clock::now();
      const auto share = (deadline - now) / (endpoints_.size() - attempt);
      status = AwaitConnection(used, now + share);
      if (!status.ok()) {
        if (!Failover(used, status)) return status;
        continue;
      }
    }
    grpc::ClientContext context;
    context.set_deadline(deadline);
    AddMetadataTo(context);
    status = Convert(rpc(*stub, &context), used);
    if (!Failover(used, status)) return status;
    if (std::chrono::system_clock::now() >= deadline) return status;
  }
  return status;
}

template <typename Request, typename Response>
absl::StatusOr<Response> CoordinatorClient::Call(
    std::chrono::milliseconds timeout,
    grpc::Status (v1::Coordinator::Stub::*method)(grpc::ClientContext*,
                                                  const Request&, Response*),
    const Request& request) {
  Response response;
  absl::Status status = Unary(
      timeout, [&](v1::Coordinator::Stub& stub, grpc::ClientContext* context) {
        return (stub.*method)(context, request, &response);
      });
  if (!status.ok()) return status;
  return response;
}

void CoordinatorClient::AddMetadata(std::string key, std::string value) {
  metadata_.emplace_back(std::move(key), std::move(value));
}

absl::Status CoordinatorClient::Convert(const grpc::Status& status,
                                        const std::string& used) const {
  return ExplainConnectFailure(FromGrpcStatus(status), "coordinator", used,
                               security_);
}

void CoordinatorClient::AddMetadataTo(grpc::ClientContext& context) const {
  for (const auto& [key, value] : metadata_) context.AddMetadata(key, value);
}

absl::StatusOr<uint32_t> CoordinatorClient::RegisterHost(
    const v1::HostSpec& host, std::chrono::milliseconds timeout) {
  v1::RegisterHostRequest request;
  *request.mutable_host() = host;
  absl::StatusOr<v1::RegisterHostResponse> response =
      Call(timeout, &v1::Coordinator::Stub::RegisterHost, request);
  if (!response.ok()) return response.status();
  std::string liveness = response->liveness_endpoint();
  if (liveness.empty() && response->liveness_port() != 0) {
    absl::StatusOr<HostPort> main = ParseHostPort(current_endpoint());
    if (main.ok()) {
      liveness =
          JoinHostPort(main->host, static_cast<int>(response->liveness_port()));
    }
  }
  MutexLock lock(mu_);
  liveness_ = std::move(liveness);
  master_ports_ = {response->master_port_min(), response->master_port_max()};
  return response->heartbeat_interval_seconds();
}

std::pair<uint32_t, uint32_t> CoordinatorClient::master_port_range() {
  MutexLock lock(mu_);
  return master_ports_;
}

std::string CoordinatorClient::liveness_endpoint() {
  MutexLock lock(mu_);
  return liveness_;
}

absl::StatusOr<bool> CoordinatorClient::Heartbeat(
    const std::string& host_name, std::chrono::milliseconds timeout,
    const std::optional<std::vector<std::string>>& running_members,
    const std::vector<v1::MemberProgress>& progress,
    const std::vector<std::string>& idle_members,
    std::vector<std::string>* members_left,
    const std::string& not_ready_reason) {
  if (members_left != nullptr) members_left->clear();
  auto take_left = [members_left](const v1::HeartbeatResponse& answer) {
    if (members_left == nullptr) return;
    members_left->assign(answer.members_left().begin(),
                         answer.members_left().end());
  };
  v1::HeartbeatRequest request;
  request.set_host_name(host_name);
  request.set_not_ready_reason(not_ready_reason);
  for (const std::string& id : idle_members) request.add_idle_members(id);
  for (const v1::MemberProgress& member : progress) {
    *request.add_progress() = member;
  }
  if (running_members.has_value()) {
    request.set_reports_running_members(true);
    for (const std::string& id : *running_members) {
      request.add_running_members(id);
    }
  }
  v1::HeartbeatResponse response;
  const std::string liveness = liveness_endpoint();
  if (!liveness.empty()) {
    v1::Coordinator::Stub* stub = nullptr;
    {
      MutexLock lock(mu_);
      std::unique_ptr<v1::Coordinator::Stub>& slot = stubs_[liveness];
      if (slot == nullptr) {
        slot = v1::Coordinator::NewStub(NewChannel(liveness, security_));
      }
      stub = slot.get();
    }
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(timeout / 2));
    AddMetadataTo(context);
    absl::Status status =
        Convert(stub->Heartbeat(&context, request, &response), liveness);
    if (status.code() != absl::StatusCode::kUnavailable &&
        status.code() != absl::StatusCode::kDeadlineExceeded &&
        status.code() != absl::StatusCode::kUnimplemented) {
      if (!status.ok()) return status;
      take_left(response);
      return response.reregister();
    }
    MutexLock lock(mu_);
    if (liveness_ == liveness) liveness_.clear();
    timeout -= timeout / 2;
  }
  absl::StatusOr<v1::HeartbeatResponse> fallback =
      Call(timeout, &v1::Coordinator::Stub::Heartbeat, request);
  if (!fallback.ok()) return fallback.status();
  take_left(*fallback);
  return fallback->reregister();
}

absl::StatusOr<v1::CheckMemberTokenResponse>
CoordinatorClient::CheckMemberToken(const std::string& token,
                                    std::chrono::milliseconds timeout) {
  v1::CheckMemberTokenRequest request;
  request.set_member_token(token);
  return Call(timeout, &v1::Coordinator::Stub::CheckMemberToken, request);
}

absl::StatusOr<v1::Assignment> CoordinatorClient::JoinGang(
    const v1::JoinGangRequest& request, Deadline deadline,
    const std::function<void(const v1::WaitingEvent&)>& on_waiting,
    const std::function<void(const absl::Status&)>& on_reconnect) {
  Backoff backoff(kStreamBackoff);
  Backoff refusal_jitter(kRefusalJitter);
  while (true) {
    grpc::ClientContext context;
    context.set_deadline(deadline);
    auto [stub, used] = Current();
    AddMetadataTo(context);
    std::unique_ptr<grpc::ClientReader<v1::JoinGangEvent>> reader =
        stub->JoinGang(&context, request);
    v1::JoinGangEvent event;
    bool got_event = false;
    while (reader->Read(&event)) {
      got_event = true;
      switch (event.event_case()) {
        case v1::JoinGangEvent::kWaiting:
          if (on_waiting) on_waiting(event.waiting());
          break;
        case v1::JoinGangEvent::kAdmitted:
          context.TryCancel();
          reader->Finish().ok();
          return event.admitted().assignment();
        case v1::JoinGangEvent::kAborted:
          context.TryCancel();
          reader->Finish().ok();
          return absl::AbortedError(event.aborted().reason());
        default:
          break;
      }
    }
    absl::Status status =
        WithRetryAfterTrailer(Convert(reader->Finish(), used), context);
    if (status.ok()) {
      status =
          absl::UnavailableError("coordinator ended the join stream early");
    }
    const auto last_error = [](const absl::Status& last) {
      return absl::DeadlineExceededError(absl::StrCat(
          "gang did not form before the deadline (last: ", last.message(),
          ")"));
    };
    if (std::chrono::system_clock::now() >= deadline ||
        status.code() == absl::StatusCode::kDeadlineExceeded) {
      return last_error(status);
    }
    const std::optional<std::chrono::milliseconds> hint = RetryAfter(status);
    if (!hint.has_value() && !IsTransient(status)) return status;
    std::chrono::milliseconds delay;
    if (hint.has_value()) {
      // The coordinator answered and refused for now: wait as told, then
      // ask it again (no failover).
      if (got_event) refusal_jitter.Reset();
      delay = *hint + refusal_jitter.Next();
      status = WithRetryAfter(std::move(status), delay);
    } else {
      refusal_jitter.Reset();
      if (Failover(used, status) || got_event) backoff.Reset();
      delay = backoff.Next();
    }
    if (on_reconnect) on_reconnect(status);
    const auto wake =
        std::chrono::system_clock::now() +
        std::chrono::duration_cast<std::chrono::system_clock::duration>(delay);
    if (wake >= deadline) {
      // No attempt would be left: the deadline's error names this one.
      std::this_thread::sleep_until(deadline);
      return last_error(status);
    }
    std::this_thread::sleep_until(wake);
  }
}

absl::Status CoordinatorClient::ReportExit(const v1::ReportExitRequest& request,
                                           std::chrono::milliseconds timeout) {
  return Call(timeout, &v1::Coordinator::Stub::ReportExit, request).status();
}

absl::StatusOr<v1::WatchGangEvent> CoordinatorClient::WatchGang(
    const v1::WatchGangRequest& request, Deadline deadline,
    const std::function<void(const v1::WatchGangEvent&)>& on_event,
    const std::function<void(const absl::Status&)>& on_reconnect,
    CallCanceller& canceller) {
  const absl::Status cancelled = absl::CancelledError("gang watch cancelled");
  Backoff backoff(kStreamBackoff);
  while (true) {
    grpc::ClientContext context;
    context.set_deadline(deadline);
    AddMetadataTo(context);
    if (!canceller.Attach(&context)) return cancelled;
    auto [stub, used] = Current();
    std::unique_ptr<grpc::ClientReader<v1::WatchGangEvent>> reader =
        stub->WatchGang(&context, request);
    v1::WatchGangEvent event;
    bool got_event = false;
    std::optional<v1::WatchGangEvent> final_event;
    while (!final_event.has_value() && reader->Read(&event)) {
      got_event = true;
      if (on_event) on_event(event);
      if (event.has_failed() || event.has_succeeded()) final_event = event;
    }
    if (final_event.has_value()) context.TryCancel();
    absl::Status status = Convert(reader->Finish(), used);
    canceller.Detach();
    if (final_event.has_value()) return *final_event;
    if (canceller.cancelled()) return cancelled;
    if (status.ok()) {
      status = absl::UnavailableError("coordinator ended the watch early");
    }
    if (std::chrono::system_clock::now() >= deadline ||
        status.code() == absl::StatusCode::kDeadlineExceeded) {
      return absl::DeadlineExceededError(absl::StrCat(
          "gang watch reached its deadline (last: ", status.message(), ")"));
    }
    if (!IsTransient(status)) return status;
    const bool moved = Failover(used, status);
    if (on_reconnect) on_reconnect(status);
    if (moved || got_event) backoff.Reset();
    const auto wake = std::min(
        deadline,
        std::chrono::system_clock::now() +
            std::chrono::duration_cast<std::chrono::system_clock::duration>(
                backoff.Next()));
    if (!canceller.SleepUntil(wake)) return cancelled;
  }
}

absl::StatusOr<std::string> CoordinatorClient::RefuseMember(
    const v1::RefuseMemberRequest& request, std::chrono::milliseconds timeout) {
  absl::StatusOr<v1::RefuseMemberResponse> response =
      Call(timeout, &v1::Coordinator::Stub::RefuseMember, request);
  if (!response.ok()) return response.status();
  return response->root_cause();
}

absl::Status CoordinatorClient::LeaveGang(const v1::LeaveGangRequest& request,
                                          std::chrono::milliseconds timeout) {
  return Call(timeout, &v1::Coordinator::Stub::LeaveGang, request).status();
}

absl::StatusOr<v1::GetPeersResponse> CoordinatorClient::GetPeers(
    const v1::GetPeersRequest& request, std::chrono::milliseconds timeout) {
  return Call(timeout, &v1::Coordinator::Stub::GetPeers, request);
}

absl::StatusOr<v1::GetStatusResponse> CoordinatorClient::GetStatus(
    const v1::GetStatusRequest& request, std::chrono::milliseconds timeout) {
  return Call(timeout, &v1::Coordinator::Stub::GetStatus, request);
}

absl::Status CoordinatorClient::SetHostDrained(
    const std::string& host_name, bool drained,
    std::chrono::milliseconds timeout) {
  v1::SetHostDrainedRequest request;
  request.set_host_name(host_name);
  request.set_drained(drained);
  return Call(timeout, &v1::Coordinator::Stub::SetHostDrained, request)
      .status();
}

absl::Status CoordinatorClient::RemoveHost(const std::string& host_name,
                                           std::chrono::milliseconds timeout) {
  v1::RemoveHostRequest request;
  request.set_host_name(host_name);
  return Call(timeout, &v1::Coordinator::Stub::RemoveHost, request).status();
}

absl::StatusOr<std::string> CoordinatorClient::CancelGang(
    const v1::CancelGangRequest& request, std::chrono::milliseconds timeout) {
  absl::StatusOr<v1::CancelGangResponse> response =
      Call(timeout, &v1::Coordinator::Stub::CancelGang, request);
  if (!response.ok()) return response.status();
  return response->root_cause();
}

absl::StatusOr<uint32_t> CoordinatorClient::CancelFormingGangs(
    const v1::CancelFormingGangsRequest& request,
    std::chrono::milliseconds timeout) {
  absl::StatusOr<v1::CancelFormingGangsResponse> response =
      Call(timeout, &v1::Coordinator::Stub::CancelFormingGangs, request);
  if (!response.ok()) return response.status();
  return response->cancelled();
}

absl::StatusOr<std::vector<std::string>> CoordinatorClient::CollectGangs(
    std::chrono::milliseconds timeout) {
  absl::StatusOr<v1::CollectGangsResponse> response = Call(
      timeout, &v1::Coordinator::Stub::CollectGangs, v1::CollectGangsRequest());
  if (!response.ok()) return response.status();
  return std::vector<std::string>(response->ended_gang_ids().begin(),
                                  response->ended_gang_ids().end());
}

// Host tokens.

absl::StatusOr<std::string> CoordinatorClient::CreateHostToken(
    const std::string& host_name, std::chrono::milliseconds timeout) {
  v1::CreateHostTokenRequest request;
  request.set_host_name(host_name);
  absl::StatusOr<v1::CreateHostTokenResponse> response =
      Call(timeout, &v1::Coordinator::Stub::CreateHostToken, request);
  if (!response.ok()) return response.status();
  return response->token();
}

absl::StatusOr<v1::ListHostTokensResponse> CoordinatorClient::ListHostTokens(
    std::chrono::milliseconds timeout) {
  return Call(timeout, &v1::Coordinator::Stub::ListHostTokens,
              v1::ListHostTokensRequest());
}

absl::Status CoordinatorClient::RevokeHostToken(
    const std::string& host_name, std::chrono::milliseconds timeout) {
  v1::RevokeHostTokenRequest request;
  request.set_host_name(host_name);
  return Call(timeout, &v1::Coordinator::Stub::RevokeHostToken, request)
      .status();
}

}  // namespace gdt::rendezvous
