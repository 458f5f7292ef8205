#include "agent/supervisor.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace gdt::agent {
namespace {

namespace fs = std::filesystem;
using std::chrono::steady_clock;

// How much longer than its grace a terminated stage may take before
// teardown gives up on it; covers the supervising thread's reaction time.
constexpr std::chrono::seconds kTeardownSlack(5);

absl::Status ErrorForPath(const std::string& what, const std::string& path,
                          const std::error_code& error) {
  const std::string message =
      absl::StrCat("cannot ", what, " ", path, ": ", error.message());
  if (error == std::errc::permission_denied ||
      error == std::errc::operation_not_permitted) {
    return absl::PermissionDeniedError(message);
  }
  return absl::InternalError(message);
}

absl::Status CheckAbsolute(const std::string& what, const std::string& path) {
  if (path.empty() || path[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be an absolute path, got '", path, "'"));
  }
  return absl::OkStatus();
}

// mkdir -p; like `mkdir -p -m 0755`, a directory it creates gets mode 0755
// whatever the umask, and an existing one keeps its mode.
absl::Status MakeDirs(const std::string& path) {
  std::error_code error;
  const bool created = fs::create_directories(path, error);
  if (error) return ErrorForPath("create directory", path, error);
  if (created) {
    fs::permissions(path, static_cast<fs::perms>(0755), error);
    if (error) return ErrorForPath("set the mode of", path, error);
  }
  return absl::OkStatus();
}

// Writes `content` to `path` (replacing it) with permissions `mode`, owned
// by `owner` when set. The directory may belong to a member: an existing
// entry is unlinked first and the file created afresh without following
// links, so a planted link cannot redirect the agent's write.
absl::Status WriteFileOnce(
    const std::string& path, std::string_view content, mode_t mode,
    const std::optional<SpawnOptions::Credentials>& owner) {
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return ErrorForPath("replace", path,
                        std::error_code(errno, std::generic_category()));
  }
  const int fd = open(
      path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) {
    return ErrorForPath("write", path,
                        std::error_code(errno, std::generic_category()));
  }
  size_t written = 0;
  while (written < content.size()) {
    const ssize_t n =
        write(fd, content.data() + written, content.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::error_code error(errno, std::generic_category());
      close(fd);
      return ErrorForPath("write", path, error);
    }
    written += static_cast<size_t>(n);
  }
  // open() applies the umask; the mode is part of the contract.
  fchmod(fd, mode);
  if (owner.has_value() && fchown(fd, owner->uid, owner->gid) != 0) {
    const std::error_code error(errno, std::generic_category());
    close(fd);
    return ErrorForPath("hand over", path, error);
  }
  if (close(fd) != 0) {
    return ErrorForPath("write", path,
                        std::error_code(errno, std::generic_category()));
  }
  return absl::OkStatus();
}

// WriteFileOnce(), and when the file system is full (a job filled it),
// once more in space the agent set aside (`reserve`), so that a stage of
// another member still starts.
absl::Status WriteFile(const std::string& path, std::string_view content,
                       mode_t mode,
                       const std::optional<SpawnOptions::Credentials>& owner,
                       DiskReserve& reserve) {
  absl::Status written = WriteFileOnce(path, content, mode, owner);
  if (written.ok() || !IsNoSpace(written)) return written;
  unlink(path.c_str());
  std::optional<std::pair<uid_t, gid_t>> ids;
  if (owner.has_value()) ids = std::make_pair(owner->uid, owner->gid);
  absl::Status reserved = reserve.WriteFrom(path, content, mode, ids);
  if (!reserved.ok()) {
    return absl::Status(written.code(), absl::StrCat(written.message(), " (",
                                                     reserved.message(), ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckFileName(const StageFileSpec& file) {
  if (file.name.empty() || file.name == "." || file.name == ".." ||
      file.name.find('/') != std::string::npos ||
      file.name.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stage file name must be a plain file name, got '", file.name, "'"));
  }
  if (file.env_var.empty() || file.env_var.find('=') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stage file ", file.name, " needs an env_var name without '='"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string EscapePathComponent(const std::string& text) {
  std::string escaped;
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                       (c >= '0' && c <= '9') || c == '_' || c == '-' ||
                       (c == '.' && i > 0);
    if (plain) {
      escaped.push_back(static_cast<char>(c));
    } else {
      absl::StrAppendFormat(&escaped, "%%%02X", c);
    }
  }
  return escaped;
}

Supervisor::Supervisor(std::string scratch_root,
                       std::chrono::seconds default_kill_grace,
                       std::map<std::string, std::string> base_env,
                       IsolationOptions isolation)
    : scratch_root_(std::move(scratch_root)),
      default_kill_grace_(default_kill_grace),
      base_env_(std::move(base_env)),
      ledger_((fs::path(scratch_root_) / ".process-groups").string()),
      reserve_((fs::path(scratch_root_) / ".disk-reserve").string()),
      isolation_(std::move(isolation)) {}

Supervisor::~Supervisor() { Shutdown(); }

void Supervisor::RecordProcessGroup(pid_t pgid) const {
  absl::Status recorded = ledger_.Record(pgid);
  if (!recorded.ok() && !absl::IsNotFound(recorded)) {
    spdlog::warn("event=process_group_record_failed pgid={} error={}", pgid,
                 LogValue(std::string(recorded.message())));
  }
}

std::vector<ProcessLedger::Reaped> Supervisor::ReapLeftovers() {
  std::vector<ProcessLedger::Reaped> reaped =
      ledger_.ReapLeftovers(default_kill_grace_);
  // Member cgroups a dead agent left behind: whatever is still in them
  // escaped its process group and runs for nobody.
  if (isolation_.cgroups != nullptr) {
    for (const std::string& name : isolation_.cgroups->Children()) {
      absl::StatusOr<size_t> killed = isolation_.cgroups->Destroy(
          name, steady_clock::now() + default_kill_grace_ + kTeardownSlack);
      if (!killed.ok()) {
        spdlog::warn("event=leftover_cgroup_failed cgroup={} error={}",
                     LogValue(isolation_.cgroups->PathOf(name)),
                     LogValue(killed.status().ToString()));
      } else if (*killed > 0) {
        spdlog::warn("event=leftover_cgroup_ended cgroup={} processes={}",
                     LogValue(isolation_.cgroups->PathOf(name)), *killed);
      }
    }
  }
  // No member holds a pooled account yet: what a previous agent's members
  // left is no one's now.
  if (isolation_.exclusive_accounts) {
    for (const MemberAccount& account : isolation_.accounts) {
      PurgeAccount(account, "");
    }
  }
  reserve_.Refill();
  return reaped;
}

void Supervisor::PurgeAccount(const MemberAccount& account,
                              const std::string& member_id) const {
  PurgeOptions options = isolation_.purge;
  for (const std::string& root :
       {isolation_.builds_root, isolation_.cache_root, scratch_root_}) {
    if (!root.empty()) options.keep.push_back(root);
  }
  absl::StatusOr<PurgeCounts> purged =
      PurgeAccountLeftovers(account.uid, account.gid, options);
  const std::string member = member_id.empty() ? "-" : member_id;
  if (!purged.ok()) {
    spdlog::warn("event=member_account_purge_failed member={} uid={} error={}",
                 LogValue(member), account.uid,
                 LogValue(purged.status().ToString()));
    return;
  }
  if (purged->live_processes > 0) {
    spdlog::warn(
        "event=member_account_purge_skipped member={} uid={} processes={} "
        "reason={}",
        LogValue(member), account.uid, purged->live_processes,
        LogValue("processes of this account still run outside the member's "
                 "cgroup (another agent using the same accounts, or cgroups "
                 "off); its files and IPC objects stay"));
    return;
  }
  const bool any = purged->files + purged->dirs + purged->shm + purged->sem +
                       purged->msg + purged->mounts + purged->failed >
                   0;
  if (!any && !purged->truncated && !purged->incomplete && member_id.empty()) {
    return;
  }
  spdlog::info(
      "event=member_account_purged member={} uid={} files={} dirs={} shm={} "
      "sem={} msg={} mounts={} failed={} truncated={} incomplete={} error={}",
      LogValue(member), account.uid, purged->files, purged->dirs, purged->shm,
      purged->sem, purged->msg, purged->mounts, purged->failed,
      purged->truncated, purged->incomplete, LogValue(purged->error));
}

absl::Status Supervisor::PlaceMember(const std::string& member_id) {
  Member& member = members_[member_id];
  if (member.account < 0 && !isolation_.accounts.empty()) {
    if (!isolation_.exclusive_accounts) {
      member.account = 0;
    } else {
      std::vector<bool> taken(isolation_.accounts.size(), false);
      for (const auto& [id, other] : members_) {
        if (other.account >= 0)
          taken[static_cast<size_t>(other.account)] = true;
      }
      for (size_t i = 0; i < taken.size() && member.account < 0; ++i) {
        if (!taken[i]) member.account = static_cast<int>(i);
      }
      if (member.account < 0) {
        return absl::ResourceExhaustedError(
            absl::StrCat("all ", taken.size(),
                         " member accounts (member_uid_pool) are "
                         "taken by other members: member ",
                         member_id, " cannot start"));
      }
    }
  }
  if (member.cgroup.empty() && isolation_.cgroups != nullptr) {
    absl::StatusOr<std::string> dir =
        isolation_.cgroups->Create(EscapePathComponent(member_id));
    if (!dir.ok()) return dir.status();
    member.cgroup = *dir;
  }
  return absl::OkStatus();
}

absl::Status Supervisor::AllowGpus(const StageRequest& request, Member& member,
                                   std::optional<std::string>& visible) const {
  if (isolation_.gpu_devices.empty() || member.cgroup.empty()) {
    return absl::OkStatus();
  }
  // A stage without the variable (none of gdt-executor's) changes nothing.
  auto given = request.env.find("CUDA_VISIBLE_DEVICES");
  if (given == request.env.end()) return absl::OkStatus();
  std::vector<DeviceNumber> allowed;
  std::vector<std::string> uuids;
  for (const absl::string_view item :
       absl::StrSplit(given->second, ',', absl::SkipWhitespace())) {
    uint32_t index = 0;
    auto gpu = absl::SimpleAtoi(item, &index)
                   ? isolation_.gpu_devices.find(index)
                   : isolation_.gpu_devices.end();
    // Anything else names no GPU of this host: nothing is allowed for it,
    // and CUDA finds no such device.
    if (gpu == isolation_.gpu_devices.end()) {
      uuids.emplace_back(item);
      continue;
    }
    allowed.push_back(gpu->second.device);
    uuids.push_back(gpu->second.uuid);
  }
  visible = absl::StrJoin(uuids, ",");
  if (member.allowed_gpus == given->second) return absl::OkStatus();
  if (absl::Status done = isolation_.cgroups->AllowDevices(
          EscapePathComponent(request.member_id), allowed);
      !done.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot confine member ", request.member_id,
                     " to its GPUs (CUDA_VISIBLE_DEVICES=", given->second,
                     "): ", done.message()));
  }
  member.allowed_gpus = given->second;
  return absl::OkStatus();
}

absl::Status Supervisor::GuardMasterPorts(
    const StageRequest& request, Member& member,
    const std::optional<absl::StatusOr<std::vector<IpPrefix>>>&
        master_addresses) const {
  if (!isolation_.master_port_range || member.cgroup.empty()) {
    return absl::OkStatus();
  }
  const auto [min, max] = isolation_.master_port_range();
  // Not registered yet, or a coordinator that does not say.
  if (min == 0 || min > max || max > 65535) return absl::OkStatus();
  PortGuard guard;
  guard.range = {static_cast<uint16_t>(min), static_cast<uint16_t>(max)};
  guard.connections = isolation_.guard_connections;
  uint32_t port = 0;
  if (auto given = request.env.find("GDT_MASTER_PORT");
      given != request.env.end()) {
    guard.bind = static_cast<uint16_t>(MasterPortOfRankZero(request.env));
    if (absl::SimpleAtoi(given->second, &port) && port <= 65535) {
      guard.connect = static_cast<uint16_t>(port);
    }
    if (master_addresses.has_value() && master_addresses->ok()) {
      guard.connect_to = **master_addresses;
    } else if (master_addresses.has_value()) {
      spdlog::warn(
          "event=master_connect_guard_by_port member={} port={} reason={}",
          LogValue(request.member_id), port,
          LogValue(absl::StrCat(
              master_addresses->status().message(),
              ": the member may reach its master port at any address")));
    }
  } else if (member.port_guard.has_value()) {
    guard.bind = member.port_guard->bind;
    guard.connect = member.port_guard->connect;
    guard.connect_to = member.port_guard->connect_to;
  }
  if (member.port_guard == guard) return absl::OkStatus();
  if (absl::Status done = isolation_.cgroups->GuardPorts(
          EscapePathComponent(request.member_id), guard);
      !done.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot keep member ", request.member_id,
                     " off the master ports of other gangs (", min, "..", max,
                     "): ", done.message()));
  }
  member.port_guard = std::move(guard);
  return absl::OkStatus();
}

std::optional<SpawnOptions::Credentials> Supervisor::CredentialsOf(
    const Member& member) const {
  if (member.account < 0) return std::nullopt;
  const MemberAccount& account =
      isolation_.accounts[static_cast<size_t>(member.account)];
  return SpawnOptions::Credentials{account.uid, account.gid, account.groups};
}

absl::Status Supervisor::MakeMemberDir(
    const std::string& dir,
    const std::optional<SpawnOptions::Credentials>& credentials) const {
  if (absl::Status parents = MakeDirs(fs::path(dir).parent_path().string());
      !parents.ok()) {
    return absl::Status(
        parents.code(),
        absl::StrCat("cannot create directory ", dir, ": ", parents.message()));
  }
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return ErrorForPath("create directory", dir,
                        std::error_code(errno, std::generic_category()));
  }
  // Through a descriptor opened without following a link: the parent may
  // be the member's, and a link it planted must not get the mode or owner.
  const int fd =
      open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    return ErrorForPath("open directory", dir,
                        std::error_code(errno, std::generic_category()));
  }
  int failed = fchmod(fd, 0700);
  if (failed == 0 && credentials.has_value()) {
    failed = fchown(fd, credentials->uid, credentials->gid);
  }
  const std::error_code error(failed != 0 ? errno : 0, std::generic_category());
  close(fd);
  if (failed != 0) return ErrorForPath("hand over", dir, error);
  return absl::OkStatus();
}

