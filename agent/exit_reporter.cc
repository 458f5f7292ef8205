#include "agent/exit_reporter.h"

#include <utility>

#include "common/backoff.h"
#include "common/logging.h"
#include "spdlog/spdlog.h"

namespace gdt::agent {
namespace {

// The last try at shutdown is short: what it cannot send stays on disk.
constexpr std::chrono::milliseconds kLastTry(1000);

}  // namespace

v1::ReportExitRequest ToReportExit(const ExitRecord& record) {
  v1::ReportExitRequest request;
  request.set_gang_id(record.gang_id);
  request.set_epoch(record.epoch);
  request.set_member_index(record.member_index);
  request.set_job_id(record.job_id);
  request.set_exit_code(record.exit_code);
  request.set_cancelled(record.cancelled);
  request.set_lost_reason(record.lost_reason);
  request.set_peer_suspected(record.peer_suspected);
  request.set_exited_unix_ms(record.exited_unix_ms);
  return request;
}

bool IsRetryable(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kInternal:  // E.g. the state store was busy.
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kCancelled:
      return true;
    default:
      return false;
  }
}

ExitReporter::ExitReporter(ExitOutbox& outbox,
                           rendezvous::CoordinatorClient& client,
                           Options options)
    : outbox_(outbox),
      client_(client),
      options_(options),
      thread_([this] { Run(); }) {}

ExitReporter::~ExitReporter() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  changed_.NotifyAll();
  thread_.join();
}

void ExitReporter::Report(const ExitRecord& record) {
  if (absl::Status kept = outbox_.Add(record); !kept.ok()) {
    spdlog::warn("event=exit_record_not_persisted gang={} job={} error={}",
                 LogValue(record.gang_id), record.job_id,
                 LogValue(kept.ToString()));
  }
  {
    MutexLock lock(mu_);
    pending_ = true;
  }
  changed_.NotifyAll();
}

bool ExitReporter::SendAll() {
  bool stopping = false;
  {
    MutexLock lock(mu_);
    stopping = stopping_;
  }
  for (const ExitRecord& record : outbox_.Pending()) {
    const absl::Status status = client_.ReportExit(
        ToReportExit(record), stopping ? kLastTry : options_.rpc_timeout);
    if (!status.ok() && IsRetryable(status)) {
      spdlog::debug("event=exit_report_deferred gang={} job={} error={}",
                    LogValue(record.gang_id), record.job_id,
                    LogValue(status.ToString()));
      return false;
    }
    if (status.ok()) {
      spdlog::info(
          "event=exit_delivered gang={} epoch={} member={} job={} code={} "
          "lost={}",
          LogValue(record.gang_id), record.epoch, record.member_index,
          record.job_id, record.exit_code, !record.lost_reason.empty());
    } else {
      spdlog::warn(
          "event=exit_report_dropped gang={} epoch={} member={} job={} "
          "error={}",
          LogValue(record.gang_id), record.epoch, record.member_index,
          record.job_id, LogValue(status.ToString()));
    }
    outbox_.Remove(record.Key());
  }
  return true;
}

void ExitReporter::Run() {
  Backoff backoff({options_.initial_backoff, options_.max_backoff,
                   Backoff::Jitter::kDecorrelated});
  std::chrono::steady_clock::time_point next_try{};
  bool unreachable = false;
  while (true) {
    bool last = false;
    {
      MutexLock lock(mu_);
      while (!stopping_ &&
             !(pending_ && std::chrono::steady_clock::now() >= next_try)) {
        if (pending_) {
          changed_.WaitUntil(mu_, next_try);
        } else {
          changed_.Wait(mu_);
        }
      }
      last = stopping_;
      pending_ = false;
    }
    if (outbox_.size() > 0) {
      if (SendAll()) {
        if (unreachable) spdlog::info("event=exit_reports_resumed");
        unreachable = false;
        backoff.Reset();
      } else {
        if (!unreachable) {
          spdlog::warn(
              "event=exit_reports_waiting records={} reason={}", outbox_.size(),
              LogValue("the coordinator is unreachable; retrying until it "
                       "acknowledges them"));
        }
        unreachable = true;
        MutexLock lock(mu_);
        pending_ = true;
        next_try = std::chrono::steady_clock::now() + backoff.Next();
      }
    }
    if (last) return;
  }
}

}  // namespace gdt::agent
