// Preemption enforced by a real gdt-coord server (loopback gRPC, SQLite in
// a temp dir, a fake agent that answers CheckPort): members join, watch and
// leave over gRPC as executors do, and the victim's tools see the notice
// and record their checkpoint through gdt-ckpt's own clients.
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/notice_broadcast_client.h"
#include "ckpt/registry_client.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "rendezvous/coordinator_client.h"
#include "testing/coordinator_fixture.h"

namespace gdt {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

class PreemptionCoordinatorTest : public test::InProcessCoordinatorTest {
 protected:
  void Start(int64_t grace_s) {
    grace_s_ = grace_s;
    config_.host_down_after = 120s;  // The test sends no heartbeats.
    config_.preemption.enabled = true;
    config_.preemption.grace_s = grace_s;
    ASSERT_NO_FATAL_FAILURE(StartCoordinator());
    v1::HostSpec host;
    host.set_name("gpu-01");
    host.set_address("10.1.0.1");
    host.set_agent_endpoint(agent_address_);
    for (int i = 0; i < 4; ++i) host.add_gpus()->set_index(i);
    ASSERT_TRUE(client_->RegisterHost(host, 5s).ok());
  }

  // Member `index` of a gang of `size` in `pipeline`, `gpus` each.
  static v1::JoinGangRequest Join(const std::string& group, int64_t pipeline,
                                  uint32_t size, uint32_t index, uint32_t gpus,
                                  int32_t priority, bool preemptible) {
    v1::JoinGangRequest request;
    v1::GangKey* key = request.mutable_key();
    key->set_instance("https://gitlab.example.com");
    key->set_project_id(5);
    key->set_pipeline_id(pipeline);
    key->set_group_name(group);
    key->set_size(size);
    request.set_member_index(index);
    request.set_job_id(pipeline * 100 + index);
    request.set_job_name(group + " " + std::to_string(index) + "/" +
                         std::to_string(size));
    request.set_gpus_per_node(gpus);
    request.set_procs_per_node(1);
    request.set_launcher(v1::LAUNCHER_TORCHRUN);
    request.set_job_timeout_seconds(48 * 3600);
    request.set_priority(priority);
    request.set_preemptible(preemptible);
    // What expand writes for the retry: it adds (max 2, script failures):
    // without a retry left a member is never a victim.
    if (preemptible) request.set_preempt_retries(2);
    return request;
  }

  // The low-priority gang, two members of 2 GPUs: every GPU of the host.
  std::vector<v1::Assignment> RunLow(bool preemptible) {
    const auto deadline = std::chrono::system_clock::now() + 20s;
    auto second = std::async(std::launch::async, [&] {
      return client_->JoinGang(Join("low", 76, 2, 2, 2, 0, preemptible),
                               deadline, nullptr, nullptr);
    });
    absl::StatusOr<v1::Assignment> first = client_->JoinGang(
        Join("low", 76, 2, 1, 2, 0, preemptible), deadline, nullptr, nullptr);
    absl::StatusOr<v1::Assignment> other = second.get();
    EXPECT_TRUE(first.ok()) << first.status();
    EXPECT_TRUE(other.ok()) << other.status();
    if (!first.ok() || !other.ok()) return {};
    return {*first, *other};
  }

  // What `gdt-ckpt` in the job with `assignment` finds in its environment.
  ckpt::CkptEnv JobEnv(const v1::Assignment& assignment) const {
    return {{"GDT_COORDINATOR", server_->bound_address()},
            {"GDT_GANG_ID", assignment.gang_id()},
            {"GDT_EPOCH", std::to_string(assignment.epoch())},
            {"GDT_KV_TOKEN", assignment.kv_token()}};
  }

  // Whether the checkpoint notice reaches the job with `assignment` before
  // `deadline`, asked as `gdt-ckpt run` asks (once a 100 ms here).
  bool NoticeArrives(const v1::Assignment& assignment,
                     std::chrono::steady_clock::time_point deadline) {
    absl::StatusOr<std::unique_ptr<ckpt::NoticeBroadcast>> broadcast =
        ckpt::NoticeBroadcastFromEnv(JobEnv(assignment));
    if (!broadcast.ok() || *broadcast == nullptr) return false;
    while (std::chrono::steady_clock::now() < deadline) {
      absl::StatusOr<std::optional<std::string>> heard =
          (*broadcast)->Announced();
      if (heard.ok() && heard->has_value()) {
        notice_ = **heard;
        return true;
      }
      std::this_thread::sleep_for(100ms);
    }
    return false;
  }

