#include "policy/admission_policy.h"

#include <algorithm>
#include <limits>
#include <string_view>
#include <tuple>

#include "absl/strings/str_cat.h"

namespace gdt::policy {
namespace {

constexpr uint32_t kUnlimited = std::numeric_limits<uint32_t>::max();

// Best-fit placement of members needing `gpus` each: every member goes to the
// usable host with the fewest GPUs left that still holds it, preferring the
// member's own runner host on ties. For equal-sized members this finds a
// placement whenever sum(floor(cap / gpus)) covers them. Only the hosts in
// `candidates` (ascending indices) may be used. Costs O(members ×
// candidates), independent of the number of hosts in `cap`.
std::optional<std::vector<size_t>> BestFit(
    uint32_t gpus, const std::vector<size_t>& preferred,
    const std::vector<size_t>& candidates, const std::vector<uint32_t>& cap) {
  std::vector<uint32_t> left(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) left[i] = cap[candidates[i]];
  std::vector<size_t> out;
  out.reserve(preferred.size());
  for (const size_t want : preferred) {
    size_t best = candidates.size();
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (left[i] < gpus) continue;
      if (best == candidates.size() || left[i] < left[best] ||
          (left[i] == left[best] && candidates[i] == want)) {
        best = i;
      }
    }
    if (best == candidates.size()) return std::nullopt;
    left[best] -= gpus;
    out.push_back(candidates[best]);
  }
  return out;
}

// Members of `gpus` GPUs each that hosts with these GPU counts can hold.
uint64_t Capacity(uint32_t gpus, const std::vector<uint32_t>& cap,
                  const std::vector<bool>& usable) {
  uint64_t total = 0;
  for (size_t h = 0; h < cap.size(); ++h) {
    if (!usable[h]) continue;
    if (gpus == 0) return kUnlimited;
    total += cap[h] / gpus;
  }
  return total;
}

}  // namespace

uint32_t ReservationDepth(const PolicyOptions& options) {
  if (options.reservation_depth != 0) return options.reservation_depth;
  return options.mode == Mode::kPreempt ? kPreemptReservationDepth : 1;
}

AdmissionPolicy::AdmissionPolicy(const PolicyOptions& options)
    : options_(options) {}

absl::Status AdmissionPolicy::AddHost(const HostSpec& spec) {
  if (spec.name.empty()) {
    return absl::InvalidArgumentError("host name is empty");
  }
  if (host_index_.count(spec.name) != 0) {
    return absl::AlreadyExistsError(absl::StrCat("host ", spec.name));
  }
  Host host;
  host.spec = spec;
  host.gpu_owner.assign(spec.gpus, -1);
  host.free_gpus = spec.gpus;
  host.free_slots = spec.runner_slots;
  host.free_cpu = spec.cpu_slots == 0 ? kUnlimited : spec.cpu_slots;
  feasibility_.clear();
  domains_.clear();
  host_index_[spec.name] = hosts_.size();
  host_names_.push_back(spec.name);
  hosts_.push_back(std::move(host));
  return absl::OkStatus();
}

absl::Status AdmissionPolicy::SetDrained(const std::string& host,
                                         bool drained) {
  auto it = host_index_.find(host);
  if (it == host_index_.end()) {
    return absl::NotFoundError(absl::StrCat("host ", host));
  }
  hosts_[it->second].drained = drained;
  feasibility_.clear();
  return absl::OkStatus();
}

absl::Status AdmissionPolicy::SetDown(const std::string& host, bool down) {
  auto it = host_index_.find(host);
  if (it == host_index_.end()) {
    return absl::NotFoundError(absl::StrCat("host ", host));
  }
  hosts_[it->second].down = down;
  feasibility_.clear();
  return absl::OkStatus();
}

namespace {

// Whether the host could serve the gang if it took gangs: enough GPUs and
// every label of the node selector.
bool Matches(const HostSpec& host, const GangSpec& spec) {
  if (host.gpus < spec.gpus_per_member) return false;
  for (const auto& [key, value] : spec.node_selector) {
    auto it = host.labels.find(key);
    if (it == host.labels.end() || it->second != value) return false;
  }
  return true;
}

}  // namespace

bool AdmissionPolicy::Eligible(const Host& host, const GangSpec& spec) const {
  return !host.drained && !host.down && Matches(host.spec, spec);
}

absl::Status AdmissionPolicy::CheckFeasible(const GangSpec& spec) const {
  if (spec.id.empty() || spec.members == 0 || spec.run_bound <= 0) {
    return absl::InvalidArgumentError(
        "a gang needs an id, at least one member and a positive run bound");
  }
  // Messages name the gang, so the cache keeps only successes.
  const FeasibilityKey key{spec.members, spec.gpus_per_member,
                           spec.node_selector, spec.same_label,
                           spec.same_required};
  if (feasibility_.count(key) != 0) return absl::OkStatus();
  absl::Status status = CheckFeasibleUncached(spec);
  if (status.ok()) feasibility_.emplace(key, status);
  return status;
}

absl::Status AdmissionPolicy::CheckFeasibleUncached(
    const GangSpec& spec) const {
  if (spec.id.empty() || spec.members == 0 || spec.run_bound <= 0) {
    return absl::InvalidArgumentError(
        "a gang needs an id, at least one member and a positive run bound");
  }
  const uint32_t g = spec.gpus_per_member;
  if (spec.members > options_.max_nodes_per_job) {
    return absl::FailedPreconditionError(absl::StrCat(
        "gang ", spec.id, " asks for ", spec.members, " nodes; the limit is ",
        options_.max_nodes_per_job, " nodes per job (max_nodes_per_job)"));
  }
  uint32_t largest = 0;
  for (const Host& host : hosts_) largest = std::max(largest, host.spec.gpus);
  if (g > largest) {
    return absl::FailedPreconditionError(
        absl::StrCat("gang ", spec.id, " asks for ", g,
                     " GPUs per node; the largest host has ", largest));
  }
  // CPU-only members count CPU slots, one each.
  const uint32_t unit = std::max<uint32_t>(g, 1);
  std::vector<uint32_t> total(hosts_.size());
  std::vector<bool> matching(hosts_.size());
  std::vector<bool> taking(hosts_.size());
  for (size_t h = 0; h < hosts_.size(); ++h) {
    const HostSpec& host = hosts_[h].spec;
    total[h] = g != 0 ? host.gpus
                      : (host.cpu_slots == 0 ? kUnlimited : host.cpu_slots);
    matching[h] = Matches(host, spec);
    taking[h] = matching[h] && !hosts_[h].drained && !hosts_[h].down;
  }
  const uint64_t able = Capacity(unit, total, matching);
  if (able < spec.members) {
    return absl::FailedPreconditionError(absl::StrCat(
        "gang ", spec.id, " needs ", spec.members, " nodes with ", g,
        " GPUs each; the hosts able to serve it hold only ", able,
        spec.node_selector.empty() ? "" : " (node selector applied)"));
  }
  const uint64_t up = Capacity(unit, total, taking);
  if (up < spec.members) {
    return absl::FailedPreconditionError(absl::StrCat(
        "gang ", spec.id, " needs ", spec.members, " nodes with ", g,
        " GPUs each; hosts taking gangs hold only ", up, kDrainedOrDownTail));
  }
  if (spec.same_required) {
    std::map<std::string, uint64_t> by_domain;
    for (size_t h = 0; h < hosts_.size(); ++h) {
      auto label = hosts_[h].spec.labels.find(spec.same_label);
      if (!matching[h] || label == hosts_[h].spec.labels.end()) continue;
      by_domain[label->second] += total[h] / unit;
    }
    uint64_t largest_domain = 0;
    for (const auto& [value, members] : by_domain) {
      largest_domain = std::max(largest_domain, members);
    }
    if (largest_domain < spec.members) {
      return absl::FailedPreconditionError(absl::StrCat(
          "gang ", spec.id, " requires all ", spec.members, " nodes in one ",
          spec.same_label, " but the largest ", spec.same_label, " holds only ",
          largest_domain, " of them"));
    }
  }
  return absl::OkStatus();
}

