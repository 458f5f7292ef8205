#include "testing/fake_coordinator.h"

#include <optional>
#include <string>
#include <thread>

#include "rendezvous/metadata.h"

namespace gdt::test {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

grpc::Status FakeCoordinator::RegisterHost(
    grpc::ServerContext*, const v1::RegisterHostRequest* request,
    v1::RegisterHostResponse* response) {
  MutexLock lock(mu_);
  registrations_.push_back(request->host());
  response->set_heartbeat_interval_seconds(1);
  changed_.NotifyAll();
  return grpc::Status::OK;
}

grpc::Status FakeCoordinator::Heartbeat(grpc::ServerContext*,
                                        const v1::HeartbeatRequest* request,
                                        v1::HeartbeatResponse* response) {
  MutexLock lock(mu_);
  heartbeats_.push_back(request->host_name());
  response->set_reregister(reregister_next_);
  reregister_next_ = false;
  changed_.NotifyAll();
  return grpc::Status::OK;
}

grpc::Status FakeCoordinator::ReportExit(grpc::ServerContext*,
                                         const v1::ReportExitRequest* request,
                                         v1::ReportExitResponse*) {
  MutexLock lock(mu_);
  exits_.push_back(*request);
  changed_.NotifyAll();
  return grpc::Status::OK;
}

grpc::Status FakeCoordinator::JoinGang(
    grpc::ServerContext* context, const v1::JoinGangRequest* request,
    grpc::ServerWriter<v1::JoinGangEvent>* writer) {
  MutexLock lock(mu_);
  joins_.push_back(*request);
  join_times_.push_back(steady_clock::now());
  if (refusals_ != 0) {
    if (refusals_ > 0) --refusals_;
    context->AddTrailingMetadata(rendezvous::kRetryAfterMetadata,
                                 std::to_string(refusal_retry_after_.count()));
    return refusal_;
  }
  if (!reject_.ok()) return reject_;
  v1::JoinGangEvent waiting;
  waiting.mutable_waiting()->set_reason(
      "gang train (pipeline 77): 3/4 members present");
  writer->Write(waiting);
  v1::JoinGangEvent admitted;
  *admitted.mutable_admitted()->mutable_assignment() = assignment_;
  writer->Write(admitted);
  return grpc::Status::OK;
}

grpc::Status FakeCoordinator::WatchGang(
    grpc::ServerContext* context, const v1::WatchGangRequest* request,
    grpc::ServerWriter<v1::WatchGangEvent>* writer) {
  WatchMode mode;
  std::string reason;
  int64_t culprit;
  milliseconds delay;
  {
    MutexLock lock(mu_);
    watches_.push_back(*request);
    mode = watch_mode_;
    reason = watch_reason_;
    culprit = watch_culprit_;
    delay = watch_delay_;
  }
  v1::WatchGangEvent event;
  if (mode == WatchMode::kFailAtOnce) {
    event.mutable_failed()->set_reason(reason);
    event.mutable_failed()->set_job_id(culprit);
    writer->Write(event);
    return grpc::Status::OK;
  }
  event.mutable_running()->set_members_total(4);
  for (uint32_t index : {1, 2, 3, 4}) {
    event.mutable_running()->add_unfinished_indices(index);
  }
  writer->Write(event);
  // Until an exit is reported (kFollowExits) or the caller gives up.
  std::optional<v1::ReportExitRequest> exit;
  while (!context->IsCancelled()) {
    {
      MutexLock lock(mu_);
      if (mode == WatchMode::kFollowExits && !exits_.empty()) {
        exit = exits_.back();
      }
    }
    if (exit.has_value()) break;
    std::this_thread::sleep_for(milliseconds(10));
  }
  if (!exit.has_value()) return grpc::Status::OK;
  std::this_thread::sleep_for(delay);
  event.Clear();
  if (exit->exit_code() == 0 && !exit->cancelled() && reason.empty()) {
    event.mutable_succeeded();
  } else if (exit->exit_code() == 0 && !exit->cancelled()) {
    event.mutable_failed()->set_reason(reason);
    event.mutable_failed()->set_job_id(culprit);
  } else {
    event.mutable_failed()->set_reason(
        "gang g77 failed: member 2/4 (job 1002 on host gpu-02) exited " +
        std::to_string(exit->exit_code()) + " at 10:42:13 UTC; stopping");
    event.mutable_failed()->set_job_id(exit->job_id());
  }
  writer->Write(event);
  return grpc::Status::OK;
}

grpc::Status FakeCoordinator::LeaveGang(grpc::ServerContext*,
                                        const v1::LeaveGangRequest* request,
                                        v1::LeaveGangResponse*) {
  MutexLock lock(mu_);
  leaves_.push_back(*request);
  if (leave_refusals_ > 0) {
    --leave_refusals_;
    return leave_refusal_;
  }
  return grpc::Status::OK;
}

grpc::Status FakeCoordinator::GetPeers(grpc::ServerContext*,
                                       const v1::GetPeersRequest* request,
                                       v1::GetPeersResponse* response) {
  MutexLock lock(mu_);
  peer_requests_.push_back(*request);
  *response = peers_;
  return grpc::Status::OK;
}

void FakeCoordinator::ReregisterOnNextHeartbeat() {
  MutexLock lock(mu_);
  reregister_next_ = true;
}

void FakeCoordinator::set_assignment(const v1::Assignment& assignment) {
  MutexLock lock(mu_);
  assignment_ = assignment;
}

v1::Assignment FakeCoordinator::assignment() {
  MutexLock lock(mu_);
  return assignment_;
}

void FakeCoordinator::set_peers(const v1::GetPeersResponse& peers) {
  MutexLock lock(mu_);
  peers_ = peers;
}

void FakeCoordinator::set_reject(const grpc::Status& status) {
  MutexLock lock(mu_);
  reject_ = status;
}

void FakeCoordinator::set_refusals(int count, const grpc::Status& status,
                                   milliseconds retry_after) {
  MutexLock lock(mu_);
  refusals_ = count;
  refusal_ = status;
  refusal_retry_after_ = retry_after;
}

void FakeCoordinator::set_leave_refusals(int count,
                                         const grpc::Status& status) {
  MutexLock lock(mu_);
  leave_refusals_ = count;
  leave_refusal_ = status;
}

void FakeCoordinator::set_watch(WatchMode mode, const std::string& reason,
                                int64_t culprit, milliseconds delay) {
  MutexLock lock(mu_);
  watch_mode_ = mode;
  watch_reason_ = reason;
  watch_culprit_ = culprit;
  watch_delay_ = delay;
}

bool FakeCoordinator::WaitFor(size_t registrations, size_t heartbeats,
                              milliseconds timeout) {
  const auto deadline = steady_clock::now() + timeout;
  MutexLock lock(mu_);
  while (registrations_.size() < registrations ||
         heartbeats_.size() < heartbeats) {
    if (!changed_.WaitUntil(mu_, deadline) && steady_clock::now() >= deadline) {
      return false;
    }
  }
  return true;
}

std::vector<v1::ReportExitRequest> FakeCoordinator::WaitForExits(
    size_t count, milliseconds timeout) {
  const auto deadline = steady_clock::now() + timeout;
  MutexLock lock(mu_);
  while (exits_.size() < count && steady_clock::now() < deadline) {
    changed_.WaitUntil(mu_, deadline);
  }
  return exits_;
}

std::vector<v1::HostSpec> FakeCoordinator::registrations() {
  MutexLock lock(mu_);
  return registrations_;
}

std::vector<std::string> FakeCoordinator::heartbeats() {
  MutexLock lock(mu_);
  return heartbeats_;
}

std::vector<v1::ReportExitRequest> FakeCoordinator::exits() {
  MutexLock lock(mu_);
  return exits_;
}

std::vector<v1::JoinGangRequest> FakeCoordinator::joins() {
  MutexLock lock(mu_);
  return joins_;
}

std::vector<steady_clock::time_point> FakeCoordinator::join_times() {
  MutexLock lock(mu_);
  return join_times_;
}

std::vector<v1::WatchGangRequest> FakeCoordinator::watches() {
  MutexLock lock(mu_);
  return watches_;
}

std::vector<v1::LeaveGangRequest> FakeCoordinator::leaves() {
  MutexLock lock(mu_);
  return leaves_;
}

std::vector<v1::GetPeersRequest> FakeCoordinator::peer_requests() {
  MutexLock lock(mu_);
  return peer_requests_;
}

}  // namespace gdt::test
