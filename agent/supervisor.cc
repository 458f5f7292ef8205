#include "agent/supervisor.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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

// A directory of one job (builds dir, scratch dir) is mode 0700, so
// that other users on the host cannot read its sources, scripts and files;
// parents it creates get 0755 as with MakeDirs.
absl::Status MakePrivateDir(const std::string& path) {
  GDT_RETURN_IF_ERROR(MakeDirs(path));
  std::error_code error;
  fs::permissions(path, static_cast<fs::perms>(0700), error);
  if (error) return ErrorForPath("set the mode of", path, error);
  return absl::OkStatus();
}

// Writes `content` to `path` (replacing it) with permissions `mode`.
absl::Status WriteFile(const std::string& path, std::string_view content,
                       mode_t mode) {
  const int fd =
      open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
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
  if (close(fd) != 0) {
    return ErrorForPath("write", path,
                        std::error_code(errno, std::generic_category()));
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
                       std::map<std::string, std::string> base_env)
    : scratch_root_(std::move(scratch_root)),
      default_kill_grace_(default_kill_grace),
      base_env_(std::move(base_env)),
      ledger_((fs::path(scratch_root_) / ".process-groups").string()) {}

Supervisor::~Supervisor() { Shutdown(); }

void Supervisor::RecordProcessGroup(pid_t pgid) const {
  absl::Status recorded = ledger_.Record(pgid);
  if (!recorded.ok() && !absl::IsNotFound(recorded)) {
    spdlog::warn("event=process_group_record_failed pgid={} error={}", pgid,
                 LogValue(std::string(recorded.message())));
  }
}

std::vector<ProcessLedger::Reaped> Supervisor::ReapLeftovers() {
  return ledger_.ReapLeftovers(default_kill_grace_);
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
  if (!builds_dir.empty()) {
    GDT_RETURN_IF_ERROR(CheckAbsolute("builds_dir", builds_dir));
    if (fs::path(builds_dir).lexically_normal() == "/") {
      return absl::InvalidArgumentError("builds_dir must not be /");
    }
  }
  for (const std::string& dir : extra_dirs) {
    GDT_RETURN_IF_ERROR(CheckAbsolute("extra_dirs entry", dir));
  }
  if (!builds_dir.empty()) GDT_RETURN_IF_ERROR(MakePrivateDir(builds_dir));
  for (const std::string& dir : extra_dirs) GDT_RETURN_IF_ERROR(MakeDirs(dir));
  GDT_RETURN_IF_ERROR(MakePrivateDir(ScratchDir(member_id)));

  MutexLock lock(mu_);
  Member& member = members_[member_id];
  if (!builds_dir.empty()) member.builds_dir = builds_dir;
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
  {
    MutexLock lock(mu_);
    if (shutting_down_) {
      return absl::UnavailableError("the agent is shutting down");
    }
    number = ++members_[request.member_id].stages_started;
    extra_env = extra_env_;
  }

  const std::string scratch = ScratchDir(request.member_id);
  GDT_RETURN_IF_ERROR(MakePrivateDir(scratch));
  const std::string stage_name =
      request.stage.empty() ? "stage" : EscapePathComponent(request.stage);
  StageOptions options;
  options.script_path =
      (fs::path(scratch) / absl::StrCat(stage_name, "-", number, ".sh"))
          .string();
  GDT_RETURN_IF_ERROR(WriteFile(options.script_path, request.script, 0700));
  options.env = base_env_;
  for (const auto& [key, value] : extra_env) options.env[key] = value;
  for (const auto& [key, value] : request.env) options.env[key] = value;
  for (const StageFileSpec& file : request.files) {
    const std::string path = (fs::path(scratch) / file.name).string();
    GDT_RETURN_IF_ERROR(WriteFile(path, file.content, 0644));
    options.env[file.env_var] = path;
  }
  options.working_dir =
      request.working_dir.empty() ? scratch : request.working_dir;
  if (!request.working_dir.empty()) {
    GDT_RETURN_IF_ERROR(MakeDirs(request.working_dir));
  }
  options.kill_grace =
      request.kill_grace.count() > 0 ? request.kill_grace : default_kill_grace_;
  if (!request.evidence_dir.empty()) {
    GDT_RETURN_IF_ERROR(CheckAbsolute("evidence_dir", request.evidence_dir));
  }
  options.evidence_dir = request.evidence_dir.empty()
                             ? (fs::path(scratch) / "evidence").string()
                             : request.evidence_dir;
  if (request.hang_timeout.count() > 0) {
    options.hang_timeout = request.hang_timeout;
    options.progress_file =
        (fs::path(scratch) / absl::StrCat("progress-", stage_name, "-", number))
            .string();
    GDT_RETURN_IF_ERROR(WriteFile(options.progress_file, "", 0644));
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
  {
    MutexLock lock(mu_);
    stages = RunningStages(&member_id);
    auto member = members_.find(member_id);
    if (member != members_.end()) builds_dir = member->second.builds_dir;
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

  std::error_code error;
  const std::string scratch = ScratchDir(member_id);
  fs::remove_all(scratch, error);
  if (error) return ErrorForPath("remove", scratch, error);
  if (remove_builds_dir && !builds_dir.empty()) {
    fs::remove_all(builds_dir, error);
    if (error) return ErrorForPath("remove", builds_dir, error);
  }
  {
    MutexLock lock(mu_);
    members_.erase(member_id);
  }
  if (killed > 0) {
    spdlog::info("event=member_torn_down member={} process_groups_killed={}",
                 LogValue(member_id), killed);
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
  MutexLock lock(mu_);
  while (running_ > 0) stage_finished_.Wait(mu_);
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
  bool gang_here = false;
  for (const auto& [member_id, member] : members_) {
    if (member.running.empty()) continue;
    auto gang = member.gang_env.find("GDT_GANG_ID");
    if (gang == member.gang_env.end() || gang->second != gang_id) continue;
    gang_here = true;
    const std::string& expected = member.gang_env.at("GDT_KV_TOKEN");
    // Constant time in the token's contents.
    unsigned char diff = expected.size() == token.size() ? 0 : 1;
    for (size_t i = 0; i < expected.size(); ++i) {
      diff |= static_cast<unsigned char>(expected[i]) ^
              static_cast<unsigned char>(i < token.size() ? token[i] : 0);
    }
    if (diff != 0 || expected.empty()) continue;
    return ExecContext{member_id, member.gang_env, member.gang_working_dir};
  }
  if (gang_here) {
    return absl::PermissionDeniedError(
        absl::StrCat("wrong gang token for gang ", gang_id));
  }
  return absl::NotFoundError(
      absl::StrCat("no member of gang ", gang_id, " runs on this host"));
}

bool Supervisor::MemberRunning(const std::string& member_id) const {
  MutexLock lock(mu_);
  auto it = members_.find(member_id);
  return it != members_.end() && !it->second.running.empty();
}

std::vector<std::string> Supervisor::RunningMembers() const {
  MutexLock lock(mu_);
  std::vector<std::string> ids;
  for (const auto& [id, member] : members_) {
    if (!member.running.empty()) ids.push_back(id);
  }
  return ids;
}

}  // namespace gdt::agent