absl::Status AdmissionPolicy::Join(const GangSpec& spec, uint32_t member_index,
                                   const std::string& slot_host) {
  auto host_it = host_index_.find(slot_host);
  if (host_it == host_index_.end()) {
    return absl::NotFoundError(absl::StrCat("host ", slot_host));
  }
  Host& host = hosts_[host_it->second];
  auto gang_it = gangs_.find(spec.id);
  if (gang_it != gangs_.end()) {
    const Gang& gang = gang_it->second;
    if (gang.running) {
      return absl::FailedPreconditionError(
          absl::StrCat("gang ", spec.id, " is already running"));
    }
    if (gang.spec.members != spec.members ||
        gang.spec.gpus_per_member != spec.gpus_per_member) {
      return absl::InvalidArgumentError(
          absl::StrCat("gang ", spec.id, " was joined with a different shape"));
    }
  }
  if (member_index < 1 || member_index > spec.members) {
    return absl::InvalidArgumentError(absl::StrCat(
        "member index ", member_index, " is outside 1..", spec.members));
  }
  if (gang_it != gangs_.end() &&
      gang_it->second.present.count(member_index) != 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("gang ", spec.id, " member ", member_index));
  }
  if (host.down || host.free_slots == 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("no free runner slot on ", slot_host));
  }
  if (gang_it == gangs_.end()) {
    // An elastic gang needs room for its smallest size only.
    GangSpec smallest = spec;
    if (spec.min_members != 0 && spec.min_members < spec.members) {
      smallest.members = spec.min_members;
      // It may start whole, so its largest size is bounded as any gang's.
      if (spec.members > options_.max_nodes_per_job) {
        return absl::FailedPreconditionError(
            absl::StrCat("gang ", spec.id, " asks for up to ", spec.members,
                         " nodes; the limit is ", options_.max_nodes_per_job,
                         " nodes per job (max_nodes_per_job)"));
      }
    }
    if (absl::Status feasible = CheckFeasible(smallest); !feasible.ok()) {
      return feasible;
    }
    Gang gang;
    gang.spec = spec;
    gang.seq = next_seq_++;
    const QueueKey key{-spec.priority, spec.queue_time, gang.seq};
    gang_it = gangs_.emplace(spec.id, std::move(gang)).first;
    queue_[key] = &gang_it->second;
    if (spec.gpus_per_member == 0) ++cpu_only_waiting_;
  }
  --host.free_slots;
  gang_it->second.present[member_index] = Member{host_it->second, {}};
  Relist(gang_it->second);
  return absl::OkStatus();
}

void AdmissionPolicy::ReleaseGpus(int64_t seq, size_t host,
                                  const std::vector<uint32_t>& gpus) {
  for (const uint32_t gpu : gpus) {
    if (hosts_[host].gpu_owner[gpu] == seq) {
      hosts_[host].gpu_owner[gpu] = -1;
      ++hosts_[host].free_gpus;
    }
  }
}

absl::Status AdmissionPolicy::Leave(const std::string& gang_id,
                                    uint32_t member_index) {
  auto it = gangs_.find(gang_id);
  if (it == gangs_.end()) {
    return absl::NotFoundError(absl::StrCat("gang ", gang_id));
  }
  Gang& gang = it->second;
  if (gang.running) {
    return absl::FailedPreconditionError(
        absl::StrCat("gang ", gang_id, " is running; finish it instead"));
  }
  auto member = gang.present.find(member_index);
  if (member == gang.present.end()) {
    return absl::NotFoundError(
        absl::StrCat("gang ", gang_id, " member ", member_index));
  }
  ReleaseGpus(gang.seq, member->second.slot_host, member->second.gpus);
  ++hosts_[member->second.slot_host].free_slots;
  gang.present.erase(member);
  Relist(gang);
  return absl::OkStatus();
}

namespace {

// GPU-seconds of a waiting gang at its smallest size, for its run bound.
UInt128 WaitingWork(const GangSpec& spec) {
  // An elastic gang's run bound holds at its smallest size.
  const uint32_t members = spec.min_members != 0
                               ? std::min(spec.min_members, spec.members)
                               : spec.members;
  return static_cast<UInt128>(spec.run_bound) * members * spec.gpus_per_member;
}

}  // namespace

void AdmissionPolicy::Relist(Gang& gang) {
  const bool complete =
      !gang.running &&
      queue_.count(
          QueueKey{-gang.spec.priority, gang.spec.queue_time, gang.seq}) != 0 &&
      gang.present.size() == gang.spec.members;
  if (complete == gang.listed) return;
  const QueueKey key{-gang.spec.priority, gang.spec.queue_time, gang.seq};
  Lane& lane = lanes_[LaneKey{-gang.spec.priority, gang.spec.run_bound,
                              gang.spec.gpus_per_member, gang.spec.members,
                              IsPlain(gang.spec)}];
  const std::pair<Seconds, int64_t> in_lane{gang.spec.queue_time, gang.seq};
  if (complete) {
    complete_.emplace(key, &gang);
    lane.emplace(in_lane, &gang);
    waiting_work_ += WaitingWork(gang.spec);
  } else {
    complete_.erase(key);
    lane.erase(in_lane);
    waiting_work_ -= WaitingWork(gang.spec);
  }
  gang.listed = complete;
}

void AdmissionPolicy::PruneLanes() {
  for (auto it = lanes_.begin(); it != lanes_.end();) {
    it = it->second.empty() ? lanes_.erase(it) : std::next(it);
  }
}

void AdmissionPolicy::Dequeue(Gang& gang) {
  queue_.erase(QueueKey{-gang.spec.priority, gang.spec.queue_time, gang.seq});
  Relist(gang);
  if (gang.spec.gpus_per_member == 0) --cpu_only_waiting_;
}

AdmissionPolicy::Merge::Merge(const std::map<LaneKey, Lane>& lanes, First first,
                              Seconds now, double overdue_after)
    : first_(first), now_(now), overdue_after_(overdue_after) {
  for (const auto& [key, lane] : lanes) {
    if (lane.empty()) continue;
    heap_.push_back(fronts_.size());
    fronts_.emplace_back(lane.begin(), lane.end());
  }
  std::make_heap(heap_.begin(), heap_.end(),
                 [this](size_t a, size_t b) { return Later(a, b); });
}

bool AdmissionPolicy::Merge::Later(size_t a, size_t b) const {
  return first_(*fronts_[b].first->second, *fronts_[a].first->second, now_,
                overdue_after_);
}

AdmissionPolicy::Gang* AdmissionPolicy::Merge::Next() {
  auto later = [this](size_t a, size_t b) { return Later(a, b); };
  if (pending_) std::push_heap(heap_.begin(), heap_.end(), later);
  pending_ = false;
  if (heap_.empty()) return nullptr;
  std::pop_heap(heap_.begin(), heap_.end(), later);
  auto& [front, end] = fronts_[heap_.back()];
  Gang* gang = front->second;
  // Past it before the caller may take it off the queue.
  if (++front == end) {
    heap_.pop_back();
  } else {
    pending_ = true;
  }
  return gang;
}

void AdmissionPolicy::Merge::DropLast() {
  if (pending_) heap_.pop_back();
  pending_ = false;
}

void AdmissionPolicy::Merge::Keep(absl::FunctionRef<bool(const Gang&)> keep) {
  pending_ = false;  // The lane drawn from last is rebuilt in with the rest.
  std::erase_if(heap_,
                [&](size_t i) { return !keep(*fronts_[i].first->second); });
  std::make_heap(heap_.begin(), heap_.end(),
                 [this](size_t a, size_t b) { return Later(a, b); });
}

void AdmissionPolicy::RemoveGang(const std::string& id) {
  auto it = gangs_.find(id);
  Gang& gang = it->second;
  for (const auto& [index, member] : gang.present) {
    ReleaseGpus(gang.seq, member.slot_host, member.gpus);
    ++hosts_[member.slot_host].free_slots;
  }
  for (const auto& [host, gpus] : gang.placement) {
    ReleaseGpus(gang.seq, host, gpus);
    if (gang.spec.gpus_per_member == 0 && hosts_[host].free_cpu != kUnlimited &&
        hosts_[host].free_cpu < hosts_[host].spec.cpu_slots) {
      ++hosts_[host].free_cpu;
    }
  }
  if (gang.running) {
    running_.erase({gang.end_bound, id});
  } else {
    Dequeue(gang);
  }
  gangs_.erase(it);
}

