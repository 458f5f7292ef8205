// Domain types of the coordinator: hosts, gangs, members, assignments and the
// events sent to joined members. Plain data with no gRPC or proto types; the
// service converts them to and from the wire.
#ifndef GDT_COORDINATOR_MODEL_H_
#define GDT_COORDINATOR_MODEL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock.h"

namespace gdt::state {

struct GpuInfo {
  uint32_t index = 0;
  std::string uuid;
  std::string model;
  uint64_t memory_bytes = 0;

  bool operator==(const GpuInfo&) const = default;
};

struct HostSpec {
  std::string name;
  std::string address;
  std::string agent_endpoint;
  std::vector<GpuInfo> gpus;
  std::map<std::string, std::string> labels;
  std::string network_interface;
  uint32_t cpu_slots =
      0;  // Members a host may run at once without GPUs (0 = 1).
  // Jobs the host's gitlab-runner runs at once; 0 = unknown (the daemon then
  // cannot prove a runner-slot deadlock).
  uint32_t runner_slots = 0;

  bool operator==(const HostSpec&) const = default;
};

struct Host {
  HostSpec spec;
  int64_t last_heartbeat_unix_ms = 0;
  // Takes no new gangs (`gdt-coord hosts drain`); persisted on its own, so
  // registration keeps it.
  bool drained = false;
  // Not persisted: set at registration, heartbeat and load.
  Clock::TimePoint last_heartbeat{};
};

enum class HostState { kUp, kDown };

// Same numbers as v1::Launcher.
using Launcher = int;

enum class GangState { kForming = 1, kRunning = 2, kDone = 3, kFailed = 4 };

// Lowercase name for messages: "forming", "running", "done", "failed".
const char* GangStateName(GangState state);

// The state stored as `value` for gang `gang_id`. DataLoss naming both for a
// number no state has (a damaged row, or one a newer gdt-coord wrote).
absl::StatusOr<GangState> GangStateFromStored(int64_t value,
                                              const std::string& gang_id);

// "10:42:13 UTC" for a Unix time in milliseconds (root-cause lines).
std::string UtcTimeOfDay(int64_t unix_ms);

struct GangKey {
  std::string instance;
  int64_t project_id = 0;
  int64_t pipeline_id = 0;
  std::string group_name;
  uint32_t size = 0;

  auto Tie() const {
    return std::tie(instance, project_id, pipeline_id, group_name, size);
  }
  bool operator<(const GangKey& other) const { return Tie() < other.Tie(); }
  bool operator==(const GangKey& other) const { return Tie() == other.Tie(); }
};

struct Member {
  uint32_t index = 0;  // 1-based, as CI_NODE_INDEX.
  int64_t job_id = 0;
  std::string job_name;
  uint32_t gpus_per_node = 0;
  uint32_t procs_per_node = 0;
  Launcher launcher = 0;
  std::string arrival_host;
  uint32_t job_timeout_seconds = 0;
  bool left = false;
  int32_t node_rank = -1;  // -1 until admitted.
  std::string host_name;
  std::vector<uint32_t> gpu_indices;
  int32_t exit_code = -1;  // -1 until reported.
  // From GDT_PREEMPTIBLE: the coordinator may stop this member's gang (after
  // a checkpoint notice) to make room for a higher-priority one.
  bool preemptible = false;

  // Runtime only (never persisted): whether a JoinGang stream holds the
  // member, which one, and the last reason sent on it.
  bool present = false;
  uint64_t stream_id = 0;
  // The executor id (gdt-executor metadata) of the join that holds or last
  // held the member: a join of the same job from another id is refused
  // while this one's stream is live or after its admission. "" after a
  // restart and from executors that send none.
  std::string executor;
  std::string last_reason_sent;
  // Whether that reason was sent while members were missing (see
  // Scheduler's waiting_refresh: count-only updates are coalesced).
  bool told_missing = false;
  // Scheduling inputs from the job (GDT_PRIORITY, GDT_TOPOLOGY_SAME,
  // GDT_TOPOLOGY_MODE); every join sends them again.
  int32_t priority = 0;
  std::string topology_same;
  bool topology_required = false;

