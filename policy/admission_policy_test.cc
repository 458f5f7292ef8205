#include "policy/admission_policy.h"

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gdt::policy {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

GangSpec Gang(const std::string& id, uint32_t members, uint32_t gpus,
              Seconds queue_time = 0, Seconds run_bound = 3600) {
  GangSpec spec;
  spec.id = id;
  spec.members = members;
  spec.gpus_per_member = gpus;
  spec.queue_time = queue_time;
  spec.run_bound = run_bound;
  return spec;
}

class AdmissionPolicyTest : public ::testing::Test {
 protected:
  // `hosts` hosts named h0.. with `gpus` GPUs and `slots` runner slots each.
  void AddHosts(AdmissionPolicy& policy, int hosts, uint32_t gpus,
                uint32_t slots) {
    for (int h = 0; h < hosts; ++h) {
      ASSERT_TRUE(policy
                      .AddHost(HostSpec{"h" + std::to_string(h), gpus, slots,
                                        /*labels=*/{}})
                      .ok());
    }
  }
  // Joins every member of `spec` through slots on `host`.
  void JoinAll(AdmissionPolicy& policy, const GangSpec& spec,
               const std::string& host) {
    for (uint32_t m = 1; m <= spec.members; ++m) {
      ASSERT_TRUE(policy.Join(spec, m, host).ok()) << spec.id << " " << m;
    }
  }
  uint32_t TotalFreeGpus(const AdmissionPolicy& policy) {
    uint32_t total = 0;
    for (const std::string& host : policy.host_names()) {
      total += policy.FreeGpus(host);
    }
    return total;
  }

  AdmissionPolicy gdt_{PolicyOptions{Mode::kBackfill, 8}};
};

TEST_F(AdmissionPolicyTest, GangIsPlacedOnlyWhenEveryMemberIsPresent) {
  AddHosts(gdt_, 2, 8, 4);
  const GangSpec train = Gang("train", 2, 8);

  ASSERT_TRUE(gdt_.Join(train, 1, "h0").ok());
  EXPECT_THAT(gdt_.Schedule(0).admitted, IsEmpty());
  EXPECT_EQ(TotalFreeGpus(gdt_), 16u);
  EXPECT_EQ(gdt_.GpusHeldByWaitingGangs(), 0u);

  ASSERT_TRUE(gdt_.Join(train, 2, "h0").ok());
  const Decisions decisions = gdt_.Schedule(1);
  ASSERT_THAT(decisions.admitted, SizeIs(1));
  EXPECT_THAT(decisions.admitted[0].members, SizeIs(2));
  EXPECT_EQ(TotalFreeGpus(gdt_), 0u);
  EXPECT_TRUE(gdt_.IsRunning("train"));
}

TEST_F(AdmissionPolicyTest, CompleteGangThatDoesNotFitHoldsNoGpus) {
  AddHosts(gdt_, 2, 8, 4);
  JoinAll(gdt_, Gang("a", 1, 8), "h0");
  ASSERT_THAT(gdt_.Schedule(0).admitted, SizeIs(1));

  JoinAll(gdt_, Gang("b", 2, 8, /*queue_time=*/1), "h1");
  EXPECT_THAT(gdt_.Schedule(2).admitted, IsEmpty());
  EXPECT_EQ(TotalFreeGpus(gdt_), 8u);  // Only a's GPUs are leased.
  EXPECT_EQ(gdt_.GpusHeldByWaitingGangs(), 0u);

  ASSERT_TRUE(gdt_.Finish("a").ok());
  EXPECT_THAT(gdt_.Schedule(3).admitted, SizeIs(1));
}

TEST_F(AdmissionPolicyTest, TwoGangsOnNSlotsDeadlockIsBrokenUnderGdt) {
  constexpr uint32_t kN = 4;
  AddHosts(gdt_, kN, 8, /*slots=*/1);
  const GangSpec a = Gang("a", kN, 8, /*queue_time=*/0);
  const GangSpec b = Gang("b", kN, 8, /*queue_time=*/1);
  // GitLab hands out the members interleaved: every slot is taken by half of
  // each gang.
  ASSERT_TRUE(gdt_.Join(a, 1, "h0").ok());
  ASSERT_TRUE(gdt_.Join(b, 1, "h1").ok());
  ASSERT_TRUE(gdt_.Join(a, 2, "h2").ok());
  ASSERT_TRUE(gdt_.Join(b, 2, "h3").ok());
  EXPECT_EQ(gdt_.GpusHeldByWaitingGangs(), 0u);

  Decisions decisions = gdt_.Schedule(0);
  ASSERT_THAT(decisions.bounced, SizeIs(1));
  EXPECT_EQ(decisions.bounced[0].gang_id, "b");  // The younger one.
  EXPECT_THAT(decisions.bounced[0].message, HasSubstr("runner-slot deadlock"));
  EXPECT_THAT(decisions.bounced[0].message, HasSubstr("retry:"));
  EXPECT_EQ(gdt_.FreeRunnerSlots("h1") + gdt_.FreeRunnerSlots("h3"), 2u);

  ASSERT_TRUE(gdt_.Join(a, 3, "h1").ok());
  ASSERT_TRUE(gdt_.Join(a, 4, "h3").ok());
  decisions = gdt_.Schedule(1);
  ASSERT_THAT(decisions.admitted, SizeIs(1));
  EXPECT_EQ(decisions.admitted[0].gang_id, "a");

  // b's retried members wait for runner slots, then run after a.
  ASSERT_TRUE(gdt_.Finish("a").ok());
  for (uint32_t m = 1; m <= kN; ++m) {
    ASSERT_TRUE(gdt_.Join(b, m, "h" + std::to_string(m - 1)).ok());
  }
  decisions = gdt_.Schedule(2);
  EXPECT_THAT(decisions.bounced, IsEmpty());
  ASSERT_THAT(decisions.admitted, SizeIs(1));
  EXPECT_EQ(decisions.admitted[0].gang_id, "b");
}

TEST_F(AdmissionPolicyTest, TwoGangsOnNSlotsDeadlockUnderNaive) {
  constexpr uint32_t kN = 4;
  AdmissionPolicy naive(PolicyOptions{Mode::kNaive, 8});
  AddHosts(naive, kN, 8, /*slots=*/1);
  const GangSpec a = Gang("a", kN, 8, 0);
  const GangSpec b = Gang("b", kN, 8, 1);
  ASSERT_TRUE(naive.Join(a, 1, "h0").ok());
  ASSERT_TRUE(naive.Join(b, 1, "h1").ok());
  ASSERT_TRUE(naive.Join(a, 2, "h2").ok());
  ASSERT_TRUE(naive.Join(b, 2, "h3").ok());

  for (Seconds t = 0; t < 3; ++t) {
    const Decisions decisions = naive.Schedule(t);
    EXPECT_THAT(decisions.admitted, IsEmpty());
    EXPECT_THAT(decisions.bounced, IsEmpty());
  }
  // Every GPU is held by a waiting member and no slot is left for the
  // missing ones: nothing can ever progress.
  EXPECT_EQ(naive.GpusHeldByWaitingGangs(), 32u);
  EXPECT_EQ(TotalFreeGpus(naive), 0u);
  for (const std::string& host : naive.host_names()) {
    EXPECT_EQ(naive.FreeRunnerSlots(host), 0u);
  }
}

TEST_F(AdmissionPolicyTest, BounceTakesLowestPriorityBeforeYoungest) {
  AddHosts(gdt_, 2, 8, /*slots=*/1);
  GangSpec high = Gang("high", 2, 8, /*queue_time=*/5);
  high.priority = 10;
  const GangSpec low = Gang("low", 2, 8, /*queue_time=*/0);
  ASSERT_TRUE(gdt_.Join(high, 1, "h0").ok());
  ASSERT_TRUE(gdt_.Join(low, 1, "h1").ok());

  const Decisions decisions = gdt_.Schedule(0);
  ASSERT_THAT(decisions.bounced, SizeIs(1));
  EXPECT_EQ(decisions.bounced[0].gang_id, "low");
}

TEST_F(AdmissionPolicyTest, NoDeadlockReportedWhileSlotsCanStillFree) {
  AddHosts(gdt_, 2, 8, /*slots=*/1);
  JoinAll(gdt_, Gang("one", 1, 8), "h0");
  ASSERT_THAT(gdt_.Schedule(0).admitted, SizeIs(1));
  ASSERT_TRUE(gdt_.Join(Gang("two", 2, 8, 1), 1, "h1").ok());
  // Every slot is taken, but one by a running gang that will end.
  const Decisions decisions = gdt_.Schedule(1);
  EXPECT_THAT(decisions.bounced, IsEmpty());
  EXPECT_THAT(decisions.admitted, IsEmpty());
}

TEST_F(AdmissionPolicyTest, MembersOfOneGangNeverShareAHostTheyDoNotFit) {
  AddHosts(gdt_, 2, 8, 4);
  JoinAll(gdt_, Gang("wide", 2, 6), "h0");  // Both picked up on h0.
  const Decisions decisions = gdt_.Schedule(0);
  ASSERT_THAT(decisions.admitted, SizeIs(1));
  const std::vector<MemberPlacement>& members = decisions.admitted[0].members;
  ASSERT_THAT(members, SizeIs(2));
  EXPECT_NE(members[0].host, members[1].host);
  EXPECT_THAT(members[0].gpus, SizeIs(6));
  EXPECT_THAT(members[1].gpus, SizeIs(6));
  EXPECT_EQ(gdt_.FreeGpus("h0"), 2u);
  EXPECT_EQ(gdt_.FreeGpus("h1"), 2u);
}

TEST_F(AdmissionPolicyTest,
       PlacementPacksPartlyUsedHostsAndLeasesDistinctGpus) {
  AddHosts(gdt_, 3, 8, 4);
  JoinAll(gdt_, Gang("x", 1, 4), "h1");
  JoinAll(gdt_, Gang("y", 1, 4, 1), "h2");
  // Best fit puts y beside x rather than on its own runner's empty host.
  ASSERT_THAT(gdt_.Schedule(0).admitted, SizeIs(2));
  EXPECT_EQ(gdt_.FreeGpus("h1"), 0u);
  EXPECT_EQ(gdt_.FreeGpus("h2"), 8u);
  // Both members of z share one host (4 of its 8 GPUs); one host stays
  // whole for an 8-GPU member.
  JoinAll(gdt_, Gang("z", 2, 2, 2), "h0");
  const Decisions decisions = gdt_.Schedule(1);
  ASSERT_THAT(decisions.admitted, SizeIs(1));
  EXPECT_EQ(decisions.admitted[0].members[0].host,
            decisions.admitted[0].members[1].host);
  EXPECT_THAT(decisions.admitted[0].members[0].gpus, ElementsAre(0, 1));
  EXPECT_THAT(decisions.admitted[0].members[1].gpus, ElementsAre(2, 3));
  uint32_t fully_free = 0;
  for (const std::string& host : gdt_.host_names()) {
    if (gdt_.FreeGpus(host) == 8) ++fully_free;
  }
  EXPECT_EQ(fully_free, 1u);
  EXPECT_EQ(TotalFreeGpus(gdt_), 24u - 12u);
}

TEST_F(AdmissionPolicyTest, MemberGpuIndicesAreDisjointOnOneHost) {
  AddHosts(gdt_, 1, 8, 4);
  JoinAll(gdt_, Gang("x", 1, 3), "h0");
  JoinAll(gdt_, Gang("y", 1, 3, 1), "h0");
  const Decisions decisions = gdt_.Schedule(0);
  ASSERT_THAT(decisions.admitted, SizeIs(2));
  EXPECT_THAT(decisions.admitted[0].members[0].gpus, ElementsAre(0, 1, 2));
  EXPECT_THAT(decisions.admitted[1].members[0].gpus, ElementsAre(3, 4, 5));
}

TEST_F(AdmissionPolicyTest, BackfillNeverDelaysTheHeadGang) {
  AddHosts(gdt_, 1, 8, 8);
  JoinAll(gdt_, Gang("running", 1, 6, 0, /*run_bound=*/100), "h0");
  ASSERT_THAT(gdt_.Schedule(0).admitted, SizeIs(1));

  JoinAll(gdt_, Gang("head", 1, 8, 1, 1000), "h0");
  JoinAll(gdt_, Gang("long", 1, 2, 2, /*run_bound=*/200), "h0");
  JoinAll(gdt_, Gang("short", 1, 2, 3, /*run_bound=*/50), "h0");
  Decisions decisions = gdt_.Schedule(10);
  // "long" would still hold 2 GPUs at 100 when the head needs all 8;
  // "short" ends by 60.
  ASSERT_THAT(decisions.admitted, SizeIs(1));
  EXPECT_EQ(decisions.admitted[0].gang_id, "short");
  ASSERT_TRUE(gdt_.reservation().has_value());
  EXPECT_EQ(gdt_.reservation()->gang_id, "head");
  EXPECT_EQ(gdt_.reservation()->start, 100);

  ASSERT_TRUE(gdt_.Finish("short").ok());
  EXPECT_THAT(gdt_.Schedule(60).admitted, IsEmpty());
  ASSERT_TRUE(gdt_.Finish("running").ok());
  decisions = gdt_.Schedule(100);
  ASSERT_THAT(decisions.admitted, SizeIs(1));
  EXPECT_EQ(decisions.admitted[0].gang_id, "head");
}

TEST_F(AdmissionPolicyTest, LongBackfillUsesOnlyGpusTheHeadDoesNotNeed) {
  AddHosts(gdt_, 2, 8, 8);
  JoinAll(gdt_, Gang("soon", 1, 6, 0, /*run_bound=*/100), "h0");
  JoinAll(gdt_, Gang("later", 1, 4, 1, /*run_bound=*/5000), "h1");
  ASSERT_THAT(gdt_.Schedule(0).admitted, SizeIs(2));
  ASSERT_EQ(gdt_.FreeGpus("h0"), 2u);  // Best fit kept them apart.
  ASSERT_EQ(gdt_.FreeGpus("h1"), 4u);

  JoinAll(gdt_, Gang("head", 1, 8, 2), "h0");
  JoinAll(gdt_, Gang("long", 1, 2, 3, /*run_bound=*/3000), "h0");
  const Decisions decisions = gdt_.Schedule(1);
  ASSERT_THAT(decisions.admitted, SizeIs(1));
  EXPECT_EQ(decisions.admitted[0].gang_id, "long");
  EXPECT_EQ(decisions.admitted[0].members[0].host, "h1");
  EXPECT_EQ(gdt_.reservation()->gpus_by_host.at("h0"), 8u);
}

// Two hosts: h0 frees its 8 GPUs at 100, h1 runs 6 of its 8 until 300.
// "first" (8 GPUs) is reserved on h0 at 100; "second" (8 GPUs) can only
// have h1 at 300, since "first" holds h0 from 100 on. "long" (2 GPUs until
// 510) fits on h1 now and leaves "first" alone.
void SetUpTwoReservations(AdmissionPolicy& policy) {
  for (const char* host : {"h0", "h1"}) {
    ASSERT_TRUE(policy.AddHost(HostSpec{host, 8, 8, {}}).ok());
  }
  ASSERT_TRUE(policy
                  .AddRunning(Gang("a", 1, 8, 0, 100),
                              {{1, "h0", {0, 1, 2, 3, 4, 5, 6, 7}}}, 100)
                  .ok());
  ASSERT_TRUE(policy
                  .AddRunning(Gang("b", 1, 6, 0, 300),
                              {{1, "h1", {0, 1, 2, 3, 4, 5}}}, 300)
                  .ok());
  ASSERT_TRUE(policy.Join(Gang("first", 1, 8, 1, 1000), 1, "h0").ok());
  ASSERT_TRUE(policy.Join(Gang("second", 1, 8, 2, 1000), 1, "h0").ok());
  ASSERT_TRUE(policy.Join(Gang("long", 1, 2, 3, 500), 1, "h1").ok());
}

TEST(ReservationDepthTest, DepthOneReservesForTheHeadOnly) {
  AdmissionPolicy policy(PolicyOptions{Mode::kBackfill, 8});
  SetUpTwoReservations(policy);
  const Decisions decisions = policy.Schedule(10);
  // EASY backfill: "long" delays only "second", which has no reservation.
  ASSERT_THAT(decisions.admitted, SizeIs(1));
  EXPECT_EQ(decisions.admitted[0].gang_id, "long");
  EXPECT_EQ(decisions.admitted[0].members[0].host, "h1");
  ASSERT_TRUE(policy.reservation().has_value());
  EXPECT_EQ(policy.reservation()->gang_id, "first");
  EXPECT_EQ(policy.reservation()->start, 100);
}

// Without an explicit depth, gdt mode reserves for the head only and the
// preempting mode for the first four gangs that do not fit.
TEST(ReservationDepthTest, TheDefaultDependsOnTheMode) {
  EXPECT_EQ(PolicyOptions{}.reservation_depth, 0u);
  EXPECT_EQ(ReservationDepth(PolicyOptions{Mode::kBackfill, 8}), 1u);
  EXPECT_EQ(ReservationDepth(PolicyOptions{Mode::kStrictFifo, 8}), 1u);
  EXPECT_EQ(ReservationDepth(PolicyOptions{Mode::kPreempt, 8}),
            kPreemptReservationDepth);
  EXPECT_EQ(kPreemptReservationDepth, 4u);
  PolicyOptions explicit_depth{Mode::kPreempt, 8};
  explicit_depth.reservation_depth = 1;
  EXPECT_EQ(ReservationDepth(explicit_depth), 1u);

  AdmissionPolicy gdt(PolicyOptions{Mode::kBackfill, 8});
  SetUpTwoReservations(gdt);
  const Decisions started = gdt.Schedule(10);
  ASSERT_THAT(started.admitted, SizeIs(1));
  EXPECT_EQ(started.admitted[0].gang_id, "long");
  ASSERT_THAT(gdt.reservations(), SizeIs(1));
  EXPECT_EQ(gdt.reservations()[0].gang_id, "first");

  // Nothing running is preemptible, and the head is chosen in queue order
  // as in gdt mode: only the reservations differ.
  PolicyOptions preempt_options{Mode::kPreempt, 8};
  preempt_options.preempt.overdue_backlog_fraction = 0;
  AdmissionPolicy preempt(preempt_options);
  SetUpTwoReservations(preempt);
  const Decisions held = preempt.Schedule(10);
  EXPECT_THAT(held.admitted, IsEmpty());
  EXPECT_THAT(held.preempted, IsEmpty());
  ASSERT_THAT(preempt.reservations(), SizeIs(2));
  EXPECT_EQ(preempt.reservations()[0].gang_id, "first");
  EXPECT_EQ(preempt.reservations()[1].gang_id, "second");
  EXPECT_EQ(preempt.reservations()[1].start, 300);
}

TEST(ReservationDepthTest, BackfillRespectsTheSecondReservation) {
  PolicyOptions options{Mode::kBackfill, 8};
  options.reservation_depth = 2;
  AdmissionPolicy policy(options);
  SetUpTwoReservations(policy);
  // "long" would hold 2 of h1's GPUs past 300, when "second" needs all 8.
  EXPECT_THAT(policy.Schedule(10).admitted, IsEmpty());
  ASSERT_TRUE(policy.reservation().has_value());
  EXPECT_EQ(policy.reservation()->gang_id, "first");
  EXPECT_EQ(policy.reservation()->start, 100);
  // A gang that ends before 300 may use h1's free GPUs.
  ASSERT_TRUE(policy.Join(Gang("short", 1, 2, 4, 200), 1, "h1").ok());
  Decisions decisions = policy.Schedule(20);
  ASSERT_THAT(decisions.admitted, SizeIs(1));
  EXPECT_EQ(decisions.admitted[0].gang_id, "short");

  // h0 goes to "first" at 100; "second" waits for h1, and "long" still may
  // not take h1's GPUs past 300.
  ASSERT_TRUE(policy.Finish("a").ok());
  decisions = policy.Schedule(100);
  ASSERT_THAT(decisions.admitted, SizeIs(1));
  EXPECT_EQ(decisions.admitted[0].gang_id, "first");
  EXPECT_EQ(policy.reservation()->gang_id, "second");
  EXPECT_EQ(policy.reservation()->start, 300);
  ASSERT_TRUE(policy.Finish("short").ok());
  EXPECT_THAT(policy.Schedule(220).admitted, IsEmpty());
  ASSERT_TRUE(policy.Finish("b").ok());
  decisions = policy.Schedule(300);
  ASSERT_THAT(decisions.admitted, SizeIs(1));
  EXPECT_EQ(decisions.admitted[0].gang_id, "second");
}

TEST(ReservationDepthTest, ASecondReservationCountsTheFirstOnesGpus) {
  // One host of 10 GPUs, 2 free: "a" gives back 6 at 100, "b" 2 at 300.
  // "first" (6) is reserved at 100. "second" (4) would fit at 100 too if
  // "first" did not take 6 of the 8 then: it is reserved at 300.
  PolicyOptions options{Mode::kBackfill, 8};
  options.reservation_depth = 2;
  AdmissionPolicy policy(options);
  ASSERT_TRUE(policy.AddHost(HostSpec{"h0", 10, 8, {}}).ok());
  ASSERT_TRUE(policy
                  .AddRunning(Gang("a", 1, 6, 0, 100),
                              {{1, "h0", {0, 1, 2, 3, 4, 5}}}, 100)
                  .ok());
  ASSERT_TRUE(
      policy.AddRunning(Gang("b", 1, 2, 0, 300), {{1, "h0", {6, 7}}}, 300)
          .ok());
  ASSERT_TRUE(policy.Join(Gang("first", 1, 6, 1, 1000), 1, "h0").ok());
  ASSERT_TRUE(policy.Join(Gang("second", 1, 4, 2, 1000), 1, "h0").ok());
  // Both fit on the 2 free GPUs now; "past" would still hold them at 300.
  ASSERT_TRUE(policy.Join(Gang("past", 1, 2, 3, 1000), 1, "h0").ok());
  ASSERT_TRUE(policy.Join(Gang("mid", 1, 2, 4, 200), 1, "h0").ok());
  const Decisions decisions = policy.Schedule(10);
  ASSERT_THAT(policy.reservations(), SizeIs(2));
  EXPECT_EQ(policy.reservations()[0].gang_id, "first");
  EXPECT_EQ(policy.reservations()[0].start, 100);
  EXPECT_EQ(policy.reservations()[1].gang_id, "second");
  EXPECT_EQ(policy.reservations()[1].start, 300);
  EXPECT_EQ(policy.reservations()[1].gpus_by_host.at("h0"), 4u);
  ASSERT_THAT(decisions.admitted, SizeIs(1));
  EXPECT_EQ(decisions.admitted[0].gang_id, "mid");
}

TEST_F(AdmissionPolicyTest, StrictFifoBlocksBehindTheHead) {
  AdmissionPolicy fifo(PolicyOptions{Mode::kStrictFifo, 8});
  AddHosts(fifo, 1, 8, 8);
  JoinAll(fifo, Gang("running", 1, 6, 0, 100), "h0");
  ASSERT_THAT(fifo.Schedule(0).admitted, SizeIs(1));
  JoinAll(fifo, Gang("head", 1, 8, 1), "h0");
  JoinAll(fifo, Gang("short", 1, 2, 2, 50), "h0");
  EXPECT_THAT(fifo.Schedule(10).admitted, IsEmpty());
}

TEST_F(AdmissionPolicyTest, HigherPriorityGoesFirst) {
  AddHosts(gdt_, 1, 8, 8);
  JoinAll(gdt_, Gang("old", 1, 8, 0), "h0");
  GangSpec urgent = Gang("urgent", 1, 8, 5);
  urgent.priority = 1;
  JoinAll(gdt_, urgent, "h0");
  const Decisions decisions = gdt_.Schedule(6);
  ASSERT_THAT(decisions.admitted, SizeIs(1));
  EXPECT_EQ(decisions.admitted[0].gang_id, "urgent");
}

TEST_F(AdmissionPolicyTest, InfeasibleGangsFailAtJoinNamingTheLimit) {
  AddHosts(gdt_, 2, 8, 4);
  absl::Status status = gdt_.Join(Gang("big", 9, 1), 1, "h0");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("limit is 8 nodes per job"));

  status = gdt_.Join(Gang("fat", 1, 16), 1, "h0");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("largest host has 8"));

  status = gdt_.Join(Gang("wide", 3, 8), 1, "h0");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("hold only 2"));

  GangSpec picky = Gang("picky", 1, 1);
  picky.node_selector["rack"] = "r9";
  status = gdt_.Join(picky, 1, "h0");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("node selector"));

  // Nothing was created and no runner slot was taken.
  EXPECT_EQ(gdt_.waiting_gangs(), 0u);
  EXPECT_EQ(gdt_.FreeRunnerSlots("h0"), 4u);
}

