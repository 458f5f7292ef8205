#ifndef GDT_COORDINATOR_SCHEDULER_H_
#define GDT_COORDINATOR_SCHEDULER_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "common/rate_limiter.h"
#include "coordinator/observer.h"
#include "coordinator/placement.h"
#include "state/model.h"
#include "state/sqlite_store.h"  // Store, for callers that open one.
#include "state/state_store.h"

namespace gdt::coordinator {

// How long a gang being preempted may still run after it recorded its
// checkpoint: a training that stops on the notice exits within it, and
// its exit stops the gang at once.
inline constexpr std::chrono::milliseconds kPreemptionSettle{5000};

struct SchedulerOptions {
  uint32_t max_nodes_per_job = 8;
  uint32_t master_port_min = 29510;
  uint32_t master_port_max = 29999;
  std::chrono::seconds host_down_after{10};
  // See ReleaseAbandonedMembers().
  std::chrono::seconds failed_gang_release{300};
  // See ReportExit's `peer_suspected`.
  std::chrono::milliseconds failure_attribution_window{3000};
  // See EndAbandonedFormingGangs().
  std::chrono::seconds forming_abandoned_after{300};
  // See ReconcileMembers().
  std::chrono::seconds member_gone_after{120};
  // Forming gangs one pipeline, and one project, may have at once: a job
  // (or one leaked job token) cannot fill the coordinator with gangs that
  // never form. A join that would start one more is refused with
  // ResourceExhausted naming the limit and a retry hint (RetryAfter(), a
  // few seconds): the member waits and asks again.
  uint32_t max_forming_gangs_per_pipeline = 64;
  uint32_t max_forming_gangs_per_project = 256;
  // Joins (new members and rejoins) one project may make: bursts of
  // join_burst_per_project, then join_rate_per_project a second (0: no
  // limit). Beyond it a join is refused with ResourceExhausted naming the
  // limit, so one project's flood (or one leaked job token) cannot keep
  // the scheduler busy for everyone. The refusal's retry hint
  // (RetryAfter()) is how long until the project's next join is let in.
  double join_rate_per_project = 50;
  uint32_t join_burst_per_project = 500;
  // Checkpoint-aware preemption handed to the admission policy; off by
  // default.
  PreemptionSettings preemption;
  // Elastic gangs (`nodes: min..max`): a gang missing members for this long
  // since it began forming starts with the members present when they are at
  // least its minimum and fit (a complete one starts smaller at once when
  // it does not fit whole). Members that come later are not needed.
  std::chrono::seconds elastic_wait{60};
  // Hung gangs: two members whose progress stopped within this much of each
  // other (by their hosts' clocks, assumed that close) stopped together;
  // the first hang report then keeps the blame. See MemberHung().
  std::chrono::milliseconds hang_tie_tolerance{1000};
  // Retention: a finished gang (done or failed, archived epochs included)
  // whose members have all left and that holds no lease is forgotten, in
  // memory and in the store, this long after it ended for good
  // (Gang::ended_unix_ms; for records without one, after this scheduler
  // first saw it finished); 0 = kept forever. See PruneFinishedGangs().
  std::chrono::hours finished_gang_retention{168};
};

// When a member last made progress, as its host saw it: the progress
// file's mtime (or its stage's start) and the step the job last wrote
// into the file, if it writes one.
struct MemberProgress {
  int64_t last_unix_ms = 0;  // By the member's host's clock; 0 = unknown.
  std::optional<uint64_t> step;
};

// Longest accepted text fields of a join, in bytes: longer ones are refused
// with InvalidArgument naming the field (GitLab's own limit for job names is
// 255 characters; an instance is a URL).
inline constexpr size_t kMaxNameBytes = 255;
inline constexpr size_t kMaxJobNameBytes = 300;
inline constexpr size_t kMaxInstanceBytes = 512;
inline constexpr size_t kMaxLabelBytes = 63;
// Bounds on a registered host, so that one host (or thousands) cannot make
// the status answers huge: names and addresses at most kMaxNameBytes, at
// most kMaxHostLabels labels with keys and values of at most kMaxLabelBytes,
// at most kMaxHostGpus GPUs with a uuid and model of at most kMaxLabelBytes.
inline constexpr size_t kMaxHostLabels = 16;
inline constexpr size_t kMaxHostGpus = 32;

// A member's request to join its gang (v1::JoinGangRequest as plain data).
struct JoinRequest {
  state::GangKey key;
  uint32_t member_index = 0;
  int64_t job_id = 0;
  std::string job_name;
  uint32_t gpus_per_node = 0;
  uint32_t procs_per_node = 0;
  state::Launcher launcher = 0;
  std::string arrival_host;
  uint32_t job_timeout_seconds = 0;
  // Scheduling inputs: higher priority goes first; "same <label>" topology.
  int32_t priority = 0;
  std::string topology_same;
  bool topology_required = false;
  bool preemptible = false;
  // Retries of the member's job that bring it back after a preemption
  // (GDT_PREEMPT_RETRIES); nullopt when it does not say. A member is
  // preemptible in an epoch only while one is left (PreemptRetriesLeft).
  std::optional<uint32_t> preempt_retries;
  // Elastic gangs: the fewest members the gang may start with (0: all).
  uint32_t nodes_min = 0;
  // The executor's id (rendezvous::kExecutorMetadata); "" from executors
  // that send none, which are never refused for it.
  std::string executor;
};

// Master ports a proposal offers (and the coordinator asks the agent about)
// per gang and pass, so that one busy host cannot stall a pass; listing the
// whole range cost a lease lookup per port on every pass.
inline constexpr size_t kMaxCandidatePorts = 32;

// A gang whose members are all present and whose placement fits, ready for
// a master-port check on rank 0's host before Admit().
struct AdmissionProposal {
  std::string gang_id;
  std::string master_host;
  std::string agent_endpoint;  // Of the master host.
  // Up to kMaxCandidatePorts unleased ports there: first, ascending, those
  // no live gang holds on any host (nor was offered first in this pass),
  // then, ascending, those held on other hosts only.
  std::vector<uint32_t> candidate_ports;
  std::vector<PlannedMember> members;  // By node rank; Admit() commits it.
  // An elastic gang started smaller: its present members left out.
  std::vector<uint32_t> not_needed;
};

struct HostView {
  state::Host host;
  state::HostState state = state::HostState::kUp;
  std::vector<uint32_t> leased_gpus;
  uint32_t members_running = 0;
  bool drained = false;
  // Non-empty while the host's agent reports it cannot take new members.
  std::string not_ready_reason;
};

struct Snapshot {
  std::vector<HostView> hosts;     // By name.
  std::vector<state::Gang> gangs;  // Live gangs (forming, running, or failed
                                   // with leases held) by arrival, then
                                   // finished ones, most recent first.
  size_t live_gangs = 0;           // How many of `gangs` are live.
};

// The coordinator's state machine: host inventory, gangs and their members,
// placement, and GPU/slot/port leases. Every change is persisted through the
// Store before it is visible. Messages for joined members (waiting reasons,
// admissions) collect in an outbox that the caller drains with TakeEvents().
//
// A running gang fails as a whole when one member's script exits non-zero or
// its job is cancelled, and succeeds once every member exited 0; watches
// (WatchGang streams) learn either through the same outbox. A failed gang
// keeps its leases until every member has left.
//
// Admission is two-phase so that no lock is held while an agent is asked
// about a port: Plan() proposes gangs that fit, the caller checks a port, and
// Admit() re-checks and commits (or Defer() records why it could not).
//
// Policy: the pure admission policy (policy/, through placement.h) decides
// on complete gangs (every member holds a JoinGang stream): priority, then
// arrival; best-fit placement on up, undrained hosts; EASY backfill against
// job timeouts; "same <label>" topology. Node ranks follow topology labels
// (policy/topology.h). Waiting reasons name missing members (the count and
// the first few indices), the blocking
// gangs, the queue position and hosts that take no gangs.
//
// Not thread-safe; Coordinator serialises access. Keeps references to
// `clock` and `store`.
class Scheduler {
 public:
  // Loads the stored state: members of forming gangs come back not present;
  // running gangs keep their leases.
  // Errors: those of StateStore::Load.
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(
      const Clock& clock, state::StateStore& store,
      const SchedulerOptions& options);

  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Adds or updates a host (by name) and marks it alive.
  // Errors: InvalidArgument for an empty name; FailedPrecondition when the
  // host is up (heartbeats within host_down_after) with another
  // agent_endpoint; Internal when it cannot be persisted.
  absl::Status RegisterHost(const state::HostSpec& spec);

