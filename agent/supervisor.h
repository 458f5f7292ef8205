#ifndef GDT_AGENT_SUPERVISOR_H_
#define GDT_AGENT_SUPERVISOR_H_

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "agent/disk_reserve.h"
#include "agent/disk_use.h"
#include "agent/isolation.h"
#include "agent/process_ledger.h"
#include "agent/stage.h"
#include "common/mutex.h"
#include "common/subprocess.h"

namespace gdt::agent {

// A file written into the member's scratch dir before a stage starts; the
// stage's `env_var` then holds its absolute path.
struct StageFileSpec {
  std::string env_var;
  std::string name;  // Plain file name, no '/'.
  std::string content;
};

// Everything needed to start one stage of one member.
struct StageRequest {
  std::string member_id;
  std::string stage;   // Runner stage name, e.g. "build_script".
  std::string script;  // Contents of the script.
  std::map<std::string, std::string> env;  // Overlaid on the agent's own.
  std::string working_dir;  // Absolute; empty = the member's scratch dir.
  std::chrono::seconds kill_grace{0};  // 0 = the agent's default.
  std::vector<StageFileSpec> files;
  // Hang watchdog (0 = off): the stage gets GDT_PROGRESS_FILE, an empty
  // file in the member's scratch dir, and StageOptions::hang_timeout.
  std::chrono::seconds hang_timeout{0};
  std::string evidence_dir;  // Absolute; empty = <scratch>/evidence.
  // Teardown watch (0 = off): StageOptions::teardown_timeout.
  std::chrono::seconds teardown_timeout{0};
};

// How members are kept apart from the agent and from each other. The
// defaults keep stages under the agent's own uid in process groups only.
struct IsolationOptions {
  // Accounts member stages run as (the agent needs CAP_SETUID/CAP_SETGID);
  // empty = the agent's own. With `exclusive_accounts`, each member gets an
  // account no other live member uses (a pool); else all share them[0].
  std::vector<MemberAccount> accounts;
  bool exclusive_accounts = false;
  // One cgroup per member under this tree; null = process groups only.
  std::shared_ptr<const CgroupTree> cgroups;
  // With `cgroups` guarding their devices (CgroupTree::GuardDevices): each
  // GPU index's device and UUID. A member's cgroup may open the devices of
  // the GPUs its stages get in CUDA_VISIBLE_DEVICES (from the stage that
  // last set it), none before, and its stages get those GPUs' UUIDs there
  // instead of their indices.
  std::map<uint32_t, ConfinedGpu> gpu_devices;
  // With `cgroups` that can guard ports (CgroupTree::CheckPortGuard): the
  // coordinator's master_port_range as last learnt, {min, max} ({0, 0}:
  // not yet known). A member's cgroup may bind no port in it but the
  // master port its gang was leased, and that only as rank 0 (from the
  // stage that last set GDT_MASTER_PORT); null = binds are not guarded.
  std::function<std::pair<uint32_t, uint32_t>()> master_port_range;
  // With `master_port_range`: whether members' connections and UDP sends
  // to it are guarded too (CgroupTree::CheckConnectGuard passed), letting
  // a member reach no port of it but its gang's master.
  bool guard_connections = true;
  // SetupMember() accepts builds dirs only strictly under this directory
  // and extra dirs only under it or `cache_root`; empty = any absolute path.
  std::string builds_root;
  std::string cache_root;
  // With `exclusive_accounts`: what an account left outside the member's
  // directories is removed when its member is torn down (and for every
  // account when the agent starts), see PurgeAccountLeftovers(). The
  // builds, cache and scratch roots are always kept.
  PurgeOptions purge;
  // With `exclusive_accounts`: the shared directories in which what a
  // member's account owns counts towards its disk use (MemberDiskScopes).
  std::vector<std::string> disk_roots = {"/dev/shm", "/tmp", "/var/tmp"};
};

// Supervises the members placed on this host: their directories and the
// stages they run. A member is known from SetupMember() or its first stage
// until TeardownMember(); each has a scratch dir
// `<scratch_root>/<escaped member id>` holding its stage scripts and files.
//
// Thread-safe. Stages call back into the supervisor, so it must outlive
// them: the destructor calls Shutdown().
class Supervisor {
 public:
  // `base_env` is the environment every stage starts from.
  Supervisor(std::string scratch_root, std::chrono::seconds default_kill_grace,
             std::map<std::string, std::string> base_env,
             IsolationOptions isolation = {});
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Creates `builds_dir` and `extra_dirs` (with parents, mode 0755) and the
  // member's scratch dir, and remembers `builds_dir` for TeardownMember()
  // when this call created it. With a member account, the builds and scratch
  // dirs belong to it. Idempotent. Errors: InvalidArgument for an empty
  // member id, a path that is not absolute, outside the builds root (see
  // IsolationOptions) or another member's; ResourceExhausted when every
  // pooled account is taken; PermissionDenied or Internal naming the path
  // that could not be created.
  absl::Status SetupMember(const std::string& member_id,
                           const std::string& builds_dir,
                           const std::vector<std::string>& extra_dirs);