void Supervisor::SealDir(const std::string& member_id,
                         const std::string& dir) const {
  // Without following a link: the parent may be the member's.
  const int fd =
      open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno != ENOENT) {
      spdlog::warn(
          "event=builds_dir_seal_failed member={} builds_dir={} "
          "error={}",
          LogValue(member_id), LogValue(dir), LogValue(std::strerror(errno)));
    }
    return;
  }
  if (fchown(fd, 0, 0) != 0 || fchmod(fd, 0700) != 0) {
    spdlog::warn(
        "event=builds_dir_seal_failed member={} builds_dir={} "
        "error={}",
        LogValue(member_id), LogValue(dir), LogValue(std::strerror(errno)));
  } else {
    spdlog::info("event=builds_dir_sealed member={} builds_dir={}",
                 LogValue(member_id), LogValue(dir));
  }
  close(fd);
}

absl::Status Supervisor::CheckBuildsDir(const std::string& member_id,
                                        const std::string& builds_dir) {
  const fs::path wanted = fs::path(builds_dir).lexically_normal();
  // Strictly inside `root`, by path components after normalisation: no
  // "..", and not the root itself.
  auto inside = [&](const std::string& root) {
    if (root.empty()) return true;
    const fs::path base = fs::path(root).lexically_normal();
    const fs::path relative = wanted.lexically_relative(base);
    return !relative.empty() && *relative.begin() != ".." && relative != ".";
  };
  if (!inside(isolation_.builds_root)) {
    return absl::InvalidArgumentError(
        absl::StrCat("builds_dir ", builds_dir, " is not under this agent's ",
                     "builds_root ", isolation_.builds_root));
  }
  for (const auto& [id, other] : members_) {
    if (id == member_id || other.claimed_builds_dir.empty()) continue;
    const fs::path theirs =
        fs::path(other.claimed_builds_dir).lexically_normal();
    const fs::path down = wanted.lexically_relative(theirs);
    const fs::path up = theirs.lexically_relative(wanted);
    if ((!down.empty() && *down.begin() != "..") ||
        (!up.empty() && *up.begin() != "..")) {
      return absl::InvalidArgumentError(
          absl::StrCat("builds_dir ", builds_dir,
                       " overlaps the builds dir of another member"));
    }
  }
  // A symbolic link on the way could lead outside the root: the resolved
  // path must still be under the resolved root (which may itself be a
  // link, e.g. /var/lib on another disk).
  std::error_code error;
  const fs::path resolved = fs::weakly_canonical(wanted, error);
  const fs::path resolved_root =
      isolation_.builds_root.empty()
          ? fs::path()
          : fs::weakly_canonical(isolation_.builds_root, error);
  if (!error && !resolved_root.empty()) {
    const fs::path relative = resolved.lexically_relative(resolved_root);
    if (relative.empty() || *relative.begin() == ".." || relative == ".") {
      return absl::InvalidArgumentError(
          absl::StrCat("builds_dir ", builds_dir,
                       " leads outside builds_root through a symbolic link"));
    }
  }
  return absl::OkStatus();
}

