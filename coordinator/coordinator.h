#ifndef GDT_COORDINATOR_COORDINATOR_H_
#define GDT_COORDINATOR_COORDINATOR_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "common/member_token.h"
#include "common/mutex.h"
#include "common/rate_limiter.h"
#include "coordinator/observer.h"
#include "coordinator/port_checker.h"
#include "coordinator/scheduler.h"
#include "kv/gang_kv.h"
#include "state/model.h"
#include "state/sqlite_store.h"

namespace gdt::coordinator {

// How fast one gang may record checkpoints. A record costs 1 + its
// manifest's size / kUnitBytes units, divided among the gang's members
// (key.size); a gang may spend `burst` units at once, then `per_second` a
// second: with the defaults each member records a small manifest twice a
// second after a burst of 64, and 8 clients sending 1 MiB manifests with
// one member's token get about 4 MiB in, then one every 8.5 s.
struct CheckpointLimits {
  static constexpr size_t kUnitBytes = 64 * 1024;
  double per_second = 2;  // 0: no limit.
  double burst = 64;
};

// The thread-safe core of gdt-coord: owns the StateStore and the Scheduler,
// runs admission passes on one scheduler thread (woken by joins, leaves,
// registrations and a 1 s tick), and hands member events to the event sink.
// The sink is always called without any lock of this class held, so it may
// call back into it.
//
// It also owns the gang key-value store (GangKv): when a gang is admitted it
// issues the gang a token for its epoch, derived from a per-cluster secret
// (persisted in the StateStore, made again after a restart should the store
// have refused it, handed to members in Assignment.kv_token) and opens its
// store; once the gang has ended (done, or failed and every member left) it
// drops the store and the token.
//
// Thread-safe. Keeps references to `clock` and `port_checker`.
class Coordinator {
 public:
  using EventSink = std::function<void(std::vector<state::MemberEvent>)>;

  // Errors: those of Scheduler::Create.
  static absl::StatusOr<std::unique_ptr<Coordinator>> Create(
      const Clock& clock, std::unique_ptr<state::StateStore> store,
      const SchedulerOptions& options, PortChecker& port_checker,
      const kv::KvLimits& kv_limits = {},
      const CheckpointLimits& checkpoint_limits = {});

  ~Coordinator();  // Stops the scheduler thread.
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  // Sets where member events go. Call before Start() and before any join.
  void SetEventSink(EventSink sink);

  // Sets who hears about joins, admissions, failures and RPCs (default:
  // NullObserver()). Call before Start() and before any join; `observer`
  // must outlive this object.
  void SetObserver(Observer& observer);
  Observer& observer() const { return *observer_; }

  // Starts and stops the scheduler thread. Stop() is idempotent.
  void Start();
  void Stop();

  // Runs one admission pass now on the calling thread: plan under the lock,
  // ask agents about master ports without it, commit under it. With
  // `time_checks` it first runs the scheduler's time-based checks (lost
  // hosts, abandoned members and gangs, suspected failures, members no one
  // holds); the scheduler thread asks for them once a second.
  void RunAdmissionPass(bool time_checks = true);

  // The operations below mirror the RPCs; see Scheduler for their errors.
  absl::Status RegisterHost(const state::HostSpec& spec);
  // `running_members`: see Scheduler::SetRunningMembers.
  // `watched_progress`: see Scheduler::SetWatchedProgress.
  // `idle_members` and `members_left` (may be null): see
  // Scheduler::MembersLeft.
  bool Heartbeat(
      const std::string& host_name,
      std::optional<std::set<std::string>> running_members = std::nullopt,
      std::map<std::string, MemberProgress> watched_progress = {},
      const std::vector<std::string>& idle_members = {},
      std::vector<std::string>* members_left = nullptr,

      const std::string& not_ready_reason = "");
  absl::StatusOr<std::string> Join(const JoinRequest& request,
                                   uint64_t stream_id);
  void Detach(const std::string& gang_id, uint32_t member_index,
              uint64_t stream_id);
  absl::Status ReportExit(const std::string& gang_id, uint32_t epoch,
                          uint32_t member_index, int64_t job_id,
                          int32_t exit_code, bool cancelled,
                          bool peer_suspected = false,
                          int64_t exited_unix_ms = 0);
  absl::Status Watch(const std::string& gang_id, uint32_t epoch,
                     uint32_t member_index, int64_t job_id, uint64_t watch_id);
  void Unwatch(uint64_t watch_id);
  // See Scheduler::Peers.
  absl::StatusOr<std::shared_ptr<const state::PeerList>> Peers(
      const std::string& gang_id, uint32_t epoch, uint32_t member_index,
      int64_t job_id);
  absl::Status Leave(const state::GangKey& key, uint32_t member_index,
                     int64_t job_id, const std::string& executor = "");
  // What status shows. Status readers (GetStatus, the dashboard, /metrics)
  // share one snapshot: it is built again once any other call has taken the
  // coordinator's lock since (any call may change what status shows), and
  // at least every kStatusSnapshotReuse (time-based states such as a host
  // that stopped sending heartbeats). A flood of status reads thus costs
  // the lock one build per change, not one per read.
  Snapshot GetSnapshot(bool include_finished);
  std::shared_ptr<const Snapshot> SharedSnapshot(bool include_finished);
  static constexpr std::chrono::milliseconds kStatusSnapshotReuse{250};
  // How many snapshots were built (for tests).
  uint64_t snapshots_built();
  absl::Status SetDrained(const std::string& host_name, bool drained);
  absl::Status RemoveHost(const std::string& host_name);

