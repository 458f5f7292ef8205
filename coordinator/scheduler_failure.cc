// Scheduler: the failure paths of a gang — members lost with their
// host, agent or executor, and operator cancels. Exit reports live in
// scheduler.cc; both end in the same root-cause line and watch fan-out.
#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "coordinator/scheduler.h"
#include "spdlog/spdlog.h"

namespace gdt::coordinator {
namespace {

// Whether the gang's GPUs, slots and port are leased: it runs, or it is
// failed and some member has not left.
bool HoldsLeasesNow(const state::Gang& gang) {
  if (gang.state == state::GangState::kRunning) return true;
  return gang.state == state::GangState::kFailed &&
         std::any_of(gang.members.begin(), gang.members.end(),
                     [](const auto& entry) { return !entry.second.left; });
}

bool AllReportedZero(const state::Gang& gang) {
  const uint32_t size = gang.Size();
  return size > 0 && gang.members.size() == size &&
         std::all_of(
             gang.members.begin(), gang.members.end(),
             [](const auto& entry) { return entry.second.exit_code == 0; });
}

}  // namespace

std::string Scheduler::MemberLabel(const state::Gang& gang,
                                   const state::Member& member) {
  const std::string host =
      member.host_name.empty() ? std::string("no host") : member.host_name;
  return absl::StrCat("member ", member.index, "/", gang.key.size, " (job ",
                      member.job_id, " on host ", host, ")");
}

absl::Status Scheduler::FailGang(state::Gang& gang, uint32_t member_index,
                                 const std::string& cause,
                                 std::string_view failure_class,
                                 bool collect_evidence) {
  state::Gang updated = gang;
  updated.collect_evidence = collect_evidence;
  const bool forming = updated.state == state::GangState::kForming;
  updated.state = state::GangState::kFailed;
  updated.failed_member = member_index;
  updated.reason = absl::StrCat("gang ", updated.id, " failed: ", cause,
                                forming ? "" : "; stopping");
  std::vector<std::pair<uint64_t, uint32_t>> join_streams;
  if (forming) {
    // Nothing is leased yet: the members hold no resources once told.
    for (auto& [index, member] : updated.members) {
      if (member.stream_id != 0)
        join_streams.emplace_back(member.stream_id, index);
      member.stream_id = 0;
      member.present = false;
      member.left = true;
    }
    updated.ended_unix_ms = clock_.UnixMillis();
  }
  GDT_RETURN_IF_ERROR(store_.SaveGang(updated));
  gang = std::move(updated);
  ++end_changes_;
  hang_reports_.erase(gang.id);
  spdlog::warn("event=gang_failed gang={} reason={}", LogValue(gang.id),
               LogValue(gang.reason));
  observer_->Failure(failure_class);
  for (const auto& [stream_id, index] : join_streams) {
    state::MemberEvent aborted;
    aborted.stream_id = stream_id;
    aborted.kind = state::MemberEvent::Kind::kAborted;
    aborted.gang_id = gang.id;
    aborted.member_index = index;
    aborted.reason = gang.reason;
    events_.push_back(std::move(aborted));
  }
  NotifyWatchers(gang);
  return absl::OkStatus();
}

absl::StatusOr<std::string> Scheduler::RefuseMember(const state::GangKey& key,
                                                    uint32_t member_index,
                                                    int64_t job_id,
                                                    const std::string& reason) {
  if (key.size == 0 || member_index < 1 || member_index > key.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("member index ", member_index, " of gang ", key.group_name,
                     " is outside 1..", key.size));
  }
  if (job_id <= 0 || reason.empty()) {
    return absl::InvalidArgumentError(
        "a refused member needs its job id and a reason");
  }
  if (reason.size() > kMaxJobNameBytes * 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the refusal reason is ", reason.size(), " bytes long; at most ",
        kMaxJobNameBytes * 4, " are accepted"));
  }
  absl::StatusOr<std::string> gang_id = GangIdFor(key);
  if (!gang_id.ok()) return gang_id.status();
  const std::string cause =
      absl::StrCat("member ", member_index, "/", key.size, " (job ", job_id,
                   ") was refused: ", reason, " at ",
                   state::UtcTimeOfDay(clock_.UnixMillis()));
  auto found = gangs_.find(*gang_id);
  if (found != gangs_.end() &&
      found->second.state == state::GangState::kRunning) {
    return absl::FailedPreconditionError(
        absl::StrCat("gang ", *gang_id, " already runs"));
  }
  std::string root_cause = absl::StrCat("gang ", *gang_id, " failed: ", cause);
  if (found != gangs_.end() &&
      found->second.state == state::GangState::kForming) {
    GDT_RETURN_IF_ERROR(
        FailGang(found->second, member_index, cause, "member_refused"));
    root_cause = found->second.reason;
  } else {
    spdlog::warn("event=member_refused gang={} member={} job={} reason={}",
                 LogValue(*gang_id), member_index, job_id,
                 LogValue(root_cause));
    observer_->Failure("member_refused");
  }
  if (refusals_.count(key) == 0) {
    refusal_order_.push_back(key);
    if (refusal_order_.size() > kMaxRefusals) {
      refusals_.erase(refusal_order_.front());
      refusal_order_.pop_front();
    }
  }
  refusals_[key] = Refusal{member_index, job_id, root_cause};
  return root_cause;
}