absl::Status AdmissionPolicy::Finish(const std::string& gang_id) {
  auto it = gangs_.find(gang_id);
  if (it == gangs_.end()) {
    return absl::NotFoundError(absl::StrCat("gang ", gang_id));
  }
  if (!it->second.running) {
    return absl::FailedPreconditionError(
        absl::StrCat("gang ", gang_id, " is not running"));
  }
  RemoveGang(gang_id);
  return absl::OkStatus();
}

absl::Status AdmissionPolicy::AddRunning(
    const GangSpec& spec, const std::vector<MemberPlacement>& members,
    Seconds end_bound) {
  if (spec.id.empty() || members.empty()) {
    return absl::InvalidArgumentError("a running gang needs an id and members");
  }
  if (gangs_.count(spec.id) != 0) {
    return absl::AlreadyExistsError(absl::StrCat("gang ", spec.id));
  }
  // Check everything before changing anything.
  std::vector<std::pair<size_t, std::vector<uint32_t>>> placement;
  std::map<size_t, uint32_t> cpu_members;
  for (const MemberPlacement& member : members) {
    auto host = host_index_.find(member.host);
    if (host == host_index_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gang ", spec.id, " runs on unknown host ", member.host));
    }
    std::set<uint32_t> seen;
    for (const uint32_t gpu : member.gpus) {
      const Host& h = hosts_[host->second];
      if (gpu >= h.gpu_owner.size() || h.gpu_owner[gpu] != -1 ||
          !seen.insert(gpu).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("gang ", spec.id, " holds GPU ", gpu, " of ",
                         member.host, ", which is not free"));
      }
    }
    if (spec.gpus_per_member == 0) ++cpu_members[host->second];
    placement.emplace_back(host->second, member.gpus);
  }
  Gang gang;
  gang.spec = spec;
  gang.seq = next_seq_++;
  gang.running = true;
  gang.end_bound = end_bound;
  for (const auto& [h, gpus] : placement) {
    for (const uint32_t gpu : gpus) hosts_[h].gpu_owner[gpu] = gang.seq;
    hosts_[h].free_gpus -= static_cast<uint32_t>(gpus.size());
  }
  for (const auto& [h, count] : cpu_members) {
    if (hosts_[h].free_cpu != kUnlimited) {
      // The daemon may hold more than the limit after a config change.
      hosts_[h].free_cpu -= std::min(hosts_[h].free_cpu, count);
    }
  }
  gang.placement = std::move(placement);
  gang.start = end_bound - spec.run_bound;
  Gang& added = gangs_.emplace(spec.id, std::move(gang)).first->second;
  running_.emplace(std::pair{end_bound, spec.id}, &added);
  return absl::OkStatus();
}

std::optional<Bounce> AdmissionPolicy::BreakDeadlock() {
  // Runner slots able to serve anyone are those on hosts that are up. The
  // gangs waiting for members can never complete when none of those slots is
  // free and every one is held by a member of such a gang: running gangs and
  // complete gangs free theirs eventually, incomplete ones never do.
  uint32_t up_slots = 0;
  for (const Host& host : hosts_) {
    if (host.down) continue;
    if (host.free_slots != 0) return std::nullopt;
    up_slots += host.spec.runner_slots;
  }
  if (up_slots == 0) return std::nullopt;
  uint32_t held_by_incomplete = 0;
  const Gang* victim = nullptr;
  size_t incomplete = 0;
  for (const auto& [id, gang] : gangs_) {
    const bool complete = gang.present.size() == gang.spec.members;
    uint32_t held_here = 0;
    for (const auto& [index, member] : gang.present) {
      if (!hosts_[member.slot_host].down) ++held_here;
    }
    if (gang.running || complete) {
      if (held_here != 0) return std::nullopt;
      continue;
    }
    ++incomplete;
    held_by_incomplete += held_here;
    if (held_here == 0) continue;
    // Lowest priority first, then the youngest.
    if (victim == nullptr ||
        std::make_tuple(-gang.spec.priority, gang.spec.queue_time, gang.seq) >
            std::make_tuple(-victim->spec.priority, victim->spec.queue_time,
                            victim->seq)) {
      victim = &gang;
    }
  }
  if (victim == nullptr || held_by_incomplete != up_slots) return std::nullopt;
  Bounce bounce;
  bounce.gang_id = victim->spec.id;
  bounce.message = absl::StrCat(
      "sent back to GitLab with ", victim->present.size(), "/",
      victim->spec.members,
      " members present to break a runner-slot deadlock: all ", up_slots,
      " runner slots are held by ", incomplete,
      " incomplete gangs. Its jobs end with a system failure; a `retry:` "
      "that covers runner_system_failure (gdt-ci expand writes one) runs "
      "them again.");
  RemoveGang(bounce.gang_id);
  return bounce;
}

std::optional<std::vector<size_t>> AdmissionPolicy::Place(
    const Gang& gang, const std::vector<uint32_t>* extra) const {
  // Only the candidates' entries of `cap` are written and read.
  std::vector<uint32_t>& cap = place_cap_scratch_;
  std::vector<size_t>& candidates = place_hosts_scratch_;
  cap.resize(hosts_.size());
  candidates.clear();
  const GangSpec& spec = gang.spec;
  const uint32_t unit = std::max<uint32_t>(spec.gpus_per_member, 1);
  const bool gpus = spec.gpus_per_member != 0;
  const bool selector = !spec.node_selector.empty();
  for (size_t h = 0; h < hosts_.size(); ++h) {
    const Host& host = hosts_[h];
    uint32_t units = gpus ? host.free_gpus : host.free_cpu;
    if (extra != nullptr) units = std::min(units, (*extra)[h]);
    if (units < unit || host.drained || host.down ||
        (selector && !Matches(host.spec, spec))) {
      continue;
    }
    cap[h] = units;
    candidates.push_back(h);
  }
  return PlaceOn(gang, cap, candidates);
}

std::optional<std::vector<size_t>> AdmissionPolicy::PlaceOn(
    const Gang& gang, const std::vector<uint32_t>& cap) const {
  const uint32_t unit = std::max<uint32_t>(gang.spec.gpus_per_member, 1);
  std::vector<size_t> all;
  all.reserve(hosts_.size());
  for (size_t h = 0; h < hosts_.size(); ++h) {
    if (cap[h] >= unit) all.push_back(h);
  }
  return PlaceOn(gang, cap, all);
}

uint32_t AdmissionPolicy::FreeUnits(const Host& host,
                                    const GangSpec& spec) const {
  return spec.gpus_per_member == 0 ? host.free_cpu : host.free_gpus;
}

std::optional<std::vector<size_t>> AdmissionPolicy::PlaceOn(
    const Gang& gang, const std::vector<uint32_t>& cap,
    const std::vector<size_t>& all) const {
  const uint32_t unit = std::max<uint32_t>(gang.spec.gpus_per_member, 1);
  std::vector<size_t> preferred;
  preferred.reserve(gang.present.size());
  for (const auto& [index, member] : gang.present) {
    preferred.push_back(member.slot_host);
  }
  if (gang.spec.same_label.empty()) {
    return BestFit(unit, preferred, all, cap);
  }
  // One domain per value of the label: the tightest domain that holds the
  // whole gang wins (least capacity left over), like best fit for hosts.
  const Domains& index = DomainsOf(gang.spec.same_label);
  std::vector<std::vector<size_t>> domains(index.count);
  for (const size_t h : all) {
    if (index.domain_of[h] >= 0) domains[index.domain_of[h]].push_back(h);
  }
  std::optional<std::vector<size_t>> best;
  uint64_t best_left = 0;
  for (const std::vector<size_t>& members : domains) {
    if (members.empty()) continue;
    uint64_t room = 0;
    uint64_t left = 0;
    for (const size_t h : members) {
      room += cap[h] / unit;
      left += cap[h];
    }
    if (room < gang.present.size()) continue;
    std::optional<std::vector<size_t>> placed =
        BestFit(unit, preferred, members, cap);
    if (!placed.has_value()) continue;
    left -= uint64_t{unit} * placed->size();
    if (!best.has_value() || left < best_left) {
      best = std::move(placed);
      best_left = left;
    }
  }
  if (best.has_value() || gang.spec.same_required) return best;
  return BestFit(unit, preferred, all, cap);
}

