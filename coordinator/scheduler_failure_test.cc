// Scheduler failure paths: lost hosts and members, operator cancel.
#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/fake_clock.h"
#include "coordinator/scheduler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/scheduler_fixtures.h"

namespace gdt::coordinator {
namespace {

using namespace std::chrono_literals;
using test::CpuHost;
using test::Joining;
using test::TrainKey;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class SchedulerFailureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = test::MemoryStore();
    ASSERT_NE(store_, nullptr);
    scheduler_ = test::MakeScheduler(clock_, *store_);
    ASSERT_NE(scheduler_, nullptr);
  }

  // A running gang of two members, member i on host cpu-0i (one slot each).
  std::string AdmitTwoHostGang() {
    EXPECT_TRUE(scheduler_->RegisterHost(test::CpuHost("cpu-01", 1)).ok());
    EXPECT_TRUE(scheduler_->RegisterHost(test::CpuHost("cpu-02", 1)).ok());
    std::string id;
    for (uint32_t index = 1; index <= 2; ++index) {
      absl::StatusOr<std::string> gang =
          scheduler_->Join(test::Joining(test::TrainKey(2), index), index);
      EXPECT_TRUE(gang.ok()) << gang.status();
      if (gang.ok()) id = *gang;
    }
    for (const AdmissionProposal& proposal : scheduler_->Plan()) {
      EXPECT_TRUE(
          scheduler_->Admit(proposal, proposal.candidate_ports.front()).ok());
    }
    scheduler_->TakeEvents();
    return id;
  }

  const state::Gang& OnlyGang() {
    snapshot_ = scheduler_->GetSnapshot(true);
    return snapshot_.gangs.at(0);
  }

  static state::MemberEvent LastEventFor(
      const std::vector<state::MemberEvent>& events, uint64_t stream_id) {
    state::MemberEvent last;
    for (const state::MemberEvent& event : events) {
      if (event.stream_id == stream_id) last = event;
    }
    return last;
  }

  // A heartbeat of `host` carrying its watched stages' progress, by job id
  // of the gang AdmitTwoHostGang() started.
  void Beat(const std::string& host,
            const std::map<int64_t, MemberProgress>& progress = {}) {
    bool was_down = false;
    ASSERT_TRUE(scheduler_->Heartbeat(host, &was_down)) << host;
    std::map<std::string, MemberProgress> by_member;
    for (const auto& [job_id, member] : progress) {
      by_member[absl::StrCat("train-p5-pl77-n2/", job_id)] = member;
    }
    scheduler_->SetWatchedProgress(host, std::move(by_member));
  }

  FakeClock clock_;
  std::unique_ptr<state::SqliteStore> store_;
  std::unique_ptr<Scheduler> scheduler_;
  Snapshot snapshot_;
};

// A member's job token opens at most kMaxWatchesPerJob watch streams at
// once: thousands (25,000 took 1.2 GiB of a coordinator's memory) are
// refused, while the gang's other members and a closed stream's successor
// still get theirs.
TEST_F(SchedulerFailureTest, AJobOpensABoundedNumberOfWatches) {
  const std::string gang = AdmitTwoHostGang();
  uint64_t next = 100;
  for (int i = 0; i < Scheduler::kMaxWatchesPerJob; ++i) {
    ASSERT_TRUE(scheduler_->Watch(gang, 1, 1, 101, next++).ok()) << i;
  }
  const absl::Status refused = scheduler_->Watch(gang, 1, 1, 101, next++);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.message(),
              HasSubstr("job 101 already has 16 watch streams open on gang " +
                        gang + ", the limit"));
  EXPECT_TRUE(scheduler_->Watch(gang, 1, 2, 102, next++).ok());
  scheduler_->Unwatch(100);
  EXPECT_TRUE(scheduler_->Watch(gang, 1, 1, 101, next++).ok());
  EXPECT_EQ(scheduler_->Watch(gang, 1, 1, 101, next++).code(),
            absl::StatusCode::kResourceExhausted);
}

TEST_F(SchedulerFailureTest, HostThatMissesHeartbeatsFailsItsRunningGang) {
  const std::string gang = AdmitTwoHostGang();
  ASSERT_EQ(OnlyGang().members.at(2).host_name, "cpu-02");
  ASSERT_TRUE(scheduler_->Watch(gang, 1, 1, 101, 50).ok());
  scheduler_->TakeEvents();
  EXPECT_THAT(scheduler_->FailGangsOnLostHosts(), IsEmpty());

  // cpu-01 keeps talking and the passes run every second: the coordinator
  // hears, so cpu-02's silence is cpu-02's.
  for (int second = 1; second <= 10; ++second) {
    clock_.Advance(1s);
    bool was_down = false;
    ASSERT_TRUE(scheduler_->Heartbeat("cpu-01", &was_down));
    EXPECT_THAT(scheduler_->FailGangsOnLostHosts(), IsEmpty());
  }
  clock_.Advance(1s);

  EXPECT_THAT(scheduler_->FailGangsOnLostHosts(), ElementsAre(gang));
  const std::string reason =
      "gang train-p5-pl77-n2 failed: member 2/2 (job 102 on host cpu-02) was "
      "lost: host cpu-02 missed heartbeats for 10 s (last at 00:00:01 UTC) "
      "at 00:00:12 UTC; stopping";
  EXPECT_EQ(OnlyGang().state, state::GangState::kFailed);
  EXPECT_EQ(OnlyGang().reason, reason);
  const state::MemberEvent event = LastEventFor(scheduler_->TakeEvents(), 50);
  EXPECT_EQ(event.kind, state::MemberEvent::Kind::kGangFailed);
  EXPECT_EQ(event.reason, reason);
  EXPECT_EQ(event.failed_job_id, 102);
  absl::StatusOr<state::StoredState> stored = store_->Load();
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->gangs.at(0).reason, reason);

  // Failed once: later passes and reports keep the first root cause.
  EXPECT_THAT(scheduler_->FailGangsOnLostHosts(), IsEmpty());
  ASSERT_TRUE(scheduler_->ReportExit(gang, 1, 1, 101, 143).ok());
  EXPECT_EQ(OnlyGang().reason, reason);
}

// The passes run every second; `seconds` of them with `talking` hosts
// heartbeating before each.
void PassSeconds(Scheduler& scheduler, FakeClock& clock, int seconds,
                 const std::vector<std::string>& talking) {
  for (int second = 0; second < seconds; ++second) {
    clock.Advance(1s);
    for (const std::string& host : talking) {
      bool was_down = false;
      EXPECT_TRUE(scheduler.Heartbeat(host, &was_down)) << host;
    }
    scheduler.FailGangsOnLostHosts();
  }
}