absl::Status Scheduler::MemberLost(const std::string& gang_id, uint32_t epoch,
                                   uint32_t member_index, int64_t job_id,
                                   const std::string& what) {
  absl::StatusOr<state::Gang*> found =
      FindMember(gang_id, epoch, member_index, job_id);
  if (!found.ok()) return found.status();
  state::Gang& gang = **found;
  if (gang.state != state::GangState::kRunning || AllReportedZero(gang)) {
    return absl::OkStatus();
  }
  const state::Member& member = gang.members.at(member_index);
  return FailGang(
      gang, member_index,
      absl::StrCat(MemberLabel(gang, member), " was lost: ", what, " at ",
                   state::UtcTimeOfDay(clock_.UnixMillis())),
      "member_lost");
}

absl::Status Scheduler::MemberHung(const std::string& gang_id, uint32_t epoch,
                                   uint32_t member_index, int64_t job_id,
                                   uint32_t seconds, MemberProgress progress) {
  absl::StatusOr<state::Gang*> found =
      FindMember(gang_id, epoch, member_index, job_id);
  if (!found.ok()) return found.status();
  state::Gang& gang = **found;
  if (gang.state != state::GangState::kRunning || AllReportedZero(gang)) {
    return absl::OkStatus();
  }
  if (progress.last_unix_ms <= 0) {
    // A reporter that does not say: its watchdog fired about now.
    progress.last_unix_ms =
        clock_.UnixMillis() - static_cast<int64_t>(seconds) * 1000;
  }
  HangReports& reports = hang_reports_[gang.id];
  if (reports.reported.empty() || reports.epoch != gang.epoch) {
    reports = HangReports{};
    reports.epoch = gang.epoch;
    reports.first = member_index;
    reports.seconds = seconds;
    reports.since = clock_.Now();
  }
  reports.reported.emplace(member_index, progress);
  spdlog::info(
      "event=hang_reported gang={} member={} last_progress={} step={} "
      "first_reporter={}",
      LogValue(gang.id), member_index,
      LogValue(state::UtcTimeOfDay(progress.last_unix_ms)),
      progress.step.has_value() ? absl::StrCat(*progress.step) : "none",
      reports.first);
  return ResolveHang(gang).status();
}

bool Scheduler::StoppedBefore(const MemberProgress& member,
                              const MemberProgress& other,
                              std::chrono::milliseconds tolerance) {
  if (member.step.has_value() && other.step.has_value() &&
      *member.step != *other.step) {
    return *member.step < *other.step;
  }
  return member.last_unix_ms < other.last_unix_ms - tolerance.count();
}