  // Writes the script and files into the member's scratch dir and starts the
  // stage, reporting to `observer` (which must outlive the stage's OnExit).
  // Unknown members are fine: the scratch dir is created on demand.
  // Errors: InvalidArgument for a bad member id, file name or working dir;
  // Unavailable once Shutdown() began; Internal when a file cannot be
  // written or the script cannot be spawned.
  absl::StatusOr<std::shared_ptr<Stage>> StartStage(const StageRequest& request,
                                                    StageObserver* observer);

  // Terminates every running stage of the member (SIGTERM, its grace,
  // SIGKILL), kills whatever is left in its cgroup and waits until that is
  // empty, removes its scratch dir and, when `remove_builds_dir`, the
  // builds dir SetupMember() created (nothing else). Returns how many
  // process groups (and, with cgroups, stray processes) were still alive.
  // Idempotent; unknown members are fine. Errors: DeadlineExceeded if a stage
  // outlived its grace by far; Internal naming a directory that could not be
  // removed.
  absl::StatusOr<uint32_t> TeardownMember(const std::string& member_id,
                                          bool remove_builds_dir);

  // TeardownMember for a member that no executor will tear down (its gang
  // let it go): only while it runs no stage, and no stage may start for it
  // until the teardown is over (SetupMember and StartStage answer
  // FailedPrecondition).
  // Errors: FailedPrecondition while a stage of it runs (nothing is done);
  // else as TeardownMember. The builds dir is kept, handed to root (mode
  // 0700) when the member ran as a member account.
  absl::StatusOr<uint32_t> TeardownIdleMember(const std::string& member_id);

  // Where each known member's files are, for DiskWatch: its builds dir
  // (as claimed) and scratch dir and, with a pooled account, what that
  // account owns in IsolationOptions::disk_roots.
  std::vector<DiskWatch::Member> MemberDiskScopes() const;

  // Stops the member without tearing it down: each running stage is
  // killed and ends its output with `line` (Stage::StopWith), and whatever
  // else runs in its cgroup is killed. Its directories stay, and later
  // stages may start. Returns how much was stopped: the processes that
  // were in its cgroup, or its running stages where that is more (0 =
  // nothing ran). Errors: DeadlineExceeded when its cgroup is not empty in
  // time.
  absl::StatusOr<uint32_t> StopMember(const std::string& member_id,
                                      const std::string& line);

  // Refuses new stages from now on, terminates every running stage and
  // returns once all have finished.
  void Shutdown();

  // The member's scratch dir (it may not exist yet).
  std::string ScratchDir(const std::string& member_id) const;

  // Number of stages still running.
  size_t running_stages() const;

  // Records a process group this agent started (a stage's or a gdt-rsh
  // command's) on disk in `<scratch_root>/.process-groups` (member dirs
  // never start with '.'), so a successor can end it if this agent dies;
  // a group that already ended is not recorded. Failures are logged, never
  // fatal: the group runs either way. Forget it once it is gone.
  void RecordProcessGroup(pid_t pgid) const;
  void ForgetProcessGroup(pid_t pgid) const { ledger_.Forget(pgid); }

  // Space set aside on the scratch dir's file system (DiskReserve), for
  // what the agent must write there when a job filled it.
  DiskReserve& disk_reserve() { return reserve_; }

  // Ends the process groups a previous agent on this scratch root left
  // running (ProcessLedger::ReapLeftovers with the default kill grace).
  // Call before serving.
  std::vector<ProcessLedger::Reaped> ReapLeftovers();

  // Gdt-rsh.
  // Adds `key=value` to the environment of every stage started from now on
  // (the daemon sets GDT_AGENT_ENDPOINT once its port is known).
  void AddStageVariable(const std::string& key, const std::string& value);

  // The environment and working dir of a member of `gang_id` running here
  // (a stage whose env has GDT_GANG_ID = gang_id is running), for a command
  // gdt-rsh asks to run in it. `token` must equal that stage's
  // GDT_KV_TOKEN (compared in constant time).
  // Errors: PermissionDenied, one answer of one shape whether the gang has
  // no member here or the token is wrong, so that a caller without the
  // gang's token learns nothing about which gangs run here;
  // FailedPrecondition when the token is the gang's but its member here
  // runs no stage now (only the token's holder hears that).
  struct ExecContext {
    std::string member_id;
    std::map<std::string, std::string> env;
    std::string working_dir;
    // How to spawn into the member: its account and cgroup.
    std::optional<SpawnOptions::Credentials> credentials;
    std::string cgroup_procs;
  };
  absl::StatusOr<ExecContext> FindExecContext(const std::string& gang_id,
                                              const std::string& token) const;
  // Whether the member still runs a stage.
  bool MemberRunning(const std::string& member_id) const;
  // The members that run a stage now or started one since the previous
  // call, by id: what each heartbeat tells the coordinator this host holds.
  // A stage shorter than the heartbeat interval is reported too, so a member
  // whose stages are all short is never taken for gone between heartbeats.
  std::vector<std::string> RunningMembers();
  // The members known here (set up or started a stage, not torn down) that
  // run no stage now, by id: what the heartbeat asks the coordinator about
  // (have they left their gang?).
  std::vector<std::string> IdleMembers() const;
  // The progress of every running stage that has a hang watchdog, by
  // member id: what the heartbeat tells the coordinator so that it can name
  // the member of a hung gang that stopped first.
  struct WatchedStage {
    std::string member_id;
    StageProgress progress;
  };
  std::vector<WatchedStage> WatchedProgress() const;

