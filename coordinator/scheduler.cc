#include "coordinator/scheduler.h"

#include <algorithm>
#include <cassert>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/exit_code.h"
#include "common/logging.h"
#include "common/retry_after.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace gdt::coordinator {
namespace {

// "train 1/2" style group names become "train"; anything outside [a-z0-9]
// becomes '-'.
std::string Slug(const std::string& text) {
  std::string slug;
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (std::isalnum(u)) {
      slug.push_back(static_cast<char>(std::tolower(u)));
    } else if (!slug.empty() && slug.back() != '-') {
      slug.push_back('-');
    }
  }
  while (!slug.empty() && slug.back() == '-') slug.pop_back();
  return slug.empty() ? "gang" : slug;
}

// How long a member refused by a forming-gang limit waits before it asks
// again: gangs form or are ended on the scale of seconds to minutes.
constexpr std::chrono::milliseconds kFormingQuotaRetryAfter{5000};

std::string GangLabel(const state::GangKey& key) {
  return absl::StrCat("gang ", key.group_name, " (pipeline ", key.pipeline_id,
                      ")");
}

uint32_t SlotsOf(const state::Host& host) {
  return std::max<uint32_t>(1, host.spec.cpu_slots);
}

// Missing member indices named in a waiting reason, and sent in a
// WaitingEvent's missing_indices: the first few only, so that a reason stays
// one short line and an event O(1) bytes at any gang size.
constexpr size_t kListedMissing = 8;
constexpr size_t kSentMissing = 64;
// How often a member already told that members are missing hears the new
// count (see Scheduler::QueueWaiting).
constexpr std::chrono::seconds kWaitingRefresh{1};

// Whether the gang's GPUs, slots and port are still leased: it runs, or it
// failed and some member has not left yet.
bool HoldsLeases(const state::Gang& gang) {
  if (gang.state == state::GangState::kRunning) return true;
  if (gang.state != state::GangState::kFailed) return false;
  return std::any_of(gang.members.begin(), gang.members.end(),
                     [](const auto& entry) { return !entry.second.left; });
}

bool AllExitedZero(const state::Gang& gang) {
  const uint32_t size = gang.Size();
  return size > 0 && gang.members.size() == size &&
         std::all_of(
             gang.members.begin(), gang.members.end(),
             [](const auto& entry) { return entry.second.exit_code == 0; });
}

// The backfill bound of a job: its timeout, or an hour when it has none.
int64_t RunBound(uint32_t job_timeout_seconds) {
  return job_timeout_seconds != 0 ? job_timeout_seconds : 3600;
}

}  // namespace

Scheduler::Scheduler(const Clock& clock, state::StateStore& store,
                     const SchedulerOptions& options)
    : clock_(clock),
      store_(store),
      options_(options),
      join_rate_(clock, {.per_second = options.join_rate_per_project,
                         .burst = static_cast<double>(std::max<uint32_t>(
                             options.join_burst_per_project, 1))}) {}

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(
    const Clock& clock, state::StateStore& store,
    const SchedulerOptions& options) {
  std::unique_ptr<Scheduler> scheduler(new Scheduler(clock, store, options));
  GDT_RETURN_IF_ERROR(scheduler->LoadState());
  return scheduler;
}

absl::Status Scheduler::LoadState() {
  absl::StatusOr<state::StoredState> state = store_.Load();
  if (!state.ok()) return state.status();
  for (state::Host& host : state->hosts) {
    // A restart must not mark every host down at once: give each a full
    // heartbeat window from now.
    host.last_heartbeat = clock_.Now();
    if (host.spec.runner_slots != 0) ++hosts_with_runner_slots_;
    hosts_[host.spec.name] = std::move(host);
  }
  for (state::Gang& gang : state->gangs) {
    next_sequence_ = std::max(next_sequence_, gang.sequence + 1);
    uint32_t timeout = 0;
    for (auto& [index, member] : gang.members) {
      // Executors of forming gangs reconnect and join again by job id.
      member.present = gang.state == state::GangState::kRunning && !member.left;
      timeout = std::max(timeout, member.job_timeout_seconds);
    }
    // The admission time is not stored: count the timeout from now.
    gang.started_unix_s = clock_.UnixMillis() / 1000;
    gang.end_bound_unix_s = gang.started_unix_s + RunBound(timeout);
    // An archived epoch ("<id>#<epoch>") shares its key with the live gang.
    if (!IsArchivedEpoch(gang.id)) gang_ids_[gang.key] = gang.id;
    live_ids_.insert(gang.id);  // Pruned by the first pass if it ended.
    if (gang.state == state::GangState::kRunning &&
        gang.preempt_notice_ms != 0) {
      // A preemption under way goes on: the policy does not choose the gang
      // again, and its members hear the notice again.
      gang.preemption_planned_by = gang.preempt_by;
      // A withdrawn one (no deadline) is not announced again.
      if (gang.preempt_stop_by_ms != 0) QueueNotice(gang);
    }
    gangs_[gang.id] = std::move(gang);
  }
  for (const state::GpuLease& lease : state->gpu_leases) {
    gpu_leases_[lease.host_name][lease.gpu_index] = lease.gang_id;
  }
  for (const state::PortLease& lease : state->port_leases) {
    port_leases_[lease.host_name][lease.port] = lease.gang_id;
  }
  return absl::OkStatus();
}

state::HostState Scheduler::StateOf(const state::Host& host) const {
  return clock_.Now() - host.last_heartbeat > options_.host_down_after
             ? state::HostState::kDown
             : state::HostState::kUp;
}