absl::StatusOr<bool> Scheduler::ResolveHang(state::Gang& gang) {
  auto found = hang_reports_.find(gang.id);
  if (found == hang_reports_.end()) return false;
  const HangReports reports = found->second;
  const MemberProgress& first = reports.reported.at(reports.first);
  // What is known of every member still at work: its own report, or what
  // its host said in a heartbeat that came after the first reporter
  // stopped (so the member made no progress between its time and that).
  std::map<uint32_t, MemberProgress> known = reports.reported;
  std::vector<uint32_t> unheard;
  for (const auto& [index, member] : gang.members) {
    if (known.count(index) != 0 || member.left || member.exit_code >= 0) {
      continue;
    }
    auto host = hosts_.find(member.host_name);
    if (host == hosts_.end() ||
        StateOf(host->second) == state::HostState::kDown) {
      continue;  // Lost with its host: FailGangsOnLostHosts names it.
    }
    if (host->second.last_heartbeat_unix_ms < first.last_unix_ms) {
      unheard.push_back(index);
      continue;
    }
    auto host_progress = watched_progress_.find(member.host_name);
    if (host_progress == watched_progress_.end()) continue;
    auto sample =
        host_progress->second.find(absl::StrCat(gang.id, "/", member.job_id));
    if (sample != host_progress->second.end()) known[index] = sample->second;
  }
  if (!unheard.empty() &&
      clock_.Now() - reports.since < options_.host_down_after) {
    return false;
  }
  // The earliest of the members that stopped before the first reporter.
  uint32_t culprit = reports.first;
  for (const auto& [index, progress] : known) {
    if (!StoppedBefore(progress, first, options_.hang_tie_tolerance)) continue;
    if (culprit == reports.first ||
        StoppedBefore(progress, known.at(culprit),
                      std::chrono::milliseconds(0))) {
      culprit = index;
    }
  }
  const MemberProgress& stopped = known.at(culprit);
  std::optional<int64_t> peers_ms;
  std::optional<uint64_t> peers_step;
  for (const auto& [index, progress] : known) {
    if (index == culprit) continue;
    peers_ms = std::min(peers_ms.value_or(progress.last_unix_ms),
                        progress.last_unix_ms);
    if (progress.step.has_value()) {
      peers_step =
          std::min(peers_step.value_or(*progress.step), *progress.step);
    }
  }
  std::string peers;
  if (peers_ms.has_value()) {
    const int64_t gap_ms = *peers_ms - stopped.last_unix_ms;
    const int64_t tie_ms = options_.hang_tie_tolerance.count();
    if (gap_ms > tie_ms) {
      peers = absl::StrFormat(", peers' last progress %.1f s later",
                              static_cast<double>(gap_ms) / 1000);
    } else if (gap_ms >= -tie_ms) {
      peers = absl::StrFormat(", peers' last progress within %.1f s of it",
                              static_cast<double>(tie_ms) / 1000);
    }
    if (stopped.step.has_value() && peers_step.has_value() &&
        *peers_step > *stopped.step) {
      absl::StrAppend(&peers, ", peers at step ", *peers_step);
    }
  }
  const state::Member& member = gang.members.at(culprit);
  const std::string cause = absl::StrCat(
      MemberLabel(gang, member), " hung: no progress since ",
      state::UtcTimeOfDay(stopped.last_unix_ms),
      stopped.step.has_value() ? absl::StrCat(" at step ", *stopped.step) : "",
      " (its host's clock; GDT_HANG_TIMEOUT ", reports.seconds, " s)", peers,
      "; detected at ", state::UtcTimeOfDay(clock_.UnixMillis()));
  spdlog::warn(
      "event=hang_blamed gang={} member={} first_reporter={} reports={} "
      "known={} unheard={}",
      LogValue(gang.id), culprit, reports.first, reports.reported.size(),
      known.size(), unheard.size());
  GDT_RETURN_IF_ERROR(
      FailGang(gang, culprit, cause, "hung", /*collect_evidence=*/true));
  return true;
}

std::vector<std::string> Scheduler::FailHungGangs() {
  std::vector<std::string> failed;
  for (auto it = hang_reports_.begin(); it != hang_reports_.end();) {
    auto gang = gangs_.find(it->first);
    if (gang == gangs_.end() ||
        gang->second.state != state::GangState::kRunning ||
        gang->second.epoch != it->second.epoch ||
        AllReportedZero(gang->second)) {
      it = hang_reports_.erase(it);
      continue;
    }
    ++it;  // A failed gang's entry goes.
    absl::StatusOr<bool> resolved = ResolveHang(gang->second);
    if (!resolved.ok()) {
      spdlog::error("event=gang_fail_failed gang={} error={}",
                    LogValue(gang->first),
                    LogValue(resolved.status().ToString()));
      continue;
    }
    if (*resolved) failed.push_back(gang->first);
  }
  return failed;
}

