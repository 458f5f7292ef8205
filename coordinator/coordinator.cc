#include "coordinator/coordinator.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace gdt::coordinator {
namespace {

// Ports asked about per gang and pass, so one busy host cannot stall a pass.
constexpr size_t kMaxPortChecks = 32;
constexpr std::chrono::seconds kTick{1};

}  // namespace

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(
    const Clock& clock, std::unique_ptr<Store> store,
    const SchedulerOptions& options, PortChecker& port_checker) {
  std::unique_ptr<Coordinator> coordinator(
      new Coordinator(std::move(store), port_checker));
  absl::StatusOr<std::unique_ptr<Scheduler>> scheduler =
      Scheduler::Create(clock, *coordinator->store_, options);
  if (!scheduler.ok()) return scheduler.status();
  MutexLock lock(coordinator->mu_);
  coordinator->scheduler_ = std::move(*scheduler);
  return coordinator;
}

Coordinator::~Coordinator() {
  Stop();
  MutexLock lock(mu_);
  scheduler_.reset();  // Before the store it refers to.
}

void Coordinator::SetEventSink(EventSink sink) { sink_ = std::move(sink); }

void Coordinator::Start() {
  {
    MutexLock lock(mu_);
    stop_ = false;
  }
  thread_ = std::thread([this] { Loop(); });
}

void Coordinator::Stop() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  wake_cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

void Coordinator::Wake() {
  {
    MutexLock lock(mu_);
    wake_ = true;
  }
  wake_cv_.NotifyAll();
}

void Coordinator::Loop() {
  while (true) {
    {
      MutexLock lock(mu_);
      const auto deadline = std::chrono::steady_clock::now() + kTick;
      while (!wake_ && !stop_ && std::chrono::steady_clock::now() < deadline) {
        wake_cv_.WaitUntil(mu_, deadline);
      }
      if (stop_) return;
      wake_ = false;
    }
    RunAdmissionPass();
  }
}

std::vector<MemberEvent> Coordinator::TakeEventsLocked() {
  return scheduler_->TakeEvents();
}

void Coordinator::Deliver(std::vector<MemberEvent> events) {
  if (!events.empty() && sink_) sink_(std::move(events));
}

void Coordinator::RunAdmissionPass() {
  std::vector<AdmissionProposal> proposals;
  std::vector<MemberEvent> events;
  {
    MutexLock lock(mu_);
    scheduler_->FailGangsOnLostHosts();
    scheduler_->ReleaseAbandonedMembers();
    scheduler_->FailSuspectedGangs();
    proposals = scheduler_->Plan();
    events = TakeEventsLocked();
  }
  Deliver(std::move(events));
  for (const AdmissionProposal& proposal : proposals) {
    uint32_t port = 0;
    std::string note;
    if (proposal.agent_endpoint.empty()) {
      note = absl::StrCat("waiting for host ", proposal.master_host,
                          " to report its agent endpoint");
    }
    size_t checked = 0;
    for (uint32_t candidate : proposal.candidate_ports) {
      if (!note.empty() || checked++ == kMaxPortChecks) break;
      absl::StatusOr<bool> free =
          port_checker_.IsPortFree(proposal.agent_endpoint, candidate);
      if (!free.ok()) {
        note = absl::StrCat("waiting for the agent on ", proposal.master_host,
                            " (", proposal.agent_endpoint,
                            ") to confirm a master port: agent unreachable: ",
                            free.status().message());
        break;
      }
      if (*free) {
        port = candidate;
        break;
      }
    }
    if (port == 0 && note.empty()) {
      note = absl::StrCat("waiting for a free master port on ",
                          proposal.master_host, " (", checked,
                          " ports checked were busy)");
    }
    {
      MutexLock lock(mu_);
      if (port == 0) {
        spdlog::warn("gang not admitted gang={}: {}", proposal.gang_id, note);
        scheduler_->Defer(proposal.gang_id, note);
      } else if (absl::Status status = scheduler_->Admit(proposal, port);
                 !status.ok()) {
        spdlog::warn("gang not admitted gang={}: {}", proposal.gang_id,
                     status.ToString());
      }
      events = TakeEventsLocked();
    }
    Deliver(std::move(events));
  }
}

absl::Status Coordinator::RegisterHost(const HostSpec& spec) {
  std::vector<MemberEvent> events;
  absl::Status status;
  {
    MutexLock lock(mu_);
    status = scheduler_->RegisterHost(spec);
    events = TakeEventsLocked();
  }
  Deliver(std::move(events));
  if (status.ok()) Wake();
  return status;
}