std::filesystem::path Supervisor::EvidenceDir(
    const std::string& member_id) const {
  return fs::path(scratch_root_) / ".evidence" / EscapePathComponent(member_id);
}

std::string Supervisor::ScratchDir(const std::string& member_id) const {
  return (fs::path(scratch_root_) / EscapePathComponent(member_id)).string();
}

absl::Status Supervisor::SetupMember(
    const std::string& member_id, const std::string& builds_dir,
    const std::vector<std::string>& extra_dirs) {
  if (member_id.empty()) {
    return absl::InvalidArgumentError("member_id must not be empty");
  }
  reserve_.Refill();
  if (!builds_dir.empty()) {
    GDT_RETURN_IF_ERROR(CheckAbsolute("builds_dir", builds_dir));
    if (fs::path(builds_dir).lexically_normal() == "/") {
      return absl::InvalidArgumentError("builds_dir must not be /");
    }
  }
  for (const std::string& dir : extra_dirs) {
    GDT_RETURN_IF_ERROR(CheckAbsolute("extra_dirs entry", dir));
    const fs::path wanted = fs::path(dir).lexically_normal();
    bool allowed = isolation_.builds_root.empty();
    for (const std::string& root :
         {isolation_.builds_root, isolation_.cache_root}) {
      if (root.empty()) continue;
      const fs::path relative =
          wanted.lexically_relative(fs::path(root).lexically_normal());
      if (!relative.empty() && *relative.begin() != "..") allowed = true;
    }
    if (!allowed) {
      return absl::InvalidArgumentError(absl::StrCat(
          "extra_dirs entry ", dir,
          " is under neither this agent's builds_root ", isolation_.builds_root,
          " nor its cache_root ", isolation_.cache_root));
    }
  }
  // Held throughout: two calls must not both claim one builds dir.
  MutexLock lock(mu_);
  if (auto closing = members_.find(member_id);
      closing != members_.end() && closing->second.closing) {
    return absl::FailedPreconditionError(absl::StrCat(
        "member ", member_id, " is being torn down: its gang let it go"));
  }
  if (!builds_dir.empty()) {
    GDT_RETURN_IF_ERROR(CheckBuildsDir(member_id, builds_dir));
  }
  GDT_RETURN_IF_ERROR(PlaceMember(member_id));
  Member& member = members_[member_id];
  const std::optional<SpawnOptions::Credentials> credentials =
      CredentialsOf(member);
  if (!builds_dir.empty()) {
    std::error_code error;
    const bool existed = fs::exists(builds_dir, error);
    if (existed && member.builds_dir != builds_dir) {
      // Not made by this agent for this member: usable, never removed.
      spdlog::warn("event=builds_dir_exists member={} builds_dir={} reason={}",
                   LogValue(member_id), LogValue(builds_dir),
                   LogValue("not created by this agent; teardown keeps it"));
    }
    GDT_RETURN_IF_ERROR(MakeMemberDir(builds_dir, credentials));
    if (!existed) member.builds_dir = builds_dir;
    member.claimed_builds_dir = builds_dir;
  }
  for (const std::string& dir : extra_dirs) GDT_RETURN_IF_ERROR(MakeDirs(dir));
  GDT_RETURN_IF_ERROR(MakeMemberDir(ScratchDir(member_id), credentials));
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Stage>> Supervisor::StartStage(
    const StageRequest& request, StageObserver* observer) {
  if (request.member_id.empty()) {
    return absl::InvalidArgumentError("member_id must not be empty");
  }
  if (!request.working_dir.empty()) {
    GDT_RETURN_IF_ERROR(CheckAbsolute("working_dir", request.working_dir));
  }
  for (const StageFileSpec& file : request.files) {
    GDT_RETURN_IF_ERROR(CheckFileName(file));
  }
  int number = 0;
  std::map<std::string, std::string> extra_env;
  std::optional<SpawnOptions::Credentials> credentials;
  std::string account_name;
  std::string cgroup;
  std::optional<std::string> visible_gpus;  // UUIDs of confined GPUs.
  // Resolved before the lock is taken: a name may keep the resolver a while.
  std::optional<absl::StatusOr<std::vector<IpPrefix>>> master_addresses;
  if (auto addr = request.env.find("GDT_MASTER_ADDR");
      isolation_.master_port_range && addr != request.env.end() &&
      request.env.contains("GDT_MASTER_PORT")) {
    master_addresses = MasterAddresses(addr->second);
  }
  {
    MutexLock lock(mu_);
    if (shutting_down_) {
      return absl::UnavailableError("the agent is shutting down");
    }
    if (auto closing = members_.find(request.member_id);
        closing != members_.end() && closing->second.closing) {
      return absl::FailedPreconditionError(
          absl::StrCat("member ", request.member_id,
                       " is being torn down: its gang let it go"));
    }
    GDT_RETURN_IF_ERROR(PlaceMember(request.member_id));
    Member& member = members_[request.member_id];
    GDT_RETURN_IF_ERROR(AllowGpus(request, member, visible_gpus));
    GDT_RETURN_IF_ERROR(GuardMasterPorts(request, member, master_addresses));
    number = ++member.stages_started;
    extra_env = extra_env_;
    credentials = CredentialsOf(member);
    if (member.account >= 0) {
      account_name =
          isolation_.accounts[static_cast<size_t>(member.account)].name;
    }
    cgroup = member.cgroup;
  }

  const std::string scratch = ScratchDir(request.member_id);
  GDT_RETURN_IF_ERROR(MakeMemberDir(scratch, credentials));
  const std::string tmp = (fs::path(scratch) / "tmp").string();
  GDT_RETURN_IF_ERROR(MakeMemberDir(tmp, credentials));
  const std::string stage_name =
      request.stage.empty() ? "stage" : EscapePathComponent(request.stage);
  StageOptions options;
  options.credentials = credentials;
  if (!cgroup.empty()) options.cgroup_procs = cgroup + "/cgroup.procs";
  options.script_path =
      (fs::path(scratch) / absl::StrCat(stage_name, "-", number, ".sh"))
          .string();
  GDT_RETURN_IF_ERROR(WriteFile(options.script_path, request.script, 0700,
                                credentials, reserve_));
  options.env = base_env_;
  // The member's own temporary dir; with a member account also its home,
  // since the agent's is not the member's to write.
  options.env["TMPDIR"] = tmp;
  if (credentials.has_value()) {
    options.env["HOME"] = scratch;
    options.env["USER"] = options.env["LOGNAME"] = account_name;
  }
  for (const auto& [key, value] : extra_env) options.env[key] = value;
  for (const auto& [key, value] : request.env) options.env[key] = value;
  if (visible_gpus.has_value()) {
    options.env["CUDA_VISIBLE_DEVICES"] = *visible_gpus;
  }
  for (const StageFileSpec& file : request.files) {
    const std::string path = (fs::path(scratch) / file.name).string();
    GDT_RETURN_IF_ERROR(
        WriteFile(path, file.content, 0644, credentials, reserve_));
    options.env[file.env_var] = path;
  }
  options.working_dir =
      request.working_dir.empty() ? scratch : request.working_dir;
  if (!request.working_dir.empty()) {
    if (!isolation_.builds_root.empty()) {
      const fs::path relative =
          fs::path(request.working_dir)
              .lexically_normal()
              .lexically_relative(
                  fs::path(isolation_.builds_root).lexically_normal());
      if (relative.empty() || *relative.begin() == "..") {
        return absl::InvalidArgumentError(absl::StrCat(
            "working_dir ", request.working_dir, " is not under this agent's ",
            "builds_root ", isolation_.builds_root));
      }
    }
    GDT_RETURN_IF_ERROR(MakeDirs(request.working_dir));
  }
  options.kill_grace =
      request.kill_grace.count() > 0 ? request.kill_grace : default_kill_grace_;
  if (!request.evidence_dir.empty()) {
    GDT_RETURN_IF_ERROR(CheckAbsolute("evidence_dir", request.evidence_dir));
  }
  // Evidence is written where only the agent writes; a directory the job
  // named (its project dir, to keep it as an artifact) gets a copy made
  // with the member's own rights, so a link planted there leads nowhere
  // the member could not write anyway.
  options.evidence_dir =
      (EvidenceDir(request.member_id) / absl::StrCat(stage_name, "-", number))
          .string();
  options.evidence_copy_to = request.evidence_dir;
  options.teardown_timeout = request.teardown_timeout;
  if (request.hang_timeout.count() > 0) {
    options.hang_timeout = request.hang_timeout;
    options.progress_file =
        (fs::path(scratch) / absl::StrCat("progress-", stage_name, "-", number))
            .string();
    GDT_RETURN_IF_ERROR(
        WriteFile(options.progress_file, "", 0644, credentials, reserve_));
    options.env["GDT_PROGRESS_FILE"] = options.progress_file;
  }

  // The lock is held until the stage is recorded, so StageFinished() always
  // finds it even when the script exits at once.
  MutexLock lock(mu_);
  if (shutting_down_) {
    return absl::UnavailableError("the agent is shutting down");
  }
  const std::string member_id = request.member_id;
  absl::StatusOr<std::shared_ptr<Stage>> stage = Stage::Start(
      options, observer,
      [this, member_id](Stage* done) { StageFinished(member_id, done); });
  if (!stage.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot start stage ", request.stage, " of member ",
                     member_id, ": ", stage.status().message()));
  }
  members_[member_id].running[stage->get()] = *stage;
  members_[member_id].started_since_report = true;
  RecordProcessGroup((*stage)->process_group());
  if (options.env.count("GDT_GANG_ID") != 0 &&
      options.env.count("GDT_KV_TOKEN") != 0) {
    members_[member_id].gang_env = options.env;
    members_[member_id].gang_working_dir = options.working_dir;
  }
  ++running_;
  spdlog::info("event=stage_started member={} stage={} pgid={}",
               LogValue(member_id), LogValue(request.stage),
               (*stage)->process_group());
  return stage;
}