void Scheduler::CheckHearing() {
  const Clock::TimePoint now = clock_.Now();
  const std::chrono::milliseconds half =
      std::chrono::milliseconds(options_.host_down_after) / 2;
  const std::optional<Clock::TimePoint> previous = last_hearing_check_;
  last_hearing_check_ = now;
  if (previous.has_value() && now - *previous >= half) {
    // Heartbeats that came during the stall may still wait unread: the
    // hosts lose none of their window to it.
    const Clock::TimePoint::duration stall = now - *previous;
    for (auto& [name, host] : hosts_) {
      host.last_heartbeat = std::min(now, host.last_heartbeat + stall);
    }
    spdlog::warn(
        "event=liveness_deaf reason=stalled stall_ms={} hosts={} action={}",
        std::chrono::duration_cast<std::chrono::milliseconds>(stall).count(),
        hosts_.size(),
        LogValue("the coordinator's own passes stopped, so it could not "
                 "hear heartbeats: every host's deadline is extended by the "
                 "stall instead of declaring hosts down"));
    observer_->DeadlinesExtended("stalled", hosts_.size());
    return;
  }
  if (!last_heard_any_.has_value() || quiet_spell_bridged_ ||
      now - *last_heard_any_ < half) {
    return;
  }
  // Hosts that were up when the last heartbeat came: if two or more of them
  // fell silent together, the silence is more likely this coordinator's.
  std::vector<state::Host*> were_up;
  bool any_overdue = false;
  for (auto& [name, host] : hosts_) {
    if (*last_heard_any_ - host.last_heartbeat > options_.host_down_after) {
      continue;
    }
    were_up.push_back(&host);
    if (StateOf(host) == state::HostState::kDown) any_overdue = true;
  }
  if (were_up.size() < 2 || !any_overdue) return;
  for (state::Host* host : were_up) host->last_heartbeat = now;
  quiet_spell_bridged_ = true;
  spdlog::warn(
      "event=liveness_deaf reason=quiet silent_ms={} hosts={} action={}",
      std::chrono::duration_cast<std::chrono::milliseconds>(now -
                                                            *last_heard_any_)
          .count(),
      were_up.size(),
      LogValue("no heartbeat from any host came in, although several were "
               "up: their deadlines are extended by one window instead of "
               "declaring them all down"));
  observer_->DeadlinesExtended("quiet", were_up.size());
}

std::vector<std::string> Scheduler::FailGangsOnLostHosts() {
  CheckHearing();
  std::vector<std::string> failed;
  for (auto& [id, gang_ptr] : LiveGangs()) {
    state::Gang& gang = *gang_ptr;
    if (gang.state != state::GangState::kRunning || AllReportedZero(gang))
      continue;
    const state::Member* lost = nullptr;
    const state::Host* lost_host = nullptr;
    for (const auto& [index, member] : gang.members) {
      // A member that exited 0 needs its host no more.
      if (member.left || member.exit_code == 0) continue;
      auto host = hosts_.find(member.host_name);
      if (host != hosts_.end() &&
          StateOf(host->second) == state::HostState::kDown) {
        lost = &member;
        lost_host = &host->second;
        break;
      }
    }
    if (lost == nullptr) continue;
    const uint32_t index = lost->index;
    const std::string cause = absl::StrCat(
        MemberLabel(gang, *lost), " was lost: host ", lost_host->spec.name,
        " missed heartbeats for ", options_.host_down_after.count(),
        " s (last at ", state::UtcTimeOfDay(lost_host->last_heartbeat_unix_ms),
        ") at ", state::UtcTimeOfDay(clock_.UnixMillis()));
    if (absl::Status status = FailGang(gang, index, cause, "host_lost");
        !status.ok()) {
      spdlog::error("event=gang_fail_failed gang={} lost_member={} error={}",
                    LogValue(id), index, LogValue(status.ToString()));
      continue;
    }
    failed.push_back(id);
  }
  return failed;
}

bool Scheduler::IsArchivedEpoch(const std::string& gang_id) {
  return gang_id.find('#') != std::string::npos;
}

absl::Status Scheduler::CheckNotFenced(const state::Gang& gang,
                                       int64_t job_id) const {
  const std::string prefix = gang.id + "#";
  for (auto it = gangs_.lower_bound(prefix);
       it != gangs_.end() && it->first.compare(0, prefix.size(), prefix) == 0;
       ++it) {
    for (const auto& [index, member] : it->second.members) {
      if (member.job_id != job_id) continue;
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job_id, " belongs to epoch ", it->second.epoch,
                       " of gang ", gang.id, ", which epoch ", gang.epoch,
                       " replaced; the old attempt is fenced"));
    }
  }
  return absl::OkStatus();
}

