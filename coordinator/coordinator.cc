#include "coordinator/coordinator.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/member_token.h"
#include "common/retry_after.h"
#include "common/secret.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "coordinator/watched_store.h"
#include "rendezvous/kv_keys.h"
#include "spdlog/spdlog.h"

namespace gdt::coordinator {
namespace {

constexpr std::chrono::seconds kTick{1};
constexpr char kMemberTokenKeyName[] = "member_token_key";
constexpr char kKvTokenKeyName[] = "kv_token_key";
// A member token lives for its job's timeout (this long when the job named
// none) plus the slack its after_script and cleanup may take.
constexpr std::chrono::seconds kMemberTokenDefaultLifetime{24 * 3600};
constexpr std::chrono::seconds kMemberTokenSlack{3600};

}  // namespace

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(
    const Clock& clock, std::unique_ptr<state::StateStore> store,
    const SchedulerOptions& options, PortChecker& port_checker,
    const kv::KvLimits& kv_limits, const CheckpointLimits& checkpoint_limits) {
  // Failures of a serving coordinator's store are logged (rate-limited)
  // and answered as Unavailable (watched_store.h).
  auto watched = std::make_unique<WatchedStore>(std::move(store), clock);
  WatchedStore& watched_store = *watched;
  std::unique_ptr<Coordinator> coordinator(
      new Coordinator(std::move(watched), port_checker, kv_limits));
  absl::StatusOr<std::unique_ptr<Scheduler>> scheduler =
      Scheduler::Create(clock, *coordinator->store_, options);
  if (!scheduler.ok()) return scheduler.status();
  MutexLock lock(coordinator->mu_);
  coordinator->scheduler_ = std::move(*scheduler);
  // The member token key and the key-value store token key are made once
  // per cluster and kept in the store, so that the tokens made with them
  // hold across a restart and a standby that takes over knows them too.
  const auto secret = [&](const char* name) -> absl::StatusOr<std::string> {
    absl::StatusOr<std::string> key = coordinator->store_->LoadSecret(name);
    if (!key.ok() || !key->empty()) return key;
    key = NewSecretToken();
    if (!key.ok()) return key.status();
    GDT_RETURN_IF_ERROR(coordinator->store_->SaveSecret(name, *key));
    return key;
  };
  absl::StatusOr<std::string> member_key = secret(kMemberTokenKeyName);
  if (!member_key.ok()) return member_key.status();
  coordinator->member_token_key_ = std::move(*member_key);
  absl::StatusOr<std::string> kv_key = secret(kKvTokenKeyName);
  if (!kv_key.ok()) return kv_key.status();
  coordinator->kv_token_key_ = std::move(*kv_key);
  if (absl::Status status = coordinator->LoadKvTokensLocked(); !status.ok()) {
    return status;
  }
  coordinator->clock_ = &clock;
  coordinator->checkpoint_limits_ = checkpoint_limits;
  coordinator->checkpoint_rate_ = std::make_unique<KeyedRateLimiter>(
      clock, KeyedRateLimiter::Options{
                 .per_second = checkpoint_limits.per_second,
                 .burst = std::max(checkpoint_limits.burst, 1.0)});
  absl::StatusOr<std::vector<state::HostTokenRecord>> host_tokens =
      coordinator->store_->LoadHostTokens();
  if (!host_tokens.ok()) return host_tokens.status();
  for (state::HostTokenRecord& record : *host_tokens) {
    coordinator->host_tokens_[record.host_name] = std::move(record);
  }
  watched_store.Serve();
  return coordinator;
}

Coordinator::~Coordinator() {
  Stop();
  MutexLock lock(mu_);
  scheduler_.reset();  // Before the store it refers to.
}

void Coordinator::SetEventSink(EventSink sink) { sink_ = std::move(sink); }

void Coordinator::SetObserver(Observer& observer) {
  observer_ = &observer;
  MutexLock lock(mu_);
  scheduler_->SetObserver(observer);
}

void Coordinator::Start() {
  {
    MutexLock lock(mu_);
    stop_ = false;
  }
  thread_ = std::thread([this] { Loop(); });
}

void Coordinator::Stop() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  wake_cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
  MutexLock lock(mu_);
  FlushStoreLocked();
  SaveUnsavedKvTokensLocked();
}