  // Failure paths; see Scheduler::MemberLost and Scheduler::Cancel.
  // Hosts that missed heartbeats fail their gangs within a second (the
  // scheduler thread's time-based checks).
  absl::Status MemberLost(const std::string& gang_id, uint32_t epoch,
                          uint32_t member_index, int64_t job_id,
                          const std::string& what);
  absl::StatusOr<std::string> Cancel(const std::string& gang_id,
                                     const std::string& note);
  // See Scheduler::ForceCancel and Scheduler::EndAbandonedFormingGangs
  // (forming gangs with no present member also end, within a second, once
  // forming_abandoned_after has passed).
  absl::StatusOr<std::string> ForceCancel(const std::string& gang_id,
                                          const std::string& note);
  std::vector<std::string> EndAbandonedFormingGangs();
  // See Scheduler::RefuseMember.
  absl::StatusOr<std::string> RefuseMember(const state::GangKey& key,
                                           uint32_t member_index,
                                           int64_t job_id,
                                           const std::string& reason);
  // See Scheduler::CancelForming.
  absl::StatusOr<std::vector<std::string>> CancelForming(
      int64_t project_id, int64_t pipeline_id, const std::string& note);
  absl::Status MemberHung(const std::string& gang_id, uint32_t epoch,
                          uint32_t member_index, int64_t job_id,
                          uint32_t seconds, MemberProgress progress = {});

  // The gang key-value store (thread-safe on its own).
  kv::GangKv& kv() { return *kv_; }

  // Checkpoint manifest records.
  // Records a checkpoint of the caller's gang (authorised by the gang's
  // current-epoch token, GangKv::CheckCaller's errors); `record.gang_id` and
  // `record.epoch` are taken from the caller. Keeps the newest
  // kCheckpointsPerGang. InvalidArgument for a negative step or a manifest
  // that is empty or above kMaxManifestBytes.
  // Each record is a write to the state under the coordinator's lock, so
  // a gang records at a bounded pace (CheckpointLimits); beyond it:
  // ResourceExhausted naming the bound, with a retry hint (retry_after.h).
  static constexpr size_t kCheckpointsPerGang = 32;
  static constexpr size_t kMaxManifestBytes = 1 << 20;
  absl::Status RecordCheckpoint(const kv::KvCaller& caller,
                                state::CheckpointRecord record);
  // The records of the caller's gang from every epoch, newest first: as
  // many as fit within kMaxListedManifestBytes of manifests (at least the
  // newest), so that the answer stays below a client's 4 MiB message limit.
  static constexpr size_t kMaxListedManifestBytes = 3 << 20;
  absl::StatusOr<std::vector<state::CheckpointRecord>> ListCheckpoints(
      const kv::KvCaller& caller);
  // Host tokens.
  // Issues a new token for `host_name` (replacing any old one), stores its
  // SHA-256 and returns the token; it is shown once and never again.
  // Errors: InvalidArgument for an empty name; Internal from the store.
  absl::StatusOr<std::string> CreateHostToken(const std::string& host_name);
  // Every host with a token (sha256 left empty), by name.
  std::vector<state::HostTokenRecord> ListHostTokens();
  // Errors: NotFound "no host token for NAME"; Internal from the store.
  absl::Status RevokeHostToken(const std::string& host_name);
  // The host whose token is `token`.
  // Errors: Unauthenticated when `token` is empty; PermissionDenied when it
  // is no host's token (wrong or revoked).
  absl::StatusOr<std::string> HostOfToken(const std::string& token);
  // Member tokens.
  // The claims of member token `token` when it is still good for an agent of
  // `host_name`: signed by this coordinator, for that host, not expired, the
  // host still has a host token, and the member is in its gang's current
  // epoch, placed on that host and has not left.
  // Errors: InvalidArgument for a token that is not one; PermissionDenied
  // naming the member and why not.
  absl::StatusOr<MemberClaims> CheckMemberToken(const std::string& token,
                                                const std::string& host_name);
  // The host member `member_index` of `gang_id` is placed on; empty when
  // unknown or not placed.
  std::string MemberHost(const std::string& gang_id, uint32_t member_index);

