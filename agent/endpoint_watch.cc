#include "agent/endpoint_watch.h"

#include <dirent.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "gdt/v1/agent.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "rendezvous/grpc_status.h"
#include "spdlog/spdlog.h"

namespace gdt::agent {

absl::Status ProbeAgentEndpoint(const std::string& endpoint,
                                const rendezvous::ClientSecurity& security,
                                const std::string& tls_target_name,
                                std::chrono::milliseconds deadline) {
  // Out of descriptors: say so plainly (gRPC's error names no cause), and
  // leave gRPC and the sanitizers, which need descriptors too, out of it.
  const int spare = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (spare < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot open a socket: ", std::strerror(errno)));
  }
  close(spare);
  grpc::ChannelArguments args;
  // A connection of its own: a pooled one, made before the listener broke,
  // would still answer.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
  if (security.tls() && !tls_target_name.empty()) {
    args.SetSslTargetNameOverride(tls_target_name);
  }
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(
      endpoint,
      security.tls() ? security.credentials
                     : grpc::InsecureChannelCredentials(),
      args);
  v1::Agent::Stub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + deadline);
  v1::CheckPortRequest request;  // Port 0: refused at once, nothing done.
  v1::CheckPortResponse response;
  const grpc::Status status = stub.CheckPort(&context, request, &response);
  if (status.error_code() != grpc::StatusCode::UNAVAILABLE &&
      status.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
    return absl::OkStatus();
  }
  const absl::Status failed = rendezvous::ExplainConnectFailure(
      rendezvous::FromGrpcStatus(status), "agent", endpoint, security);
  // A TLS handshake needs a server that accepted and answered.
  if (rendezvous::IsTlsHandshakeFailure(failed)) return absl::OkStatus();
  return failed;
}

std::string OpenFilesSummary() {
  rlimit limit{};
  const std::string of =
      getrlimit(RLIMIT_NOFILE, &limit) == 0
          ? absl::StrCat(" of ", static_cast<uint64_t>(limit.rlim_cur))
          : "";
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) {
    return absl::StrCat("open files: cannot count (", std::strerror(errno), ")",
                        of.empty() ? "" : absl::StrCat("; limit", of));
  }
  uint64_t count = 0;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return absl::StrCat("open files ", count > 0 ? count - 1 : 0, of);
}

EndpointWatch::EndpointWatch(std::string endpoint, Options options, Probe probe,
                             Recover recover)
    : endpoint_(std::move(endpoint)),
      options_(options),
      probe_(std::move(probe)),
      recover_(std::move(recover)) {}

EndpointWatch::~EndpointWatch() { Stop(); }

void EndpointWatch::Start() {
  thread_ = std::thread([this] { Run(); });
}

void EndpointWatch::Stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
    wake_.NotifyAll();
  }
  if (thread_.joinable()) thread_.join();
}

std::string EndpointWatch::NotReadyReason() const {
  MutexLock lock(mu_);
  return reason_;
}

void EndpointWatch::Run() {
  int failed_in_row = 0;
  while (true) {
    {
      MutexLock lock(mu_);
      const auto deadline =
          std::chrono::steady_clock::now() + options_.interval;
      while (!stopping_ && std::chrono::steady_clock::now() < deadline) {
        wake_.WaitUntil(mu_, deadline);
      }
      if (stopping_) return;
    }
    const absl::Status probed = probe_();
    if (probed.ok()) {
      failed_in_row = 0;
      MutexLock lock(mu_);
      if (!reason_.empty()) {
        spdlog::info("event=agent_endpoint_answers endpoint={} action={}",
                     LogValue(endpoint_),
                     LogValue("ready: takes new members again"));
        reason_.clear();
      }
      continue;
    }
    if (++failed_in_row < options_.failures) continue;
    std::string reason =
        absl::StrCat("its agent endpoint ", endpoint_,
                     " does not answer the agent's own check (",
                     probed.message(), "; ", OpenFilesSummary(), ")");
    {
      MutexLock lock(mu_);
      if (reason_.empty()) {
        spdlog::error(
            "event=agent_endpoint_unanswered endpoint={} error={} action={}",
            LogValue(endpoint_), LogValue(reason),
            LogValue("not ready: heartbeats tell the coordinator to place no "
                     "new gang here until it answers again"));
      }
    }
    if (recover_ && failed_in_row >= options_.recover_after) {
      if (absl::Status recovered = recover_(); !recovered.ok()) {
        absl::StrAppend(&reason, "; ", recovered.message());
      }
    }
    MutexLock lock(mu_);
    reason_ = std::move(reason);
  }
}

}  // namespace gdt::agent