// Counts what the scheduler reports through the observer.
class ExtensionCounter : public Observer {
 public:
  void DeadlinesExtended(std::string_view reason, size_t hosts) override {
    extensions.push_back(
        absl::StrCat(std::string(reason), ":", static_cast<uint64_t>(hosts)));
  }
  std::vector<std::string> extensions;
};

TEST_F(SchedulerFailureTest,
       StalledCoordinatorExtendsDeadlinesInsteadOfFailing) {
  ExtensionCounter observer;
  scheduler_->SetObserver(observer);
  const std::string gang = AdmitTwoHostGang();
  PassSeconds(*scheduler_, clock_, 3, {"cpu-01", "cpu-02"});

  // The coordinator's own loop stops for 30 s (paused, starved): nobody's
  // heartbeats were read, so nobody is declared down.
  clock_.Advance(30s);
  EXPECT_THAT(scheduler_->FailGangsOnLostHosts(), IsEmpty());
  EXPECT_EQ(OnlyGang().state, state::GangState::kRunning);
  EXPECT_EQ(scheduler_->GetSnapshot(false).hosts.at(1).state,
            state::HostState::kUp);
  EXPECT_THAT(observer.extensions, ElementsAre("stalled:2"));

  // Afterwards a host that really stops talking is declared down on time.
  PassSeconds(*scheduler_, clock_, 10, {"cpu-01"});
  EXPECT_EQ(OnlyGang().state, state::GangState::kRunning);
  PassSeconds(*scheduler_, clock_, 1, {"cpu-01"});
  EXPECT_EQ(OnlyGang().state, state::GangState::kFailed);
  EXPECT_THAT(OnlyGang().reason, HasSubstr("host cpu-02 missed heartbeats"));
  EXPECT_THAT(observer.extensions, ElementsAre("stalled:2"));
}

TEST_F(SchedulerFailureTest, DeafCoordinatorGivesSilentHostsOneMoreWindow) {
  ExtensionCounter observer;
  scheduler_->SetObserver(observer);
  const std::string gang = AdmitTwoHostGang();
  PassSeconds(*scheduler_, clock_, 3, {"cpu-01", "cpu-02"});

  // No heartbeat from either host comes in for 11 s while the passes run
  // (their calls wait behind a flood): one extension, one warning.
  PassSeconds(*scheduler_, clock_, 11, {});
  EXPECT_EQ(OnlyGang().state, state::GangState::kRunning);
  EXPECT_THAT(observer.extensions, ElementsAre("quiet:2"));
  // The flood ends, both hosts are heard again: nothing was lost.
  PassSeconds(*scheduler_, clock_, 20, {"cpu-01", "cpu-02"});
  EXPECT_EQ(OnlyGang().state, state::GangState::kRunning);
  EXPECT_THAT(observer.extensions, ElementsAre("quiet:2"));

  // A cluster that really went dark is declared down after the extra window.
  PassSeconds(*scheduler_, clock_, 19, {});
  EXPECT_EQ(OnlyGang().state, state::GangState::kRunning);
  PassSeconds(*scheduler_, clock_, 3, {});
  EXPECT_EQ(OnlyGang().state, state::GangState::kFailed);
  EXPECT_THAT(observer.extensions, ElementsAre("quiet:2", "quiet:2"));
}

TEST_F(SchedulerFailureTest, LoneSilentHostIsDeclaredDownWithoutExtension) {
  ExtensionCounter observer;
  scheduler_->SetObserver(observer);
  const std::string gang = AdmitTwoHostGang();
  PassSeconds(*scheduler_, clock_, 3, {"cpu-01", "cpu-02"});
  // Only cpu-02 falls silent while cpu-01 is heard: no excuse.
  PassSeconds(*scheduler_, clock_, 11, {"cpu-01"});
  EXPECT_EQ(OnlyGang().state, state::GangState::kFailed);
  EXPECT_THAT(observer.extensions, IsEmpty());
}

TEST_F(SchedulerFailureTest, LostHostDoesNotFailAGangThatSucceeded) {
  const std::string gang = AdmitTwoHostGang();
  ASSERT_TRUE(scheduler_->ReportExit(gang, 1, 1, 101, 0).ok());
  ASSERT_TRUE(scheduler_->ReportExit(gang, 1, 2, 102, 0).ok());
  clock_.Advance(11s);

  EXPECT_THAT(scheduler_->FailGangsOnLostHosts(), IsEmpty());
  EXPECT_EQ(OnlyGang().state, state::GangState::kRunning);
}

TEST_F(SchedulerFailureTest, FailedGangReleasesLeasesOfMembersThatNeverLeave) {
  const std::string gang = AdmitTwoHostGang();
  ASSERT_TRUE(scheduler_->ReportExit(gang, 1, 2, 102, 3).ok());
  ASSERT_TRUE(scheduler_->Leave(test::TrainKey(2), 2, 102).ok());
  // Member 1's runner is gone: it never cleans up.
  EXPECT_THAT(scheduler_->ReleaseAbandonedMembers(), IsEmpty());
  clock_.Advance(299s);
  EXPECT_THAT(scheduler_->ReleaseAbandonedMembers(), IsEmpty());
  EXPECT_EQ(scheduler_->GetSnapshot(false).hosts.at(0).members_running, 1u);

  clock_.Advance(1s);
  EXPECT_THAT(scheduler_->ReleaseAbandonedMembers(), ElementsAre(gang));

  Snapshot snapshot = scheduler_->GetSnapshot(false);
  EXPECT_THAT(snapshot.gangs, IsEmpty());
  for (const HostView& host : snapshot.hosts) {
    EXPECT_EQ(host.members_running, 0u) << host.host.spec.name;
  }
  absl::StatusOr<state::StoredState> stored = store_->Load();
  ASSERT_TRUE(stored.ok());
  EXPECT_TRUE(stored->gangs.at(0).members.at(1).left);
  EXPECT_THAT(stored->port_leases, IsEmpty());
  // A late cleanup is still fine.
  EXPECT_TRUE(scheduler_->Leave(test::TrainKey(2), 1, 101).ok());
}