void Supervisor::StageFinished(const std::string& member_id, Stage* stage) {
  MutexLock lock(mu_);
  // Under the lock: StartStage() records the group while holding it.
  ledger_.Forget(stage->process_group());
  auto member = members_.find(member_id);
  if (member != members_.end()) member->second.running.erase(stage);
  --running_;
  stage_finished_.NotifyAll();
}

std::vector<std::shared_ptr<Stage>> Supervisor::RunningStages(
    const std::string* member_id) {
  std::vector<std::shared_ptr<Stage>> stages;
  for (auto& [id, member] : members_) {
    if (member_id != nullptr && id != *member_id) continue;
    for (auto& [raw, weak] : member.running) {
      if (std::shared_ptr<Stage> stage = weak.lock()) {
        stages.push_back(std::move(stage));
      }
    }
  }
  return stages;
}

absl::StatusOr<uint32_t> Supervisor::TeardownMember(
    const std::string& member_id, bool remove_builds_dir) {
  if (member_id.empty()) {
    return absl::InvalidArgumentError("member_id must not be empty");
  }
  std::vector<std::shared_ptr<Stage>> stages;
  std::string builds_dir;
  std::string claimed_builds_dir;
  int account = -1;
  {
    MutexLock lock(mu_);
    stages = RunningStages(&member_id);
    auto member = members_.find(member_id);
    if (member != members_.end()) {
      builds_dir = member->second.builds_dir;
      claimed_builds_dir = member->second.claimed_builds_dir;
      account = member->second.account;
    }
  }
  uint32_t killed = 0;
  for (const std::shared_ptr<Stage>& stage : stages) {
    if (stage->finished()) continue;
    ++killed;
    stage->Signal(StageSignal::kTerm);
  }
  for (const std::shared_ptr<Stage>& stage : stages) {
    if (!stage->WaitFinished(steady_clock::now() + stage->kill_grace() +
                             kTeardownSlack)) {
      return absl::DeadlineExceededError(absl::StrCat(
          "member ", member_id, ": process group ", stage->process_group(),
          " is still running after SIGKILL"));
    }
  }
  // What left the process groups (setsid, daemons) is still in the cgroup;
  // the member is over only once that is empty too.
  if (isolation_.cgroups != nullptr) {
    absl::StatusOr<size_t> strays = isolation_.cgroups->Destroy(
        EscapePathComponent(member_id),
        steady_clock::now() + default_kill_grace_ + kTeardownSlack);
    if (!strays.ok()) return strays.status();
    if (*strays > 0) {
      spdlog::info("event=member_cgroup_killed member={} processes={}",
                   LogValue(member_id), *strays);
    }
    killed += static_cast<uint32_t>(*strays);
  }

  std::error_code error;
  const std::string scratch = ScratchDir(member_id);
  // File systems the member mounted in its directories (FUSE, through
  // fusermount) answer nothing now that its processes are gone, and hold
  // their mount points: detached first.
  for (const std::string& dir :
       {scratch, remove_builds_dir ? builds_dir : std::string()}) {
    if (dir.empty()) continue;
    const absl::StatusOr<size_t> detached = DetachMountsUnder(dir);
    if (!detached.ok()) {
      spdlog::warn("event=member_mounts_left member={} dir={} error={}",
                   LogValue(member_id), LogValue(dir),
                   LogValue(std::string(detached.status().message())));
    } else if (*detached > 0) {
      spdlog::info("event=member_mounts_detached member={} dir={} mounts={}",
                   LogValue(member_id), LogValue(dir), *detached);
    }
  }
  fs::remove_all(scratch, error);
  if (error) return ErrorForPath("remove", scratch, error);
  fs::remove_all(EvidenceDir(member_id), error);
  if (error) return ErrorForPath("remove", EvidenceDir(member_id), error);
  if (remove_builds_dir && !builds_dir.empty()) {
    fs::remove_all(builds_dir, error);
    if (error) return ErrorForPath("remove", builds_dir, error);
  } else if (account >= 0 && !claimed_builds_dir.empty()) {
    // A builds dir that stays (a member nobody tore down, or one this agent
    // did not create) is handed back to root: the account's next member,
    // maybe another project's, must not read what this job left in it.
    SealDir(member_id, claimed_builds_dir);
  }
  // Its processes are gone: what its pooled account left elsewhere goes
  // too, before the next member may get that account.
  if (isolation_.exclusive_accounts && account >= 0) {
    PurgeAccount(isolation_.accounts[static_cast<size_t>(account)], member_id);
  }
  {
    MutexLock lock(mu_);
    members_.erase(member_id);
  }
  if (killed > 0) {
    spdlog::info("event=member_torn_down member={} process_groups_killed={}",
                 LogValue(member_id), killed);
  }
  // Space the member used is free again: what the reserve gave is made up.
  reserve_.Refill();
  return killed;
}