absl::Status Scheduler::StartNextEpoch(state::Gang& gang, int64_t job_id) {
  for (const auto& [index, member] : gang.members) {
    if (member.job_id != job_id) continue;
    if (gang.state == state::GangState::kFailed) {
      // The same job joining a failed gang it was a member of is the
      // runner's next preparation attempt (a failed prepare after admission
      // fails the gang, and the runner retries preparation with the same job
      // id). It cannot rejoin that epoch; Aborted makes it a system failure,
      // which `retry: when: runner_system_failure` turns into new job ids
      // and so the next epoch.
      return absl::AbortedError(absl::StrCat(
          "gang ", gang.id, " failed while job ", job_id, " was its member ",
          index,
          "; a later preparation attempt of the same job cannot rejoin it, "
          "only a retried job (a new job id) starts the next epoch"));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "gang ", gang.id, " already finished (",
        state::GangStateName(gang.state), ") and job ", job_id,
        " was its member ", index,
        "; only a retried job (a new job id) starts the next epoch"));
  }
  state::Gang archived = gang;
  archived.id = absl::StrCat(gang.id, "#", gang.epoch);
  state::Gang next;
  next.id = gang.id;
  next.key = gang.key;
  next.epoch = gang.epoch + 1;
  next.created_unix_ms = clock_.UnixMillis();
  next.sequence = next_sequence_;
  next.preemptions = gang.preemptions;
  next.preempted_epoch = gang.preempted_epoch;
  next.preempted_by = gang.preempted_by;
  next.preempted_lost_gpu_seconds = gang.preempted_lost_gpu_seconds;
  next.nodes_min = gang.nodes_min;
  if (gang.preemptions > 0 && gang.preempted_epoch == gang.epoch) {
    if (gang.requeue_after_ms > 0) {
      // Stopped for a gang of no higher priority: it queues as if it had
      // arrived later by the length of its run, so that its run does not
      // count as waiting (it would come back overdue and first in line,
      // and never be stopped again).
      next.created_unix_ms = std::min(
          next.created_unix_ms, gang.created_unix_ms + gang.requeue_after_ms);
    } else {
      // Stopped for a higher priority it keeps its place in the queue: it
      // is not sent behind gangs that came later.
      next.created_unix_ms = gang.created_unix_ms;
      next.sequence = gang.sequence;
    }
  }
  GDT_RETURN_IF_ERROR(store_.SaveGang(archived));
  GDT_RETURN_IF_ERROR(store_.SaveGang(next));
  ++next_sequence_;
  // The finished epoch keeps what it still holds under its archived id.
  for (auto& [host, gpus] : gpu_leases_) {
    for (auto& [gpu, holder] : gpus) {
      if (holder == gang.id) holder = archived.id;
    }
  }
  for (auto& [host, ports] : port_leases_) {
    for (auto& [port, holder] : ports) {
      if (holder == gang.id) holder = archived.id;
    }
  }
  for (auto& [watch_id, watched] : watchers_) {
    if (watched == gang.id) watched = archived.id;
  }
  spdlog::info(
      "event=gang_epoch_forms gang={} epoch={} archived_epoch={} "
      "archived_as={}",
      LogValue(gang.id), next.epoch, gang.epoch, LogValue(archived.id));
  live_ids_.insert(archived.id);
  live_ids_.insert(gang.id);
  ++end_changes_;
  gangs_[archived.id] = std::move(archived);
  gang = std::move(next);
  return absl::OkStatus();
}

state::Gang* Scheduler::GangOfJob(const state::GangKey& key,
                                  uint32_t member_index, int64_t job_id) {
  auto id = gang_ids_.find(key);
  if (id == gang_ids_.end()) return nullptr;
  auto matches = [&](state::Gang& gang) {
    auto member = gang.members.find(member_index);
    return member != gang.members.end() && member->second.job_id == job_id;
  };
  state::Gang& live = gangs_.at(id->second);
  if (matches(live)) return &live;
  const std::string prefix = live.id + "#";
  for (auto it = gangs_.lower_bound(prefix);
       it != gangs_.end() && it->first.compare(0, prefix.size(), prefix) == 0;
       ++it) {
    if (matches(it->second)) return &it->second;
  }
  return nullptr;
}

std::vector<std::pair<std::string, state::Gang*>> Scheduler::LiveGangs() {
  std::vector<std::pair<std::string, state::Gang*>> live;
  live.reserve(live_ids_.size());
  for (const std::string& id : live_ids_) {
    auto found = gangs_.find(id);
    if (found != gangs_.end()) live.emplace_back(id, &found->second);
  }
  return live;
}