TEST_F(SchedulerFailureTest, FailureThatFollowsALostPeerWaitsForTheCulprit) {
  const std::string gang = AdmitTwoHostGang();
  ASSERT_TRUE(scheduler_->Watch(gang, 1, 1, 101, 90).ok());
  scheduler_->TakeEvents();

  // Member 1's collective broke first; member 2 (killed) reports a moment
  // later: the root cause names member 2.
  ASSERT_TRUE(scheduler_
                  ->ReportExit(gang, 1, 1, 101, 1, false,
                               /*peer_suspected=*/true)
                  .ok());
  EXPECT_EQ(OnlyGang().state, state::GangState::kRunning);
  clock_.Advance(1s);
  EXPECT_THAT(scheduler_->FailSuspectedGangs(), IsEmpty());
  ASSERT_TRUE(scheduler_->ReportExit(gang, 1, 2, 102, 1).ok());

  EXPECT_EQ(OnlyGang().reason,
            "gang train-p5-pl77-n2 failed: member 2/2 (job 102 on host "
            "cpu-02) exited 1 at 00:00:02 UTC; stopping");
  EXPECT_EQ(LastEventFor(scheduler_->TakeEvents(), 90).failed_job_id, 102);
}

TEST_F(SchedulerFailureTest, SuspectedFailureFailsTheGangAfterTheWindow) {
  const std::string gang = AdmitTwoHostGang();
  ASSERT_TRUE(scheduler_
                  ->ReportExit(gang, 1, 1, 101, 1, false,
                               /*peer_suspected=*/true)
                  .ok());
  clock_.Advance(2999ms);
  EXPECT_THAT(scheduler_->FailSuspectedGangs(), IsEmpty());
  clock_.Advance(1ms);

  EXPECT_THAT(scheduler_->FailSuspectedGangs(), ElementsAre(gang));
  EXPECT_EQ(OnlyGang().reason,
            "gang train-p5-pl77-n2 failed: member 1/2 (job 101 on host "
            "cpu-01) exited 1 at 00:00:04 UTC; stopping");
}