bool Coordinator::Heartbeat(const std::string& host_name) {
  bool was_down = false;
  bool known;
  {
    MutexLock lock(mu_);
    known = scheduler_->Heartbeat(host_name, &was_down);
  }
  if (was_down) Wake();
  return known;
}

absl::StatusOr<std::string> Coordinator::Join(const JoinRequest& request,
                                              uint64_t stream_id) {
  std::vector<MemberEvent> events;
  absl::StatusOr<std::string> gang_id;
  {
    MutexLock lock(mu_);
    gang_id = scheduler_->Join(request, stream_id);
    events = TakeEventsLocked();
  }
  Deliver(std::move(events));
  if (gang_id.ok()) Wake();
  return gang_id;
}

void Coordinator::Detach(const std::string& gang_id, uint32_t member_index,
                         uint64_t stream_id) {
  std::vector<MemberEvent> events;
  {
    MutexLock lock(mu_);
    scheduler_->Detach(gang_id, member_index, stream_id);
    events = TakeEventsLocked();
  }
  Deliver(std::move(events));
}

absl::Status Coordinator::ReportExit(const std::string& gang_id, uint32_t epoch,
                                     uint32_t member_index, int64_t job_id,
                                     int32_t exit_code, bool cancelled,
                                     bool peer_suspected) {
  std::vector<MemberEvent> events;
  absl::Status status;
  {
    MutexLock lock(mu_);
    status = scheduler_->ReportExit(gang_id, epoch, member_index, job_id,
                                    exit_code, cancelled, peer_suspected);
    events = TakeEventsLocked();
  }
  Deliver(std::move(events));
  return status;
}

absl::Status Coordinator::Watch(const std::string& gang_id, uint32_t epoch,
                                uint32_t member_index, int64_t job_id,
                                uint64_t watch_id) {
  std::vector<MemberEvent> events;
  absl::Status status;
  {
    MutexLock lock(mu_);
    status = scheduler_->Watch(gang_id, epoch, member_index, job_id, watch_id);
    events = TakeEventsLocked();
  }
  Deliver(std::move(events));
  return status;
}

void Coordinator::Unwatch(uint64_t watch_id) {
  MutexLock lock(mu_);
  scheduler_->Unwatch(watch_id);
}

absl::Status Coordinator::Leave(const GangKey& key, uint32_t member_index,
                                int64_t job_id) {
  std::vector<MemberEvent> events;
  absl::Status status;
  {
    MutexLock lock(mu_);
    status = scheduler_->Leave(key, member_index, job_id);
    events = TakeEventsLocked();
  }
  Deliver(std::move(events));
  Wake();
  return status;
}

absl::Status Coordinator::MemberLost(const std::string& gang_id, uint32_t epoch,
                                     uint32_t member_index, int64_t job_id,
                                     const std::string& what) {
  std::vector<MemberEvent> events;
  absl::Status status;
  {
    MutexLock lock(mu_);
    status = scheduler_->MemberLost(gang_id, epoch, member_index, job_id, what);
    events = TakeEventsLocked();
  }
  Deliver(std::move(events));
  return status;
}

absl::Status Coordinator::MemberHung(const std::string& gang_id, uint32_t epoch,
                                     uint32_t member_index, int64_t job_id,
                                     uint32_t seconds) {
  std::vector<MemberEvent> events;
  absl::Status status;
  {
    MutexLock lock(mu_);
    status =
        scheduler_->MemberHung(gang_id, epoch, member_index, job_id, seconds);
    events = TakeEventsLocked();
  }
  Deliver(std::move(events));
  return status;
}

absl::StatusOr<std::string> Coordinator::Cancel(const std::string& gang_id,
                                                const std::string& note) {
  std::vector<MemberEvent> events;
  absl::StatusOr<std::string> root_cause;
  {
    MutexLock lock(mu_);
    root_cause = scheduler_->Cancel(gang_id, note);
    events = TakeEventsLocked();
  }
  Deliver(std::move(events));
  if (root_cause.ok()) Wake();
  return root_cause;
}

Snapshot Coordinator::GetSnapshot(bool include_finished) {
  MutexLock lock(mu_);
  return scheduler_->GetSnapshot(include_finished);
}

}  // namespace gdt::coordinator