TEST_F(AdmissionPolicyTest, MaxNodesIsConfigurable) {
  AdmissionPolicy roomy(PolicyOptions{Mode::kBackfill, 16});
  AddHosts(roomy, 16, 8, 1);
  EXPECT_TRUE(roomy.Join(Gang("big", 9, 8), 1, "h0").ok());
  // An elastic gang is bounded by its largest size, as it may start whole.
  GangSpec elastic = Gang("elastic", 17, 8);
  elastic.min_members = 2;
  const absl::Status status = roomy.Join(elastic, 1, "h1");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(),
              HasSubstr("asks for up to 17 nodes; the limit is 16 nodes"));
}

TEST_F(AdmissionPolicyTest, OnlyDrainedOrDownCapacityFailsAtJoin) {
  AddHosts(gdt_, 2, 8, 4);
  ASSERT_TRUE(gdt_.SetDrained("h0", true).ok());
  absl::Status status = gdt_.Join(Gang("pair", 2, 8), 1, "h1");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("drained or down"));

  ASSERT_TRUE(gdt_.SetDrained("h0", false).ok());
  ASSERT_TRUE(gdt_.SetDown("h1", true).ok());
  status = gdt_.Join(Gang("pair", 2, 8), 1, "h0");
  EXPECT_THAT(status.message(), HasSubstr("drained or down"));
}

