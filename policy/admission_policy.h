// Gang admission policy: which waiting gangs start, where their members run,
// and which incomplete gang is sent back to GitLab when runner slots
// deadlock. Pure logic: no gRPC, no I/O, no clock of its own (every call that
// depends on time takes `now`), so the daemon and the trace simulator share
// it. See docs/scheduling.md for the policy in prose.
//
// Model. A host has GPUs (counted one by one), runner slots (the seats of
// gitlab-runner jobs on it), labels, and drained/down flags. A gang has N
// members with the same GPUs per member, a priority, a queue time and a
// run-time bound (the job timeout). A member that joins takes a runner slot
// and holds nothing else until the whole gang is placed in one step.
//
// Not thread-safe: the owner serialises calls.
#ifndef GDT_POLICY_ADMISSION_POLICY_H_
#define GDT_POLICY_ADMISSION_POLICY_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gdt::policy {

// Virtual or real seconds; the policy only compares and adds them.
using Seconds = int64_t;

// 128-bit integers for exact products of seconds. GCC's -Wpedantic warns on
// the builtin type; __extension__ says its use is meant.
__extension__ typedef __int128 Int128;
__extension__ typedef unsigned __int128 UInt128;

enum class Mode {
  // Priority, then FIFO, with EASY backfill: a later gang may start only if
  // it cannot delay the reservation of the first gang that does not fit.
  kBackfill,
  // Strict FIFO gang admission: the first complete gang that does not fit
  // blocks every gang behind it (head-of-line blocking). A baseline.
  kStrictFifo,
  // No coordinator: each member takes GPUs on the host whose runner picked
  // it up, as soon as they are free there, and holds them until its peers
  // have theirs. A baseline that shows the stalls the other modes avoid.
  kNaive,
  // kBackfill, and when the first gang that does not fit outranks running
  // preemptible gangs (see PreemptOptions), some of them are stopped to make
  // room: they get a checkpoint notice and a grace, then end with a
  // preemption failure that `retry:` brings back.
  kPreempt,
};

// The order in which kBackfill tries the gangs behind the head, among gangs
// of equal priority (a higher priority always goes first).
enum class BackfillOrder {
  kQueue,  // Priority, then FIFO, like the head.
  // Shortest run-time bound first, then fewest GPUs, then queue order: more
  // short gangs start in the gaps, which lowers the mean wait. The head's
  // reservation still bounds every gang's wait.
  kShortestFirst,
  // Aged shortest first: highest waited / sqrt(run bound) first, so short
  // gangs go early but a long gang's key grows with its wait until it is
  // tried first. (waited / run bound, the response ratio, favoured short
  // gangs more and let the longest wait exceed strict FIFO's.)
  kAgedShortestFirst,
};

// Seconds, or GPU-seconds where the name says so.
// How CheckFeasible's refusal ends when only capacity that takes no gangs
// (drained, down, or treated as drained) would fit the gang; a caller that
// knows why those hosts take none may put its own words in its place.
inline constexpr char kDrainedOrDownTail[] =
    " and the rest of the capacity is drained or down";