const AdmissionPolicy::Domains& AdmissionPolicy::DomainsOf(
    const std::string& label) const {
  auto cached = domains_.find(label);
  if (cached != domains_.end()) return cached->second;
  std::map<std::string_view, int32_t> ranks;
  for (const Host& host : hosts_) {
    auto value = host.spec.labels.find(label);
    if (value != host.spec.labels.end()) ranks.emplace(value->second, 0);
  }
  int32_t next = 0;
  for (auto& [value, rank] : ranks) rank = next++;
  Domains domains;
  domains.count = ranks.size();
  domains.domain_of.reserve(hosts_.size());
  for (const Host& host : hosts_) {
    auto value = host.spec.labels.find(label);
    domains.domain_of.push_back(
        value == host.spec.labels.end() ? -1 : ranks.at(value->second));
  }
  return domains_.emplace(label, std::move(domains)).first->second;
}

Admission AdmissionPolicy::Commit(Gang& gang, const std::vector<size_t>& hosts,
                                  Seconds now) {
  Admission admission;
  admission.gang_id = gang.spec.id;
  size_t i = 0;
  for (const auto& [index, member] : gang.present) {
    Host& host = hosts_[hosts[i++]];
    MemberPlacement placement;
    placement.member_index = index;
    placement.host = host.spec.name;
    for (uint32_t gpu = 0; gpu < host.gpu_owner.size() &&
                           placement.gpus.size() < gang.spec.gpus_per_member;
         ++gpu) {
      if (host.gpu_owner[gpu] == -1) {
        host.gpu_owner[gpu] = gang.seq;
        placement.gpus.push_back(gpu);
      }
    }
    host.free_gpus -= static_cast<uint32_t>(placement.gpus.size());
    if (gang.spec.gpus_per_member == 0 && host.free_cpu != kUnlimited) {
      --host.free_cpu;
    }
    gang.placement.emplace_back(hosts[i - 1], placement.gpus);
    admission.members.push_back(std::move(placement));
  }
  Dequeue(gang);
  gang.running = true;
  gang.start = now;
  gang.end_bound = now + gang.spec.run_bound;
  running_.emplace(std::pair{gang.end_bound, gang.spec.id}, &gang);
  return admission;
}

bool AdmissionPolicy::Reserve(const Gang& head, Seconds now,
                              std::vector<Held>& held) {
  const uint32_t g = head.spec.gpus_per_member;
  // CPU-only gangs do not compete for GPUs: they need no reservation.
  if (g == 0) return false;
  const size_t n_hosts = hosts_.size();
  std::vector<uint32_t> cap(n_hosts);
  std::vector<bool> usable(n_hosts);
  for (size_t h = 0; h < n_hosts; ++h) {
    usable[h] = Eligible(hosts_[h], head.spec);
    cap[h] = hosts_[h].free_gpus;
  }
  // The earlier reservations by start; suffix[i][h] is the least any of
  // sorted[i..] has left on h: what a gang starting before them may take
  // there for good.
  std::vector<size_t> sorted(held.size());
  for (size_t i = 0; i < held.size(); ++i) sorted[i] = i;
  std::stable_sort(sorted.begin(), sorted.end(), [&](size_t a, size_t b) {
    return held[a].start < held[b].start;
  });
  std::vector<std::vector<uint32_t>> suffix(
      held.size() + 1, std::vector<uint32_t>(n_hosts, kUnlimited));
  for (size_t i = held.size(); i-- > 0;) {
    for (size_t h = 0; h < n_hosts; ++h) {
      suffix[i][h] = std::min(suffix[i + 1][h], held[sorted[i]].left[h]);
    }
  }
  std::vector<uint32_t> taken(n_hosts, 0);  // By reservations started.
  size_t started = 0;
  // What host h may give the gang for good: what it has at this point of
  // the replay, less what the reservations started by then take, and no
  // more than the later ones leave over; 0 where the gang may not run.
  auto usable_on = [&](size_t h) -> uint32_t {
    if (!usable[h]) return 0;
    const uint32_t now_left = cap[h] > taken[h] ? cap[h] - taken[h] : 0;
    return std::min(now_left, suffix[started][h]);
  };
  // Replay the running gangs' ends (at their run bounds) until it fits.
  // `room` is the members that fit on usable_on() of every host, kept up to
  // date as GPUs come back (one host at a time) and reservations start (all
  // hosts): a placement is tried only where the count allows one.
  uint64_t room = 0;
  for (size_t h = 0; h < n_hosts; ++h) room += usable_on(h) / g;
  Seconds start = -1;
  std::optional<std::vector<size_t>> hosts;
  std::vector<uint32_t> usable_cap(n_hosts, 0);
  for (auto it = running_.begin(); it != running_.end(); ++it) {
    for (const auto& [host, gpus] : it->second->placement) {
      room -= usable_on(host) / g;
      cap[host] += static_cast<uint32_t>(gpus.size());
      room += usable_on(host) / g;
    }
    auto next = std::next(it);
    if (next != running_.end() && next->first.first == it->first.first) {
      continue;
    }
    const Seconds at = std::max(it->first.first, now);
    if (started < sorted.size() && held[sorted[started]].start <= at) {
      while (started < sorted.size() && held[sorted[started]].start <= at) {
        const Held& earlier = held[sorted[started++]];
        for (size_t h = 0; h < n_hosts; ++h) taken[h] += earlier.take[h];
      }
      room = 0;
      for (size_t h = 0; h < n_hosts; ++h) room += usable_on(h) / g;
    }
    if (room < head.spec.members) continue;
    for (size_t h = 0; h < n_hosts; ++h) usable_cap[h] = usable_on(h);
    hosts = PlaceOn(head, usable_cap);
    if (hosts.has_value()) {
      start = at;
      break;
    }
  }
  if (start < 0 || !hosts.has_value()) return false;
  Held mine;
  mine.start = start;
  mine.take.assign(n_hosts, 0);
  for (const size_t h : *hosts) mine.take[h] += g;
  mine.left.resize(n_hosts);
  for (size_t h = 0; h < n_hosts; ++h) {
    const uint32_t total = taken[h] + mine.take[h];
    mine.left[h] = cap[h] > total ? cap[h] - total : 0;
  }
  for (Held& other : held) {
    if (other.start < start) continue;
    for (size_t h = 0; h < n_hosts; ++h) {
      other.left[h] -= std::min(other.left[h], mine.take[h]);
    }
  }
  Reservation reservation;
  reservation.gang_id = head.spec.id;
  reservation.start = start;
  for (const size_t h : *hosts) {
    reservation.gpus_by_host[hosts_[h].spec.name] += g;
  }
  reservations_.push_back(std::move(reservation));
  held.push_back(std::move(mine));
  return true;
}

