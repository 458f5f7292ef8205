#include "agent/lost_reporter.h"

#include <utility>

#include "common/logging.h"
#include "spdlog/spdlog.h"

namespace gdt::agent {

LostMemberReporter::LostMemberReporter(rendezvous::CoordinatorClient& client,
                                       std::chrono::milliseconds timeout)
    : client_(client), timeout_(timeout), thread_([this] { Run(); }) {}

LostMemberReporter::~LostMemberReporter() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  changed_.NotifyAll();
  thread_.join();
}

void LostMemberReporter::Report(v1::ReportExitRequest request) {
  {
    MutexLock lock(mu_);
    queue_.push_back(std::move(request));
  }
  changed_.NotifyAll();
}

void LostMemberReporter::Run() {
  while (true) {
    v1::ReportExitRequest request;
    {
      MutexLock lock(mu_);
      while (queue_.empty() && !stopping_) changed_.Wait(mu_);
      if (queue_.empty()) return;
      request = std::move(queue_.front());
      queue_.pop_front();
    }
    absl::Status status = client_.ReportExit(request, timeout_);
    if (status.ok()) {
      spdlog::warn(
          "event=member_lost_reported gang={} member={} job={} reason={}",
          LogValue(request.gang_id()), request.member_index(), request.job_id(),
          LogValue(request.lost_reason()));
    } else {
      spdlog::warn(
          "event=member_lost_report_failed gang={} member={} job={} error={}",
          LogValue(request.gang_id()), request.member_index(), request.job_id(),
          LogValue(status.ToString()));
    }
  }
}

}  // namespace gdt::agent