  std::future<absl::StatusOr<v1::WatchGangEvent>> Watch(
      const v1::Assignment& assignment, uint32_t index,
      rendezvous::CallCanceller& canceller) {
    v1::WatchGangRequest request;
    request.set_gang_id(assignment.gang_id());
    request.set_epoch(assignment.epoch());
    request.set_member_index(index);
    request.set_job_id(7600 + index);
    return std::async(std::launch::async, [this, request, &canceller] {
      return client_->WatchGang(request, std::chrono::system_clock::now() + 60s,
                                nullptr, nullptr, canceller);
    });
  }

  void LeaveLow() {
    for (uint32_t index : {1u, 2u}) {
      v1::LeaveGangRequest leave;
      *leave.mutable_key() = Join("low", 76, 2, index, 2, 0, true).key();
      leave.set_member_index(index);
      leave.set_job_id(7600 + index);
      EXPECT_TRUE(client_->LeaveGang(leave, 5s).ok());
    }
  }

  const v1::GangStatus* Status(const std::string& gang_id) {
    v1::GetStatusRequest request;
    request.set_include_finished(true);
    absl::StatusOr<v1::GetStatusResponse> status =
        client_->GetStatus(request, 5s);
    EXPECT_TRUE(status.ok()) << status.status();
    if (!status.ok()) return nullptr;
    status_ = *std::move(status);
    for (const v1::GangStatus& gang : status_.gangs()) {
      if (gang.gang_id() == gang_id) return &gang;
    }
    return nullptr;
  }