void Coordinator::FlushStoreLocked() {
  // A coordinator whose state failed to load has no scheduler to flush.
  if (scheduler_ == nullptr) return;
  absl::Status status = scheduler_->FlushStore();
  if (status.ok()) {
    joins_commit_failing_ = false;
    return;
  }
  // The joins are kept and written again with the next change or flush
  // (StateStore::Flush): one line while their commit keeps failing.
  if (joins_commit_failing_) return;
  joins_commit_failing_ = true;
  spdlog::error("event=state_commit_failed what=joins reason={} action={}",
                LogValue(status.ToString()),
                LogValue("the members stay joined and their records are "
                         "written again once the state store takes writes"));
}

void Coordinator::Wake() {
  {
    MutexLock lock(mu_);
    wake_ = true;
  }
  wake_cv_.NotifyAll();
}

void Coordinator::Loop() {
  std::chrono::steady_clock::time_point last_checks;
  while (true) {
    {
      MutexLock lock(mu_);
      const auto deadline = std::chrono::steady_clock::now() + kTick;
      while (!wake_ && !stop_ && std::chrono::steady_clock::now() < deadline) {
        wake_cv_.WaitUntil(mu_, deadline);
      }
      if (stop_) return;
      wake_ = false;
    }
    // The time-based checks walk every member of every running gang; their
    // bounds are seconds to minutes, so once a tick is enough, whatever the
    // rate of joins and leaves that wake the passes in between.
    const auto now = std::chrono::steady_clock::now();
    const bool checks_due = now - last_checks >= kTick;
    if (checks_due) last_checks = now;
    RunAdmissionPass(checks_due);
  }
}

std::vector<state::MemberEvent> Coordinator::TakeEventsLocked() {
  std::vector<state::MemberEvent> events = scheduler_->TakeEvents();
  for (state::MemberEvent& event : events) {
    if (event.kind == state::MemberEvent::Kind::kAdmitted &&
        !event.assignment.not_needed) {
      event.assignment.kv_token =
          KvTokenLocked(event.assignment.gang_id, event.assignment.epoch);
      // The member token for the placed host's agent (only hosts with a
      // host token can ask this coordinator to check one).
      const state::Gang* gang = scheduler_->FindGang(event.assignment.gang_id);
      if (host_tokens_.contains(event.assignment.host_name) &&
          gang != nullptr) {
        auto member = gang->members.find(event.member_index);
        if (member != gang->members.end()) {
          const uint32_t timeout = member->second.job_timeout_seconds;
          const std::chrono::seconds lifetime =
              (timeout > 0 ? std::chrono::seconds(timeout)
                           : kMemberTokenDefaultLifetime) +
              kMemberTokenSlack;
          event.assignment.member_token = MintMemberToken(
              member_token_key_,
              MemberClaims{
                  event.assignment.gang_id, event.assignment.epoch,
                  member->second.job_id, event.assignment.host_name,
                  clock_->UnixMillis() +
                      std::chrono::duration_cast<std::chrono::milliseconds>(
                          lifetime)
                          .count()});
        }
      }
    }
  }
  EndFinishedKvGangsLocked();
  return events;
}

// Gang key-value store hooks.

absl::Status Coordinator::LoadKvTokensLocked() {
  absl::StatusOr<std::vector<state::KvToken>> tokens = store_->LoadKvTokens();
  if (!tokens.ok()) return tokens.status();
  for (state::KvToken& token : *tokens) {
    // An empty token: a failed gang's store that ended, kept for the
    // earlier tokens of its retry (EndFinishedKvGangsLocked).
    if (!token.token.empty()) {
      kv_->OpenGang(token.gang_id, token.epoch, token.token,
                    token.earlier_sha256);
    }
    kv_tokens_[token.gang_id] = std::move(token);
  }
  // A running gang whose token the store refused before the restart: its
  // members hold a token derived from the gang (KvTokenLocked), which is
  // made again, so that they keep their store (its data is gone, as for
  // every gang across a restart).
  for (const state::Gang& gang : scheduler_->GetSnapshot(false).gangs) {
    if (gang.state != state::GangState::kRunning) continue;
    auto it = kv_tokens_.find(gang.id);
    if (it != kv_tokens_.end() && it->second.epoch == gang.epoch &&
        !it->second.token.empty()) {
      continue;
    }
    KvTokenLocked(gang.id, gang.epoch);
    spdlog::info("event=gang_kv_token_remade gang={} epoch={}",
                 LogValue(gang.id), gang.epoch);
  }
  kv_end_changes_seen_.reset();  // Look at every loaded gang.
  EndFinishedKvGangsLocked();
  return absl::OkStatus();
}

