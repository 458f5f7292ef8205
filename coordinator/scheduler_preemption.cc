// Scheduler: enforcing checkpoint-aware preemption. The admission pass
// (scheduler.cc) picks victims through the policy; here a victim is given
// its checkpoint notice, watched for a checkpoint, and stopped with a
// failure that a retry brings back.
#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "coordinator/scheduler.h"
#include "spdlog/spdlog.h"

namespace gdt::coordinator {
namespace {

int64_t GpusOf(const state::Gang& gang) {
  int64_t gpus = 0;
  for (const auto& [index, member] : gang.members) {
    gpus += static_cast<int64_t>(member.gpu_indices.size());
  }
  return gpus;
}

}  // namespace

void Scheduler::StartPreemption(state::Gang& gang,
                                const PreemptedGang& victim) {
  if (gang.state != state::GangState::kRunning || gang.preempt_notice_ms != 0) {
    return;
  }
  const int64_t now_ms = clock_.UnixMillis();
  gang.preempt_notice_ms = now_ms;
  // The grace counts from this notice to the millisecond: the plan's
  // deadline is in whole seconds and would cut up to one off it.
  gang.preempt_stop_by_ms =
      std::max(victim.stop_by_unix_s * 1000,
               now_ms + options_.preemption.grace_s * 1000);
  gang.preempt_checkpoint_ms = 0;
  gang.preempt_by = victim.by;
  gang.preempt_by_priority = 0;
  if (auto head = gangs_.find(victim.by); head != gangs_.end()) {
    gang.preempt_by_priority = head->second.Priority();
  }
  gang.preempt_estimate_gpu_hours = victim.lost_gpu_hours;
  // Persisted, so a restarted coordinator still stops the gang at its
  // checkpoint or deadline (and sends the notice again). A failed write is
  // logged: the preemption goes on, only a restart would forget it.
  if (absl::Status saved = store_.SaveGang(gang); !saved.ok()) {
    spdlog::error("event=preemption_not_persisted gang={} error={}",
                  LogValue(gang.id), LogValue(saved.ToString()));
  }
  QueueNotice(gang);
  spdlog::warn(
      "event=preemption_started gang={} by={} lost_gpu_hours={:.2f} "
      "stop_by_unix_s={} reason={}",
      LogValue(gang.id), LogValue(victim.by), victim.lost_gpu_hours,
      gang.preempt_stop_by_ms / 1000, LogValue(victim.reason));
}

void Scheduler::QueueNotice(const state::Gang& gang) {
  notices_.push_back(PreemptionNotice{
      gang.id, gang.epoch, gang.preempt_stop_by_ms / 1000,
      absl::StrCat("preempted by the coordinator for gang ", gang.preempt_by,
                   " (priority ", gang.preempt_by_priority, ")")});
}

std::vector<Scheduler::PreemptionNotice> Scheduler::TakePreemptionNotices() {
  return std::exchange(notices_, {});
}

void Scheduler::NoteCheckpoint(const std::string& gang_id, uint32_t epoch) {
  auto found = gangs_.find(gang_id);
  if (found == gangs_.end()) return;
  state::Gang& gang = found->second;
  if (gang.epoch != epoch || gang.state != state::GangState::kRunning ||
      gang.preempt_notice_ms == 0 || gang.preempt_checkpoint_ms != 0) {
    return;
  }
  gang.preempt_checkpoint_ms = clock_.UnixMillis();
  if (absl::Status saved = store_.SaveGang(gang); !saved.ok()) {
    spdlog::error("event=preemption_not_persisted gang={} error={}",
                  LogValue(gang.id), LogValue(saved.ToString()));
  }
}

std::vector<std::string> Scheduler::StopPreemptedGangs() {
  std::vector<std::string> stopped;
  const int64_t now_ms = clock_.UnixMillis();
  for (auto& [id, gang_ptr] : LiveGangs()) {
    state::Gang& gang = *gang_ptr;
    // A withdrawn preemption (stop deadline 0) stops nothing any more.
    if (gang.state != state::GangState::kRunning ||
        gang.preempt_notice_ms == 0 || gang.preempt_stop_by_ms == 0) {
      continue;
    }
    const bool settled =
        gang.preempt_checkpoint_ms != 0 &&
        now_ms >= gang.preempt_checkpoint_ms + kPreemptionSettle.count();
    if (!settled && now_ms < gang.preempt_stop_by_ms) continue;
    if (!StillWaiting(gang.preempt_by)) {
      WithdrawPreemption(gang);
      continue;
    }
    if (absl::Status status = FailPreempted(gang, ""); !status.ok()) {
      spdlog::error("event=preemption_stop_failed gang={} error={}",
                    LogValue(id), LogValue(status.ToString()));
      continue;
    }
    stopped.push_back(id);
  }
  return stopped;
}

bool Scheduler::StillWaiting(const std::string& gang_id) const {
  auto head = gangs_.find(gang_id);
  return head != gangs_.end() &&
         head->second.state == state::GangState::kForming &&
         Complete(head->second);
}

void Scheduler::WithdrawPreemption(state::Gang& gang) {
  // The notice cannot be taken back: a training that heard it may still
  // stop on it, and its exit ends the gang as preempted (never as
  // succeeded). But the coordinator no longer stops a gang that ignored the
  // notice, or that checkpointed and kept running, for a gang that is gone.
  gang.preempt_stop_by_ms = 0;
  if (absl::Status saved = store_.SaveGang(gang); !saved.ok()) {
    spdlog::error("event=preemption_not_persisted gang={} error={}",
                  LogValue(gang.id), LogValue(saved.ToString()));
  }
  spdlog::warn(
      "event=preemption_withdrawn gang={} by={} reason=\"gang {} no longer "
      "waits with all its members (cancelled, left or started elsewhere)\"",
      LogValue(gang.id), LogValue(gang.preempt_by), gang.preempt_by);
}

absl::Status Scheduler::FailPreempted(state::Gang& gang,
                                      const std::string& early_exit) {
  const int64_t now_ms = clock_.UnixMillis();
  const int64_t gpus = GpusOf(gang);
  // After a checkpoint only the work since it is lost; without one, the
  // policy's estimate at the notice plus everything since.
  int64_t lost_gpu_seconds = 0;
  std::string how;
  if (gang.preempt_checkpoint_ms != 0) {
    lost_gpu_seconds = gpus * (now_ms - gang.preempt_checkpoint_ms) / 1000;
    how = absl::StrCat("after checkpoint at ",
                       state::UtcTimeOfDay(gang.preempt_checkpoint_ms));
  } else {
    lost_gpu_seconds = std::llround(gang.preempt_estimate_gpu_hours * 3600.0) +
                       gpus * (now_ms - gang.preempt_notice_ms) / 1000;
    how = absl::StrCat(
        "at ", state::UtcTimeOfDay(now_ms), " ",
        early_exit.empty()
            ? absl::StrCat("without a checkpoint within the ",
                           options_.preemption.grace_s, " s grace")
            : absl::StrCat("without a checkpoint (", early_exit, ")"));
  }
  lost_gpu_seconds = std::max<int64_t>(lost_gpu_seconds, 0);
  const double lost_hours = static_cast<double>(lost_gpu_seconds) / 3600.0;
  const uint32_t count = gang.preemptions + 1;
  const std::string cause = absl::StrCat(
      "preempted by gang ", gang.preempt_by, " (priority ",
      gang.preempt_by_priority, ") ", how, "; lost ~",
      absl::StrFormat("%.2f", lost_hours), " GPU-hours (preemption ", count,
      " of at most ", options_.preemption.max_preemptions,
      "); a retry resumes from the latest checkpoint");
  // FailGang persists the count with the failure, so that a retried gang
  // is still bounded by max_preemptions after a restart.
  const state::Gang before = gang;
  // Stopped for a gang of no higher priority, the gang had its turn: its
  // retry queues as if it had arrived later by the length of this run
  // (scheduling.md, "Preemption"). For a higher priority it keeps its place.
  gang.requeue_after_ms =
      gang.preempt_by_priority <= gang.Priority() && gang.started_unix_s > 0
          ? std::max<int64_t>(0, now_ms - gang.started_unix_s * 1000)
          : 0;
  gang.preemptions = count;
  gang.preempted_epoch = gang.epoch;
  gang.preempted_by = gang.preempt_by;
  gang.preempted_lost_gpu_seconds = lost_gpu_seconds;
  if (absl::Status status = FailGang(gang, 0, cause, "preempted");
      !status.ok()) {
    gang = before;
    return status;
  }
  observer_->Preempted(gang.id, lost_hours);
  return absl::OkStatus();
}

}  // namespace gdt::coordinator