std::vector<DiskWatch::Member> Supervisor::MemberDiskScopes() const {
  std::vector<DiskWatch::Member> scopes;
  MutexLock lock(mu_);
  for (const auto& [id, member] : members_) {
    DiskWatch::Member& entry = scopes.emplace_back();
    entry.member_id = id;
    if (!member.claimed_builds_dir.empty()) {
      entry.scope.dirs.push_back(member.claimed_builds_dir);
    }
    entry.scope.dirs.push_back(ScratchDir(id));
    // Files its processes hold open after deleting them count too.
    entry.scope.cgroup = member.cgroup;
    if (isolation_.exclusive_accounts && member.account >= 0) {
      const MemberAccount& account =
          isolation_.accounts[static_cast<size_t>(member.account)];
      entry.scope.owner = account.uid;
      entry.scope.owner_gid = account.gid;
      entry.scope.shared_roots = isolation_.disk_roots;
      for (const std::string& root :
           {isolation_.builds_root, isolation_.cache_root, scratch_root_}) {
        if (!root.empty()) entry.scope.keep.push_back(root);
      }
    }
  }
  return scopes;
}

absl::StatusOr<uint32_t> Supervisor::StopMember(const std::string& member_id,
                                                const std::string& line) {
  std::vector<std::shared_ptr<Stage>> stages;
  bool has_cgroup = false;
  {
    MutexLock lock(mu_);
    stages = RunningStages(&member_id);
    auto member = members_.find(member_id);
    has_cgroup = member != members_.end() && !member->second.cgroup.empty();
  }
  uint32_t stopped = 0;
  for (const std::shared_ptr<Stage>& stage : stages) {
    if (stage->finished()) continue;
    ++stopped;
    stage->StopWith(line);
  }
  // What left the stages' process groups is in the cgroup.
  if (isolation_.cgroups != nullptr && has_cgroup) {
    absl::StatusOr<size_t> killed = isolation_.cgroups->Kill(
        EscapePathComponent(member_id),
        steady_clock::now() + default_kill_grace_ + kTeardownSlack);
    if (!killed.ok()) return killed.status();
    // The stages' own processes are among them.
    stopped = std::max(stopped, static_cast<uint32_t>(*killed));
  }
  return stopped;
}

