#include "state/model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "absl/strings/str_cat.h"

namespace gdt::state {

std::string UtcTimeOfDay(int64_t unix_ms) {
  const std::time_t seconds = static_cast<std::time_t>(unix_ms / 1000);
  std::tm parts = {};
  gmtime_r(&seconds, &parts);
  char text[16];
  std::snprintf(text, sizeof(text), "%02d:%02d:%02d UTC", parts.tm_hour,
                parts.tm_min, parts.tm_sec);
  return text;
}

const char* GangStateName(GangState state) {
  switch (state) {
    case GangState::kForming:
      return "forming";
    case GangState::kRunning:
      return "running";
    case GangState::kDone:
      return "done";
    case GangState::kFailed:
      return "failed";
  }
  return "unknown";
}

absl::StatusOr<GangState> GangStateFromStored(int64_t value,
                                              const std::string& gang_id) {
  if (value < static_cast<int64_t>(GangState::kForming) ||
      value > static_cast<int64_t>(GangState::kFailed)) {
    return absl::DataLossError(absl::StrCat(
        "gang ", gang_id, " is stored in state ", value,
        ", which this gdt-coord does not know (a damaged row, or one a newer "
        "version wrote)"));
  }
  return static_cast<GangState>(value);
}

bool Member::SameRecord(const Member& other) const {
  return std::tie(index, job_id, job_name, gpus_per_node, procs_per_node,
                  launcher, arrival_host, job_timeout_seconds, left, node_rank,
                  host_name, gpu_indices, exit_code, preemptible) ==
         std::tie(other.index, other.job_id, other.job_name,
                  other.gpus_per_node, other.procs_per_node, other.launcher,
                  other.arrival_host, other.job_timeout_seconds, other.left,
                  other.node_rank, other.host_name, other.gpu_indices,
                  other.exit_code, other.preemptible);
}

int32_t Gang::Priority() const {
  if (members.empty()) return 0;
  int32_t priority = members.begin()->second.priority;
  for (const auto& [index, member] : members) {
    priority = std::max(priority, member.priority);
  }
  return priority;
}

uint32_t Gang::Size() const {
  if (!Elastic() || state == GangState::kForming) return key.size;
  uint32_t ranked = 0;
  for (const auto& [index, member] : members) {
    if (member.node_rank >= 0) ++ranked;
  }
  return ranked;
}

bool Gang::SameRecord(const Gang& other) const {
  if (std::tie(id, key, state, epoch, reason, master_host, master_addr,
               master_port, created_unix_ms, sequence, preemptions,
               preempted_epoch, preempted_by, preempted_lost_gpu_seconds,
               nodes_min, not_needed, ended_unix_ms) !=
      std::tie(other.id, other.key, other.state, other.epoch, other.reason,
               other.master_host, other.master_addr, other.master_port,
               other.created_unix_ms, other.sequence, other.preemptions,
               other.preempted_epoch, other.preempted_by,
               other.preempted_lost_gpu_seconds, other.nodes_min,
               other.not_needed, other.ended_unix_ms)) {
    return false;
  }
  // A preemption under way is kept only while the gang runs, and its
  // estimate in whole GPU-seconds.
  if (state == GangState::kRunning &&
      (std::tie(preempt_notice_ms, preempt_stop_by_ms, preempt_checkpoint_ms,
                preempt_by, preempt_by_priority) !=
           std::tie(other.preempt_notice_ms, other.preempt_stop_by_ms,
                    other.preempt_checkpoint_ms, other.preempt_by,
                    other.preempt_by_priority) ||
       std::llround(preempt_estimate_gpu_hours * 3600.0) !=
           std::llround(other.preempt_estimate_gpu_hours * 3600.0))) {
    return false;
  }
  if (members.size() != other.members.size()) return false;
  for (const auto& [index, member] : members) {
    auto it = other.members.find(index);
    if (it == other.members.end() || !member.SameRecord(it->second)) {
      return false;
    }
  }
  return true;
}

}  // namespace gdt::state