namespace {

// RegisterHost's bounds (scheduler.h), each refusal naming the field.
absl::Status CheckHostBounds(const state::HostSpec& spec) {
  const auto too_long = [&spec](const std::string& field,
                                const std::string& value, size_t limit) {
    return absl::InvalidArgumentError(absl::StrCat(
        "host ", spec.name.substr(0, 64), ": ", field, " is ", value.size(),
        " bytes long; at most ", limit, " are accepted"));
  };
  for (const auto& [field, value] :
       {std::pair{"the host name", &spec.name},
        std::pair{"the address", &spec.address},
        std::pair{"the agent endpoint", &spec.agent_endpoint},
        std::pair{"the network interface", &spec.network_interface}}) {
    if (value->size() > kMaxNameBytes) {
      return too_long(field, *value, kMaxNameBytes);
    }
  }
  if (spec.labels.size() > kMaxHostLabels) {
    return absl::InvalidArgumentError(absl::StrCat(
        "host ", spec.name.substr(0, 64), " has ", spec.labels.size(),
        " labels; at most ", kMaxHostLabels, " are accepted"));
  }
  for (const auto& [key, value] : spec.labels) {
    if (key.size() > kMaxLabelBytes) {
      return too_long("a label name", key, kMaxLabelBytes);
    }
    if (value.size() > kMaxLabelBytes) {
      return too_long(absl::StrCat("label ", key.substr(0, 64)), value,
                      kMaxLabelBytes);
    }
  }
  if (spec.gpus.size() > kMaxHostGpus) {
    return absl::InvalidArgumentError(absl::StrCat(
        "host ", spec.name.substr(0, 64), " has ", spec.gpus.size(),
        " GPUs; at most ", kMaxHostGpus, " are accepted"));
  }
  for (const state::GpuInfo& gpu : spec.gpus) {
    if (gpu.uuid.size() > kMaxLabelBytes) {
      return too_long("a GPU uuid", gpu.uuid, kMaxLabelBytes);
    }
    if (gpu.model.size() > kMaxLabelBytes) {
      return too_long("a GPU model", gpu.model, kMaxLabelBytes);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Scheduler::RegisterHost(const state::HostSpec& spec) {
  if (spec.name.empty()) {
    return absl::InvalidArgumentError("host name must not be empty");
  }
  GDT_RETURN_IF_ERROR(CheckHostBounds(spec));
  state::Host host;
  host.spec = spec;
  auto known = hosts_.find(spec.name);
  if (known != hosts_.end()) {
    // A host's agent is whoever heartbeats for it: a second agent (or
    // anyone holding the host token) may not take the host over while the
    // first is alive, or the next job's scripts and secrets would go to it.
    if (known->second.spec.agent_endpoint != spec.agent_endpoint &&
        StateOf(known->second) == state::HostState::kUp) {
      return absl::FailedPreconditionError(absl::StrCat(
          "host ", spec.name, " is registered with the agent at ",
          known->second.spec.agent_endpoint,
          ", which is alive (it heartbeats); an agent at ", spec.agent_endpoint,
          " may register it only after that one has "
          "missed heartbeats for ",
          options_.host_down_after.count(), " s"));
    }
    host.drained = known->second.drained;
  }
  host.last_heartbeat = clock_.Now();
  host.last_heartbeat_unix_ms = clock_.UnixMillis();
  GDT_RETURN_IF_ERROR(store_.SaveHost(host));
  last_heard_any_ = host.last_heartbeat;
  quiet_spell_bridged_ = false;
  if (known != hosts_.end() && known->second.spec.runner_slots != 0) {
    --hosts_with_runner_slots_;
  }
  if (spec.runner_slots != 0) ++hosts_with_runner_slots_;
  hosts_[spec.name] = std::move(host);
  Pass();
  return absl::OkStatus();
}

bool Scheduler::Heartbeat(const std::string& host_name, bool* was_down) {
  auto it = hosts_.find(host_name);
  if (it == hosts_.end()) return false;
  *was_down = StateOf(it->second) == state::HostState::kDown;
  it->second.last_heartbeat = clock_.Now();
  it->second.last_heartbeat_unix_ms = clock_.UnixMillis();
  last_heard_any_ = it->second.last_heartbeat;
  quiet_spell_bridged_ = false;
  return true;
}

bool Scheduler::SetNotReady(const std::string& host_name,
                            const std::string& reason) {
  if (hosts_.count(host_name) == 0) return false;
  auto known = not_ready_.find(host_name);
  const std::string before = known == not_ready_.end() ? "" : known->second;
  if (before == reason) return false;
  if (reason.empty()) {
    not_ready_.erase(known);
    spdlog::info("event=host_ready host={}", LogValue(host_name));
  } else {
    not_ready_[host_name] = reason;
    spdlog::warn("event=host_not_ready host={} reason={}", LogValue(host_name),
                 LogValue(reason));
  }
  return true;
}

absl::Status Scheduler::SetDrained(const std::string& host_name, bool drained) {
  auto it = hosts_.find(host_name);
  if (it == hosts_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown host ", host_name));
  }
  GDT_RETURN_IF_ERROR(store_.SetHostDrained(host_name, drained));
  it->second.drained = drained;
  spdlog::info("event={} host={}", drained ? "host_drained" : "host_undrained",
               LogValue(host_name));
  Pass();
  return absl::OkStatus();
}

absl::Status Scheduler::RemoveHost(const std::string& host_name) {
  auto it = hosts_.find(host_name);
  if (it == hosts_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown host ", host_name));
  }
  std::vector<std::string> users;
  uint32_t members = 0;
  for (const auto& [id, gang_ptr] : LiveGangs()) {
    const state::Gang& gang = *gang_ptr;
    if (!HoldsLeases(gang)) continue;
    bool uses = false;
    for (const auto& [index, member] : gang.members) {
      if (member.host_name == host_name && !member.left) {
        ++members;
        uses = true;
      }
    }
    if (uses) users.push_back(id);
  }
  if (!users.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("host ", host_name, " still runs ", members, " member",
                     members == 1 ? "" : "s", " of gang",
                     users.size() == 1 ? " " : "s ", absl::StrJoin(users, ", "),
                     "; drain it and remove it once they have finished"));
  }
  GDT_RETURN_IF_ERROR(store_.DeleteHost(host_name));
  if (it->second.spec.runner_slots != 0) --hosts_with_runner_slots_;
  hosts_.erase(it);
  watched_progress_.erase(host_name);
  not_ready_.erase(host_name);
  spdlog::info("event=host_removed host={}", LogValue(host_name));
  Pass();
  return absl::OkStatus();
}

absl::StatusOr<std::string> Scheduler::GangIdFor(const state::GangKey& key) {
  auto known = gang_ids_.find(key);
  if (known != gang_ids_.end()) return known->second;
  const std::string base =
      absl::StrCat(Slug(key.group_name), "-p", key.project_id, "-pl",
                   key.pipeline_id, "-n", key.size);
  // Another GitLab instance may have the same ids: number the newcomer.
  std::string id = base;
  for (int suffix = 2; gangs_.count(id) != 0; ++suffix) {
    id = absl::StrCat(base, "-", suffix);
  }
  return id;
}

absl::Status Scheduler::CheckFormingQuota(const state::GangKey& key) const {
  uint32_t in_pipeline = 0;
  uint32_t in_project = 0;
  for (const std::string& id : live_ids_) {
    auto found = gangs_.find(id);
    if (found == gangs_.end()) continue;
    const state::Gang& gang = found->second;
    if (gang.state != state::GangState::kForming ||
        gang.key.project_id != key.project_id ||
        gang.key.instance != key.instance) {
      continue;
    }
    ++in_project;
    if (gang.key.pipeline_id == key.pipeline_id) ++in_pipeline;
  }
  if (in_pipeline >= options_.max_forming_gangs_per_pipeline) {
    observer_->JoinRefused("forming_gangs_per_pipeline");
    return WithRetryAfter(
        absl::ResourceExhaustedError(absl::StrCat(
            "pipeline ", key.pipeline_id, " already has ", in_pipeline,
            " forming gangs (max_forming_gangs_per_pipeline); gang ",
            key.group_name, " is refused until some form or are cancelled")),
        kFormingQuotaRetryAfter);
  }
  if (in_project >= options_.max_forming_gangs_per_project) {
    observer_->JoinRefused("forming_gangs_per_project");
    return WithRetryAfter(
        absl::ResourceExhaustedError(absl::StrCat(
            "project ", key.project_id, " already has ", in_project,
            " forming gangs (max_forming_gangs_per_project); gang ",
            key.group_name, " is refused until some form or are cancelled")),
        kFormingQuotaRetryAfter);
  }
  return absl::OkStatus();
}

namespace {

// A join of a job whose member another executor holds: its join stream is
// live (forming gang) or it was admitted (running gang). Two executors of
// one job id (two local runs with the same pipeline and job ids) would both
// run the member's script, and either one's end would end the gang. The
// holder's own joins (a reconnect), a later preparation attempt (a fresh id,
// let in once the earlier attempt's cleanup left or its stream ended), any
// join after a coordinator restart (which forgets the ids) and joins
// without an id pass.
absl::Status CheckSoleExecutor(const state::Gang& gang,
                               const state::Member& member,
                               const JoinRequest& request) {
  if (request.executor.empty() || member.executor.empty() ||
      request.executor == member.executor) {
    return absl::OkStatus();
  }
  const bool running = gang.state == state::GangState::kRunning;
  const bool joined = gang.state == state::GangState::kForming &&
                      member.present && member.stream_id != 0;
  if (!running && !joined) return absl::OkStatus();
  const std::string& host = running ? member.host_name : member.arrival_host;
  return absl::AlreadyExistsError(absl::StrCat(
      "another executor already holds job ", request.job_id, " (member ",
      request.member_index, " of gang ", gang.id, ", ",
      running ? "running" : "joined",
      host.empty() ? ""
                   : absl::StrCat(running ? " on host " : " from host ", host),
      "); this second executor of the same job id is refused and the gang "
      "goes on with the first"));
}

}  // namespace

absl::StatusOr<std::string> Scheduler::Join(const JoinRequest& request,
                                            uint64_t stream_id) {
  last_join_needs_no_pass_ = false;
  const state::GangKey& key = request.key;
  if (key.group_name.empty()) {
    return absl::InvalidArgumentError("join needs a job group name");
  }
  for (const auto& [field, value, limit] :
       {std::tuple{"the gang name", &key.group_name, kMaxNameBytes},
        std::tuple{"the GitLab instance", &key.instance, kMaxInstanceBytes},
        std::tuple{"the job name", &request.job_name, kMaxJobNameBytes},
        std::tuple{"the runner host", &request.arrival_host, kMaxNameBytes},
        std::tuple{"the topology label", &request.topology_same,
                   kMaxLabelBytes}}) {
    if (value->size() > limit) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, " is ", value->size(), " bytes long; at most ",
                       limit, " are accepted"));
    }
  }
  if (key.size == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "gang ", key.group_name, " has 0 members; a gang needs at least 1"));
  }
  if (key.size > options_.max_nodes_per_job) {
    return absl::FailedPreconditionError(absl::StrCat(
        "gang ", key.group_name, " needs ", key.size,
        " nodes but this cluster allows at most ", options_.max_nodes_per_job,
        " per job (max_nodes_per_job)"));
  }
  if (request.member_index < 1 || request.member_index > key.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("member index ", request.member_index, " of gang ",
                     key.group_name, " is outside 1..", key.size));
  }
  if (request.job_id <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("member ", request.member_index, " of gang ",
                     key.group_name, " has no job id"));
  }
  if (std::chrono::milliseconds wait{}; !join_rate_.TryTake(
          absl::StrCat(key.instance, " ", key.project_id), &wait)) {
    observer_->JoinRefused("join_rate_per_project");
    return WithRetryAfter(
        absl::ResourceExhaustedError(absl::StrCat(
            "project ", key.project_id, " joins faster than ",
            options_.join_rate_per_project, " members a second (bursts of ",
            options_.join_burst_per_project,
            ") (join_rate_per_project, join_burst_per_project); member ",
            request.member_index, " of gang ", key.group_name,
            " is refused for now")),
        wait);
  }
  if (!hosts_.empty() && request.gpus_per_node > 0) {
    size_t largest = 0;
    for (const auto& [name, host] : hosts_) {
      largest = std::max(largest, host.spec.gpus.size());
    }
    if (request.gpus_per_node > largest) {
      return absl::FailedPreconditionError(absl::StrCat(
          "gang ", key.group_name, " needs ", request.gpus_per_node,
          " GPUs per node but the largest registered host has ", largest));
    }
  }

  absl::StatusOr<std::string> gang_id = GangIdFor(key);
  if (!gang_id.ok()) return gang_id.status();
  auto found = gangs_.find(*gang_id);
  // A member refused before it could join (RefuseMember) fails its gang's
  // forming: the others are told at once rather than after the join
  // timeout, until a retried job of the refused member comes.
  if (auto refused = refusals_.find(key);
      refused != refusals_.end() &&
      (found == gangs_.end() ||
       found->second.state != state::GangState::kRunning)) {
    if (refused->second.member_index != request.member_index) {
      return absl::AbortedError(refused->second.root_cause);
    }
    if (refused->second.job_id == request.job_id) {
      return absl::FailedPreconditionError(refused->second.root_cause);
    }
    refusals_.erase(refused);
    refusal_order_.erase(
        std::find(refusal_order_.begin(), refusal_order_.end(), key));
  }
  if (found == gangs_.end()) GDT_RETURN_IF_ERROR(CheckFormingQuota(key));
  if (found == gangs_.end() && !hosts_.empty()) {
    // A new gang that can never run fails now, naming the limit.
    WaitingGang shape;
    shape.gang_id = key.group_name;
    // An elastic gang must fit at its smallest.
    shape.members = request.nodes_min != 0 && request.nodes_min < key.size
                        ? request.nodes_min
                        : key.size;
    shape.gpus_per_member = request.gpus_per_node;
    shape.run_bound_s = RunBound(request.job_timeout_seconds);
    shape.same_label = request.topology_same;
    shape.same_required = request.topology_required;
    GDT_RETURN_IF_ERROR(
        CheckFeasible(PlacementHosts(), shape, options_.max_nodes_per_job));
  }
  if (found != gangs_.end()) {
    state::Gang& gang = found->second;
    GDT_RETURN_IF_ERROR(CheckNotFenced(gang, request.job_id));
    // A member its elastic gang started without asks again (its runner
    // retried the preparation): still not needed, whatever the gang's state.
    if (auto left_out = gang.not_needed.find(request.member_index);
        left_out != gang.not_needed.end() &&
        left_out->second == request.job_id) {
      QueueNotNeeded(gang, request.member_index, stream_id);
      return gang.id;
    }
    if (gang.state == state::GangState::kDone ||
        gang.state == state::GangState::kFailed) {
      // A retried job: the gang's next epoch forms (scheduler_failure.cc).
      GDT_RETURN_IF_ERROR(StartNextEpoch(gang, request.job_id));
    }
    auto existing = gang.members.find(request.member_index);
    if (existing != gang.members.end() &&
        existing->second.job_id == request.job_id) {
      GDT_RETURN_IF_ERROR(CheckSoleExecutor(gang, existing->second, request));
    }
    if (gang.state == state::GangState::kRunning) {
      if (existing != gang.members.end() &&
          existing->second.job_id == request.job_id) {
        // Known again after a restart, which forgets it.
        if (existing->second.executor.empty()) {
          existing->second.executor = request.executor;
        }
        QueueAdmitted(gang, existing->second, stream_id);
        return gang.id;
      }
      if (gang.Elastic() && existing == gang.members.end()) {
        // It came after its elastic gang started without it.
        state::Gang updated = gang;
        updated.not_needed[request.member_index] = request.job_id;
        GDT_RETURN_IF_ERROR(store_.SaveGang(updated));
        gang.not_needed = std::move(updated.not_needed);
        QueueNotNeeded(gang, request.member_index, stream_id);
        return gang.id;
      }
      return absl::AlreadyExistsError(absl::StrCat(
          "member ", request.member_index, " of gang ", gang.id,
          " is already running as job ",
          existing == gang.members.end() ? 0 : existing->second.job_id));
    }
    if (existing != gang.members.end() &&
        existing->second.job_id != request.job_id && existing->second.present) {
      return absl::AlreadyExistsError(
          absl::StrCat("member ", request.member_index, " of gang ", gang.id,
                       " is already held by job ", existing->second.job_id));
    }
  }

  // Only the joining member changes: it is built aside, saved alone
  // (StateStore::SaveMember) and then put in place, so that a join costs O(log
  // N) and not a copy and a re-save of the whole gang.
  state::Gang fresh;
  state::Gang* target = nullptr;
  if (found != gangs_.end()) {
    target = &found->second;
  } else {
    fresh.id = *gang_id;
    fresh.key = key;
    fresh.created_unix_ms = clock_.UnixMillis();
    fresh.sequence = next_sequence_;
    target = &fresh;
  }
  const bool was_complete = found != gangs_.end() && Complete(*target);
  state::Member member;
  if (auto existing = target->members.find(request.member_index);
      existing != target->members.end()) {
    member = existing->second;
  }
  const uint64_t previous_stream =
      member.job_id == request.job_id ? member.stream_id : 0;
  member.index = request.member_index;
  member.job_id = request.job_id;
  member.job_name = request.job_name;
  member.gpus_per_node = request.gpus_per_node;
  member.procs_per_node = request.procs_per_node;
  member.launcher = request.launcher;
  member.arrival_host = request.arrival_host;
  member.job_timeout_seconds = request.job_timeout_seconds;
  member.priority = request.priority;
  member.topology_same = request.topology_same;
  member.topology_required = request.topology_required;
  // Preemptible in this epoch only while a retry would bring it back: a
  // member stopped with none left fails for good, and with it its pipeline.
  const int64_t retries_left =
      PreemptRetriesLeft(request.preempt_retries.has_value()
                             ? std::optional<int64_t>(*request.preempt_retries)
                             : std::nullopt,
                         target->epoch);
  member.preemptible = request.preemptible && retries_left > 0;
  if (request.preemptible && retries_left == 0) {
    spdlog::info(
        "event=member_not_preemptible gang={} epoch={} member={} job={} "
        "preempt_retries={}",
        LogValue(target->id), target->epoch, request.member_index,
        request.job_id,
        request.preempt_retries.has_value()
            ? std::to_string(*request.preempt_retries)
            : std::string("unset"));
  }
  const uint32_t nodes_min =
      request.nodes_min < key.size ? request.nodes_min : 0;
  // Only a new gang or new elastic bounds change the gang's stored record
  // (its reason aside, which a restart recomputes).
  const bool gang_changed =
      found == gangs_.end() || target->nodes_min != nodes_min;
  target->nodes_min = nodes_min;
  member.left = false;
  member.present = true;
  member.stream_id = stream_id;
  member.executor = request.executor;
  member.last_reason_sent.clear();  // The new stream gets the reason at once.
  member.told_missing = false;
  // Committed with the next change or the next tick's FlushStore(), so that
  // a burst of joins shares a commit.
  GDT_RETURN_IF_ERROR(store_.SaveJoin(*target, member, gang_changed));
  target->members[request.member_index] = std::move(member);

  if (found == gangs_.end()) {
    ++next_sequence_;
    gang_ids_[key] = fresh.id;
    state::Gang& stored = gangs_[fresh.id];
    stored = std::move(fresh);
    target = &stored;
  }
  live_ids_.insert(target->id);
  NotePresence(*target, request.member_index);
  if (previous_stream != 0 && previous_stream != stream_id) {
    state::MemberEvent superseded;
    superseded.stream_id = previous_stream;
    superseded.kind = state::MemberEvent::Kind::kSuperseded;
    superseded.gang_id = target->id;
    superseded.member_index = request.member_index;
    events_.push_back(std::move(superseded));
  }
  RefreshForming(*target, was_complete, request.member_index);
  return target->id;
}

