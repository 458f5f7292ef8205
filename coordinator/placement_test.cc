#include "coordinator/placement.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gdt::coordinator {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::SizeIs;

constexpr int64_t kNow = 1'800'000'000;

std::vector<PlacementHost> OneHost() {
  PlacementHost host;
  host.name = "gpu-01";
  host.gpu_indices = {0, 1, 2, 3, 4, 5, 6, 7};
  return {host};
}

// A gang on all 8 GPUs for the last 5 hours, checkpointing every 30 min.
RunningGang Busy(bool preemptible, int32_t priority) {
  RunningGang gang;
  gang.gang_id = "low";
  gang.members = {LeasedMember{"gpu-01", {0, 1, 2, 3, 4, 5, 6, 7}}};
  gang.start_unix_s = kNow - 5 * 3600 - 600;
  gang.end_bound_unix_s = gang.start_unix_s + 48 * 3600;
  gang.priority = priority;
  gang.preemptible = preemptible;
  gang.checkpoint_interval_s = 1800;
  return gang;
}

WaitingGang Urgent() {
  WaitingGang gang;
  gang.gang_id = "urgent";
  gang.members = 1;
  gang.gpus_per_member = 8;
  gang.priority = 5;
  gang.queue_time_unix_s = kNow - 60;
  gang.run_bound_s = 3600;
  gang.arrival_hosts = {{1, "gpu-01"}};
  return gang;
}

TEST(PlanPreemptionTest, HigherPriorityGangPreemptsAPreemptibleOne) {
  PreemptionSettings preemption;
  preemption.enabled = true;
  const PlanOutcome outcome =
      PlanAdmissions(OneHost(), {Busy(/*preemptible=*/true, 0)}, {Urgent()},
                     kNow, {}, preemption);

  EXPECT_THAT(outcome.admitted, IsEmpty());
  ASSERT_THAT(outcome.preempted, SizeIs(1));
  const PreemptedGang& victim = outcome.preempted[0];
  EXPECT_EQ(victim.gang_id, "low");
  EXPECT_EQ(victim.by, "urgent");
  EXPECT_EQ(victim.stop_by_unix_s, kNow + 300);
  // 10 minutes since the last checkpoint on 8 GPUs.
  EXPECT_DOUBLE_EQ(victim.lost_gpu_hours, 8 * 600 / 3600.0);
  EXPECT_THAT(victim.reason, HasSubstr("preempted by gang urgent"));
  ASSERT_EQ(outcome.blocked.count("urgent"), 1u);
}

// Two hosts busy until +1 h (gpu-01) and +2 h (gpu-02) with gangs that may
// not be stopped; "first" and "second" each need a whole host. With
// preemption on, the policy reserves for both, and each gang's reason says
// when it starts; without, only "first" has a reservation.
TEST(PlanReasonTest, EveryReservedGangIsToldWhenItStarts) {
  std::vector<PlacementHost> hosts = OneHost();
  hosts.push_back(hosts[0]);
  hosts[1].name = "gpu-02";
  std::vector<RunningGang> running = {Busy(false, 0), Busy(false, 0)};
  running[0].end_bound_unix_s = kNow + 3600;
  running[1].gang_id = "other";
  running[1].members[0].host = "gpu-02";
  running[1].end_bound_unix_s = kNow + 7200;
  WaitingGang first = Urgent();
  first.gang_id = "first";
  first.priority = 0;
  WaitingGang second = first;
  second.gang_id = "second";
  second.queue_time_unix_s = kNow - 30;

  PreemptionSettings preemption;
  preemption.enabled = true;
  PlanOutcome outcome =
      PlanAdmissions(hosts, running, {first, second}, kNow, {}, preemption);
  EXPECT_THAT(outcome.admitted, IsEmpty());
  EXPECT_THAT(outcome.preempted, IsEmpty());
  ASSERT_EQ(outcome.blocked.count("second"), 1u);
  EXPECT_THAT(outcome.blocked.at("first").why,
              HasSubstr("; next in line, starting within 60 min"));
  EXPECT_THAT(outcome.blocked.at("second").why,
              HasSubstr("; next in line after gang first, starting within "
                        "120 min at the latest"));

  outcome = PlanAdmissions(hosts, running, {first, second}, kNow, {});
  EXPECT_THAT(outcome.blocked.at("first").why,
              HasSubstr("; next in line, starting within 60 min"));
  EXPECT_THAT(outcome.blocked.at("second").why, Not(HasSubstr("next in line")));
}

// A gang that waited longer than the backlog before it started has waited
// its share: a retry would queue again behind every pending job.
TEST(PlanPreemptionTest, NeverStopsAGangThatWaitedLongBeforeItStarted) {
  PreemptionSettings preemption;
  preemption.enabled = true;
  RunningGang waited_long = Busy(/*preemptible=*/true, 0);
  // Backlog: about 43 h left of "low" and 1 h of "urgent", on 8 GPUs; it waited
  // 100 h before it started.
  waited_long.queue_time_unix_s = waited_long.start_unix_s - 100 * 3600;
  EXPECT_THAT(
      PlanAdmissions(OneHost(), {waited_long}, {Urgent()}, kNow, {}, preemption)
          .preempted,
      IsEmpty());
  RunningGang waited_little = Busy(/*preemptible=*/true, 0);
  waited_little.queue_time_unix_s = waited_little.start_unix_s - 60;
  EXPECT_THAT(PlanAdmissions(OneHost(), {waited_little}, {Urgent()}, kNow, {},
                             preemption)
                  .preempted,
              SizeIs(1));
}

TEST(PlanPreemptionTest, OffByDefaultAndNeverForNonPreemptibleGangs) {
  EXPECT_THAT(
      PlanAdmissions(OneHost(), {Busy(true, 0)}, {Urgent()}, kNow).preempted,
      IsEmpty());
  PreemptionSettings preemption;
  preemption.enabled = true;
  EXPECT_THAT(PlanAdmissions(OneHost(), {Busy(/*preemptible=*/false, 0)},
                             {Urgent()}, kNow, {}, preemption)
                  .preempted,
              IsEmpty());
  // A gang of higher priority than the waiting one is never chosen.
  EXPECT_THAT(PlanAdmissions(OneHost(), {Busy(true, /*priority=*/9)},
                             {Urgent()}, kNow, {}, preemption)
                  .preempted,
              IsEmpty());
}

TEST(PlanPreemptionTest, AVictimWithinItsGraceIsNotChosenAgain) {
  PreemptionSettings preemption;
  preemption.enabled = true;
  RunningGang stopping = Busy(/*preemptible=*/false, 0);
  stopping.end_bound_unix_s = kNow + 200;  // Its stop deadline.
  RunningGang other = Busy(/*preemptible=*/true, 0);
  other.gang_id = "other";
  std::vector<PlacementHost> hosts = OneHost();
  hosts.push_back(hosts[0]);
  hosts[1].name = "gpu-02";
  other.members[0].host = "gpu-02";

  const PlanOutcome outcome = PlanAdmissions(hosts, {stopping, other},
                                             {Urgent()}, kNow, {}, preemption);

  EXPECT_THAT(outcome.preempted, IsEmpty());
  EXPECT_THAT(outcome.admitted, IsEmpty());
}

}  // namespace
}  // namespace gdt::coordinator
