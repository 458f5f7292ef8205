// Enforced preemption in the Scheduler (scheduler_preemption.cc) with a fake
// clock and a real in-memory SQLite store: the notice, the stop at the
// checkpoint, at the grace or at a member's exit, the failure the members'
// watches see, the count kept across epochs and its bound.
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/fake_clock.h"
#include "coordinator/metrics.h"
#include "coordinator/scheduler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/scheduler_fixtures.h"

namespace gdt::coordinator {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

constexpr char kLow[] = "low-p5-pl76-n1";
constexpr char kHigh[] = "high-p5-pl77-n1";

class PreemptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<state::SqliteStore>> store =
        state::SqliteStore::Open(":memory:");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    options_.preemption.enabled = true;
    options_.preemption.grace_s = 300;
    options_.preemption.max_preemptions = 1;
    Reopen();
    ASSERT_TRUE(s().RegisterHost(test::GpuHost("gpu-01", 8)).ok());
  }

  void Reopen() {
    scheduler_.reset();
    absl::StatusOr<std::unique_ptr<Scheduler>> scheduler =
        Scheduler::Create(clock_, *store_, options_);
    ASSERT_TRUE(scheduler.ok()) << scheduler.status();
    scheduler_ = std::move(*scheduler);
  }

  Scheduler& s() { return *scheduler_; }

  // Moves the clock; the host's agent keeps heartbeating meanwhile.
  void Advance(std::chrono::seconds delta) {
    clock_.Advance(delta);
    bool was_down = false;
    ASSERT_TRUE(s().Heartbeat("gpu-01", &was_down));
  }

  // Job `job_id` of the low-priority gang (all 8 GPUs for two days) joins
  // through stream `stream` and is admitted; its retry: brings it back after
  // a preemption `retries` times.
  void RunLow(int64_t job_id, uint64_t stream, bool preemptible = true,
              std::optional<uint32_t> retries = 2) {
    JoinLow(job_id, stream, preemptible, retries);
    std::vector<AdmissionProposal> proposals = s().Plan();
    ASSERT_THAT(proposals, SizeIs(1));
    ASSERT_TRUE(
        s().Admit(proposals[0], proposals[0].candidate_ports.front()).ok());
  }

  // The low-priority gang's job `job_id` joins without being admitted.
  void JoinLow(int64_t job_id, uint64_t stream, bool preemptible = true,
               std::optional<uint32_t> retries = 2) {
    state::GangKey key{"https://gitlab.example.com", 5, 76, "low", 1};
    JoinRequest join = test::Joining(key, 1, 8);
    join.job_id = job_id;
    join.preemptible = preemptible;
    join.preempt_retries = retries;
    join.job_timeout_seconds = 48 * 3600;
    ASSERT_TRUE(s().Join(join, stream).ok());
  }

  // The high-priority gang (all 8 GPUs) joins as job `job_id`.
  void JoinHigh(int64_t job_id, uint64_t stream, uint32_t pipeline = 77) {
    state::GangKey key{"https://gitlab.example.com", 5, pipeline, "high", 1};
    JoinRequest join = test::Joining(key, 1, 8);
    join.job_id = job_id;
    join.priority = 5;
    join.job_timeout_seconds = 3600;
    ASSERT_TRUE(s().Join(join, stream).ok());
  }

  // A gang of the low gang's priority and run bound (all 8 GPUs) joins.
  void JoinPeer(const std::string& name, uint32_t pipeline, int64_t job_id,
                uint64_t stream) {
    state::GangKey key{"https://gitlab.example.com", 5, pipeline, name, 1};
    JoinRequest join = test::Joining(key, 1, 8);
    join.job_id = job_id;
    join.preemptible = true;
    join.job_timeout_seconds = 48 * 3600;
    ASSERT_TRUE(s().Join(join, stream).ok());
  }

  // The low gang keeps running through passes that would have stopped it.
  void ExpectLowUntouched() {
    for (int pass = 0; pass < 3; ++pass) {
      EXPECT_THAT(s().Plan(), IsEmpty());
      Advance(400s);
      EXPECT_THAT(s().StopPreemptedGangs(), IsEmpty());
    }
    EXPECT_THAT(s().TakePreemptionNotices(), IsEmpty());
    EXPECT_EQ(Gang(kLow).state, state::GangState::kRunning);
  }

  const state::Gang& Gang(const std::string& id) {
    const state::Gang* gang = s().FindGang(id);
    EXPECT_NE(gang, nullptr) << id;
    static const state::Gang kNone;
    return gang == nullptr ? kNone : *gang;
  }

  // The GangFailed event on watch `watch_id` among the queued events.
  std::optional<state::MemberEvent> FailedEvent(uint64_t watch_id) {
    for (const state::MemberEvent& event : s().TakeEvents()) {
      if (event.stream_id == watch_id &&
          event.kind == state::MemberEvent::Kind::kGangFailed) {
        return event;
      }
    }
    return std::nullopt;
  }

  FakeClock clock_;
  SchedulerOptions options_;
  std::unique_ptr<state::SqliteStore> store_;
  std::unique_ptr<Scheduler> scheduler_;
};