void Scheduler::Detach(const std::string& gang_id, uint32_t member_index,
                       uint64_t stream_id) {
  auto gang = gangs_.find(gang_id);
  if (gang == gangs_.end() ||
      gang->second.state != state::GangState::kForming) {
    return;
  }
  auto member = gang->second.members.find(member_index);
  if (member == gang->second.members.end() ||
      member->second.stream_id != stream_id) {
    return;
  }
  const bool was_complete = Complete(gang->second);
  member->second.present = false;
  member->second.stream_id = 0;
  NotePresence(gang->second, member_index);
  RefreshForming(gang->second, was_complete, 0);
}

void Scheduler::ForgetDroppedJoins() {
  for (const state::StateStore::DroppedJoin& dropped :
       store_.TakeDroppedJoins()) {
    auto gang = gangs_.find(dropped.gang_id);
    auto member = gang != gangs_.end()
                      ? gang->second.members.find(dropped.member_index)
                      : std::map<uint32_t, state::Member>::iterator();
    const bool forming = gang != gangs_.end() &&
                         gang->second.state == state::GangState::kForming &&
                         member != gang->second.members.end() &&
                         member->second.job_id == dropped.job_id &&
                         !member->second.left;
    spdlog::error(
        "event=join_dropped gang={} member={} job={} error={} action={}",
        LogValue(dropped.gang_id), dropped.member_index, dropped.job_id,
        LogValue(dropped.error.ToString()),
        LogValue(forming
                     ? "the state store cannot store this join: the member "
                       "was taken out of its gang and its job told so; find "
                       "what refuses the row (a trigger, a constraint added "
                       "to the state file) and retry the job"
                     : "the state store cannot store this join again; the "
                       "gang has changed since, and stored the member with "
                       "that change"));
    if (!forming) continue;
    state::Gang& target = gang->second;
    const bool was_complete = Complete(target);
    const uint64_t stream_id = member->second.stream_id;
    target.members.erase(member);
    NotePresence(target, dropped.member_index);
    if (stream_id != 0) {
      state::MemberEvent aborted;
      aborted.stream_id = stream_id;
      aborted.kind = state::MemberEvent::Kind::kAborted;
      aborted.gang_id = target.id;
      aborted.member_index = dropped.member_index;
      aborted.reason = absl::StrCat(
          "the coordinator could not store the join of member ",
          dropped.member_index, " (job ", dropped.job_id, ") to gang ",
          target.id, " and took it back: ", dropped.error.message(),
          "; retry the job once the coordinator's state store accepts it");
      events_.push_back(std::move(aborted));
    }
    RefreshForming(target, was_complete, 0);
  }
}

