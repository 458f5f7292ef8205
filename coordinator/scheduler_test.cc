#include "coordinator/scheduler.h"

#include <chrono>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/fake_clock.h"
#include "common/retry_after.h"
#include "common/sha256.h"
#include "coordinator/metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/scheduler_fixtures.h"

namespace gdt::coordinator {
namespace {

using namespace std::chrono_literals;
using test::CpuHost;
using test::GpuHost;
using test::Joining;
using test::TrainKey;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = test::MemoryStore();
    ASSERT_NE(store_, nullptr);
    scheduler_ = test::MakeScheduler(clock_, *store_);
    ASSERT_NE(scheduler_, nullptr);
  }

  // Admits every proposal with the lowest candidate port.
  int AdmitAll() {
    int admitted = 0;
    for (const AdmissionProposal& proposal : scheduler_->Plan()) {
      EXPECT_FALSE(proposal.candidate_ports.empty());
      absl::Status status =
          scheduler_->Admit(proposal, proposal.candidate_ports.front());
      EXPECT_TRUE(status.ok()) << status;
      if (status.ok()) ++admitted;
    }
    return admitted;
  }

  // The last event sent on `stream_id`, or a default one.
  state::MemberEvent LastEventFor(const std::vector<state::MemberEvent>& events,
                                  uint64_t stream_id) {
    state::MemberEvent last;
    for (const state::MemberEvent& event : events) {
      if (event.stream_id == stream_id) last = event;
    }
    return last;
  }

  std::vector<uint32_t> LeasedGpus(const std::string& host) {
    for (const HostView& view : scheduler_->GetSnapshot(true).hosts) {
      if (view.host.spec.name == host) return view.leased_gpus;
    }
    return {};
  }

  const state::Gang& GangAt(size_t i, const Snapshot& snapshot) {
    return snapshot.gangs.at(i);
  }

  FakeClock clock_;
  std::unique_ptr<state::SqliteStore> store_;
  std::unique_ptr<Scheduler> scheduler_;
};

TEST_F(SchedulerTest, GivesReadableStableGangIds) {
  ASSERT_TRUE(scheduler_->RegisterHost(test::CpuHost("cpu-01", 4)).ok());

  absl::StatusOr<std::string> first =
      scheduler_->Join(test::Joining(test::TrainKey(2), 1), 1);
  absl::StatusOr<std::string> again =
      scheduler_->Join(test::Joining(test::TrainKey(2), 2), 2);
  state::GangKey other_instance = test::TrainKey(2);
  other_instance.instance = "https://other.example.com";
  absl::StatusOr<std::string> other =
      scheduler_->Join(test::Joining(other_instance, 1), 3);

  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(*first, "train-p5-pl77-n2");
  EXPECT_EQ(*again, "train-p5-pl77-n2");
  EXPECT_EQ(*other, "train-p5-pl77-n2-2");
}