std::string Coordinator::KvTokenLocked(const std::string& gang_id,
                                       uint32_t epoch) {
  auto it = kv_tokens_.find(gang_id);
  if (it != kv_tokens_.end() && it->second.epoch == epoch &&
      !it->second.token.empty()) {
    return it->second.token;
  }
  // Derived, not drawn: the same gang, epoch and creation time always give
  // the same token, so a coordinator that restarts before the store took
  // it makes it again (LoadKvTokensLocked). The creation time tells apart
  // a gang made again under an id that an earlier, pruned one had.
  const state::Gang* gang = scheduler_->FindGang(gang_id);
  state::KvToken token{
      gang_id,
      epoch,
      HmacSha256Hex(kv_token_key_,
                    absl::StrCat("gang-kv-token\n", gang_id, "\n", epoch, "\n",
                                 gang != nullptr ? gang->created_unix_ms : 0)),
      {}};
  if (it != kv_tokens_.end()) {
    // The earlier epochs' members still learn that their epoch is over.
    for (const auto& [earlier, sha256] : it->second.earlier_sha256) {
      if (earlier < epoch) token.earlier_sha256[earlier] = sha256;
    }
    if (it->second.epoch < epoch && !it->second.token.empty()) {
      token.earlier_sha256[it->second.epoch] = Sha256Hex(it->second.token);
    }
    while (token.earlier_sha256.size() > kv::GangKv::kMaxEarlierTokens) {
      token.earlier_sha256.erase(token.earlier_sha256.begin());
    }
  }
  // The store refusing the token (its disk filled after the admission was
  // stored) does not keep the gang from its store: the token serves from
  // memory and is saved by a later pass (SaveUnsavedKvTokensLocked), so
  // that a restart after the store recovers still knows it.
  if (absl::Status status = store_->SaveKvToken(token); !status.ok()) {
    spdlog::warn(
        "event=gang_kv_token_unsaved gang={} epoch={} error={} action={}",
        LogValue(gang_id), epoch, LogValue(status.ToString()),
        LogValue("the gang's members get the token; the coordinator saves it "
                 "once its state store accepts writes again"));
    unsaved_kv_tokens_.insert(gang_id);
  } else {
    unsaved_kv_tokens_.erase(gang_id);
  }
  kv_->OpenGang(gang_id, epoch, token.token, token.earlier_sha256);
  kv_tokens_[gang_id] = token;
  return token.token;
}

void Coordinator::SaveUnsavedKvTokensLocked() {
  for (auto it = unsaved_kv_tokens_.begin(); it != unsaved_kv_tokens_.end();) {
    auto token = kv_tokens_.find(*it);
    if (token == kv_tokens_.end()) {
      it = unsaved_kv_tokens_.erase(it);
      continue;
    }
    // Refused again: the store says so itself (watched_store.h).
    if (!store_->SaveKvToken(token->second).ok()) return;
    spdlog::info("event=gang_kv_token_saved gang={} epoch={}",
                 LogValue(token->first), token->second.epoch);
    it = unsaved_kv_tokens_.erase(it);
  }
}

void Coordinator::EndFinishedKvGangsLocked() {
  // A gang ends only through a change the scheduler counts: without one
  // since the last look, no store can have ended (this runs after every
  // call, and a walk over a failed gang's members on each of its N leaves
  // made a large gang's end cost O(N^2)).
  const uint64_t changes = scheduler_->EndChanges();
  if (kv_end_changes_seen_ == changes) return;
  kv_end_changes_seen_ = changes;
  for (auto it = kv_tokens_.begin(); it != kv_tokens_.end();) {
    const state::Gang* gang = scheduler_->FindGang(it->first);
    bool ended = gang == nullptr;
    if (gang != nullptr && (gang->state == state::GangState::kDone ||
                            gang->state == state::GangState::kFailed)) {
      ended = true;
      for (const auto& [index, member] : gang->members) {
        if (!member.left) ended = false;
      }
    }
    if (!ended || (gang != nullptr && it->second.token.empty())) {
      ++it;
      continue;
    }
    kv_->EndGang(it->first);
    if (gang != nullptr && gang->state == state::GangState::kFailed &&
        !it->second.token.empty()) {
      // A failed gang may be retried under its id: its retry's store keeps
      // this epoch's token (as its hash) among the earlier ones, so that
      // the members of this epoch still hear that it is over. The token
      // itself is forgotten.
      it->second.earlier_sha256[it->second.epoch] = Sha256Hex(it->second.token);
      it->second.token.clear();
      if (absl::Status status = store_->SaveKvToken(it->second); !status.ok()) {
        spdlog::warn("event=kv_token_forget_failed gang={} error={}",
                     LogValue(it->first), LogValue(status.ToString()));
        unsaved_kv_tokens_.insert(it->first);  // Saved by a later pass.
      } else {
        unsaved_kv_tokens_.erase(it->first);
      }
      ++it;
      continue;
    }
    if (absl::Status status = store_->DeleteKvToken(it->first); !status.ok()) {
      spdlog::warn("event=kv_token_forget_failed gang={} error={}",
                   LogValue(it->first), LogValue(status.ToString()));
    }
    unsaved_kv_tokens_.erase(it->first);
    it = kv_tokens_.erase(it);
  }
}