absl::StatusOr<state::Gang*> Scheduler::FindMember(const std::string& gang_id,
                                                   uint32_t epoch,
                                                   uint32_t member_index,
                                                   int64_t job_id) {
  auto gang = gangs_.find(gang_id);
  if (gang == gangs_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown gang ", gang_id));
  }
  if (gang->second.epoch != epoch) {
    return absl::FailedPreconditionError(absl::StrCat(
        "gang ", gang_id, " is in epoch ", gang->second.epoch, ", not ", epoch,
        ": job ", job_id, " of an older attempt is fenced"));
  }
  auto member = gang->second.members.find(member_index);
  if (member == gang->second.members.end()) {
    return absl::NotFoundError(
        absl::StrCat("gang ", gang_id, " has no member ", member_index));
  }
  if (member->second.job_id != job_id || gang->second.epoch != epoch) {
    return absl::FailedPreconditionError(
        absl::StrCat("member ", member_index, " of gang ", gang_id, " epoch ",
                     gang->second.epoch, " is job ", member->second.job_id,
                     ", not job ", job_id, " of epoch ", epoch));
  }
  return &gang->second;
}

std::string Scheduler::FailureCause(const state::Gang& gang,
                                    const state::Member& member,
                                    int32_t exit_code, bool cancelled,
                                    int64_t exited_unix_ms) const {
  const std::string host =
      member.host_name.empty() ? std::string("no host") : member.host_name;
  return absl::StrCat(
      "member ", member.index, "/", gang.key.size, " (job ", member.job_id,
      " on host ", host, ") ",
      cancelled ? std::string("was cancelled")
                : absl::StrCat("exited ", exit_code),
      " at ",
      state::UtcTimeOfDay(exited_unix_ms > 0 ? exited_unix_ms
                                             : clock_.UnixMillis()));
}

absl::Status Scheduler::ReportExit(const std::string& gang_id, uint32_t epoch,
                                   uint32_t member_index, int64_t job_id,
                                   int32_t exit_code, bool cancelled,
                                   bool peer_suspected,
                                   int64_t exited_unix_ms) {
  absl::StatusOr<state::Gang*> found =
      FindMember(gang_id, epoch, member_index, job_id);
  if (!found.ok()) return found.status();
  state::Gang& gang = **found;
  // The agent and the executor both report the script's exit: the first
  // report counts, the same again changes nothing (a cancellation still
  // does: a member cancelled at the exit barrier had reported 0).
  if (gang.members.at(member_index).exit_code == exit_code && exit_code != -1 &&
      !cancelled) {
    return absl::OkStatus();
  }
  if (gang.state == state::GangState::kRunning && gang.preempt_notice_ms != 0) {
    // A member of a gang being preempted ended (typically it checkpointed
    // on the notice and stopped): the gang is stopped as preempted, never
    // counted as succeeded, so that the retry finishes the training.
    int32_t& code = gang.members.at(member_index).exit_code;
    const int32_t before = code;
    code = exit_code;
    absl::Status status = FailPreempted(
        gang,
        gang.preempt_checkpoint_ms != 0
            ? std::string()
            : absl::StrCat(MemberLabel(gang, gang.members.at(member_index)),
                           " exited ", exit_code));
    if (!status.ok()) code = before;
    return status;
  }
  state::Gang updated = gang;
  state::Member& member = updated.members.at(member_index);
  member.exit_code = exit_code;
  bool fails = gang.state == state::GangState::kRunning &&
               !AllExitedZero(gang) && (exit_code != 0 || cancelled);
  // Probably a consequence of another member's failure: wait for it.
  const bool suspected = fails && peer_suspected && !cancelled;
  if (suspected) {
    fails = false;
    if (updated.suspect_member == 0) {
      updated.suspect_member = member_index;
      updated.suspect_since = clock_.Now();
      updated.suspect_exited_unix_ms = exited_unix_ms;
    }
  }
  if (fails) {
    updated.state = state::GangState::kFailed;
    updated.failed_member = member_index;
    updated.reason = absl::StrCat(
        "gang ", updated.id, " failed: ",
        FailureCause(updated, member, exit_code, cancelled, exited_unix_ms),
        "; stopping");
  }
  // Unless the gang fails, only the member's exit code changed: store that
  // member alone, so that a gang of thousands writes thousands of small
  // records at its end rather than the whole gang at every exit.
  GDT_RETURN_IF_ERROR(fails ? store_.SaveGang(updated)
                            : store_.SaveMember(updated, member));
  gang = std::move(updated);
  if (fails) {
    spdlog::warn("event=gang_failed gang={} reason={}", LogValue(gang.id),
                 LogValue(gang.reason));
    observer_->Failure(cancelled         ? "cancelled"
                       : exit_code > 128 ? "signal"
                                         : "exit_nonzero");
  }
  NotifyWatchers(gang);
  return absl::OkStatus();
}

absl::Status Scheduler::Watch(const std::string& gang_id, uint32_t epoch,
                              uint32_t member_index, int64_t job_id,
                              uint64_t watch_id) {
  absl::StatusOr<state::Gang*> found =
      FindMember(gang_id, epoch, member_index, job_id);
  if (!found.ok()) return found.status();
  const state::Gang& gang = **found;
  if (gang.state == state::GangState::kForming ||
      gang.state == state::GangState::kDone) {
    return absl::FailedPreconditionError(
        absl::StrCat("gang ", gang_id, " is ", state::GangStateName(gang.state),
                     "; only an admitted gang can be watched"));
  }
  int& open = watches_per_job_[job_id];
  if (open >= kMaxWatchesPerJob) {
    return absl::ResourceExhaustedError(
        absl::StrCat("job ", job_id, " already has ", open,
                     " watch streams open on gang ", gang_id, ", the limit"));
  }
  ++open;
  watchers_[watch_id] = gang_id;
  watch_jobs_[watch_id] = job_id;
  QueueWatchEvent(gang, watch_id);
  return absl::OkStatus();
}

void Scheduler::Unwatch(uint64_t watch_id) {
  watchers_.erase(watch_id);
  auto watch = watch_jobs_.find(watch_id);
  if (watch == watch_jobs_.end()) return;
  auto open = watches_per_job_.find(watch->second);
  if (open != watches_per_job_.end() && --open->second <= 0) {
    watches_per_job_.erase(open);
  }
  watch_jobs_.erase(watch);
}

void Scheduler::SetRunningMembers(
    const std::string& host_name,
    std::optional<std::set<std::string>> member_ids) {
  if (hosts_.count(host_name) == 0) return;
  if (member_ids.has_value()) {
    running_members_[host_name] = std::move(*member_ids);
  } else {
    running_members_.erase(host_name);
  }
}

std::vector<std::string> Scheduler::MembersLeft(
    const std::string& host_name,
    const std::vector<std::string>& member_ids) const {
  std::vector<std::string> left;
  for (const std::string& id : member_ids) {
    const size_t slash = id.rfind('/');
    int64_t job_id = 0;
    if (slash == std::string::npos ||
        !absl::SimpleAtoi(id.substr(slash + 1), &job_id)) {
      continue;
    }
    const std::string base_id = id.substr(0, slash);
    if (base_id.empty() || base_id.find('#') != std::string::npos) continue;
    // The live gang, then its archived epochs ("<id>#<epoch>").
    auto left_in = [&](const state::Gang& gang) -> std::optional<bool> {
      for (const auto& [index, member] : gang.members) {
        if (member.job_id == job_id && member.host_name == host_name) {
          return member.left;
        }
      }
      return std::nullopt;
    };
    std::optional<bool> found;
    if (auto live = gangs_.find(base_id); live != gangs_.end()) {
      found = left_in(live->second);
    }
    const std::string prefix = base_id + "#";
    for (auto it = gangs_.lower_bound(prefix);
         !found.has_value() && it != gangs_.end() &&
         it->first.compare(0, prefix.size(), prefix) == 0;
         ++it) {
      found = left_in(it->second);
    }
    if (found.value_or(false)) left.push_back(id);
  }
  return left;
}

void Scheduler::SetWatchedProgress(
    const std::string& host_name,
    std::map<std::string, MemberProgress> progress) {
  if (hosts_.count(host_name) == 0) return;
  if (progress.empty()) {
    watched_progress_.erase(host_name);
  } else {
    watched_progress_[host_name] = std::move(progress);
  }
}

void Scheduler::QueueWatchEvent(const state::Gang& gang, uint64_t watch_id) {
  state::MemberEvent event;
  event.stream_id = watch_id;
  event.gang_id = gang.id;
  if (gang.state == state::GangState::kFailed) {
    event.kind = state::MemberEvent::Kind::kGangFailed;
    event.reason = gang.reason;
    auto culprit = gang.members.find(gang.failed_member);
    if (culprit != gang.members.end()) {
      event.failed_member = culprit->first;
      event.failed_job_id = culprit->second.job_id;
    }
    event.collect_evidence = gang.collect_evidence;
    event.preempted =
        gang.preemptions > 0 && gang.preempted_epoch == gang.epoch;
  } else if (AllExitedZero(gang)) {
    event.kind = state::MemberEvent::Kind::kGangSucceeded;
  } else if (gang.state == state::GangState::kDone) {
    event.kind = state::MemberEvent::Kind::kGangFailed;
    event.reason = absl::StrCat("gang ", gang.id,
                                " ended: every member left before all of "
                                "them exited 0");
  } else {
    event.kind = state::MemberEvent::Kind::kGangRunning;
    event.progress.members_total = gang.Size();
    if (gang.Elastic()) {
      // It runs with the members it has.
      for (const auto& [index, member] : gang.members) {
        if (member.exit_code != 0) {
          event.progress.unfinished_indices.push_back(index);
        }
      }
    } else {
      for (uint32_t index = 1; index <= gang.key.size; ++index) {
        auto member = gang.members.find(index);
        if (member == gang.members.end() || member->second.exit_code != 0) {
          event.progress.unfinished_indices.push_back(index);
        }
      }
    }
  }
  if (event.kind != state::MemberEvent::Kind::kGangRunning)
    watchers_.erase(watch_id);
  events_.push_back(std::move(event));
}