TEST_F(SchedulerTest, AdmitsNothingUntilEveryMemberIsPresent) {
  ASSERT_TRUE(scheduler_->RegisterHost(test::CpuHost("cpu-01", 4)).ok());

  ASSERT_TRUE(scheduler_->Join(test::Joining(test::TrainKey(2), 1), 11).ok());
  std::vector<AdmissionProposal> proposals = scheduler_->Plan();
  std::vector<state::MemberEvent> events = scheduler_->TakeEvents();

  EXPECT_THAT(proposals, IsEmpty());
  EXPECT_THAT(LeasedGpus("cpu-01"), IsEmpty());
  state::MemberEvent waiting = LastEventFor(events, 11);
  ASSERT_EQ(waiting.kind, state::MemberEvent::Kind::kWaiting);
  EXPECT_EQ(waiting.waiting.reason,
            "gang train (pipeline 77): 1/2 members present, waiting for "
            "member 2 — no job picked up yet");
  EXPECT_EQ(waiting.waiting.members_present, 1u);
  EXPECT_THAT(waiting.waiting.missing_indices, ElementsAre(2u));

  ASSERT_TRUE(scheduler_->Join(test::Joining(test::TrainKey(2), 2), 12).ok());
  EXPECT_EQ(AdmitAll(), 1);
  events = scheduler_->TakeEvents();

  state::MemberEvent first = LastEventFor(events, 11);
  state::MemberEvent second = LastEventFor(events, 12);
  ASSERT_EQ(first.kind, state::MemberEvent::Kind::kAdmitted);
  ASSERT_EQ(second.kind, state::MemberEvent::Kind::kAdmitted);
  EXPECT_EQ(first.assignment.node_rank, 0u);
  EXPECT_EQ(second.assignment.node_rank, 1u);
  EXPECT_EQ(first.assignment.master_port, 29510u);
  EXPECT_EQ(second.assignment.master_port, 29510u);
  EXPECT_EQ(second.assignment.world_size, 4u);  // 2 nodes x 2 processes.
  EXPECT_EQ(second.assignment.master_addr, first.assignment.host_address);
  EXPECT_EQ(second.assignment.network_interface, "eth0");
  EXPECT_EQ(second.assignment.agent_endpoint, "cpu-01:7071");
  ASSERT_NE(second.assignment.peers, nullptr);
  EXPECT_THAT(second.assignment.peers->addresses,
              ElementsAre(first.assignment.host_address,
                          first.assignment.host_address));
  // One list for the whole gang, with the digest of what GDT_PEERS holds.
  EXPECT_EQ(first.assignment.peers, second.assignment.peers);
  EXPECT_EQ(second.assignment.peers->sha256,
            Sha256Hex(absl::StrCat(first.assignment.host_address, "\n",
                                   first.assignment.host_address)));

  // A member fetches the same list later (compact assignments).
  absl::StatusOr<std::shared_ptr<const state::PeerList>> fetched =
      scheduler_->Peers(first.assignment.gang_id, first.assignment.epoch, 2,
                        102);
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  EXPECT_EQ(*fetched, second.assignment.peers);
  // Only for a member of the gang, by its own job id and epoch.
  EXPECT_EQ(
      scheduler_
          ->Peers(first.assignment.gang_id, first.assignment.epoch, 2, 999)
          .status()
          .code(),
      absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(
      scheduler_
          ->Peers(first.assignment.gang_id, first.assignment.epoch + 1, 2, 102)
          .status()
          .code(),
      absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(scheduler_->Peers("no-such-gang", 1, 2, 102).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(SchedulerTest, SendsWaitingEventOnlyWhenTheReasonChanges) {
  ASSERT_TRUE(scheduler_->RegisterHost(test::CpuHost("cpu-01", 4)).ok());
  ASSERT_TRUE(scheduler_->Join(test::Joining(test::TrainKey(3), 1), 11).ok());
  scheduler_->TakeEvents();

  scheduler_->Plan();
  scheduler_->Plan();

  EXPECT_THAT(scheduler_->TakeEvents(), IsEmpty());
}

TEST_F(SchedulerTest, LargeGangReasonNamesTheCountAndTheFirstMissing) {
  SchedulerOptions options;
  options.max_nodes_per_job = 100;
  absl::StatusOr<std::unique_ptr<Scheduler>> scheduler =
      Scheduler::Create(clock_, *store_, options);
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  ASSERT_TRUE((*scheduler)->RegisterHost(test::CpuHost("cpu-01", 100)).ok());

  ASSERT_TRUE(
      (*scheduler)->Join(test::Joining(test::TrainKey(100), 3), 11).ok());
  state::MemberEvent waiting = LastEventFor((*scheduler)->TakeEvents(), 11);

  ASSERT_EQ(waiting.kind, state::MemberEvent::Kind::kWaiting);
  EXPECT_EQ(waiting.waiting.reason,
            "gang train (pipeline 77): 1/100 members present, waiting for "
            "members 1, 2, 4, 5, 6, 7, 8, 9 and 91 more — no job picked up "
            "yet");
  EXPECT_EQ(waiting.waiting.members_present, 1u);
  EXPECT_EQ(waiting.waiting.members_total, 100u);
  ASSERT_EQ(waiting.waiting.missing_indices.size(), 64u);
  EXPECT_EQ(waiting.waiting.missing_indices.front(), 1u);
  EXPECT_EQ(waiting.waiting.missing_indices.back(), 65u);
}

TEST_F(SchedulerTest, CoalescesCountUpdatesWhileMembersAreMissing) {
  ASSERT_TRUE(scheduler_->RegisterHost(test::CpuHost("cpu-01", 4)).ok());
  ASSERT_TRUE(scheduler_->Join(test::Joining(test::TrainKey(4), 1), 11).ok());
  ASSERT_TRUE(scheduler_->Join(test::Joining(test::TrainKey(4), 2), 12).ok());
  std::vector<state::MemberEvent> events = scheduler_->TakeEvents();
  EXPECT_THAT(LastEventFor(events, 11).waiting.reason,
              HasSubstr("2/4 members present"));

  // Within a second of that refresh, only the joining member hears.
  ASSERT_TRUE(scheduler_->Join(test::Joining(test::TrainKey(4), 3), 13).ok());
  scheduler_->Plan();
  events = scheduler_->TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].stream_id, 13u);
  EXPECT_THAT(events[0].waiting.reason, HasSubstr("3/4 members present"));

  // Once the refresh is due, the others hear the new count.
  clock_.Advance(1s);
  scheduler_->Plan();
  events = scheduler_->TakeEvents();
  EXPECT_EQ(events.size(), 2u);
  EXPECT_THAT(LastEventFor(events, 11).waiting.reason,
              HasSubstr("3/4 members present"));
  EXPECT_THAT(LastEventFor(events, 12).waiting.reason,
              HasSubstr("3/4 members present"));

  // The gang completing is no count update: everyone is told at once.
  ASSERT_TRUE(scheduler_->Join(test::Joining(test::TrainKey(4), 4), 14).ok());
  events = scheduler_->TakeEvents();
  for (uint64_t stream : {11u, 12u, 13u, 14u}) {
    EXPECT_THAT(LastEventFor(events, stream).waiting.reason,
                HasSubstr("all 4 members present"))
        << stream;
  }
}

TEST_F(SchedulerTest, WaitingReasonFollowsEveryChangeOfAFormingGang) {
  ASSERT_TRUE(scheduler_->RegisterHost(test::CpuHost("cpu-01", 4)).ok());
  ASSERT_TRUE(scheduler_->Join(test::Joining(test::TrainKey(3), 1), 11).ok());
  absl::StatusOr<std::string> gang =
      scheduler_->Join(test::Joining(test::TrainKey(3), 3), 13);
  ASSERT_TRUE(gang.ok()) << gang.status();
  EXPECT_EQ(scheduler_->GetSnapshot(false).gangs.at(0).reason,
            "gang train (pipeline 77): 2/3 members present, waiting for "
            "member 2 — no job picked up yet");

  ASSERT_TRUE(scheduler_->Join(test::Joining(test::TrainKey(3), 2), 12).ok());
  EXPECT_THAT(scheduler_->GetSnapshot(false).gangs.at(0).reason,
              HasSubstr("all 3 members present"));
  scheduler_->TakeEvents();

  // A complete gang losing a member tells everyone still there at once,
  // although count updates are being coalesced.
  scheduler_->Detach(*gang, 2, 12);
  const std::string lost =
      "gang train (pipeline 77): 2/3 members present, waiting for member 2 "
      "— job 102 disconnected";
  std::vector<state::MemberEvent> events = scheduler_->TakeEvents();
  EXPECT_EQ(LastEventFor(events, 11).waiting.reason, lost);
  EXPECT_EQ(LastEventFor(events, 13).waiting.reason, lost);
  EXPECT_EQ(LastEventFor(events, 13).waiting.members_present, 2u);
  EXPECT_THAT(LastEventFor(events, 13).waiting.missing_indices,
              ElementsAre(2u));

  // A member leaving a forming gang is missing again.
  ASSERT_TRUE(scheduler_->Leave(test::TrainKey(3), 1, 101).ok());
  EXPECT_EQ(scheduler_->GetSnapshot(false).gangs.at(0).reason,
            "gang train (pipeline 77): 1/3 members present, waiting for "
            "members 1, 2 — job 101 disconnected");

  // The next epoch starts counting afresh.
  ASSERT_TRUE(scheduler_->Cancel(*gang, "wrong dataset").ok());
  JoinRequest retry = test::Joining(test::TrainKey(3), 3);
  retry.job_id = 203;
  ASSERT_TRUE(scheduler_->Join(retry, 23).ok());
  events = scheduler_->TakeEvents();
  EXPECT_EQ(LastEventFor(events, 23).waiting.reason,
            "gang train (pipeline 77): 1/3 members present, waiting for "
            "members 1, 2 — no job picked up yet");
  EXPECT_EQ(LastEventFor(events, 23).waiting.members_present, 1u);
}

TEST_F(SchedulerTest, LargeGangCountsEveryJoinAndDetachInAnyOrder) {
  SchedulerOptions options;
  options.max_nodes_per_job = 100;
  absl::StatusOr<std::unique_ptr<Scheduler>> scheduler =
      Scheduler::Create(clock_, *store_, options);
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  ASSERT_TRUE((*scheduler)->RegisterHost(test::CpuHost("cpu-01", 100)).ok());
  // Every member but 50 joins, odd indices first; then 3 and 97 drop out.
  std::string gang;
  for (uint32_t start : {1u, 2u}) {
    for (uint32_t index = start; index <= 100; index += 2) {
      if (index == 50) continue;
      absl::StatusOr<std::string> joined =
          (*scheduler)->Join(test::Joining(test::TrainKey(100), index), index);
      ASSERT_TRUE(joined.ok()) << joined.status();
      gang = *joined;
    }
  }
  (*scheduler)->Detach(gang, 97, 97);
  (*scheduler)->Detach(gang, 3, 3);
  clock_.Advance(1s);
  (*scheduler)->Plan();

  state::MemberEvent waiting = LastEventFor((*scheduler)->TakeEvents(), 1);
  EXPECT_EQ(waiting.waiting.reason,
            "gang train (pipeline 77): 97/100 members present, waiting for "
            "members 3, 50, 97 — job 103 disconnected");
  EXPECT_EQ(waiting.waiting.members_present, 97u);
  EXPECT_THAT(waiting.waiting.missing_indices, ElementsAre(3u, 50u, 97u));
}

TEST_F(SchedulerTest, MemberWhoseStreamEndedIsNoLongerPresent) {
  ASSERT_TRUE(scheduler_->RegisterHost(test::CpuHost("cpu-01", 4)).ok());
  ASSERT_TRUE(scheduler_->Join(test::Joining(test::TrainKey(2), 1), 11).ok());
  absl::StatusOr<std::string> gang =
      scheduler_->Join(test::Joining(test::TrainKey(2), 2), 12);
  ASSERT_TRUE(gang.ok());

  scheduler_->Detach(*gang, 2, 12);

  EXPECT_THAT(scheduler_->Plan(), IsEmpty());
  Snapshot snapshot = scheduler_->GetSnapshot(false);
  EXPECT_EQ(snapshot.gangs.at(0).reason,
            "gang train (pipeline 77): 1/2 members present, waiting for "
            "member 2 — job 102 disconnected");
  EXPECT_FALSE(snapshot.gangs.at(0).members.at(2).present);
}

TEST_F(SchedulerTest, DetachOfAnOlderStreamKeepsTheMemberPresent) {
  ASSERT_TRUE(scheduler_->RegisterHost(test::CpuHost("cpu-01", 4)).ok());
  ASSERT_TRUE(scheduler_->Join(test::Joining(test::TrainKey(2), 1), 11).ok());
  absl::StatusOr<std::string> gang =
      scheduler_->Join(test::Joining(test::TrainKey(2), 1), 21);
  ASSERT_TRUE(gang.ok());
  std::vector<state::MemberEvent> events = scheduler_->TakeEvents();

  scheduler_->Detach(*gang, 1, 11);

  EXPECT_EQ(LastEventFor(events, 11).kind,
            state::MemberEvent::Kind::kSuperseded);
  EXPECT_TRUE(scheduler_->GetSnapshot(false).gangs.at(0).members.at(1).present);
}

TEST_F(SchedulerTest, TwoMembersShareAHostWhenItHasSlots) {
  ASSERT_TRUE(scheduler_->RegisterHost(test::CpuHost("cpu-01", 2)).ok());
  ASSERT_TRUE(scheduler_->Join(test::Joining(test::TrainKey(2), 1), 11).ok());
  ASSERT_TRUE(scheduler_->Join(test::Joining(test::TrainKey(2), 2), 12).ok());

  EXPECT_EQ(AdmitAll(), 1);

  const state::Gang gang = scheduler_->GetSnapshot(false).gangs.at(0);
  EXPECT_EQ(gang.state, state::GangState::kRunning);
  EXPECT_EQ(gang.members.at(1).host_name, "cpu-01");
  EXPECT_EQ(gang.members.at(2).host_name, "cpu-01");
}

TEST_F(SchedulerTest, GangLargerThanTheClusterFailsAtJoin) {
  ASSERT_TRUE(scheduler_->RegisterHost(test::CpuHost("cpu-01", 1)).ok());

  absl::Status status =
      scheduler_->Join(test::Joining(test::TrainKey(2), 1), 11).status();

  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(),
            "gang train needs 2 nodes with 0 GPUs each; the hosts able to "
            "serve it hold only 1");
  EXPECT_THAT(scheduler_->GetSnapshot(true).gangs, IsEmpty());
}

TEST_F(SchedulerTest, MembersDoNotShareAHostWithoutRoom) {
  ASSERT_TRUE(scheduler_->RegisterHost(test::CpuHost("cpu-01", 1)).ok());
  ASSERT_TRUE(scheduler_->RegisterHost(test::CpuHost("cpu-02", 1)).ok());
  state::GangKey eval{"https://gitlab.example.com", 5, 76, "eval", 1};
  ASSERT_TRUE(scheduler_->Join(test::Joining(eval, 1, 0, "cpu-01"), 1).ok());
  ASSERT_EQ(AdmitAll(), 1);
  ASSERT_TRUE(scheduler_->Join(test::Joining(test::TrainKey(2), 1), 11).ok());
  ASSERT_TRUE(scheduler_->Join(test::Joining(test::TrainKey(2), 2), 12).ok());

  EXPECT_EQ(AdmitAll(), 0);
  EXPECT_EQ(scheduler_->GetSnapshot(false).gangs.at(1).reason,
            "gang train (pipeline 77): all 2 members present, waiting for 2 "
            "free slots on up hosts (have 1; held by gang eval-p5-pl76-n1) "
            "(queue position 1)");

  ASSERT_TRUE(scheduler_->Leave(eval, 1, 101).ok());
  EXPECT_EQ(AdmitAll(), 1);
  const state::Gang gang = scheduler_->GetSnapshot(false).gangs.at(0);
  EXPECT_NE(gang.members.at(1).host_name, gang.members.at(2).host_name);
}

TEST_F(SchedulerTest, GpuMembersShareAHostAndLeaseDistinctGpus) {
  ASSERT_TRUE(scheduler_->RegisterHost(test::GpuHost("gpu-01", 8)).ok());
  ASSERT_TRUE(
      scheduler_->Join(test::Joining(test::TrainKey(2), 1, 4), 11).ok());
  ASSERT_TRUE(
      scheduler_->Join(test::Joining(test::TrainKey(2), 2, 4), 12).ok());

  EXPECT_EQ(AdmitAll(), 1);

  const state::Gang gang = scheduler_->GetSnapshot(false).gangs.at(0);
  EXPECT_THAT(gang.members.at(1).gpu_indices, ElementsAre(0u, 1u, 2u, 3u));
  EXPECT_THAT(gang.members.at(2).gpu_indices, ElementsAre(4u, 5u, 6u, 7u));
  EXPECT_THAT(LeasedGpus("gpu-01"),
              ElementsAre(0u, 1u, 2u, 3u, 4u, 5u, 6u, 7u));
}

TEST_F(SchedulerTest, PrefersTheArrivalHostWhenItFits) {
  ASSERT_TRUE(scheduler_->RegisterHost(test::GpuHost("gpu-01", 8)).ok());
  ASSERT_TRUE(scheduler_->RegisterHost(test::GpuHost("gpu-02", 8)).ok());
  ASSERT_TRUE(
      scheduler_->Join(test::Joining(test::TrainKey(2), 1, 8, "gpu-02"), 11)
          .ok());
  ASSERT_TRUE(
      scheduler_->Join(test::Joining(test::TrainKey(2), 2, 8, "gpu-02"), 12)
          .ok());

  EXPECT_EQ(AdmitAll(), 1);

  const state::Gang gang = scheduler_->GetSnapshot(false).gangs.at(0);
  EXPECT_EQ(gang.members.at(1).host_name, "gpu-02");
  EXPECT_EQ(gang.members.at(2).host_name, "gpu-01");  // gpu-02 is full.
  EXPECT_EQ(gang.master_host, "gpu-02");
}

TEST_F(SchedulerTest, DownHostGetsNoPlacement) {
  ASSERT_TRUE(scheduler_->RegisterHost(test::GpuHost("gpu-01", 8)).ok());
  ASSERT_TRUE(scheduler_->RegisterHost(test::GpuHost("gpu-02", 8)).ok());
  clock_.Advance(11s);
  bool was_down = false;
  ASSERT_TRUE(scheduler_->Heartbeat("gpu-02", &was_down));
  EXPECT_TRUE(was_down);
  ASSERT_TRUE(
      scheduler_->Join(test::Joining(test::TrainKey(1), 1, 2, "gpu-01"), 11)
          .ok());

  EXPECT_EQ(AdmitAll(), 1);

  Snapshot snapshot = scheduler_->GetSnapshot(false);
  EXPECT_EQ(snapshot.gangs.at(0).members.at(1).host_name, "gpu-02");
  EXPECT_EQ(snapshot.hosts.at(0).state, state::HostState::kDown);
  EXPECT_EQ(snapshot.hosts.at(1).state, state::HostState::kUp);
}

// A live host keeps its agent: registering it from another endpoint waits
// until the registered agent has missed heartbeats.
TEST_F(SchedulerTest, ALiveHostIsNotTakenOverFromAnotherEndpoint) {
  ASSERT_TRUE(scheduler_->RegisterHost(test::CpuHost("cpu-01", 2)).ok());
  state::HostSpec rogue = test::CpuHost("cpu-01", 2);
  rogue.agent_endpoint = "10.9.9.9:7071";
  clock_.Advance(5s);
  absl::Status refused = scheduler_->RegisterHost(rogue);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused.message(),
            "host cpu-01 is registered with the agent at cpu-01:7071, which "
            "is alive (it heartbeats); an agent at 10.9.9.9:7071 may register "
            "it only after that one has missed heartbeats for 10 s");
  // The registered agent may register again (an agent restart).
  EXPECT_TRUE(scheduler_->RegisterHost(test::CpuHost("cpu-01", 2)).ok());
  EXPECT_EQ(scheduler_->GetSnapshot(false).hosts.at(0).host.spec.agent_endpoint,
            "cpu-01:7071");

  // Once it is down, an agent elsewhere takes the host (a moved agent).
  clock_.Advance(11s);
  EXPECT_TRUE(scheduler_->RegisterHost(rogue).ok());
  EXPECT_EQ(scheduler_->GetSnapshot(false).hosts.at(0).host.spec.agent_endpoint,
            "10.9.9.9:7071");
}