TEST_F(PreemptionTest, VictimGetsTheNoticeAndStopsAtItsCheckpoint) {
  CoordinatorMetrics metrics(clock_);
  s().SetObserver(metrics);
  RunLow(101, 1);
  ASSERT_TRUE(s().Watch(kLow, 1, 1, 101, 50).ok());
  Advance(3600s);
  JoinHigh(201, 2);

  EXPECT_THAT(s().Plan(), IsEmpty());
  const std::vector<Scheduler::PreemptionNotice> notices =
      s().TakePreemptionNotices();
  ASSERT_THAT(notices, SizeIs(1));
  EXPECT_EQ(notices[0].gang_id, kLow);
  EXPECT_EQ(notices[0].epoch, 1u);
  EXPECT_EQ(notices[0].stop_by_unix_s, clock_.UnixMillis() / 1000 + 300);
  // The waiting gang says which gang makes room for it, and by when.
  EXPECT_THAT(Gang(kHigh).reason,
              HasSubstr(absl::StrCat(
                  "; making room: gang ", kLow,
                  " has the checkpoint notice and stops at the next "
                  "checkpoint, or by ",
                  state::UtcTimeOfDay(notices[0].stop_by_unix_s * 1000),
                  " at the latest")));
  // Later passes neither notify again nor stop it before its checkpoint.
  EXPECT_THAT(s().Plan(), IsEmpty());
  EXPECT_THAT(s().TakePreemptionNotices(), IsEmpty());
  EXPECT_THAT(s().StopPreemptedGangs(), IsEmpty());
  EXPECT_EQ(Gang(kLow).state, state::GangState::kRunning);
  s().TakeEvents();

  Advance(20s);
  s().NoteCheckpoint(kLow, 1);
  // The training gets a moment to stop by itself after its checkpoint.
  Advance(4s);
  EXPECT_THAT(s().StopPreemptedGangs(), IsEmpty());
  Advance(1s);
  EXPECT_THAT(s().StopPreemptedGangs(), ::testing::ElementsAre(kLow));

  EXPECT_EQ(Gang(kLow).state, state::GangState::kFailed);
  EXPECT_THAT(Gang(kLow).reason,
              HasSubstr("failed: preempted by gang high-p5-pl77-n1 "
                        "(priority 5) after checkpoint at "));
  // 8 GPUs for the 5 s since the checkpoint.
  EXPECT_THAT(Gang(kLow).reason, HasSubstr("lost ~0.01 GPU-hours "
                                           "(preemption 1 of at most 1)"));
  EXPECT_EQ(Gang(kLow).preemptions, 1u);
  EXPECT_EQ(Gang(kLow).preempted_by, kHigh);
  EXPECT_EQ(Gang(kLow).preempted_lost_gpu_seconds, 40);
  std::optional<state::MemberEvent> failed = FailedEvent(50);
  ASSERT_TRUE(failed.has_value());
  EXPECT_TRUE(failed->preempted);
  EXPECT_EQ(failed->failed_member, 0u);
  const std::string text = metrics.Render(s().GetSnapshot(false));
  EXPECT_THAT(text, HasSubstr("gdt_preemptions_total 1\n"));
  EXPECT_THAT(text, HasSubstr("gdt_preempted_gpu_hours_total 0.0111"));
  EXPECT_THAT(text, HasSubstr("gdt_failures_total{class=\"preempted\"} 1\n"));

  // Once its member has left, the high-priority gang is admitted.
  ASSERT_TRUE(s().Leave(Gang(kLow).key, 1, 101).ok());
  std::vector<AdmissionProposal> proposals = s().Plan();
  ASSERT_THAT(proposals, SizeIs(1));
  EXPECT_EQ(proposals[0].gang_id, kHigh);
}

