#include "rendezvous/agent_client.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "grpcpp/grpcpp.h"
#include "rendezvous/channel.h"
#include "rendezvous/grpc_status.h"

namespace gdt::rendezvous {
namespace {

// How often RunStage asks its caller for a signal to forward.
constexpr std::chrono::milliseconds kSignalPoll(50);

}  // namespace

AgentClient::AgentClient(const std::string& endpoint)
    : AgentClient(endpoint, ClientSecurity()) {}

AgentClient::AgentClient(const std::string& endpoint,
                         const ClientSecurity& security)
    : endpoint_(endpoint),
      security_(security),
      channel_(NewLiveChannel(endpoint, security)),
      stub_(v1::Agent::NewStub(channel_)) {}

absl::Status AgentClient::Convert(const grpc::Status& status) const {
  return ExplainConnectFailure(FromGrpcStatus(status), "agent", endpoint_,
                               security_);
}

void AgentClient::AddMetadata(std::string key, std::string value) {
  metadata_.emplace_back(std::move(key), std::move(value));
}

void AgentClient::AddMetadataTo(grpc::ClientContext& context) const {
  for (const auto& [key, value] : metadata_) context.AddMetadata(key, value);
}

absl::Status AgentClient::SetupMember(const v1::SetupMemberRequest& request,
                                      std::chrono::milliseconds timeout) {
  grpc::ClientContext context;
  AddMetadataTo(context);
  context.set_deadline(DeadlineIn(timeout));
  // Idempotent, and the first call of every stage: ride out a connection
  // that a loaded host is slow to establish instead of failing the stage.
  context.set_wait_for_ready(true);
  v1::SetupMemberResponse response;
  return Convert(stub_->SetupMember(&context, request, &response));
}

absl::Status AgentClient::WaitUntilReachable(
    std::chrono::milliseconds timeout) {
  if (channel_->WaitForConnected(DeadlineIn(timeout))) return absl::OkStatus();
  return Convert(grpc::Status(
      grpc::StatusCode::UNAVAILABLE,
      absl::StrCat("no connection within ", timeout.count(), " ms")));
}

absl::StatusOr<v1::StageExit> AgentClient::RunStage(
    const v1::StartStage& start,
    const std::function<void(v1::OutputStream, std::string_view)>& on_output,
    const std::function<std::optional<v1::Signal>()>& poll_signal,
    const std::function<void(const v1::HangDetected&)>& on_hang) {
  grpc::ClientContext context;
  AddMetadataTo(context);
  // Fail fast when the agent is down instead of queueing the stage.
  context.set_wait_for_ready(false);
  std::shared_ptr<
      grpc::ClientReaderWriter<v1::RunStageRequest, v1::RunStageResponse>>
      stream = stub_->RunStage(&context);
  v1::RunStageRequest first;
  *first.mutable_start() = start;
  if (!stream->Write(first)) {
    // Finish() may be called once only; it carries the reason.
    absl::Status status = Convert(stream->Finish());
    if (status.ok())
      return absl::UnavailableError("agent closed the stage stream");
    return status;
  }

  // gRPC allows one reader and one writer at a time on a stream, so signals
  // are written from a helper thread while this thread reads. The helper
  // looks every kSignalPoll and is woken at once when the stage ends, so the
  // call returns as soon as the exit is read.
  Mutex mu;
  CondVar ended;
  bool done = false;
  std::thread signaller;
  if (poll_signal) {
    signaller = std::thread([&] {
      while (true) {
        {
          MutexLock lock(mu);
          if (done) return;
        }
        if (std::optional<v1::Signal> signal = poll_signal()) {
          v1::RunStageRequest message;
          message.mutable_signal()->set_signal(*signal);
          if (!stream->Write(message)) return;
        }
        MutexLock lock(mu);
        const auto next = std::chrono::steady_clock::now() + kSignalPoll;
        while (!done && std::chrono::steady_clock::now() < next) {
          ended.WaitUntil(mu, next);
        }
      }
    });
  }

  std::optional<v1::StageExit> exit;
  v1::RunStageResponse response;
  while (stream->Read(&response)) {
    if (response.has_output()) {
      if (on_output) {
        on_output(response.output().stream(), response.output().data());
      }
    } else if (response.has_exit()) {
      exit = response.exit();
    } else if (response.has_hang()) {
      if (on_hang) on_hang(response.hang());
    }
  }
  {
    MutexLock lock(mu);
    done = true;
    ended.NotifyAll();
  }
  if (signaller.joinable()) signaller.join();
  stream->WritesDone();
  absl::Status status = Convert(stream->Finish());
  if (exit.has_value()) return *exit;
  if (status.ok()) {
    return absl::UnavailableError("agent ended the stage without an exit code");
  }
  return status;
}

absl::StatusOr<uint32_t> AgentClient::TeardownMember(
    const v1::TeardownMemberRequest& request,
    std::chrono::milliseconds timeout) {
  grpc::ClientContext context;
  AddMetadataTo(context);
  context.set_deadline(DeadlineIn(timeout));
  v1::TeardownMemberResponse response;
  absl::Status status =
      Convert(stub_->TeardownMember(&context, request, &response));
  if (!status.ok()) return status;
  return response.processes_killed();
}

absl::StatusOr<bool> AgentClient::CheckPort(uint32_t port,
                                            std::chrono::milliseconds timeout) {
  grpc::ClientContext context;
  AddMetadataTo(context);
  context.set_deadline(DeadlineIn(timeout));
  v1::CheckPortRequest request;
  request.set_port(port);
  v1::CheckPortResponse response;
  absl::Status status = Convert(stub_->CheckPort(&context, request, &response));
  if (!status.ok()) return status;
  return response.free();
}

absl::StatusOr<v1::StageExit> AgentClient::ExecInMember(
    const v1::ExecInMemberRequest& request,
    const std::function<void(v1::OutputStream, std::string_view)>& on_output,
    const std::function<bool()>& stop) {
  grpc::ClientContext context;
  AddMetadataTo(context);
  // Watches `stop` while the stream is read; ends when the call is over.
  Mutex mu;
  CondVar call_over;
  bool done = false;
  std::atomic<bool> cancelled{false};
  std::thread watcher;
  if (stop != nullptr) {
    watcher = std::thread([&] {
      MutexLock lock(mu);
      while (!done) {
        if (stop()) {
          cancelled = true;
          context.TryCancel();
          return;
        }
        call_over.WaitUntil(mu, std::chrono::steady_clock::now() +
                                    std::chrono::milliseconds(50));
      }
    });
  }
  std::unique_ptr<grpc::ClientReader<v1::ExecInMemberResponse>> reader =
      stub_->ExecInMember(&context, request);
  v1::ExecInMemberResponse response;
  std::optional<v1::StageExit> exit;
  while (reader->Read(&response)) {
    if (response.has_output()) {
      on_output(response.output().stream(), response.output().data());
    } else if (response.has_exit()) {
      exit = response.exit();
    }
  }
  absl::Status status = Convert(reader->Finish());
  if (watcher.joinable()) {
    {
      MutexLock lock(mu);
      done = true;
    }
    call_over.NotifyAll();
    watcher.join();
  }
  if (cancelled && !exit.has_value()) {
    return absl::CancelledError("the command was stopped");
  }
  if (!status.ok()) return status;
  if (!exit.has_value()) {
    return absl::UnavailableError(absl::StrCat(
        "agent ", endpoint_, " ended the command without an exit status"));
  }
  return *exit;
}

}  // namespace gdt::rendezvous
