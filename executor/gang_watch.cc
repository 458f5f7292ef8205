#include "executor/gang_watch.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/log_throttle.h"
#include "common/logging.h"
#include "executor/stage_support.h"
#include "spdlog/spdlog.h"

namespace gdt::executor {
namespace {

// The watch lives as long as the stage; the job's own timeout ends it much
// sooner. Every RPC carries a deadline, so this one does too.
constexpr std::chrono::hours kWatchDeadline{7 * 24};
// At most one reconnect line per this long in the job log.
constexpr std::chrono::seconds kReconnectLogInterval{30};

}  // namespace

GangWatch::GangWatch(const std::string& endpoint,
                     const v1::WatchGangRequest& request,
                     const rendezvous::ClientSecurity& security,
                     const JobCredentials& credentials) {
  thread_ = std::thread([this, endpoint, request, security, credentials] {
    Run(endpoint, request, security, credentials);
  });
}

GangWatch::~GangWatch() {
  canceller_.Cancel();
  if (thread_.joinable()) thread_.join();
}

void GangWatch::Run(const std::string& endpoint,
                    const v1::WatchGangRequest& request,
                    const rendezvous::ClientSecurity& security,
                    const JobCredentials& credentials) {
  rendezvous::CoordinatorClient coordinator(endpoint, security);
  PresentCredentials(coordinator, credentials);
  absl::StatusOr<v1::WatchGangEvent> last = coordinator.WatchGang(
      request, std::chrono::system_clock::now() + kWatchDeadline,
      [this](const v1::WatchGangEvent& event) {
        MutexLock lock(mu_);
        if (event.has_running()) {
          unfinished_.assign(event.running().unfinished_indices().begin(),
                             event.running().unfinished_indices().end());
        } else if (event.has_failed()) {
          fate_ = Fate::kFailed;
          failure_reason_ = event.failed().reason();
          failed_job_id_ = event.failed().job_id();
          collect_evidence_ = event.failed().collect_evidence();
          preempted_ = event.failed().preempted();
        } else if (event.has_succeeded()) {
          fate_ = Fate::kSucceeded;
          unfinished_.clear();
        }
        changed_.NotifyAll();
      },
      [&request, throttle = LogThrottle(kReconnectLogInterval)](
          const absl::Status& status) mutable {
        // The job log gets the first attempt, then one line per interval.
        std::optional<uint64_t> attempts =
            throttle.Occur(std::chrono::steady_clock::now());
        if (!attempts.has_value()) return;
        spdlog::warn(
            "event=gang_watch_reconnecting gang={} attempts={} error={}",
            LogValue(request.gang_id()), *attempts,
            LogValue(status.ToString()));
      },
      canceller_);
  MutexLock lock(mu_);
  ended_ = true;
  if (!last.ok() &&
      last.status().code() == absl::StatusCode::kFailedPrecondition &&
      fate_ == Fate::kUnknown) {
    // The coordinator no longer takes this member: a newer epoch of the
    // gang replaced it (fenced), or the gang ended. Stop like a peer failure.
    spdlog::warn("event=gang_watch_rejected gang={} error={}",
                 LogValue(request.gang_id()),
                 LogValue(last.status().ToString()));
    fate_ = Fate::kFailed;
    failure_reason_ = absl::StrCat("member ", request.member_index(), " (job ",
                                   request.job_id(),
                                   ") is fenced: ", last.status().message());
  } else if (!last.ok() &&
             last.status().code() != absl::StatusCode::kCancelled) {
    spdlog::warn("event=gang_watch_ended gang={} error={}",
                 LogValue(request.gang_id()),
                 LogValue(last.status().ToString()));
    error_ = last.status();
  }
  changed_.NotifyAll();
}

GangWatch::Fate GangWatch::fate() {
  MutexLock lock(mu_);
  return fate_;
}

std::string GangWatch::failure_reason() {
  MutexLock lock(mu_);
  return failure_reason_;
}

int64_t GangWatch::failed_job_id() {
  MutexLock lock(mu_);
  return failed_job_id_;
}

bool GangWatch::collect_evidence() {
  MutexLock lock(mu_);
  return collect_evidence_;
}

bool GangWatch::preempted() {
  MutexLock lock(mu_);
  return preempted_;
}

std::vector<uint32_t> GangWatch::unfinished() {
  MutexLock lock(mu_);
  return unfinished_;
}

absl::Status GangWatch::error() {
  MutexLock lock(mu_);
  return error_;
}

GangWatch::Fate GangWatch::WaitForFate(
    std::chrono::steady_clock::time_point deadline,
    const std::function<bool()>& stop) {
  MutexLock lock(mu_);
  while (fate_ == Fate::kUnknown && !ended_) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) break;
    if (stop && stop()) break;
    changed_.WaitUntil(mu_,
                       std::min(deadline, now + std::chrono::milliseconds(50)));
  }
  return fate_;
}

}  // namespace gdt::executor
