#include "agent/stage.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "agent/evidence.h"
#include "agent/port_check.h"
#include "common/logging.h"
#include "spdlog/spdlog.h"

namespace gdt::agent {
namespace {

// The member cgroup's directory from its cgroup.procs path; empty for none.
std::string CgroupDirOf(const std::string& cgroup_procs) {
  const std::string suffix = "/cgroup.procs";
  if (cgroup_procs.size() <= suffix.size() ||
      cgroup_procs.compare(cgroup_procs.size() - suffix.size(), suffix.size(),
                           suffix) != 0) {
    return "";
  }
  return cgroup_procs.substr(0, cgroup_procs.size() - suffix.size());
}

// The count after `key` in a cgroup "key value" file (memory.events); 0
// when the file or the key is missing.
uint64_t CgroupCount(const std::string& file, std::string_view key) {
  std::ifstream in(file);
  std::string name;
  uint64_t value = 0;
  while (in >> name >> value) {
    if (name == key) return value;
  }
  return 0;
}

using std::chrono::milliseconds;
using std::chrono::steady_clock;

// How long the supervising thread waits on the script between looks at
// pending signals; bounds the latency of a signal.
constexpr milliseconds kTick(20);
// How long to collect output after the process group was killed; only a
// process that left the group (setsid) can hold the pipes open longer.
constexpr milliseconds kDrainLimit(1000);
// How often the hang watchdog looks at the progress file.
constexpr milliseconds kProgressCheck(250);
// How often the teardown watch looks at the process group.
constexpr milliseconds kTeardownCheck(1000);
// Output kept for evidence.
constexpr size_t kOutputTailBytes = 64 << 10;

// A progress file longer than this holds no step number.
constexpr size_t kMaxStepBytes = 64;

}  // namespace

uint32_t MasterPortOfRankZero(const std::map<std::string, std::string>& env) {
  const auto rank = env.find("GDT_NODE_RANK");
  const auto port = env.find("GDT_MASTER_PORT");
  uint32_t value = 0;
  if (rank == env.end() || rank->second != "0" || port == env.end() ||
      !absl::SimpleAtoi(port->second, &value) || value > 65535) {
    return 0;
  }
  return value;
}

StageProgress ReadStageProgress(const std::string& progress_file,
                                std::chrono::system_clock::time_point started) {
  StageProgress progress{started, std::nullopt};
  if (progress_file.empty()) return progress;
  // The file is in the member's own directory and this process reads it as
  // root, from the heartbeat thread too: it is opened without following a
  // link (which could point at any file) and without blocking (a FIFO
  // swapped in between a look and the open would block it for good), and
  // judged by what was opened.
  const int fd = open(progress_file.c_str(),
                      O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return progress;
  struct stat info = {};
  if (fstat(fd, &info) != 0) {
    close(fd);
    return progress;
  }
  const std::chrono::system_clock::time_point touched(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::seconds(info.st_mtim.tv_sec) +
          std::chrono::nanoseconds(info.st_mtim.tv_nsec)));
  progress.last = std::max(started, touched);
  if (!S_ISREG(info.st_mode) || info.st_size <= 0 ||
      static_cast<size_t>(info.st_size) > kMaxStepBytes) {
    close(fd);
    return progress;
  }
  std::string content(kMaxStepBytes + 1, '\0');
  size_t length = 0;
  while (length < content.size()) {
    const ssize_t n =
        read(fd, content.data() + length, content.size() - length);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    length += static_cast<size_t>(n);
  }
  close(fd);
  content.resize(length);
  const absl::string_view digits = absl::StripAsciiWhitespace(content);
  uint64_t step = 0;
  if (!digits.empty() &&
      std::all_of(digits.begin(), digits.end(),
                  [](char c) { return absl::ascii_isdigit(c); }) &&
      absl::SimpleAtoi(digits, &step)) {
    progress.step = step;
  }
  return progress;
}

absl::StatusOr<std::shared_ptr<Stage>> Stage::Start(
    const StageOptions& options, StageObserver* observer,
    std::function<void(Stage*)> on_finished) {
  SpawnOptions spawn;
  spawn.argv = {"/bin/bash", options.script_path};
  spawn.env = options.env;
  spawn.working_dir = options.working_dir;
  spawn.new_process_group = true;
  spawn.capture_output = true;
  spawn.credentials = options.credentials;
  spawn.cgroup_procs = options.cgroup_procs;
  const std::string cgroup = CgroupDirOf(options.cgroup_procs);
  const uint64_t oom_kills =
      cgroup.empty() ? 0 : CgroupCount(cgroup + "/memory.events", "oom_kill");
  absl::StatusOr<std::unique_ptr<Subprocess>> child = Subprocess::Spawn(spawn);
  if (!child.ok()) return child.status();
  std::shared_ptr<Stage> stage(
      new Stage(std::move(*child), observer, std::move(on_finished), options));
  stage->oom_kills_at_start_ = oom_kills;
  stage->thread_ = std::thread([raw = stage.get()] { raw->Run(); });
  return stage;
}

Stage::Stage(std::unique_ptr<Subprocess> child, StageObserver* observer,
             std::function<void(Stage*)> on_finished,
             const StageOptions& options)
    : process_group_(child->pid()),
      kill_grace_(options.kill_grace),
      observer_(observer),
      on_finished_(std::move(on_finished)),
      child_(std::move(child)),
      hang_timeout_(options.hang_timeout),
      progress_file_(options.progress_file),
      evidence_dir_(options.evidence_dir),
      evidence_copy_to_(options.evidence_copy_to),
      credentials_(options.credentials),
      cgroup_procs_(options.cgroup_procs),
      path_(options.env.count("PATH") != 0 ? options.env.at("PATH")
                                           : "/usr/bin:/bin"),
      master_port_(MasterPortOfRankZero(options.env)),
      started_(std::chrono::system_clock::now()) {
  if (options.teardown_timeout.count() > 0) {
    teardown_watch_.emplace(options.teardown_timeout);
  }
}

Stage::~Stage() {
  Signal(StageSignal::kKill);
  if (!thread_.joinable()) return;
  // The last reference may be dropped from OnExit() on the supervising
  // thread itself, which touches nothing of the stage after that call.
  if (thread_.get_id() == std::this_thread::get_id()) {
    thread_.detach();
  } else {
    thread_.join();
  }
}

void Stage::Signal(StageSignal signal) {
  MutexLock lock(mu_);
  if (finished_) return;
  pending_.push_back(signal);
  changed_.NotifyAll();
}

void Stage::StopWith(const std::string& line) {
  MutexLock lock(mu_);
  // Once the script exited, its kill would be discarded.
  if (finished_ || exited_ || !stop_line_.empty()) return;
  stop_line_ = line;
  pending_.push_back(StageSignal::kKill);
  changed_.NotifyAll();
}

bool Stage::WaitFinished(steady_clock::time_point deadline) {
  MutexLock lock(mu_);
  while (!finished_) {
    if (!changed_.WaitUntil(mu_, deadline) && steady_clock::now() >= deadline) {
      return finished_;
    }
  }
  return true;
}

bool Stage::finished() const {
  MutexLock lock(mu_);
  return finished_;
}

void Stage::ApplySignals() {
  std::vector<StageSignal> pending;
  {
    MutexLock lock(mu_);
    pending.swap(pending_);
  }
  for (StageSignal signal : pending) {
    switch (signal) {
      case StageSignal::kTerm:
        child_->SignalGroup(SIGTERM);
        if (!kill_at_.has_value()) kill_at_ = steady_clock::now() + kill_grace_;
        break;
      case StageSignal::kKill:
        child_->SignalGroup(SIGKILL);
        break;
      case StageSignal::kInt:
        child_->SignalGroup(SIGINT);
        break;
      case StageSignal::kCollectEvidence:
        CollectEvidenceOnce(
            "the gang failed as hung; evidence before stopping");
        break;
    }
  }
  if (kill_at_.has_value() && steady_clock::now() >= *kill_at_) {
    child_->SignalGroup(SIGKILL);
    kill_at_.reset();
  }
}

void Stage::CheckProgress() {
  if (hang_timeout_.count() <= 0 || hung_ || kill_at_.has_value()) return;
  const steady_clock::time_point now = steady_clock::now();
  if (now < next_progress_check_) return;
  next_progress_check_ = now + kProgressCheck;
  const StageProgress progress = ReadStageProgress(progress_file_, started_);
  if (std::chrono::system_clock::now() - progress.last < hang_timeout_) return;
  hung_ = true;
  spdlog::warn("event=stage_hung pgid={} progress_file={} timeout_s={}",
               process_group_, LogValue(progress_file_), hang_timeout_.count());
  CollectEvidenceOnce(absl::StrCat("no progress for ", hang_timeout_.count(),
                                   " s (GDT_HANG_TIMEOUT); progress file ",
                                   progress_file_));
  observer_->OnHung(hang_timeout_, progress);
}

std::optional<StageProgress> Stage::progress() const {
  if (hang_timeout_.count() <= 0) return std::nullopt;
  return ReadStageProgress(progress_file_, started_);
}

void Stage::CheckTeardown() {
  if (!teardown_watch_.has_value() || ended_in_teardown_ ||
      kill_at_.has_value()) {
    return;
  }
  const steady_clock::time_point now = steady_clock::now();
  if (now < next_teardown_check_) return;
  next_teardown_check_ = now + kTeardownCheck;
  std::optional<std::string> verdict =
      teardown_watch_->Observe(SnapshotProcessGroup(process_group_), now);
  if (!verdict.has_value()) return;
  ended_in_teardown_ = true;
  spdlog::warn("event=stage_stuck_in_teardown pgid={} detail={}",
               process_group_, LogValue(*verdict));
  const std::string line = absl::StrCat("gdt: ", *verdict, "\n");
  output_tail_.append(line);
  observer_->OnOutput(OutputSource::kStderr, line);
  child_->SignalGroup(SIGKILL);
}

void Stage::CollectEvidenceOnce(const std::string& why) {
  if (evidence_collected_ || evidence_dir_.empty()) return;
  evidence_collected_ = true;
  EvidenceRequest request;
  request.dir = evidence_dir_;
  request.process_group = process_group_;
  request.why = why;
  request.output_tail = output_tail_;
  request.path = path_;
  absl::StatusOr<std::vector<std::string>> files = CollectEvidence(request);
  if (!files.ok()) {
    spdlog::warn("event=evidence_failed pgid={} dir={} error={}",
                 process_group_, LogValue(evidence_dir_),
                 LogValue(files.status().ToString()));
    return;
  }
  spdlog::info("event=evidence_collected pgid={} dir={} files={}",
               process_group_, LogValue(evidence_dir_), files->size());
  if (evidence_copy_to_.empty()) return;
  if (credentials_.has_value()) {
    // The copy runs as the member, which must be able to read the files.
    std::error_code error;
    for (const std::string& path :
         {evidence_dir_,
          std::filesystem::path(evidence_dir_).parent_path().string()}) {
      if (chown(path.c_str(), 0, credentials_->gid) != 0 ||
          chmod(path.c_str(), 0750) != 0) {
        error = std::error_code(errno, std::generic_category());
      }
    }
    for (const std::string& name : *files) {
      const std::string path = evidence_dir_ + "/" + name;
      if (chown(path.c_str(), 0, credentials_->gid) != 0 ||
          chmod(path.c_str(), 0640) != 0) {
        error = std::error_code(errno, std::generic_category());
      }
    }
    if (error) {
      spdlog::warn("event=evidence_copy_failed pgid={} dir={} error={}",
                   process_group_, LogValue(evidence_copy_to_),
                   LogValue(error.message()));
      return;
    }
  }
  SpawnOptions copy;
  copy.argv = {"/bin/sh",
               "-c",
               "mkdir -p -- \"$2\" && cp -R -- \"$1\"/. \"$2\"",
               "sh",
               evidence_dir_,
               evidence_copy_to_};
  copy.env = {{"PATH", "/usr/bin:/bin"}};
  copy.credentials = credentials_;
  copy.cgroup_procs = cgroup_procs_;
  std::string output;
  absl::StatusOr<std::unique_ptr<Subprocess>> child = Subprocess::Spawn(copy);
  std::optional<ExitStatus> status;
  if (child.ok()) {
    status = (*child)->WaitUntil(
        steady_clock::now() + std::chrono::seconds(10),
        [&](OutputSource, std::string_view data) { output.append(data); });
  }
  if (!status.has_value() || !status->success()) {
    spdlog::warn("event=evidence_copy_failed pgid={} dir={} error={}",
                 process_group_, LogValue(evidence_copy_to_),
                 LogValue(child.ok() ? output : child.status().ToString()));
  }
}

void Stage::Run() {
  const Subprocess::OutputCallback forward = [this](OutputSource source,
                                                    std::string_view data) {
    output_tail_.append(data);
    if (teardown_watch_.has_value()) {
      teardown_watch_->OnOutput(steady_clock::now());
    }
    if (output_tail_.size() > 2 * kOutputTailBytes) {
      output_tail_.erase(0, output_tail_.size() - kOutputTailBytes);
    }
    observer_->OnOutput(source, data);
  };
  std::optional<ExitStatus> status;
  while (!status.has_value()) {
    ApplySignals();
    CheckProgress();
    CheckTeardown();
    if (observer_->ReadyForOutput()) {
      status = child_->WaitUntil(steady_clock::now() + kTick, forward);
      continue;
    }
    status = child_->TryWait();
    if (!status.has_value()) {
      MutexLock lock(mu_);
      if (pending_.empty())
        changed_.WaitUntil(mu_, steady_clock::now() + kTick);
    }
  }
  {
    MutexLock lock(mu_);
    exited_ = true;
  }
  // The script is gone; anything it left in its group must not outlive it.
  child_->SignalGroup(SIGKILL);
  // Killed by the teardown watch: its ranks had finished their work.
  if (ended_in_teardown_ && status->signal == SIGKILL) status = ExitStatus{};
  const steady_clock::time_point drain_until =
      steady_clock::now() + kDrainLimit;
  while (steady_clock::now() < drain_until) {
    // As while the script ran: nothing more is read while the observer is
    // full, or a process that left the group and writes without end (cat
    // /dev/zero) would queue all it writes in a second in this process.
    if (!observer_->ReadyForOutput()) {
      MutexLock lock(mu_);
      changed_.WaitUntil(mu_, steady_clock::now() + kTick);
      continue;
    }
    if (!child_->PumpOutput(kTick, forward)) break;
  }
  {
    MutexLock lock(mu_);
    finished_ = true;
    pending_.clear();
    changed_.NotifyAll();
  }
  // The member's memory limit was reached while this stage ran: say so in
  // the job's log, or a job killed by the kernel ends in a bare signal.
  if (const std::string cgroup = CgroupDirOf(cgroup_procs_); !cgroup.empty()) {
    const uint64_t oom_kills =
        CgroupCount(cgroup + "/memory.events", "oom_kill");
    if (oom_kills > oom_kills_at_start_) {
      std::ifstream max_file(cgroup + "/memory.max");
      std::string max;
      max_file >> max;
      const std::string line = absl::StrCat(
          "gdt: out of memory: this member reached its memory limit (", max,
          " bytes, member_memory_max in the agent's config) and the kernel "
          "killed its processes (OOM)\n");
      spdlog::warn(
          "event=member_out_of_memory pgid={} memory_max={} "
          "oom_kills={}",
          process_group_, LogValue(max), oom_kills - oom_kills_at_start_);
      output_tail_.append(line);
      observer_->OnOutput(OutputSource::kStderr, line);
    }
  }
  // Rank 0 failed while another account listens on the gang's master port:
  // something else on the host bound the port between its lease and rank
  // 0's own bind, and the failure ("address already in use", or peers that
  // reached the wrong server) comes from that. Say so in the job's log.
  if (master_port_ != 0 && !status->success()) {
    const uid_t own = credentials_.has_value() ? credentials_->uid : getuid();
    for (const uint32_t uid : ListenerUids(master_port_)) {
      if (uid == own) continue;
      const std::string line = absl::StrCat(
          "gdt: the master port ", master_port_,
          " leased to this gang is held by another account on this host (uid ",
          uid,
          "), which bound it before rank 0 could; the gang cannot meet on "
          "it\n");
      spdlog::warn("event=master_port_taken pgid={} port={} uid={}",
                   process_group_, master_port_, uid);
      output_tail_.append(line);
      observer_->OnOutput(OutputSource::kStderr, line);
      break;
    }
  }
  // The agent stopped it (StopWith, while the script ran): the reason is
  // the last line; not when the script ended well before its kill came.
  std::string stop_line;
  {
    MutexLock lock(mu_);
    if (!status->success()) stop_line = stop_line_;
  }
  if (!stop_line.empty()) {
    output_tail_.append(stop_line);
    observer_->OnOutput(OutputSource::kStderr, stop_line);
  }
  if (on_finished_) on_finished_(this);
  // Last: the observer may release the final reference to this stage.
  observer_->OnExit(*status);
}

}  // namespace gdt::agent