void AdmissionPolicy::ScheduleGangs(Seconds now, Decisions& out) {
  const size_t n_hosts = hosts_.size();
  // The reservations of this pass (Held), in the order made; by_start
  // lists them by start (ties in the order made) and starts holds those
  // starts. A gang ending at e is of class c, the number of reservations
  // starting before e: it may use on each host only what each of those c
  // leaves over (caps[c - 1]); class 0 is not limited.
  std::vector<Held> held;
  std::vector<size_t> by_start;
  std::vector<Seconds> starts;
  std::vector<std::vector<uint32_t>> caps;
  bool reserved = false;
  uint64_t free_total = 0;
  for (const Host& host : hosts_) {
    if (!host.drained && !host.down) free_total += host.free_gpus;
  }
  // Shapes that already failed in this pass, by class: GPUs only get scarcer
  // within a pass, so a gang with at least as many members and GPUs per
  // member cannot fit either. fewest[c][g] is the fewest members that failed
  // with at most g GPUs per member.
  uint32_t largest = 0;
  for (const Host& host : hosts_) largest = std::max(largest, host.spec.gpus);
  std::vector<std::vector<uint32_t>> fewest(
      1, std::vector<uint32_t>(largest + 1, kUnlimited));
  // hosts_with[f]: hosts taking gangs with exactly f free GPUs. Members of g
  // GPUs fit at most sum(hosts_with[f] * floor(f / g)) times: a cheap upper
  // bound that skips gangs which cannot fit before any placement is tried.
  std::vector<uint32_t> hosts_with(largest + 1, 0);
  for (const Host& host : hosts_) {
    if (!host.drained && !host.down) ++hosts_with[host.free_gpus];
  }
  // The same over min(free, caps[c - 1]), by class c >= 1.
  std::vector<std::vector<uint32_t>> capped_with;
  auto taking = [&](size_t h) { return !hosts_[h].drained && !hosts_[h].down; };
  auto capped = [&](size_t c, size_t h) {
    return std::min(hosts_[h].free_gpus, caps[c][h]);
  };
  auto room_for = [&](const std::vector<uint32_t>& histogram, uint32_t g) {
    uint64_t room = 0;
    for (uint32_t f = g; f <= largest; ++f) room += histogram[f] * (f / g);
    return room;
  };
  auto class_of = [&](const GangSpec& spec) {
    return static_cast<size_t>(
        std::lower_bound(starts.begin(), starts.end(), now + spec.run_bound) -
        starts.begin());
  };
  // caps of host h from the reservations' `left`.
  auto cap_host = [&](size_t h) {
    for (size_t c = 0; c < caps.size(); ++c) {
      caps[c][h] = std::min(c == 0 ? kUnlimited : caps[c - 1][h],
                            held[by_start[c]].left[h]);
    }
  };
  // Recounts what is free and the caps, after a change outside try_start().
  auto recount = [&] {
    free_total = 0;
    std::fill(hosts_with.begin(), hosts_with.end(), 0);
    for (size_t h = 0; h < n_hosts; ++h) {
      if (!taking(h)) continue;
      free_total += hosts_[h].free_gpus;
      ++hosts_with[hosts_[h].free_gpus];
    }
    caps.assign(held.size(), std::vector<uint32_t>(n_hosts));
    capped_with.assign(held.size(), std::vector<uint32_t>(largest + 1, 0));
    for (size_t h = 0; h < n_hosts; ++h) {
      cap_host(h);
      if (!taking(h)) continue;
      for (size_t c = 0; c < caps.size(); ++c) ++capped_with[c][capped(c, h)];
    }
  };
  // A gang of class `cls` took `placement`: the reservations starting while
  // it runs have that much less left.
  auto charge = [&](size_t cls, const Gang& gang) {
    for (size_t c = 0; c < cls; ++c) {
      std::vector<uint32_t>& left = held[by_start[c]].left;
      for (const auto& [h, gpus] : gang.placement) {
        const uint32_t used = static_cast<uint32_t>(gpus.size());
        left[h] -= std::min(left[h], used);
      }
    }
  };
  // Tries to start `gang` now; false when it does not fit (or would delay
  // a reservation).
  auto try_start = [&](Gang& gang) {
    const GangSpec& spec = gang.spec;
    const size_t cls = class_of(spec);
    // The shape shortcut holds for GPU gangs without placement constraints.
    const bool plain = spec.node_selector.empty() && spec.same_label.empty() &&
                       spec.gpus_per_member != 0;
    const uint32_t g = spec.gpus_per_member;
    std::optional<std::vector<size_t>> hosts;
    const uint64_t need = uint64_t{spec.members} * g;
    if (need <= free_total && !(plain && spec.members >= fewest[cls][g]) &&
        (g == 0 || room_for(cls != 0 ? capped_with[cls - 1] : hosts_with, g) >=
                       spec.members)) {
      // CPU-only gangs use no GPUs, so the reservations do not limit them.
      hosts = Place(gang, cls != 0 && g != 0 ? &caps[cls - 1] : nullptr);
    }
    if (hosts.has_value()) {
      std::vector<size_t> used(hosts->begin(), hosts->end());
      std::sort(used.begin(), used.end());
      used.erase(std::unique(used.begin(), used.end()), used.end());
      // The hosts used leave the histograms before the commit and come
      // back with what they have left after it.
      for (const size_t h : used) {
        if (!taking(h)) continue;
        --hosts_with[hosts_[h].free_gpus];
        for (size_t c = 0; c < caps.size(); ++c) --capped_with[c][capped(c, h)];
      }
      out.admitted.push_back(Commit(gang, *hosts, now));
      free_total -= need;
      charge(cls, gang);
      for (const size_t h : used) {
        cap_host(h);
        if (!taking(h)) continue;
        ++hosts_with[hosts_[h].free_gpus];
        for (size_t c = 0; c < caps.size(); ++c) ++capped_with[c][capped(c, h)];
      }
      return true;
    }
    if (plain) {
      for (uint32_t k = g; k <= largest; ++k) {
        fewest[cls][k] = std::min(fewest[cls][k], spec.members);
      }
    }
    return false;
  };
  // Once the head is reserved and not even one GPU can be placed, only
  // CPU-only gangs could still start.
  auto nothing_fits = [&] {
    return reserved && cpu_only_waiting_ == 0 &&
           (free_total == 0 || fewest[0][1] <= 1);
  };
  // kPreempt with overdue gangs: the head is taken, by priority, from the
  // overdue gangs in queue order, then from the others by aged key (ties in
  // queue order), so preemption serves the oldest overdue gang or else the
  // one aging favours: a merge of the lanes. Otherwise the heads come in
  // queue order. Only complete gangs are tried.
  PruneLanes();
  overdue_after_ = -1;
  const bool aged_head =
      options_.mode == Mode::kPreempt &&
      options_.backfill_order == BackfillOrder::kAgedShortestFirst &&
      options_.preempt.overdue_backlog_fraction > 0;
  if (aged_head) overdue_after_ = OverdueAfter(now);
  std::optional<Merge> merge;
  if (aged_head) merge.emplace(lanes_, &GoesFirstAt, now, overdue_after_);
  auto queued = complete_.begin();  // Queue order: the next gang to try.
  auto next_gang = [&]() -> Gang* {
    if (aged_head) return merge->Next();
    // Past it before it may leave the queue.
    return queued == complete_.end() ? nullptr : (queued++)->second;
  };
  const size_t depth = ReservationDepth(options_);
  // In that order until the first `depth` gangs that do not fit (the head
  // first) have their reservations: each gang in between starts now if it
  // delays none of the reservations made before it.
  while (held.size() < depth) {
    Gang* candidate = next_gang();
    if (candidate == nullptr) break;
    Gang& gang = *candidate;
    if (try_start(gang)) continue;
    if (options_.mode == Mode::kStrictFifo) return;
    if (gang.spec.min_members != 0 &&
        gang.spec.min_members < gang.spec.members) {
      const size_t cls = class_of(gang.spec);
      if (StartSmaller(gang, now, out, cls != 0 ? &caps[cls - 1] : nullptr)) {
        // Outside try_start(): recount what is free.
        charge(cls, gang);
        recount();
        continue;
      }
    }
    if (!Reserve(gang, now, held)) continue;
    reserved = true;
    const Seconds start = held.back().start;
    const auto at = std::upper_bound(starts.begin(), starts.end(), start);
    by_start.insert(by_start.begin() + (at - starts.begin()), held.size() - 1);
    starts.insert(at, start);
    // The classes above 0 now name other sets of reservations: their
    // failed shapes are forgotten. Class 0 still means no limit.
    fewest.resize(1);
    fewest.resize(held.size() + 1,
                  std::vector<uint32_t>(largest + 1, kUnlimited));
    recount();
  }
  // Backfill: the rest, in the configured order (higher priority first in
  // every order).
  // Capacity only shrinks within a pass, so gangs that cannot fit on what is
  // free now are passed over without a try.
  const uint64_t rest_free = free_total;
  const std::vector<uint32_t> rest_hosts_with = hosts_with;
  auto may_fit = [&](const Gang& gang) {
    const uint32_t g = gang.spec.gpus_per_member;
    return g == 0 || (uint64_t{gang.spec.members} * g <= rest_free &&
                      room_for(rest_hosts_with, g) >= gang.spec.members);
  };
  // Tries `gang` unless it cannot fit; false when nothing more can start.
  // `dead` tells whether it could not: then a plain gang of the same shape
  // and class cannot start later in this pass either (try_start() would
  // find it in `fewest`, or may_fit() refuse it), so a merge drops the rest
  // of its lane without changing a decision.
  auto backfill = [&](Gang& gang, bool& dead) {
    dead = false;
    if (!may_fit(gang)) {
      dead = IsPlain(gang.spec);
      return true;
    }
    if (nothing_fits()) return false;
    dead = !try_start(gang) && IsPlain(gang.spec);
    return true;
  };
  // Without a try, nothing changes: return before reading the queue.
  if (nothing_fits()) return;
  // A plain lane whose next gang cannot fit is passed over whole.
  auto lane_may_fit = [&](const Gang& gang) {
    return !IsPlain(gang.spec) || may_fit(gang);
  };
  bool dead = false;
  if (aged_head) {
    // The head order goes on.
    merge->Keep(lane_may_fit);
    while (Gang* gang = merge->Next()) {
      if (!backfill(*gang, dead)) return;
      if (dead) merge->DropLast();
    }
    return;
  }
  if (queued == complete_.end()) return;
  if (options_.backfill_order == BackfillOrder::kQueue) {
    while (queued != complete_.end()) {
      if (!backfill(*(queued++)->second, dead)) return;
    }
  } else if (options_.backfill_order == BackfillOrder::kAgedShortestFirst) {
    // The lanes merged by aged key, without the gangs tried above: those
    // before `queued` in queue order.
    const QueueKey rest = queued->first;
    Merge aged(lanes_, &AgedFirst, now, overdue_after_);
    aged.Keep(lane_may_fit);
    while (Gang* gang = aged.Next()) {
      if (QueueKey{-gang->spec.priority, gang->spec.queue_time, gang->seq} <
          rest) {
        continue;
      }
      if (!backfill(*gang, dead)) return;
      if (dead) aged.DropLast();
    }
  } else {
    std::vector<Gang*> candidates;
    for (; queued != complete_.end(); ++queued) {
      if (may_fit(*queued->second)) candidates.push_back(queued->second);
    }
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](const Gang* a, const Gang* b) {
                       if (a->spec.priority != b->spec.priority) {
                         return a->spec.priority > b->spec.priority;
                       }
                       const uint64_t ga =
                           uint64_t{a->spec.members} * a->spec.gpus_per_member;
                       const uint64_t gb =
                           uint64_t{b->spec.members} * b->spec.gpus_per_member;
                       return std::tie(a->spec.run_bound, ga) <
                              std::tie(b->spec.run_bound, gb);
                     });
    for (Gang* gang : candidates) {
      if (!backfill(*gang, dead)) return;
    }
  }
}

