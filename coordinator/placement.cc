#include "coordinator/placement.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string_view>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "policy/admission_policy.h"
#include "policy/topology.h"

namespace gdt::coordinator {

std::string FewNames(const std::vector<std::string>& names) {
  const size_t shown = std::min<size_t>(names.size(), 3);
  std::string text = absl::StrJoin(names.begin(), names.begin() + shown, ", ");
  if (names.size() > shown) {
    absl::StrAppend(&text, " and ", names.size() - shown, " more");
  }
  return text;
}

namespace {

policy::GangSpec SpecOf(const WaitingGang& gang) {
  policy::GangSpec spec;
  spec.id = gang.gang_id;
  spec.members = gang.members;
  spec.gpus_per_member = gang.gpus_per_member;
  spec.priority = gang.priority;
  spec.queue_time = gang.queue_time_unix_s;
  spec.run_bound = std::max<int64_t>(1, gang.run_bound_s);
  spec.same_label = gang.same_label;
  spec.same_required = gang.same_required && !gang.same_label.empty();
  spec.min_members = gang.min_members;
  return spec;
}

// The policy host through which members arriving from runners the daemon
// does not know join: drained, no GPUs, ample runner slots (so it always has
// a free one: an unknown runner may have one). Not a valid host name.
constexpr char kElsewhere[] = "(runner elsewhere)";
const std::string& ElsewhereName() {
  static const std::string* const name = new std::string(kElsewhere);
  return *name;
}

// A policy holding `hosts`; down hosts are marked down when `mark_down`,
// else drained (the daemon's policy takes joins through any host). Hosts
// whose agent is not ready are drained, except when `mark_down` (the
// feasibility check: a gang they could serve waits for them). Each host gets
// `slots_of(host)` runner slots.
template <typename SlotsOf>
policy::AdmissionPolicy BuildPolicy(const std::vector<PlacementHost>& hosts,
                                    const SlotsOf& slots_of,
                                    uint32_t max_nodes_per_job, bool mark_down,
                                    const PreemptionSettings& preemption = {}) {
  policy::PolicyOptions options{policy::Mode::kBackfill, max_nodes_per_job};
  if (preemption.enabled) {
    options.mode = policy::Mode::kPreempt;
    options.preempt.max_preemptions = preemption.max_preemptions;
    options.preempt.grace = preemption.grace_s;
    options.preempt.demote_after_gpu_seconds =
        preemption.demote_after_gpu_hours * 3600.0;
    options.preempt.min_run = preemption.min_run_s;
    options.preempt.overdue_backlog_fraction = preemption.overdue_fraction;
    options.preempt.served_behind_head = preemption.served_behind_head;
  }
  policy::AdmissionPolicy policy(options);
  for (const PlacementHost& host : hosts) {
    policy::HostSpec spec;
    spec.name = host.name;
    spec.gpus = static_cast<uint32_t>(host.gpu_indices.size());
    spec.runner_slots = slots_of(host);
    spec.labels = host.labels;
    spec.cpu_slots = std::max<uint32_t>(1, host.cpu_slots);
    if (!policy.AddHost(spec).ok()) continue;  // Duplicate name: first wins.
    if (host.drained || (host.not_ready && !mark_down) ||
        (host.down && !mark_down)) {
      policy.SetDrained(host.name, true).IgnoreError();
    }
    if (host.down && mark_down) policy.SetDown(host.name, true).IgnoreError();
  }
  return policy;
}

// What members of g GPUs (0: CPU slots) find on the hosts after the pass.
struct Room {
  uint64_t members = 0;               // How many more fit now.
  std::vector<std::string> holders;   // Gangs holding GPUs/slots there.
  std::vector<std::string> unusable;  // "gpu-03 drained", "gpu-04 down".
};

// Gangs holding GPUs or CPU slots, by host index: `names` holds each gang's
// id once and `by_host[h]` the numbers of the gangs on host h.
struct Holders {
  std::vector<const std::string*> names;
  std::vector<std::vector<uint32_t>> by_host;