void Scheduler::ReleaseLeases(const state::Gang& gang) {
  ++end_changes_;
  staying_.erase(gang.id);
  for (const auto& [index, member] : gang.members) {
    auto& host_gpus = gpu_leases_[member.host_name];
    for (uint32_t gpu : member.gpu_indices) host_gpus.erase(gpu);
  }
  port_leases_[gang.master_host].erase(gang.master_port);
  peer_lists_.erase(gang.id);
}

std::vector<std::string> Scheduler::ReleaseAbandonedMembers() {
  std::vector<std::string> released;
  const Clock::TimePoint now = clock_.Now();
  std::map<std::pair<std::string, uint32_t>, Clock::TimePoint> still_holding;
  for (auto& [id, gang_ptr] : LiveGangs()) {
    state::Gang& gang = *gang_ptr;
    const bool holding =
        gang.state == state::GangState::kFailed &&
        std::any_of(gang.members.begin(), gang.members.end(),
                    [](const auto& entry) { return !entry.second.left; });
    if (!holding) continue;
    const std::pair<std::string, uint32_t> key(id, gang.epoch);
    auto seen = failed_holding_since_.find(key);
    const Clock::TimePoint since =
        seen != failed_holding_since_.end() ? seen->second : now;
    if (now - since < options_.failed_gang_release) {
      still_holding[key] = since;
      continue;
    }
    state::Gang updated = gang;
    std::vector<std::string> abandoned;
    for (auto& [index, member] : updated.members) {
      if (member.left) continue;
      member.left = true;
      member.present = false;
      abandoned.push_back(absl::StrCat(index, " (job ", member.job_id, ")"));
    }
    updated.ended_unix_ms = clock_.UnixMillis();
    if (absl::Status status = store_.SaveGang(updated); !status.ok()) {
      spdlog::error("event=lease_release_failed gang={} error={}", LogValue(id),
                    LogValue(status.ToString()));
      still_holding[key] = since;
      continue;
    }
    ReleaseLeases(updated);
    gang = std::move(updated);
    spdlog::warn(
        "event=failed_gang_leases_released gang={} failed_s_ago={} "
        "members={} reason={}",
        LogValue(id), options_.failed_gang_release.count(),
        LogValue(absl::StrJoin(abandoned, ",")),
        LogValue("member(s) never cleaned up: leases released "
                 "(failed_gang_release_seconds)"));
    released.push_back(id);
  }
  failed_holding_since_ = std::move(still_holding);
  return released;
}

std::vector<std::string> Scheduler::FailSuspectedGangs() {
  std::vector<std::string> failed;
  const Clock::TimePoint now = clock_.Now();
  for (auto& [id, gang_ptr] : LiveGangs()) {
    state::Gang& gang = *gang_ptr;
    if (gang.state != state::GangState::kRunning) continue;
    if (gang.suspect_member == 0) {
      // After a restart only the recorded exit code is left.
      for (const auto& [index, member] : gang.members) {
        if (member.exit_code > 0) {
          gang.suspect_member = index;
          gang.suspect_since = now;
          break;
        }
      }
      continue;
    }
    if (now - gang.suspect_since < options_.failure_attribution_window) {
      continue;
    }
    const state::Member& member = gang.members.at(gang.suspect_member);
    const std::string cause =
        FailureCause(gang, member, member.exit_code, /*cancelled=*/false,
                     gang.suspect_exited_unix_ms);
    if (absl::Status status =
            FailGang(gang, member.index, cause,
                     member.exit_code > 128 ? "signal" : "exit_nonzero");
        !status.ok()) {
      spdlog::error("event=gang_fail_failed gang={} error={}", LogValue(id),
                    LogValue(status.ToString()));
      continue;
    }
    failed.push_back(id);
  }
  return failed;
}

absl::StatusOr<std::string> Scheduler::Cancel(const std::string& gang_id,
                                              const std::string& note) {
  auto found = gangs_.find(gang_id);
  if (found == gangs_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown gang ", gang_id));
  }
  state::Gang& gang = found->second;
  if (gang.state == state::GangState::kDone ||
      gang.state == state::GangState::kFailed ||
      (gang.state == state::GangState::kRunning && AllReportedZero(gang))) {
    return absl::FailedPreconditionError(
        absl::StrCat("gang ", gang_id, " already finished (",
                     gang.state == state::GangState::kRunning
                         ? "every member exited 0"
                         : state::GangStateName(gang.state),
                     ")"));
  }
  const std::string cause =
      absl::StrCat("cancelled by operator", note.empty() ? "" : ": ", note,
                   " at ", state::UtcTimeOfDay(clock_.UnixMillis()));
  GDT_RETURN_IF_ERROR(FailGang(gang, 0, cause, "operator_cancel"));
  Pass();
  return gang.reason;
}