  // Marks the host alive. Returns false when the host is unknown (the agent
  // should register again). `*was_down` tells whether it had been down.
  bool Heartbeat(const std::string& host_name, bool* was_down);

  // What the agent on `host_name` holds now: the members ("<gang id>/<job
  // id>", the executor's member id) that run a stage there, or nullopt when
  // its agent does not say (then every member placed there counts as held).
  // Unknown hosts are ignored.
  void SetRunningMembers(const std::string& host_name,
                         std::optional<std::set<std::string>> member_ids);

  // The last progress of the member stages on `host_name` that have a hang
  // watchdog, by member id ("<gang id>/<job id>"), from its latest
  // heartbeat; replaces what the host said before. Unknown hosts are
  // ignored.
  void SetWatchedProgress(const std::string& host_name,
                          std::map<std::string, MemberProgress> progress);

  // Of `member_ids` ("<gang id>/<job id>", members the agent of
  // `host_name` still holds), those that have left their gang epoch on that
  // host (LeaveGang, ReconcileMembers, ReleaseAbandonedMembers): no executor
  // will tear them down any more. Members this scheduler does not know, or
  // that it placed on another host, are not named.
  std::vector<std::string> MembersLeft(
      const std::string& host_name,
      const std::vector<std::string>& member_ids) const;

  // What the agent on `host_name` said about itself in its latest
  // heartbeat: empty when it takes new members, else why not (its own
  // endpoint stopped answering, ...). A host that is not ready gets no new
  // gang, like a drained one, until a heartbeat clears it; not persisted
  // (every heartbeat says it again). Returns whether it changed; logs each
  // change. Unknown hosts are ignored.
  bool SetNotReady(const std::string& host_name, const std::string& reason);

  // Drains (no new gangs; running ones finish) or undrains a host; persisted.
  // Errors: NotFound "unknown host NAME"; Internal when it cannot be saved.
  absl::Status SetDrained(const std::string& host_name, bool drained);