  uint32_t Add(const std::string& gang_id) {
    names.push_back(&gang_id);
    return static_cast<uint32_t>(names.size() - 1);
  }
};

Room RoomFor(uint32_t g, const std::vector<PlacementHost>& hosts,
             const policy::AdmissionPolicy& policy, const Holders& holders) {
  Room room;
  std::vector<bool> seen(holders.names.size(), false);
  for (size_t h = 0; h < hosts.size(); ++h) {
    const PlacementHost& host = hosts[h];
    if (host.gpu_indices.size() < g) continue;
    if (host.down || host.drained || host.not_ready) {
      std::string state = host.down      ? " down"
                          : host.drained ? " drained"
                                         : " not ready";
      if (!host.down && !host.drained && !host.not_ready_reason.empty()) {
        absl::StrAppend(&state, " (", host.not_ready_reason, ")");
      }
      room.unusable.push_back(absl::StrCat(host.name, state));
      continue;
    }
    room.members += g == 0 ? policy.FreeCpuSlots(host.name)
                           : policy.FreeGpus(host.name) / g;
    for (const uint32_t holder : holders.by_host[h]) {
      if (seen[holder]) continue;
      seen[holder] = true;
      room.holders.push_back(*holders.names[holder]);
    }
  }
  return room;
}

// The line for a complete gang that does not start in this pass.
std::string WhyBlocked(const WaitingGang& gang, const Room& found,
                       const policy::AdmissionPolicy& policy,
                       int64_t now_unix_s) {
  const uint32_t g = gang.gpus_per_member;
  const uint64_t room = found.members;
  const std::vector<std::string>& holders = found.holders;
  const std::vector<std::string>& unusable = found.unusable;
  std::string why =
      g == 0 ? absl::StrCat("waiting for ", gang.members,
                            " free slots on up hosts (have ", room)
             : absl::StrCat("waiting for ", gang.members, " × ", g,
                            " free GPUs on up hosts (room for ", room);
  if (!holders.empty()) {
    absl::StrAppend(&why, g == 0 ? "; held by gang" : "; GPUs held by gang",
                    holders.size() > 1 ? "s " : " ", FewNames(holders));
  }
  why += ")";
  // Every reservation of the pass, the head's first (with preemption the
  // policy reserves for more than the head).
  const std::vector<policy::Reservation>& reservations = policy.reservations();
  std::vector<std::string> reserved;
  const policy::Reservation* mine = nullptr;
  for (const policy::Reservation& reservation : reservations) {
    if (reservation.gang_id == gang.gang_id) {
      mine = &reservation;
      break;
    }
    reserved.push_back(reservation.gang_id);
  }
  if (mine != nullptr) {
    const int64_t minutes =
        std::max<int64_t>(0, (mine->start - now_unix_s + 59) / 60);
    std::string after;
    if (!reserved.empty()) {
      after = absl::StrCat(" after gang", reserved.size() > 1 ? "s " : " ",
                           FewNames(reserved));
    }
    absl::StrAppend(&why, "; next in line", after, ", starting within ",
                    minutes,
                    " min at the latest (running gangs' job timeouts)");
  } else if (room >= gang.members) {
    if (reservations.size() == 1) {
      absl::StrAppend(&why, "; it would fit now but would delay gang ",
                      reservations[0].gang_id, ", which is next in line");
    } else if (!reservations.empty()) {
      absl::StrAppend(&why,
                      "; it would fit now but would delay the gangs next in "
                      "line (",
                      FewNames(reserved), ")");
    } else if (gang.same_required && !gang.same_label.empty()) {
      absl::StrAppend(&why, "; no single ", gang.same_label, " has room for ",
                      gang.members, " members");
    }
  }
  if (!unusable.empty()) {
    absl::StrAppend(&why, "; not taking gangs: ", FewNames(unusable));
  }
  return why;
}

}  // namespace

PlanOutcome PlanAdmissions(const std::vector<PlacementHost>& hosts,
                           const std::vector<RunningGang>& running,
                           const std::vector<WaitingGang>& complete,
                           int64_t now_unix_s,
                           const std::vector<WaitingGang>& incomplete,
                           const PreemptionSettings& preemption) {
  PlanOutcome outcome;
  if (hosts.empty()) return outcome;
  // Host names to indices into `hosts` (the first of a duplicate name).
  absl::flat_hash_map<std::string_view, size_t> index_of;
  index_of.reserve(hosts.size());
  for (size_t h = 0; h < hosts.size(); ++h) index_of.emplace(hosts[h].name, h);
  auto find_host = [&](const std::string& name) -> std::optional<size_t> {
    auto it = index_of.find(name);
    if (it == index_of.end()) return std::nullopt;
    return it->second;
  };
  // Every waiting gang, in arrival order (the policy's tie-break for
  // "youngest"), and the runner slots its present members hold.
  std::vector<const WaitingGang*> joining;
  joining.reserve(complete.size() + incomplete.size());
  for (const WaitingGang& gang : complete) joining.push_back(&gang);
  for (const WaitingGang& gang : incomplete) joining.push_back(&gang);
  std::stable_sort(joining.begin(), joining.end(),
                   [](const WaitingGang* a, const WaitingGang* b) {
                     return a->sequence < b->sequence;
                   });
  uint32_t ample = 1;
  std::vector<uint32_t> arrivals(hosts.size(), 0);  // Members per host.
  bool elsewhere = false;
  for (const WaitingGang* gang : joining) {
    for (const auto& [index, arrival] : gang->arrival_hosts) {
      ++ample;
      if (std::optional<size_t> h = find_host(arrival); h.has_value()) {
        ++arrivals[*h];
      } else {
        elsewhere = true;
      }
    }
  }
  // A declared count below the members present there is wrong: unknown.
  // A down host's runner serves nobody new: it has exactly the slots its
  // present members hold, none free, declared or not (else one down host
  // without runner_slots would hide every deadlock).
  auto slots_of = [&](const PlacementHost& host) {
    const uint32_t present = arrivals[index_of.at(host.name)];
    if (host.down) return present;
    return host.runner_slots == 0 || host.runner_slots < present
               ? ample
               : host.runner_slots;
  };
  policy::AdmissionPolicy policy =
      BuildPolicy(hosts, slots_of, std::numeric_limits<uint32_t>::max(),
                  /*mark_down=*/false, preemption);
  if (elsewhere && !index_of.contains(kElsewhere)) {
    policy::HostSpec spec;
    spec.name = kElsewhere;
    spec.runner_slots = ample;
    spec.cpu_slots = 1;
    if (policy.AddHost(spec).ok()) {
      policy.SetDrained(kElsewhere, true).IgnoreError();
    }
  }

  Holders holders;
  holders.by_host.resize(hosts.size());
  for (const RunningGang& gang : running) {
    const uint32_t holder = holders.Add(gang.gang_id);
    std::vector<policy::MemberPlacement> placements;
    bool cpu_only = true;
    for (const LeasedMember& member : gang.members) {
      policy::MemberPlacement placement;
      placement.member_index = static_cast<uint32_t>(placements.size() + 1);
      placement.host = member.host;
      if (std::optional<size_t> h = find_host(member.host); h.has_value()) {
        // Device indices to positions among the host's GPUs.
        const std::vector<uint32_t>& devices = hosts[*h].gpu_indices;
        for (const uint32_t gpu : member.gpu_indices) {
          auto p = std::find(devices.begin(), devices.end(), gpu);
          if (p != devices.end()) {
            placement.gpus.push_back(
                static_cast<uint32_t>(p - devices.begin()));
          }
        }
        std::vector<uint32_t>& on_host = holders.by_host[*h];
        if (on_host.empty() || on_host.back() != holder) {
          on_host.push_back(holder);
        }
      }
      if (!member.gpu_indices.empty()) cpu_only = false;
      placements.push_back(std::move(placement));
    }
    policy::GangSpec spec;
    spec.id = gang.gang_id;
    spec.members = static_cast<uint32_t>(placements.size());
    spec.gpus_per_member =
        cpu_only ? 0 : static_cast<uint32_t>(placements.front().gpus.size());
    spec.run_bound = 1;
    if (gang.start_unix_s > 0 && gang.start_unix_s < gang.end_bound_unix_s) {
      spec.run_bound = gang.end_bound_unix_s - gang.start_unix_s;
    }
    spec.queue_time = gang.queue_time_unix_s > 0
                          ? gang.queue_time_unix_s
                          : gang.end_bound_unix_s - spec.run_bound;
    spec.priority = gang.priority;
    spec.preemptible = gang.preemptible;
    spec.preemptions = gang.preemptions;
    spec.checkpoint_interval = gang.checkpoint_interval_s;
    // A lease on a host that left the inventory holds nothing here.
    policy.AddRunning(spec, placements, gang.end_bound_unix_s).IgnoreError();
  }

  absl::flat_hash_map<std::string_view, std::string> join_failures;
  // The policy numbers a gang's members 1..members: a gang offered with
  // only its present members (elastic) joins them by position, and
  // `member_of` maps positions back to member indices.
  absl::flat_hash_map<std::string_view, std::vector<uint32_t>> member_of;
  for (const WaitingGang* gang : joining) {
    const policy::GangSpec spec = SpecOf(*gang);
    std::vector<uint32_t>& indices = member_of[gang->gang_id];
    for (const auto& [index, arrival] : gang->arrival_hosts) {
      indices.push_back(index);
      const std::string& slot =
          index_of.contains(arrival) ? arrival : ElsewhereName();
      absl::Status joined =
          policy.Join(spec, static_cast<uint32_t>(indices.size()), slot);
      if (!joined.ok()) {
        join_failures[gang->gang_id] = std::string(joined.message());
        break;
      }
    }
  }

  const policy::Decisions decisions = policy.Schedule(now_unix_s);
  for (const policy::Bounce& bounce : decisions.bounced) {
    outcome.bounced.push_back(BouncedGang{bounce.gang_id, bounce.message});
  }
  for (const policy::Preemption& victim : decisions.preempted) {
    outcome.preempted.push_back(
        PreemptedGang{victim.gang_id, victim.by, victim.reason, victim.stop_by,
                      victim.lost_gpu_seconds / 3600.0});
  }
  absl::flat_hash_set<std::string_view> started;
  outcome.admitted.reserve(decisions.admitted.size());
  for (const policy::Admission& admission : decisions.admitted) {
    PlannedGang planned;
    planned.gang_id = admission.gang_id;
    const std::vector<uint32_t>& indices = member_of[admission.gang_id];
    const auto index_at = [&indices](uint32_t position) {
      return position >= 1 && position <= indices.size() ? indices[position - 1]
                                                         : position;
    };
    for (const uint32_t position : admission.not_needed) {
      planned.not_needed.push_back(index_at(position));
    }
    const uint32_t holder = holders.Add(admission.gang_id);
    std::vector<policy::RankInput> ranks;
    std::map<uint32_t, PlannedMember> by_index;
    for (const policy::MemberPlacement& member : admission.members) {
      const size_t h = index_of.at(member.host);
      const PlacementHost& host = hosts[h];
      PlannedMember out;
      out.member_index = index_at(member.member_index);
      out.host = member.host;
      for (const uint32_t p : member.gpus) {
        out.gpu_indices.push_back(host.gpu_indices[p]);
      }
      std::sort(out.gpu_indices.begin(), out.gpu_indices.end());
      ranks.push_back(
          policy::RankInput{out.member_index, member.host, host.labels});
      std::vector<uint32_t>& on_host = holders.by_host[h];
      if (on_host.empty() || on_host.back() != holder) {
        on_host.push_back(holder);
      }
      by_index[out.member_index] = std::move(out);
    }
    const std::vector<uint32_t> order = policy::OrderRanks(ranks);
    for (uint32_t rank = 0; rank < order.size(); ++rank) {
      PlannedMember member = by_index.at(order[rank]);
      member.node_rank = rank;
      planned.members.push_back(std::move(member));
    }
    started.insert(admission.gang_id);
    outcome.admitted.push_back(std::move(planned));
  }

  std::vector<const WaitingGang*> waiting;
  for (const WaitingGang& gang : complete) {
    if (!started.contains(gang.gang_id)) waiting.push_back(&gang);
  }
  std::sort(waiting.begin(), waiting.end(),
            [](const WaitingGang* a, const WaitingGang* b) {
              return std::make_tuple(-a->priority, a->sequence) <
                     std::make_tuple(-b->priority, b->sequence);
            });
  uint32_t position = 0;
  std::map<uint32_t, Room> rooms;
  for (const WaitingGang* gang : waiting) {
    BlockedGang blocked;
    blocked.queue_position = ++position;
    // The room depends only on the GPUs per member: once per size.
    auto room = rooms.find(gang->gpus_per_member);
    if (room == rooms.end()) {
      room =
          rooms
              .emplace(gang->gpus_per_member,
                       RoomFor(gang->gpus_per_member, hosts, policy, holders))
              .first;
    }
    auto failed = join_failures.find(gang->gang_id);
    if (failed == join_failures.end()) {
      blocked.why = WhyBlocked(*gang, room->second, policy, now_unix_s);
    } else if (absl::string_view why = failed->second;
               absl::EndsWith(why, policy::kDrainedOrDownTail) &&
               !room->second.unusable.empty()) {
      // The policy counts hosts whose agent is not ready as drained: name
      // each host that takes no gangs and why (the agent's reason).
      why.remove_suffix(absl::string_view(policy::kDrainedOrDownTail).size());
      blocked.why =
          absl::StrCat("cannot start now: ", why,
                       "; not taking gangs: ", FewNames(room->second.unusable));
    } else {
      blocked.why = absl::StrCat("cannot start now: ", failed->second);
    }
    outcome.blocked[gang->gang_id] = std::move(blocked);
  }
  return outcome;
}

absl::Status CheckFeasible(const std::vector<PlacementHost>& hosts,
                           const WaitingGang& gang,
                           uint32_t max_nodes_per_job) {
  const policy::AdmissionPolicy policy = BuildPolicy(
      hosts, [](const PlacementHost&) { return 1u; }, max_nodes_per_job,
      /*mark_down=*/true);
  return policy.CheckFeasible(SpecOf(gang));
}

}  // namespace gdt::coordinator
