// Scheduler: retention of finished gangs. Pass() notes when each gang ends
// for good; PruneFinishedGangs() forgets those whose retention ran out, in
// the store and in memory, a bounded batch at a time.
#include <cstdint>
#include <limits>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "coordinator/scheduler.h"
#include "spdlog/spdlog.h"

namespace gdt::coordinator {

void Scheduler::NoteFinished(const std::string& gang_id) {
  if (options_.finished_gang_retention.count() <= 0) return;
  Clock::TimePoint since = clock_.Now();
  // The stored end time, where the gang has one, so that a restart or a
  // takeover does not start the count again (a clock set back counts as
  // now; a record without one counts from now).
  if (auto found = gangs_.find(gang_id);
      found != gangs_.end() && found->second.ended_unix_ms > 0) {
    const int64_t ago_ms = clock_.UnixMillis() - found->second.ended_unix_ms;
    if (ago_ms > 0) since -= std::chrono::milliseconds(ago_ms);
  }
  finished_since_[gang_id] = since;
  prune_queue_.emplace(since, gang_id);
}

std::string Scheduler::PruneBlocker(const state::Gang& gang) const {
  for (const auto& [watch_id, gang_id] : watchers_) {
    if (gang_id == gang.id) return "a watch stream is open on it";
  }
  for (const auto& [index, member] : gang.members) {
    auto host = gpu_leases_.find(member.host_name);
    if (host == gpu_leases_.end()) continue;
    for (uint32_t gpu : member.gpu_indices) {
      auto lease = host->second.find(gpu);
      if (lease != host->second.end() && lease->second == gang.id) {
        return absl::StrCat("GPU ", gpu, " of ", member.host_name,
                            " is leased to it");
      }
    }
  }
  if (auto host = port_leases_.find(gang.master_host);
      host != port_leases_.end()) {
    auto lease = host->second.find(gang.master_port);
    if (lease != host->second.end() && lease->second == gang.id) {
      return "its master port is leased to it";
    }
  }
  if (!IsArchivedEpoch(gang.id)) {
    // Its archived epochs go first: a fresh gang under this id numbers its
    // epochs from 1 again.
    const std::string prefix = gang.id + "#";
    auto archived = gangs_.lower_bound(prefix);
    if (archived != gangs_.end() &&
        archived->first.compare(0, prefix.size(), prefix) == 0) {
      return absl::StrCat("its archived epoch ", archived->first,
                          " is still kept");
    }
  }
  return "";
}

void Scheduler::ForgetGang(const std::string& gang_id) {
  auto found = gangs_.find(gang_id);
  if (found == gangs_.end()) return;
  const state::Gang& gang = found->second;
  if (!IsArchivedEpoch(gang_id)) {
    auto key = gang_ids_.find(gang.key);
    if (key != gang_ids_.end() && key->second == gang_id) gang_ids_.erase(key);
  }
  failed_holding_since_.erase({gang_id, gang.epoch});
  for (auto absent = member_absent_since_.lower_bound(
           {gang_id, 0, std::numeric_limits<int64_t>::min()});
       absent != member_absent_since_.end() &&
       std::get<0>(absent->first) == gang_id;) {
    absent = member_absent_since_.erase(absent);
  }
  peer_lists_.erase(gang_id);
  staying_.erase(gang_id);
  absences_.erase(gang_id);
  hang_reports_.erase(gang_id);
  forming_empty_since_.erase(gang_id);
  live_ids_.erase(gang_id);
  finished_since_.erase(gang_id);
  gangs_.erase(found);
}

std::vector<std::string> Scheduler::PruneFinishedGangs() {
  std::vector<std::string> pruned;
  const auto retention = options_.finished_gang_retention;
  if (retention.count() <= 0) return pruned;
  const Clock::TimePoint now = clock_.Now();
  if (last_prune_.has_value() && now - *last_prune_ < kPruneEvery) {
    return pruned;
  }
  last_prune_ = now;
  std::vector<std::string> later;  // Looked at again on the next call.
  for (size_t looked = 0; looked < kPruneBatch && !prune_queue_.empty();
       ++looked) {
    auto first = prune_queue_.begin();
    if (now - first->first < retention) break;
    const auto [since, id] = *first;
    prune_queue_.erase(first);
    auto noted = finished_since_.find(id);
    if (noted == finished_since_.end() || noted->second != since) continue;
    auto found = gangs_.find(id);
    const bool finished = found != gangs_.end() &&
                          (found->second.state == state::GangState::kDone ||
                           found->second.state == state::GangState::kFailed);
    bool all_left = finished;
    if (finished) {
      for (const auto& [index, member] : found->second.members) {
        if (!member.left) all_left = false;
      }
    }
    if (!all_left || live_ids_.contains(id)) {
      // It runs again (a retried job started its next epoch), or a member
      // of it never left: nothing to forget now.
      finished_since_.erase(noted);
      continue;
    }
    if (const std::string blocker = PruneBlocker(found->second);
        !blocker.empty()) {
      spdlog::debug("event=gang_prune_deferred gang={} reason={}", LogValue(id),
                    LogValue(blocker));
      later.push_back(id);
      continue;
    }
    if (absl::Status status = store_.DeleteGang(id); !status.ok()) {
      spdlog::error("event=gang_prune_failed gang={} error={}", LogValue(id),
                    LogValue(status.ToString()));
      later.push_back(id);
      break;  // The store fails: the rest waits too.
    }
    spdlog::info("event=gang_pruned gang={} state={} retention_hours={}",
                 LogValue(id), state::GangStateName(found->second.state),
                 retention.count());
    ForgetGang(id);
    observer_->GangPruned(id);
    pruned.push_back(id);
  }
  for (const std::string& id : later) {
    // Due again on the next call.
    const Clock::TimePoint due = now - retention + kPruneEvery;
    finished_since_[id] = due;
    prune_queue_.emplace(due, id);
  }
  // The coordinator drops the key-value stores of gangs that went.
  if (!pruned.empty()) ++end_changes_;
  return pruned;
}

}  // namespace gdt::coordinator