  // Forgets a host. An agent that still runs registers it again.
  // Errors: NotFound "unknown host NAME"; FailedPrecondition naming the
  // gangs while members run (or hold leases) there; Internal.
  absl::Status RemoveHost(const std::string& host_name);

  // Joins a member through the JoinGang stream `stream_id` and returns the
  // gang id. Queues a Waiting event for the stream (or Admitted at once when
  // the job is already admitted).
  // Errors: FailedPrecondition for a size of 0 or above max_nodes_per_job,
  // more GPUs per node than the largest host has, or a finished gang;
  // InvalidArgument for a member index outside 1..size or a missing job id
  // or group name; AlreadyExists when another live job holds the index.
  absl::StatusOr<std::string> Join(const JoinRequest& request,
                                   uint64_t stream_id);
  // Whether the last Join left nothing for an admission pass to do: the
  // member joined a gang that is still incomplete (and none is complete
  // because of it), with no runner slots declared. Then the caller need not
  // wake the pass; the Waiting event is already queued.
  bool LastJoinNeedsNoPass() const { return last_join_needs_no_pass_; }

  // The stream `stream_id` of a member ended before admission: the member of
  // a forming gang is no longer present. Does nothing otherwise.
  void Detach(const std::string& gang_id, uint32_t member_index,
              uint64_t stream_id);

  // Records a member's exit code. The first non-zero code or cancellation
  // of a running gang that has not yet succeeded fails it: the gang becomes
  // FAILED with one root-cause line as its reason (persisted), and every
  // watch on it gets a GangFailed event. Once every member reported 0, the
  // watches get GangSucceeded; otherwise they get the new progress. Reports
  // for a failed gang are recorded and change nothing else.
  // Errors: NotFound for an unknown gang or member; FailedPrecondition when
  // the job id or epoch does not match; Internal when it cannot be persisted.
  // `peer_suspected`: the member's output shows it lost a peer, so its
  // failure probably follows another member's; the gang then fails only if
  // no other member's failure arrives within failure_attribution_window
  // (FailSuspectedGangs()), and is blamed on whichever failed first
  // otherwise.
  // `exited_unix_ms` (0 = unknown): when the script exited on its host;
  // the root-cause line shows that time rather than the report's arrival.
  absl::Status ReportExit(const std::string& gang_id, uint32_t epoch,
                          uint32_t member_index, int64_t job_id,
                          int32_t exit_code, bool cancelled = false,
                          bool peer_suspected = false,
                          int64_t exited_unix_ms = 0);

  // Opens watch stream `watch_id` on a member's admitted gang and queues its
  // first event: GangFailed when the gang has failed, GangSucceeded when
  // every member exited 0, else GangRunning. Later events follow exit
  // reports; the watch ends by itself after GangFailed or GangSucceeded.
  // Errors: NotFound for an unknown gang or member; FailedPrecondition when
  // the job id or epoch does not match, or the gang is not admitted yet or
  // already done; ResourceExhausted when the job already has
  // kMaxWatchesPerJob streams open (each costs the coordinator memory, and
  // every gang event looks at every open watch).
  static constexpr int kMaxWatchesPerJob = 16;
  absl::Status Watch(const std::string& gang_id, uint32_t epoch,
                     uint32_t member_index, int64_t job_id, uint64_t watch_id);

  // Forgets watch stream `watch_id` (it ended). Idempotent.
  void Unwatch(uint64_t watch_id);

  // The peer list of a member's running gang (what a compact assignment
  // leaves out), the same object every member's assignment of this epoch
  // refers to. Errors: as ReportExit for an unknown gang, member, job or
  // epoch; FailedPrecondition when the gang is not running.
  absl::StatusOr<std::shared_ptr<const state::PeerList>> Peers(
      const std::string& gang_id, uint32_t epoch, uint32_t member_index,
      int64_t job_id);

  // Marks a member left. Idempotent; unknown gangs and members are fine.
  // When every member of a running gang has left, the gang is done and its
  // leases are released. Only a forming gang's own reason is refreshed;
  // other gangs see freed leases on the next Plan().
  // `executor` (the caller's executor id, "" when unknown): a leave from
  // another executor than the one holding the member (a second executor of
  // the same job id, refused at its join) changes nothing.
  // Errors: Internal when the change cannot be persisted.
  absl::Status Leave(const state::GangKey& key, uint32_t member_index,
                     int64_t job_id, const std::string& executor = "");

  // Refreshes waiting reasons (queueing Waiting events where they changed)
  // and returns the gangs that can be admitted now, in arrival order.
  std::vector<AdmissionProposal> Plan();

  // Admits the proposed gang with master port `port`: places it again
  // against the current leases, leases GPUs, slots and the port, persists,
  // and queues an Admitted event for every member.
  // Errors: Unavailable when the gang no longer fits as proposed (try again
  // on the next pass); FailedPrecondition when it is no longer forming or
  // complete; Internal when it cannot be persisted.
  absl::Status Admit(const AdmissionProposal& proposal, uint32_t port);

  // Records why a proposed gang could not be admitted now (shown in its
  // reason until the next attempt succeeds).
  void Defer(const std::string& gang_id, const std::string& note);

  // Returns and clears the queued member events.
  std::vector<state::MemberEvent> TakeEvents();

  // Grows whenever a gang may have ended for good (failed, or every member
  // left and its leases went, or it started an epoch), so that a caller
  // that tracks ended gangs needs to look again only when it changed.
  uint64_t EndChanges() const { return end_changes_; }