void AdmissionPolicy::ScheduleNaive(Seconds now, Decisions& out) {
  for (auto it = queue_.begin(); it != queue_.end();) {
    Gang& gang = *it->second;
    ++it;
    const uint32_t g = gang.spec.gpus_per_member;
    bool all_hold = gang.present.size() == gang.spec.members;
    for (auto& [index, member] : gang.present) {
      if (member.gpus.size() == g) continue;
      Host& host = hosts_[member.slot_host];
      if (host.down || host.free_gpus < g) {
        all_hold = false;
        continue;
      }
      for (uint32_t gpu = 0;
           gpu < host.gpu_owner.size() && member.gpus.size() < g; ++gpu) {
        if (host.gpu_owner[gpu] == -1) {
          host.gpu_owner[gpu] = gang.seq;
          member.gpus.push_back(gpu);
        }
      }
      host.free_gpus -= g;
    }
    if (!all_hold) continue;
    Admission admission;
    admission.gang_id = gang.spec.id;
    for (auto& [index, member] : gang.present) {
      admission.members.push_back(MemberPlacement{
          index, hosts_[member.slot_host].spec.name, member.gpus});
      gang.placement.emplace_back(member.slot_host, std::move(member.gpus));
      member.gpus.clear();
    }
    Dequeue(gang);
    gang.running = true;
    gang.start = now;
    gang.end_bound = now + gang.spec.run_bound;
    running_.emplace(std::pair{gang.end_bound, gang.spec.id}, &gang);
    out.admitted.push_back(std::move(admission));
  }
}

Decisions AdmissionPolicy::Schedule(Seconds now) {
  Decisions out;
  reservations_.clear();
  if (options_.mode == Mode::kNaive) {
    ScheduleNaive(now, out);
    return out;
  }
  if (std::optional<Bounce> bounce = BreakDeadlock(); bounce.has_value()) {
    out.bounced.push_back(std::move(*bounce));
  }
  ScheduleGangs(now, out);
  // Preempt only for a head that would otherwise wait longer than a grace:
  // victims already stopping for it end by then, so it is never served twice.
  if (options_.mode == Mode::kPreempt && !reservations_.empty() &&
      reservations_.front().start > now + options_.preempt.grace) {
    Preempt(gangs_.at(reservations_.front().gang_id), now, out);
  }
  if (options_.mode == Mode::kPreempt && !reservations_.empty() &&
      options_.preempt.served_behind_head > 0) {
    PreemptBehindHead(now, out);
  }
  return out;
}

bool AdmissionPolicy::StartSmaller(Gang& gang, Seconds now, Decisions& out,
                                   const std::vector<uint32_t>* cap) {
  for (uint32_t n = gang.spec.members - 1; n >= gang.spec.min_members && n > 0;
       --n) {
    Gang trial;
    trial.spec = gang.spec;
    for (const auto& [index, member] : gang.present) {
      if (trial.present.size() == n) break;
      trial.present.emplace(index, member);
    }
    std::optional<std::vector<size_t>> hosts = Place(trial, cap);
    if (!hosts.has_value()) continue;
    std::vector<uint32_t> left_out;
    for (auto it = gang.present.begin(); it != gang.present.end();) {
      if (trial.present.count(it->first) != 0) {
        ++it;
        continue;
      }
      ++hosts_[it->second.slot_host].free_slots;
      left_out.push_back(it->first);
      it = gang.present.erase(it);
    }
    Admission admission = Commit(gang, *hosts, now);
    admission.not_needed = std::move(left_out);
    out.admitted.push_back(std::move(admission));
    return true;
  }
  return false;
}

bool AdmissionPolicy::AgedFirst(const Gang& a, const Gang& b, Seconds now,
                                double /*overdue_after*/) {
  if (a.spec.priority != b.spec.priority) {
    return a.spec.priority > b.spec.priority;
  }
  // wa / sqrt(ba) > wb / sqrt(bb)  <=>  wa² · bb > wb² · ba, exactly.
  const Int128 wa = std::max<Seconds>(0, now - a.spec.queue_time);
  const Int128 wb = std::max<Seconds>(0, now - b.spec.queue_time);
  const Int128 ka = wa * wa * b.spec.run_bound;
  const Int128 kb = wb * wb * a.spec.run_bound;
  if (ka != kb) return ka > kb;
  return std::tie(a.spec.queue_time, a.seq) <
         std::tie(b.spec.queue_time, b.seq);
}

bool AdmissionPolicy::GoesFirstAt(const Gang& a, const Gang& b, Seconds now,
                                  double overdue_after) {
  if (a.spec.priority != b.spec.priority) {
    return a.spec.priority > b.spec.priority;
  }
  // Overdue gangs first (every gang when the bound is off), in queue order;
  // the others by aged key, ties in queue order.
  const bool oa = static_cast<double>(now - a.spec.queue_time) >= overdue_after;
  const bool ob = static_cast<double>(now - b.spec.queue_time) >= overdue_after;
  if (oa != ob) return oa;
  if (!oa) return AgedFirst(a, b, now, overdue_after);
  return std::tie(a.spec.queue_time, a.seq) <
         std::tie(b.spec.queue_time, b.seq);
}