void Coordinator::SendPreemptionNoticesLocked() {
  for (const Scheduler::PreemptionNotice& notice :
       scheduler_->TakePreemptionNotices()) {
    auto token = kv_tokens_.find(notice.gang_id);
    absl::Status status = absl::FailedPreconditionError(
        "the gang has no key-value store for this epoch");
    if (token != kv_tokens_.end() && token->second.epoch == notice.epoch &&
        !token->second.token.empty()) {
      // The deadline (Unix seconds) and who gives the notice, for the
      // members' logs. A member's earlier notice stays.
      absl::StatusOr<kv::KvCasResult> set = kv_->CompareAndSet(
          kv::KvCaller{notice.gang_id, notice.epoch, token->second.token},
          rendezvous::kCheckpointNoticeKey, std::nullopt,
          absl::StrCat(notice.stop_by_unix_s, " ", notice.note));
      status = set.status();
    }
    if (status.ok()) {
      spdlog::info("event=preemption_notice_sent gang={} stop_by_unix_s={}",
                   LogValue(notice.gang_id), notice.stop_by_unix_s);
    } else {
      // The gang is still stopped at its deadline, only without the chance
      // to checkpoint first.
      spdlog::warn("event=preemption_notice_failed gang={} error={}",
                   LogValue(notice.gang_id), LogValue(status.ToString()));
    }
  }
}

void Coordinator::Deliver(std::vector<state::MemberEvent> events) {
  if (!events.empty() && sink_) sink_(std::move(events));
}

void Coordinator::RunAdmissionPass(bool time_checks) {
  std::vector<AdmissionProposal> proposals;
  std::vector<state::MemberEvent> events;
  {
    MutexLock lock(mu_);
    if (time_checks) {
      scheduler_->FailGangsOnLostHosts();
      scheduler_->ReleaseAbandonedMembers();
      scheduler_->FailSuspectedGangs();
      scheduler_->FailHungGangs();
      scheduler_->EndAbandonedFormingGangs();
      scheduler_->ReconcileMembers();
      scheduler_->PruneFinishedGangs();  // Once a minute at most.
      FlushStoreLocked();
    }
    scheduler_->ForgetDroppedJoins();
    SaveUnsavedKvTokensLocked();
    scheduler_->StopPreemptedGangs();
    proposals = scheduler_->Plan();
    SendPreemptionNoticesLocked();
    events = TakeEventsLocked();
  }
  Deliver(std::move(events));
  for (const AdmissionProposal& proposal : proposals) {
    uint32_t port = 0;
    std::string note;
    if (proposal.agent_endpoint.empty()) {
      note = absl::StrCat("waiting for host ", proposal.master_host,
                          " to report its agent endpoint");
    }
    size_t checked = 0;
    for (uint32_t candidate : proposal.candidate_ports) {
      if (!note.empty() || checked++ == kMaxCandidatePorts) break;
      absl::StatusOr<bool> free =
          port_checker_.IsPortFree(proposal.agent_endpoint, candidate);
      if (!free.ok()) {
        note = absl::StrCat("waiting for the agent on ", proposal.master_host,
                            " (", proposal.agent_endpoint,
                            ") to confirm a master port: agent unreachable: ",
                            free.status().message());
        break;
      }
      if (*free) {
        port = candidate;
        break;
      }
    }
    if (port == 0 && note.empty()) {
      note = absl::StrCat("waiting for a free master port on ",
                          proposal.master_host, " (", checked,
                          " ports checked were busy)");
    }
    {
      MutexLock lock(mu_);
      if (port == 0) {
        spdlog::warn("event=gang_not_admitted gang={} reason={}",
                     LogValue(proposal.gang_id), LogValue(note));
        scheduler_->Defer(proposal.gang_id, note);
      } else if (absl::Status status = scheduler_->Admit(proposal, port);
                 IsStateStoreRefusal(status)) {
        // The state store refused the admission (it says so itself, once a
        // minute, watched_store.h): the gang waits, saying why, and the next
        // pass tries again.
        spdlog::debug("event=gang_not_admitted gang={} reason={}",
                      LogValue(proposal.gang_id), LogValue(status.ToString()));
        scheduler_->Defer(
            proposal.gang_id,
            absl::StrCat("waiting for the coordinator's state store to "
                         "accept writes (",
                         status.message(), ")"));
      } else if (!status.ok()) {
        spdlog::warn("event=gang_not_admitted gang={} reason={}",
                     LogValue(proposal.gang_id), LogValue(status.ToString()));
      } else {
        observer_->GangAdmitted(proposal.gang_id);
      }
      events = TakeEventsLocked();
    }
    Deliver(std::move(events));
  }
}