  Snapshot GetSnapshot(bool include_finished) const;

  // Where failures are reported (default: NullObserver()). Keeps a
  // reference; `observer` must outlive the scheduler.
  void SetObserver(Observer& observer) { observer_ = &observer; }

  state::HostState StateOf(const state::Host& host) const;

  // The gang with id `gang_id`, or nullptr. Valid until the next change.
  const state::Gang* FindGang(const std::string& gang_id) const;

  // Failure paths, in scheduler_failure.cc -----------------.
  // A running gang fails at most once; the first cause wins and becomes the
  // reason every member's log prints, "gang <id> failed: <cause>; stopping".
  // A gang whose members all exited 0 already succeeded and stays so.

  // Member `member_index` (job `job_id` of `epoch`) was lost: its agent
  // became unreachable mid-stage or its executor went away. Fails its
  // running gang with the cause "member 2/3 (job 1002 on host gpu-07) was
  // lost: <what> at 10:42:13 UTC". Errors as ReportExit.
  absl::Status MemberLost(const std::string& gang_id, uint32_t epoch,
                          uint32_t member_index, int64_t job_id,
                          const std::string& what);

  // Fails every running gang with a member on a host that has missed
  // heartbeats for host_down_after ("... was lost: host gpu-07 missed
  // heartbeats for 10 s (last at 10:42:03 UTC) at ..."). Returns the ids of
  // the gangs it failed. Persisting errors are logged; the gang is then
  // tried again on the next call.
  std::vector<std::string> FailGangsOnLostHosts();

  // A host is declared down only when it stopped talking, not when this
  // coordinator stopped listening. Called by FailGangsOnLostHosts() (each
  // pass of the scheduler loop); extends hosts' heartbeat deadlines instead
  // of letting them lapse when
  //  - the passes themselves stalled for host_down_after / 2 or more (the
  //    process was paused, starved of CPU or the lock was held): every
  //    host's deadline moves by the stall;
  //  - no heartbeat from any host arrived for host_down_after / 2 or more
  //    while two or more hosts were up when the last one came: every host
  //    that was up gets one more full window, once per such quiet spell (a
  //    whole cluster that really went dark is declared down after it).
  // Each extension logs one warning and is reported to the observer as
  // DeadlinesExtended("stalled" or "quiet").
  void CheckHearing();

  // A failed gang (or archived epoch) keeps its leases until every member
  // has left; a member whose runner never calls cleanup (its host is gone)
  // would hold them forever. Once a failed gang has held leases for
  // failed_gang_release since this scheduler first saw it failed, its
  // remaining members count as left and its leases are released (logged,
  // persisted). Returns the ids of the gangs released. Call periodically.
  std::vector<std::string> ReleaseAbandonedMembers();

  // Reconciliation: a member of a gang that holds leases is *held* while an
  // executor holds a WatchGang stream for its job, or its host is up and
  // its agent runs a stage for it (SetRunningMembers; an agent that does
  // not report holds every member). A member not held for
  // member_gone_after, continuously since this scheduler first saw it so,
  // has left: when its gang runs and its exit is unknown the gang fails
  // with "... was lost: neither its agent nor its executor has held it for
  // N s", then it leaves as by Leave() (a gang whose members all left is
  // done and its leases are freed). So a LeaveGang lost during a
  // coordinator outage, or a runner that died before cleanup, leaks
  // nothing. Returns "<gang id>/<member index>" of each member it let go.
  // Call periodically.
  std::vector<std::string> ReconcileMembers();

  // Commits the joins the store holds back (StateStore::SaveJoin); any other
  // change commits them too. Call periodically: it bounds how many joins a
  // crash of the coordinator can lose (their members join again).
  absl::Status FlushStore() { return store_.Flush(); }

  // Takes back the joins the store dropped (StateStore::TakeDroppedJoins:
  // held back, their commit failed, and writing them again failed for
  // good). A member still in its forming gang is taken out of it, and its
  // stream ends with the reason (its job fails and may be retried); the
  // gang waits for it again. A join whose gang was admitted (or that its
  // job gave up) since was stored by that change and stays. Logs each as
  // `event=join_dropped`. Call before Plan().
  void ForgetDroppedJoins();

  // Fails each running gang whose first failure report was only
  // `peer_suspected` once failure_attribution_window has passed without a
  // better culprit, blaming that member. Returns the ids it failed. Call
  // periodically.
  std::vector<std::string> FailSuspectedGangs();

  // Member `member_index` made no progress for `seconds` (its
  // GDT_HANG_TIMEOUT) since `progress` (unknown: `seconds` before now):
  // fails its running gang as hung, naming the member whose progress
  // stopped first, and the GangFailed events ask every member to collect
  // evidence first.
  //
  // The culprit is the member that stopped first among the hang reports
  // and the progress the other members' hosts sent with heartbeats that
  // came after the reporter stopped (SetWatchedProgress): a member at a
  // lower step when both wrote steps, else one whose progress stopped more
  // than hang_tie_tolerance before the reporter's; otherwise the first
  // reporter. While the host of a running member has not been heard from
  // since the reporter stopped (a stalled agent, a late heartbeat) the
  // decision waits for it (FailHungGangs), at most host_down_after. The
  // root-cause line: "member 2/3 (job 1002 on host gpu-07) hung: no
  // progress since 10:32:11 UTC (its host's clock; GDT_HANG_TIMEOUT 600 s),
  // peers' last progress 1.4 s later; detected at 10:42:13 UTC". Errors as
  // ReportExit.
  absl::Status MemberHung(const std::string& gang_id, uint32_t epoch,
                          uint32_t member_index, int64_t job_id,
                          uint32_t seconds, MemberProgress progress = {});