void Scheduler::NotifyWatchers(const state::Gang& gang) {
  std::vector<uint64_t> watch_ids;
  for (const auto& [watch_id, gang_id] : watchers_) {
    if (gang_id == gang.id) watch_ids.push_back(watch_id);
  }
  for (uint64_t watch_id : watch_ids) QueueWatchEvent(gang, watch_id);
}

absl::Status Scheduler::Leave(const state::GangKey& key, uint32_t member_index,
                              int64_t job_id, const std::string& executor) {
  // The job's own epoch: the current one, or an older one still stopping.
  state::Gang* epoch_gang = GangOfJob(key, member_index, job_id);
  if (epoch_gang == nullptr) return absl::OkStatus();
  state::Gang& gang = *epoch_gang;
  auto member = gang.members.find(member_index);
  if (member == gang.members.end() || member->second.job_id != job_id ||
      member->second.left) {
    return absl::OkStatus();
  }
  if (!executor.empty() && !member->second.executor.empty() &&
      executor != member->second.executor) {
    spdlog::warn("event=leave_ignored gang={} member={} job={} reason={}",
                 LogValue(gang.id), member_index, job_id,
                 LogValue("another executor of the same job holds the member"));
    return absl::OkStatus();
  }
  if (gang.state == state::GangState::kRunning &&
      member->second.exit_code == -1) {
    // Its job ended without a reported script exit (a stage before or
    // around the user script failed, or the runner gave up on it): the
    // gang cannot finish without it, so its peers must not wait for it.
    GDT_RETURN_IF_ERROR(FailGang(
        gang, member_index,
        absl::StrCat(MemberLabel(gang, member->second),
                     " ended before its script finished (its job failed or "
                     "was cancelled outside the script) at ",
                     state::UtcTimeOfDay(clock_.UnixMillis())),
        "member_lost"));
    member = gang.members.find(member_index);  // FailGang replaced it.
  }
  const bool was_complete =
      gang.state == state::GangState::kForming && Complete(gang);
  state::Member leaving = member->second;
  const uint64_t stream_id = leaving.stream_id;
  leaving.present = false;
  leaving.stream_id = 0;
  bool all_left = false;
  uint32_t* staying = nullptr;
  if (gang.state == state::GangState::kRunning ||
      gang.state == state::GangState::kFailed) {
    leaving.left = true;
    staying = &StayingOf(gang);
    all_left = *staying <= 1;  // Only this member had not left.
  }
  if (all_left) {
    // The gang ends and its leases go: the whole gang is saved.
    state::Gang updated = gang;
    updated.members.at(member_index) = std::move(leaving);
    if (updated.state == state::GangState::kRunning) {
      updated.state = state::GangState::kDone;
      updated.reason = "every member left";
    }
    updated.ended_unix_ms = clock_.UnixMillis();
    GDT_RETURN_IF_ERROR(store_.SaveGang(updated));
    ReleaseLeases(updated);
    spdlog::info("event=gang_leases_released gang={} state={}",
                 LogValue(updated.id), state::GangStateName(updated.state));
    gang = std::move(updated);
  } else {
    // Only this member's row changes; the leases stay as they are.
    GDT_RETURN_IF_ERROR(store_.SaveMember(gang, leaving));
    member->second = std::move(leaving);
    if (staying != nullptr) --*staying;
    if (gang.state == state::GangState::kForming) {
      NotePresence(gang, member_index);
    }
  }
  if (stream_id != 0) {
    state::MemberEvent aborted;
    aborted.stream_id = stream_id;
    aborted.kind = state::MemberEvent::Kind::kAborted;
    aborted.gang_id = gang.id;
    aborted.member_index = member_index;
    aborted.reason = absl::StrCat("member ", member_index, " (job ", job_id,
                                  ") left gang ", gang.id);
    events_.push_back(std::move(aborted));
  }
  if (gang.state == state::GangState::kDone) NotifyWatchers(gang);
  // Only a forming gang's reason changes with a leave; freed leases are
  // offered by the next admission pass (the coordinator wakes its
  // scheduler thread after every leave), not by a full pass per leave.
  if (gang.state == state::GangState::kForming) {
    RefreshForming(gang, was_complete, 0);
  }
  return absl::OkStatus();
}

Scheduler::UsageMap Scheduler::CurrentUsage() const {
  UsageMap usage;
  for (const auto& [host, gpus] : gpu_leases_) {
    for (const auto& [gpu, gang_id] : gpus) {
      usage[host].gpus[gpu] = gang_id;
      usage[host].busy_gang = gang_id;
    }
  }
  for (const std::string& id : live_ids_) {
    auto found = gangs_.find(id);
    if (found == gangs_.end() || !HoldsLeases(found->second)) continue;
    const state::Gang& gang = found->second;
    for (const auto& [index, member] : gang.members) {
      if (member.gpus_per_node != 0) continue;
      Usage& host_usage = usage[member.host_name];
      ++host_usage.cpu_members;
      host_usage.busy_gang = id;
    }
  }
  return usage;
}

std::vector<PlacementHost> Scheduler::PlacementHosts() const {
  std::vector<PlacementHost> out;
  out.reserve(hosts_.size());
  for (const auto& [name, host] : hosts_) {
    PlacementHost view;
    view.name = name;
    for (const state::GpuInfo& gpu : host.spec.gpus) {
      view.gpu_indices.push_back(gpu.index);
    }
    view.cpu_slots = SlotsOf(host);
    view.runner_slots = host.spec.runner_slots;
    view.labels = host.spec.labels;
    view.drained = host.drained;
    if (auto not_ready = not_ready_.find(name); not_ready != not_ready_.end()) {
      view.not_ready = true;
      view.not_ready_reason = not_ready->second;
    }
    view.down = StateOf(host) != state::HostState::kUp;
    out.push_back(std::move(view));
  }
  return out;
}

std::vector<RunningGang> Scheduler::RunningGangs() const {
  std::vector<RunningGang> out;
  const int64_t now_s = clock_.UnixMillis() / 1000;
  for (const std::string& id : live_ids_) {
    auto found = gangs_.find(id);
    if (found == gangs_.end() || !HoldsLeases(found->second)) continue;
    const state::Gang& gang = found->second;
    RunningGang running;
    running.gang_id = id;
    // A failed gang frees its leases as soon as its members have left.
    running.end_bound_unix_s = gang.state == state::GangState::kRunning
                                   ? gang.end_bound_unix_s
                                   : now_s;
    running.checkpoint_interval_s = options_.preemption.checkpoint_interval_s;
    running.start_unix_s = gang.started_unix_s;
    running.queue_time_unix_s = gang.created_unix_ms / 1000;
    running.preemptions = gang.preemptions;
    running.priority = gang.Priority();
    // Preemptible only when every member says so: one member that did not
    // declare it keeps the whole gang out of preemption.
    bool first = true;
    for (const auto& [index, member] : gang.members) {
      running.preemptible = first ? member.preemptible
                                  : running.preemptible && member.preemptible;
      first = false;
      if (member.host_name.empty()) continue;
      running.members.push_back(
          LeasedMember{member.host_name, member.gpu_indices});
    }
    // A gang being preempted frees its GPUs by its stop deadline and is
    // not chosen again meanwhile.
    if (gang.state == state::GangState::kRunning &&
        gang.preempt_notice_ms != 0) {
      // Withdrawn (no deadline): it runs to its own bound.
      if (gang.preempt_stop_by_ms != 0) {
        running.end_bound_unix_s = gang.preempt_stop_by_ms / 1000;
      }
      running.preemptible = false;
    }
    if (!running.members.empty()) out.push_back(std::move(running));
  }
  return out;
}

WaitingGang Scheduler::WaitingGangOf(const state::Gang& gang) const {
  WaitingGang out;
  out.gang_id = gang.id;
  out.members = gang.key.size;
  out.sequence = gang.sequence;
  out.queue_time_unix_s = gang.created_unix_ms / 1000;
  out.priority = gang.Priority();
  uint32_t timeout = 0;
  for (const auto& [index, member] : gang.members) {
    out.gpus_per_member = std::max(out.gpus_per_member, member.gpus_per_node);
    timeout = std::max(timeout, member.job_timeout_seconds);
    if (!member.topology_same.empty()) {
      out.same_label = member.topology_same;
      out.same_required = out.same_required || member.topology_required;
    }
    out.arrival_hosts[index] = member.arrival_host;
  }
  out.run_bound_s = RunBound(timeout);
  if (gang.Elastic()) out.min_members = gang.nodes_min;
  return out;
}