struct PreemptOptions {
  // A gang is preempted at most this many times (GangSpec::preemptions counts
  // the earlier ones); after that it is never chosen again.
  uint32_t max_preemptions = 3;
  // Between the checkpoint notice and the stop: the victim keeps its GPUs
  // this long to write a checkpoint.
  Seconds grace = 300;
  // Least attained service first: a running gang that has used at least this
  // many GPU-seconds in its current run ranks one level below its priority,
  // so a new gang of the same priority may preempt it. 0 turns this off
  // (then only a higher priority, or aging, preempts).
  double demote_after_gpu_seconds = 8 * 3600.0;
  // ... and has run for at least this many seconds, so that a large gang,
  // which reaches the GPU-seconds quickly, is not stopped right after it
  // (re)started.
  Seconds min_run = 4 * 3600;
  // Aging: a waiting gang ranks one level higher per this many seconds
  // waited, up to `max_aging_levels` levels. 0 turns aging off.
  Seconds aging_step = 0;
  int32_t max_aging_levels = 1;
  // Overdue gangs. The backlog is the GPU-seconds still ahead of the
  // cluster (running gangs to their run bounds, complete waiting gangs at
  // their smallest size for their run bound) over the GPUs taking gangs: about
  // what strict FIFO would make a new gang wait. A waiting gang is overdue
  // once it has waited this fraction of the backlog. With
  // BackfillOrder::kAgedShortestFirst, overdue gangs come first, in queue
  // order, and the others follow in the aged order, so the head (and the
  // gang preemption serves) is the oldest overdue gang, or else the one
  // with the highest aged key. A running gang that had waited at least that
  // long before its current run is never chosen as a victim: a retry waits
  // again for runner slots, and it has waited its share. 0 turns both off
  // (the head is then the first gang in queue order).
  double overdue_backlog_fraction = 0.85;
  // Gangs behind the head served by preemption in one pass. The GPUs coming
  // free within a grace (free now, or held by gangs that end by then) go to
  // the head first, then to the complete gangs behind it in admission
  // order; a gang that does not fit there may have victims chosen for it
  // (ranking below it, as for the head), up to this many gangs per pass.
  // Such a gang must not delay the head: when the head is not served within
  // a grace itself, it must end (at its run bound) before the head's
  // reservation. Victims are chosen here only while runner slots are free
  // for their members' retries (no backlog of jobs waiting for a runner).
  // 0 serves the head only.
  uint32_t served_behind_head = 8;
};

struct PolicyOptions {
  Mode mode = Mode::kBackfill;
  // Gangs with more members fail at join time.
  uint32_t max_nodes_per_job = 8;
  BackfillOrder backfill_order = BackfillOrder::kAgedShortestFirst;
  PreemptOptions preempt = {};  // kPreempt only.
  // Reservation depth (kBackfill, kPreempt): the first this many complete
  // gangs that do not fit, in the order the head is chosen, each get a
  // reservation. Each is computed on what the running gangs give back at
  // their run bounds, with every earlier reservation holding its GPUs from
  // its start on; a gang may start now only if it delays none of them (it
  // ends before a reservation's start, or uses only GPUs that every
  // reservation starting before its end leaves over). 1 reserves for the
  // head only: EASY backfill. 0 (the default) picks by mode: 1, except
  // kPreempt's kPreemptReservationDepth (see ReservationDepth()).
  uint32_t reservation_depth = 0;
};

// The automatic reservation depth of kPreempt. Deeper reservations shorten
// the longest waits when preemption can free room for the head, but without
// preemption they cost mean job completion time (docs/scheduling.md).
inline constexpr uint32_t kPreemptReservationDepth = 4;

// The reservation depth `options` ask for: reservation_depth, or when it is
// 0 the mode's default.
uint32_t ReservationDepth(const PolicyOptions& options);

struct HostSpec {
  std::string name;
  uint32_t gpus = 0;
  uint32_t runner_slots = 0;
  std::map<std::string, std::string> labels;
  // Members without GPUs the host may run at once; 0 = no limit.
  uint32_t cpu_slots = 0;
};

struct GangSpec {
  std::string id;
  uint32_t members = 0;          // N, the `parallel:` value.
  uint32_t gpus_per_member = 0;  // 0 for CPU-only jobs.
  int32_t priority = 0;          // Higher goes first.
  Seconds queue_time = 0;        // FIFO key among equal priorities.
  Seconds run_bound = 0;         // The job timeout; > 0.
  // Members run only on hosts carrying every one of these labels.
  std::map<std::string, std::string> node_selector;
  // Topology: when set, every member should run on hosts with one and the
  // same value of this label (e.g. "rack"). Required: the gang waits (or is
  // infeasible) until one domain holds it. Preferred: one domain when one
  // fits now, else any hosts.
  std::string same_label;
  bool same_required = false;
  // Preemption (kPreempt): only preemptible gangs are ever stopped for
  // another. The gang writes a checkpoint every `checkpoint_interval`
  // seconds of its run (0: unknown, so everything since its start counts as
  // lost), and was preempted `preemptions` times before this run.
  bool preemptible = false;
  Seconds checkpoint_interval = 0;
  uint32_t preemptions = 0;
  // Elastic gangs: when set below `members`, a gang that is next in line but
  // does not fit whole starts with as many of its members as fit now (at
  // least this many, the lowest indices); the others are not needed at this
  // size. `run_bound` should hold for the smallest size.
  uint32_t min_members = 0;
};

