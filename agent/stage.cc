#include "agent/stage.h"

#include <signal.h>

#include <utility>

namespace gdt::agent {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

// How long the supervising thread waits on the script between looks at
// pending signals; bounds the latency of a signal.
constexpr milliseconds kTick(20);
// How long to collect output after the process group was killed; only a
// process that left the group (setsid) can hold the pipes open longer.
constexpr milliseconds kDrainLimit(1000);

}  // namespace

absl::StatusOr<std::shared_ptr<Stage>> Stage::Start(
    const StageOptions& options, StageObserver* observer,
    std::function<void(Stage*)> on_finished) {
  SpawnOptions spawn;
  spawn.argv = {"/bin/bash", options.script_path};
  spawn.env = options.env;
  spawn.working_dir = options.working_dir;
  spawn.new_process_group = true;
  spawn.capture_output = true;
  absl::StatusOr<std::unique_ptr<Subprocess>> child = Subprocess::Spawn(spawn);
  if (!child.ok()) return child.status();
  std::shared_ptr<Stage> stage(new Stage(
      std::move(*child), observer, std::move(on_finished), options.kill_grace));
  stage->thread_ = std::thread([raw = stage.get()] { raw->Run(); });
  return stage;
}

Stage::Stage(std::unique_ptr<Subprocess> child, StageObserver* observer,
             std::function<void(Stage*)> on_finished,
             std::chrono::milliseconds kill_grace)
    : process_group_(child->pid()),
      kill_grace_(kill_grace),
      observer_(observer),
      on_finished_(std::move(on_finished)),
      child_(std::move(child)) {}

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
    }
  }
  if (kill_at_.has_value() && steady_clock::now() >= *kill_at_) {
    child_->SignalGroup(SIGKILL);
    kill_at_.reset();
  }
}

void Stage::Run() {
  const Subprocess::OutputCallback forward = [this](OutputSource source,
                                                    std::string_view data) {
    observer_->OnOutput(source, data);
  };
  std::optional<ExitStatus> status;
  while (!status.has_value()) {
    ApplySignals();
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
  // The script is gone; anything it left in its group must not outlive it.
  child_->SignalGroup(SIGKILL);
  const steady_clock::time_point drain_until =
      steady_clock::now() + kDrainLimit;
  while (steady_clock::now() < drain_until &&
         child_->PumpOutput(kTick, forward)) {
  }
  {
    MutexLock lock(mu_);
    finished_ = true;
    pending_.clear();
    changed_.NotifyAll();
  }
  if (on_finished_) on_finished_(this);
  // Last: the observer may release the final reference to this stage.
  observer_->OnExit(*status);
}

}  // namespace gdt::agent