  // Retention (finished_gang_retention): forgets each finished gang whose
  // retention has run out since it ended for good (see
  // finished_gang_retention), with its members, leases, preemption and elastic
  // records, key-value store token and, for a gang's current id, its checkpoint
  // records (StateStore::DeleteGang), then in memory. A gang whose members
  // have not all left, that a lease or a watch still names, or (for a
  // gang's current id) whose archived epochs are still kept waits for a
  // later call. Does the work at most once per kPruneEvery and looks at
  // most kPruneBatch gangs a time, so that no call stalls the scheduler.
  // Afterwards every lookup by the gang's id answers as for an unknown gang
  // (NotFound), and a join of its key forms a fresh gang. Returns the ids
  // forgotten. A store error is logged and the gang tried again later.
  // Call periodically.
  std::vector<std::string> PruneFinishedGangs();
  static constexpr std::chrono::seconds kPruneEvery{60};
  static constexpr size_t kPruneBatch = 256;

  // Decides the hung gangs MemberHung() left waiting for a member's host,
  // once that host was heard from or host_down_after passed since the
  // first report. Returns the ids it failed. Call periodically.
  std::vector<std::string> FailHungGangs();

  // An operator cancels gang `gang_id`: a running gang fails with the cause
  // "cancelled by operator[: <note>] at 10:42:13 UTC"; a forming gang's
  // joined members get that line as their Aborted event. Returns the
  // root-cause line. Errors: NotFound for an unknown gang;
  // FailedPrecondition for a gang that already finished (done, failed, or
  // every member exited 0); Internal when it cannot be persisted.
  absl::StatusOr<std::string> Cancel(const std::string& gang_id,
                                     const std::string& note);

  // An operator removes forming gangs in bulk (`gdt-coord cancel
  // --forming`): every forming gang of project `project_id` and pipeline
  // `pipeline_id` (0 = any) fails as Cancel() would fail it. Running gangs
  // are left alone. Returns the ids cancelled. Errors: Internal when one
  // cannot be persisted (those before it stay cancelled).
  absl::StatusOr<std::vector<std::string>> CancelForming(
      int64_t project_id, int64_t pipeline_id, const std::string& note);

  // The operator's escape hatch (`gdt-coord cancel --force`): whatever
  // state gang `gang_id` (or archived epoch "<id>#<n>") is in, its leases
  // are freed now. A forming or running gang first fails as Cancel() would
  // fail it (every member is told to stop); then every member counts as
  // left, the leases are released and a running gang whose members all
  // exited 0 becomes DONE. Logged as event=gang_force_cancelled. Returns
  // the line to show the operator. Errors: NotFound for an unknown gang;
  // Internal when it cannot be persisted.
  absl::StatusOr<std::string> ForceCancel(const std::string& gang_id,
                                          const std::string& note);

  // Preemption, in scheduler_preemption.cc -----------------.
  // With preemption enabled, each admission pass may choose running
  // preemptible gangs to make room for a waiting one. Each such victim
  // gets a checkpoint notice (handed to the caller here, who writes it into
  // the gang's key-value store, where `gdt-ckpt run` picks it up) and is
  // failed as preempted as soon as one of its members exits (it stopped
  // on the notice), kPreemptionSettle after it recorded a checkpoint (time
  // for the training to finish its step and exit by itself), or when the
  // grace runs out, whichever is first. The failure
  // names the waiting gang, its priority, the checkpoint and the GPU-hours
  // lost; its watches learn that the gang was preempted (members exit with
  // the preemption code, which the default retry brings back), and the
  // gang's preemption count, kept across epochs, bounds how often it is
  // chosen again.
  struct PreemptionNotice {
    std::string gang_id;
    uint32_t epoch = 0;
    int64_t stop_by_unix_s = 0;  // When the gang is stopped at the latest.
    // For the members' logs: "preempted by the coordinator for gang G
    // (priority P)".
    std::string note;
  };
  // Returns and clears the notices of preemptions begun since the last call.
  std::vector<PreemptionNotice> TakePreemptionNotices();
  // Gang `gang_id` recorded a checkpoint in `epoch`; a gang being preempted
  // is stopped on the next StopPreemptedGangs().
  void NoteCheckpoint(const std::string& gang_id, uint32_t epoch);
  // Fails every gang being preempted that recorded a checkpoint since its
  // notice at least kPreemptionSettle ago or whose grace has run out. Returns
  // their ids. Persisting errors are logged; the gang is then tried again on
  // the next call.
  std::vector<std::string> StopPreemptedGangs();

  // Forming gangs none of whose members holds a join stream (every one
  // went away, e.g. their runners were stopped) would wait forever. Each
  // forming gang seen without a present member for forming_abandoned_after
  // (or at once when `now` is true, `gdt-coord gangs gc`) fails with
  // "no member present for N s": a retried job starts its next epoch.
  // Returns the ids it ended. Call periodically.
  std::vector<std::string> EndAbandonedFormingGangs(bool now = false);