uint32_t& Scheduler::StayingOf(const state::Gang& gang) {
  auto count = [&gang] {
    return static_cast<uint32_t>(
        std::count_if(gang.members.begin(), gang.members.end(),
                      [](const auto& entry) { return !entry.second.left; }));
  };
  auto [entry, inserted] = staying_.try_emplace(gang.id);
  Staying& staying = entry->second;
  if (inserted || staying.epoch != gang.epoch || staying.state != gang.state) {
    staying = Staying{gang.epoch, gang.state, count()};
  } else {
#ifndef NDEBUG
    // Every leave of a member of a gang holding leases must reach Leave().
    assert(staying.count == count());
#endif
  }
  return staying.count;
}

bool Scheduler::ElasticWaitOver(const state::Gang& gang) const {
  return gang.Elastic() &&
         clock_.UnixMillis() - gang.created_unix_ms >=
             std::chrono::duration_cast<std::chrono::milliseconds>(
                 options_.elastic_wait)
                 .count();
}

Scheduler::Absence& Scheduler::AbsenceOf(const state::Gang& gang,
                                         bool verify) const {
  auto count = [&gang] {
    Absence counted;
    counted.epoch = gang.epoch;
    auto member = gang.members.begin();
    for (uint32_t index = 1; index <= gang.key.size; ++index) {
      while (member != gang.members.end() && member->first < index) ++member;
      const bool joined =
          member != gang.members.end() && member->first == index;
      if (!joined || !member->second.present) {
        counted.missing.insert(counted.missing.end(), index);
        if (joined)
          counted.disconnected.insert(counted.disconnected.end(), index);
      }
      if (joined && member->second.stream_id != 0 &&
          !member->second.told_missing) {
        counted.untold.insert(counted.untold.end(), index);
      }
    }
    return counted;
  };
  auto [entry, inserted] = absences_.try_emplace(gang.id);
  Absence& absence = entry->second;
  if (inserted || absence.epoch != gang.epoch) {
    absence = count();
  } else if (verify) {
#ifndef NDEBUG
    // Every change of a forming gang's members must reach NotePresence.
    const Absence counted = count();
    assert(absence.missing == counted.missing &&
           absence.disconnected == counted.disconnected &&
           absence.untold == counted.untold);
#endif
  }
  return absence;
}

void Scheduler::NotePresence(const state::Gang& gang, uint32_t index) {
  Absence& absence = AbsenceOf(gang, /*verify=*/false);
  auto member = gang.members.find(index);
  const bool joined = member != gang.members.end();
  if (joined && member->second.present) {
    absence.missing.erase(index);
    absence.disconnected.erase(index);
  } else {
    absence.missing.insert(index);
    if (joined) {
      absence.disconnected.insert(index);
    } else {
      absence.disconnected.erase(index);
    }
  }
  if (joined && member->second.stream_id != 0 && !member->second.told_missing) {
    absence.untold.insert(index);
  } else {
    absence.untold.erase(index);
  }
}

bool Scheduler::Complete(const state::Gang& gang) const {
  return AbsenceOf(gang).missing.empty();
}

std::string Scheduler::WaitingReason(const state::Gang& gang,
                                     const BlockedGang* blocked) const {
  const std::string label = GangLabel(gang.key);
  // From the kept absence: a join must not walk every member.
  const Absence& absence = AbsenceOf(gang);
  const size_t missing = absence.missing.size();
  if (missing > 0) {
    std::vector<uint32_t> listed;
    for (uint32_t index : absence.missing) {
      if (listed.size() == kListedMissing) break;
      listed.push_back(index);
    }
    std::string disconnected;
    if (!absence.disconnected.empty()) {
      disconnected = absl::StrCat(
          "job ", gang.members.at(*absence.disconnected.begin()).job_id,
          " disconnected");
    }
    return absl::StrCat(
        label, ": ", gang.key.size - missing, "/", gang.key.size,
        " members present, waiting for member", missing > 1 ? "s " : " ",
        absl::StrJoin(listed, ", "),
        missing > listed.size()
            ? absl::StrCat(" and ", missing - listed.size(), " more")
            : "",
        " — ", disconnected.empty() ? "no job picked up yet" : disconnected,
        gang.Elastic()
            ? absl::StrCat("; elastic ", gang.nodes_min, "..", gang.key.size,
                           ": starts with the members present (at least ",
                           gang.nodes_min, ") once it has waited ",
                           options_.elastic_wait.count(), " s")
            : std::string());
  }
  const std::string present =
      absl::StrCat(label, ": all ", gang.key.size, " members present, ");
  if (hosts_.empty()) return present + "no host registered yet";
  const bool any_up =
      std::any_of(hosts_.begin(), hosts_.end(), [&](const auto& entry) {
        return StateOf(entry.second) == state::HostState::kUp;
      });
  if (!any_up) {
    return absl::StrCat(present, "waiting for a host to come up (all ",
                        hosts_.size(), " registered hosts are down)");
  }
  if (blocked == nullptr) {
    return present + (gang.blocked_note.empty() ? std::string("placing")
                                                : gang.blocked_note);
  }
  return absl::StrCat(present, blocked->why, " (queue position ",
                      blocked->queue_position, ")");
}

std::vector<AdmissionProposal> Scheduler::Pass() {
  std::vector<state::Gang*> forming;
  for (auto it = live_ids_.begin(); it != live_ids_.end();) {
    auto found = gangs_.find(*it);
    if (found == gangs_.end() ||
        found->second.state != state::GangState::kForming) {
      absences_.erase(*it);  // Kept for forming gangs only.
    }
    if (found == gangs_.end() ||
        (found->second.state != state::GangState::kForming &&
         !HoldsLeases(found->second))) {
      if (found != gangs_.end()) NoteFinished(*it);
      it = live_ids_.erase(it);  // Ended for good (see live_ids_).
      continue;
    }
    if (found->second.state == state::GangState::kForming) {
      forming.push_back(&found->second);
    }
    ++it;
  }
  std::sort(forming.begin(), forming.end(),
            [](const state::Gang* a, const state::Gang* b) {
              return a->sequence < b->sequence;
            });
  // Incomplete gangs matter only for runner-slot deadlocks, which need
  // declared runner slots (placement.h).
  const bool slots_declared = hosts_with_runner_slots_ != 0;
  std::vector<WaitingGang> complete;
  std::vector<WaitingGang> incomplete;  // Hold runner slots (deadlock).
  for (const state::Gang* gang : forming) {
    const uint32_t present =
        gang->key.size - static_cast<uint32_t>(AbsenceOf(*gang).missing.size());
    if (Complete(*gang)) {
      complete.push_back(WaitingGangOf(*gang));
    } else if (present >= gang->nodes_min && ElasticWaitOver(*gang)) {
      // Waited long enough for the rest: offered with the members present.
      WaitingGang shape = WaitingGangOf(*gang);
      for (const auto& [index, member] : gang->members) {
        if (!member.present) shape.arrival_hosts.erase(index);
      }
      shape.members = present;
      shape.min_members = gang->nodes_min < present ? gang->nodes_min : 0;
      complete.push_back(std::move(shape));
    } else if (slots_declared &&
               AbsenceOf(*gang).missing.size() < gang->key.size) {
      incomplete.push_back(WaitingGangOf(*gang));
      // Members that left hold no runner slot.
      for (const auto& [index, member] : gang->members) {
        if (!member.present) incomplete.back().arrival_hosts.erase(index);
      }
    }
  }
  PlanOutcome plan;
  if (!complete.empty() || !incomplete.empty()) {
    // The host list is built only when something is placed: a pass without
    // complete gangs (most registrations, joins and wakes) costs O(live
    // gangs), not O(hosts).
    plan = PlanAdmissions(PlacementHosts(), RunningGangs(), complete,
                          clock_.UnixMillis() / 1000, incomplete,
                          options_.preemption);
  }
  BounceGangs(plan.bounced, forming);
  // Victims get their checkpoint notice now and are stopped later
  // (StopPreemptedGangs).
  for (const PreemptedGang& victim : plan.preempted) {
    auto found = gangs_.find(victim.gang_id);
    if (found == gangs_.end()) continue;
    found->second.preemption_planned_by = victim.by;
    StartPreemption(found->second, victim);
  }
  // The running gangs told to make room for each waiting gang (notice sent,
  // not stopped yet), for that gang's reason.
  struct MakingRoom {
    std::vector<std::string> victims;
    int64_t stop_by_ms = 0;  // The latest of their stop deadlines.
  };
  std::map<std::string, MakingRoom> making_room;
  if (options_.preemption.enabled && !plan.blocked.empty()) {
    for (const auto& [id, live] : LiveGangs()) {
      if (live->state != state::GangState::kRunning ||
          live->preempt_stop_by_ms == 0 || live->preempt_by.empty()) {
        continue;
      }
      MakingRoom& room = making_room[live->preempt_by];
      room.victims.push_back(id);
      room.stop_by_ms = std::max(room.stop_by_ms, live->preempt_stop_by_ms);
    }
  }
  std::map<std::string, const PlannedGang*> admitted;
  for (const PlannedGang& planned : plan.admitted) {
    admitted[planned.gang_id] = &planned;
  }
  std::vector<AdmissionProposal> proposals;
  // Gangs proposed on one master host in this pass start with different
  // ports, so that admitting one does not defer the next.
  std::map<std::string, std::set<uint32_t>> offered;
  // Ports some live gang holds on any host, or offered first in this pass:
  // a gang gets one of these only when the range has no other left, so
  // that a port names one gang's master in the whole cluster while it can
  // (members' connect programs also match the master's address; this
  // covers a member whose agent could not resolve it).
  std::set<uint32_t> held_anywhere;
  for (const auto& [host, ports] : port_leases_) {
    for (const auto& [port, gang] : ports) held_anywhere.insert(port);
  }
  for (state::Gang* gang : forming) {
    gang->queue_position = 0;
    auto planned = admitted.find(gang->id);
    auto blocked = plan.blocked.find(gang->id);
    if (planned != admitted.end()) {
      const std::string& master = planned->second->members.front().host;
      AdmissionProposal proposal;
      proposal.gang_id = gang->id;
      proposal.master_host = master;
      proposal.agent_endpoint = hosts_.at(master).spec.agent_endpoint;
      proposal.members = planned->second->members;
      proposal.not_needed = planned->second->not_needed;
      const auto& leased = port_leases_[master];
      std::set<uint32_t>& taken = offered[master];
      // First the ports no gang holds anywhere, then the others free here.
      for (const bool unique : {true, false}) {
        for (uint32_t port = options_.master_port_min;
             port <= options_.master_port_max &&
             proposal.candidate_ports.size() < kMaxCandidatePorts;
             ++port) {
          if (leased.count(port) == 0 && taken.count(port) == 0 &&
              held_anywhere.count(port) == (unique ? 0u : 1u)) {
            proposal.candidate_ports.push_back(port);
          }
        }
      }
      if (!proposal.candidate_ports.empty()) {
        taken.insert(proposal.candidate_ports.front());
        held_anywhere.insert(proposal.candidate_ports.front());
      }
      proposals.push_back(std::move(proposal));
      gang->reason = WaitingReason(*gang, nullptr);
    } else if (blocked != plan.blocked.end()) {
      gang->queue_position = blocked->second.queue_position;
      gang->reason = WaitingReason(*gang, &blocked->second);
      if (auto room = making_room.find(gang->id); room != making_room.end()) {
        const bool one = room->second.victims.size() == 1;
        absl::StrAppend(&gang->reason, "; making room: gang", one ? " " : "s ",
                        FewNames(room->second.victims), one ? " has" : " have",
                        " the checkpoint notice and stop", one ? "s" : "",
                        " at the next checkpoint, or by ",
                        state::UtcTimeOfDay(room->second.stop_by_ms),
                        " at the latest");
      }
    } else {
      gang->reason = WaitingReason(*gang, nullptr);
    }
    QueueWaiting(*gang);
  }
  return proposals;
}