absl::StatusOr<uint32_t> Supervisor::TeardownIdleMember(
    const std::string& member_id) {
  {
    MutexLock lock(mu_);
    auto member = members_.find(member_id);
    if (member == members_.end()) return 0;  // Torn down already.
    if (!member->second.running.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("member ", member_id, " runs a stage"));
    }
    member->second.closing = true;
  }
  absl::StatusOr<uint32_t> killed =
      TeardownMember(member_id, /*remove_builds_dir=*/false);
  if (!killed.ok()) {
    // It stays known, and may be torn down (or used) again.
    MutexLock lock(mu_);
    if (auto member = members_.find(member_id); member != members_.end()) {
      member->second.closing = false;
    }
  }
  return killed;
}

void Supervisor::Shutdown() {
  std::vector<std::shared_ptr<Stage>> stages;
  {
    MutexLock lock(mu_);
    shutting_down_ = true;
    stages = RunningStages(nullptr);
  }
  for (const std::shared_ptr<Stage>& stage : stages) {
    stage->Signal(StageSignal::kTerm);
  }
  stages.clear();
  // Every stage calls StageFinished() after its group is gone; waiting for
  // that also guarantees no stage calls back into a destroyed supervisor.
  std::vector<std::string> cgroups;
  {
    MutexLock lock(mu_);
    while (running_ > 0) stage_finished_.Wait(mu_);
    for (const auto& [id, member] : members_) {
      if (!member.cgroup.empty()) cgroups.push_back(EscapePathComponent(id));
    }
  }
  if (isolation_.cgroups == nullptr) return;
  for (const std::string& name : cgroups) {
    absl::StatusOr<size_t> strays = isolation_.cgroups->Destroy(
        name, steady_clock::now() + default_kill_grace_ + kTeardownSlack);
    if (!strays.ok()) {
      spdlog::warn("event=member_cgroup_left error={}",
                   LogValue(strays.status().ToString()));
    }
  }
  isolation_.cgroups->RemoveParent();
}