 private:
  struct Member {
    // As given to SetupMember when that call created it; empty if none.
    std::string builds_dir;
    std::string claimed_builds_dir;  // As given, created or not.
    int account = -1;    // Index into isolation_.accounts; -1 = none yet.
    std::string cgroup;  // Its directory; empty = none.
    // The CUDA_VISIBLE_DEVICES its cgroup's devices were last allowed for.
    std::optional<std::string> allowed_gpus;
    // What its cgroup's port programs allow of the master port range
    // (which port it may bind, and which it may connect to at which
    // addresses); unset = no programs yet.
    std::optional<PortGuard> port_guard;
    int stages_started = 0;
    std::map<Stage*, std::weak_ptr<Stage>> running;
    // A stage started since RunningMembers() last reported.
    bool started_since_report = false;
    // The last started stage that belongs to a gang (its env has
    // GDT_GANG_ID and GDT_KV_TOKEN): what gdt-rsh commands run in.
    std::map<std::string, std::string> gang_env;
    std::string gang_working_dir;
    // TeardownIdleMember() runs: no stage may start.
    bool closing = false;
  };

  void StageFinished(const std::string& member_id, Stage* stage);
  // Purges what a pooled account left behind, once no member holds it;
  // `member_id` is empty at start-up. Logs one line.
  void PurgeAccount(const MemberAccount& account,
                    const std::string& member_id) const;
  // Where the member's hang evidence is collected: the agent's, not the
  // job's. Removed at teardown.
  std::filesystem::path EvidenceDir(const std::string& member_id) const;
  // Lets the member's cgroup open the devices of the GPUs in the stage's
  // CUDA_VISIBLE_DEVICES (when it sets one that differs from before) and
  // sets `visible` to those GPUs' UUIDs, which the stage gets there; leaves
  // `visible` alone when GPUs are not confined or the stage names none.
  absl::Status AllowGpus(const StageRequest& request, Member& member,
                         std::optional<std::string>& visible) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Lets the member's cgroup bind, of the master port range, only its
  // gang's master port when the stage is rank 0's, no port of it else; and
  // connect (or send) to no port of it but its gang's master port at
  // `master_addresses` (MasterAddresses() of the stage's GDT_MASTER_ADDR;
  // without it, or when the name did not resolve, at any address). A stage
  // without GDT_MASTER_PORT keeps what was allowed before.
  absl::Status GuardMasterPorts(
      const StageRequest& request, Member& member,
      const std::optional<absl::StatusOr<std::vector<IpPrefix>>>&
          master_addresses) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Picks the member's account (once) and creates its cgroup (once).
  absl::Status PlaceMember(const std::string& member_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The member's credentials; nullopt without member accounts.
  std::optional<SpawnOptions::Credentials> CredentialsOf(
      const Member& member) const;
  // Creates `dir` (mode 0700, so other users cannot read the job's sources,
  // scripts and files) and hands it to the member's account.
  absl::Status MakeMemberDir(
      const std::string& dir,
      const std::optional<SpawnOptions::Credentials>& credentials) const;
  // Checks that `builds_dir` is under the builds root and no other
  // member's.
  // Makes `dir` root's, mode 0700 (logged; a failure is only logged).
  void SealDir(const std::string& member_id, const std::string& dir) const;
  absl::Status CheckBuildsDir(const std::string& member_id,
                              const std::string& builds_dir)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Running stages of one member, or of all members when `member_id` is
  // null.
  std::vector<std::shared_ptr<Stage>> RunningStages(
      const std::string* member_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string scratch_root_;
  const std::chrono::seconds default_kill_grace_;
  const std::map<std::string, std::string> base_env_;
  const ProcessLedger ledger_;
  DiskReserve reserve_;  // Under scratch_root_.
  const IsolationOptions isolation_;

  mutable Mutex mu_;
  CondVar stage_finished_;
  std::map<std::string, Member> members_ ABSL_GUARDED_BY(mu_);
  size_t running_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, std::string> extra_env_ ABSL_GUARDED_BY(mu_);
};

// Escapes a member id into one path component: [A-Za-z0-9_-] and inner
// dots stay, every other byte becomes %XX, so distinct ids never collide.
std::string EscapePathComponent(const std::string& text);

}  // namespace gdt::agent

#endif  // GDT_AGENT_SUPERVISOR_H_