TEST_F(SchedulerFailureTest, LostMemberFailsItsGangNamingIt) {
  const std::string gang = AdmitTwoHostGang();
  clock_.Advance(4s);

  ASSERT_TRUE(scheduler_
                  ->MemberLost(gang, 1, 1, 101,
                               "its agent on host cpu-01 (cpu-01:7071) became "
                               "unreachable during build_script")
                  .ok());

  EXPECT_EQ(OnlyGang().reason,
            "gang train-p5-pl77-n2 failed: member 1/2 (job 101 on host "
            "cpu-01) was lost: its agent on host cpu-01 (cpu-01:7071) became "
            "unreachable during build_script at 00:00:05 UTC; stopping");
  EXPECT_EQ(scheduler_->MemberLost(gang, 1, 1, 999, "x").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(scheduler_->MemberLost("nope", 1, 1, 101, "x").code(),
            absl::StatusCode::kNotFound);
}

TEST_F(SchedulerFailureTest, HungMemberFailsItsGangAndAsksForEvidence) {
  const std::string gang = AdmitTwoHostGang();
  ASSERT_TRUE(scheduler_->Watch(gang, 1, 1, 101, 70).ok());
  scheduler_->TakeEvents();

  // Neither host sends progress (member 1 has no watchdog).
  clock_.Advance(600s);
  Beat("cpu-01");
  Beat("cpu-02");
  ASSERT_TRUE(scheduler_
                  ->MemberHung(gang, 1, 2, 102, 600,
                               {clock_.UnixMillis() - 600'000, std::nullopt})
                  .ok());

  const std::string reason =
      "gang train-p5-pl77-n2 failed: member 2/2 (job 102 on host cpu-02) "
      "hung: no progress since 00:00:01 UTC (its host's clock; "
      "GDT_HANG_TIMEOUT 600 s); detected at 00:10:01 UTC; stopping";
  EXPECT_EQ(OnlyGang().reason, reason);
  const state::MemberEvent event = LastEventFor(scheduler_->TakeEvents(), 70);
  EXPECT_EQ(event.kind, state::MemberEvent::Kind::kGangFailed);
  EXPECT_EQ(event.reason, reason);
  EXPECT_TRUE(event.collect_evidence);
  // A watch opened later learns it too.
  ASSERT_TRUE(scheduler_->Watch(gang, 1, 2, 102, 71).ok());
  EXPECT_TRUE(LastEventFor(scheduler_->TakeEvents(), 71).collect_evidence);
}

TEST_F(SchedulerFailureTest, HangNamesTheMemberWhoseProgressStoppedFirst) {
  const std::string gang = AdmitTwoHostGang();
  ASSERT_TRUE(scheduler_->Watch(gang, 1, 1, 101, 70).ok());
  scheduler_->TakeEvents();
  // Member 2 stops at 00:00:01; member 1, blocked behind it, 1.5 s later.
  const int64_t culprit_stopped = clock_.UnixMillis();
  const int64_t victim_stopped = culprit_stopped + 1500;
  clock_.Advance(600s);
  Beat("cpu-01", {{101, {victim_stopped, std::nullopt}}});
  Beat("cpu-02", {{102, {culprit_stopped, std::nullopt}}});

  // Member 2's own report is late: member 1's comes first.
  clock_.Advance(2s);
  ASSERT_TRUE(
      scheduler_->MemberHung(gang, 1, 1, 101, 600, {victim_stopped, {}}).ok());

  const std::string reason =
      "gang train-p5-pl77-n2 failed: member 2/2 (job 102 on host cpu-02) "
      "hung: no progress since 00:00:01 UTC (its host's clock; "
      "GDT_HANG_TIMEOUT 600 s), peers' last progress 1.5 s later; detected "
      "at 00:10:03 UTC; stopping";
  EXPECT_EQ(OnlyGang().reason, reason);
  EXPECT_EQ(OnlyGang().failed_member, 2u);
  const state::MemberEvent event = LastEventFor(scheduler_->TakeEvents(), 70);
  EXPECT_EQ(event.reason, reason);
  EXPECT_EQ(event.failed_job_id, 102);
  EXPECT_TRUE(event.collect_evidence);
  // Member 2's report changes nothing.
  ASSERT_TRUE(
      scheduler_->MemberHung(gang, 1, 2, 102, 600, {culprit_stopped, {}}).ok());
  EXPECT_EQ(OnlyGang().reason, reason);
}

TEST_F(SchedulerFailureTest, HangWaitsForAMemberWhoseHostWasNotHeardSince) {
  const std::string gang = AdmitTwoHostGang();
  // Member 2 stops at 00:00:01 and its host says so; then that host stalls.
  const int64_t culprit_stopped = clock_.UnixMillis();
  Beat("cpu-02", {{102, {culprit_stopped, std::nullopt}}});
  clock_.Advance(2s);
  const int64_t victim_stopped = clock_.UnixMillis();
  clock_.Advance(3s);
  Beat("cpu-01", {{101, {victim_stopped, std::nullopt}}});

  // Member 1's watchdog fires first; cpu-02 was last heard before member 1
  // stopped, so its member may have stopped earlier: the verdict waits.
  ASSERT_TRUE(
      scheduler_->MemberHung(gang, 1, 1, 101, 3, {victim_stopped, {}}).ok());
  EXPECT_EQ(OnlyGang().state, state::GangState::kRunning);
  clock_.Advance(1s);
  Beat("cpu-01", {{101, {victim_stopped, std::nullopt}}});
  EXPECT_THAT(scheduler_->FailHungGangs(), IsEmpty());
  EXPECT_EQ(OnlyGang().state, state::GangState::kRunning);

  // cpu-02 is back: its member stopped first.
  clock_.Advance(1s);
  Beat("cpu-02", {{102, {culprit_stopped, std::nullopt}}});
  EXPECT_THAT(scheduler_->FailHungGangs(), ElementsAre(gang));
  EXPECT_EQ(OnlyGang().reason,
            "gang train-p5-pl77-n2 failed: member 2/2 (job 102 on host "
            "cpu-02) hung: no progress since 00:00:01 UTC (its host's clock; "
            "GDT_HANG_TIMEOUT 3 s), peers' last progress 2.0 s later; "
            "detected at 00:00:08 UTC; stopping");
}

TEST_F(SchedulerFailureTest, HangVerdictStopsWaitingForAHostThatIsDown) {
  const std::string gang = AdmitTwoHostGang();
  Beat("cpu-02");  // Then cpu-02 falls silent.
  clock_.Advance(2s);
  const int64_t stopped = clock_.UnixMillis();
  clock_.Advance(3s);
  Beat("cpu-01", {{101, {stopped, std::nullopt}}});
  ASSERT_TRUE(scheduler_->MemberHung(gang, 1, 1, 101, 3, {stopped, {}}).ok());
  clock_.Advance(5s);
  Beat("cpu-01", {{101, {stopped, std::nullopt}}});
  EXPECT_THAT(scheduler_->FailHungGangs(), IsEmpty());

  // cpu-02 missed heartbeats for host_down_after: nothing more to wait for
  // (the passes name a lost host first, FailGangsOnLostHosts).
  clock_.Advance(1100ms);
  EXPECT_THAT(scheduler_->FailHungGangs(), ElementsAre(gang));
  EXPECT_EQ(OnlyGang().failed_member, 1u);
  EXPECT_THAT(OnlyGang().reason,
              HasSubstr("member 1/2 (job 101 on host cpu-01) hung: no "
                        "progress since 00:00:03 UTC"));
}

TEST_F(SchedulerFailureTest, HangStopsWithinTheTieToleranceKeepTheFirstReport) {
  const std::string gang = AdmitTwoHostGang();
  const int64_t first_stopped = clock_.UnixMillis();
  const int64_t second_stopped = first_stopped + 800;
  clock_.Advance(600s);
  Beat("cpu-01", {{101, {first_stopped, std::nullopt}}});
  Beat("cpu-02", {{102, {second_stopped, std::nullopt}}});

  // Member 2 stopped 0.8 s after member 1, too close to tell by two hosts'
  // clocks: the first report keeps the blame, as it always did.
  ASSERT_TRUE(
      scheduler_->MemberHung(gang, 1, 2, 102, 600, {second_stopped, {}}).ok());

  EXPECT_EQ(OnlyGang().failed_member, 2u);
  EXPECT_THAT(OnlyGang().reason,
              HasSubstr("member 2/2 (job 102 on host cpu-02) hung: no "
                        "progress since 00:00:01 UTC (its host's clock; "
                        "GDT_HANG_TIMEOUT 600 s), peers' last progress "
                        "within 1.0 s of it; detected"));
}

TEST_F(SchedulerFailureTest, HangNamesTheMemberAtTheLowerStep) {
  const std::string gang = AdmitTwoHostGang();
  // Within the tie tolerance by time, but member 1 is still at step 41
  // while member 2 reached step 42: member 1 is behind.
  const int64_t stopped = clock_.UnixMillis();
  clock_.Advance(600s);
  Beat("cpu-01", {{101, {stopped + 500, 41}}});
  Beat("cpu-02", {{102, {stopped, 42}}});

  ASSERT_TRUE(scheduler_->MemberHung(gang, 1, 2, 102, 600, {stopped, 42}).ok());

  EXPECT_EQ(OnlyGang().failed_member, 1u);
  EXPECT_THAT(OnlyGang().reason,
              HasSubstr("member 1/2 (job 101 on host cpu-01) hung: no "
                        "progress since 00:00:01 UTC at step 41 (its host's "
                        "clock; GDT_HANG_TIMEOUT 600 s), peers' last progress "
                        "within 1.0 s of it, peers at step 42; detected"));
}

TEST_F(SchedulerFailureTest, OperatorCancelFailsARunningGang) {
  const std::string gang = AdmitTwoHostGang();
  ASSERT_TRUE(scheduler_->Watch(gang, 1, 2, 102, 60).ok());
  scheduler_->TakeEvents();

  absl::StatusOr<std::string> reason =
      scheduler_->Cancel(gang, "wrong dataset");

  ASSERT_TRUE(reason.ok()) << reason.status();
  EXPECT_EQ(*reason,
            "gang train-p5-pl77-n2 failed: cancelled by operator: wrong "
            "dataset at 00:00:01 UTC; stopping");
  EXPECT_EQ(OnlyGang().state, state::GangState::kFailed);
  const state::MemberEvent event = LastEventFor(scheduler_->TakeEvents(), 60);
  EXPECT_EQ(event.kind, state::MemberEvent::Kind::kGangFailed);
  EXPECT_EQ(event.reason, *reason);
  EXPECT_EQ(event.failed_job_id, 0);
  EXPECT_FALSE(event.collect_evidence);

  absl::StatusOr<std::string> again = scheduler_->Cancel(gang, "");
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(again.status().message(),
            "gang train-p5-pl77-n2 already finished (failed)");
  EXPECT_EQ(scheduler_->Cancel("nope", "").status().message(),
            "unknown gang nope");
}

TEST_F(SchedulerFailureTest, OperatorCancelAbortsAFormingGang) {
  ASSERT_TRUE(scheduler_->RegisterHost(test::CpuHost("cpu-01", 2)).ok());
  absl::StatusOr<std::string> gang =
      scheduler_->Join(test::Joining(test::TrainKey(2), 1), 11);
  ASSERT_TRUE(gang.ok());
  scheduler_->TakeEvents();

  absl::StatusOr<std::string> reason = scheduler_->Cancel(*gang, "");

  ASSERT_TRUE(reason.ok()) << reason.status();
  EXPECT_EQ(*reason,
            "gang train-p5-pl77-n2 failed: cancelled by operator at "
            "00:00:01 UTC");
  const state::MemberEvent aborted = LastEventFor(scheduler_->TakeEvents(), 11);
  EXPECT_EQ(aborted.kind, state::MemberEvent::Kind::kAborted);
  EXPECT_EQ(aborted.reason, *reason);
  // It holds nothing and is listed only with the finished gangs.
  EXPECT_THAT(scheduler_->GetSnapshot(false).gangs, IsEmpty());
  EXPECT_EQ(scheduler_->GetSnapshot(false).hosts.at(0).members_running, 0u);
  // Its job cannot come back (the runner's next preparation attempt is
  // refused as a system failure, like the abort itself); another job of the
  // gang starts epoch 2.
  EXPECT_EQ(
      scheduler_->Join(test::Joining(test::TrainKey(2), 1), 12).status().code(),
      absl::StatusCode::kAborted);
  ASSERT_TRUE(scheduler_->Join(test::Joining(test::TrainKey(2), 2), 13).ok());
  EXPECT_EQ(scheduler_->GetSnapshot(false).gangs.at(0).epoch, 2u);
}

TEST_F(SchedulerFailureTest, ForcedCancelFreesAFailedGangsLeasesAtOnce) {
  const std::string gang = AdmitTwoHostGang();
  // Member 2 failed and left; member 1's runner is gone without cleanup.
  ASSERT_TRUE(scheduler_->ReportExit(gang, 1, 2, 102, 3).ok());
  ASSERT_TRUE(scheduler_->Leave(test::TrainKey(2), 2, 102).ok());
  EXPECT_EQ(scheduler_->Cancel(gang, "").status().code(),
            absl::StatusCode::kFailedPrecondition);

  absl::StatusOr<std::string> line = scheduler_->ForceCancel(gang, "stuck");

  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_THAT(*line, ::testing::HasSubstr("holds no leases"));
  Snapshot snapshot = scheduler_->GetSnapshot(false);
  EXPECT_THAT(snapshot.gangs, IsEmpty());
  for (const HostView& host : snapshot.hosts) {
    EXPECT_EQ(host.members_running, 0u) << host.host.spec.name;
  }
  absl::StatusOr<state::StoredState> stored = store_->Load();
  ASSERT_TRUE(stored.ok());
  EXPECT_TRUE(stored->gangs.at(0).members.at(1).left);
  EXPECT_THAT(stored->port_leases, IsEmpty());
  // Nothing is left to free: still fine, and says so.
  absl::StatusOr<std::string> again = scheduler_->ForceCancel(gang, "");
  ASSERT_TRUE(again.ok());
  EXPECT_THAT(*again, ::testing::HasSubstr("held no leases"));
  EXPECT_EQ(scheduler_->ForceCancel("nope", "").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(SchedulerFailureTest, ForcedCancelEndsAGangWhoseMembersAllExitedZero) {
  const std::string gang = AdmitTwoHostGang();
  ASSERT_TRUE(scheduler_->ReportExit(gang, 1, 1, 101, 0).ok());
  ASSERT_TRUE(scheduler_->ReportExit(gang, 1, 2, 102, 0).ok());
  // Their LeaveGang calls were lost: the gang would hold its leases forever.
  EXPECT_EQ(scheduler_->Cancel(gang, "").status().code(),
            absl::StatusCode::kFailedPrecondition);

  ASSERT_TRUE(scheduler_->ForceCancel(gang, "").ok());

  EXPECT_EQ(OnlyGang().state, state::GangState::kDone);
  EXPECT_THAT(scheduler_->GetSnapshot(false).gangs, IsEmpty());
  // The freed slots take the next gang.
  state::GangKey next = test::TrainKey(2);
  next.pipeline_id = 78;
  for (uint32_t index = 1; index <= 2; ++index) {
    JoinRequest request = test::Joining(next, index);
    request.job_id = 7800 + index;
    ASSERT_TRUE(scheduler_->Join(request, 70 + index).ok());
  }
  EXPECT_EQ(scheduler_->Plan().size(), 1u);
}

TEST_F(SchedulerFailureTest, ForcedCancelStopsARunningGang) {
  const std::string gang = AdmitTwoHostGang();
  ASSERT_TRUE(scheduler_->Watch(gang, 1, 1, 101, 60).ok());
  scheduler_->TakeEvents();

  ASSERT_TRUE(scheduler_->ForceCancel(gang, "hung").ok());

  const state::MemberEvent event = LastEventFor(scheduler_->TakeEvents(), 60);
  EXPECT_EQ(event.kind, state::MemberEvent::Kind::kGangFailed);
  EXPECT_THAT(event.reason,
              ::testing::HasSubstr("cancelled by operator (forced): hung"));
  EXPECT_THAT(scheduler_->GetSnapshot(false).gangs, IsEmpty());
}

TEST_F(SchedulerFailureTest, FormingGangWithNoMemberPresentEndsAfterTheBound) {
  ASSERT_TRUE(scheduler_->RegisterHost(test::CpuHost("cpu-01", 2)).ok());
  absl::StatusOr<std::string> gang =
      scheduler_->Join(test::Joining(test::TrainKey(2), 1), 11);
  ASSERT_TRUE(gang.ok());
  EXPECT_THAT(scheduler_->EndAbandonedFormingGangs(), IsEmpty());
  // Its only member's runner went away.
  scheduler_->Detach(*gang, 1, 11);
  EXPECT_THAT(scheduler_->EndAbandonedFormingGangs(), IsEmpty());
  clock_.Advance(299s);
  EXPECT_THAT(scheduler_->EndAbandonedFormingGangs(), IsEmpty());
  EXPECT_EQ(OnlyGang().state, state::GangState::kForming);

  clock_.Advance(1s);
  EXPECT_THAT(scheduler_->EndAbandonedFormingGangs(), ElementsAre(*gang));

  EXPECT_EQ(OnlyGang().state, state::GangState::kFailed);
  EXPECT_THAT(OnlyGang().reason,
              ::testing::HasSubstr("no member present for 300 s"));
  EXPECT_THAT(scheduler_->GetSnapshot(false).gangs, IsEmpty());
  // A retried job forms it again.
  JoinRequest retry = test::Joining(test::TrainKey(2), 1);
  retry.job_id = 9001;
  ASSERT_TRUE(scheduler_->Join(retry, 12).ok());
  EXPECT_EQ(scheduler_->GetSnapshot(false).gangs.at(0).epoch, 2u);
}

TEST_F(SchedulerFailureTest, GangsGcEndsEmptyFormingGangsNowAndOnlyThem) {
  ASSERT_TRUE(scheduler_->RegisterHost(test::CpuHost("cpu-01", 4)).ok());
  absl::StatusOr<std::string> empty =
      scheduler_->Join(test::Joining(test::TrainKey(2), 1), 11);
  ASSERT_TRUE(empty.ok());
  scheduler_->Detach(*empty, 1, 11);
  state::GangKey other = test::TrainKey(2);
  other.pipeline_id = 78;
  JoinRequest waiting = test::Joining(other, 1);
  waiting.job_id = 7801;
  ASSERT_TRUE(scheduler_->Join(waiting, 21).ok());

  EXPECT_THAT(scheduler_->EndAbandonedFormingGangs(/*now=*/true),
              ElementsAre(*empty));
  Snapshot snapshot = scheduler_->GetSnapshot(false);
  ASSERT_EQ(snapshot.gangs.size(), 1u);
  EXPECT_EQ(snapshot.gangs.at(0).key.pipeline_id, 78);
  EXPECT_EQ(snapshot.gangs.at(0).state, state::GangState::kForming);
}

// Keeps both hosts of AdmitTwoHostGang() up while `duration` passes, their
// agents reporting `running` ("<gang id>/<job id>") as their stages.
void PassWithAgentsReporting(FakeClock& clock, Scheduler& scheduler,
                             std::chrono::seconds duration,
                             const std::set<std::string>& running) {
  for (std::chrono::seconds t{0}; t < duration; t += 2s) {
    clock.Advance(2s);
    for (const char* host : {"cpu-01", "cpu-02"}) {
      bool was_down = false;
      scheduler.Heartbeat(host, &was_down);
      scheduler.SetRunningMembers(host, running);
    }
  }
}

TEST_F(SchedulerFailureTest, MembersNobodyHoldsLeaveAfterTheBound) {
  const std::string gang = AdmitTwoHostGang();
  ASSERT_TRUE(scheduler_->ReportExit(gang, 1, 1, 101, 0).ok());
  ASSERT_TRUE(scheduler_->ReportExit(gang, 1, 2, 102, 0).ok());
  // Both LeaveGang calls were lost; the agents run nothing for them.
  PassWithAgentsReporting(clock_, *scheduler_, 2s, {});
  EXPECT_THAT(scheduler_->ReconcileMembers(), IsEmpty());
  PassWithAgentsReporting(clock_, *scheduler_, 118s, {});
  EXPECT_THAT(scheduler_->ReconcileMembers(), IsEmpty());
  EXPECT_EQ(OnlyGang().state, state::GangState::kRunning);

  PassWithAgentsReporting(clock_, *scheduler_, 2s, {});
  EXPECT_THAT(scheduler_->ReconcileMembers(),
              ElementsAre(gang + "/1", gang + "/2"));

  EXPECT_EQ(OnlyGang().state, state::GangState::kDone);
  Snapshot snapshot = scheduler_->GetSnapshot(false);
  EXPECT_THAT(snapshot.gangs, IsEmpty());
  for (const HostView& host : snapshot.hosts) {
    EXPECT_EQ(host.members_running, 0u) << host.host.spec.name;
  }
  absl::StatusOr<state::StoredState> stored = store_->Load();
  ASSERT_TRUE(stored.ok());
  EXPECT_THAT(stored->port_leases, IsEmpty());
}

TEST_F(SchedulerFailureTest, StagesAndWatchStreamsHoldTheirMembers) {
  const std::string gang = AdmitTwoHostGang();
  // Member 1 runs a stage on its agent; member 2's executor watches.
  ASSERT_TRUE(scheduler_->Watch(gang, 1, 2, 102, 60).ok());
  const std::set<std::string> stage = {gang + "/101"};
  PassWithAgentsReporting(clock_, *scheduler_, 2s, stage);
  EXPECT_THAT(scheduler_->ReconcileMembers(), IsEmpty());
  PassWithAgentsReporting(clock_, *scheduler_, 600s, stage);
  EXPECT_THAT(scheduler_->ReconcileMembers(), IsEmpty());
  EXPECT_EQ(OnlyGang().state, state::GangState::kRunning);

  // Member 2's executor is gone before its script's exit was reported.
  scheduler_->Unwatch(60);
  PassWithAgentsReporting(clock_, *scheduler_, 2s, stage);
  EXPECT_THAT(scheduler_->ReconcileMembers(), IsEmpty());
  PassWithAgentsReporting(clock_, *scheduler_, 120s, stage);
  EXPECT_THAT(scheduler_->ReconcileMembers(), ElementsAre(gang + "/2"));

  EXPECT_EQ(OnlyGang().state, state::GangState::kFailed);
  EXPECT_THAT(OnlyGang().reason,
              ::testing::HasSubstr(
                  "member 2/2 (job 102 on host cpu-02) was lost: neither its "
                  "agent nor its executor has held it for 120 s"));
  EXPECT_EQ(OnlyGang().failed_member, 2u);
}

// An agent asks which of the members it holds idle have left: only those
// of its own host that left their epoch, never one an executor still
// watches (its gang runs on), whatever time passes.
TEST_F(SchedulerFailureTest, AgentsLearnWhichOfTheirIdleMembersHaveLeft) {
  const std::string gang = AdmitTwoHostGang();
  const std::string member1 = gang + "/101";
  const std::string member2 = gang + "/102";
  // Member 2 exited 0 and waits in the exit barrier: its stage is over,
  // its executor watches. Member 1 trains on.
  ASSERT_TRUE(scheduler_->ReportExit(gang, 1, 2, 102, 0).ok());
  ASSERT_TRUE(scheduler_->Watch(gang, 1, 2, 102, 61).ok());
  const std::set<std::string> stage = {member1};
  PassWithAgentsReporting(clock_, *scheduler_, 600s, stage);
  EXPECT_THAT(scheduler_->ReconcileMembers(), IsEmpty());
  EXPECT_THAT(scheduler_->MembersLeft("cpu-02", {member2}), IsEmpty());

  // Its runner dies with the executor: nothing holds member 2 any more.
  scheduler_->Unwatch(61);
  PassWithAgentsReporting(clock_, *scheduler_, 2s, stage);
  EXPECT_THAT(scheduler_->ReconcileMembers(), IsEmpty());
  EXPECT_THAT(scheduler_->MembersLeft("cpu-02", {member2}), IsEmpty());
  PassWithAgentsReporting(clock_, *scheduler_, 120s, stage);
  EXPECT_THAT(scheduler_->ReconcileMembers(), ElementsAre(gang + "/2"));
  EXPECT_EQ(OnlyGang().state, state::GangState::kRunning);
  EXPECT_THAT(scheduler_->MembersLeft(
                  "cpu-02", {member2, gang + "/999", "no-slash",
                             gang + "/not-a-number", "other-gang/102"}),
              ElementsAre(member2));
  // Another host's agent learns nothing about it; member 1 runs on.
  EXPECT_THAT(scheduler_->MembersLeft("cpu-01", {member2, member1}), IsEmpty());

  // Member 1 cleans up; the gang is done, and a retry archives the epoch:
  // its members are still found there.
  ASSERT_TRUE(scheduler_->Leave(test::TrainKey(2), 1, 101).ok());
  JoinRequest retry = test::Joining(test::TrainKey(2), 1);
  retry.job_id = 201;
  ASSERT_TRUE(scheduler_->Join(retry, 21).ok());
  EXPECT_EQ(OnlyGang().epoch, 2u);
  EXPECT_THAT(scheduler_->MembersLeft("cpu-01", {member1}),
              ElementsAre(member1));
}

TEST_F(SchedulerFailureTest, ARetriedJobDoesNotInheritTheAbsenceOfItsOldJob) {
  const std::string gang = AdmitTwoHostGang();
  ASSERT_TRUE(scheduler_->ReportExit(gang, 1, 2, 102, 3).ok());
  // The failed epoch's members run nothing for 100 s (their executors were
  // away through a coordinator outage), then clean up.
  for (int i = 0; i < 50; ++i) {
    PassWithAgentsReporting(clock_, *scheduler_, 2s, {});
    ASSERT_THAT(scheduler_->ReconcileMembers(), IsEmpty());
  }
  ASSERT_TRUE(scheduler_->Leave(test::TrainKey(2), 1, 101).ok());
  ASSERT_TRUE(scheduler_->Leave(test::TrainKey(2), 2, 102).ok());
  // The retried jobs form and start epoch 2 at once.
  for (uint32_t index = 1; index <= 2; ++index) {
    JoinRequest request = test::Joining(test::TrainKey(2), index);
    request.job_id = 200 + index;
    ASSERT_TRUE(scheduler_->Join(request, 20 + index).ok());
  }
  std::vector<AdmissionProposal> proposals = scheduler_->Plan();
  ASSERT_EQ(proposals.size(), 1u);
  ASSERT_TRUE(
      scheduler_->Admit(proposals[0], proposals[0].candidate_ports.front())
          .ok());
  ASSERT_EQ(OnlyGang().epoch, 2u);

  // Their first stages are not on the agents yet: well inside the bound.
  PassWithAgentsReporting(clock_, *scheduler_, 30s, {});
  EXPECT_THAT(scheduler_->ReconcileMembers(), IsEmpty());
  EXPECT_EQ(OnlyGang().state, state::GangState::kRunning) << OnlyGang().reason;
}

TEST_F(SchedulerFailureTest, AnAgentThatDoesNotReportHoldsItsMembers) {
  const std::string gang = AdmitTwoHostGang();
  ASSERT_TRUE(scheduler_->ReportExit(gang, 1, 1, 101, 0).ok());
  ASSERT_TRUE(scheduler_->ReportExit(gang, 1, 2, 102, 0).ok());
  for (int i = 0; i < 100; ++i) {
    clock_.Advance(2s);
    for (const char* host : {"cpu-01", "cpu-02"}) {
      bool was_down = false;
      scheduler_->Heartbeat(host, &was_down);
      scheduler_->SetRunningMembers(host, std::nullopt);
    }
    ASSERT_THAT(scheduler_->ReconcileMembers(), IsEmpty());
  }
  EXPECT_EQ(OnlyGang().state, state::GangState::kRunning);
}

TEST_F(SchedulerFailureTest, RootCauseCarriesTheExitTimeOnItsHost) {
  const std::string gang = AdmitTwoHostGang();
  // The report arrives 49 s after the exit (the coordinator was down).
  clock_.Advance(49s);
  const int64_t exited = clock_.UnixMillis() - 49'000;
  ASSERT_TRUE(
      scheduler_->ReportExit(gang, 1, 2, 102, 3, false, false, exited).ok());
  EXPECT_EQ(OnlyGang().reason,
            "gang train-p5-pl77-n2 failed: member 2/2 (job 102 on host "
            "cpu-02) exited 3 at 00:00:01 UTC; stopping");
}

TEST_F(SchedulerFailureTest, SuspectedRootCauseCarriesItsExitTime) {
  const std::string gang = AdmitTwoHostGang();
  const int64_t exited = clock_.UnixMillis();
  clock_.Advance(10s);
  ASSERT_TRUE(
      scheduler_->ReportExit(gang, 1, 1, 101, 1, false, true, exited).ok());
  clock_.Advance(4s);
  EXPECT_THAT(scheduler_->FailSuspectedGangs(), ElementsAre(gang));
  EXPECT_EQ(OnlyGang().reason,
            "gang train-p5-pl77-n2 failed: member 1/2 (job 101 on host "
            "cpu-01) exited 1 at 00:00:01 UTC; stopping");
}

TEST_F(SchedulerFailureTest, RetriedJobsFormTheNextEpochAndOldOnesAreFenced) {
  const std::string gang = AdmitTwoHostGang();
  ASSERT_TRUE(scheduler_->Watch(gang, 1, 1, 101, 80).ok());
  ASSERT_TRUE(scheduler_->ReportExit(gang, 1, 2, 102, 3).ok());
  ASSERT_TRUE(scheduler_->Leave(test::TrainKey(2), 2, 102).ok());
  scheduler_->TakeEvents();
  // Member 1 of epoch 1 (job 101) is still alive: it has not left.

  auto retried = [](uint32_t index) {
    JoinRequest request = test::Joining(test::TrainKey(2), index);
    request.job_id = 200 + index;
    return request;
  };
  absl::StatusOr<std::string> joined = scheduler_->Join(retried(2), 22);
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(*joined, gang);
  ASSERT_TRUE(scheduler_->Join(retried(1), 21).ok());

  Snapshot snapshot = scheduler_->GetSnapshot(false);
  ASSERT_EQ(snapshot.gangs.size(), 2u);
  EXPECT_EQ(snapshot.gangs[0].id, gang + "#1");  // Still holds cpu-01.
  EXPECT_EQ(snapshot.gangs[0].state, state::GangState::kFailed);
  EXPECT_EQ(snapshot.gangs[1].id, gang);
  EXPECT_EQ(snapshot.gangs[1].epoch, 2u);
  EXPECT_EQ(snapshot.gangs[1].state, state::GangState::kForming);
  // The stale member holds its slot, so epoch 2 cannot be placed yet.
  EXPECT_THAT(scheduler_->Plan(), IsEmpty());

  // Fenced: the old job can neither report, watch nor join again.
  absl::Status report = scheduler_->ReportExit(gang, 1, 1, 101, 0);
  EXPECT_EQ(report.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(report.message(),
            "gang train-p5-pl77-n2 is in epoch 2, not 1: job 101 of an older "
            "attempt is fenced");
  EXPECT_EQ(scheduler_->Watch(gang, 1, 1, 101, 81).code(),
            absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<std::string> rejoin =
      scheduler_->Join(test::Joining(test::TrainKey(2), 1), 23);
  EXPECT_EQ(rejoin.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(rejoin.status().message(),
            "job 101 belongs to epoch 1 of gang train-p5-pl77-n2, which epoch "
            "2 replaced; the old attempt is fenced");

  // Once it has left, its epoch releases everything and epoch 2 runs.
  ASSERT_TRUE(scheduler_->Leave(test::TrainKey(2), 1, 101).ok());
  std::vector<AdmissionProposal> proposals = scheduler_->Plan();
  ASSERT_EQ(proposals.size(), 1u);
  ASSERT_TRUE(
      scheduler_->Admit(proposals[0], proposals[0].candidate_ports.front())
          .ok());
  std::vector<state::MemberEvent> events = scheduler_->TakeEvents();
  for (uint64_t stream : {21, 22}) {
    const state::MemberEvent admitted = LastEventFor(events, stream);
    ASSERT_EQ(admitted.kind, state::MemberEvent::Kind::kAdmitted) << stream;
    EXPECT_EQ(admitted.assignment.epoch, 2u);
  }
  ASSERT_TRUE(scheduler_->ReportExit(gang, 2, 1, 201, 0).ok());
  ASSERT_TRUE(scheduler_->ReportExit(gang, 2, 2, 202, 0).ok());
  // The old epoch's watch hears nothing of epoch 2.
  EXPECT_EQ(LastEventFor(scheduler_->TakeEvents(), 80).stream_id, 0u);
  ASSERT_TRUE(scheduler_->Leave(test::TrainKey(2), 1, 201).ok());
  ASSERT_TRUE(scheduler_->Leave(test::TrainKey(2), 2, 202).ok());
  snapshot = scheduler_->GetSnapshot(true);
  EXPECT_THAT(scheduler_->GetSnapshot(false).gangs, IsEmpty());
  for (const HostView& host : snapshot.hosts) {
    EXPECT_EQ(host.members_running, 0u) << host.host.spec.name;
  }

  // The state survives a restart: the live gang is epoch 2 again.
  absl::StatusOr<std::unique_ptr<Scheduler>> reloaded =
      Scheduler::Create(clock_, *store_, SchedulerOptions{});
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  absl::StatusOr<std::string> third = (*reloaded)->Join(retried(1), 31);
  ASSERT_TRUE(third.status().code() == absl::StatusCode::kFailedPrecondition)
      << "job 201 belongs to the finished epoch 2: " << third.status();
}

// A member refused at config (its CI_NODE_INDEX disagrees with its name)
// tells its gang: the members already waiting are aborted with its reason,
// one that joins later is refused with it at once, and a retried job of the
// refused member lets the gang form again.
TEST_F(SchedulerFailureTest, RefusedMemberFailsItsFormingGangAndLaterJoins) {
  ASSERT_TRUE(scheduler_->RegisterHost(test::CpuHost("cpu-01", 3)).ok());
  const state::GangKey key = TrainKey(3);
  ASSERT_TRUE(scheduler_->Join(Joining(key, 1), 11).ok());
  scheduler_->TakeEvents();

  absl::StatusOr<std::string> root_cause = scheduler_->RefuseMember(
      key, 2, 102,
      "CI_NODE_INDEX/CI_NODE_TOTAL 1/3 disagree with the job name");
  ASSERT_TRUE(root_cause.ok()) << root_cause.status();
  EXPECT_THAT(*root_cause,
              ::testing::MatchesRegex(
                  "gang train-p5-pl77-n3 failed: member 2/3 \\(job 102\\) "
                  "was refused: CI_NODE_INDEX/CI_NODE_TOTAL 1/3 disagree with "
                  "the job name at [0-9:]+ UTC"));
  const state::MemberEvent aborted = LastEventFor(scheduler_->TakeEvents(), 11);
  EXPECT_EQ(aborted.kind, state::MemberEvent::Kind::kAborted);
  EXPECT_EQ(aborted.reason, *root_cause);
  EXPECT_EQ(OnlyGang().state, state::GangState::kFailed);

  // Member 3 comes later: refused at once with the same line, no new epoch.
  absl::StatusOr<std::string> late = scheduler_->Join(Joining(key, 3), 13);
  EXPECT_EQ(late.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(late.status().message(), *root_cause);
  EXPECT_EQ(OnlyGang().epoch, 1u);
  // The refused job itself cannot join either.
  JoinRequest refused = Joining(key, 2);
  refused.job_id = 102;
  EXPECT_EQ(scheduler_->Join(refused, 12).status().code(),
            absl::StatusCode::kFailedPrecondition);

  // A retried job of member 2 (a new job id) clears the refusal.
  JoinRequest retried = Joining(key, 2);
  retried.job_id = 202;
  EXPECT_TRUE(scheduler_->Join(retried, 22).ok());
  EXPECT_TRUE(scheduler_->Join(Joining(key, 3), 23).ok());
  EXPECT_EQ(OnlyGang().state, state::GangState::kForming);
  EXPECT_EQ(OnlyGang().epoch, 2u);

  // Bad refusals are refused.
  EXPECT_EQ(scheduler_->RefuseMember(key, 4, 104, "x").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(scheduler_->RefuseMember(key, 1, 101, "").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gdt::coordinator