 private:
  Coordinator(std::unique_ptr<state::StateStore> store,
              PortChecker& port_checker, const kv::KvLimits& kv_limits)
      : store_(std::move(store)),
        port_checker_(port_checker),
        kv_(std::make_unique<kv::GangKv>(kv_limits)) {}

  // Drains the scheduler's outbox, puts the gang's kv token into every
  // admission and drops the stores of gangs that have ended; the caller
  // holds `mu_`.
  std::vector<state::MemberEvent> TakeEventsLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reopens the stores of gangs whose tokens were persisted, and of running
  // gangs whose token was not (made again from the gang).
  absl::Status LoadKvTokensLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The token of `gang_id` at `epoch`, issued (and persisted) on first use:
  // HMAC-SHA256 under the cluster's kv token key of the gang's id, epoch
  // and creation time. A token the store refuses is still issued, and kept
  // as unsaved.
  std::string KvTokenLocked(const std::string& gang_id, uint32_t epoch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Saves the tokens the store refused before; stops at the first refusal
  // (the next pass tries again).
  void SaveUnsavedKvTokensLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndFinishedKvGangsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Scheduler::FlushStore, logging a failure.
  void FlushStoreLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the checkpoint notice of each gang the scheduler began to
  // preempt into that gang's key-value store (rendezvous/kv_keys.h).
  void SendPreemptionNoticesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Deliver(std::vector<state::MemberEvent> events);
  void Wake();
  void Loop();

  std::unique_ptr<state::StateStore> store_;
  PortChecker& port_checker_;
  EventSink sink_;  // Set before use; constant afterwards.
  Observer* observer_ = &NullObserver();  // Likewise.

  Mutex mu_;
  std::unique_ptr<Scheduler> scheduler_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<kv::GangKv> kv_;  // Set at construction; outlives every call.
  // By gang. An empty token: a failed gang whose store ended, kept with its
  // earlier tokens' hashes for a retry under the same id.
  std::map<std::string, state::KvToken> kv_tokens_ ABSL_GUARDED_BY(mu_);
  // Gangs whose entry in kv_tokens_ the store refused: saved by a later
  // pass.
  std::set<std::string> unsaved_kv_tokens_ ABSL_GUARDED_BY(mu_);
  // Scheduler::EndChanges() at the last look for ended gangs; nullopt
  // before the first.
  std::optional<uint64_t> kv_end_changes_seen_ ABSL_GUARDED_BY(mu_);
  // Host token records by host name.
  std::map<std::string, state::HostTokenRecord> host_tokens_
      ABSL_GUARDED_BY(mu_);
  const Clock* clock_ = nullptr;  // Set in Create.
  // The snapshots kept for status readers: [0] without finished gangs, [1]
  // with them, each built at `version` of what status shows. The version
  // moves when any other call took mu_ between two status reads
  // (`status_read_hold_` is mu_.acquisitions() at the latest one).
  struct StatusSnapshot {
    std::shared_ptr<const Snapshot> snapshot;
    uint64_t version = 0;
    Clock::TimePoint built;
  };
  uint64_t status_read_hold_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t status_version_ ABSL_GUARDED_BY(mu_) = 0;
  StatusSnapshot status_snapshots_[2] ABSL_GUARDED_BY(mu_);
  uint64_t snapshots_built_ ABSL_GUARDED_BY(mu_) = 0;
  // What each gang may still spend on checkpoint records; set in Create.
  std::unique_ptr<KeyedRateLimiter> checkpoint_rate_;
  CheckpointLimits checkpoint_limits_;  // Set in Create.
  // Signs member tokens; from the store, set in Create.
  std::string member_token_key_;
  // The key kv tokens are derived with (KvTokenLocked); set in Create.
  std::string kv_token_key_;
  // The last flush of held-back joins failed (logged once).
  bool joins_commit_failing_ ABSL_GUARDED_BY(mu_) = false;
  CondVar wake_cv_;
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace gdt::coordinator

#endif  // GDT_COORDINATOR_COORDINATOR_H_