TEST_F(PreemptionTest, VictimWithoutACheckpointStopsWhenTheGraceRunsOut) {
  RunLow(101, 1);
  Advance(3600s);
  JoinHigh(201, 2);
  s().Plan();
  ASSERT_THAT(s().TakePreemptionNotices(), SizeIs(1));

  Advance(299s);
  EXPECT_THAT(s().StopPreemptedGangs(), IsEmpty());
  Advance(1s);
  EXPECT_THAT(s().StopPreemptedGangs(), ::testing::ElementsAre(kLow));

  EXPECT_THAT(Gang(kLow).reason,
              HasSubstr("preempted by gang high-p5-pl77-n1 (priority 5) at "));
  EXPECT_THAT(Gang(kLow).reason,
              HasSubstr("UTC without a checkpoint within the 300 s grace"));
  // At least the grace on 8 GPUs is lost, on top of what the policy
  // estimated since the last assumed checkpoint.
  EXPECT_GE(Gang(kLow).preempted_lost_gpu_seconds, 8 * 300);
}

// The grace counts from the notice to the millisecond: a notice sent late
// in a second does not lose the rest of that second.
TEST_F(PreemptionTest, TheGraceIsWholeWhenTheNoticeComesLateInASecond) {
  RunLow(101, 1);
  Advance(3600s);
  clock_.Advance(std::chrono::milliseconds(900));
  JoinHigh(201, 2);
  s().Plan();
  ASSERT_THAT(s().TakePreemptionNotices(), SizeIs(1));

  Advance(299s);
  clock_.Advance(std::chrono::milliseconds(999));
  EXPECT_THAT(s().StopPreemptedGangs(), IsEmpty());
  clock_.Advance(std::chrono::milliseconds(1));
  EXPECT_THAT(s().StopPreemptedGangs(), ::testing::ElementsAre(kLow));
}

TEST_F(PreemptionTest, AMemberThatStopsOnTheNoticeNeverSucceedsTheGang) {
  RunLow(101, 1);
  ASSERT_TRUE(s().Watch(kLow, 1, 1, 101, 50).ok());
  Advance(3600s);
  JoinHigh(201, 2);
  s().Plan();
  ASSERT_THAT(s().TakePreemptionNotices(), SizeIs(1));
  s().TakeEvents();

  // The training checkpointed and exited 0 on the notice.
  s().NoteCheckpoint(kLow, 1);
  ASSERT_TRUE(s().ReportExit(kLow, 1, 1, 101, 0).ok());

  EXPECT_EQ(Gang(kLow).state, state::GangState::kFailed);
  EXPECT_THAT(Gang(kLow).reason, HasSubstr("after checkpoint at"));
  std::optional<state::MemberEvent> failed = FailedEvent(50);
  ASSERT_TRUE(failed.has_value());
  EXPECT_TRUE(failed->preempted);
}

TEST_F(PreemptionTest, ANonPreemptibleGangIsNeverTouched) {
  RunLow(101, 1, /*preemptible=*/false);
  Advance(3600s);
  JoinHigh(201, 2);
  for (int pass = 0; pass < 3; ++pass) {
    EXPECT_THAT(s().Plan(), IsEmpty());
    Advance(400s);
    EXPECT_THAT(s().StopPreemptedGangs(), IsEmpty());
  }
  EXPECT_THAT(s().TakePreemptionNotices(), IsEmpty());
  EXPECT_EQ(Gang(kLow).state, state::GangState::kRunning);
  EXPECT_EQ(Gang(kLow).preemptions, 0u);
}

