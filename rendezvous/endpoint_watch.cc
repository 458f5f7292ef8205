#include "rendezvous/endpoint_watch.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <future>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/open_files.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "rendezvous/grpc_status.h"
#include "spdlog/spdlog.h"

namespace gdt::rendezvous {

absl::Status ProbeEndpoint(const std::string& who, const std::string& endpoint,
                           const ClientSecurity& security,
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
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + deadline);
  // One empty slice (a ByteBuffer without one is refused as no message):
  // any message's defaults.
  const grpc::Slice empty;
  const grpc::ByteBuffer request(&empty, 1);
  grpc::ByteBuffer response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, kEndpointProbeMethod, grpc::StubOptions(), &request,
                 &response,
                 [&done](grpc::Status status) { done.set_value(status); });
  const grpc::Status status = done.get_future().get();
  if (status.error_code() != grpc::StatusCode::UNAVAILABLE &&
      status.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
    return absl::OkStatus();
  }
  const absl::Status failed =
      ExplainConnectFailure(FromGrpcStatus(status), who, endpoint, security);
  // A TLS handshake needs a server that accepted and answered.
  if (IsTlsHandshakeFailure(failed)) return absl::OkStatus();
  return failed;
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
        spdlog::info("event={}_endpoint_answers endpoint={} action={}",
                     options_.who, LogValue(endpoint_),
                     LogValue(options_.when_answered));
        reason_.clear();
      }
      continue;
    }
    if (++failed_in_row < options_.failures) continue;
    std::string reason =
        absl::StrCat("its ", options_.who, " endpoint ", endpoint_,
                     " does not answer the ", options_.who, "'s own check (",
                     probed.message(), "; ", OpenFilesSummary(), ")");
    {
      MutexLock lock(mu_);
      if (reason_.empty()) {
        spdlog::error(
            "event={}_endpoint_unanswered endpoint={} error={} action={}",
            options_.who, LogValue(endpoint_), LogValue(reason),
            LogValue(options_.while_unanswered));
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

}  // namespace gdt::rendezvous
