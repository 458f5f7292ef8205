#include "agent/registrar.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "common/backoff.h"
#include "common/logging.h"
#include "spdlog/spdlog.h"

namespace gdt::agent {

using std::chrono::milliseconds;
using std::chrono::seconds;

Registrar::Registrar(rendezvous::CoordinatorClient& client, v1::HostSpec host,
                     Options options, RunningMembers running_members,
                     WatchedProgress watched_progress, IdleMembers idle_members,
                     NotReady not_ready)
    : client_(client),
      host_(std::move(host)),
      options_(options),
      running_members_(std::move(running_members)),
      watched_progress_(std::move(watched_progress)),
      idle_members_(std::move(idle_members)),
      not_ready_(std::move(not_ready)) {}

Registrar::~Registrar() { Stop(); }

void Registrar::Start() {
  thread_ = std::thread([this] { Run(); });
}

void Registrar::Stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
    wake_.NotifyAll();
  }
  if (thread_.joinable()) thread_.join();
}

bool Registrar::Sleep(milliseconds duration) {
  const auto deadline = std::chrono::steady_clock::now() + duration;
  MutexLock lock(mu_);
  while (!stopping_ && std::chrono::steady_clock::now() < deadline) {
    wake_.WaitUntil(mu_, deadline);
  }
  return !stopping_;
}

void Registrar::Run() {
  const std::string& name = host_.name();
  // Whether the coordinator answered the last call; logs only on a change.
  bool reachable = true;
  Backoff backoff({options_.initial_backoff, options_.max_backoff,
                   Backoff::Jitter::kDecorrelated});
  while (true) {
    {
      MutexLock lock(mu_);
      if (stopping_) return;
    }
    absl::StatusOr<uint32_t> interval =
        client_.RegisterHost(host_, options_.rpc_timeout);
    if (!interval.ok()) {
      if (interval.status().code() == absl::StatusCode::kUnauthenticated ||
          interval.status().code() == absl::StatusCode::kPermissionDenied) {
        // The coordinator refused this host's token or certificate; keep
        // asking (an operator may issue a new one) but say so every time.
        spdlog::error(
            "event=host_refused coordinator={} host={} error={} action={}",
            LogValue(client_.endpoint()), LogValue(name),
            LogValue(std::string(interval.status().message())),
            LogValue("fix host_token_file or tls.cert_file in the agent "
                     "config, as the error says"));
        reachable = false;
        if (!Sleep(options_.max_backoff)) return;
        continue;
      }
      if (reachable) {
        spdlog::warn(
            "event=register_failed host={} coordinator={} error={} "
            "action=retry",
            LogValue(name), LogValue(client_.endpoint()),
            LogValue(interval.status().ToString()));
      }
      reachable = false;
      if (!Sleep(backoff.Next())) return;
      continue;
    }
    reachable = true;
    backoff.Reset();
    const seconds period(std::max<uint32_t>(*interval, 1));
    // Heartbeats go to the coordinator's liveness server when it has one.
    std::string liveness = client_.liveness_endpoint();
    spdlog::info(
        "event=host_registered host={} coordinator={} gpus={} heartbeat_s={} "
        "liveness={}",
        LogValue(name), LogValue(client_.endpoint()), host_.gpus_size(),
        period.count(), LogValue(liveness.empty() ? "main port" : liveness));

    while (Sleep(period)) {
      std::optional<std::vector<std::string>> members;
      if (running_members_) members = running_members_();
      std::vector<v1::MemberProgress> progress;
      if (watched_progress_) progress = watched_progress_();
      std::vector<std::string> idle;
      if (idle_members_.list && idle_members_.members_left) {
        idle = idle_members_.list();
      }
      std::vector<std::string> left;
      const std::string not_ready = not_ready_ ? not_ready_() : "";
      absl::StatusOr<bool> reregister =
          client_.Heartbeat(name, options_.rpc_timeout, members, progress, idle,
                            &left, not_ready);
      if (reregister.ok() && !left.empty()) idle_members_.members_left(left);
      if (!liveness.empty() && client_.liveness_endpoint().empty()) {
        spdlog::warn(
            "event=liveness_port_unreachable host={} liveness={} action={}",
            LogValue(name), LogValue(liveness),
            LogValue("heartbeats go to the main port until the next "
                     "registration; open the coordinator's liveness port "
                     "(liveness_listen_address) to the agents"));
        liveness.clear();
      }
      if (!reregister.ok()) {
        if (reregister.status().code() == absl::StatusCode::kUnauthenticated ||
            reregister.status().code() == absl::StatusCode::kPermissionDenied) {
          spdlog::error(
              "event=heartbeat_refused coordinator={} host={} error={}",
              LogValue(client_.endpoint()), LogValue(name),
              LogValue(std::string(reregister.status().message())));
          reachable = false;
          break;  // Register again, which reports the refusal.
        }
        if (reachable) {
          spdlog::warn("event=heartbeat_failed host={} coordinator={} error={}",
                       LogValue(name), LogValue(client_.endpoint()),
                       LogValue(reregister.status().ToString()));
        }
        reachable = false;
        continue;
      }
      if (!reachable) {
        spdlog::info("event=coordinator_reachable host={} coordinator={}",
                     LogValue(name), LogValue(client_.endpoint()));
      }
      reachable = true;
      if (*reregister) {
        spdlog::info("event=reregister_requested host={}", LogValue(name));
        break;
      }
    }
  }
}

}  // namespace gdt::agent
