// The daemon's side of gang admission: turns the coordinator's inventory,
// leases and waiting gangs into one pass of the pure admission policy
// (policy/admission_policy.h) and explains, in one line per gang, why a
// complete gang does not start. No gRPC, no I/O, no clock: time comes in.
//
// Each pass builds a fresh policy from this input, so the coordinator's maps
// stay the single source of truth. Runner slots: each waiting member holds
// one on its arrival host (the host of the runner that picked its job up).
// Hosts that declare their runner slots (agent config `runner_slots`) get
// exactly those; a host that declares none, a member that arrived through a
// runner the daemon does not know, or a host with more members than it
// declared makes the slot count unknown, and with an unknown count a free
// slot may exist, so no deadlock is ever proven then. When every up host
// declares and every slot is held by incomplete gangs, the policy bounces
// the youngest/lowest-priority incomplete gang (PlanOutcome::bounced).
#ifndef GDT_COORDINATOR_PLACEMENT_H_
#define GDT_COORDINATOR_PLACEMENT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "policy/admission_policy.h"

namespace gdt::coordinator {

struct PlacementHost {
  std::string name;
  std::vector<uint32_t> gpu_indices;  // Device indices, as the host numbers.
  uint32_t cpu_slots = 1;             // Members without GPUs at once.
  std::map<std::string, std::string> labels;
  bool drained = false;
  // Its agent reports that it cannot take members now: no gang is placed
  // there, but a gang that only it could serve waits rather than fails.
  bool not_ready = false;
  std::string not_ready_reason;  // The agent's words, for waiting reasons.
  bool down = false;
  uint32_t runner_slots = 0;  // The host's gitlab-runner jobs; 0 = unknown.
};

struct LeasedMember {
  std::string host;
  std::vector<uint32_t> gpu_indices;  // Device indices.
};

// A gang that holds leases (running, or failed with members still there).
struct RunningGang {
  std::string gang_id;
  std::vector<LeasedMember> members;
  int64_t end_bound_unix_s = 0;  // Admission + job timeout.
  // For preemption (PreemptionSettings): only a preemptible gang is ever
  // chosen; `start_unix_s` 0 means unknown (then the run counts from the end
  // bound minus one second, so it is never demoted); a checkpoint interval
  // of 0 counts everything since the start as lost.
  int32_t priority = 0;
  bool preemptible = false;
  uint32_t preemptions = 0;  // Of this gang's earlier runs.
  int64_t start_unix_s = 0;
  int64_t checkpoint_interval_s = 0;
  // When it was created (its first epoch); 0 means unknown, then it counts
  // as queued at its start. A gang that had waited long before it started
  // is not chosen (docs/scheduling.md, "Preemption").
  int64_t queue_time_unix_s = 0;
};

struct WaitingGang {
  std::string gang_id;
  uint32_t members = 0;
  uint32_t gpus_per_member = 0;
  int32_t priority = 0;
  int64_t sequence = 0;           // Arrival order.
  int64_t queue_time_unix_s = 0;  // When it was created (backfill aging).
  int64_t run_bound_s = 0;
  std::map<uint32_t, std::string> arrival_hosts;  // By member index.
  std::string same_label;  // Topology requirement; empty for none.
  bool same_required = false;
  // Elastic: when set below `members`, the gang may start with as few
  // members (those in `arrival_hosts` with the lowest indices) when it does
  // not fit whole; the others are then in PlannedGang::not_needed. A gang
  // offered with fewer members than its size lists only those present in
  // `arrival_hosts` and has `members` set to their count.
  uint32_t min_members = 0;
};

struct PlannedMember {
  uint32_t member_index = 0;
  uint32_t node_rank = 0;
  std::string host;
  std::vector<uint32_t> gpu_indices;  // Device indices, ascending.
};

struct PlannedGang {
  std::string gang_id;
  std::vector<PlannedMember> members;  // By node rank; rank 0 first.
  // Elastic gangs started smaller: the member indices left out.
  std::vector<uint32_t> not_needed;
};

struct BlockedGang {
  uint32_t queue_position = 0;  // 1-based among complete gangs not started.
  // Why it does not start, e.g. "waiting for 2 × 4 free GPUs on up hosts
  // (room for 1; GPUs held by gang eval-p5-pl76-n1)".
  std::string why;
};

// An incomplete gang sent back to GitLab to break a runner-slot deadlock.
struct BouncedGang {
  std::string gang_id;
  // For the members' job logs: what happened and how `retry:` brings them
  // back.
  std::string message;
};

// Checkpoint-aware preemption in the pass (docs/scheduling.md,
// "Preemption"); off unless `enabled`.
struct PreemptionSettings {
  bool enabled = false;
  uint32_t max_preemptions = 3;
  int64_t grace_s = 300;
  double demote_after_gpu_hours = 8;
  int64_t min_run_s = 4 * 3600;
  // How often running gangs are assumed to checkpoint (the daemon does not
  // know each gang's own interval): what a victim loses is estimated as the
  // time since the last multiple of it; 0 counts the whole run as lost.
  int64_t checkpoint_interval_s = 1800;
  // The policy's overdue bound and gangs served behind the head
  // (policy::PreemptOptions::overdue_backlog_fraction, served_behind_head).
  double overdue_fraction = policy::PreemptOptions{}.overdue_backlog_fraction;
  uint32_t served_behind_head = policy::PreemptOptions{}.served_behind_head;
};

// A running gang to stop for a waiting one: give it the checkpoint notice
// now, stop it by `stop_by_unix_s` with a failure `retry:` brings back.
struct PreemptedGang {
  std::string gang_id;
  std::string by;      // The waiting gang it makes room for.
  std::string reason;  // One line for the job log and status.
  int64_t stop_by_unix_s = 0;
  double lost_gpu_hours = 0;  // Since its last checkpoint, estimated now.
};

struct PlanOutcome {
  std::vector<PlannedGang> admitted;           // In policy order.
  std::map<std::string, BlockedGang> blocked;  // By gang id.
  std::vector<BouncedGang> bounced;            // At most one per pass.
  std::vector<PreemptedGang> preempted;        // With preemption enabled.
};

// Names at most three items, for reasons: "a, b, c and 2 more".
std::string FewNames(const std::vector<std::string>& names);

// One admission pass at `now_unix_s` over `complete` gangs (every member
// present): priority, then arrival; best-fit placement; EASY backfill
// against the job timeouts; topology. Admitted members are rank-ordered by
// topology labels (policy/topology.h). `incomplete` gangs (some members
// missing; their present members in `arrival_hosts`) are never admitted but
// hold runner slots, so a runner-slot deadlock among them is detected and
// broken: the bounced gang is in `bounced`, not in `blocked`.
// With `preemption.enabled`, running preemptible gangs that rank below the
// first blocked gang (or below a complete gang behind it, while runner slots
// are free; docs/scheduling.md) may be chosen in `preempted` (they keep their
// GPUs in this pass; the caller stops them). Each pass starts from scratch, so
// a caller passes a victim that is still within its grace with
// `end_bound_unix_s` = its stop deadline and `preemptible` = false: the
// head then sees its GPUs coming within the grace, and nothing more is
// preempted for it.
PlanOutcome PlanAdmissions(const std::vector<PlacementHost>& hosts,
                           const std::vector<RunningGang>& running,
                           const std::vector<WaitingGang>& complete,
                           int64_t now_unix_s,
                           const std::vector<WaitingGang>& incomplete = {},
                           const PreemptionSettings& preemption = {});

// Whether `gang` could ever run on `hosts`: FailedPrecondition naming the
// limit (nodes above `max_nodes_per_job`, GPUs per node above the largest
// host, more nodes than the able hosts hold, only drained or down capacity,
// no single topology domain large enough).
absl::Status CheckFeasible(const std::vector<PlacementHost>& hosts,
                           const WaitingGang& gang, uint32_t max_nodes_per_job);

}  // namespace gdt::coordinator

#endif  // GDT_COORDINATOR_PLACEMENT_H_