absl::StatusOr<std::vector<std::string>> Scheduler::CancelForming(
    int64_t project_id, int64_t pipeline_id, const std::string& note) {
  std::vector<std::string> ids;
  for (const auto& [id, gang_ptr] : LiveGangs()) {
    const state::Gang& gang = *gang_ptr;
    if (gang.state == state::GangState::kForming &&
        (project_id == 0 || gang.key.project_id == project_id) &&
        (pipeline_id == 0 || gang.key.pipeline_id == pipeline_id)) {
      ids.push_back(id);
    }
  }
  const std::string cause =
      absl::StrCat("cancelled by operator", note.empty() ? "" : ": ", note,
                   " at ", state::UtcTimeOfDay(clock_.UnixMillis()));
  for (const std::string& id : ids) {
    GDT_RETURN_IF_ERROR(FailGang(gangs_.at(id), 0, cause, "operator_cancel"));
  }
  if (!ids.empty()) Pass();
  return ids;
}

absl::StatusOr<std::string> Scheduler::ForceCancel(const std::string& gang_id,
                                                   const std::string& note) {
  auto found = gangs_.find(gang_id);
  if (found == gangs_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown gang ", gang_id));
  }
  const std::string before = state::GangStateName(found->second.state);
  if (found->second.state == state::GangState::kForming ||
      (found->second.state == state::GangState::kRunning &&
       !AllReportedZero(found->second))) {
    const std::string cause =
        absl::StrCat("cancelled by operator (forced)", note.empty() ? "" : ": ",
                     note, " at ", state::UtcTimeOfDay(clock_.UnixMillis()));
    GDT_RETURN_IF_ERROR(FailGang(found->second, 0, cause, "operator_cancel"));
  }
  // FailGang may have replaced the gang: look it up again.
  state::Gang& gang = gangs_.at(gang_id);
  const bool held = HoldsLeasesNow(gang);
  std::vector<std::string> released;
  if (held) {
    state::Gang updated = gang;
    for (auto& [index, member] : updated.members) {
      if (member.left) continue;
      member.left = true;
      member.present = false;
      member.stream_id = 0;
      released.push_back(absl::StrCat(index, " (job ", member.job_id, ")"));
    }
    if (updated.state == state::GangState::kRunning) {
      updated.state = state::GangState::kDone;
      updated.reason = "leases freed by operator (cancel --force)";
    }
    updated.ended_unix_ms = clock_.UnixMillis();
    GDT_RETURN_IF_ERROR(store_.SaveGang(updated));
    ReleaseLeases(updated);
    gang = std::move(updated);
    failed_holding_since_.erase({gang_id, gang.epoch});
    NotifyWatchers(gang);
  }
  spdlog::warn(
      "event=gang_force_cancelled gang={} state_before={} state={} "
      "leases_freed={} members={} note={}",
      LogValue(gang_id), before, state::GangStateName(gang.state), held,
      LogValue(absl::StrJoin(released, ",")), LogValue(note));
  Pass();
  if (!held && before == state::GangStateName(gang.state)) {
    return absl::StrCat("gang ", gang_id, " held no leases (",
                        state::GangStateName(gang.state), "); nothing to free");
  }
  return absl::StrCat("gang ", gang_id, " (was ", before, ") is now ",
                      state::GangStateName(gang.state), " and holds no leases",
                      gang.reason.empty() ? "" : ": ", gang.reason);
}

std::vector<std::string> Scheduler::EndAbandonedFormingGangs(bool now) {
  std::vector<std::string> ended;
  const Clock::TimePoint time = clock_.Now();
  std::map<std::string, Clock::TimePoint> still_empty;
  for (auto& [id, gang_ptr] : LiveGangs()) {
    state::Gang& gang = *gang_ptr;
    if (gang.state != state::GangState::kForming) continue;
    if (std::any_of(gang.members.begin(), gang.members.end(),
                    [](const auto& entry) { return entry.second.present; })) {
      continue;
    }
    auto seen = forming_empty_since_.find(id);
    const Clock::TimePoint since =
        seen != forming_empty_since_.end() ? seen->second : time;
    if (!now && time - since < options_.forming_abandoned_after) {
      still_empty[id] = since;
      continue;
    }
    const int64_t waited_s =
        std::chrono::duration_cast<std::chrono::seconds>(time - since).count();
    const std::string cause = absl::StrCat(
        "no member present for ", waited_s, " s (",
        now ? "ended by `gdt-coord gangs gc`" : "forming_gang_abandon_seconds",
        ") at ", state::UtcTimeOfDay(clock_.UnixMillis()));
    if (absl::Status status = FailGang(gang, 0, cause, "forming_abandoned");
        !status.ok()) {
      spdlog::error("event=gang_fail_failed gang={} error={}", LogValue(id),
                    LogValue(status.ToString()));
      still_empty[id] = since;
      continue;
    }
    spdlog::warn("event=forming_gang_ended gang={} waited_s={} members={}",
                 LogValue(id), waited_s, gang.members.size());
    ended.push_back(id);
  }
  forming_empty_since_ = std::move(still_empty);
  return ended;
}