double AdmissionPolicy::OverdueAfter(Seconds now) const {
  double work = 0;
  uint64_t gpus = 0;
  for (const Host& host : hosts_) {
    if (!host.drained && !host.down) gpus += host.spec.gpus;
  }
  if (gpus == 0) return 0;
  // The backlog is a sum of whole GPU-seconds. Below 2^53 a double holds
  // every term and every partial sum exactly, so summing in doubles, in any
  // order, gives that sum: it is kept up to date for the waiting gangs, and
  // only a larger backlog is summed here term by term.
  UInt128 exact = waiting_work_;
  for (const auto& [key, gang] : running_) {
    exact += static_cast<UInt128>(std::max<Seconds>(0, key.first - now)) *
             gang->placement.size() * gang->spec.gpus_per_member;
  }
  if (exact < (static_cast<UInt128>(1) << 53)) {
    return options_.preempt.overdue_backlog_fraction *
           static_cast<double>(exact) / static_cast<double>(gpus);
  }
  for (const auto& [key, running] : running_) {
    const Gang& gang = *running;
    work += static_cast<double>(std::max<Seconds>(0, key.first - now)) *
            static_cast<double>(gang.placement.size()) *
            gang.spec.gpus_per_member;
  }
  for (const auto& [key, gang] : complete_) {
    // An elastic gang's run bound holds at its smallest size.
    const uint32_t members =
        gang->spec.min_members != 0
            ? std::min(gang->spec.min_members, gang->spec.members)
            : gang->spec.members;
    work += static_cast<double>(gang->spec.run_bound) * members *
            gang->spec.gpus_per_member;
  }
  return options_.preempt.overdue_backlog_fraction * work /
         static_cast<double>(gpus);
}

int64_t AdmissionPolicy::AgingLevel(const Gang& gang, Seconds now) const {
  const PreemptOptions& o = options_.preempt;
  if (o.aging_step <= 0) return 0;
  const Seconds waited = std::max<Seconds>(0, now - gang.spec.queue_time);
  return std::min<int64_t>(o.max_aging_levels, waited / o.aging_step);
}

int64_t AdmissionPolicy::WaitingRank(const Gang& gang, Seconds now) const {
  return int64_t{gang.spec.priority} * 2 + 2 * AgingLevel(gang, now);
}

int64_t AdmissionPolicy::RunningRank(const Gang& gang, Seconds now) const {
  const PreemptOptions& o = options_.preempt;
  int64_t rank = int64_t{gang.spec.priority} * 2;
  const double used = static_cast<double>(gang.placement.size()) *
                      gang.spec.gpus_per_member *
                      static_cast<double>(now - gang.start);
  if (o.demote_after_gpu_seconds > 0 && used >= o.demote_after_gpu_seconds &&
      now - gang.start >= o.min_run) {
    rank -= 1;
  }
  return rank;
}

double AdmissionPolicy::LostGpuSeconds(const Gang& gang, Seconds now) const {
  Seconds since = std::max<Seconds>(0, now - gang.start);
  if (gang.spec.checkpoint_interval > 0) {
    since %= gang.spec.checkpoint_interval;
  }
  return static_cast<double>(gang.placement.size()) *
         gang.spec.gpus_per_member * static_cast<double>(since);
}

std::vector<AdmissionPolicy::Victim> AdmissionPolicy::Victims(Seconds now) {
  const PreemptOptions& o = options_.preempt;
  std::vector<Victim> victims;
  for (const auto& [key, running] : running_) {
    Gang& gang = *running;
    if (gang.stopping || !gang.spec.preemptible ||
        gang.spec.preemptions >= o.max_preemptions ||
        gang.spec.gpus_per_member == 0) {
      continue;
    }
    // A gang that was overdue when it started has waited its share.
    if (overdue_after_ >= 0 &&
        static_cast<double>(gang.start - gang.spec.queue_time) >=
            overdue_after_) {
      continue;
    }
    victims.push_back(Victim{LostGpuSeconds(gang, now), gang.spec.priority,
                             -gang.seq, RunningRank(gang, now), &gang});
  }
  std::sort(victims.begin(), victims.end(),
            [](const Victim& a, const Victim& b) {
              return std::tie(a.lost, a.priority, a.neg_seq) <
                     std::tie(b.lost, b.priority, b.neg_seq);
            });
  return victims;
}