  // Member `member_index` (job `job_id`) of the gang with `key` was refused
  // before it could join (its executor found its job unfit at config or
  // prepare, e.g. a forged CI_NODE_INDEX) for `reason`, which its peers
  // cannot fix. A forming gang of `key` fails at once with the cause
  // "member 2/3 (job 1002) was refused: <reason> at 10:42:13 UTC" (its
  // waiting members get it as their Aborted event), and until a retried
  // job of that member joins, every other member's join is refused with
  // Aborted and the same line, so nobody waits the join timeout for it.
  // Returns the root-cause line. Kept in memory (the newest
  // kMaxRefusals). Errors: InvalidArgument for an index outside 1..size, no
  // job id or an empty reason; FailedPrecondition when the gang already
  // runs.
  absl::StatusOr<std::string> RefuseMember(const state::GangKey& key,
                                           uint32_t member_index,
                                           int64_t job_id,
                                           const std::string& reason);
  static constexpr size_t kMaxRefusals = 4096;

 private:
  // Fails `gang` (forming or running) with `cause`, blaming member
  // `member_index` (0 = nobody): persists, logs and tells every watch; a
  // forming gang's joined members get Aborted events and count as left.
  // `failure_class` goes to the observer (metrics), e.g. "host_lost".
  absl::Status FailGang(state::Gang& gang, uint32_t member_index,
                        const std::string& cause,
                        std::string_view failure_class,
                        bool collect_evidence = false);
  // Names the culprit of running `gang`'s hang reports and fails the gang
  // (see MemberHung), unless a member's host must still be heard from.
  // Returns whether it failed the gang.
  absl::StatusOr<bool> ResolveHang(state::Gang& gang);
  // Whether `member` stopped before `other`: at a lower step when both
  // wrote one and they differ, else more than `tolerance` earlier.
  static bool StoppedBefore(const MemberProgress& member,
                            const MemberProgress& other,
                            std::chrono::milliseconds tolerance);
  // Begins preempting running `gang` as the policy chose it (`victim`);
  // nothing when it is not running or already being preempted.
  void StartPreemption(state::Gang& gang, const PreemptedGang& victim);
  // Queues the checkpoint notice of running `gang`, which is being
  // preempted (at the start, and again after a restart: the notice lives
  // in the gang's key-value store, which a restart empties).
  void QueueNotice(const state::Gang& gang);
  // Fails `gang`, which is being preempted, as preempted and counts it;
  // `early_exit` (empty = none) says which member ended before a
  // checkpoint was recorded.
  // Whether gang `gang_id` (a victim's preempt_by) still waits with all its
  // members present; a victim is stopped only for such a gang.
  bool StillWaiting(const std::string& gang_id) const;
  // Ends the stopping of a victim whose waiting gang is gone
  // (preempt_stop_by_ms = 0, persisted); its members' exits still end it as
  // preempted.
  void WithdrawPreemption(state::Gang& gang);
  absl::Status FailPreempted(state::Gang& gang, const std::string& early_exit);
  // "member 2/3 (job 1002 on host gpu-07)".
  static std::string MemberLabel(const state::Gang& gang,
                                 const state::Member& member);

  // Epochs. A job that joins a failed or done gang starts its next epoch:
  // the finished epoch is archived as gang "<id>#<epoch>" (keeping its
  // members and, until they have all left, its leases and watches), and the
  // gang, same id and key, forms again with epoch + 1 and no members.
  // Errors: FailedPrecondition when `job_id` is one of the finished epoch's
  // jobs (not a retry); Internal when it cannot be persisted.
  absl::Status StartNextEpoch(state::Gang& gang, int64_t job_id);
  // FailedPrecondition when `job_id` belongs to an earlier epoch of `gang`
  // (fenced: it may neither join, report nor watch).
  absl::Status CheckNotFenced(const state::Gang& gang, int64_t job_id) const;
  // The gang (live or archived epoch) whose member `member_index` is job
  // `job_id`, or null.
  state::Gang* GangOfJob(const state::GangKey& key, uint32_t member_index,
                         int64_t job_id);
  static bool IsArchivedEpoch(const std::string& gang_id);
  // Whether anything holds `member` of a gang whose live id is `base_id`
  // (see ReconcileMembers); `watched` are the job ids with a watch stream.
  bool MemberHeld(const std::string& base_id, const state::Member& member,
                  const std::set<int64_t>& watched) const;
  // The gangs of live_ids_ in id order, for the walks that look at forming
  // gangs or gangs holding leases only: O(live gangs), not O(history). The
  // ids are copied first, so the walk may fail gangs and start epochs.
  std::vector<std::pair<std::string, state::Gang*>> LiveGangs();
  // Frees the GPU, slot and port leases of `gang` (every member has left).
  void ReleaseLeases(const state::Gang& gang);
  // Retention: Pass() saw gang `gang_id` end for good now.
  void NoteFinished(const std::string& gang_id);
  // Why finished `gang` cannot be forgotten yet (a lease, a watch or an
  // archived epoch names it); empty when it can.
  std::string PruneBlocker(const state::Gang& gang) const;
  // Drops every trace of `gang_id` from memory (it is gone from the store).
  void ForgetGang(const std::string& gang_id);