bool Scheduler::MemberHeld(const std::string& base_id,
                           const state::Member& member,
                           const std::set<int64_t>& watched) const {
  if (watched.count(member.job_id) != 0) return true;
  auto host = hosts_.find(member.host_name);
  if (host == hosts_.end()) return false;
  if (StateOf(host->second) == state::HostState::kDown) return false;
  auto reported = running_members_.find(member.host_name);
  if (reported == running_members_.end()) return true;  // It does not say.
  return reported->second.count(absl::StrCat(base_id, "/", member.job_id)) != 0;
}

std::vector<std::string> Scheduler::ReconcileMembers() {
  const Clock::TimePoint now = clock_.Now();
  std::set<int64_t> watched;
  for (const auto& [watch_id, job_id] : watch_jobs_) watched.insert(job_id);
  struct Gone {
    state::GangKey key;
    std::string gang_id;
    uint32_t index = 0;
    int64_t job_id = 0;
  };
  std::vector<Gone> gone;
  std::map<std::tuple<std::string, uint32_t, int64_t>, Clock::TimePoint>
      still_absent;
  for (const auto& [id, gang_ptr] : LiveGangs()) {
    const state::Gang& gang = *gang_ptr;
    if (!HoldsLeasesNow(gang)) continue;
    const std::string base_id = id.substr(0, id.find('#'));
    for (const auto& [index, member] : gang.members) {
      if (member.left || MemberHeld(base_id, member, watched)) continue;
      const std::tuple<std::string, uint32_t, int64_t> key(id, index,
                                                           member.job_id);
      auto seen = member_absent_since_.find(key);
      const Clock::TimePoint since =
          seen != member_absent_since_.end() ? seen->second : now;
      if (now - since < options_.member_gone_after) {
        still_absent[key] = since;
        continue;
      }
      gone.push_back(Gone{gang.key, id, index, member.job_id});
    }
  }
  member_absent_since_ = std::move(still_absent);
  std::vector<std::string> released;
  for (const Gone& member : gone) {
    state::Gang* gang = GangOfJob(member.key, member.index, member.job_id);
    if (gang == nullptr) continue;
    const int64_t bound_s = options_.member_gone_after.count();
    if (gang->state == state::GangState::kRunning && !AllReportedZero(*gang) &&
        gang->members.at(member.index).exit_code == -1) {
      const std::string cause = absl::StrCat(
          MemberLabel(*gang, gang->members.at(member.index)),
          " was lost: neither its agent nor its executor has held it for ",
          bound_s, " s (member_gone_after_seconds) at ",
          state::UtcTimeOfDay(clock_.UnixMillis()));
      if (absl::Status status =
              FailGang(*gang, member.index, cause, "member_lost");
          !status.ok()) {
        spdlog::error("event=gang_fail_failed gang={} error={}",
                      LogValue(member.gang_id), LogValue(status.ToString()));
        continue;
      }
    }
    if (absl::Status status = Leave(member.key, member.index, member.job_id);
        !status.ok()) {
      spdlog::error("event=member_reconcile_failed gang={} member={} error={}",
                    LogValue(member.gang_id), member.index,
                    LogValue(status.ToString()));
      continue;
    }
    spdlog::warn(
        "event=member_reconciled_left gang={} member={} job={} absent_s={} "
        "reason={}",
        LogValue(member.gang_id), member.index, member.job_id, bound_s,
        LogValue("no stage on its agent and no executor stream "
                 "(member_gone_after_seconds)"));
    released.push_back(absl::StrCat(member.gang_id, "/", member.index));
  }
  return released;
}

}  // namespace gdt::coordinator