  // Compares the persisted fields.
  bool SameRecord(const Member& other) const;
};

struct Gang {
  std::string id;
  GangKey key;
  GangState state = GangState::kForming;
  uint32_t epoch = 1;
  std::string reason;
  std::string master_host;
  std::string master_addr;
  uint32_t master_port = 0;
  std::map<uint32_t, Member> members;  // By member index.
  int64_t created_unix_ms = 0;
  int64_t sequence = 0;  // Arrival order of gangs (FIFO admission).
  // Preemption, kept across epochs so that a retried gang still counts
  // towards the bound on how often one gang may be stopped: how many of its
  // epochs were preempted, the last one that was (0 = none), the waiting
  // gang it made room for then and the GPU-seconds of work it lost.
  uint32_t preemptions = 0;
  uint32_t preempted_epoch = 0;
  std::string preempted_by;
  int64_t preempted_lost_gpu_seconds = 0;
  // Elastic gangs (`nodes: min..max`, key.size = max): the fewest members
  // the gang may start with (0: a fixed-size gang), and the members of this
  // epoch that it started without, by index -> job id. Those members are
  // not in `members`: they hold nothing and their jobs end successfully.
  uint32_t nodes_min = 0;
  std::map<uint32_t, int64_t> not_needed;
  // When the gang ended for good: done or failed with every member gone
  // (0: not yet, or a record written before this was kept). The retention
  // of finished gangs counts from it.
  int64_t ended_unix_ms = 0;

  // Runtime only.
  uint32_t queue_position = 0;
  uint32_t failed_member = 0;  // Whose report failed the gang; 0 = unknown.
  std::string blocked_note;    // Set when the last admission attempt failed.
  // When the job timeout of a running gang runs out (admission + timeout;
  // after a restart, load time + timeout): the backfill bound.
  int64_t end_bound_unix_s = 0;
  // When it was admitted (after a restart: the load time).
  int64_t started_unix_s = 0;
  bool collect_evidence = false;  // Failed as hung: members collect evidence.
  // The waiting gang the admission policy last chose this running gang to
  // make room for (preemption); empty = none.
  std::string preemption_planned_by;
  // A preemption under way in this epoch: the checkpoint notice went out at
  // preempt_notice_ms (0 = none) on behalf of gang preempt_by (priority
  // preempt_by_priority); the gang is stopped at preempt_stop_by_ms at the
  // latest, or as soon as it records a checkpoint (preempt_checkpoint_ms)
  // or a member exits. preempt_estimate_gpu_hours: the policy's estimate of
  // the work lost since the last checkpoint when it chose the gang.
  // Persisted while the gang runs (unlike the fields around them), so a
  // restarted coordinator finishes the preemption it began.
  int64_t preempt_notice_ms = 0;
  int64_t preempt_stop_by_ms = 0;
  int64_t preempt_checkpoint_ms = 0;
  std::string preempt_by;
  int32_t preempt_by_priority = 0;
  double preempt_estimate_gpu_hours = 0;
  // Runtime only: this epoch was stopped for a gang of no higher priority
  // after running this long (ms; 0 = not so). Its retry's queue time
  // (created_unix_ms) moves on by as much, so that time run does not count
  // as time waited. A restart before the retry forgets it: the retry then
  // keeps the earlier queue time.
  int64_t requeue_after_ms = 0;
  // A forming gang's members that were already told which members are
  // missing hear an updated count no earlier than this.
  Clock::TimePoint waiting_refresh_due{};
  // A running gang's first failure that looked caused by a lost peer, and
  // when it was reported (see Scheduler::FailSuspectedGangs); 0 = none.
  uint32_t suspect_member = 0;
  Clock::TimePoint suspect_since{};
  int64_t suspect_exited_unix_ms =
      0;  // Its exit time on its host; 0 = unknown.