size_t Supervisor::running_stages() const {
  MutexLock lock(mu_);
  return running_;
}

// Gdt-rsh.
void Supervisor::AddStageVariable(const std::string& key,
                                  const std::string& value) {
  MutexLock lock(mu_);
  extra_env_[key] = value;
}

absl::StatusOr<Supervisor::ExecContext> Supervisor::FindExecContext(
    const std::string& gang_id, const std::string& token) const {
  MutexLock lock(mu_);
  const std::string* idle = nullptr;  // The token's member, running nothing.
  for (const auto& [member_id, member] : members_) {
    auto gang = member.gang_env.find("GDT_GANG_ID");
    if (gang == member.gang_env.end() || gang->second != gang_id) continue;
    const std::string& expected = member.gang_env.at("GDT_KV_TOKEN");
    // Constant time in the token's contents.
    unsigned char diff = expected.size() == token.size() ? 0 : 1;
    for (size_t i = 0; i < expected.size(); ++i) {
      diff |= static_cast<unsigned char>(expected[i]) ^
              static_cast<unsigned char>(i < token.size() ? token[i] : 0);
    }
    if (diff != 0 || expected.empty()) continue;
    if (member.running.empty()) {
      idle = &member_id;
      continue;
    }
    return ExecContext{
        member_id, member.gang_env, member.gang_working_dir,
        CredentialsOf(member),
        member.cgroup.empty() ? "" : member.cgroup + "/cgroup.procs"};
  }
  if (idle != nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "member ", *idle, " of gang ", gang_id,
        " runs no stage on this host now (its job's script has ended)"));
  }
  // Whether the gang has a member here is not said: the same words for a
  // wrong token and for a gang that never ran here.
  return absl::PermissionDeniedError(absl::StrCat(
      "gang token refused for gang ", gang_id,
      ": no member of that gang with this token runs on this host (it has "
      "ended, or the token is wrong)"));
}

