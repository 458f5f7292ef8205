#include "coordinator/metrics.h"

#include <chrono>

#include "common/fake_clock.h"
#include "coordinator/coordinator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/scheduler_fixtures.h"

namespace gdt::coordinator {
namespace {

using test::CpuHost;
using test::GpuHost;
using test::Joining;
using test::TrainKey;
using ::testing::HasSubstr;

class FreePorts : public PortChecker {
 public:
  absl::StatusOr<bool> IsPortFree(const std::string&, uint32_t) override {
    return true;
  }
};

class CoordinatorMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    coordinator_ = test::MemoryCoordinator(clock_, ports_);
    ASSERT_NE(coordinator_, nullptr);
    coordinator_->SetObserver(metrics_);
    ASSERT_TRUE(coordinator_->RegisterHost(test::GpuHost("gpu-01", 8)).ok());
  }

  std::string Scrape() {
    return metrics_.Render(coordinator_->GetSnapshot(false));
  }

  FakeClock clock_;
  FreePorts ports_;
  CoordinatorMetrics metrics_{clock_};
  std::unique_ptr<Coordinator> coordinator_;
};

TEST_F(CoordinatorMetricsTest, AdmissionCountsTheGangAndObservesItsLatencies) {
  ASSERT_TRUE(
      coordinator_->Join(test::Joining(test::TrainKey(2), 1, 4), 1).ok());
  clock_.Advance(std::chrono::seconds(3));
  ASSERT_TRUE(
      coordinator_->Join(test::Joining(test::TrainKey(2), 2, 4), 2).ok());
  clock_.Advance(std::chrono::milliseconds(20));

  EXPECT_THAT(Scrape(), HasSubstr("gdt_gangs{state=\"forming\"} 1\n"));
  coordinator_->RunAdmissionPass();
  const std::string text = Scrape();

  EXPECT_THAT(text, HasSubstr("gdt_gangs_admitted_total 1\n"));
  EXPECT_THAT(text, HasSubstr("gdt_gangs{state=\"running\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("gdt_gangs{state=\"forming\"} 0\n"));
  // Formation: from the last join (20 ms before) to admission.
  EXPECT_THAT(text, HasSubstr("gdt_gang_formation_seconds_bucket{le=\"0.01\"}"
                              " 0\n"));
  EXPECT_THAT(text, HasSubstr("gdt_gang_formation_seconds_bucket{le=\"0.025\"}"
                              " 1\n"));
  EXPECT_THAT(text, HasSubstr("gdt_gang_formation_seconds_count 1\n"));
  // Admission wait: from the first join, 3.02 s before.
  EXPECT_THAT(text, HasSubstr("gdt_gang_admission_wait_seconds_bucket{le=\"1\"}"
                              " 0\n"));
  EXPECT_THAT(text, HasSubstr("gdt_gang_admission_wait_seconds_bucket{le=\"5\"}"
                              " 1\n"));
  EXPECT_THAT(text, HasSubstr("gdt_gang_admission_wait_seconds_sum 3.02\n"));
  EXPECT_THAT(text, HasSubstr("gdt_host_gpus{host=\"gpu-01\",state=\"leased\"}"
                              " 8\n"));
  EXPECT_THAT(text,
              HasSubstr("gdt_host_gpus{host=\"gpu-01\",state=\"free\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("gdt_host_up{host=\"gpu-01\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("gdt_deadlock_bounces_total 0\n"));
}

TEST_F(CoordinatorMetricsTest, TheFailingReportIsCountedByClassOnce) {
  ASSERT_TRUE(
      coordinator_->Join(test::Joining(test::TrainKey(2), 1, 1), 1).ok());
  ASSERT_TRUE(
      coordinator_->Join(test::Joining(test::TrainKey(2), 2, 1), 2).ok());
  coordinator_->RunAdmissionPass();
  const Snapshot snapshot = coordinator_->GetSnapshot(false);
  ASSERT_EQ(snapshot.gangs.size(), 1u);
  const state::Gang& gang = snapshot.gangs[0];
  ASSERT_EQ(gang.state, state::GangState::kRunning);

  // Member 2 is killed by SIGKILL; member 1 then stops with SIGTERM.
  ASSERT_TRUE(
      coordinator_->ReportExit(gang.id, gang.epoch, 2, 102, 137, false).ok());
  ASSERT_TRUE(
      coordinator_->ReportExit(gang.id, gang.epoch, 1, 101, 143, false).ok());

  const std::string text = Scrape();
  EXPECT_THAT(text, HasSubstr("gdt_failures_total{class=\"signal\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("gdt_gangs{state=\"failed\"} 1\n"));
}

TEST_F(CoordinatorMetricsTest, CpuHostsReportSlotsAndRpcsAreTimed) {
  ASSERT_TRUE(coordinator_->RegisterHost(test::CpuHost("cpu-01", 3)).ok());
  metrics_.RpcFinished("Heartbeat", "OK", 0.0002);
  metrics_.RpcFinished("Heartbeat", "NOT_FOUND", 0.002);

  const std::string text = Scrape();
  EXPECT_THAT(text, HasSubstr("gdt_host_cpu_slots{host=\"cpu-01\",state="
                              "\"free\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("gdt_rpc_duration_seconds_count{method="
                              "\"Heartbeat\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("gdt_rpcs_total{method=\"Heartbeat\",code="
                              "\"NOT_FOUND\"} 1\n"));
}

}  // namespace
}  // namespace gdt::coordinator