struct MemberPlacement {
  uint32_t member_index = 0;  // 1-based, like CI_NODE_INDEX.
  std::string host;
  std::vector<uint32_t> gpus;  // Indices on `host`, ascending.
};

struct Admission {
  std::string gang_id;
  std::vector<MemberPlacement> members;  // By member index.
  // Elastic gangs started smaller: the present members left out. They hold
  // nothing any more; their jobs should end saying they are not needed at
  // this size.
  std::vector<uint32_t> not_needed;
};

// An incomplete gang removed to break a runner-slot deadlock. Its members'
// jobs should end with a system failure showing `message`, the cause
// ("sent back to GitLab with 1/2 members present to break ...").
struct Bounce {
  std::string gang_id;
  std::string message;
};

// A running gang chosen to make room for a waiting one. It should get the
// checkpoint notice now and be stopped by `stop_by` (the grace); its GPUs
// stay taken until the caller calls Finish() for it.
struct Preemption {
  std::string gang_id;
  std::string by;      // The waiting gang it makes room for.
  std::string reason;  // One line for the job log and status.
  Seconds stop_by = 0;
  // GPU-seconds of work since its last checkpoint, as estimated now.
  double lost_gpu_seconds = 0;
};

struct Decisions {
  std::vector<Admission> admitted;  // Now running; call Finish() later.
  std::vector<Bounce> bounced;      // Forgotten by the policy.
  std::vector<Preemption> preempted;
};

// The start promised to a blocked gang (kBackfill, kPreempt): the first
// one's, and with a reservation depth above 1 those of the gangs after it.
struct Reservation {
  std::string gang_id;
  Seconds start = 0;  // Latest time it starts, given the run-time bounds.
  std::map<std::string, uint32_t> gpus_by_host;
};

class AdmissionPolicy {
 public:
  explicit AdmissionPolicy(const PolicyOptions& options);

  // Adds a host. Errors: InvalidArgument for an empty name, AlreadyExists
  // for a known one.
  absl::Status AddHost(const HostSpec& spec);

  // A drained host takes no new gangs; a down host takes none and its runner
  // slots serve nobody. Running gangs keep their GPUs either way.
  // Errors: NotFound for an unknown host.
  absl::Status SetDrained(const std::string& host, bool drained);
  absl::Status SetDown(const std::string& host, bool down);

  // Member `member_index` (1..N) of the gang joins through a runner slot on
  // `slot_host`; the first join creates the gang from `spec`. The member
  // holds that slot until its gang finishes, it leaves, or it is bounced.
  // Errors: FailedPrecondition naming the limit when the gang can never run
  // (more nodes than max_nodes_per_job, more GPUs per member than the largest
  // host has, more members than the hosts able to serve it can hold, or only
  // drained/down hosts could); InvalidArgument for a bad spec or index, or a
  // spec that differs from the gang's; AlreadyExists when the index is
  // present; ResourceExhausted when `slot_host` has no free runner slot;
  // NotFound for an unknown host; FailedPrecondition for a running gang.
  absl::Status Join(const GangSpec& spec, uint32_t member_index,
                    const std::string& slot_host);

  // A present member of a waiting gang goes away (its job ended): frees its
  // slot, and in kNaive its GPUs. Errors: NotFound; FailedPrecondition when
  // the gang is running.
  absl::Status Leave(const std::string& gang_id, uint32_t member_index);

  // Adds a gang that already runs with the given placement (e.g. restored by
  // the daemon) and whose run-time bound ends at `end_bound`. It holds its
  // GPUs (and CPU slots for members without GPUs) but no runner slots.
  // Errors: InvalidArgument for a bad spec, an unknown host or GPU, or a GPU
  // that is not free; AlreadyExists for a known gang id.
  absl::Status AddRunning(const GangSpec& spec,
                          const std::vector<MemberPlacement>& members,
                          Seconds end_bound);

  // A running gang ended: frees its GPUs and runner slots and forgets it.
  // Errors: NotFound; FailedPrecondition when it is not running.
  absl::Status Finish(const std::string& gang_id);