void Scheduler::BounceGangs(const std::vector<BouncedGang>& bounced,
                            std::vector<state::Gang*>& forming) {
  for (const BouncedGang& bounce : bounced) {
    auto found = gangs_.find(bounce.gang_id);
    if (found == gangs_.end()) continue;
    absl::Status failed =
        FailGang(found->second, 0, bounce.message, "deadlock_bounce");
    if (!failed.ok()) {
      spdlog::error("event=gang_bounce_failed gang={} error={}",
                    LogValue(bounce.gang_id), LogValue(failed.ToString()));
      continue;
    }
    observer_->DeadlockBounce(bounce.gang_id);
    forming.erase(std::remove(forming.begin(), forming.end(), &found->second),
                  forming.end());
  }
}

void Scheduler::RefreshForming(state::Gang& gang, bool was_complete,
                               uint32_t joined) {
  // Placement looks at complete gangs only, and at incomplete ones only for
  // runner-slot deadlocks, which need declared runner slots.
  const bool slots_declared = hosts_with_runner_slots_ != 0;
  if (was_complete || Complete(gang) || slots_declared) {
    Pass();
    return;
  }
  gang.queue_position = 0;
  gang.reason = WaitingReason(gang, nullptr);
  QueueWaiting(gang, joined);
  // An elastic gang that has waited its elastic_wait is placed with the
  // members present: a join may make it fit.
  last_join_needs_no_pass_ = joined != 0 && !ElasticWaitOver(gang);
}

void Scheduler::QueueWaiting(state::Gang& gang, uint32_t joined) {
  Absence& absence = AbsenceOf(gang);
  state::WaitingInfo info;
  info.members_total = gang.key.size;
  info.members_present =
      gang.key.size - static_cast<uint32_t>(absence.missing.size());
  for (uint32_t index : absence.missing) {
    if (info.missing_indices.size() == kSentMissing) break;
    info.missing_indices.push_back(index);
  }
  info.reason = gang.reason;
  info.queue_position = gang.queue_position;
  const bool missing = info.members_present < gang.key.size;
  const Clock::TimePoint now = clock_.Now();
  const bool refresh_due = now >= gang.waiting_refresh_due;
  bool refreshed = false;
  auto queue = [&](uint32_t index, state::Member& member) {
    if (member.stream_id == 0) return;
    // Coalesced: a count-only change for a member already told that
    // members are missing waits for the gang's next refresh.
    if (missing && member.told_missing && !refresh_due) return;
    if (member.last_reason_sent == gang.reason) return;
    if (missing && member.told_missing) refreshed = true;
    member.last_reason_sent = gang.reason;
    member.told_missing = missing;
    if (missing) {
      absence.untold.erase(index);
    } else {
      absence.untold.insert(index);
    }
    state::MemberEvent event;
    event.stream_id = member.stream_id;
    event.kind = state::MemberEvent::Kind::kWaiting;
    event.gang_id = gang.id;
    event.member_index = index;
    event.waiting = info;
    events_.push_back(std::move(event));
  };
  if (missing && !refresh_due) {
    // Nobody already told is due: only the joining member's stream and
    // those not told yet (e.g. after a complete gang lost a member) hear it.
    std::vector<uint32_t> due(absence.untold.begin(), absence.untold.end());
    if (joined != 0) due.push_back(joined);
    for (uint32_t index : due) {
      if (auto member = gang.members.find(index);
          member != gang.members.end()) {
        queue(index, member->second);
      }
    }
    return;
  }
  for (auto& [index, member] : gang.members) queue(index, member);
  if (refreshed) gang.waiting_refresh_due = now + kWaitingRefresh;
}

std::vector<AdmissionProposal> Scheduler::Plan() { return Pass(); }