  // Resources in use on one host.
  struct Usage {
    std::map<uint32_t, std::string> gpus;  // Leased GPU index -> gang id.
    uint32_t cpu_members = 0;
    std::string busy_gang;  // Some running gang on the host, for reasons.
  };
  using UsageMap = std::map<std::string, Usage>;  // By host name.

  Scheduler(const Clock& clock, state::StateStore& store,
            const SchedulerOptions& options);

  absl::Status LoadState();
  absl::StatusOr<std::string> GangIdFor(const state::GangKey& key);
  // Ok when a new gang with `key` stays within the forming-gang limits.
  absl::Status CheckFormingQuota(const state::GangKey& key) const;
  UsageMap CurrentUsage() const;
  // Inputs of placement.h built from the inventory, leases and gangs.
  std::vector<PlacementHost> PlacementHosts() const;
  std::vector<RunningGang> RunningGangs() const;
  WaitingGang WaitingGangOf(const state::Gang& gang) const;
  // Fails each bounced forming gang (runner-slot deadlock): its joined
  // members get Aborted events with the policy's message, a retried job
  // starts the gang's next epoch, and the observer counts the bounce. Takes
  // the gangs off `forming`.
  void BounceGangs(const std::vector<BouncedGang>& bounced,
                   std::vector<state::Gang*>& forming);
  // Whether `planned` still fits the current leases and hosts; the reason
  // when it does not.
  absl::Status CheckPlanned(const state::Gang& gang,
                            const std::vector<PlannedMember>& planned) const;
  // Who is absent from a forming gang, kept up to date on every join,
  // detach and leave so that a join's waiting reason and Waiting event cost
  // O(log N) instead of a walk over every member (which made forming a gang
  // of N members cost O(N^2)). Valid for one epoch of the gang.
  struct Absence {
    uint32_t epoch = 0;
    std::set<uint32_t> missing;       // Indices 1..size without a stream.
    std::set<uint32_t> disconnected;  // Of those, members that had joined.
    // Members holding a stream that were not yet told (while members are
    // missing) which ones are: the only ones a coalesced QueueWaiting must
    // visit.
    std::set<uint32_t> untold;
  };
  // The absence of forming `gang`, counted from its members once per
  // epoch (O(N)) and then maintained by NotePresence().
  // Debug builds check a kept one against a recount unless `verify` is
  // false (NotePresence, which brings it up to date).
  Absence& AbsenceOf(const state::Gang& gang, bool verify = true) const;
  // Member `index` of forming `gang` changed: its presence, stream or
  // told_missing. O(log N).
  void NotePresence(const state::Gang& gang, uint32_t index);
  // Every member of forming `gang` holds a JoinGang stream. O(log N).
  bool Complete(const state::Gang& gang) const;
  // How many members of `gang` (running or failed) have not left: counted
  // once per epoch and state (O(N)), then kept by Leave(), so that finding
  // a large gang's last leave costs O(1) and not a walk per leave (N leaves
  // cost O(N^2)). Debug builds check it against a recount.
  uint32_t& StayingOf(const state::Gang& gang);
  // `blocked` is null for a gang that is missing members or being placed.
  std::string WaitingReason(const state::Gang& gang,
                            const BlockedGang* blocked) const;
  // Recomputes every forming gang's reason and queues Waiting events.
  std::vector<AdmissionProposal> Pass();
  // After a join or detach in forming `gang`: a gang that is (or was until
  // now) complete takes part in placement, so a full Pass() runs; otherwise
  // only this gang's reason is recomputed and queued, O(log size), with
  // `joined` (0 = none) the member whose stream must hear it at once.
  void RefreshForming(state::Gang& gang, bool was_complete, uint32_t joined);
  // Queues Waiting events for the gang's members whose last reason differs.
  // While members are missing, a member already told so hears a new count
  // at most once per kWaitingRefresh (coalesced), so that N joins cost O(N)
  // events and not O(N^2); `joined` (0 = none) is told at once, and when
  // no refresh is due only it and the members not yet told are visited.
  void QueueWaiting(state::Gang& gang, uint32_t joined = 0);
  // Finds the gang's member `member_index` for a call by `job_id` in
  // `epoch`. Errors as ReportExit.
  absl::StatusOr<state::Gang*> FindMember(const std::string& gang_id,
                                          uint32_t epoch, uint32_t member_index,
                                          int64_t job_id);
  // Queues the event that tells watch `watch_id` where `gang` stands; ends
  // the watch when the event is final.
  void QueueWatchEvent(const state::Gang& gang, uint64_t watch_id);
  void NotifyWatchers(const state::Gang& gang);
  // "member 2/3 (job 1002 on host gpu-07) exited 137 at 10:42:13 UTC".
  // At `exited_unix_ms`, or now when that is 0.
  std::string FailureCause(const state::Gang& gang, const state::Member& member,
                           int32_t exit_code, bool cancelled,
                           int64_t exited_unix_ms) const;
  state::Assignment BuildAssignment(const state::Gang& gang,
                                    const state::Member& member);
  // The gang's peer list for its current epoch: built on first use after an
  // admission and kept until its leases are released.
  std::shared_ptr<const state::PeerList> PeerListOf(const state::Gang& gang);
  void QueueAdmitted(const state::Gang& gang, state::Member& member,
                     uint64_t stream_id);
  // Tells the stream of member `index` of elastic `gang`, which runs (or
  // ran) without it, that it is not needed at this size.
  void QueueNotNeeded(const state::Gang& gang, uint32_t index,
                      uint64_t stream_id);
  // Whether forming elastic `gang` has waited elastic_wait for its missing
  // members and may start with those present.
  bool ElasticWaitOver(const state::Gang& gang) const;