// The count survives the retry (the next epoch) and a restart, and bounds
// how often the gang is stopped: with max_preemptions 1 the retried gang
// keeps running when another high-priority gang comes.
TEST_F(PreemptionTest, TheCountOutlivesRetryAndRestartAndBoundsPreemptions) {
  RunLow(101, 1);
  Advance(3600s);
  JoinHigh(201, 2);
  s().Plan();
  ASSERT_THAT(s().TakePreemptionNotices(), SizeIs(1));
  s().NoteCheckpoint(kLow, 1);
  Advance(5s);
  ASSERT_THAT(s().StopPreemptedGangs(), SizeIs(1));
  ASSERT_TRUE(s().Leave(Gang(kLow).key, 1, 101).ok());
  std::vector<AdmissionProposal> proposals = s().Plan();
  ASSERT_THAT(proposals, SizeIs(1));
  ASSERT_TRUE(
      s().Admit(proposals[0], proposals[0].candidate_ports.front()).ok());
  ASSERT_TRUE(s().ReportExit(kHigh, 1, 1, 201, 0).ok());
  ASSERT_TRUE(s().Leave(Gang(kHigh).key, 1, 201).ok());

  // The retry: a new job id, epoch 2, after a coordinator restart. Stopped
  // for a higher priority, it keeps its place in the queue.
  const int64_t queued_ms = Gang(kLow).created_unix_ms;
  Reopen();
  RunLow(102, 3);
  EXPECT_EQ(Gang(kLow).epoch, 2u);
  EXPECT_EQ(Gang(kLow).created_unix_ms, queued_ms);
  EXPECT_EQ(Gang(kLow).preemptions, 1u);
  Advance(3600s);
  JoinHigh(301, 4, /*pipeline=*/78);
  for (int pass = 0; pass < 3; ++pass) {
    EXPECT_THAT(s().Plan(), IsEmpty());
    Advance(400s);
    EXPECT_THAT(s().StopPreemptedGangs(), IsEmpty());
  }
  EXPECT_THAT(s().TakePreemptionNotices(), IsEmpty());
  EXPECT_EQ(Gang(kLow).state, state::GangState::kRunning);
}

// Stopped for a gang of its own priority (it had run long enough to be
// demoted), a gang had its turn: its retry queues as if it had arrived when
// it stopped, behind a gang of its kind that came during its run, instead
// of first (the whole run counted as waiting made it overdue).
TEST_F(PreemptionTest, AGangStoppedForItsOwnPriorityQueuesBehindItsRun) {
  const int64_t queued_ms = clock_.UnixMillis();
  RunLow(101, 1);
  Advance(5h);  // Past min_run, 40 GPU-hours: demoted.
  JoinPeer("first", 80, 201, 2);
  EXPECT_THAT(s().Plan(), IsEmpty());
  ASSERT_THAT(s().TakePreemptionNotices(), SizeIs(1));
  Advance(60s);
  JoinPeer("second", 81, 301, 3);
  s().NoteCheckpoint(kLow, 1);
  Advance(5s);
  ASSERT_THAT(s().StopPreemptedGangs(), ::testing::ElementsAre(kLow));
  ASSERT_TRUE(s().Leave(Gang(kLow).key, 1, 101).ok());
  const std::string first = "first-p5-pl80-n1";
  const std::string second = "second-p5-pl81-n1";
  std::vector<AdmissionProposal> proposals = s().Plan();
  ASSERT_THAT(proposals, SizeIs(1));
  EXPECT_EQ(proposals[0].gang_id, first);
  ASSERT_TRUE(
      s().Admit(proposals[0], proposals[0].candidate_ports.front()).ok());

  // The retry joins a minute later; "second" came 5 s before the stop.
  Advance(60s);
  JoinLow(102, 4);
  EXPECT_EQ(Gang(kLow).epoch, 2u);
  const int64_t ran_ms = (5 * 3600 + 65) * 1000;
  EXPECT_EQ(Gang(kLow).created_unix_ms, queued_ms + ran_ms);
  // Once "first" ends, "second" goes before the retry.
  ASSERT_TRUE(s().ReportExit(first, 1, 1, 201, 0).ok());
  ASSERT_TRUE(s().Leave(Gang(first).key, 1, 201).ok());
  proposals = s().Plan();
  ASSERT_THAT(proposals, SizeIs(1));
  EXPECT_EQ(proposals[0].gang_id, second);
}

