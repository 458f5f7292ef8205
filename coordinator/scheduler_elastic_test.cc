// Elastic gangs (`nodes: min..max`) in the Scheduler, with a fake clock and a
// real in-memory SQLite store: a complete gang that does not fit whole
// starts smaller, a gang missing members starts with those present after
// the elastic wait, the members left out are told they are not needed (also
// when they come late or ask again), and the size survives a restart.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/fake_clock.h"
#include "coordinator/scheduler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/scheduler_fixtures.h"

namespace gdt::coordinator {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class ElasticTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<state::SqliteStore>> store =
        state::SqliteStore::Open(":memory:");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    options_.elastic_wait = 60s;
    Reopen();
  }

  void Reopen() {
    scheduler_.reset();
    absl::StatusOr<std::unique_ptr<Scheduler>> scheduler =
        Scheduler::Create(clock_, *store_, options_);
    ASSERT_TRUE(scheduler.ok()) << scheduler.status();
    scheduler_ = std::move(*scheduler);
  }

  Scheduler& s() { return *scheduler_; }

  // Member `index` of the elastic gang `train` (min..size) joins on stream
  // `index`, asking for `gpus` GPUs.
  absl::StatusOr<std::string> JoinElastic(uint32_t size, uint32_t min,
                                          uint32_t index, uint32_t gpus = 0) {
    JoinRequest join = test::Joining(test::TrainKey(size), index, gpus);
    join.nodes_min = min;
    return s().Join(join, index);
  }

  int AdmitAll() {
    int admitted = 0;
    for (const AdmissionProposal& proposal : s().Plan()) {
      absl::Status status =
          s().Admit(proposal, proposal.candidate_ports.front());
      EXPECT_TRUE(status.ok()) << status;
      if (status.ok()) ++admitted;
    }
    return admitted;
  }

  state::MemberEvent LastEventFor(uint64_t stream_id) {
    state::MemberEvent last;
    for (const state::MemberEvent& event : s().TakeEvents()) {
      if (event.stream_id == stream_id) last = event;
      events_.push_back(event);
    }
    for (const state::MemberEvent& event : events_) {
      if (event.stream_id == stream_id) last = event;
    }
    return last;
  }

  FakeClock clock_;
  SchedulerOptions options_;
  std::unique_ptr<state::SqliteStore> store_;
  std::unique_ptr<Scheduler> scheduler_;
  std::vector<state::MemberEvent> events_;
};

TEST_F(ElasticTest, ACompleteGangThatDoesNotFitWholeStartsWithWhatFits) {
  // One CPU slot: room for one member of a 1..2 gang.
  ASSERT_TRUE(s().RegisterHost(test::CpuHost("cpu-01", 1)).ok());
  ASSERT_TRUE(JoinElastic(2, 1, 1).ok());
  ASSERT_TRUE(JoinElastic(2, 1, 2).ok());

  EXPECT_EQ(AdmitAll(), 1);

  const state::MemberEvent first = LastEventFor(1);
  const state::MemberEvent second = LastEventFor(2);
  ASSERT_EQ(first.kind, state::MemberEvent::Kind::kAdmitted)
      << first.waiting.reason;
  EXPECT_FALSE(first.assignment.not_needed);
  EXPECT_EQ(first.assignment.node_rank, 0u);
  EXPECT_EQ(first.assignment.num_nodes, 1u);
  EXPECT_EQ(first.assignment.world_size, 2u);  // 1 node x 2 processes.
  ASSERT_NE(first.assignment.peers, nullptr);
  EXPECT_EQ(first.assignment.peers->addresses.size(), 1u);
  ASSERT_EQ(second.kind, state::MemberEvent::Kind::kAdmitted);
  EXPECT_TRUE(second.assignment.not_needed);
  EXPECT_EQ(second.assignment.num_nodes, 1u);

  const state::Gang* gang = s().FindGang(first.gang_id);
  ASSERT_NE(gang, nullptr);
  EXPECT_EQ(gang->state, state::GangState::kRunning);
  EXPECT_EQ(gang->Size(), 1u);
  EXPECT_EQ(gang->nodes_min, 1u);
  EXPECT_EQ(gang->not_needed.at(2), 102);

  // The gang succeeds once the member it runs with exits 0.
  ASSERT_TRUE(s().Watch(first.gang_id, 1, 1, 101, 50).ok());
  ASSERT_TRUE(s().ReportExit(first.gang_id, 1, 1, 101, 0).ok());
  EXPECT_EQ(LastEventFor(50).kind, state::MemberEvent::Kind::kGangSucceeded);

  // The left-out job asking again (its runner retried prepare) hears the
  // same answer, also after the gang finished, and starts no new epoch.
  ASSERT_TRUE(s().Leave(test::TrainKey(2), 1, 101).ok());
  ASSERT_TRUE(JoinElastic(2, 1, 2).ok());
  const state::MemberEvent again = LastEventFor(2);
  EXPECT_TRUE(again.assignment.not_needed);
  EXPECT_EQ(s().FindGang(first.gang_id)->epoch, 1u);
}

TEST_F(ElasticTest, AGangThatFitsWholeStartsWhole) {
  ASSERT_TRUE(s().RegisterHost(test::CpuHost("cpu-01", 4)).ok());
  ASSERT_TRUE(JoinElastic(2, 1, 1).ok());
  ASSERT_TRUE(JoinElastic(2, 1, 2).ok());
  EXPECT_EQ(AdmitAll(), 1);
  EXPECT_EQ(LastEventFor(1).assignment.num_nodes, 2u);
  EXPECT_EQ(LastEventFor(2).assignment.node_rank, 1u);
  EXPECT_FALSE(LastEventFor(2).assignment.not_needed);
}

