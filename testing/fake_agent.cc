#include "testing/fake_agent.h"

#include <csignal>
#include <thread>

namespace gdt::test {
namespace {

void Send(
    grpc::ServerReaderWriter<v1::RunStageResponse, v1::RunStageRequest>* stream,
    v1::OutputStream which, const std::string& data) {
  v1::RunStageResponse response;
  response.mutable_output()->set_stream(which);
  response.mutable_output()->set_data(data);
  stream->Write(response);
}

}  // namespace

grpc::Status FakeAgent::CheckPort(grpc::ServerContext*,
                                  const v1::CheckPortRequest* request,
                                  v1::CheckPortResponse* response) {
  response->set_free(busy_ports_.count(request->port()) == 0);
  return grpc::Status::OK;
}

grpc::Status FakeAgent::SetupMember(grpc::ServerContext*,
                                    const v1::SetupMemberRequest* request,
                                    v1::SetupMemberResponse*) {
  MutexLock lock(mu_);
  setups_.push_back(*request);
  return grpc::Status::OK;
}

grpc::Status FakeAgent::RunStage(
    grpc::ServerContext*,
    grpc::ServerReaderWriter<v1::RunStageResponse, v1::RunStageRequest>*
        stream) {
  v1::RunStageRequest request;
  if (!stream->Read(&request) || !request.has_start()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no start");
  }
  int exit_code = 0;
  bool wait_for_signal = false;
  std::chrono::milliseconds duration(0);
  {
    MutexLock lock(mu_);
    starts_.push_back(request.start());
    if (!stage_refusal_.ok()) return stage_refusal_;
    exit_code = exit_code_;
    wait_for_signal = wait_for_signal_;
    duration = stage_duration_;
  }
  std::string echo;
  for (const auto& [key, value] : request.start().env()) {
    echo += key + "=" + value + "\n";
  }
  for (const v1::StageFile& file : request.start().files()) {
    echo += file.env_var() + "=<" + file.content() + ">\n";
  }
  Send(stream, v1::OUTPUT_STREAM_STDOUT, echo);
  Send(stream, v1::OUTPUT_STREAM_STDERR, "stderr line\n");
  if (wait_for_signal) {
    while (stream->Read(&request)) {
      if (request.has_signal()) {
        MutexLock lock(mu_);
        signals_.push_back(request.signal().signal());
        exit_code = 128 + SIGTERM;
        break;
      }
    }
  }
  // The stage's own run time, like a short script's.
  if (duration.count() > 0) std::this_thread::sleep_for(duration);
  v1::RunStageResponse exit;
  exit.mutable_exit()->set_exit_code(exit_code);
  stream->Write(exit);
  return grpc::Status::OK;
}

grpc::Status FakeAgent::TeardownMember(grpc::ServerContext*,
                                       const v1::TeardownMemberRequest* request,
                                       v1::TeardownMemberResponse*) {
  MutexLock lock(mu_);
  teardowns_.push_back(*request);
  return grpc::Status::OK;
}

void FakeAgent::set_exit_code(int code) {
  MutexLock lock(mu_);
  exit_code_ = code;
}

void FakeAgent::set_wait_for_signal(bool wait) {
  MutexLock lock(mu_);
  wait_for_signal_ = wait;
}

void FakeAgent::set_stage_duration(std::chrono::milliseconds duration) {
  MutexLock lock(mu_);
  stage_duration_ = duration;
}

void FakeAgent::set_stage_refusal(grpc::Status refusal) {
  MutexLock lock(mu_);
  stage_refusal_ = std::move(refusal);
}

std::vector<v1::SetupMemberRequest> FakeAgent::setups() {
  MutexLock lock(mu_);
  return setups_;
}

std::vector<v1::StartStage> FakeAgent::starts() {
  MutexLock lock(mu_);
  return starts_;
}

std::vector<v1::Signal> FakeAgent::signals() {
  MutexLock lock(mu_);
  return signals_;
}

grpc::Status FakeAgent::ExecInMember(
    grpc::ServerContext* context, const v1::ExecInMemberRequest* /*request*/,
    grpc::ServerWriter<v1::ExecInMemberResponse>* writer) {
  v1::ExecInMemberResponse response;
  response.mutable_output()->set_stream(v1::OUTPUT_STREAM_STDOUT);
  response.mutable_output()->set_data("running\n");
  writer->Write(response);
  const auto give_up =
      std::chrono::steady_clock::now() + std::chrono::minutes(1);
  while (!context->IsCancelled() &&
         std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (context->IsCancelled()) {
    MutexLock lock(mu_);
    ++exec_cancels_;
    return grpc::Status::CANCELLED;
  }
  response.mutable_exit()->set_exit_code(0);
  writer->Write(response);
  return grpc::Status::OK;
}

int FakeAgent::exec_cancels() {
  MutexLock lock(mu_);
  return exec_cancels_;
}

std::vector<v1::TeardownMemberRequest> FakeAgent::teardowns() {
  MutexLock lock(mu_);
  return teardowns_;
}

}  // namespace gdt::test