// A gang is stopped only while its retry: would bring it back: without a
// retry left a preemption would fail its job for good, so it keeps running
// and the high-priority gang waits for it.
TEST_F(PreemptionTest, AGangWhoseRetryDoesNotBringItBackIsNeverChosen) {
  RunLow(101, 1, /*preemptible=*/true, /*retries=*/0);  // retry: 0
  Advance(3600s);
  JoinHigh(201, 2);
  ExpectLowUntouched();
  EXPECT_EQ(Gang(kLow).preemptions, 0u);
}

TEST_F(PreemptionTest, AGangThatGivesNoRetryCountIsNeverChosen) {
  RunLow(101, 1, /*preemptible=*/true, /*retries=*/std::nullopt);
  Advance(3600s);
  JoinHigh(201, 2);
  ExpectLowUntouched();
}

// retry: 1 — preempted in its first attempt; its retry (epoch 2) is its
// last attempt and is not stopped again, though max_preemptions allows it.
TEST_F(PreemptionTest, ARetryThatIsTheLastAttemptIsNotStoppedAgain) {
  options_.preemption.max_preemptions = 3;
  Reopen();
  RunLow(101, 1, /*preemptible=*/true, /*retries=*/1);
  Advance(3600s);
  JoinHigh(201, 2);
  s().Plan();
  ASSERT_THAT(s().TakePreemptionNotices(), SizeIs(1));
  s().NoteCheckpoint(kLow, 1);
  Advance(5s);
  ASSERT_THAT(s().StopPreemptedGangs(), SizeIs(1));
  ASSERT_TRUE(s().Leave(Gang(kLow).key, 1, 101).ok());
  std::vector<AdmissionProposal> proposals = s().Plan();
  ASSERT_THAT(proposals, SizeIs(1));
  ASSERT_TRUE(
      s().Admit(proposals[0], proposals[0].candidate_ports.front()).ok());
  ASSERT_TRUE(s().ReportExit(kHigh, 1, 1, 201, 0).ok());
  ASSERT_TRUE(s().Leave(Gang(kHigh).key, 1, 201).ok());

  RunLow(102, 3, /*preemptible=*/true, /*retries=*/1);
  ASSERT_EQ(Gang(kLow).epoch, 2u);
  Advance(3600s);
  JoinHigh(301, 4, /*pipeline=*/78);
  ExpectLowUntouched();
  EXPECT_EQ(Gang(kLow).preemptions, 1u);
}

// The waiting gang is cancelled (its member leaves) after the notice: a
// victim that ignored the notice is not stopped at the deadline for a gang
// that no longer waits, nor is one that checkpointed and kept running; the
// preemption is withdrawn, also across a restart. An exit of a member (the
// training may stop on the notice it heard) still ends it as preempted.
TEST_F(PreemptionTest, AVictimIsNotStoppedForAGangThatNoLongerWaits) {
  RunLow(101, 1);
  ASSERT_TRUE(s().Watch(kLow, 1, 1, 101, 50).ok());
  Advance(3600s);
  JoinHigh(201, 2);
  EXPECT_THAT(s().Plan(), IsEmpty());
  ASSERT_THAT(s().TakePreemptionNotices(), SizeIs(1));
  ASSERT_TRUE(s().Leave(Gang(kHigh).key, 1, 201).ok());

  Advance(20s);
  s().NoteCheckpoint(kLow, 1);
  Advance(10s);
  EXPECT_THAT(s().StopPreemptedGangs(), IsEmpty());
  Advance(400s);  // Past the deadline.
  EXPECT_THAT(s().StopPreemptedGangs(), IsEmpty());
  EXPECT_EQ(Gang(kLow).state, state::GangState::kRunning);
  EXPECT_EQ(Gang(kLow).preempt_stop_by_ms, 0);
  EXPECT_EQ(Gang(kLow).preemptions, 0u);

  Reopen();
  EXPECT_THAT(s().TakePreemptionNotices(), IsEmpty());
  EXPECT_THAT(s().StopPreemptedGangs(), IsEmpty());
  EXPECT_EQ(Gang(kLow).state, state::GangState::kRunning);
  ASSERT_TRUE(s().Watch(kLow, 1, 1, 101, 51).ok());
  s().TakeEvents();

  // The training stopped on the notice after all: a preemption, not a
  // success, so that its retry finishes the work.
  ASSERT_TRUE(s().ReportExit(kLow, 1, 1, 101, 0).ok());
  EXPECT_EQ(Gang(kLow).state, state::GangState::kFailed);
  EXPECT_EQ(Gang(kLow).preemptions, 1u);
  std::optional<state::MemberEvent> failed = FailedEvent(51);
  ASSERT_TRUE(failed.has_value());
  EXPECT_TRUE(failed->preempted);
}