std::vector<AdmissionPolicy::Gang*> AdmissionPolicy::ChooseVictims(
    const Gang& gang, const std::vector<Victim>& victims,
    std::vector<uint32_t>& cap, Seconds now) const {
  const uint32_t g = gang.spec.gpus_per_member;
  const int64_t rank = WaitingRank(gang, now);
  auto usable = [&](size_t h) { return Eligible(hosts_[h], gang.spec); };
  auto add = [&](const Gang& victim, int sign) {
    for (const auto& [h, gpus] : victim.placement) {
      if (!usable(h)) continue;
      cap[h] = static_cast<uint32_t>(static_cast<int64_t>(cap[h]) +
                                     sign * static_cast<int64_t>(gpus.size()));
    }
  };
  auto room = [&] {
    uint64_t members = 0;
    for (size_t h = 0; h < hosts_.size(); ++h) members += cap[h] / g;
    return members;
  };
  auto fits = [&] {
    return room() >= gang.spec.members && PlaceOn(gang, cap).has_value();
  };
  // Fewest GPU-seconds lost first, until the gang fits.
  std::vector<Gang*> chosen;
  bool enough = false;
  for (const Victim& victim : victims) {
    if (victim.rank >= rank) continue;
    bool helps = false;
    for (const auto& [h, gpus] : victim.gang->placement) {
      helps = helps || usable(h);
    }
    if (!helps) continue;
    add(*victim.gang, +1);
    chosen.push_back(victim.gang);
    if (fits()) {
      enough = true;
      break;
    }
  }
  if (!enough) {
    for (const Gang* victim : chosen) add(*victim, -1);
    return {};
  }
  // Then as few gangs as possible: drop any victim the gang can do without,
  // the costliest first.
  for (size_t i = chosen.size(); i-- > 0;) {
    add(*chosen[i], -1);
    if (fits()) {
      chosen.erase(chosen.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      add(*chosen[i], +1);
    }
  }
  return chosen;
}

void AdmissionPolicy::Stop(const std::vector<Gang*>& victims, const Gang& by,
                           Seconds now, Decisions& out) {
  const PreemptOptions& o = options_.preempt;
  const Seconds stop_by = now + o.grace;
  for (Gang* victim : victims) {
    victim->stopping = true;
    if (victim->end_bound > stop_by) {
      running_.erase({victim->end_bound, victim->spec.id});
      victim->end_bound = stop_by;
      running_.emplace(std::pair{stop_by, victim->spec.id}, victim);
    }
    Preemption preemption;
    preemption.gang_id = victim->spec.id;
    preemption.by = by.spec.id;
    preemption.stop_by = stop_by;
    preemption.lost_gpu_seconds = LostGpuSeconds(*victim, now);
    const uint32_t held = static_cast<uint32_t>(victim->placement.size()) *
                          victim->spec.gpus_per_member;
    preemption.reason = absl::StrCat(
        "preempted by gang ", by.spec.id, " (priority ", by.spec.priority,
        ", waiting ", std::max<Seconds>(0, now - by.spec.queue_time),
        " s) to free ", held, " GPUs; checkpoint within ", o.grace,
        " s; about ", absl::SixDigits(preemption.lost_gpu_seconds / 3600.0),
        " GPU-hours since the last checkpoint are lost (preemption ",
        victim->spec.preemptions + 1, " of at most ", o.max_preemptions, ")");
    out.preempted.push_back(std::move(preemption));
  }
}

void AdmissionPolicy::Preempt(const Gang& head, Seconds now, Decisions& out) {
  if (head.spec.gpus_per_member == 0) return;  // CPU-only: never waits.
  std::vector<uint32_t> cap(hosts_.size(), 0);
  for (size_t h = 0; h < hosts_.size(); ++h) {
    if (Eligible(hosts_[h], head.spec)) cap[h] = hosts_[h].free_gpus;
  }
  const std::vector<Gang*> chosen = ChooseVictims(head, Victims(now), cap, now);
  if (!chosen.empty()) Stop(chosen, head, now, out);
}

void AdmissionPolicy::PreemptBehindHead(Seconds now, Decisions& out) {
  const PreemptOptions& o = options_.preempt;
  // A victim's retry joins again through runner slots: stop gangs here only
  // while their members find free slots at once, not behind a backlog of
  // jobs waiting for a runner (the slots stand for every victim's members).
  uint64_t free_slots = 0;
  for (const Host& host : hosts_) {
    if (!host.down) free_slots += host.free_slots;
  }
  if (free_slots == 0) return;
  const Reservation& reserved = reservations_.front();
  const Gang& head = gangs_.at(reserved.gang_id);
  const Seconds soon_end = now + o.grace;
  std::vector<Victim> victims = Victims(now);
  // Not the gangs that end within the grace anyway: `soon` has their GPUs.
  victims.erase(std::remove_if(victims.begin(), victims.end(),
                               [&](const Victim& victim) {
                                 return victim.gang->end_bound <= soon_end;
                               }),
                victims.end());
  if (victims.empty()) return;
  // GPUs free within a grace on hosts taking gangs: free now, or held by
  // gangs that end by then (victims stopping, runs reaching their bound).
  std::vector<uint32_t> soon(hosts_.size(), 0);
  for (size_t h = 0; h < hosts_.size(); ++h) {
    if (!hosts_[h].drained && !hosts_[h].down) soon[h] = hosts_[h].free_gpus;
  }
  for (const auto& [key, gang] : running_) {
    if (key.first > soon_end) break;
    for (const auto& [h, gpus] : gang->placement) {
      if (!hosts_[h].drained && !hosts_[h].down) {
        soon[h] += static_cast<uint32_t>(gpus.size());
      }
    }
  }
  std::vector<uint32_t> cap(hosts_.size());
  // `gang`'s share of `soon`: 0 on hosts it may not use.
  auto share = [&](const Gang& gang) {
    for (size_t h = 0; h < hosts_.size(); ++h) {
      cap[h] = Eligible(hosts_[h], gang.spec) ? soon[h] : 0;
    }
  };
  auto take = [&](const Gang& gang) {
    std::optional<std::vector<size_t>> placed = PlaceOn(gang, cap);
    if (!placed.has_value()) return false;
    for (const size_t h : *placed) soon[h] -= gang.spec.gpus_per_member;
    return true;
  };
  // The head first. When it is not served within a grace, a gang behind it
  // may be served only if it ends before the head's reservation.
  share(head);
  const bool head_served = head.spec.gpus_per_member != 0 && take(head);
  // The gangs behind it: complete, with GPUs, not the head, and ending
  // before the head's reservation unless the head is served. Every gang of
  // a lane shares its shape and run bound, so lanes are taken or left whole.
  auto behind = [&](const Gang& gang) {
    return gang.spec.gpus_per_member != 0 &&
           (head_served || soon_end + gang.spec.run_bound <= reserved.start);
  };
  // The smallest shape behind the head, and the gangs by rank: once that
  // shape fails at a rank, every gang of that rank would.
  uint32_t fewest_gpus = kUnlimited;
  uint32_t fewest_members = kUnlimited;
  std::set<int64_t> alive;
  for (const auto& [key, lane] : lanes_) {
    if (lane.empty() || !behind(*lane.begin()->second)) continue;
    // The ranks in the lane, the head left out. Older gangs rank as high
    // or higher (aging): after each rank found, skip to the first gang
    // that has waited fewer aging steps.
    for (auto it = lane.begin(); it != lane.end();) {
      const Gang& gang = *it->second;
      if (&gang == &head) {
        ++it;
        continue;
      }
      fewest_gpus = std::min(fewest_gpus, gang.spec.gpus_per_member);
      fewest_members = std::min(fewest_members, gang.spec.members);
      alive.insert(WaitingRank(gang, now));
      const int64_t level = AgingLevel(gang, now);
      if (level <= 0) break;  // Every later gang is at this level too.
      it = lane.upper_bound(
          {now - level * o.aging_step, std::numeric_limits<int64_t>::max()});
    }
  }
  // In admission order, drawn from the lanes: the walk ends once no victim
  // is left or no gang can be served, usually long before the last gang.
  Merge walk(lanes_, &GoesFirstAt, now, overdue_after_);
  walk.Keep(behind);
  // Shapes that could not be served: with as many members of as many GPUs
  // or more, and the same rank, a gang cannot be either (what is left only
  // shrinks within the pass). By rank, then GPUs per member: the fewest
  // members that failed.
  std::map<int64_t, std::map<uint32_t, uint32_t>> failed;
  uint32_t served = 0;
  // A shape fails at a rank: later gangs of that rank as large are skipped.
  auto fail = [&](const GangSpec& spec, int64_t rank) {
    std::map<uint32_t, uint32_t>& shapes = failed[rank];
    uint32_t& fewest =
        shapes.try_emplace(spec.gpus_per_member, spec.members).first->second;
    fewest = std::min(fewest, spec.members);
    if (spec.gpus_per_member <= fewest_gpus && fewest <= fewest_members) {
      alive.erase(rank);
    }
  };
  while (true) {
    if (served >= o.served_behind_head || victims.empty() || alive.empty()) {
      break;
    }
    const Gang* gang = walk.Next();
    if (gang == nullptr) break;
    if (gang == &head) continue;
    const GangSpec& spec = gang->spec;
    const bool plain = spec.node_selector.empty() && spec.same_label.empty();
    const int64_t rank = WaitingRank(*gang, now);
    if (plain) {
      bool hopeless = false;
      for (const auto& [g, members] : failed[rank]) {
        hopeless =
            hopeless || (g <= spec.gpus_per_member && members <= spec.members);
      }
      if (hopeless) continue;
    }
    share(*gang);
    if (take(*gang)) continue;  // Served by what comes free anyway.
    const std::vector<Gang*> chosen = ChooseVictims(*gang, victims, cap, now);
    uint64_t members = 0;
    for (const Gang* victim : chosen) members += victim->placement.size();
    // Without victims, or with more victims' members than free slots, a
    // larger gang of this rank fares no better (taken as so: the walk must
    // stay short).
    if (chosen.empty() || members > free_slots) {
      if (plain) fail(spec, rank);
      continue;
    }
    free_slots -= members;
    Stop(chosen, *gang, now, out);
    ++served;
    for (const Gang* victim : chosen) {
      for (const auto& [h, gpus] : victim->placement) {
        if (!hosts_[h].drained && !hosts_[h].down) {
          soon[h] += static_cast<uint32_t>(gpus.size());
        }
      }
    }
    victims.erase(std::remove_if(victims.begin(), victims.end(),
                                 [](const Victim& victim) {
                                   return victim.gang->stopping;
                                 }),
                  victims.end());
    share(*gang);
    take(*gang);
  }
}

uint32_t AdmissionPolicy::FreeGpus(const std::string& host) const {
  auto it = host_index_.find(host);
  return it == host_index_.end() ? 0 : hosts_[it->second].free_gpus;
}

uint32_t AdmissionPolicy::FreeRunnerSlots(const std::string& host) const {
  auto it = host_index_.find(host);
  if (it == host_index_.end() || hosts_[it->second].down) return 0;
  return hosts_[it->second].free_slots;
}

uint32_t AdmissionPolicy::FreeCpuSlots(const std::string& host) const {
  auto it = host_index_.find(host);
  return it == host_index_.end() ? 0 : hosts_[it->second].free_cpu;
}

uint32_t AdmissionPolicy::GpusHeldByWaitingGangs() const {
  uint32_t held = 0;
  for (const auto& [id, gang] : gangs_) {
    if (gang.running) continue;
    for (const auto& [index, member] : gang.present) {
      held += static_cast<uint32_t>(member.gpus.size());
    }
  }
  return held;
}

bool AdmissionPolicy::IsRunning(const std::string& gang_id) const {
  auto it = gangs_.find(gang_id);
  return it != gangs_.end() && it->second.running;
}

}  // namespace gdt::policy