TEST_F(AdmissionPolicyTest, DrainedAndDownHostsTakeNoNewGangs) {
  AddHosts(gdt_, 3, 8, 4);
  JoinAll(gdt_, Gang("kept", 1, 8), "h0");
  ASSERT_THAT(gdt_.Schedule(0).admitted, SizeIs(1));
  ASSERT_EQ(gdt_.FreeGpus("h0"), 0u);  // Its runner's host, on a tie.

  // Drain one of the other hosts and take the last one down.
  const std::vector<std::string> others = {"h1", "h2"};
  ASSERT_TRUE(gdt_.SetDrained(others[0], true).ok());
  ASSERT_TRUE(gdt_.SetDown(others[1], true).ok());
  EXPECT_EQ(gdt_.FreeRunnerSlots(others[1]), 0u);
  EXPECT_EQ(gdt_.Join(Gang("next", 1, 8, 1), 1, others[1]).code(),
            absl::StatusCode::kResourceExhausted);

  ASSERT_TRUE(gdt_.Join(Gang("next", 1, 8, 1), 1, others[0]).ok());
  EXPECT_THAT(gdt_.Schedule(1).admitted, IsEmpty());
  EXPECT_TRUE(gdt_.IsRunning("kept"));  // Running gangs keep their GPUs.

  ASSERT_TRUE(gdt_.SetDrained(others[0], false).ok());
  const Decisions decisions = gdt_.Schedule(2);
  ASSERT_THAT(decisions.admitted, SizeIs(1));
  EXPECT_EQ(decisions.admitted[0].members[0].host, others[0]);
}