  // Compares the persisted fields, members included.
  bool SameRecord(const Gang& other) const;
  // Whether the gang may start with fewer than key.size members.
  bool Elastic() const { return nodes_min != 0 && nodes_min < key.size; }
  // How many members the gang runs with: key.size, or once an elastic gang
  // was admitted, the members that have a node rank.
  uint32_t Size() const;
  // The highest priority among its members (GDT_PRIORITY; 0 without any).
  int32_t Priority() const;
};

struct GpuLease {
  std::string host_name;
  uint32_t gpu_index = 0;
  std::string gang_id;
  uint32_t member_index = 0;

  bool operator==(const GpuLease&) const = default;
};

struct PortLease {
  std::string host_name;
  uint32_t port = 0;
  std::string gang_id;

  bool operator==(const PortLease&) const = default;
};

// What a member needs to start its part of the job (v1::Assignment less the
// coordinator endpoint, which the service adds).
// A gang's host addresses in node-rank order for one epoch: built once when
// the gang is admitted and shared by every member's assignment, so admitting
// N members copies no list N times.
struct PeerList {
  uint32_t epoch = 0;
  std::vector<std::string> addresses;
  std::string sha256;  // Lowercase hex of the addresses joined by "\n".
};

struct Assignment {
  std::string gang_id;
  uint32_t epoch = 0;
  uint32_t node_rank = 0;
  uint32_t num_nodes = 0;
  uint32_t procs_per_node = 1;
  uint32_t world_size = 0;
  std::string host_name;
  std::string host_address;
  std::string agent_endpoint;
  std::vector<uint32_t> gpu_indices;
  std::string master_addr;
  uint32_t master_port = 0;
  std::shared_ptr<const PeerList> peers;  // Never null in an Admitted event.
  std::string network_interface;
  Launcher launcher = 0;
  // The gang's key-value store token for this epoch; the Coordinator fills it
  // in (the scheduler leaves it empty).
  std::string kv_token;
  // What the executor presents to this host's agent for this member
  // (MemberToken of the host's token); empty when the host has no token.
  std::string member_token;
  // The member's elastic gang started without it (see v1::Assignment):
  // only gang_id, epoch and num_nodes are set.
  bool not_needed = false;
};

struct WaitingInfo {
  uint32_t members_present = 0;
  uint32_t members_total = 0;
  std::vector<uint32_t> missing_indices;
  std::string reason;
  uint32_t queue_position = 0;
};

// A running gang's progress towards its exit barrier.
struct GangProgress {
  uint32_t members_total = 0;
  std::vector<uint32_t> unfinished_indices;  // Not yet reported exit 0.
};

// A message for one JoinGang or WatchGang stream, identified by the stream
// id the service gave the join or watch (one id space for both).
struct MemberEvent {
  enum class Kind {
    kWaiting,     // `waiting` is set.
    kAdmitted,    // `assignment` is set; the stream ends after it.
    kAborted,     // `reason` is set; the stream ends after it.
    kSuperseded,  // Another stream took over the member; end this one.
    // Watch streams only:
    kGangRunning,    // `progress` is set.
    kGangFailed,     // `reason` is the root cause, `failed_member` and
                     // `failed_job_id` its member (0 = unknown); the stream
                     // ends after it.
    kGangSucceeded,  // Every member exited 0; the stream ends after it.
  };
  uint64_t stream_id = 0;
  Kind kind = Kind::kWaiting;
  std::string gang_id;
  uint32_t member_index = 0;
  WaitingInfo waiting;
  Assignment assignment;
  std::string reason;
  GangProgress progress;
  uint32_t failed_member = 0;
  int64_t failed_job_id = 0;
  bool collect_evidence = false;  // kGangFailed: the gang failed as hung.
  bool preempted = false;         // kGangFailed: the gang was preempted.
};

}  // namespace gdt::state

#endif  // GDT_COORDINATOR_MODEL_H_