TEST_F(SchedulerTest, ExplainsWhenEveryHostIsDownOrNoneIsRegistered) {
  ASSERT_TRUE(scheduler_->Join(test::Joining(test::TrainKey(1), 1), 11).ok());
  EXPECT_EQ(scheduler_->GetSnapshot(false).gangs.at(0).reason,
            "gang train (pipeline 77): all 1 members present, no host "
            "registered yet");

  ASSERT_TRUE(scheduler_->RegisterHost(test::CpuHost("cpu-01", 1)).ok());
  clock_.Advance(11s);
  EXPECT_THAT(scheduler_->Plan(), IsEmpty());
  EXPECT_THAT(scheduler_->GetSnapshot(false).gangs.at(0).reason,
              HasSubstr("all 1 registered hosts are down"));
}

TEST_F(SchedulerTest, QueuedGangNamesTheGangsThatHoldTheGpus) {
  ASSERT_TRUE(scheduler_->RegisterHost(test::GpuHost("gpu-01", 8)).ok());
  state::GangKey eval{"https://gitlab.example.com", 5, 76, "eval", 1};
  ASSERT_TRUE(scheduler_->Join(test::Joining(eval, 1, 6), 1).ok());
  ASSERT_EQ(AdmitAll(), 1);

  ASSERT_TRUE(
      scheduler_->Join(test::Joining(test::TrainKey(2), 1, 4), 11).ok());
  ASSERT_TRUE(
      scheduler_->Join(test::Joining(test::TrainKey(2), 2, 4), 12).ok());
  EXPECT_EQ(AdmitAll(), 0);

  const std::string reason = scheduler_->GetSnapshot(false).gangs.at(1).reason;
  EXPECT_THAT(reason,
              HasSubstr("gang train (pipeline 77): all 2 members present, "
                        "waiting for 2 × 4 free GPUs on up hosts (room for 0; "
                        "GPUs held by gang eval-p5-pl76-n1)"));
  EXPECT_THAT(reason, HasSubstr("next in line"));
  EXPECT_THAT(reason, HasSubstr("(queue position 1)"));
}

// With preemption enabled, a higher-priority gang that cannot be placed
// makes the policy choose a running gang that declared itself preemptible
// (shown in the snapshot; the stop is in scheduler_preemption_test.cc) and
// never one that did not.
TEST_F(SchedulerTest, PreemptionPlansOnlyGangsThatDeclaredThemselves) {
  for (const bool preemptible : {true, false}) {
    SCOPED_TRACE(preemptible ? "preemptible" : "not preemptible");
    absl::StatusOr<std::unique_ptr<state::SqliteStore>> store =
        state::SqliteStore::Open(":memory:");
    ASSERT_TRUE(store.ok()) << store.status();
    SchedulerOptions options;
    options.preemption.enabled = true;
    absl::StatusOr<std::unique_ptr<Scheduler>> scheduler =
        Scheduler::Create(clock_, **store, options);
    ASSERT_TRUE(scheduler.ok()) << scheduler.status();
    Scheduler& s = **scheduler;
    ASSERT_TRUE(s.RegisterHost(test::GpuHost("gpu-01", 8)).ok());
    state::GangKey low{"https://gitlab.example.com", 5, 76, "low", 1};
    JoinRequest low_join = test::Joining(low, 1, 8);
    low_join.preemptible = preemptible;
    low_join.preempt_retries = 2;
    low_join.job_timeout_seconds = 48 * 3600;
    ASSERT_TRUE(s.Join(low_join, 1).ok());
    std::vector<AdmissionProposal> first = s.Plan();
    ASSERT_EQ(first.size(), 1u);
    ASSERT_TRUE(s.Admit(first[0], first[0].candidate_ports.front()).ok());

    state::GangKey high{"https://gitlab.example.com", 5, 77, "high", 1};
    JoinRequest high_join = test::Joining(high, 1, 8);
    high_join.priority = 5;
    high_join.job_timeout_seconds = 3600;
    absl::StatusOr<std::string> joined = s.Join(high_join, 2);
    ASSERT_TRUE(joined.ok()) << joined.status();

    EXPECT_TRUE(s.Plan().empty());
    const Snapshot snapshot = s.GetSnapshot(false);
    ASSERT_EQ(snapshot.gangs.at(0).id, "low-p5-pl76-n1");
    EXPECT_EQ(snapshot.gangs.at(0).state, state::GangState::kRunning);
    EXPECT_EQ(snapshot.gangs.at(0).preemption_planned_by,
              preemptible ? "high-p5-pl77-n1" : "");
  }
}