  int64_t grace_s_ = 0;
  v1::GetStatusResponse status_;
  std::string notice_;  // The last notice NoticeArrives() heard.
};

TEST_F(PreemptionCoordinatorTest,
       VictimCheckpointsOnTheNoticeAndTheHighGangStartsWithinTheGrace) {
  Start(/*grace_s=*/30);
  const std::vector<v1::Assignment> low = RunLow(/*preemptible=*/true);
  ASSERT_EQ(low.size(), 2u);
  rendezvous::CallCanceller canceller1, canceller2;
  auto watch1 = Watch(low[0], 1, canceller1);
  auto watch2 = Watch(low[1], 2, canceller2);

  const auto high_joined = std::chrono::steady_clock::now();
  auto high = std::async(std::launch::async, [&] {
    return client_->JoinGang(Join("high", 78, 1, 1, 4, 5, false),
                             std::chrono::system_clock::now() + 60s, nullptr,
                             nullptr);
  });

  // Both members' tools hear the notice; rank 0 records its checkpoint.
  ASSERT_TRUE(NoticeArrives(low[0], high_joined + 10s));
  ASSERT_TRUE(NoticeArrives(low[1], high_joined + 10s));
  EXPECT_THAT(notice_, HasSubstr(" preempted by the coordinator for gang "
                                 "high-p5-pl78-n1 (priority 5)"));
  const v1::GangStatus* victim = Status("low-p5-pl76-n2");
  ASSERT_NE(victim, nullptr);
  EXPECT_EQ(victim->state(), v1::GANG_STATE_RUNNING);
  EXPECT_NE(victim->preemption_stop_by_unix_ms(), 0);
  EXPECT_EQ(victim->preemption_planned_by(), "high-p5-pl78-n1");
  auto registry = ckpt::RegistryFromEnv(JobEnv(low[0]), 5s);
  ASSERT_TRUE(registry.ok()) << registry.status();
  ASSERT_NE(*registry, nullptr);
  ASSERT_TRUE((*registry)->Record(40, 0, 7601, R"({"step":40})").ok());

  // Every member learns that its gang was preempted, by whom and why.
  for (auto* watch : {&watch1, &watch2}) {
    ASSERT_EQ(watch->wait_for(10s), std::future_status::ready);
    absl::StatusOr<v1::WatchGangEvent> event = watch->get();
    ASSERT_TRUE(event.ok()) << event.status();
    ASSERT_TRUE(event->has_failed());
    EXPECT_TRUE(event->failed().preempted());
    EXPECT_THAT(event->failed().reason(),
                HasSubstr("gang low-p5-pl76-n2 failed: preempted by gang "
                          "high-p5-pl78-n1 (priority 5) after checkpoint at "));
    EXPECT_THAT(event->failed().reason(), HasSubstr("GPU-hours"));
  }
  // The executors stop the stages and leave: the high gang is admitted,
  // well within the grace.
  LeaveLow();
  ASSERT_EQ(high.wait_for(std::chrono::seconds(grace_s_) + 5s),
            std::future_status::ready);
  absl::StatusOr<v1::Assignment> admitted = high.get();
  ASSERT_TRUE(admitted.ok()) << admitted.status();
  EXPECT_EQ(admitted->gpu_indices_size(), 4);
  EXPECT_LT(std::chrono::steady_clock::now() - high_joined,
            std::chrono::seconds(grace_s_));

  victim = Status("low-p5-pl76-n2");
  ASSERT_NE(victim, nullptr);
  EXPECT_EQ(victim->state(), v1::GANG_STATE_FAILED);
  EXPECT_EQ(victim->preemptions(), 1u);
  EXPECT_EQ(victim->preempted_epoch(), 1u);
  EXPECT_EQ(victim->preempted_by(), "high-p5-pl78-n1");
}

TEST_F(PreemptionCoordinatorTest, VictimWithoutACheckpointStopsAtTheGrace) {
  Start(/*grace_s=*/2);
  const std::vector<v1::Assignment> low = RunLow(/*preemptible=*/true);
  ASSERT_EQ(low.size(), 2u);
  rendezvous::CallCanceller canceller;
  auto watch = Watch(low[0], 1, canceller);
  const auto high_joined = std::chrono::steady_clock::now();
  auto high = std::async(std::launch::async, [&] {
    return client_->JoinGang(Join("high", 78, 1, 1, 4, 5, false),
                             std::chrono::system_clock::now() + 60s, nullptr,
                             nullptr);
  });
  ASSERT_TRUE(NoticeArrives(low[0], high_joined + 10s));

  ASSERT_EQ(watch.wait_for(10s), std::future_status::ready);
  absl::StatusOr<v1::WatchGangEvent> event = watch.get();
  ASSERT_TRUE(event.ok()) << event.status();
  ASSERT_TRUE(event->has_failed());
  EXPECT_TRUE(event->failed().preempted());
  EXPECT_THAT(event->failed().reason(),
              HasSubstr("preempted by gang high-p5-pl78-n1 (priority 5) at "));
  EXPECT_THAT(event->failed().reason(),
              HasSubstr("UTC without a checkpoint within the 2 s grace"));
  EXPECT_GE(std::chrono::steady_clock::now() - high_joined, 2s);
  LeaveLow();
  ASSERT_EQ(high.wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(high.get().ok());
}

TEST_F(PreemptionCoordinatorTest, ANonPreemptibleGangIsNeverTouched) {
  Start(/*grace_s=*/1);
  const std::vector<v1::Assignment> low = RunLow(/*preemptible=*/false);
  ASSERT_EQ(low.size(), 2u);
  std::promise<void> waiting;
  bool told = false;
  auto high = std::async(std::launch::async, [&] {
    return client_->JoinGang(
        Join("high", 78, 1, 1, 4, 5, false),
        std::chrono::system_clock::now() + 6s,
        [&](const v1::WaitingEvent&) {
          if (!told) waiting.set_value();
          told = true;
        },
        nullptr);
  });
  ASSERT_EQ(waiting.get_future().wait_for(10s), std::future_status::ready);
  // Passes (and the 2 s below, past the 1 s grace) choose nobody.
  for (int pass = 0; pass < 3; ++pass) {
    server_->coordinator().RunAdmissionPass();
  }
  EXPECT_FALSE(NoticeArrives(low[0], std::chrono::steady_clock::now() + 2s));
  const v1::GangStatus* gang = Status("low-p5-pl76-n2");
  ASSERT_NE(gang, nullptr);
  EXPECT_EQ(gang->state(), v1::GANG_STATE_RUNNING);
  EXPECT_EQ(gang->preemption_stop_by_unix_ms(), 0);
  EXPECT_EQ(gang->preemptions(), 0u);
  // The high gang is still waiting when its join gives up.
  EXPECT_EQ(high.get().status().code(), absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace gdt