bool Supervisor::MemberRunning(const std::string& member_id) const {
  MutexLock lock(mu_);
  auto it = members_.find(member_id);
  return it != members_.end() && !it->second.running.empty();
}

std::vector<Supervisor::WatchedStage> Supervisor::WatchedProgress() const {
  std::vector<std::pair<std::string, std::shared_ptr<Stage>>> stages;
  {
    MutexLock lock(mu_);
    for (const auto& [id, member] : members_) {
      for (const auto& [raw, weak] : member.running) {
        if (std::shared_ptr<Stage> stage = weak.lock()) {
          stages.emplace_back(id, std::move(stage));
        }
      }
    }
  }
  // The progress files are read without the lock.
  std::vector<WatchedStage> watched;
  for (const auto& [id, stage] : stages) {
    std::optional<StageProgress> progress = stage->progress();
    if (progress.has_value()) watched.push_back({id, *progress});
  }
  return watched;
}

std::vector<std::string> Supervisor::IdleMembers() const {
  MutexLock lock(mu_);
  std::vector<std::string> ids;
  for (const auto& [id, member] : members_) {
    if (member.running.empty() && !member.closing) ids.push_back(id);
  }
  return ids;
}

std::vector<std::string> Supervisor::RunningMembers() {
  MutexLock lock(mu_);
  std::vector<std::string> ids;
  for (auto& [id, member] : members_) {
    if (!member.running.empty() || member.started_since_report) {
      ids.push_back(id);
    }
    member.started_since_report = false;
  }
  return ids;
}

}  // namespace gdt::agent