  // One admission pass at time `now`: breaks a runner-slot deadlock if there
  // is one, then admits what the mode allows.
  Decisions Schedule(Seconds now);

  // The head gang's reservation from the last pass, if any.
  std::optional<Reservation> reservation() const {
    if (reservations_.empty()) return std::nullopt;
    return reservations_.front();
  }
  // Every reservation of the last pass (PolicyOptions::reservation_depth),
  // the head's first, in the order they were made.
  const std::vector<Reservation>& reservations() const { return reservations_; }

  // Whether `spec` could ever run here; the checks and messages of Join()'s
  // FailedPrecondition errors (InvalidArgument for a bad spec).
  absl::Status CheckFeasible(const GangSpec& spec) const;

  // Introspection for callers and tests.
  uint32_t FreeGpus(const std::string& host) const;
  uint32_t FreeRunnerSlots(const std::string& host) const;
  // Free CPU slots (members without GPUs); UINT32_MAX without a limit.
  uint32_t FreeCpuSlots(const std::string& host) const;
  // GPUs leased to members of gangs that are not running (always 0 except
  // in kNaive).
  uint32_t GpusHeldByWaitingGangs() const;
  bool IsRunning(const std::string& gang_id) const;
  size_t waiting_gangs() const { return gangs_.size() - running_.size(); }
  const std::vector<std::string>& host_names() const { return host_names_; }

 private:
  struct Host {
    HostSpec spec;
    bool drained = false;
    bool down = false;
    std::vector<int64_t> gpu_owner;  // Gang sequence number, or -1.
    uint32_t free_gpus = 0;
    uint32_t free_slots = 0;
    uint32_t free_cpu = 0;  // Free CPU slots; kUnlimited without a limit.
  };
  struct Member {
    size_t slot_host = 0;
    // kNaive only: GPUs taken on the slot host while waiting.
    std::vector<uint32_t> gpus;
  };
  struct Gang {
    GangSpec spec;
    int64_t seq = 0;
    bool running = false;
    Seconds start = 0;
    Seconds end_bound = 0;  // start + run_bound, when running.
    bool stopping = false;  // Preempted, within its grace.
    std::map<uint32_t, Member> present;
    std::vector<std::pair<size_t, std::vector<uint32_t>>> placement;
    // Waiting with every member present: in complete_ and lanes_.
    bool listed = false;
  };
  // Queue order: priority (higher first), queue time, arrival sequence.
  struct QueueKey {
    int32_t neg_priority;
    Seconds queue_time;
    int64_t seq;
    auto operator<=>(const QueueKey&) const = default;
  };

  // The complete waiting gangs of one priority, run-time bound and shape,
  // by queue time and arrival. Every admission order sorts such gangs the
  // same way (older first), so an order over all of them is a merge of the
  // lanes; and once one gang of a plain lane (see IsPlain()) cannot start
  // in a backfill, none behind it in that lane can either, so a pass reads
  // about one gang per lane and the gangs it starts, not the whole queue.
  struct LaneKey {
    int32_t neg_priority;
    Seconds run_bound;
    uint32_t gpus_per_member;
    uint32_t members;
    bool plain;
    auto operator<=>(const LaneKey&) const = default;
  };
  // GPU gangs without placement constraints: whether one fits depends on
  // its shape and the free GPUs only.
  static bool IsPlain(const GangSpec& spec) {
    return spec.node_selector.empty() && spec.same_label.empty() &&
           spec.gpus_per_member != 0;
  }
  using Lane = std::map<std::pair<Seconds, int64_t>, Gang*>;
  // Draws the complete waiting gangs one at a time in the order `first` (a
  // total order that agrees with every lane's): a heap of the lanes' fronts.
  // The gang drawn may leave the queue before the next draw; no other may.
  // DropLast() passes over the rest of the last gang's lane; Keep() over
  // the lanes whose next gang fails `keep`.
  class Merge {
   public:
    using First = bool (*)(const Gang&, const Gang&, Seconds now,
                           double overdue_after);
    Merge(const std::map<LaneKey, Lane>& lanes, First first, Seconds now,
          double overdue_after);
    Gang* Next();
    void DropLast();
    void Keep(absl::FunctionRef<bool(const Gang&)> keep);