TEST_F(SchedulerTest, AdmitSkipsLeasedPortsAndRechecksPlacement) {
  ASSERT_TRUE(scheduler_->RegisterHost(test::GpuHost("gpu-01", 8)).ok());
  ASSERT_TRUE(
      scheduler_->Join(test::Joining(test::TrainKey(1), 1, 1), 11).ok());
  ASSERT_EQ(AdmitAll(), 1);
  state::GangKey other = test::TrainKey(1);
  other.pipeline_id = 78;
  ASSERT_TRUE(scheduler_->Join(test::Joining(other, 1, 1), 21).ok());

  std::vector<AdmissionProposal> proposals = scheduler_->Plan();

  ASSERT_EQ(proposals.size(), 1u);
  EXPECT_EQ(proposals[0].candidate_ports.front(), 29511u);
  EXPECT_EQ(scheduler_->Admit(proposals[0], 29510).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_TRUE(scheduler_->Admit(proposals[0], 29511).ok());
}

// A gang is offered first the ports no gang holds on any host, so that a
// port names one gang's master in the whole cluster while the range allows;
// once every port is held somewhere, those held on other hosts only.
TEST_F(SchedulerTest, MasterPortsPreferOnesNoGangHoldsOnAnyHost) {
  std::unique_ptr<state::SqliteStore> store = test::MemoryStore();
  ASSERT_NE(store, nullptr);
  SchedulerOptions options;
  options.master_port_min = 29510;
  options.master_port_max = 29511;
  absl::StatusOr<std::unique_ptr<Scheduler>> scheduler =
      Scheduler::Create(clock_, *store, options);
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  Scheduler& s = **scheduler;
  for (const char* host : {"gpu-01", "gpu-02", "gpu-03"}) {
    ASSERT_TRUE(s.RegisterHost(test::GpuHost(host, 8)).ok());
  }
  for (uint32_t i = 1; i <= 3; ++i) {
    state::GangKey key = test::TrainKey(1);
    key.pipeline_id = 80 + i;
    ASSERT_TRUE(s.Join(test::Joining(key, 1, 8), 10 * i).ok());
  }

  std::vector<AdmissionProposal> proposals = s.Plan();

  ASSERT_EQ(proposals.size(), 3u);
  std::set<std::string> hosts;
  for (const AdmissionProposal& proposal : proposals) {
    hosts.insert(proposal.master_host);
  }
  EXPECT_EQ(hosts.size(), 3u) << "each gang on a host of its own";
  EXPECT_EQ(proposals[0].candidate_ports,
            (std::vector<uint32_t>{29510, 29511}));
  EXPECT_EQ(proposals[1].candidate_ports, (std::vector<uint32_t>{29511, 29510}))
      << "29510 went to the first gang on another host";
  EXPECT_EQ(proposals[2].candidate_ports, (std::vector<uint32_t>{29510, 29511}))
      << "every port is someone's: those free on its host";
  for (const AdmissionProposal& proposal : proposals) {
    EXPECT_TRUE(s.Admit(proposal, proposal.candidate_ports.front()).ok());
  }
}

TEST_F(SchedulerTest, LeasesAreReleasedWhenEveryMemberHasLeft) {
  ASSERT_TRUE(scheduler_->RegisterHost(test::GpuHost("gpu-01", 8)).ok());
  absl::StatusOr<std::string> gang =
      scheduler_->Join(test::Joining(test::TrainKey(2), 1, 2), 11);
  ASSERT_TRUE(gang.ok()) << gang.status();
  ASSERT_TRUE(
      scheduler_->Join(test::Joining(test::TrainKey(2), 2, 2), 12).ok());
  ASSERT_EQ(AdmitAll(), 1);
  ASSERT_TRUE(scheduler_->ReportExit(*gang, 1, 1, 101, 0).ok());
  ASSERT_TRUE(scheduler_->ReportExit(*gang, 1, 2, 102, 0).ok());

  ASSERT_TRUE(scheduler_->Leave(test::TrainKey(2), 1, 101).ok());
  ASSERT_TRUE(
      scheduler_->Leave(test::TrainKey(2), 1, 101).ok());  // Idempotent.
  EXPECT_THAT(LeasedGpus("gpu-01"), ElementsAre(0u, 1u, 2u, 3u));
  ASSERT_TRUE(scheduler_->Leave(test::TrainKey(2), 2, 102).ok());

  EXPECT_THAT(LeasedGpus("gpu-01"), IsEmpty());
  Snapshot snapshot = scheduler_->GetSnapshot(true);
  ASSERT_EQ(snapshot.gangs.size(), 1u);
  EXPECT_EQ(snapshot.gangs[0].state, state::GangState::kDone);
  EXPECT_THAT(scheduler_->GetSnapshot(false).gangs, IsEmpty());
  absl::StatusOr<state::StoredState> stored = store_->Load();
  ASSERT_TRUE(stored.ok());
  EXPECT_THAT(stored->gpu_leases, IsEmpty());
  EXPECT_THAT(stored->port_leases, IsEmpty());
}

TEST_F(SchedulerTest, LeaveOfUnknownGangOrMemberIsFine) {
  EXPECT_TRUE(scheduler_->Leave(test::TrainKey(2), 1, 101).ok());
  ASSERT_TRUE(scheduler_->Join(test::Joining(test::TrainKey(2), 1), 11).ok());
  EXPECT_TRUE(scheduler_->Leave(test::TrainKey(2), 2, 999).ok());
}

TEST_F(SchedulerTest, MemberLeavingAFormingGangIsNoLongerPresent) {
  ASSERT_TRUE(scheduler_->Join(test::Joining(test::TrainKey(2), 1), 11).ok());
  scheduler_->TakeEvents();

  ASSERT_TRUE(scheduler_->Leave(test::TrainKey(2), 1, 101).ok());

  EXPECT_EQ(LastEventFor(scheduler_->TakeEvents(), 11).kind,
            state::MemberEvent::Kind::kAborted);
  EXPECT_FALSE(
      scheduler_->GetSnapshot(false).gangs.at(0).members.at(1).present);
}

TEST_F(SchedulerTest, RejectsInvalidJoins) {
  ASSERT_TRUE(scheduler_->RegisterHost(test::GpuHost("gpu-01", 2)).ok());

  absl::Status too_big =
      scheduler_->Join(test::Joining(test::TrainKey(12), 1), 1).status();
  EXPECT_EQ(too_big.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(too_big.message(),
            "gang train needs 12 nodes but this cluster allows at most 8 per "
            "job (max_nodes_per_job)");
  EXPECT_EQ(
      scheduler_->Join(test::Joining(test::TrainKey(0), 1), 1).status().code(),
      absl::StatusCode::kFailedPrecondition);
  absl::Status bad_index =
      scheduler_->Join(test::Joining(test::TrainKey(2), 3), 1).status();
  EXPECT_EQ(bad_index.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad_index.message(),
            "member index 3 of gang train is outside 1..2");
  EXPECT_EQ(
      scheduler_->Join(test::Joining(test::TrainKey(2), 0), 1).status().code(),
      absl::StatusCode::kInvalidArgument);
  absl::Status gpus =
      scheduler_->Join(test::Joining(test::TrainKey(2), 1, 4), 1).status();
  EXPECT_EQ(gpus.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(gpus.message(),
            "gang train needs 4 GPUs per node but the largest registered host "
            "has 2");
}

TEST_F(SchedulerTest, RejectsASecondLiveJobForTheSameIndex) {
  ASSERT_TRUE(scheduler_->Join(test::Joining(test::TrainKey(2), 1), 11).ok());
  JoinRequest imposter = test::Joining(test::TrainKey(2), 1);
  imposter.job_id = 999;

  absl::Status status = scheduler_->Join(imposter, 12).status();

  EXPECT_EQ(status.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(status.message(),
            "member 1 of gang train-p5-pl77-n2 is already held by job 101");
}

TEST_F(SchedulerTest, RejoinOfAnAdmittedJobGetsItsAssignmentAgain) {
  ASSERT_TRUE(scheduler_->RegisterHost(test::CpuHost("cpu-01", 1)).ok());
  ASSERT_TRUE(scheduler_->Join(test::Joining(test::TrainKey(1), 1), 11).ok());
  ASSERT_EQ(AdmitAll(), 1);
  scheduler_->TakeEvents();

  ASSERT_TRUE(scheduler_->Join(test::Joining(test::TrainKey(1), 1), 12).ok());

  state::MemberEvent event = LastEventFor(scheduler_->TakeEvents(), 12);
  EXPECT_EQ(event.kind, state::MemberEvent::Kind::kAdmitted);
  EXPECT_EQ(event.assignment.host_name, "cpu-01");
  EXPECT_EQ(event.assignment.master_port, 29510u);
}

// A member whose job ends without a reported script exit (a stage around
// the script failed, or the runner gave up on it) fails its running gang at
// once: its peers must not wait for a member that will never finish.
TEST_F(SchedulerTest, MemberLeavingBeforeItsExitReportFailsTheGang) {
  ASSERT_TRUE(scheduler_->RegisterHost(test::GpuHost("gpu-01", 8)).ok());
  absl::StatusOr<std::string> gang =
      scheduler_->Join(test::Joining(test::TrainKey(2), 1, 2), 11);
  ASSERT_TRUE(gang.ok()) << gang.status();
  ASSERT_TRUE(
      scheduler_->Join(test::Joining(test::TrainKey(2), 2, 2), 12).ok());
  ASSERT_EQ(AdmitAll(), 1);
  ASSERT_TRUE(scheduler_->Watch(*gang, 1, 2, 102, 77).ok());
  scheduler_->TakeEvents();

  ASSERT_TRUE(scheduler_->Leave(test::TrainKey(2), 1, 101).ok());

  const state::Gang failed = scheduler_->GetSnapshot(false).gangs.at(0);
  EXPECT_EQ(failed.state, state::GangState::kFailed);
  EXPECT_THAT(failed.reason,
              HasSubstr("member 1/2 (job 101 on host gpu-01) ended before its "
                        "script finished"));
  std::vector<state::MemberEvent> events = scheduler_->TakeEvents();
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().stream_id, 77u);
  EXPECT_EQ(events.back().kind, state::MemberEvent::Kind::kGangFailed);
  EXPECT_EQ(events.back().failed_member, 1u);
  // The peer still runs: the gang's GPUs stay leased until it has left.
  EXPECT_THAT(LeasedGpus("gpu-01"), ElementsAre(0u, 1u, 2u, 3u));
  ASSERT_TRUE(scheduler_->Leave(test::TrainKey(2), 2, 102).ok());
  EXPECT_THAT(LeasedGpus("gpu-01"), IsEmpty());
}

TEST_F(SchedulerTest, RejectsJoiningAFinishedGang) {
  ASSERT_TRUE(scheduler_->RegisterHost(test::CpuHost("cpu-01", 1)).ok());
  absl::StatusOr<std::string> gang =
      scheduler_->Join(test::Joining(test::TrainKey(1), 1), 11);
  ASSERT_TRUE(gang.ok()) << gang.status();
  ASSERT_EQ(AdmitAll(), 1);
  ASSERT_TRUE(scheduler_->ReportExit(*gang, 1, 1, 101, 0).ok());
  ASSERT_TRUE(scheduler_->Leave(test::TrainKey(1), 1, 101).ok());

  absl::Status status =
      scheduler_->Join(test::Joining(test::TrainKey(1), 1), 12).status();

  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("already finished (done)"));
}

TEST_F(SchedulerTest, SameJobRejoiningItsFailedGangIsAborted) {
  ASSERT_TRUE(scheduler_->RegisterHost(test::CpuHost("cpu-01", 1)).ok());
  absl::StatusOr<std::string> gang =
      scheduler_->Join(test::Joining(test::TrainKey(1), 1), 11);
  ASSERT_TRUE(gang.ok()) << gang.status();
  ASSERT_EQ(AdmitAll(), 1);
  ASSERT_TRUE(scheduler_->ReportExit(*gang, 1, 1, 101, 3).ok());
  ASSERT_TRUE(scheduler_->Leave(test::TrainKey(1), 1, 101).ok());

  // The runner's next preparation attempt of job 101.
  absl::Status status =
      scheduler_->Join(test::Joining(test::TrainKey(1), 1), 12).status();

  EXPECT_EQ(status.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(status.message(),
              HasSubstr("a later preparation attempt of the same job"));
}

TEST_F(SchedulerTest, RecordsExitCodes) {
  ASSERT_TRUE(scheduler_->RegisterHost(test::CpuHost("cpu-01", 1)).ok());
  absl::StatusOr<std::string> gang =
      scheduler_->Join(test::Joining(test::TrainKey(1), 1), 11);
  ASSERT_TRUE(gang.ok());
  ASSERT_EQ(AdmitAll(), 1);

  EXPECT_TRUE(scheduler_->ReportExit(*gang, 1, 1, 101, 137).ok());
  EXPECT_EQ(scheduler_->ReportExit(*gang, 1, 1, 555, 0).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(scheduler_->ReportExit("nope", 1, 1, 101, 0).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(scheduler_->GetSnapshot(false).gangs.at(0).members.at(1).exit_code,
            137);
}

// Admits a CPU gang of `size` on cpu-01 and returns its id.
std::string AdmitCpuGang(Scheduler& scheduler, uint32_t size) {
  EXPECT_TRUE(scheduler.RegisterHost(test::CpuHost("cpu-01", size)).ok());
  std::string id;
  for (uint32_t index = 1; index <= size; ++index) {
    absl::StatusOr<std::string> gang =
        scheduler.Join(test::Joining(test::TrainKey(size), index), index);
    EXPECT_TRUE(gang.ok()) << gang.status();
    if (gang.ok()) id = *gang;
  }
  for (const AdmissionProposal& proposal : scheduler.Plan()) {
    EXPECT_TRUE(
        scheduler.Admit(proposal, proposal.candidate_ports.front()).ok());
  }
  scheduler.TakeEvents();
  return id;
}

TEST_F(SchedulerTest, FirstFailureFailsTheGangWithOneRootCause) {
  const std::string gang = AdmitCpuGang(*scheduler_, 3);
  ASSERT_TRUE(scheduler_->Watch(gang, 1, 1, 101, 50).ok());
  ASSERT_TRUE(scheduler_->Watch(gang, 1, 3, 103, 51).ok());
  EXPECT_EQ(LastEventFor(scheduler_->TakeEvents(), 50).kind,
            state::MemberEvent::Kind::kGangRunning);
  clock_.Advance(42s);

  ASSERT_TRUE(scheduler_->ReportExit(gang, 1, 2, 102, 137).ok());

  const std::string reason =
      "gang train-p5-pl77-n3 failed: member 2/3 (job 102 on host cpu-01) "
      "exited 137 at 00:00:43 UTC; stopping";
  const std::vector<state::MemberEvent> events = scheduler_->TakeEvents();
  for (uint64_t watch : {50, 51}) {
    const state::MemberEvent event = LastEventFor(events, watch);
    EXPECT_EQ(event.kind, state::MemberEvent::Kind::kGangFailed) << watch;
    EXPECT_EQ(event.reason, reason);
    EXPECT_EQ(event.failed_member, 2u);
    EXPECT_EQ(event.failed_job_id, 102);
  }
  const state::Gang failed = scheduler_->GetSnapshot(false).gangs.at(0);
  EXPECT_EQ(failed.state, state::GangState::kFailed);
  EXPECT_EQ(failed.reason, reason);
  absl::StatusOr<state::StoredState> stored = store_->Load();
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->gangs.at(0).state, state::GangState::kFailed);
  EXPECT_EQ(stored->gangs.at(0).reason, reason);

  // Later failures (the peers being stopped) keep the first root cause.
  ASSERT_TRUE(scheduler_->ReportExit(gang, 1, 1, 101, 143).ok());
  EXPECT_EQ(scheduler_->GetSnapshot(false).gangs.at(0).reason, reason);
  EXPECT_EQ(scheduler_->GetSnapshot(false).gangs.at(0).members.at(1).exit_code,
            143);
}

TEST_F(SchedulerTest, FailedGangKeepsItsLeasesUntilEveryMemberLeft) {
  const std::string gang = AdmitCpuGang(*scheduler_, 2);
  ASSERT_TRUE(scheduler_->ReportExit(gang, 1, 2, 102, 3).ok());
  ASSERT_TRUE(scheduler_->Leave(test::TrainKey(2), 2, 102).ok());
  EXPECT_EQ(scheduler_->GetSnapshot(false).hosts.at(0).members_running, 2u);
  EXPECT_EQ(scheduler_->GetSnapshot(false).gangs.size(), 1u);

  ASSERT_TRUE(scheduler_->Leave(test::TrainKey(2), 1, 101).ok());

  Snapshot snapshot = scheduler_->GetSnapshot(true);
  EXPECT_EQ(snapshot.hosts.at(0).members_running, 0u);
  ASSERT_EQ(snapshot.gangs.size(), 1u);
  EXPECT_EQ(snapshot.gangs[0].state, state::GangState::kFailed);
  EXPECT_THAT(snapshot.gangs[0].reason, HasSubstr("exited 3"));
  EXPECT_THAT(scheduler_->GetSnapshot(false).gangs, IsEmpty());
  absl::StatusOr<state::StoredState> stored = store_->Load();
  ASSERT_TRUE(stored.ok());
  EXPECT_THAT(stored->port_leases, IsEmpty());
}

TEST_F(SchedulerTest, CancelledMemberFailsTheGang) {
  const std::string gang = AdmitCpuGang(*scheduler_, 2);

  ASSERT_TRUE(scheduler_->ReportExit(gang, 1, 1, 101, 143, true).ok());

  EXPECT_EQ(scheduler_->GetSnapshot(false).gangs.at(0).reason,
            "gang train-p5-pl77-n2 failed: member 1/2 (job 101 on host "
            "cpu-01) was cancelled at 00:00:01 UTC; stopping");
}

TEST_F(SchedulerTest, WatchOfAFailedGangGetsTheRootCauseAtOnce) {
  const std::string gang = AdmitCpuGang(*scheduler_, 2);
  ASSERT_TRUE(scheduler_->ReportExit(gang, 1, 2, 102, 3).ok());
  scheduler_->TakeEvents();

  ASSERT_TRUE(scheduler_->Watch(gang, 1, 1, 101, 60).ok());

  const state::MemberEvent event = LastEventFor(scheduler_->TakeEvents(), 60);
  EXPECT_EQ(event.kind, state::MemberEvent::Kind::kGangFailed);
  EXPECT_THAT(event.reason, HasSubstr("member 2/2 (job 102"));
}

// The agent and the executor both report a member's exit: the second
// report of the same exit changes nothing and tells no watcher anything.
TEST_F(SchedulerTest, TheSameExitReportedTwiceCountsOnce) {
  const std::string gang = AdmitCpuGang(*scheduler_, 2);
  ASSERT_TRUE(scheduler_->Watch(gang, 1, 1, 101, 80).ok());
  scheduler_->TakeEvents();
  ASSERT_TRUE(scheduler_->ReportExit(gang, 1, 2, 102, 0).ok());
  EXPECT_EQ(LastEventFor(scheduler_->TakeEvents(), 80).kind,
            state::MemberEvent::Kind::kGangRunning);
  ASSERT_TRUE(scheduler_->ReportExit(gang, 1, 2, 102, 0).ok());
  EXPECT_THAT(scheduler_->TakeEvents(), IsEmpty());
  // A cancellation is news even after an exit 0 (a member cancelled while
  // it waited for the others).
  ASSERT_TRUE(scheduler_->ReportExit(gang, 1, 2, 102, 0, true).ok());
  EXPECT_EQ(LastEventFor(scheduler_->TakeEvents(), 80).kind,
            state::MemberEvent::Kind::kGangFailed);
}

TEST_F(SchedulerTest, GangSucceedsOnceEveryMemberExitedZero) {
  const std::string gang = AdmitCpuGang(*scheduler_, 2);
  ASSERT_TRUE(scheduler_->Watch(gang, 1, 1, 101, 70).ok());
  state::MemberEvent first = LastEventFor(scheduler_->TakeEvents(), 70);
  EXPECT_EQ(first.kind, state::MemberEvent::Kind::kGangRunning);
  EXPECT_EQ(first.progress.members_total, 2u);
  EXPECT_THAT(first.progress.unfinished_indices, ElementsAre(1u, 2u));

  ASSERT_TRUE(scheduler_->ReportExit(gang, 1, 1, 101, 0).ok());
  state::MemberEvent progress = LastEventFor(scheduler_->TakeEvents(), 70);
  EXPECT_EQ(progress.kind, state::MemberEvent::Kind::kGangRunning);
  EXPECT_THAT(progress.progress.unfinished_indices, ElementsAre(2u));
  ASSERT_TRUE(scheduler_->ReportExit(gang, 1, 2, 102, 0).ok());

  EXPECT_EQ(LastEventFor(scheduler_->TakeEvents(), 70).kind,
            state::MemberEvent::Kind::kGangSucceeded);
  // The watch has ended: no further events go to it.
  ASSERT_TRUE(scheduler_->ReportExit(gang, 1, 2, 102, 0).ok());
  EXPECT_THAT(scheduler_->TakeEvents(), IsEmpty());
  // A cancellation after success changes nothing.
  ASSERT_TRUE(scheduler_->ReportExit(gang, 1, 2, 102, 0, true).ok());
  EXPECT_EQ(scheduler_->GetSnapshot(false).gangs.at(0).state,
            state::GangState::kRunning);
  ASSERT_TRUE(scheduler_->Leave(test::TrainKey(2), 1, 101).ok());
  ASSERT_TRUE(scheduler_->Leave(test::TrainKey(2), 2, 102).ok());
  EXPECT_EQ(scheduler_->GetSnapshot(true).gangs.at(0).state,
            state::GangState::kDone);
}

TEST_F(SchedulerTest, RejectsWatchesOfStrangersAndFormingGangs) {
  ASSERT_TRUE(scheduler_->Join(test::Joining(test::TrainKey(2), 1), 11).ok());
  const std::string gang = "train-p5-pl77-n2";

  EXPECT_EQ(scheduler_->Watch("nope", 1, 1, 101, 80).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(scheduler_->Watch(gang, 1, 2, 102, 80).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(scheduler_->Watch(gang, 1, 1, 999, 80).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(scheduler_->Watch(gang, 1, 1, 101, 80).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(SchedulerTest, DrainedHostTakesNoNewGangsButRunningOnesFinish) {
  ASSERT_TRUE(scheduler_->RegisterHost(test::GpuHost("gpu-01", 8)).ok());
  ASSERT_TRUE(scheduler_->RegisterHost(test::GpuHost("gpu-02", 8)).ok());
  state::GangKey eval{"https://gitlab.example.com", 5, 76, "eval", 1};
  ASSERT_TRUE(scheduler_->Join(test::Joining(eval, 1, 8, "gpu-01"), 1).ok());
  ASSERT_EQ(AdmitAll(), 1);
  ASSERT_EQ(LeasedGpus("gpu-01").size(), 8u);

  ASSERT_TRUE(scheduler_->SetDrained("gpu-01", true).ok());
  ASSERT_TRUE(scheduler_->SetDrained("gpu-02", true).ok());
  EXPECT_EQ(scheduler_->GetSnapshot(false).gangs.at(0).state,
            state::GangState::kRunning);
  // Only drained capacity: a new gang fails at once.
  absl::Status refused =
      scheduler_->Join(test::Joining(test::TrainKey(1), 1, 8), 11).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.message(), HasSubstr("drained or down"));

  ASSERT_TRUE(scheduler_->SetDrained("gpu-02", false).ok());
  state::GangKey other{"https://gitlab.example.com", 5, 75, "other", 1};
  JoinRequest first = test::Joining(other, 1, 8);
  first.job_id = 500;
  ASSERT_TRUE(scheduler_->Join(first, 10).ok());
  ASSERT_EQ(AdmitAll(), 1);
  ASSERT_TRUE(
      scheduler_->Join(test::Joining(test::TrainKey(1), 1, 8), 11).ok());
  EXPECT_EQ(AdmitAll(), 0);
  const Snapshot snapshot = scheduler_->GetSnapshot(false);
  EXPECT_THAT(snapshot.gangs.at(2).reason,
              HasSubstr("GPUs held by gang other-p5-pl75-n1"));
  EXPECT_THAT(snapshot.gangs.at(2).reason,
              HasSubstr("not taking gangs: gpu-01 drained"));
  EXPECT_TRUE(snapshot.hosts.at(0).drained);
  EXPECT_FALSE(snapshot.hosts.at(1).drained);

  // Undrained once its gang left: the waiting gang starts.
  ASSERT_TRUE(scheduler_->Leave(eval, 1, 101).ok());
  ASSERT_TRUE(scheduler_->SetDrained("gpu-01", false).ok());
  EXPECT_EQ(AdmitAll(), 1);
}

TEST_F(SchedulerTest, HostWhoseAgentIsNotReadyTakesNoGangUntilItIs) {
  ASSERT_TRUE(scheduler_->RegisterHost(test::GpuHost("gpu-01", 8)).ok());
  EXPECT_TRUE(scheduler_->SetNotReady("gpu-01", "its endpoint is dead"));
  EXPECT_FALSE(scheduler_->SetNotReady("gpu-01", "its endpoint is dead"));
  EXPECT_FALSE(scheduler_->SetNotReady("nope", "unknown hosts are ignored"));
  // The only capacity is not ready: the gang waits (not fails), naming it.
  ASSERT_TRUE(
      scheduler_->Join(test::Joining(test::TrainKey(1), 1, 8), 11).ok());
  EXPECT_EQ(AdmitAll(), 0);
  Snapshot snapshot = scheduler_->GetSnapshot(false);
  // The reason names the host and the agent's reason, not "drained or
  // down".
  EXPECT_EQ(snapshot.gangs.at(0).reason,
            "gang train (pipeline 77): all 1 members present, cannot start "
            "now: gang train-p5-pl77-n1 needs 1 nodes with 8 GPUs each; hosts "
            "taking gangs hold only 0; not taking gangs: gpu-01 not ready (its "
            "endpoint is dead) (queue position 1)");
  EXPECT_EQ(snapshot.hosts.at(0).not_ready_reason, "its endpoint is dead");
  EXPECT_FALSE(snapshot.hosts.at(0).drained);

  // The next heartbeat without a reason: ready, and the gang starts.
  EXPECT_TRUE(scheduler_->SetNotReady("gpu-01", ""));
  EXPECT_EQ(AdmitAll(), 1);
  EXPECT_EQ(scheduler_->GetSnapshot(false).hosts.at(0).not_ready_reason, "");
}

TEST_F(SchedulerTest, DrainSurvivesRestartAndReregistration) {
  ASSERT_TRUE(scheduler_->RegisterHost(test::GpuHost("gpu-01", 8)).ok());
  ASSERT_TRUE(scheduler_->SetDrained("gpu-01", true).ok());
  ASSERT_TRUE(scheduler_->RegisterHost(test::GpuHost("gpu-01", 8)).ok());
  absl::StatusOr<std::unique_ptr<Scheduler>> restarted =
      Scheduler::Create(clock_, *store_, SchedulerOptions{});
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  EXPECT_TRUE((*restarted)->GetSnapshot(false).hosts.at(0).drained);
  EXPECT_EQ(scheduler_->SetDrained("nope", true).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(scheduler_->SetDrained("nope", true).message(),
            "unknown host nope");
}

TEST_F(SchedulerTest, RemoveRefusesWhileMembersRunThere) {
  ASSERT_TRUE(scheduler_->RegisterHost(test::GpuHost("gpu-01", 8)).ok());
  ASSERT_TRUE(
      scheduler_->Join(test::Joining(test::TrainKey(1), 1, 2), 11).ok());
  ASSERT_EQ(AdmitAll(), 1);

  absl::Status busy = scheduler_->RemoveHost("gpu-01");
  EXPECT_EQ(busy.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(busy.message(),
            "host gpu-01 still runs 1 member of gang train-p5-pl77-n1; drain "
            "it and remove it once they have finished");
  EXPECT_EQ(scheduler_->RemoveHost("gpu-09").code(),
            absl::StatusCode::kNotFound);

  ASSERT_TRUE(scheduler_->Leave(test::TrainKey(1), 1, 101).ok());
  ASSERT_TRUE(scheduler_->RemoveHost("gpu-01").ok());
  EXPECT_THAT(scheduler_->GetSnapshot(false).hosts, IsEmpty());
  bool was_down = false;
  EXPECT_FALSE(scheduler_->Heartbeat("gpu-01", &was_down));  // Re-register.
  absl::StatusOr<state::StoredState> stored = store_->Load();
  ASSERT_TRUE(stored.ok());
  EXPECT_THAT(stored->hosts, IsEmpty());
}

TEST_F(SchedulerTest, HigherPriorityGangStartsFirst) {
  ASSERT_TRUE(scheduler_->RegisterHost(test::GpuHost("gpu-01", 8)).ok());
  state::GangKey low{"https://gitlab.example.com", 5, 70, "low", 1};
  state::GangKey high{"https://gitlab.example.com", 5, 71, "high", 1};
  JoinRequest first = test::Joining(low, 1, 8);
  JoinRequest second = test::Joining(high, 1, 8);
  second.job_id = 201;
  second.priority = 10;
  ASSERT_TRUE(scheduler_->Join(first, 11).ok());
  ASSERT_TRUE(scheduler_->Join(second, 12).ok());

  EXPECT_EQ(AdmitAll(), 1);

  const Snapshot snapshot = scheduler_->GetSnapshot(false);
  EXPECT_EQ(snapshot.gangs.at(0).state, state::GangState::kForming);  // low
  EXPECT_EQ(snapshot.gangs.at(1).state, state::GangState::kRunning);  // high
  EXPECT_THAT(snapshot.gangs.at(0).reason,
              HasSubstr("GPUs held by gang high-p5-pl71-n1"));
}

TEST_F(SchedulerTest, RanksFollowTopologyAndRequiredDomainIsHonoured) {
  for (const auto& [name, rack] :
       std::vector<std::pair<std::string, std::string>>{
           {"a-1", "ra"}, {"b-1", "rb"}, {"b-2", "rb"}}) {
    state::HostSpec spec = test::GpuHost(name, 4);
    spec.labels["rack"] = rack;
    spec.address = "10.1.0." + std::to_string(name.back() - '0') +
                   (rack == "ra" ? "1" : "2");
    ASSERT_TRUE(scheduler_->RegisterHost(spec).ok());
  }
  // Three members of 4 GPUs: one per host; rack rb holds two, so rank 0 is
  // there and the rb pair is adjacent.
  for (uint32_t index = 1; index <= 3; ++index) {
    JoinRequest request = test::Joining(test::TrainKey(3), index, 4);
    request.arrival_host = index == 1 ? "a-1" : "";
    ASSERT_TRUE(scheduler_->Join(request, 10 + index).ok());
  }
  ASSERT_EQ(AdmitAll(), 1);
  const state::Gang gang = scheduler_->GetSnapshot(false).gangs.at(0);
  std::map<int32_t, std::string> host_by_rank;
  for (const auto& [index, member] : gang.members) {
    host_by_rank[member.node_rank] = member.host_name;
  }
  ASSERT_EQ(host_by_rank.size(), 3u);
  EXPECT_EQ(host_by_rank[2], "a-1");
  EXPECT_EQ(gang.master_host, host_by_rank[0]);
  EXPECT_NE(host_by_rank[0], "a-1");

  // "same rack", required: two members of 4 GPUs fit only in rack rb, which
  // is busy, so the gang waits although a-1 would be free.
  for (uint32_t index = 1; index <= 3; ++index) {
    ASSERT_TRUE(scheduler_->Leave(test::TrainKey(3), index, 100 + index).ok());
  }
  state::GangKey eval{"https://gitlab.example.com", 5, 76, "eval", 1};
  JoinRequest blocker = test::Joining(eval, 1, 4, "b-1");
  blocker.job_id = 300;
  ASSERT_TRUE(scheduler_->Join(blocker, 30).ok());
  ASSERT_EQ(AdmitAll(), 1);
  state::GangKey pair{"https://gitlab.example.com", 5, 80, "pair", 2};
  for (uint32_t index = 1; index <= 2; ++index) {
    JoinRequest request = test::Joining(pair, index, 4);
    request.job_id = 400 + index;
    request.topology_same = "rack";
    request.topology_required = true;
    ASSERT_TRUE(scheduler_->Join(request, 40 + index).ok());
  }
  EXPECT_EQ(AdmitAll(), 0);
  ASSERT_TRUE(scheduler_->Leave(eval, 1, 300).ok());
  EXPECT_EQ(AdmitAll(), 1);
  for (const state::Gang& g : scheduler_->GetSnapshot(false).gangs) {
    if (g.key.group_name != "pair") continue;
    EXPECT_EQ(g.members.at(1).host_name.substr(0, 2), "b-");
    EXPECT_EQ(g.members.at(2).host_name.substr(0, 2), "b-");
  }
}

TEST_F(SchedulerTest, RequiredDomainThatCannotExistFailsAtJoin) {
  ASSERT_TRUE(scheduler_->RegisterHost(test::GpuHost("gpu-01", 4)).ok());
  state::HostSpec other = test::GpuHost("gpu-02", 4);
  other.labels["rack"] = "r2";
  ASSERT_TRUE(scheduler_->RegisterHost(other).ok());
  JoinRequest request = test::Joining(test::TrainKey(2), 1, 4);
  request.topology_same = "rack";
  request.topology_required = true;
  absl::Status status = scheduler_->Join(request, 11).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(),
            "gang train requires all 2 nodes in one rack but the largest rack "
            "holds only 1 of them");
}

// Counts deadlock bounces, like the metrics do.
class BounceCounter : public Observer {
 public:
  void DeadlockBounce(const std::string& gang_id) override {
    bounced.push_back(gang_id);
  }
  std::vector<std::string> bounced;
};

// A GPU host whose gitlab-runner runs `runner_slots` jobs at once.
state::HostSpec RunnerHost(const std::string& name, uint32_t gpus,
                           uint32_t runner_slots) {
  state::HostSpec spec = test::GpuHost(name, gpus);
  spec.runner_slots = runner_slots;
  return spec;
}

// Member `index` of the gang of pipeline `pipeline` (2 members × 4 GPUs),
// picked up by the runner on gpu-01; job ids differ per pipeline.
JoinRequest PipelineMember(int64_t pipeline, uint32_t index) {
  state::GangKey key = test::TrainKey(2);
  key.pipeline_id = pipeline;
  JoinRequest request = test::Joining(key, index, 4, "gpu-01");
  request.job_id = pipeline * 100 + index;
  return request;
}

TEST_F(SchedulerTest, RunnerSlotDeadlockBouncesTheYoungerIncompleteGang) {
  BounceCounter counter;
  scheduler_->SetObserver(counter);
  ASSERT_TRUE(scheduler_->RegisterHost(RunnerHost("gpu-01", 8, 2)).ok());
  ASSERT_TRUE(scheduler_->Join(PipelineMember(77, 1), 11).ok());
  ASSERT_TRUE(scheduler_->Join(PipelineMember(78, 1), 21).ok());
  EXPECT_THAT(scheduler_->Plan(), IsEmpty());
  const std::vector<state::MemberEvent> events = scheduler_->TakeEvents();

  // Both runner slots are held by gangs that each miss a member: the
  // younger one (pipeline 78) goes back to GitLab, the older one waits.
  ASSERT_EQ(counter.bounced.size(), 1u);
  const state::MemberEvent bounced = LastEventFor(events, 21);
  ASSERT_EQ(bounced.kind, state::MemberEvent::Kind::kAborted);
  EXPECT_EQ(bounced.gang_id, counter.bounced.front());
  EXPECT_THAT(bounced.reason, HasSubstr("runner-slot deadlock"));
  EXPECT_THAT(bounced.reason, HasSubstr("all 2 runner slots"));
  EXPECT_THAT(bounced.reason, HasSubstr("retry:"));
  EXPECT_THAT(bounced.reason, HasSubstr("runner_system_failure"));
  EXPECT_EQ(LastEventFor(events, 11).kind, state::MemberEvent::Kind::kWaiting);
  const state::Gang* older =
      scheduler_->FindGang(LastEventFor(events, 11).gang_id);
  const state::Gang* younger = scheduler_->FindGang(bounced.gang_id);
  ASSERT_NE(older, nullptr);
  ASSERT_NE(younger, nullptr);
  EXPECT_EQ(older->key.pipeline_id, 77);
  EXPECT_EQ(older->state, state::GangState::kForming);
  EXPECT_EQ(younger->key.pipeline_id, 78);
  EXPECT_EQ(younger->state, state::GangState::kFailed);

  // The slot is free again: the older gang completes and runs, and the
  // bounced gang's retried jobs form it again and run after it.
  ASSERT_TRUE(scheduler_->Join(PipelineMember(77, 2), 12).ok());
  EXPECT_EQ(AdmitAll(), 1);
  JoinRequest retry = PipelineMember(78, 1);
  retry.job_id = 7811;  // The retried job has a new id.
  absl::StatusOr<std::string> rejoined = scheduler_->Join(retry, 22);
  ASSERT_TRUE(rejoined.ok()) << rejoined.status();
  EXPECT_EQ(scheduler_->FindGang(bounced.gang_id)->state,
            state::GangState::kForming);
  EXPECT_EQ(counter.bounced.size(), 1u);
}

TEST_F(SchedulerTest, NoBounceWhileARunnerSlotIsFree) {
  BounceCounter counter;
  scheduler_->SetObserver(counter);
  ASSERT_TRUE(scheduler_->RegisterHost(RunnerHost("gpu-01", 8, 3)).ok());
  ASSERT_TRUE(scheduler_->Join(PipelineMember(77, 1), 11).ok());
  ASSERT_TRUE(scheduler_->Join(PipelineMember(78, 1), 21).ok());
  EXPECT_THAT(scheduler_->Plan(), IsEmpty());
  const std::vector<state::MemberEvent> events = scheduler_->TakeEvents();

  EXPECT_THAT(counter.bounced, IsEmpty());
  EXPECT_EQ(LastEventFor(events, 11).kind, state::MemberEvent::Kind::kWaiting);
  EXPECT_EQ(LastEventFor(events, 21).kind, state::MemberEvent::Kind::kWaiting);
}

TEST_F(SchedulerTest, NoBounceWhenTheHostDeclaresNoRunnerSlots) {
  BounceCounter counter;
  scheduler_->SetObserver(counter);
  ASSERT_TRUE(scheduler_->RegisterHost(RunnerHost("gpu-01", 8, 0)).ok());
  ASSERT_TRUE(scheduler_->Join(PipelineMember(77, 1), 11).ok());
  ASSERT_TRUE(scheduler_->Join(PipelineMember(78, 1), 21).ok());
  EXPECT_THAT(scheduler_->Plan(), IsEmpty());

  EXPECT_THAT(counter.bounced, IsEmpty());
  EXPECT_EQ(LastEventFor(scheduler_->TakeEvents(), 21).kind,
            state::MemberEvent::Kind::kWaiting);
}

TEST_F(SchedulerTest, DownHostWithoutRunnerSlotsDoesNotHideADeadlock) {
  BounceCounter counter;
  scheduler_->SetObserver(counter);
  ASSERT_TRUE(scheduler_->RegisterHost(RunnerHost("gpu-02", 8, 0)).ok());
  clock_.Advance(std::chrono::seconds(11));  // gpu-02 misses heartbeats.
  ASSERT_TRUE(scheduler_->RegisterHost(RunnerHost("gpu-01", 8, 2)).ok());
  ASSERT_TRUE(scheduler_->Join(PipelineMember(77, 1), 11).ok());
  ASSERT_TRUE(scheduler_->Join(PipelineMember(78, 1), 21).ok());
  EXPECT_THAT(scheduler_->Plan(), IsEmpty());

  // Only gpu-01's runner can serve the missing members, and both of its
  // slots are held by incomplete gangs.
  ASSERT_EQ(counter.bounced.size(), 1u);
  EXPECT_EQ(LastEventFor(scheduler_->TakeEvents(), 21).kind,
            state::MemberEvent::Kind::kAborted);
}

TEST_F(SchedulerTest, NoBounceWhenAMemberArrivedThroughAnUnknownRunner) {
  BounceCounter counter;
  scheduler_->SetObserver(counter);
  ASSERT_TRUE(scheduler_->RegisterHost(RunnerHost("gpu-01", 8, 1)).ok());
  JoinRequest elsewhere = PipelineMember(77, 1);
  elsewhere.arrival_host = "runner-9";  // No agent: its slots are unknown.
  ASSERT_TRUE(scheduler_->Join(elsewhere, 11).ok());
  ASSERT_TRUE(scheduler_->Join(PipelineMember(78, 1), 21).ok());
  EXPECT_THAT(scheduler_->Plan(), IsEmpty());

  // gpu-01's only slot is held by an incomplete gang, but runner-9 may have
  // a free one: no deadlock is proven.
  EXPECT_THAT(counter.bounced, IsEmpty());
  const std::vector<state::MemberEvent> events = scheduler_->TakeEvents();
  EXPECT_EQ(LastEventFor(events, 11).kind, state::MemberEvent::Kind::kWaiting);
  EXPECT_EQ(LastEventFor(events, 21).kind, state::MemberEvent::Kind::kWaiting);
}

TEST_F(SchedulerTest, NoBounceWhenAFullSlotHolderIsACompleteGang) {
  BounceCounter counter;
  scheduler_->SetObserver(counter);
  ASSERT_TRUE(scheduler_->RegisterHost(RunnerHost("gpu-01", 8, 3)).ok());
  // Pipeline 76 runs on every GPU, so pipeline 77's complete gang waits.
  state::GangKey whole = test::TrainKey(1);
  whole.pipeline_id = 76;
  JoinRequest running = test::Joining(whole, 1, 8, "gpu-01");
  running.job_id = 7601;
  ASSERT_TRUE(scheduler_->Join(running, 1).ok());
  EXPECT_EQ(AdmitAll(), 1);
  ASSERT_TRUE(scheduler_->Join(PipelineMember(77, 1), 11).ok());
  ASSERT_TRUE(scheduler_->Join(PipelineMember(77, 2), 12).ok());
  ASSERT_TRUE(scheduler_->Join(PipelineMember(78, 1), 21).ok());
  EXPECT_THAT(scheduler_->Plan(), IsEmpty());
  const std::vector<state::MemberEvent> events = scheduler_->TakeEvents();

  // All 3 slots are held, but the complete gang frees its 2 once it runs.
  EXPECT_THAT(counter.bounced, IsEmpty());
  EXPECT_EQ(LastEventFor(events, 21).kind, state::MemberEvent::Kind::kWaiting);
  EXPECT_THAT(LastEventFor(events, 11).waiting.reason,
              HasSubstr("all 2 members present"));
}

TEST_F(SchedulerTest, OversizedJoinFieldsAreRefusedByName) {
  JoinRequest request = Joining(TrainKey(2), 1);
  request.key.instance = std::string(3'500'000, 'x');
  absl::StatusOr<std::string> joined = scheduler_->Join(request, 1);
  EXPECT_EQ(joined.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(joined.status().message(),
            "the GitLab instance is 3500000 bytes long; at most 512 are "
            "accepted");
  request = Joining(TrainKey(2), 1);
  request.key.group_name = std::string(256, 'g');
  EXPECT_THAT(scheduler_->Join(request, 1).status().message(),
              HasSubstr("the gang name is 256 bytes long"));
  EXPECT_TRUE(scheduler_->GetSnapshot(true).gangs.empty());
}

TEST_F(SchedulerTest, OversizedHostsAreRefusedByField) {
  state::HostSpec host = test::GpuHost("gpu-big", 2);
  host.labels["rack"] = std::string(64, 'r');
  EXPECT_EQ(scheduler_->RegisterHost(host).message(),
            "host gpu-big: label rack is 64 bytes long; at most 63 are "
            "accepted");
  host = test::GpuHost("gpu-big", 2);
  for (int i = 0; i < 16; ++i) host.labels[absl::StrCat("l", i)] = "x";
  EXPECT_THAT(scheduler_->RegisterHost(host).message(),
              HasSubstr("host gpu-big has 17 labels; at most 16"));
  host = test::GpuHost("gpu-big", 33);
  EXPECT_THAT(scheduler_->RegisterHost(host).message(),
              HasSubstr("host gpu-big has 33 GPUs; at most 32"));
  host = test::GpuHost("gpu-big", 2);
  host.address = std::string(256, 'a');
  EXPECT_THAT(scheduler_->RegisterHost(host).message(),
              HasSubstr("the address is 256 bytes long; at most 255"));
  EXPECT_TRUE(scheduler_->GetSnapshot(true).hosts.empty());
  // At the bounds a host is accepted.
  host = test::GpuHost("gpu-big", 32);
  host.labels.clear();
  for (int i = 0; i < 16; ++i) {
    host.labels[absl::StrCat("l", i)] = std::string(63, 'v');
  }
  EXPECT_TRUE(scheduler_->RegisterHost(host).ok());
}

TEST(SchedulerQuotaTest, FormingGangsPerPipelineAndProjectAreBounded) {
  FakeClock clock;
  absl::StatusOr<std::unique_ptr<state::SqliteStore>> store =
      state::SqliteStore::Open(":memory:");
  ASSERT_TRUE(store.ok());
  SchedulerOptions options;
  options.max_forming_gangs_per_pipeline = 3;
  options.max_forming_gangs_per_project = 4;
  absl::StatusOr<std::unique_ptr<Scheduler>> scheduler =
      Scheduler::Create(clock, **store, options);
  ASSERT_TRUE(scheduler.ok());
  CoordinatorMetrics metrics(clock);
  (*scheduler)->SetObserver(metrics);
  // One job token's worth of made-up gang names in one pipeline.
  auto join = [&](int64_t pipeline, int i) {
    state::GangKey key = TrainKey(2);
    key.pipeline_id = pipeline;
    key.group_name = absl::StrCat("g", i);
    JoinRequest request = Joining(key, 1);
    request.job_id = pipeline * 100 + i;
    return (*scheduler)->Join(request, pipeline * 100 + i);
  };
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(join(77, i).ok());
  absl::StatusOr<std::string> fourth = join(77, 3);
  EXPECT_EQ(fourth.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(fourth.status().message(),
              HasSubstr("pipeline 77 already has 3 forming gangs "
                        "(max_forming_gangs_per_pipeline)"));
  // The member waits and asks again rather than failing its job.
  EXPECT_EQ(RetryAfter(fourth.status()), std::chrono::seconds(5));
  // Joining a gang that exists is not a new gang.
  state::GangKey existing = TrainKey(2);
  existing.group_name = "g0";
  JoinRequest second = Joining(existing, 2);
  EXPECT_TRUE((*scheduler)->Join(second, 999).ok());
  ASSERT_TRUE(join(78, 0).ok());
  EXPECT_THAT(join(79, 0).status().message(),
              HasSubstr("project 5 already has 4 forming gangs"));
  // Each refusal is counted by the limit that refused it.
  const std::string scraped = metrics.Render((*scheduler)->GetSnapshot(false));
  EXPECT_THAT(scraped,
              HasSubstr("gdt_joins_refused_total{limit=\"forming_gangs_per_"
                        "pipeline\"} 1\n"));
  EXPECT_THAT(scraped,
              HasSubstr("gdt_joins_refused_total{limit=\"forming_gangs_per_"
                        "project\"} 1\n"));
}

TEST(SchedulerQuotaTest, JoinsPerProjectAreRateLimited) {
  FakeClock clock;
  absl::StatusOr<std::unique_ptr<state::SqliteStore>> store =
      state::SqliteStore::Open(":memory:");
  ASSERT_TRUE(store.ok());
  SchedulerOptions options;
  options.join_rate_per_project = 2;
  options.join_burst_per_project = 4;
  absl::StatusOr<std::unique_ptr<Scheduler>> scheduler =
      Scheduler::Create(clock, **store, options);
  ASSERT_TRUE(scheduler.ok());
  CoordinatorMetrics metrics(clock);
  (*scheduler)->SetObserver(metrics);
  int next_job = 1;
  auto join = [&](int64_t project) {
    state::GangKey key = TrainKey(8);
    key.project_id = project;
    const int job = next_job++;
    JoinRequest request = Joining(key, 1 + job % 8);
    request.job_id = job;
    return (*scheduler)->Join(request, job);
  };
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(join(5).ok()) << i;
  absl::StatusOr<std::string> refused = join(5);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("project 5 joins faster than 2 members a second "
                        "(bursts of 4) (join_rate_per_project, "
                        "join_burst_per_project)"));
  // The member is told when the project's next join is let in.
  EXPECT_EQ(RetryAfter(refused.status()), std::chrono::milliseconds(500));
  // Another project is not held back by project 5's flood.
  EXPECT_TRUE(join(6).ok());
  // Project 5 gets its rate back.
  clock.Advance(std::chrono::milliseconds(500));
  EXPECT_TRUE(join(5).ok());
  EXPECT_FALSE(join(5).ok());
  EXPECT_THAT(metrics.Render((*scheduler)->GetSnapshot(false)),
              HasSubstr("gdt_joins_refused_total{limit=\"join_rate_per_"
                        "project\"} 2\n"));
}

// Retention of finished gangs -----------------------------------------.

// Runs gang TrainKey(2) on cpu-01 (AdmitCpuGang) to the end: both members
// exit 0 and leave, and an admission pass sees it finished.
std::string RunCpuGangToTheEnd(Scheduler& scheduler) {
  const std::string gang = AdmitCpuGang(scheduler, 2);
  for (uint32_t index : {1u, 2u}) {
    EXPECT_TRUE(scheduler.ReportExit(gang, 1, index, 100 + index, 0).ok());
    EXPECT_TRUE(scheduler.Leave(test::TrainKey(2), index, 100 + index).ok());
  }
  scheduler.Plan();
  return gang;
}

TEST_F(SchedulerTest, AFinishedGangIsKeptForItsRetentionThenForgotten) {
  CoordinatorMetrics metrics(clock_);
  scheduler_->SetObserver(metrics);
  const std::string gang = RunCpuGangToTheEnd(*scheduler_);
  ASSERT_EQ(scheduler_->FindGang(gang)->state, state::GangState::kDone);

  clock_.Advance(167h);
  EXPECT_THAT(scheduler_->PruneFinishedGangs(), IsEmpty());
  EXPECT_NE(scheduler_->FindGang(gang), nullptr);
  clock_.Advance(1h);
  EXPECT_THAT(scheduler_->PruneFinishedGangs(), ElementsAre(gang));

  EXPECT_EQ(scheduler_->FindGang(gang), nullptr);
  EXPECT_THAT(scheduler_->GetSnapshot(true).gangs, IsEmpty());
  EXPECT_THAT(metrics.Render(scheduler_->GetSnapshot(false)),
              HasSubstr("gdt_gangs_pruned_total 1\n"));
  // Gone from the store too: a restarted scheduler does not load it.
  absl::StatusOr<state::StoredState> stored = store_->Load();
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_THAT(stored->gangs, IsEmpty());
  std::unique_ptr<Scheduler> restarted = test::MakeScheduler(clock_, *store_);
  ASSERT_NE(restarted, nullptr);
  EXPECT_EQ(restarted->FindGang(gang), nullptr);
}

// The end time is stored with the gang: a restart between the end and the
// end of the retention does not start the count again.
TEST_F(SchedulerTest, TheRetentionCountsFromTheStoredEndAcrossARestart) {
  const std::string gang = RunCpuGangToTheEnd(*scheduler_);
  scheduler_->Plan();
  clock_.Advance(100h);
  scheduler_ = test::MakeScheduler(clock_, *store_);
  ASSERT_NE(scheduler_, nullptr);
  ASSERT_NE(scheduler_->FindGang(gang), nullptr);
  scheduler_->Plan();

  clock_.Advance(67h);
  EXPECT_THAT(scheduler_->PruneFinishedGangs(), IsEmpty());
  clock_.Advance(1h);
  EXPECT_THAT(scheduler_->PruneFinishedGangs(), ElementsAre(gang));
}

TEST_F(SchedulerTest,
       ALateCallForAForgottenGangIsNotFoundAndARetryStartsAfresh) {
  const std::string gang = RunCpuGangToTheEnd(*scheduler_);
  clock_.Advance(168h);
  ASSERT_THAT(scheduler_->PruneFinishedGangs(), ElementsAre(gang));

  EXPECT_EQ(scheduler_->ReportExit(gang, 1, 1, 101, 0).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(scheduler_->Watch(gang, 1, 1, 101, 70).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(scheduler_->Peers(gang, 1, 1, 101).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(scheduler_->MemberLost(gang, 1, 1, 101, "gone").code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(scheduler_->Cancel(gang, "").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(scheduler_->ForceCancel(gang, "").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(scheduler_->Leave(test::TrainKey(2), 1, 101).ok());
  EXPECT_THAT(scheduler_->MembersLeft("cpu-01", {gang + "/101"}), IsEmpty());

  // A retried job of the same key forms a fresh gang under the same id.
  bool was_down = false;
  ASSERT_TRUE(scheduler_->Heartbeat("cpu-01", &was_down));
  JoinRequest retry = test::Joining(test::TrainKey(2), 1);
  retry.job_id = 201;
  absl::StatusOr<std::string> fresh = scheduler_->Join(retry, 9);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ(*fresh, gang);
  const state::Gang* formed = scheduler_->FindGang(gang);
  ASSERT_NE(formed, nullptr);
  EXPECT_EQ(formed->state, state::GangState::kForming);
  EXPECT_EQ(formed->epoch, 1u);
  ASSERT_EQ(formed->members.size(), 1u);
  EXPECT_EQ(formed->members.at(1).job_id, 201);
}

TEST_F(SchedulerTest, LiveGangsAndGangsWhoseMembersHaveNotLeftAreKept) {
  const std::string running = AdmitCpuGang(*scheduler_, 2);
  ASSERT_TRUE(scheduler_->RegisterHost(test::CpuHost("cpu-02", 4)).ok());
  state::GangKey eval = test::TrainKey(3);
  eval.group_name = "eval";
  ASSERT_TRUE(scheduler_->Join(test::Joining(eval, 1), 21).ok());
  state::GangKey lint = test::TrainKey(2);
  lint.group_name = "lint";
  absl::StatusOr<std::string> failed;
  for (uint32_t index : {1u, 2u}) {
    failed = scheduler_->Join(test::Joining(lint, index), 30 + index);
    ASSERT_TRUE(failed.ok()) << failed.status();
  }
  ASSERT_EQ(AdmitAll(), 1);
  ASSERT_TRUE(scheduler_->ReportExit(*failed, 1, 1, 101, 1).ok());
  ASSERT_TRUE(scheduler_->Leave(lint, 1, 101).ok());  // Member 2 has not.
  scheduler_->Plan();

  for (int day = 0; day < 30; ++day) {
    clock_.Advance(24h);
    EXPECT_THAT(scheduler_->PruneFinishedGangs(), IsEmpty());
  }
  EXPECT_EQ(scheduler_->FindGang(running)->state, state::GangState::kRunning);
  EXPECT_EQ(scheduler_->FindGang("eval-p5-pl77-n3")->state,
            state::GangState::kForming);
  EXPECT_EQ(scheduler_->FindGang(*failed)->state, state::GangState::kFailed);

  // The retention counts from when the last member left.
  ASSERT_TRUE(scheduler_->Leave(lint, 2, 102).ok());
  scheduler_->Plan();
  clock_.Advance(167h);
  EXPECT_THAT(scheduler_->PruneFinishedGangs(), IsEmpty());
  clock_.Advance(1h);
  EXPECT_THAT(scheduler_->PruneFinishedGangs(), ElementsAre(*failed));
  EXPECT_NE(scheduler_->FindGang(running), nullptr);
}

TEST_F(SchedulerTest, ARetentionOfZeroKeepsEveryFinishedGang) {
  SchedulerOptions options;
  options.finished_gang_retention = 0h;
  scheduler_ = test::MakeScheduler(clock_, *store_, options);
  ASSERT_NE(scheduler_, nullptr);
  const std::string gang = RunCpuGangToTheEnd(*scheduler_);

  clock_.Advance(24h * 3650);
  EXPECT_THAT(scheduler_->PruneFinishedGangs(), IsEmpty());

  EXPECT_NE(scheduler_->FindGang(gang), nullptr);
  absl::StatusOr<state::StoredState> stored = store_->Load();
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->gangs.size(), 1u);
}

// An archived epoch goes after its own retention while the gang's next
// epoch runs; the gang's checkpoint records stay until the gang itself
// goes.
TEST_F(SchedulerTest, AnArchivedEpochIsForgottenWhileItsRetryRuns) {
  ASSERT_TRUE(scheduler_->RegisterHost(test::CpuHost("cpu-01", 2)).ok());
  const state::GangKey key = test::TrainKey(2);
  for (uint32_t index : {1u, 2u}) {
    ASSERT_TRUE(scheduler_->Join(test::Joining(key, index), index).ok());
  }
  ASSERT_EQ(AdmitAll(), 1);
  const std::string gang = "train-p5-pl77-n2";
  ASSERT_TRUE(
      store_->SaveCheckpointRecord({gang, 1, 10, 0, 101, "{}", 1'000}, 8).ok());
  ASSERT_TRUE(scheduler_->ReportExit(gang, 1, 1, 101, 1).ok());
  for (uint32_t index : {1u, 2u}) {
    ASSERT_TRUE(scheduler_->Leave(key, index, 100 + index).ok());
  }
  // The retried jobs start epoch 2; epoch 1 is archived.
  for (uint32_t index : {1u, 2u}) {
    JoinRequest retry = test::Joining(key, index);
    retry.job_id = 200 + index;
    ASSERT_TRUE(scheduler_->Join(retry, 10 + index).ok());
  }
  ASSERT_EQ(AdmitAll(), 1);
  const std::string archived = gang + "#1";
  ASSERT_NE(scheduler_->FindGang(archived), nullptr);

  clock_.Advance(168h);
  EXPECT_THAT(scheduler_->PruneFinishedGangs(), ElementsAre(archived));
  EXPECT_EQ(scheduler_->FindGang(gang)->state, state::GangState::kRunning);
  // Its job is fenced no more, but it is unknown: its late report is refused.
  EXPECT_EQ(scheduler_->ReportExit(archived, 1, 2, 102, 0).code(),
            absl::StatusCode::kNotFound);
  absl::StatusOr<std::vector<state::CheckpointRecord>> records =
      store_->ListCheckpointRecords(gang);
  ASSERT_TRUE(records.ok()) << records.status();
  EXPECT_EQ(records->size(), 1u);

  for (uint32_t index : {1u, 2u}) {
    ASSERT_TRUE(scheduler_->ReportExit(gang, 2, index, 200 + index, 0).ok());
    ASSERT_TRUE(scheduler_->Leave(key, index, 200 + index).ok());
  }
  scheduler_->Plan();
  clock_.Advance(168h);
  EXPECT_THAT(scheduler_->PruneFinishedGangs(), ElementsAre(gang));
  records = store_->ListCheckpointRecords(gang);
  ASSERT_TRUE(records.ok()) << records.status();
  EXPECT_THAT(*records, IsEmpty());
}

// Each call forgets a bounded batch, so that thousands of expired gangs do
// not stall one pass; the rest go on the following calls.
TEST_F(SchedulerTest, PruningForgetsABoundedBatchPerCall) {
  ASSERT_TRUE(scheduler_->RegisterHost(test::CpuHost("cpu-01", 1)).ok());
  const size_t gangs = Scheduler::kPruneBatch + 10;
  for (size_t i = 0; i < gangs; ++i) {
    state::GangKey key = test::TrainKey(1);
    key.pipeline_id = 1000 + static_cast<int64_t>(i);
    JoinRequest join = test::Joining(key, 1);
    absl::StatusOr<std::string> gang = scheduler_->Join(join, 1 + i);
    ASSERT_TRUE(gang.ok()) << gang.status();
    ASSERT_EQ(AdmitAll(), 1);
    ASSERT_TRUE(scheduler_->ReportExit(*gang, 1, 1, join.job_id, 0).ok());
    ASSERT_TRUE(scheduler_->Leave(key, 1, join.job_id).ok());
  }
  scheduler_->Plan();
  clock_.Advance(168h);

  EXPECT_EQ(scheduler_->PruneFinishedGangs().size(), Scheduler::kPruneBatch);
  EXPECT_THAT(scheduler_->PruneFinishedGangs(), IsEmpty());  // Not yet due.
  clock_.Advance(Scheduler::kPruneEvery);
  EXPECT_EQ(scheduler_->PruneFinishedGangs().size(), 10u);
  EXPECT_THAT(scheduler_->GetSnapshot(true).gangs, IsEmpty());
}

}  // namespace
}  // namespace gdt::coordinator