absl::Status Scheduler::CheckPlanned(
    const state::Gang& gang, const std::vector<PlannedMember>& planned) const {
  const bool size_fits = gang.Elastic() ? planned.size() >= gang.nodes_min &&
                                              planned.size() <= gang.key.size
                                        : planned.size() == gang.key.size;
  if (!size_fits) {
    return absl::UnavailableError(
        absl::StrCat("gang ", gang.id, " has no placement for every member"));
  }
  const UsageMap usage = CurrentUsage();
  std::map<std::string, uint32_t> cpu_members;
  std::set<std::pair<std::string, uint32_t>> taken;
  for (const PlannedMember& member : planned) {
    auto host = hosts_.find(member.host);
    auto joined = gang.members.find(member.member_index);
    if (host == hosts_.end() || joined == gang.members.end() ||
        StateOf(host->second) != state::HostState::kUp ||
        host->second.drained || not_ready_.count(member.host) > 0) {
      return absl::UnavailableError(absl::StrCat(
          "host ", member.host, " no longer takes gang ", gang.id));
    }
    if (member.gpu_indices.size() < joined->second.gpus_per_node) {
      return absl::UnavailableError(
          absl::StrCat("member ", member.member_index, " of gang ", gang.id,
                       " was planned with too few GPUs"));
    }
    auto host_usage = usage.find(member.host);
    for (const uint32_t gpu : member.gpu_indices) {
      const bool exists = std::any_of(
          host->second.spec.gpus.begin(), host->second.spec.gpus.end(),
          [gpu](const state::GpuInfo& info) { return info.index == gpu; });
      const bool leased =
          host_usage != usage.end() && host_usage->second.gpus.count(gpu) != 0;
      if (!exists || leased || !taken.emplace(member.host, gpu).second) {
        return absl::UnavailableError(absl::StrCat(
            "GPU ", gpu, " of ", member.host, " is no longer free"));
      }
    }
    if (member.gpu_indices.empty()) {
      const uint32_t running =
          host_usage != usage.end() ? host_usage->second.cpu_members : 0;
      if (running + ++cpu_members[member.host] > SlotsOf(host->second)) {
        return absl::UnavailableError(
            absl::StrCat("host ", member.host, " has no free slot left"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Scheduler::Admit(const AdmissionProposal& proposal,
                              uint32_t port) {
  auto found = gangs_.find(proposal.gang_id);
  if (found == gangs_.end() ||
      found->second.state != state::GangState::kForming) {
    return absl::FailedPreconditionError(
        absl::StrCat("gang ", proposal.gang_id, " is no longer forming"));
  }
  state::Gang updated = found->second;
  std::set<uint32_t> planned_indices;
  for (const PlannedMember& planned : proposal.members) {
    planned_indices.insert(planned.member_index);
  }
  // An elastic gang starting smaller needs only its planned members.
  const bool all_present = std::all_of(
      updated.members.begin(), updated.members.end(), [&](const auto& entry) {
        return entry.second.present ||
               (updated.Elastic() && planned_indices.count(entry.first) == 0);
      });
  if (!all_present ||
      (!updated.Elastic() && updated.members.size() != updated.key.size)) {
    return absl::FailedPreconditionError(
        absl::StrCat("gang ", updated.id, " lost a member before admission"));
  }
  if (absl::Status fits = CheckPlanned(updated, proposal.members);
      !fits.ok() || proposal.members.front().host != proposal.master_host) {
    return absl::UnavailableError(absl::StrCat(
        "gang ", updated.id, " no longer fits as proposed (",
        fits.ok() ? "master moved" : fits.message(), "); trying again"));
  }
  if (port_leases_[proposal.master_host].count(port) != 0 ||
      port < options_.master_port_min || port > options_.master_port_max) {
    return absl::UnavailableError(absl::StrCat(
        "port ", port, " on ", proposal.master_host, " is not available"));
  }
  const state::Host& master = hosts_.at(proposal.master_host);
  updated.state = state::GangState::kRunning;
  updated.reason.clear();
  updated.blocked_note.clear();
  updated.queue_position = 0;
  updated.master_host = master.spec.name;
  updated.master_addr = master.spec.address;
  updated.master_port = port;
  uint32_t timeout = 0;
  for (const PlannedMember& planned : proposal.members) {
    state::Member& member = updated.members.at(planned.member_index);
    member.node_rank = static_cast<int32_t>(planned.node_rank);
    member.host_name = planned.host;
    member.gpu_indices = planned.gpu_indices;
    timeout = std::max(timeout, member.job_timeout_seconds);
  }
  updated.started_unix_s = clock_.UnixMillis() / 1000;
  updated.end_bound_unix_s = updated.started_unix_s + RunBound(timeout);
  // An elastic gang started smaller runs without its other members: they
  // hold nothing, and those present are told they are not needed.
  std::vector<std::pair<uint32_t, uint64_t>> left_out;
  for (auto it = updated.members.begin(); it != updated.members.end();) {
    if (planned_indices.count(it->first) != 0) {
      ++it;
      continue;
    }
    updated.not_needed[it->first] = it->second.job_id;
    left_out.emplace_back(it->first, it->second.stream_id);
    it = updated.members.erase(it);
  }
  GDT_RETURN_IF_ERROR(store_.SaveGang(updated));

  for (const auto& [index, member] : updated.members) {
    for (uint32_t gpu : member.gpu_indices) {
      gpu_leases_[member.host_name][gpu] = updated.id;
    }
  }
  port_leases_[updated.master_host][port] = updated.id;
  state::Gang& gang = found->second;
  gang = std::move(updated);
  spdlog::info("event=gang_admitted gang={} master={}:{} members={}/{}",
               LogValue(gang.id), gang.master_addr, gang.master_port,
               gang.members.size(), gang.key.size);
  for (const auto& [index, stream_id] : left_out) {
    QueueNotNeeded(gang, index, stream_id);
  }
  for (auto& [index, member] : gang.members) {
    const uint64_t stream_id = member.stream_id;
    member.stream_id = 0;  // The stream ends after the Admitted event.
    QueueAdmitted(gang, member, stream_id);
  }
  Pass();
  return absl::OkStatus();
}

void Scheduler::Defer(const std::string& gang_id, const std::string& note) {
  auto gang = gangs_.find(gang_id);
  if (gang == gangs_.end() ||
      gang->second.state != state::GangState::kForming) {
    return;
  }
  gang->second.blocked_note = note;
  Pass();
}

state::Assignment Scheduler::BuildAssignment(const state::Gang& gang,
                                             const state::Member& member) {
  state::Assignment assignment;
  assignment.gang_id = gang.id;
  assignment.epoch = gang.epoch;
  assignment.node_rank = static_cast<uint32_t>(std::max(0, member.node_rank));
  assignment.num_nodes = gang.Size();
  assignment.procs_per_node = std::max<uint32_t>(1, member.procs_per_node);
  assignment.world_size = assignment.num_nodes * assignment.procs_per_node;
  assignment.host_name = member.host_name;
  auto host = hosts_.find(member.host_name);
  if (host != hosts_.end()) {
    assignment.host_address = host->second.spec.address;
    assignment.agent_endpoint = host->second.spec.agent_endpoint;
    assignment.network_interface = host->second.spec.network_interface;
  }
  assignment.gpu_indices = member.gpu_indices;
  assignment.master_addr = gang.master_addr;
  assignment.master_port = gang.master_port;
  assignment.peers = PeerListOf(gang);
  assignment.launcher = member.launcher;
  return assignment;
}

std::shared_ptr<const state::PeerList> Scheduler::PeerListOf(
    const state::Gang& gang) {
  std::shared_ptr<const state::PeerList>& cached = peer_lists_[gang.id];
  if (cached != nullptr && cached->epoch == gang.epoch) return cached;
  auto list = std::make_shared<state::PeerList>();
  list->epoch = gang.epoch;
  std::vector<const state::Member*> by_rank;
  by_rank.reserve(gang.members.size());
  for (const auto& [index, peer] : gang.members) by_rank.push_back(&peer);
  std::stable_sort(by_rank.begin(), by_rank.end(),
                   [](const state::Member* a, const state::Member* b) {
                     return a->node_rank < b->node_rank;
                   });
  list->addresses.reserve(by_rank.size());
  for (const state::Member* peer : by_rank) {
    auto peer_host = hosts_.find(peer->host_name);
    list->addresses.push_back(peer_host != hosts_.end()
                                  ? peer_host->second.spec.address
                                  : peer->host_name);
  }
  list->sha256 = Sha256Hex(absl::StrJoin(list->addresses, "\n"));
  cached = std::move(list);
  return cached;
}

absl::StatusOr<std::shared_ptr<const state::PeerList>> Scheduler::Peers(
    const std::string& gang_id, uint32_t epoch, uint32_t member_index,
    int64_t job_id) {
  absl::StatusOr<state::Gang*> found =
      FindMember(gang_id, epoch, member_index, job_id);
  if (!found.ok()) return found.status();
  state::Gang* gang = *found;
  if (gang->state != state::GangState::kRunning) {
    return absl::FailedPreconditionError(
        absl::StrCat("gang ", gang_id, " epoch ", epoch,
                     " is not running: no peer list to give"));
  }
  return PeerListOf(*gang);
}

void Scheduler::QueueAdmitted(const state::Gang& gang, state::Member& member,
                              uint64_t stream_id) {
  if (stream_id == 0) return;
  state::MemberEvent event;
  event.stream_id = stream_id;
  event.kind = state::MemberEvent::Kind::kAdmitted;
  event.gang_id = gang.id;
  event.member_index = member.index;
  event.assignment = BuildAssignment(gang, member);
  events_.push_back(std::move(event));
}

void Scheduler::QueueNotNeeded(const state::Gang& gang, uint32_t index,
                               uint64_t stream_id) {
  spdlog::info("event=member_not_needed gang={} member={} size={}/{}",
               LogValue(gang.id), index, gang.Size(), gang.key.size);
  if (stream_id == 0) return;
  state::MemberEvent event;
  event.stream_id = stream_id;
  event.kind = state::MemberEvent::Kind::kAdmitted;
  event.gang_id = gang.id;
  event.member_index = index;
  event.assignment.gang_id = gang.id;
  event.assignment.epoch = gang.epoch;
  event.assignment.num_nodes = gang.Size();
  event.assignment.not_needed = true;
  events_.push_back(std::move(event));
}

std::vector<state::MemberEvent> Scheduler::TakeEvents() {
  std::vector<state::MemberEvent> events;
  events.swap(events_);
  return events;
}

Snapshot Scheduler::GetSnapshot(bool include_finished) const {
  Snapshot snapshot;
  const UsageMap usage = CurrentUsage();
  // One pass over the gangs, not one per host: status stays cheap with
  // thousands of hosts and gangs.
  std::map<std::string, uint32_t> running_on;
  for (const auto& [id, gang] : gangs_) {
    if (!HoldsLeases(gang)) continue;
    for (const auto& [index, member] : gang.members) {
      if (!member.host_name.empty()) ++running_on[member.host_name];
    }
  }
  for (const auto& [name, host] : hosts_) {
    HostView view;
    view.host = host;
    view.state = StateOf(host);
    view.drained = host.drained;
    if (auto not_ready = not_ready_.find(name); not_ready != not_ready_.end()) {
      view.not_ready_reason = not_ready->second;
    }
    auto host_usage = usage.find(name);
    if (host_usage != usage.end()) {
      for (const auto& [gpu, gang_id] : host_usage->second.gpus) {
        view.leased_gpus.push_back(gpu);
      }
    }
    if (auto running = running_on.find(name); running != running_on.end()) {
      view.members_running = running->second;
    }
    snapshot.hosts.push_back(std::move(view));
  }
  std::vector<state::Gang> live;
  std::vector<state::Gang> finished;
  for (const auto& [id, gang] : gangs_) {
    const bool is_live =
        gang.state == state::GangState::kForming || HoldsLeases(gang);
    if (is_live) {
      live.push_back(gang);
    } else if (include_finished) {
      finished.push_back(gang);
    }
  }
  std::sort(live.begin(), live.end(),
            [](const state::Gang& a, const state::Gang& b) {
              return a.sequence < b.sequence;
            });
  std::sort(finished.begin(), finished.end(),
            [](const state::Gang& a, const state::Gang& b) {
              return a.sequence > b.sequence;
            });
  snapshot.live_gangs = live.size();
  snapshot.gangs = std::move(live);
  snapshot.gangs.insert(snapshot.gangs.end(), finished.begin(), finished.end());
  return snapshot;
}

const state::Gang* Scheduler::FindGang(const std::string& gang_id) const {
  auto it = gangs_.find(gang_id);
  return it == gangs_.end() ? nullptr : &it->second;
}

}  // namespace gdt::coordinator