   private:
    bool Later(size_t a, size_t b) const;
    std::vector<std::pair<Lane::const_iterator, Lane::const_iterator>> fronts_;
    // Indices into fronts_, a heap by Later; with `pending_`, the last one
    // (the lane drawn from last) is not in the heap yet.
    std::vector<size_t> heap_;
    bool pending_ = false;
    First first_;
    Seconds now_;
    double overdue_after_;
  };
  // Keeps complete_, lanes_ and waiting_work_ in step with whether `gang` is
  // waiting with every member present.
  void Relist(Gang& gang);
  // Drops the lanes left empty (kept while a pass may hold a Merge).
  void PruneLanes();

  absl::Status CheckFeasibleUncached(const GangSpec& spec) const;
  bool Eligible(const Host& host, const GangSpec& spec) const;
  // Best-fit placement of every present member, in index order, on free
  // GPUs (capped per host by `extra` when given). Returns the host of each
  // member, or nullopt when the gang does not fit.
  std::optional<std::vector<size_t>> Place(
      const Gang& gang, const std::vector<uint32_t>* extra) const;
  // Placement on capacities `cap` (GPUs, or CPU slots for CPU-only gangs;
  // 0 on hosts the gang may not use) honouring the gang's topology
  // requirement.
  std::optional<std::vector<size_t>> PlaceOn(
      const Gang& gang, const std::vector<uint32_t>& cap) const;
  // The same with the hosts that may hold a member (cap >= the unit),
  // ascending, given: only their entries of `cap` are read.
  std::optional<std::vector<size_t>> PlaceOn(
      const Gang& gang, const std::vector<uint32_t>& cap,
      const std::vector<size_t>& all) const;
  // Hosts grouped by their value of one label: domain_of[h] is the rank of
  // host h's value among the label's distinct values in string order, -1
  // for a host without the label. Computed once per label and kept until a
  // host is added.
  struct Domains {
    std::vector<int32_t> domain_of;
    size_t count = 0;
  };
  const Domains& DomainsOf(const std::string& label) const;
  // Free capacity of host `h` in the gang's unit: GPUs, or CPU slots.
  uint32_t FreeUnits(const Host& host, const GangSpec& spec) const;
  Admission Commit(Gang& gang, const std::vector<size_t>& hosts, Seconds now);
  void ReleaseGpus(int64_t seq, size_t host, const std::vector<uint32_t>& gpus);
  std::optional<Bounce> BreakDeadlock();
  void RemoveGang(const std::string& id);
  // Takes a waiting gang off the queue.
  void Dequeue(Gang& gang);
  void ScheduleGangs(Seconds now, Decisions& out);
  void ScheduleNaive(Seconds now, Decisions& out);
  // A reservation made in this pass: from `start` on it holds `take` GPUs
  // per host; `left` is what every host has left at `start` (running gangs
  // at their run bounds, every reservation that starts by then, and the
  // gangs started in this pass that still run then).
  struct Held {
    Seconds start = 0;
    std::vector<uint32_t> take;
    std::vector<uint32_t> left;
  };
  // Computes `gang`'s reservation: the earliest time it fits on what the
  // running gangs give back at their run bounds, leaving every reservation
  // in `held` its GPUs from its start on. Appends it to `held` (and updates
  // the others' `left`); the first becomes reservation(). False when it can
  // never fit.
  bool Reserve(const Gang& gang, Seconds now, std::vector<Held>& held);
  // Starts an elastic `gang` with as many members as fit now (on free GPUs,
  // capped per host by `cap` when given); false when not even its minimum
  // does.
  bool StartSmaller(Gang& gang, Seconds now, Decisions& out,
                    const std::vector<uint32_t>* cap);
  // A running gang that may be stopped in this pass, with its sort key:
  // fewest GPU-seconds lost first, then lowest priority, then youngest.
  struct Victim {
    double lost = 0;
    int32_t priority = 0;
    int64_t neg_seq = 0;
    int64_t rank = 0;  // RunningRank().
    Gang* gang = nullptr;
  };
  // The running gangs that may be stopped now (preemptible, below K, not
  // stopping, holding GPUs, not overdue when they started), cheapest first.
  std::vector<Victim> Victims(Seconds now);
  // The victims among `victims` (those ranking below `gang` and holding GPUs
  // on hosts it may use) that make `gang` fit on `cap` (GPUs per host; 0
  // where it may not run): the cheapest first until it fits, then every one
  // it can do without dropped, costliest first. Empty when they cannot make
  // it fit. On success `cap` includes the chosen victims' GPUs.
  std::vector<Gang*> ChooseVictims(const Gang& gang,
                                   const std::vector<Victim>& victims,
                                   std::vector<uint32_t>& cap,
                                   Seconds now) const;
  // Marks `victims` stopping (their run bound cut to now + grace) and
  // reports them in `out` as stopped for `by`.
  void Stop(const std::vector<Gang*>& victims, const Gang& by, Seconds now,
            Decisions& out);
  // kPreempt: chooses running gangs to stop so that `head` fits, marks them
  // stopping and reports them in `out`.
  void Preempt(const Gang& head, Seconds now, Decisions& out);
  // kPreempt, PreemptOptions::served_behind_head: serves the complete gangs
  // behind the head, in admission order, from the GPUs that come free
  // within a grace, choosing victims for those that do not fit there.
  void PreemptBehindHead(Seconds now, Decisions& out);
  // Admission order among waiting gangs (kPreempt's head order).
  bool GoesFirst(const Gang& a, const Gang& b, Seconds now) const {
    return GoesFirstAt(a, b, now, overdue_after_);
  }
  static bool GoesFirstAt(const Gang& a, const Gang& b, Seconds now,
                          double overdue_after);
  // kBackfill's BackfillOrder::kAgedShortestFirst: priority, then highest
  // waited / sqrt(run bound), then queue order.
  static bool AgedFirst(const Gang& a, const Gang& b, Seconds now,
                        double overdue_after);
  // kPreempt with overdue gangs: the waited seconds after which a gang is
  // overdue (PreemptOptions::overdue_backlog_fraction), for the backlog
  // at `now`.
  double OverdueAfter(Seconds now) const;
  // The level a gang ranks at when victims are chosen.
  int64_t WaitingRank(const Gang& gang, Seconds now) const;
  // The aging steps (PreemptOptions::aging_step) in WaitingRank(): the
  // whole steps waited, at most max_aging_levels; 0 without aging.
  int64_t AgingLevel(const Gang& gang, Seconds now) const;
  int64_t RunningRank(const Gang& gang, Seconds now) const;
  double LostGpuSeconds(const Gang& gang, Seconds now) const;