absl::Status Coordinator::RegisterHost(const state::HostSpec& spec) {
  std::vector<state::MemberEvent> events;
  absl::Status status;
  {
    MutexLock lock(mu_);
    status = scheduler_->RegisterHost(spec);
    events = TakeEventsLocked();
  }
  Deliver(std::move(events));
  if (status.ok()) Wake();
  return status;
}

bool Coordinator::Heartbeat(
    const std::string& host_name,
    std::optional<std::set<std::string>> running_members,
    std::map<std::string, MemberProgress> watched_progress,
    const std::vector<std::string>& idle_members,
    std::vector<std::string>* members_left,
    const std::string& not_ready_reason) {
  bool was_down = false;
  bool now_ready = false;
  bool known;
  {
    MutexLock lock(mu_);
    known = scheduler_->Heartbeat(host_name, &was_down);
    if (known) {
      scheduler_->SetRunningMembers(host_name, std::move(running_members));
      scheduler_->SetWatchedProgress(host_name, std::move(watched_progress));
      if (members_left != nullptr && !idle_members.empty()) {
        *members_left = scheduler_->MembersLeft(host_name, idle_members);
      }
      now_ready = scheduler_->SetNotReady(host_name, not_ready_reason) &&
                  not_ready_reason.empty();
    }
  }
  if (was_down || now_ready) Wake();
  return known;
}

absl::StatusOr<std::string> Coordinator::Join(const JoinRequest& request,
                                              uint64_t stream_id) {
  std::vector<state::MemberEvent> events;
  absl::StatusOr<std::string> gang_id;
  bool wake = false;
  {
    MutexLock lock(mu_);
    gang_id = scheduler_->Join(request, stream_id);
    // Under the lock, so that no admission pass can come between.
    if (gang_id.ok()) observer_->MemberJoined(*gang_id);
    // A join into a gang still missing members gives the pass nothing to
    // place: not waking it spares a thread switch and a pass per join.
    wake = gang_id.ok() && !scheduler_->LastJoinNeedsNoPass();
    events = TakeEventsLocked();
  }
  Deliver(std::move(events));
  if (wake) Wake();
  return gang_id;
}

void Coordinator::Detach(const std::string& gang_id, uint32_t member_index,
                         uint64_t stream_id) {
  std::vector<state::MemberEvent> events;
  {
    MutexLock lock(mu_);
    scheduler_->Detach(gang_id, member_index, stream_id);
    events = TakeEventsLocked();
  }
  Deliver(std::move(events));
}

absl::Status Coordinator::ReportExit(const std::string& gang_id, uint32_t epoch,
                                     uint32_t member_index, int64_t job_id,
                                     int32_t exit_code, bool cancelled,
                                     bool peer_suspected,
                                     int64_t exited_unix_ms) {
  std::vector<state::MemberEvent> events;
  absl::Status status;
  {
    MutexLock lock(mu_);
    status =
        scheduler_->ReportExit(gang_id, epoch, member_index, job_id, exit_code,
                               cancelled, peer_suspected, exited_unix_ms);
    events = TakeEventsLocked();
  }
  Deliver(std::move(events));
  return status;
}

absl::StatusOr<std::shared_ptr<const state::PeerList>> Coordinator::Peers(
    const std::string& gang_id, uint32_t epoch, uint32_t member_index,
    int64_t job_id) {
  MutexLock lock(mu_);
  return scheduler_->Peers(gang_id, epoch, member_index, job_id);
}