TEST_F(AdmissionPolicyTest, JoinErrors) {
  AddHosts(gdt_, 1, 8, 1);
  const GangSpec spec = Gang("g", 2, 1);
  EXPECT_EQ(gdt_.Join(spec, 3, "h0").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gdt_.Join(spec, 1, "nowhere").code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(gdt_.Join(spec, 1, "h0").ok());
  EXPECT_EQ(gdt_.Join(spec, 2, "h0").code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(gdt_.Join(Gang("g", 3, 1), 2, "h0").code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(gdt_.Leave("g", 1).ok());
  EXPECT_EQ(gdt_.FreeRunnerSlots("h0"), 1u);
  EXPECT_EQ(gdt_.Finish("g").code(), absl::StatusCode::kFailedPrecondition);
}

// A gang that loses a member after it was complete waits again, in every
// mode's order, until the member is back; then it is tried in its place.
TEST_F(AdmissionPolicyTest, GangThatLosesAMemberWaitsUntilItIsBack) {
  for (const Mode mode : {Mode::kBackfill, Mode::kStrictFifo, Mode::kPreempt}) {
    AdmissionPolicy policy(PolicyOptions{mode, 8});
    AddHosts(policy, 1, 8, 8);
    const GangSpec big = Gang("big", 2, 4, /*queue_time=*/0);
    const GangSpec small = Gang("small", 1, 4, /*queue_time=*/1);
    JoinAll(policy, big, "h0");
    JoinAll(policy, small, "h0");
    ASSERT_TRUE(policy.Leave("big", 2).ok());
    Decisions first = policy.Schedule(10);
    ASSERT_THAT(first.admitted, SizeIs(1)) << static_cast<int>(mode);
    EXPECT_EQ(first.admitted[0].gang_id, "small");
    EXPECT_FALSE(policy.IsRunning("big"));
    ASSERT_TRUE(policy.Finish("small").ok());
    ASSERT_TRUE(policy.Join(big, 2, "h0").ok());
    Decisions second = policy.Schedule(20);
    ASSERT_THAT(second.admitted, SizeIs(1)) << static_cast<int>(mode);
    EXPECT_EQ(second.admitted[0].gang_id, "big");
    EXPECT_EQ(policy.waiting_gangs(), 0u);
  }
}

// Hosts h0..h3 with 8 GPUs: h0, h1 in rack ra; h2, h3 in rack rb.
void AddRacks(AdmissionPolicy& policy) {
  for (int h = 0; h < 4; ++h) {
    HostSpec spec{"h" + std::to_string(h), 8, 8, {}};
    spec.labels["rack"] = h < 2 ? "ra" : "rb";
    ASSERT_TRUE(policy.AddHost(spec).ok());
  }
}

TEST_F(AdmissionPolicyTest, RequiredSameLabelKeepsTheGangInOneDomain) {
  AddRacks(gdt_);
  // Leave 8 GPUs free in each rack: 4 on each host.
  for (int h = 0; h < 4; ++h) {
    JoinAll(gdt_, Gang("fill" + std::to_string(h), 1, 4, h),
            "h" + std::to_string(h));
  }
  ASSERT_THAT(gdt_.Schedule(0).admitted, SizeIs(4));
  GangSpec spread = Gang("spread", 3, 4, 10);
  spread.same_label = "rack";
  spread.same_required = true;
  JoinAll(gdt_, spread, "h0");
  // 12 GPUs are free in all, but no rack has room for 3 members of 4.
  EXPECT_THAT(gdt_.Schedule(1).admitted, IsEmpty());

  ASSERT_TRUE(gdt_.Finish("fill2").ok());
  const Decisions decisions = gdt_.Schedule(2);
  ASSERT_THAT(decisions.admitted, SizeIs(1));
  for (const MemberPlacement& member : decisions.admitted[0].members) {
    EXPECT_TRUE(member.host == "h2" || member.host == "h3") << member.host;
  }
}

TEST_F(AdmissionPolicyTest, PreferredSameLabelFallsBackToAnyHosts) {
  AddRacks(gdt_);
  for (int h = 0; h < 4; ++h) {
    JoinAll(gdt_, Gang("fill" + std::to_string(h), 1, 4, h),
            "h" + std::to_string(h));
  }
  ASSERT_THAT(gdt_.Schedule(0).admitted, SizeIs(4));
  GangSpec two = Gang("two", 2, 4, 10);
  two.same_label = "rack";
  JoinAll(gdt_, two, "h0");
  GangSpec three = Gang("three", 3, 4, 11);
  three.same_label = "rack";
  JoinAll(gdt_, three, "h0");
  const Decisions decisions = gdt_.Schedule(1);
  ASSERT_THAT(decisions.admitted, SizeIs(1));  // 8 + 12 > 16 free GPUs.
  // "two" fits in one rack, so it gets one.
  const std::vector<MemberPlacement>& members = decisions.admitted[0].members;
  EXPECT_EQ(decisions.admitted[0].gang_id, "two");
  EXPECT_EQ(members[0].host < "h2", members[1].host < "h2");
  ASSERT_TRUE(gdt_.Finish("two").ok());
  // "three" cannot have one rack (8 free in each) but may spread.
  EXPECT_THAT(gdt_.Schedule(2).admitted, SizeIs(1));
}

TEST_F(AdmissionPolicyTest, RequiredSameLabelNoDomainCanHoldFailsAtJoin) {
  AddRacks(gdt_);
  GangSpec wide = Gang("wide", 3, 8);
  wide.same_label = "rack";
  wide.same_required = true;
  const absl::Status status = gdt_.Join(wide, 1, "h0");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("in one rack"));
  EXPECT_EQ(gdt_.FreeRunnerSlots("h0"), 8u);  // Nothing was taken.
}

TEST_F(AdmissionPolicyTest, RunningGangsAddedWithTheirPlacementHoldGpus) {
  AddHosts(gdt_, 1, 8, 8);
  ASSERT_TRUE(gdt_.AddRunning(Gang("old", 1, 6),
                              {MemberPlacement{1, "h0", {1, 2, 3, 4, 5, 6}}},
                              /*end_bound=*/500)
                  .ok());
  EXPECT_EQ(gdt_.FreeGpus("h0"), 2u);
  EXPECT_EQ(
      gdt_.AddRunning(Gang("clash", 1, 1), {MemberPlacement{1, "h0", {3}}}, 500)
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gdt_.FreeGpus("h0"), 2u);

  JoinAll(gdt_, Gang("head", 1, 8, 1), "h0");
  JoinAll(gdt_, Gang("small", 1, 2, 2, /*run_bound=*/100), "h0");
  const Decisions decisions = gdt_.Schedule(10);
  ASSERT_THAT(decisions.admitted, SizeIs(1));
  EXPECT_EQ(decisions.admitted[0].gang_id, "small");
  EXPECT_THAT(decisions.admitted[0].members[0].gpus, ElementsAre(0u, 7u));
  ASSERT_TRUE(gdt_.reservation().has_value());
  EXPECT_EQ(gdt_.reservation()->start, 500);
}

TEST_F(AdmissionPolicyTest, ElasticGangNextInLineStartsWithTheMembersThatFit) {
  AddHosts(gdt_, 2, 8, 4);
  JoinAll(gdt_, Gang("busy", 1, 8), "h0");
  ASSERT_THAT(gdt_.Schedule(0).admitted, SizeIs(1));
  GangSpec elastic = Gang("elastic", 4, 4, 1);
  elastic.min_members = 2;
  JoinAll(gdt_, elastic, "h1");
  EXPECT_EQ(gdt_.FreeRunnerSlots("h1"), 0u);

  const Decisions decisions = gdt_.Schedule(10);

  ASSERT_THAT(decisions.admitted, SizeIs(1));
  const Admission& admission = decisions.admitted[0];
  EXPECT_EQ(admission.gang_id, "elastic");
  ASSERT_THAT(admission.members, SizeIs(2));
  EXPECT_EQ(admission.members[0].member_index, 1u);
  EXPECT_EQ(admission.members[1].member_index, 2u);
  EXPECT_THAT(admission.not_needed, ElementsAre(3u, 4u));
  // The members left out gave their runner slots back.
  EXPECT_EQ(gdt_.FreeRunnerSlots("h1"), 2u);
  EXPECT_EQ(gdt_.FreeGpus("h1"), 0u);
  ASSERT_TRUE(gdt_.Finish("elastic").ok());
  EXPECT_EQ(gdt_.FreeRunnerSlots("h1"), 4u);
}

TEST_F(AdmissionPolicyTest, ElasticGangBelowItsMinimumWaits) {
  AddHosts(gdt_, 2, 8, 4);
  JoinAll(gdt_, Gang("busy", 1, 8), "h0");
  ASSERT_THAT(gdt_.Schedule(0).admitted, SizeIs(1));
  GangSpec elastic = Gang("elastic", 4, 4, 1);
  elastic.min_members = 3;
  JoinAll(gdt_, elastic, "h1");

  EXPECT_THAT(gdt_.Schedule(10).admitted, IsEmpty());
  ASSERT_TRUE(gdt_.reservation().has_value());
  EXPECT_EQ(gdt_.reservation()->gang_id, "elastic");
}

TEST_F(AdmissionPolicyTest, CpuOnlyGangsCountCpuSlots) {
  HostSpec cpu{"c0", 0, 8, {}};
  cpu.cpu_slots = 2;
  ASSERT_TRUE(gdt_.AddHost(cpu).ok());
  EXPECT_EQ(gdt_.Join(Gang("three", 3, 0), 1, "c0").code(),
            absl::StatusCode::kFailedPrecondition);
  JoinAll(gdt_, Gang("one", 1, 0), "c0");
  JoinAll(gdt_, Gang("pair", 2, 0, 1), "c0");
  JoinAll(gdt_, Gang("last", 1, 0, 2), "c0");
  Decisions decisions = gdt_.Schedule(0);
  // "pair" does not fit beside "one"; "last" may go ahead of it.
  ASSERT_THAT(decisions.admitted, SizeIs(2));
  EXPECT_EQ(decisions.admitted[0].gang_id, "one");
  EXPECT_EQ(decisions.admitted[1].gang_id, "last");
  ASSERT_TRUE(gdt_.Finish("one").ok());
  ASSERT_TRUE(gdt_.Finish("last").ok());
  decisions = gdt_.Schedule(1);
  ASSERT_THAT(decisions.admitted, SizeIs(1));
  EXPECT_EQ(decisions.admitted[0].gang_id, "pair");
}

// One host of 8 GPUs: "running" holds 6 until 1000, "head" needs 8, and
// two gangs of 2 GPUs that both end before 1000 compete for the 2 free ones.
// Returns the one that starts at `now`.
std::string BackfilledAt(BackfillOrder order, Seconds long_queued,
                         Seconds now) {
  AdmissionPolicy policy(PolicyOptions{Mode::kBackfill, 8, order});
  EXPECT_TRUE(policy.AddHost(HostSpec{"h0", 8, 8, {}}).ok());
  auto join = [&](const GangSpec& spec) {
    EXPECT_TRUE(policy.Join(spec, 1, "h0").ok()) << spec.id;
  };
  join(Gang("running", 1, 6, -20000, /*run_bound=*/now + 990));
  EXPECT_EQ(policy.Schedule(10).admitted.size(), 1u);
  join(Gang("head", 1, 8, -10000));
  join(Gang("long", 1, 2, long_queued, /*run_bound=*/900));
  join(Gang("short", 1, 2, now - 10, /*run_bound=*/100));
  const Decisions decisions = policy.Schedule(now);
  EXPECT_EQ(decisions.admitted.size(), 1u);
  EXPECT_EQ(policy.reservation()->start, now + 1000);  // Never delayed.
  return decisions.admitted.empty() ? "" : decisions.admitted[0].gang_id;
}

TEST(BackfillOrderTest, ShortGangsGoFirstUntilALongOneHasWaitedLong) {
  const Seconds now = 20000;
  // "long" (bound 900) queued 20 s ago, "short" (bound 100) 10 s ago.
  EXPECT_EQ(BackfilledAt(BackfillOrder::kQueue, now - 20, now), "long");
  EXPECT_EQ(BackfilledAt(BackfillOrder::kShortestFirst, now - 20, now),
            "short");
  // Keys wait / sqrt(bound): 20 / 30 for long, 10 / 10 for short.
  EXPECT_EQ(BackfilledAt(BackfillOrder::kAgedShortestFirst, now - 20, now),
            "short");
  // After 10,000 s long's key (10,000 / 30) beats short's.
  EXPECT_EQ(BackfilledAt(BackfillOrder::kAgedShortestFirst, now - 10000, now),
            "long");
  EXPECT_EQ(BackfilledAt(BackfillOrder::kShortestFirst, now - 10000, now),
            "short");
}

TEST(BackfillOrderTest, HigherPriorityIsTriedFirstBehindTheHead) {
  AdmissionPolicy policy(PolicyOptions{Mode::kBackfill, 8});
  ASSERT_TRUE(policy.AddHost(HostSpec{"h0", 8, 8, {}}).ok());
  auto join = [&](GangSpec spec, int32_t priority) {
    spec.priority = priority;
    ASSERT_TRUE(policy.Join(spec, 1, "h0").ok()) << spec.id;
  };
  join(Gang("running", 1, 6, 0, /*run_bound=*/1000), 9);
  ASSERT_EQ(policy.Schedule(0).admitted.size(), 1u);
  join(Gang("head", 1, 8, 1), 5);
  join(Gang("short-low", 1, 2, 2, /*run_bound=*/100), 0);
  join(Gang("long-high", 1, 2, 3, /*run_bound=*/900), 1);

  const Decisions decisions = policy.Schedule(10);

  ASSERT_EQ(decisions.admitted.size(), 1u);
  EXPECT_EQ(decisions.admitted[0].gang_id, "long-high");
}

// Preemption: hosts h0.. of 8 GPUs; running gangs are started through the
// policy so that their start times are known.
class PreemptTest : public ::testing::Test {
 protected:
  PreemptTest() { Rebuild(PreemptOptions{}.overdue_backlog_fraction); }
  // A fresh policy (no hosts) with this share of the backlog after which a
  // waiting gang is overdue.
  void Rebuild(double overdue_backlog_fraction) {
    PolicyOptions options{Mode::kPreempt, 8};
    options.preempt.max_preemptions = 2;
    options.preempt.grace = 60;
    options.preempt.demote_after_gpu_seconds = 8 * 1000.0;
    options.preempt.min_run = 600;
    options.preempt.overdue_backlog_fraction = overdue_backlog_fraction;
    policy_ = std::make_unique<AdmissionPolicy>(options);
  }
  void AddHosts(int hosts) {
    for (int h = 0; h < hosts; ++h) {
      ASSERT_TRUE(policy_
                      ->AddHost(HostSpec{"h" + std::to_string(h), 8, 8,
                                         /*labels=*/{}})
                      .ok());
    }
  }
  // Starts a 1-member gang at `now` on `host`.
  void Start(GangSpec spec, const std::string& host, Seconds now) {
    ASSERT_TRUE(policy_->Join(spec, 1, host).ok()) << spec.id;
    const Decisions decisions = policy_->Schedule(now);
    ASSERT_THAT(decisions.admitted, SizeIs(1)) << spec.id;
    ASSERT_EQ(decisions.admitted[0].gang_id, spec.id);
  }
  static GangSpec Victim(const std::string& id, uint32_t gpus,
                         Seconds checkpoint_interval, int32_t priority = 0) {
    GangSpec spec = Gang(id, 1, gpus, 0, /*run_bound=*/100000);
    spec.preemptible = true;
    spec.checkpoint_interval = checkpoint_interval;
    spec.priority = priority;
    return spec;
  }
  std::unique_ptr<AdmissionPolicy> policy_;
};

TEST_F(PreemptTest, HigherPriorityStopsTheVictimThatLosesLeastThenStarts) {
  AddHosts(2);
  // At t=1000: a checkpointed at 900 (loses 100 s x 8 GPUs), b at 600.
  Start(Victim("a", 8, 300), "h0", 0);
  Start(Victim("b", 8, 400), "h1", 0);
  GangSpec urgent = Gang("urgent", 1, 8, 1000);
  urgent.priority = 5;
  ASSERT_TRUE(policy_->Join(urgent, 1, "h0").ok());

  const Decisions decisions = policy_->Schedule(1000);

  EXPECT_THAT(decisions.admitted, IsEmpty());
  ASSERT_THAT(decisions.preempted, SizeIs(1));
  const Preemption& preemption = decisions.preempted[0];
  EXPECT_EQ(preemption.gang_id, "a");
  EXPECT_EQ(preemption.by, "urgent");
  EXPECT_EQ(preemption.stop_by, 1060);
  EXPECT_DOUBLE_EQ(preemption.lost_gpu_seconds, 800.0);
  EXPECT_THAT(preemption.reason, HasSubstr("preempted by gang urgent"));
  EXPECT_THAT(preemption.reason, HasSubstr("since the last checkpoint"));
  // Within the grace nothing more is preempted; the head is promised the
  // victim's GPUs at the end of it.
  EXPECT_THAT(policy_->Schedule(1030).preempted, IsEmpty());
  ASSERT_TRUE(policy_->reservation().has_value());
  EXPECT_EQ(policy_->reservation()->start, 1060);

  ASSERT_TRUE(policy_->Finish("a").ok());
  const Decisions after = policy_->Schedule(1045);
  ASSERT_THAT(after.admitted, SizeIs(1));
  EXPECT_EQ(after.admitted[0].gang_id, "urgent");
  EXPECT_TRUE(policy_->IsRunning("b"));
}

TEST_F(PreemptTest, NeverStopsNonPreemptibleOrTooOftenPreemptedGangs) {
  AddHosts(2);
  GangSpec fixed = Victim("fixed", 8, 300);
  fixed.preemptible = false;
  Start(fixed, "h0", 0);
  GangSpec tired = Victim("tired", 8, 300);
  tired.preemptions = 2;  // The limit.
  Start(tired, "h1", 0);
  GangSpec urgent = Gang("urgent", 1, 8, 1000);
  urgent.priority = 5;
  ASSERT_TRUE(policy_->Join(urgent, 1, "h0").ok());

  const Decisions decisions = policy_->Schedule(1000);

  EXPECT_THAT(decisions.preempted, IsEmpty());
  EXPECT_THAT(decisions.admitted, IsEmpty());
}

TEST_F(PreemptTest, EqualPriorityPreemptsOnlyAGangThatHasRunLong) {
  AddHosts(1);
  Start(Victim("long", 8, 300), "h0", 0);
  ASSERT_TRUE(policy_->Join(Gang("new", 1, 8, 500), 1, "h0").ok());
  // 8 GPUs x 500 s is below the 8,000 GPU-seconds after which it is demoted.
  EXPECT_THAT(policy_->Schedule(500).preempted, IsEmpty());

  const Decisions decisions = policy_->Schedule(1000);

  ASSERT_THAT(decisions.preempted, SizeIs(1));
  EXPECT_EQ(decisions.preempted[0].gang_id, "long");
  EXPECT_EQ(decisions.preempted[0].by, "new");
}

TEST_F(PreemptTest, StopsAsFewGangsAsTheHeadNeeds) {
  AddHosts(2);
  GangSpec fixed = Victim("fixed", 4, 300);
  fixed.preemptible = false;
  Start(fixed, "h0", 0);
  // small loses least but freeing it alone leaves h0 with 4 GPUs; big's 8
  // GPUs on h1 are enough by themselves.
  Start(Victim("small", 4, 1000), "h0", 0);
  Start(Victim("big", 8, 700), "h1", 0);
  GangSpec urgent = Gang("urgent", 1, 8, 1000);
  urgent.priority = 5;
  ASSERT_TRUE(policy_->Join(urgent, 1, "h0").ok());

  const Decisions decisions = policy_->Schedule(1000);

  ASSERT_THAT(decisions.preempted, SizeIs(1));
  EXPECT_EQ(decisions.preempted[0].gang_id, "big");
}

// The head, which preemption serves, is the gang with the highest aged key
// (waited / sqrt(run bound)) until an older gang is overdue.
TEST_F(PreemptTest, ShortGangIsServedFirstUntilAnOlderOneIsOverdue) {
  // One host, busy until t=1000 with a gang nobody may stop; at t=100
  // "long" has waited 90 s (key 90 / sqrt(100,000) = 0.28), "short" 40 s
  // (key 40 / sqrt(100) = 4).
  auto head_at_100 = [&](double overdue_backlog_fraction) -> std::string {
    Rebuild(overdue_backlog_fraction);
    AddHosts(1);
    GangSpec busy = Gang("busy", 1, 8, 0, /*run_bound=*/1000);
    Start(busy, "h0", 0);
    EXPECT_TRUE(
        policy_->Join(Gang("long", 1, 8, 10, /*run_bound=*/100000), 1, "h0")
            .ok());
    EXPECT_TRUE(
        policy_->Join(Gang("short", 1, 8, 60, /*run_bound=*/100), 1, "h0")
            .ok());
    const Decisions decisions = policy_->Schedule(100);
    EXPECT_THAT(decisions.admitted, IsEmpty());
    EXPECT_THAT(decisions.preempted, IsEmpty());
    return policy_->reservation().has_value() ? policy_->reservation()->gang_id
                                              : "";
  };
  // Backlog: 8 GPUs x (900 + 100,000 + 100) s over 8 GPUs = 101,000 s; at
  // 0.85 of it nobody is overdue, so the short gang is next in line.
  EXPECT_EQ(head_at_100(PreemptOptions{}.overdue_backlog_fraction), "short");
  // At 0.0005 of it (50.5 s) "long" is overdue and "short" is not: the
  // overdue gang comes first.
  EXPECT_EQ(head_at_100(0.0005), "long");
  // Off: queue order.
  EXPECT_EQ(head_at_100(0), "long");
}

// A victim's retry queues again behind GitLab's pending jobs, so a gang
// that was overdue when it started is not stopped again.
TEST_F(PreemptTest, NeverStopsAGangThatWasOverdueWhenItStarted) {
  auto victim_at = [&](double overdue_backlog_fraction) -> std::string {
    Rebuild(overdue_backlog_fraction);
    AddHosts(2);
    // "late" waited 200,000 s for its start and would lose least (100 s x 8
    // GPUs since its checkpoint, against 300 s x 8 for "fresh").
    GangSpec late = Victim("late", 8, 300);
    late.queue_time = 0;
    Start(late, "h0", 200000);
    GangSpec fresh = Victim("fresh", 8, 700);
    fresh.queue_time = 200000;
    Start(fresh, "h1", 200000);
    GangSpec urgent = Gang("urgent", 1, 8, 201000);
    urgent.priority = 5;
    EXPECT_TRUE(policy_->Join(urgent, 1, "h0").ok());
    const Decisions decisions = policy_->Schedule(201000);
    return decisions.preempted.size() == 1 ? decisions.preempted[0].gang_id
                                           : "";
  };
  // Backlog: (99,000 + 99,000) x 8 + 3,600 x 8 GPU-seconds over 16 GPUs,
  // 100,800 s; "late" waited 200,000 s, more than 0.85 of it.
  EXPECT_EQ(victim_at(PreemptOptions{}.overdue_backlog_fraction), "fresh");
  EXPECT_EQ(victim_at(0), "late");
}

// Gangs behind the head (PreemptOptions::served_behind_head). h0 and h1
// run gangs nobody may stop until `fixed_end`; h2 runs a preemptible gang
// of priority 0. "wide" (2 x 8 GPUs, priority 5) is next in line but can
// never get two hosts before `fixed_end`; "short" (1 x 8, priority 5,
// `short_bound`) waits behind it.
class BehindTheHeadTest : public PreemptTest {
 protected:
  void Build(uint32_t served_behind_head, Seconds fixed_end,
             Seconds short_bound, uint32_t slots_per_host) {
    PolicyOptions options{Mode::kPreempt, 8};
    options.preempt.grace = 60;
    options.preempt.served_behind_head = served_behind_head;
    policy_ = std::make_unique<AdmissionPolicy>(options);
    for (int h = 0; h < 3; ++h) {
      ASSERT_TRUE(policy_
                      ->AddHost(HostSpec{"h" + std::to_string(h), 8,
                                         slots_per_host, /*labels=*/{}})
                      .ok());
    }
    for (const std::string host : {"h0", "h1"}) {
      Start(Gang("fixed-" + host, 1, 8, 0, fixed_end), host, 0);
    }
    Start(Victim("low", 8, 300), "h2", 0);
    GangSpec wide = Gang("wide", 2, 8, 100);
    wide.priority = 5;
    ASSERT_TRUE(policy_->Join(wide, 1, "h0").ok());
    ASSERT_TRUE(policy_->Join(wide, 2, "h1").ok());
    GangSpec brief = Gang("short", 1, 8, 900, short_bound);
    brief.priority = 5;
    ASSERT_TRUE(policy_->Join(brief, 1, "h2").ok());
  }
};

TEST_F(BehindTheHeadTest, AGangBehindAHeadNobodyCanServeGetsAVictim) {
  Build(/*served_behind_head=*/8, /*fixed_end=*/100000, /*short_bound=*/3600,
        /*slots_per_host=*/8);

  const Decisions decisions = policy_->Schedule(1000);

  ASSERT_TRUE(policy_->reservation().has_value());
  EXPECT_EQ(policy_->reservation()->gang_id, "wide");
  ASSERT_THAT(decisions.preempted, SizeIs(1));
  EXPECT_EQ(decisions.preempted[0].gang_id, "low");
  EXPECT_EQ(decisions.preempted[0].by, "short");
  EXPECT_EQ(decisions.preempted[0].stop_by, 1060);
  // Its victim is stopping: nothing more is stopped for it meanwhile, and
  // it starts on the victim's GPUs.
  EXPECT_THAT(policy_->Schedule(1030).preempted, IsEmpty());
  ASSERT_TRUE(policy_->Finish("low").ok());
  const Decisions after = policy_->Schedule(1060);
  ASSERT_THAT(after.admitted, SizeIs(1));
  EXPECT_EQ(after.admitted[0].gang_id, "short");
}

TEST_F(BehindTheHeadTest, OnlyTheHeadIsServedWhenTurnedOff) {
  Build(/*served_behind_head=*/0, /*fixed_end=*/100000, /*short_bound=*/3600,
        /*slots_per_host=*/8);
  EXPECT_THAT(policy_->Schedule(1000).preempted, IsEmpty());
}

TEST_F(BehindTheHeadTest, AGangThatWouldDelayTheHeadGetsNoVictim) {
  // The head's reservation is at 5,000; "short" would run until 1,060 +
  // 7,200 on GPUs the head needs then.
  Build(/*served_behind_head=*/8, /*fixed_end=*/5000, /*short_bound=*/7200,
        /*slots_per_host=*/8);

  const Decisions decisions = policy_->Schedule(1000);

  ASSERT_TRUE(policy_->reservation().has_value());
  EXPECT_EQ(policy_->reservation()->start, 5000);
  EXPECT_THAT(decisions.preempted, IsEmpty());
}

TEST_F(BehindTheHeadTest, NoVictimWhileEveryRunnerSlotIsTaken) {
  // Two slots per host: the three running gangs and the three waiting
  // members hold all six, so a victim's retry would wait for a runner.
  Build(/*served_behind_head=*/8, /*fixed_end=*/100000, /*short_bound=*/3600,
        /*slots_per_host=*/2);
  for (const std::string& host : policy_->host_names()) {
    ASSERT_EQ(policy_->FreeRunnerSlots(host), 0u) << host;
  }
  EXPECT_THAT(policy_->Schedule(1000).preempted, IsEmpty());
}

TEST_F(PreemptTest, BackfillModeNeverPreempts) {
  AdmissionPolicy backfill(PolicyOptions{Mode::kBackfill, 8});
  ASSERT_TRUE(backfill.AddHost(HostSpec{"h0", 8, 8, {}}).ok());
  ASSERT_TRUE(backfill.Join(Victim("low", 8, 300), 1, "h0").ok());
  ASSERT_THAT(backfill.Schedule(0).admitted, SizeIs(1));
  GangSpec urgent = Gang("urgent", 1, 8, 1000);
  urgent.priority = 5;
  ASSERT_TRUE(backfill.Join(urgent, 1, "h0").ok());
  EXPECT_THAT(backfill.Schedule(5000).preempted, IsEmpty());
}

}  // namespace
}  // namespace gdt::policy
