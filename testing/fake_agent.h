#ifndef GDT_TESTING_FAKE_AGENT_H_
#define GDT_TESTING_FAKE_AGENT_H_

// A real gRPC Agent service for the coordinator's port checks and the
// executor's stages. RunStage echoes the stage's environment and files to
// stdout (one "KEY=VALUE" line each, files as "VAR=<content>"), writes
// "stderr line" to stderr and exits with the set exit code; when set to wait
// for a signal, it first waits for one and exits 128+15; when given a stage
// duration, its stages take that long (as a short script would) before they
// exit. Records every request. Thread-safe.

#include <chrono>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "gdt/v1/agent.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "testing/loopback_server.h"

namespace gdt::test {

class FakeAgent final : public v1::Agent::Service {
 public:
  // CheckPort answers "busy" for `busy_ports`, "free" for every other port.
  explicit FakeAgent(std::set<uint32_t> busy_ports = {})
      : busy_ports_(std::move(busy_ports)) {}
  ~FakeAgent() override { Stop(); }

  // Serves on `address` (port 0: the kernel picks one); returns
  // "127.0.0.1:<port>", or "" when it cannot listen.
  std::string Serve(const std::string& address = "127.0.0.1:0") {
    return serving_.Serve(this, address);
  }
  void Stop() { serving_.Stop(); }

  grpc::Status CheckPort(grpc::ServerContext* context,
                         const v1::CheckPortRequest* request,
                         v1::CheckPortResponse* response) override;
  grpc::Status SetupMember(grpc::ServerContext* context,
                           const v1::SetupMemberRequest* request,
                           v1::SetupMemberResponse* response) override;
  grpc::Status RunStage(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::RunStageResponse, v1::RunStageRequest>*
          stream) override;
  grpc::Status TeardownMember(grpc::ServerContext* context,
                              const v1::TeardownMemberRequest* request,
                              v1::TeardownMemberResponse* response) override;
  // Writes "running\n" to stdout, then waits (at most a minute) until the
  // client cancels the call, which exec_cancels() counts; exits 0 otherwise.
  grpc::Status ExecInMember(
      grpc::ServerContext* context, const v1::ExecInMemberRequest* request,
      grpc::ServerWriter<v1::ExecInMemberResponse>* writer) override;

  void set_exit_code(int code);
  void set_wait_for_signal(bool wait);
  void set_stage_duration(std::chrono::milliseconds duration);
  // RunStage records the start, then ends with `refusal` (OK: runs it).
  void set_stage_refusal(grpc::Status refusal);
  std::vector<v1::SetupMemberRequest> setups();
  std::vector<v1::StartStage> starts();
  std::vector<v1::Signal> signals();
  std::vector<v1::TeardownMemberRequest> teardowns();
  int exec_cancels();

 private:
  const std::set<uint32_t> busy_ports_;
  Mutex mu_;
  int exit_code_ ABSL_GUARDED_BY(mu_) = 0;
  bool wait_for_signal_ ABSL_GUARDED_BY(mu_) = false;
  std::chrono::milliseconds stage_duration_ ABSL_GUARDED_BY(mu_){0};
  grpc::Status stage_refusal_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::SetupMemberRequest> setups_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::StartStage> starts_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::Signal> signals_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::TeardownMemberRequest> teardowns_ ABSL_GUARDED_BY(mu_);
  int exec_cancels_ ABSL_GUARDED_BY(mu_) = 0;
  LoopbackServing serving_;
};

}  // namespace gdt::test

#endif  // GDT_TESTING_FAKE_AGENT_H_