absl::Status Coordinator::Watch(const std::string& gang_id, uint32_t epoch,
                                uint32_t member_index, int64_t job_id,
                                uint64_t watch_id) {
  std::vector<state::MemberEvent> events;
  absl::Status status;
  {
    MutexLock lock(mu_);
    status = scheduler_->Watch(gang_id, epoch, member_index, job_id, watch_id);
    events = TakeEventsLocked();
  }
  Deliver(std::move(events));
  return status;
}

void Coordinator::Unwatch(uint64_t watch_id) {
  MutexLock lock(mu_);
  scheduler_->Unwatch(watch_id);
}

absl::Status Coordinator::Leave(const state::GangKey& key,
                                uint32_t member_index, int64_t job_id,
                                const std::string& executor) {
  std::vector<state::MemberEvent> events;
  absl::Status status;
  {
    MutexLock lock(mu_);
    status = scheduler_->Leave(key, member_index, job_id, executor);
    events = TakeEventsLocked();
  }
  Deliver(std::move(events));
  Wake();
  return status;
}

absl::Status Coordinator::SetDrained(const std::string& host_name,
                                     bool drained) {
  std::vector<state::MemberEvent> events;
  absl::Status status;
  {
    MutexLock lock(mu_);
    status = scheduler_->SetDrained(host_name, drained);
    events = TakeEventsLocked();
  }
  Deliver(std::move(events));
  Wake();
  return status;
}

absl::Status Coordinator::RemoveHost(const std::string& host_name) {
  std::vector<state::MemberEvent> events;
  absl::Status status;
  {
    MutexLock lock(mu_);
    status = scheduler_->RemoveHost(host_name);
    events = TakeEventsLocked();
  }
  Deliver(std::move(events));
  Wake();
  return status;
}

absl::Status Coordinator::MemberLost(const std::string& gang_id, uint32_t epoch,
                                     uint32_t member_index, int64_t job_id,
                                     const std::string& what) {
  std::vector<state::MemberEvent> events;
  absl::Status status;
  {
    MutexLock lock(mu_);
    status = scheduler_->MemberLost(gang_id, epoch, member_index, job_id, what);
    events = TakeEventsLocked();
  }
  Deliver(std::move(events));
  return status;
}

absl::Status Coordinator::MemberHung(const std::string& gang_id, uint32_t epoch,
                                     uint32_t member_index, int64_t job_id,
                                     uint32_t seconds,
                                     MemberProgress progress) {
  std::vector<state::MemberEvent> events;
  absl::Status status;
  {
    MutexLock lock(mu_);
    status = scheduler_->MemberHung(gang_id, epoch, member_index, job_id,
                                    seconds, std::move(progress));
    events = TakeEventsLocked();
  }
  Deliver(std::move(events));
  return status;
}

absl::StatusOr<std::string> Coordinator::Cancel(const std::string& gang_id,
                                                const std::string& note) {
  std::vector<state::MemberEvent> events;
  absl::StatusOr<std::string> root_cause;
  {
    MutexLock lock(mu_);
    root_cause = scheduler_->Cancel(gang_id, note);
    events = TakeEventsLocked();
  }
  Deliver(std::move(events));
  if (root_cause.ok()) Wake();
  return root_cause;
}

absl::StatusOr<std::string> Coordinator::RefuseMember(
    const state::GangKey& key, uint32_t member_index, int64_t job_id,
    const std::string& reason) {
  std::vector<state::MemberEvent> events;
  absl::StatusOr<std::string> root_cause;
  {
    MutexLock lock(mu_);
    root_cause = scheduler_->RefuseMember(key, member_index, job_id, reason);
    events = TakeEventsLocked();
  }
  Deliver(std::move(events));
  if (root_cause.ok()) Wake();
  return root_cause;
}

absl::StatusOr<std::string> Coordinator::ForceCancel(const std::string& gang_id,
                                                     const std::string& note) {
  std::vector<state::MemberEvent> events;
  absl::StatusOr<std::string> line;
  {
    MutexLock lock(mu_);
    line = scheduler_->ForceCancel(gang_id, note);
    events = TakeEventsLocked();
  }
  Deliver(std::move(events));
  if (line.ok()) Wake();
  return line;
}

absl::StatusOr<std::vector<std::string>> Coordinator::CancelForming(
    int64_t project_id, int64_t pipeline_id, const std::string& note) {
  std::vector<state::MemberEvent> events;
  absl::StatusOr<std::vector<std::string>> cancelled;
  {
    MutexLock lock(mu_);
    cancelled = scheduler_->CancelForming(project_id, pipeline_id, note);
    events = TakeEventsLocked();
  }
  Deliver(std::move(events));
  Wake();
  return cancelled;
}