TEST_F(PreemptionTest, AGangWithoutGpusIsNeverChosen) {
  // A preemptible CPU-only gang of lower priority than everything else: it
  // has lost no GPU-hours, so it would come first among the victims, but
  // stopping it frees no GPU for the waiting gang.
  state::GangKey key{"https://gitlab.example.com", 5, 75, "cpu", 1};
  JoinRequest cpu = test::Joining(key, 1, 0);
  cpu.job_id = 301;
  cpu.preemptible = true;
  cpu.preempt_retries = 2;
  cpu.priority = -5;
  cpu.job_timeout_seconds = 48 * 3600;
  ASSERT_TRUE(s().Join(cpu, 3).ok());
  std::vector<AdmissionProposal> proposals = s().Plan();
  ASSERT_THAT(proposals, SizeIs(1));
  ASSERT_TRUE(
      s().Admit(proposals[0], proposals[0].candidate_ports.front()).ok());
  RunLow(101, 1);
  Advance(3600s);
  JoinHigh(201, 2);

  EXPECT_THAT(s().Plan(), IsEmpty());
  const std::vector<Scheduler::PreemptionNotice> notices =
      s().TakePreemptionNotices();
  ASSERT_THAT(notices, SizeIs(1));
  EXPECT_EQ(notices[0].gang_id, kLow);
  EXPECT_EQ(Gang("cpu-p5-pl75-n1").state, state::GangState::kRunning);
  EXPECT_EQ(Gang("cpu-p5-pl75-n1").preempt_notice_ms, 0);
}

TEST_F(PreemptionTest, APreemptionUnderWaySurvivesARestart) {
  RunLow(101, 1);
  Advance(3600s);
  JoinHigh(201, 2);
  EXPECT_THAT(s().Plan(), IsEmpty());
  const std::vector<Scheduler::PreemptionNotice> before =
      s().TakePreemptionNotices();
  ASSERT_THAT(before, SizeIs(1));
  const int64_t notice_ms = Gang(kLow).preempt_notice_ms;
  Advance(20s);
  s().NoteCheckpoint(kLow, 1);
  const int64_t checkpoint_ms = Gang(kLow).preempt_checkpoint_ms;

  // The restarted coordinator knows the preemption, sends the notice again
  // (the key-value store that held it is gone) and chooses nobody new.
  Reopen();
  EXPECT_EQ(Gang(kLow).state, state::GangState::kRunning);
  EXPECT_EQ(Gang(kLow).preempt_notice_ms, notice_ms);
  EXPECT_EQ(Gang(kLow).preempt_checkpoint_ms, checkpoint_ms);
  EXPECT_EQ(Gang(kLow).preempt_by, kHigh);
  EXPECT_EQ(Gang(kLow).preempt_by_priority, 5);
  const std::vector<Scheduler::PreemptionNotice> after =
      s().TakePreemptionNotices();
  ASSERT_THAT(after, SizeIs(1));
  EXPECT_EQ(after[0].gang_id, kLow);
  EXPECT_EQ(after[0].stop_by_unix_s, before[0].stop_by_unix_s);
  EXPECT_EQ(after[0].note, before[0].note);
  JoinHigh(202, 3);  // Its member reconnects after the restart.
  EXPECT_THAT(s().Plan(), IsEmpty());
  EXPECT_THAT(s().TakePreemptionNotices(), IsEmpty());

  // Stopped at the checkpoint recorded before the restart.
  Advance(5s);
  EXPECT_THAT(s().StopPreemptedGangs(), ::testing::ElementsAre(kLow));
  EXPECT_EQ(Gang(kLow).state, state::GangState::kFailed);
  EXPECT_THAT(Gang(kLow).reason, HasSubstr("after checkpoint at"));
  EXPECT_EQ(Gang(kLow).preemptions, 1u);
}

}  // namespace
}  // namespace gdt::coordinator