// A fixed-size gang of `gpus` GPUs named `name` (one member) runs.
void RunBlocker(Scheduler& s, uint32_t gpus) {
  state::GangKey key = test::TrainKey(1);
  key.group_name = "blocker";
  JoinRequest join = test::Joining(key, 1, gpus);
  join.job_id = 900;
  ASSERT_TRUE(s.Join(join, 900).ok());
  for (const AdmissionProposal& proposal : s.Plan()) {
    ASSERT_TRUE(s.Admit(proposal, proposal.candidate_ports.front()).ok());
  }
}

TEST_F(ElasticTest, BelowItsMinimumAGangWaits) {
  // Room for one member of 2 GPUs while a 2..3 gang needs two.
  ASSERT_TRUE(s().RegisterHost(test::GpuHost("gpu-01", 8)).ok());
  RunBlocker(s(), 6);
  for (uint32_t index : {1u, 2u, 3u}) {
    ASSERT_TRUE(JoinElastic(3, 2, index, 2).ok());
  }
  EXPECT_EQ(AdmitAll(), 0);
  EXPECT_EQ(LastEventFor(1).kind, state::MemberEvent::Kind::kWaiting);
}

TEST_F(ElasticTest, AfterTheElasticWaitTheMembersPresentStart) {
  ASSERT_TRUE(s().RegisterHost(test::GpuHost("gpu-01", 8)).ok());
  // 2..4 members of 2 GPUs; members 1 and 3 come, 2 and 4 do not (yet).
  ASSERT_TRUE(JoinElastic(4, 2, 1, 2).ok());
  ASSERT_TRUE(JoinElastic(4, 2, 3, 2).ok());
  EXPECT_EQ(AdmitAll(), 0);
  EXPECT_THAT(LastEventFor(3).waiting.reason,
              HasSubstr("2/4 members present, waiting for members 2, 4 — no "
                        "job picked up yet; elastic 2..4: starts with the "
                        "members present (at least 2) once it has waited 60 "
                        "s"));
  clock_.Advance(30s);
  bool was_down = false;
  ASSERT_TRUE(s().Heartbeat("gpu-01", &was_down));
  EXPECT_EQ(AdmitAll(), 0);  // Still within the elastic wait.
  clock_.Advance(31s);
  ASSERT_TRUE(s().Heartbeat("gpu-01", &was_down));
  EXPECT_EQ(AdmitAll(), 1);

  const state::MemberEvent first = LastEventFor(1);
  const state::MemberEvent third = LastEventFor(3);
  ASSERT_EQ(first.kind, state::MemberEvent::Kind::kAdmitted);
  ASSERT_EQ(third.kind, state::MemberEvent::Kind::kAdmitted);
  EXPECT_EQ(first.assignment.num_nodes, 2u);
  std::vector<uint32_t> ranks = {first.assignment.node_rank,
                                 third.assignment.node_rank};
  std::sort(ranks.begin(), ranks.end());
  EXPECT_THAT(ranks, ElementsAre(0u, 1u));
  EXPECT_EQ(first.assignment.gpu_indices.size(), 2u);

  // Member 2's job comes late: not needed, nothing leased for it.
  ASSERT_TRUE(JoinElastic(4, 2, 2, 2).ok());
  const state::MemberEvent late = LastEventFor(2);
  ASSERT_EQ(late.kind, state::MemberEvent::Kind::kAdmitted);
  EXPECT_TRUE(late.assignment.not_needed);
  EXPECT_EQ(late.assignment.num_nodes, 2u);
  const Snapshot snapshot = s().GetSnapshot(false);
  EXPECT_EQ(snapshot.hosts.at(0).leased_gpus.size(), 4u);
}

TEST_F(ElasticTest, TheSizeAndTheMembersLeftOutSurviveARestart) {
  ASSERT_TRUE(s().RegisterHost(test::CpuHost("cpu-01", 1)).ok());
  ASSERT_TRUE(JoinElastic(2, 1, 1).ok());
  ASSERT_TRUE(JoinElastic(2, 1, 2).ok());
  ASSERT_EQ(AdmitAll(), 1);
  const std::string gang_id = LastEventFor(1).gang_id;

  Reopen();
  const state::Gang* gang = s().FindGang(gang_id);
  ASSERT_NE(gang, nullptr);
  EXPECT_EQ(gang->state, state::GangState::kRunning);
  EXPECT_EQ(gang->nodes_min, 1u);
  EXPECT_EQ(gang->Size(), 1u);
  EXPECT_EQ(gang->not_needed.at(2), 102);
  ASSERT_TRUE(JoinElastic(2, 1, 2).ok());
  EXPECT_TRUE(LastEventFor(2).assignment.not_needed);
}

TEST_F(ElasticTest, AFixedSizeGangIsNeverStartedSmaller) {
  ASSERT_TRUE(s().RegisterHost(test::GpuHost("gpu-01", 8)).ok());
  RunBlocker(s(), 6);
  ASSERT_TRUE(JoinElastic(2, 0, 1, 2).ok());
  ASSERT_TRUE(JoinElastic(2, 0, 2, 2).ok());
  clock_.Advance(120s);
  bool was_down = false;
  ASSERT_TRUE(s().Heartbeat("gpu-01", &was_down));
  EXPECT_EQ(AdmitAll(), 0);
  const state::MemberEvent waiting = LastEventFor(1);
  EXPECT_EQ(waiting.kind, state::MemberEvent::Kind::kWaiting);
  EXPECT_THAT(waiting.waiting.reason, HasSubstr("all 2 members present"));
}

}  // namespace
}  // namespace gdt::coordinator