std::vector<std::string> Coordinator::EndAbandonedFormingGangs() {
  std::vector<state::MemberEvent> events;
  std::vector<std::string> ended;
  {
    MutexLock lock(mu_);
    ended = scheduler_->EndAbandonedFormingGangs(/*now=*/true);
    events = TakeEventsLocked();
  }
  Deliver(std::move(events));
  if (!ended.empty()) Wake();
  return ended;
}

Snapshot Coordinator::GetSnapshot(bool include_finished) {
  return *SharedSnapshot(include_finished);  // Copied without the lock.
}

std::shared_ptr<const Snapshot> Coordinator::SharedSnapshot(
    bool include_finished) {
  MutexLock lock(mu_);
  StatusSnapshot& kept = status_snapshots_[include_finished ? 1 : 0];
  const Clock::TimePoint now = clock_->Now();
  // Any call but a status read may change what status shows: one took the
  // lock since the previous status read unless this hold directly follows
  // that one's.
  const uint64_t held = mu_.acquisitions();
  if (held != status_read_hold_ + 1) ++status_version_;
  status_read_hold_ = held;
  if (kept.snapshot == nullptr || kept.version != status_version_ ||
      now < kept.built || now - kept.built >= kStatusSnapshotReuse) {
    kept.snapshot = std::make_shared<const Snapshot>(
        scheduler_->GetSnapshot(include_finished));
    kept.version = status_version_;
    kept.built = now;
    ++snapshots_built_;
  }
  return kept.snapshot;
}

uint64_t Coordinator::snapshots_built() {
  MutexLock lock(mu_);
  return snapshots_built_;
}

// Checkpoint manifest records.