  const PolicyOptions options_;
  // CheckFeasible() results by shape; cleared whenever a host changes.
  using FeasibilityKey =
      std::tuple<uint32_t, uint32_t, std::map<std::string, std::string>,
                 std::string, bool>;
  mutable std::map<FeasibilityKey, absl::Status> feasibility_;
  mutable std::map<std::string, Domains> domains_;  // By label; see DomainsOf.
  // Place()'s capacities and candidate hosts, kept to save allocations.
  mutable std::vector<uint32_t> place_cap_scratch_;
  mutable std::vector<size_t> place_hosts_scratch_;
  std::vector<Host> hosts_;
  std::vector<std::string> host_names_;
  absl::flat_hash_map<std::string, size_t> host_index_;
  // Node-based: queue_ points at the values.
  absl::node_hash_map<std::string, Gang> gangs_;
  // Waiting gangs, pointing into gangs_ (whose nodes are stable).
  std::map<QueueKey, Gang*> queue_;
  // The complete ones (every member present), in queue order and by lane.
  std::map<QueueKey, Gang*> complete_;
  std::map<LaneKey, Lane> lanes_;
  // Over the complete waiting gangs: run bound x GPUs at the smallest size,
  // exactly (OverdueAfter()).
  UInt128 waiting_work_ = 0;
  size_t cpu_only_waiting_ = 0;  // Waiting gangs with no GPUs per member.
  // By end bound, pointing into gangs_.
  std::map<std::pair<Seconds, std::string>, Gang*> running_;
  int64_t next_seq_ = 0;
  std::vector<Reservation> reservations_;  // The head's first.
  // OverdueAfter() of the last pass; negative when it was not computed.
  double overdue_after_ = -1;
};

}  // namespace gdt::policy

#endif  // GDT_POLICY_ADMISSION_POLICY_H_
