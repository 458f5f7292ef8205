#ifndef GDT_TESTING_FAKE_COORDINATOR_H_
#define GDT_TESTING_FAKE_COORDINATOR_H_

// A real gRPC Coordinator service that records what agents and executors
// tell it and answers from what the test set: for the agent's daemon
// (registration, heartbeats, exit reports) and the executor's stages
// (joins, watches, peers, leaves). Thread-safe.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "gdt/v1/coordinator.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "testing/loopback_server.h"

namespace gdt::test {

class FakeCoordinator final : public v1::Coordinator::Service {
 public:
  // What WatchGang streams.
  enum class WatchMode {
    // One Running event; after the first exit report (and the watch delay):
    // Succeeded for exit 0, unless a watch reason is set (then Failed with
    // it, naming the watch culprit); Failed naming the reporter otherwise.
    kFollowExits,
    kFailAtOnce,  // Failed with the watch reason and culprit at once.
    kNeverEnd,    // One Running event, then nothing until cancelled.
  };

  FakeCoordinator() = default;
  ~FakeCoordinator() override { Stop(); }

  // Serves on `address` (port 0: the kernel picks one); returns
  // "127.0.0.1:<port>", or "" when it cannot listen.
  std::string Serve(const std::string& address = "127.0.0.1:0") {
    return serving_.Serve(this, address);
  }
  void Stop() { serving_.Stop(); }

  // Records the host; asks for a heartbeat every second.
  grpc::Status RegisterHost(grpc::ServerContext* context,
                            const v1::RegisterHostRequest* request,
                            v1::RegisterHostResponse* response) override;
  // Records the host name; asks it to register again once after
  // ReregisterOnNextHeartbeat().
  grpc::Status Heartbeat(grpc::ServerContext* context,
                         const v1::HeartbeatRequest* request,
                         v1::HeartbeatResponse* response) override;
  grpc::Status ReportExit(grpc::ServerContext* context,
                          const v1::ReportExitRequest* request,
                          v1::ReportExitResponse* response) override;
  // One Waiting event, then Admitted with the set assignment; or the set
  // rejection.
  grpc::Status JoinGang(grpc::ServerContext* context,
                        const v1::JoinGangRequest* request,
                        grpc::ServerWriter<v1::JoinGangEvent>* writer) override;
  grpc::Status WatchGang(
      grpc::ServerContext* context, const v1::WatchGangRequest* request,
      grpc::ServerWriter<v1::WatchGangEvent>* writer) override;
  grpc::Status LeaveGang(grpc::ServerContext* context,
                         const v1::LeaveGangRequest* request,
                         v1::LeaveGangResponse* response) override;
  // Answers what set_peers() set.
  grpc::Status GetPeers(grpc::ServerContext* context,
                        const v1::GetPeersRequest* request,
                        v1::GetPeersResponse* response) override;

  void ReregisterOnNextHeartbeat();
  void set_assignment(const v1::Assignment& assignment);
  v1::Assignment assignment();
  void set_peers(const v1::GetPeersResponse& peers);
  // JoinGang fails with `status` when it is not OK.
  void set_reject(const grpc::Status& status);
  // The next `count` joins (every one when negative) fail with `status` and
  // the retry hint `retry_after` (trailing metadata, as gdt-coord sends it
  // for a refusal for now); later ones are answered as usual.
  void set_refusals(int count, const grpc::Status& status,
                    std::chrono::milliseconds retry_after);
  // The next `count` leaves fail with `status` (each is still recorded).
  void set_leave_refusals(int count, const grpc::Status& status);
  void set_watch(
      WatchMode mode, const std::string& reason = "", int64_t culprit = 0,
      std::chrono::milliseconds delay = std::chrono::milliseconds(0));

  // Waits until at least `registrations` registrations and `heartbeats`
  // heartbeats arrived; false when `timeout` passes first.
  bool WaitFor(size_t registrations, size_t heartbeats,
               std::chrono::milliseconds timeout);
  // Waits until `count` exit reports arrived or `timeout` passes; returns
  // those that did.
  std::vector<v1::ReportExitRequest> WaitForExits(
      size_t count, std::chrono::milliseconds timeout);

  std::vector<v1::HostSpec> registrations();
  std::vector<std::string> heartbeats();
  std::vector<v1::ReportExitRequest> exits();
  std::vector<v1::JoinGangRequest> joins();
  // When each join arrived, in order.
  std::vector<std::chrono::steady_clock::time_point> join_times();
  std::vector<v1::WatchGangRequest> watches();
  std::vector<v1::LeaveGangRequest> leaves();
  std::vector<v1::GetPeersRequest> peer_requests();

 private:
  Mutex mu_;
  CondVar changed_;
  std::vector<v1::HostSpec> registrations_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> heartbeats_ ABSL_GUARDED_BY(mu_);
  bool reregister_next_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<v1::ReportExitRequest> exits_ ABSL_GUARDED_BY(mu_);
  v1::Assignment assignment_ ABSL_GUARDED_BY(mu_);
  v1::GetPeersResponse peers_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::GetPeersRequest> peer_requests_ ABSL_GUARDED_BY(mu_);
  grpc::Status reject_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::JoinGangRequest> joins_ ABSL_GUARDED_BY(mu_);
  std::vector<std::chrono::steady_clock::time_point> join_times_
      ABSL_GUARDED_BY(mu_);
  int refusals_ ABSL_GUARDED_BY(mu_) = 0;
  grpc::Status refusal_ ABSL_GUARDED_BY(mu_);
  std::chrono::milliseconds refusal_retry_after_ ABSL_GUARDED_BY(mu_){0};
  std::vector<v1::LeaveGangRequest> leaves_ ABSL_GUARDED_BY(mu_);
  int leave_refusals_ ABSL_GUARDED_BY(mu_) = 0;
  grpc::Status leave_refusal_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::WatchGangRequest> watches_ ABSL_GUARDED_BY(mu_);
  WatchMode watch_mode_ ABSL_GUARDED_BY(mu_) = WatchMode::kFollowExits;
  std::string watch_reason_ ABSL_GUARDED_BY(mu_);
  int64_t watch_culprit_ ABSL_GUARDED_BY(mu_) = 0;
  std::chrono::milliseconds watch_delay_ ABSL_GUARDED_BY(mu_){0};
  LoopbackServing serving_;
};

}  // namespace gdt::test

#endif  // GDT_TESTING_FAKE_COORDINATOR_H_