absl::Status Coordinator::RecordCheckpoint(const kv::KvCaller& caller,
                                           state::CheckpointRecord record) {
  GDT_RETURN_IF_ERROR(kv_->CheckCaller(caller));
  if (record.step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint step ", record.step, " is negative"));
  }
  if (record.manifest_json.empty() ||
      record.manifest_json.size() > kMaxManifestBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint manifest of ", record.manifest_json.size(),
                     " bytes (must be 1 to ", kMaxManifestBytes, ")"));
  }
  record.gang_id = caller.gang_id;
  record.epoch = caller.epoch;
  record.recorded_unix_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::system_clock::now().time_since_epoch())
          .count();
  {
    MutexLock lock(mu_);
    const state::Gang* gang = scheduler_->FindGang(record.gang_id);
    const uint32_t members =
        gang != nullptr && gang->key.size > 0 ? gang->key.size : 1;
    const double units = (1 + static_cast<double>(record.manifest_json.size()) /
                                  CheckpointLimits::kUnitBytes) /
                         members;
    if (std::chrono::milliseconds wait{};
        !checkpoint_rate_->TryTake(record.gang_id, &wait, units)) {
      return WithRetryAfter(
          absl::ResourceExhaustedError(absl::StrCat(
              "gang ", record.gang_id, " records checkpoints faster than ",
              checkpoint_limits_.per_second,
              " small manifests a second per member (bursts of ",
              checkpoint_limits_.burst, "; a manifest counts once more per ",
              CheckpointLimits::kUnitBytes / 1024,
              " KiB; checkpoint_record_rate_per_gang, "
              "checkpoint_record_burst_per_gang): step ",
              record.step, " of rank ", record.rank,
              " is not recorded; retry in ",
              absl::StrFormat("%.1f", static_cast<double>(wait.count()) / 1000),
              " s")),
          wait);
    }
    GDT_RETURN_IF_ERROR(
        store_->SaveCheckpointRecord(record, kCheckpointsPerGang));
    scheduler_->NoteCheckpoint(record.gang_id, record.epoch);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<state::CheckpointRecord>>
Coordinator::ListCheckpoints(const kv::KvCaller& caller) {
  GDT_RETURN_IF_ERROR(kv_->CheckCaller(caller));
  absl::StatusOr<std::vector<state::CheckpointRecord>> records;
  {
    MutexLock lock(mu_);
    records = store_->ListCheckpointRecords(caller.gang_id);
  }
  if (!records.ok()) return records;
  // 32 records of up to 1 MiB each would be an answer no client takes
  // (gRPC's 4 MiB): resume would fail for good. The newest that fit go.
  size_t bytes = 0;
  size_t keep = 0;
  for (; keep < records->size(); ++keep) {
    bytes += (*records)[keep].manifest_json.size();
    if (keep > 0 && bytes > kMaxListedManifestBytes) break;
  }
  records->resize(keep);
  return records;
}

// Host tokens.

absl::StatusOr<std::string> Coordinator::CreateHostToken(
    const std::string& host_name) {
  if (host_name.empty()) {
    return absl::InvalidArgumentError("host name must not be empty");
  }
  absl::StatusOr<std::string> token = NewSecretToken();
  if (!token.ok()) return token.status();
  state::HostTokenRecord record{host_name, SecretSha256Hex(*token),
                                clock_->UnixMillis()};
  MutexLock lock(mu_);
  if (absl::Status status = store_->SaveHostToken(record); !status.ok()) {
    return status;
  }
  host_tokens_[host_name] = std::move(record);
  return token;
}

std::vector<state::HostTokenRecord> Coordinator::ListHostTokens() {
  MutexLock lock(mu_);
  std::vector<state::HostTokenRecord> records;
  for (const auto& [name, record] : host_tokens_) {
    records.push_back(state::HostTokenRecord{name, "", record.created_unix_ms});
  }
  return records;
}

absl::Status Coordinator::RevokeHostToken(const std::string& host_name) {
  MutexLock lock(mu_);
  absl::StatusOr<bool> deleted = store_->DeleteHostToken(host_name);
  if (!deleted.ok()) return deleted.status();
  if (host_tokens_.erase(host_name) == 0 && !*deleted) {
    return absl::NotFoundError(
        absl::StrCat("no host token for ", host_name,
                     " (see `gdt-coord hosts token list`)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Coordinator::HostOfToken(const std::string& token) {
  if (token.empty()) {
    return absl::UnauthenticatedError(
        "no host token: set host_token_file in the agent's config (an "
        "operator creates one with `gdt-coord hosts token create HOST`)");
  }
  const std::string hash = SecretSha256Hex(token);
  MutexLock lock(mu_);
  for (const auto& [name, record] : host_tokens_) {
    if (SameSecret(record.sha256, hash)) return name;
  }
  return absl::PermissionDeniedError(
      "host token refused: it is wrong or was revoked (`gdt-coord hosts "
      "token create HOST` issues a new one)");
}

absl::StatusOr<MemberClaims> Coordinator::CheckMemberToken(
    const std::string& token, const std::string& host_name) {
  absl::StatusOr<MemberClaims> claims =
      VerifyMemberToken(member_token_key_, token);
  if (!claims.ok()) return claims.status();
  const std::string member = absl::StrCat(
      "member token of ", claims->member_id(), " epoch ", claims->epoch);
  if (claims->host_name != host_name) {
    return absl::PermissionDeniedError(absl::StrCat(
        member, " is for host ", claims->host_name, ", not ", host_name));
  }
  if (clock_->UnixMillis() >= claims->expires_unix_ms) {
    return absl::PermissionDeniedError(absl::StrCat(
        member, " expired at ", state::UtcTimeOfDay(claims->expires_unix_ms)));
  }
  MutexLock lock(mu_);
  if (!host_tokens_.contains(host_name)) {
    return absl::PermissionDeniedError(
        absl::StrCat(member, " refused: host ", host_name,
                     " has no host token any more (revoked)"));
  }
  const state::Gang* gang = scheduler_->FindGang(claims->gang_id);
  if (gang == nullptr || gang->epoch != claims->epoch ||
      gang->state == state::GangState::kDone) {
    return absl::PermissionDeniedError(
        absl::StrCat(member, " refused: that gang epoch has ended"));
  }
  for (const auto& [index, entry] : gang->members) {
    if (entry.job_id != claims->job_id) continue;
    if (entry.left) {
      return absl::PermissionDeniedError(
          absl::StrCat(member, " refused: the member has left its gang"));
    }
    if (entry.host_name != host_name) {
      return absl::PermissionDeniedError(absl::StrCat(
          member, " refused: the member does not run on ", host_name));
    }
    return claims;
  }
  return absl::PermissionDeniedError(
      absl::StrCat(member, " refused: no such member in the gang"));
}

std::string Coordinator::MemberHost(const std::string& gang_id,
                                    uint32_t member_index) {
  MutexLock lock(mu_);
  const state::Gang* gang = scheduler_->FindGang(gang_id);
  if (gang == nullptr) return "";
  auto member = gang->members.find(member_index);
  return member == gang->members.end() ? "" : member->second.host_name;
}

}  // namespace gdt::coordinator