  const Clock& clock_;
  state::StateStore& store_;
  const SchedulerOptions options_;
  std::map<std::string, state::Host> hosts_;  // By name.
  // Hosts whose agent reports itself not ready, with its reason.
  std::map<std::string, std::string> not_ready_;
  // How many of hosts_ declare runner slots, so that a join knows in O(1)
  // whether incomplete gangs take part in placement.
  size_t hosts_with_runner_slots_ = 0;
  std::map<std::string, state::Gang> gangs_;  // By id.
  // Ids of the gangs that may be forming or hold leases: every such gang is
  // here (added when a gang is created, loaded or starts an epoch), others
  // are dropped by the next Pass(). gangs_ keeps finished gangs too (until
  // their retention runs out, see PruneFinishedGangs), so passes and usage
  // walk this set to cost O(live gangs), not O(history).
  std::set<std::string> live_ids_;
  bool last_join_needs_no_pass_ = false;  // See LastJoinNeedsNoPass().
  // By gang id, for gangs holding leases (see StayingOf); dropped when the
  // leases go.
  struct Staying {
    uint32_t epoch = 0;
    state::GangState state = state::GangState::kForming;
    uint32_t count = 0;
  };
  std::map<std::string, Staying> staying_;
  // By gang id, for forming gangs (see Absence); dropped by Pass() once a
  // gang stops forming, and recounted when its epoch changes. Filled on
  // first use, also from const methods.
  mutable std::map<std::string, Absence> absences_;
  std::map<state::GangKey, std::string> gang_ids_;
  std::map<std::string, std::map<uint32_t, std::string>> gpu_leases_;
  std::map<std::string, std::map<uint32_t, std::string>> port_leases_;
  // Peer lists of running gangs, by gang id (see PeerListOf).
  std::map<std::string, std::shared_ptr<const state::PeerList>> peer_lists_;
  int64_t next_sequence_ = 1;
  uint64_t end_changes_ = 0;                  // See EndChanges().
  std::map<uint64_t, std::string> watchers_;  // Watch stream id -> gang id.
  // Open watch streams (until Unwatch) -> the watching member's job id.
  std::map<uint64_t, int64_t> watch_jobs_;
  // Job id -> how many of watch_jobs_ are its.
  std::map<int64_t, int> watches_per_job_;
  // Hosts whose agent reports its running members -> those member ids.
  std::map<std::string, std::set<std::string>> running_members_;
  // Hosts -> the progress of their watched member stages (member id ->
  // progress), from their latest heartbeat.
  std::map<std::string, std::map<std::string, MemberProgress>>
      watched_progress_;
  // Running gangs with a hang report whose culprit is not decided yet, by
  // gang id. Dropped when the gang fails or stops running.
  struct HangReports {
    uint32_t epoch = 0;
    uint32_t first = 0;    // The member whose report came first.
    uint32_t seconds = 0;  // Its GDT_HANG_TIMEOUT.
    Clock::TimePoint since{};
    std::map<uint32_t, MemberProgress> reported;  // By member index.
  };
  std::map<std::string, HangReports> hang_reports_;
  // (gang id, member index, job id) of members not held -> since when. The
  // job id keeps a retried job (the gang's next epoch, same id and index)
  // from inheriting the absence of the job it replaces.
  std::map<std::tuple<std::string, uint32_t, int64_t>, Clock::TimePoint>
      member_absent_since_;
  // (gang id, epoch) of failed gangs holding leases -> when this scheduler
  // first saw them so.
  std::map<std::pair<std::string, uint32_t>, Clock::TimePoint>
      failed_holding_since_;
  // Forming gangs with no present member -> when this scheduler first saw
  // them so.
  std::map<std::string, Clock::TimePoint> forming_empty_since_;
  // Retention (PruneFinishedGangs): the finished gangs by id -> since when
  // this scheduler saw them so, and the same pairs by time (entries whose
  // time no longer matches finished_since_ are stale and skipped).
  std::map<std::string, Clock::TimePoint> finished_since_;
  std::set<std::pair<Clock::TimePoint, std::string>> prune_queue_;
  std::optional<Clock::TimePoint> last_prune_;
  std::vector<state::MemberEvent> events_;
  std::vector<PreemptionNotice> notices_;  // Not yet taken.
  Observer* observer_ = &NullObserver();
  KeyedRateLimiter join_rate_;  // By "<instance> <project id>".
  // CheckHearing(): when it last ran and when any heartbeat last came (both
  // unset until the first); whether the current quiet spell was bridged.
  std::optional<Clock::TimePoint> last_hearing_check_;
  std::optional<Clock::TimePoint> last_heard_any_;
  bool quiet_spell_bridged_ = false;
  // RefuseMember(): by gang key, the refused member and job and the
  // root-cause line; `refusal_order_` keeps them bounded, oldest first.
  struct Refusal {
    uint32_t member_index = 0;
    int64_t job_id = 0;
    std::string root_cause;
  };
  std::map<state::GangKey, Refusal> refusals_;
  std::deque<state::GangKey> refusal_order_;
};

}  // namespace gdt::coordinator

#endif  // GDT_COORDINATOR_SCHEDULER_H_
