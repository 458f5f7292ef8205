#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/fake_clock.h"
#include "coordinator/scheduler.h"
#include "coordinator/watched_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spdlog/spdlog.h"
#include "state/etcd_client.h"
#include "state/etcd_store.h"
#include "state/sqlite_store.h"
#include "testing/etcd_test_server.h"
#include "testing/file_size_limit.h"
#include "testing/log_capture.h"
#include "testing/scheduler_fixtures.h"
#include "testing/sqlite_edit.h"
#include "testing/temp_dir.h"

namespace gdt::coordinator {
namespace {

using test::CpuHost;
using test::FileSizeLimit;
using test::GpuHost;
using test::Joining;
using test::TempDir;
using test::TrainKey;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

void ExpectSameState(const state::StoredState& a, const state::StoredState& b) {
  ASSERT_EQ(a.hosts.size(), b.hosts.size());
  for (size_t i = 0; i < a.hosts.size(); ++i) {
    EXPECT_EQ(a.hosts[i].spec, b.hosts[i].spec);
    EXPECT_EQ(a.hosts[i].last_heartbeat_unix_ms,
              b.hosts[i].last_heartbeat_unix_ms);
  }
  ASSERT_EQ(a.gangs.size(), b.gangs.size());
  for (size_t i = 0; i < a.gangs.size(); ++i) {
    EXPECT_TRUE(a.gangs[i].SameRecord(b.gangs[i])) << a.gangs[i].id;
  }
  EXPECT_EQ(a.gpu_leases, b.gpu_leases);
  EXPECT_EQ(a.port_leases, b.port_leases);
}

// The StateStore contract, run against both implementations: "sqlite" (a
// file in a temp dir) and "etcd" (a single etcd node started by the test on
// loopback; reopening = a fresh EtcdStore on the same prefix).
class StoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "etcd") {
      absl::StatusOr<std::unique_ptr<test::EtcdTestServer>> etcd =
          test::EtcdTestServer::Start();
      ASSERT_TRUE(etcd.ok()) << etcd.status();
      etcd_ = std::move(*etcd);
      absl::StatusOr<std::unique_ptr<state::EtcdClient>> client =
          state::EtcdClient::Create(etcd_->endpoints(),
                                    std::chrono::seconds(5));
      ASSERT_TRUE(client.ok()) << client.status();
      client_ = std::move(*client);
    }
  }

  std::string Path() const { return dir_.path() + "/state/coord.db"; }

  // Opens (or reopens) the store under test.
  absl::StatusOr<std::unique_ptr<state::StateStore>> Open() {
    if (GetParam() == "etcd") {
      absl::StatusOr<std::unique_ptr<state::EtcdStore>> store =
          state::EtcdStore::Open(client_, "test");
      if (!store.ok()) return store.status();
      return std::unique_ptr<state::StateStore>(std::move(*store));
    }
    absl::StatusOr<std::unique_ptr<state::SqliteStore>> store =
        state::SqliteStore::Open(Path());
    if (!store.ok()) return store.status();
    return std::unique_ptr<state::StateStore>(std::move(*store));
  }

  // Fills a store through the scheduler: two hosts, a running gang, a
  // forming gang and a finished gang.
  void Fill(state::StateStore& store) {
    absl::StatusOr<std::unique_ptr<Scheduler>> scheduler =
        Scheduler::Create(clock_, store, SchedulerOptions{});
    ASSERT_TRUE(scheduler.ok()) << scheduler.status();
    Scheduler& s = **scheduler;
    state::HostSpec gpu_host = test::GpuHost("gpu-01", 8);
    gpu_host.runner_slots = 4;
    ASSERT_TRUE(s.RegisterHost(gpu_host).ok());
    ASSERT_TRUE(s.RegisterHost(test::CpuHost("cpu-01", 2)).ok());
    // The running gang declared itself preemptible.
    for (uint32_t index : {1u, 2u}) {
      JoinRequest join = test::Joining(test::TrainKey(2), index, 4);
      join.preemptible = true;
      join.preempt_retries = 2;
      ASSERT_TRUE(s.Join(join, index).ok());
    }
    state::GangKey done_key = test::TrainKey(1);
    done_key.group_name = "lint";
    absl::StatusOr<std::string> done_gang =
        s.Join(test::Joining(done_key, 1), 3);
    ASSERT_TRUE(done_gang.ok()) << done_gang.status();
    for (const AdmissionProposal& proposal : s.Plan()) {
      ASSERT_TRUE(s.Admit(proposal, proposal.candidate_ports.front()).ok());
    }
    ASSERT_TRUE(s.ReportExit(*done_gang, 1, 1, 101, 0).ok());
    ASSERT_TRUE(s.Leave(done_key, 1, 101).ok());
    state::GangKey forming = test::TrainKey(3);
    forming.group_name = "eval";
    ASSERT_TRUE(s.Join(test::Joining(forming, 2), 4).ok());
  }

  test::TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<test::EtcdTestServer> etcd_;
  std::shared_ptr<state::EtcdClient> client_;
};

INSTANTIATE_TEST_SUITE_P(Stores, StoreTest, ::testing::Values("sqlite", "etcd"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

TEST_P(StoreTest, ReopenedStoreHoldsEverything) {
  state::StoredState before;
  {
    absl::StatusOr<std::unique_ptr<state::StateStore>> store = Open();
    ASSERT_TRUE(store.ok()) << store.status();
    Fill(**store);
    absl::StatusOr<state::StoredState> loaded = (*store)->Load();
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    before = *loaded;
  }

  absl::StatusOr<std::unique_ptr<state::StateStore>> reopened = Open();
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  absl::StatusOr<state::StoredState> after = (*reopened)->Load();

  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(before.hosts.size(), 2u);
  EXPECT_EQ(before.gangs.size(), 3u);
  EXPECT_EQ(before.gpu_leases.size(), 8u);
  ASSERT_EQ(before.port_leases.size(), 1u);
  EXPECT_EQ(before.port_leases[0].port, 29510u);
  ASSERT_EQ(after->hosts[1].spec.name, "gpu-01");
  EXPECT_EQ(after->hosts[1].spec.runner_slots, 4u);  // Declared by its agent.
  EXPECT_EQ(after->hosts[0].spec.runner_slots, 0u);  // Not declared.
  ASSERT_EQ(after->gangs[0].id, "train-p5-pl77-n2");
  EXPECT_TRUE(after->gangs[0].members.at(1).preemptible);
  EXPECT_TRUE(after->gangs[0].members.at(2).preemptible);
  EXPECT_FALSE(after->gangs[2].members.at(2).preemptible);
  ExpectSameState(before, *after);
}

TEST_P(StoreTest, RestartKeepsRunningLeasesAndForgetsPresence) {
  {
    absl::StatusOr<std::unique_ptr<state::StateStore>> store = Open();
    ASSERT_TRUE(store.ok()) << store.status();
    Fill(**store);
  }
  absl::StatusOr<std::unique_ptr<state::StateStore>> store = Open();
  ASSERT_TRUE(store.ok()) << store.status();

  absl::StatusOr<std::unique_ptr<Scheduler>> scheduler =
      Scheduler::Create(clock_, **store, SchedulerOptions{});

  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  Snapshot snapshot = (*scheduler)->GetSnapshot(true);
  ASSERT_EQ(snapshot.gangs.size(), 3u);
  const state::Gang& running = snapshot.gangs[0];
  EXPECT_EQ(running.id, "train-p5-pl77-n2");
  EXPECT_EQ(running.state, state::GangState::kRunning);
  EXPECT_TRUE(running.members.at(1).present);
  const state::Gang& forming = snapshot.gangs[1];
  EXPECT_EQ(forming.state, state::GangState::kForming);
  EXPECT_FALSE(forming.members.at(2).present);
  EXPECT_EQ(snapshot.gangs[2].state, state::GangState::kDone);
  EXPECT_EQ(snapshot.hosts[1].host.spec.name, "gpu-01");
  EXPECT_THAT(snapshot.hosts[1].leased_gpus,
              ElementsAre(0u, 1u, 2u, 3u, 4u, 5u, 6u, 7u));
  EXPECT_THAT(snapshot.hosts[0].leased_gpus, IsEmpty());
  // The next gang on gpu-01 must not get the leased port.
  ASSERT_TRUE((*scheduler)->RegisterHost(test::GpuHost("gpu-02", 8)).ok());
  state::GangKey next = test::TrainKey(1);
  next.pipeline_id = 99;
  ASSERT_TRUE((*scheduler)->Join(test::Joining(next, 1, 1, "gpu-02"), 9).ok());
  std::vector<AdmissionProposal> proposals = (*scheduler)->Plan();
  ASSERT_EQ(proposals.size(), 1u);
  EXPECT_EQ(proposals[0].master_host, "gpu-02");
}

TEST_P(StoreTest, SaveMemberWritesOneMemberAndKeepsTheLeases) {
  absl::StatusOr<std::unique_ptr<state::StateStore>> store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  Fill(**store);
  absl::StatusOr<state::StoredState> before = (*store)->Load();
  ASSERT_TRUE(before.ok()) << before.status();
  // Stored by arrival: train (running), lint (done), eval (forming).
  state::Gang running = before->gangs.at(0);
  ASSERT_EQ(running.state, state::GangState::kRunning);
  state::Gang forming = before->gangs.at(2);
  ASSERT_EQ(forming.state, state::GangState::kForming);
  state::Member joined = forming.members.at(2);
  joined.index = 3;
  joined.job_id = 303;
  state::Member leaving = running.members.at(1);
  leaving.left = true;

  ASSERT_TRUE((*store)->SaveMember(forming, joined).ok());
  ASSERT_TRUE((*store)->SaveMember(running, leaving).ok());

  absl::StatusOr<state::StoredState> after = (*store)->Load();
  ASSERT_TRUE(after.ok()) << after.status();
  const state::Gang& reloaded = after->gangs.at(2);
  ASSERT_EQ(reloaded.members.size(), 2u);
  EXPECT_TRUE(reloaded.members.at(2).SameRecord(forming.members.at(2)));
  EXPECT_EQ(reloaded.members.at(3).job_id, 303);
  const state::Gang& still_running = after->gangs.at(0);
  EXPECT_TRUE(still_running.members.at(1).left);
  EXPECT_TRUE(still_running.members.at(1).preemptible);
  EXPECT_FALSE(still_running.members.at(2).left);
  EXPECT_EQ(after->gpu_leases, before->gpu_leases);
  EXPECT_EQ(after->port_leases, before->port_leases);
}

TEST_P(StoreTest, JoinsHeldBackAreStoredByFlushOrTheNextChange) {
  state::Gang forming;
  {
    absl::StatusOr<std::unique_ptr<state::StateStore>> store = Open();
    ASSERT_TRUE(store.ok()) << store.status();
    Fill(**store);
    absl::StatusOr<state::StoredState> before = (*store)->Load();
    ASSERT_TRUE(before.ok()) << before.status();
    forming = before->gangs.at(2);
    ASSERT_EQ(forming.state, state::GangState::kForming);
    state::Member third = forming.members.at(2);
    third.index = 3;
    third.job_id = 303;
    state::Member fourth = third;
    fourth.index = 4;
    fourth.job_id = 404;
    ASSERT_TRUE((*store)->SaveJoin(forming, third, true).ok());
    ASSERT_TRUE((*store)->Flush().ok());
    ASSERT_TRUE((*store)->SaveJoin(forming, fourth, false).ok());
    ASSERT_TRUE(
        (*store)->SaveHost(state::Host{test::CpuHost("cpu-02", 2)}).ok());
    ASSERT_TRUE((*store)->Flush().ok());  // Nothing left: no error.
  }
  absl::StatusOr<std::unique_ptr<state::StateStore>> reopened = Open();
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  absl::StatusOr<state::StoredState> after = (*reopened)->Load();
  ASSERT_TRUE(after.ok()) << after.status();
  const state::Gang& reloaded = after->gangs.at(2);
  ASSERT_EQ(reloaded.members.size(), 3u);
  EXPECT_TRUE(reloaded.members.at(2).SameRecord(forming.members.at(2)));
  EXPECT_EQ(reloaded.members.at(3).job_id, 303);
  EXPECT_EQ(reloaded.members.at(4).job_id, 404);
}

TEST_P(StoreTest, AJoinToAGangWhoseRowWasNotStoredStillLoads) {
  // A failed commit can lose a new gang's row while later joins of the same
  // gang say it is unchanged: a restart must still load them.
  state::Gang lost;
  lost.id = "lost-gang";
  lost.key = test::TrainKey(2);
  lost.key.group_name = "lost";
  lost.created_unix_ms = 1;
  state::Member member;
  member.index = 2;
  member.job_id = 202;
  member.present = true;
  {
    absl::StatusOr<std::unique_ptr<state::StateStore>> store = Open();
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->SaveJoin(lost, member, false).ok());
    ASSERT_TRUE((*store)->Flush().ok());
  }
  absl::StatusOr<std::unique_ptr<state::StateStore>> reopened = Open();
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  absl::StatusOr<state::StoredState> loaded = (*reopened)->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->gangs.size(), 1u);
  EXPECT_EQ(loaded->gangs.at(0).id, "lost-gang");
  EXPECT_EQ(loaded->gangs.at(0).key.group_name, "lost");
  ASSERT_EQ(loaded->gangs.at(0).members.size(), 1u);
  EXPECT_EQ(loaded->gangs.at(0).members.at(2).job_id, 202);
}

TEST_P(StoreTest, APreemptibleFlagSavedWithOneMemberCanBeTakenBack) {
  absl::StatusOr<std::unique_ptr<state::StateStore>> store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  Fill(**store);
  absl::StatusOr<state::StoredState> before = (*store)->Load();
  ASSERT_TRUE(before.ok()) << before.status();
  state::Gang running = before->gangs.at(0);
  state::Member rejoined = running.members.at(2);
  ASSERT_TRUE(rejoined.preemptible);
  rejoined.preemptible = false;  // The retried job no longer declares it.

  ASSERT_TRUE((*store)->SaveMember(running, rejoined).ok());

  store->reset();  // A restart: the old store closes first.
  absl::StatusOr<std::unique_ptr<state::StateStore>> reopened = Open();
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  absl::StatusOr<state::StoredState> after = (*reopened)->Load();
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_TRUE(after->gangs.at(0).members.at(1).preemptible);
  EXPECT_FALSE(after->gangs.at(0).members.at(2).preemptible);
}

TEST_P(StoreTest, APreemptionCountSurvivesReopenAndCanBeCleared) {
  absl::StatusOr<std::unique_ptr<state::StateStore>> store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  Fill(**store);
  absl::StatusOr<state::StoredState> before = (*store)->Load();
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(before->gangs.at(0).preemptions, 0u);
  state::Gang preempted = before->gangs.at(0);
  preempted.state = state::GangState::kFailed;
  preempted.preemptions = 2;
  preempted.preempted_epoch = 3;
  preempted.preempted_by = "urgent-p5-pl77-n1";
  preempted.preempted_lost_gpu_seconds = 5400;
  ASSERT_TRUE((*store)->SaveGang(preempted).ok());
  // Saving one member rewrites the gang's header: the count must stay.
  ASSERT_TRUE((*store)->SaveMember(preempted, preempted.members.at(1)).ok());

  store->reset();  // A restart: the old store closes first.
  absl::StatusOr<std::unique_ptr<state::StateStore>> reopened = Open();
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  absl::StatusOr<state::StoredState> after = (*reopened)->Load();
  ASSERT_TRUE(after.ok()) << after.status();
  const state::Gang& reloaded = after->gangs.at(0);
  EXPECT_TRUE(reloaded.SameRecord(preempted));
  EXPECT_EQ(reloaded.preemptions, 2u);
  EXPECT_EQ(reloaded.preempted_epoch, 3u);
  EXPECT_EQ(reloaded.preempted_by, "urgent-p5-pl77-n1");
  EXPECT_EQ(reloaded.preempted_lost_gpu_seconds, 5400);
  EXPECT_EQ(after->gangs.at(1).preemptions, 0u);

  preempted.preemptions = 0;
  preempted.preempted_epoch = 0;
  preempted.preempted_by.clear();
  preempted.preempted_lost_gpu_seconds = 0;
  ASSERT_TRUE((*reopened)->SaveGang(preempted).ok());
  absl::StatusOr<state::StoredState> cleared = (*reopened)->Load();
  ASSERT_TRUE(cleared.ok()) << cleared.status();
  EXPECT_TRUE(cleared->gangs.at(0).SameRecord(preempted));
}

// The retention of finished gangs counts from their end: the time must
// outlive a restart (or a takeover) and go when a new epoch begins.
TEST_P(StoreTest, AGangsEndTimeSurvivesReopenAndCanBeCleared) {
  absl::StatusOr<std::unique_ptr<state::StateStore>> store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  Fill(**store);
  absl::StatusOr<state::StoredState> before = (*store)->Load();
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(before->gangs.at(0).ended_unix_ms, 0);
  state::Gang ended = before->gangs.at(0);
  ended.state = state::GangState::kDone;
  for (auto& [index, member] : ended.members) member.left = true;
  ended.ended_unix_ms = 1'700'000'123'456;
  ASSERT_TRUE((*store)->SaveGang(ended).ok());

  store->reset();  // A restart: the old store closes first.
  absl::StatusOr<std::unique_ptr<state::StateStore>> reopened = Open();
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  absl::StatusOr<state::StoredState> after = (*reopened)->Load();
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->gangs.at(0).ended_unix_ms, 1'700'000'123'456);
  EXPECT_TRUE(after->gangs.at(0).SameRecord(ended));
  // lint ended when its member left (Fill); eval still forms.
  EXPECT_GT(after->gangs.at(1).ended_unix_ms, 0);
  EXPECT_EQ(after->gangs.at(2).ended_unix_ms, 0);

  ended.state = state::GangState::kForming;
  ended.ended_unix_ms = 0;
  ASSERT_TRUE((*reopened)->SaveGang(ended).ok());
  absl::StatusOr<state::StoredState> cleared = (*reopened)->Load();
  ASSERT_TRUE(cleared.ok()) << cleared.status();
  EXPECT_EQ(cleared->gangs.at(0).ended_unix_ms, 0);
}

TEST_P(StoreTest, AnElasticGangsSizeAndMembersLeftOutSurviveReopen) {
  absl::StatusOr<std::unique_ptr<state::StateStore>> store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  Fill(**store);
  absl::StatusOr<state::StoredState> before = (*store)->Load();
  ASSERT_TRUE(before.ok()) << before.status();
  state::Gang elastic = before->gangs.at(0);
  EXPECT_EQ(elastic.nodes_min, 0u);
  elastic.nodes_min = 1;
  elastic.not_needed[2] = 102;
  elastic.members.erase(2);
  ASSERT_TRUE((*store)->SaveGang(elastic).ok());
  // Saving one member rewrites the gang's header: the size must stay.
  ASSERT_TRUE((*store)->SaveMember(elastic, elastic.members.at(1)).ok());

  store->reset();  // A restart: the old store closes first.
  absl::StatusOr<std::unique_ptr<state::StateStore>> reopened = Open();
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  absl::StatusOr<state::StoredState> after = (*reopened)->Load();
  ASSERT_TRUE(after.ok()) << after.status();
  const state::Gang& reloaded = after->gangs.at(0);
  EXPECT_TRUE(reloaded.SameRecord(elastic));
  EXPECT_EQ(reloaded.nodes_min, 1u);
  EXPECT_EQ(reloaded.not_needed.at(2), 102);
  EXPECT_EQ(reloaded.Size(), 1u);
  EXPECT_EQ(after->gangs.at(1).nodes_min, 0u);
}

TEST_P(StoreTest, APreemptionUnderWaySurvivesReopenWhileTheGangRuns) {
  absl::StatusOr<std::unique_ptr<state::StateStore>> store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  Fill(**store);
  absl::StatusOr<state::StoredState> before = (*store)->Load();
  ASSERT_TRUE(before.ok()) << before.status();
  state::Gang victim = before->gangs.at(0);
  ASSERT_EQ(victim.state, state::GangState::kRunning);
  victim.preempt_notice_ms = 1'700'000'000'000;
  victim.preempt_stop_by_ms = 1'700'000'300'000;
  victim.preempt_checkpoint_ms = 1'700'000'020'000;
  victim.preempt_by = "urgent-p5-pl77-n1";
  victim.preempt_by_priority = 7;
  victim.preempt_estimate_gpu_hours = 1.5;
  ASSERT_TRUE((*store)->SaveGang(victim).ok());

  store->reset();  // A restart: the old store closes first.
  absl::StatusOr<std::unique_ptr<state::StateStore>> reopened = Open();
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  absl::StatusOr<state::StoredState> after = (*reopened)->Load();
  ASSERT_TRUE(after.ok()) << after.status();
  const state::Gang& reloaded = after->gangs.at(0);
  EXPECT_TRUE(reloaded.SameRecord(victim));
  EXPECT_EQ(reloaded.preempt_stop_by_ms, 1'700'000'300'000);
  EXPECT_EQ(reloaded.preempt_by, "urgent-p5-pl77-n1");
  EXPECT_DOUBLE_EQ(reloaded.preempt_estimate_gpu_hours, 1.5);

  // Once the gang no longer runs, nothing of it is kept.
  victim.state = state::GangState::kFailed;
  ASSERT_TRUE((*reopened)->SaveGang(victim).ok());
  absl::StatusOr<state::StoredState> failed = (*reopened)->Load();
  ASSERT_TRUE(failed.ok()) << failed.status();
  EXPECT_EQ(failed->gangs.at(0).preempt_notice_ms, 0);
}

// A finished gang past its retention goes with everything stored under its
// id, and nothing of any other gang; a gang saved later under the same id
// (a retry after the retention) starts from nothing.
TEST_P(StoreTest, ADeletedGangLeavesNothingUnderItsId) {
  absl::StatusOr<std::unique_ptr<state::StateStore>> store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  Fill(**store);
  absl::StatusOr<state::StoredState> before = (*store)->Load();
  ASSERT_TRUE(before.ok()) << before.status();
  // Stored by arrival: train (running, preemptible members), lint, eval.
  state::Gang gone = before->gangs.at(0);
  ASSERT_EQ(gone.id, "train-p5-pl77-n2");
  gone.preemptions = 1;
  gone.preempted_epoch = 1;
  gone.preempted_by = "urgent-p5-pl77-n1";
  gone.nodes_min = 1;
  gone.preempt_notice_ms = 1'700'000'000'000;
  ASSERT_TRUE((*store)->SaveGang(gone).ok());
  // Ids that share its prefix keep what they have.
  const std::string kept = "train-p5-pl77-n2-2";
  for (const std::string& id : {gone.id, kept}) {
    ASSERT_TRUE((*store)
                    ->SaveKvToken(state::KvToken{
                        id, 3, "t-" + id, {{1, "sha-1-" + id}, {2, "sha-2"}}})
                    .ok());
    ASSERT_TRUE((*store)
                    ->SaveCheckpointRecord({id, 1, 10, 0, 101, "{}", 1'000}, 8)
                    .ok());
  }

  ASSERT_TRUE((*store)->DeleteGang(gone.id).ok());
  ASSERT_TRUE((*store)->DeleteGang("never-existed").ok());

  store->reset();  // A restart: the old store closes first.
  // No record of it is left behind, not even one Load() would skip.
  if (GetParam() == "sqlite") {
    std::string count = "0";
    for (const char* table :
         {"gangs", "members", "preemptible_members", "gpu_leases",
          "port_leases", "gang_kv_tokens", "gang_kv_earlier_tokens",
          "gang_preemptions", "elastic_gangs", "preemptions_under_way",
          "gang_ended", "checkpoint_records"}) {
      count += absl::StrCat(" + (SELECT COUNT(*) FROM ", table,
                            " WHERE gang_id = '", gone.id, "')");
    }
    EXPECT_EQ(test::ExecSql(Path(),
                            "CREATE TEMP TABLE left_behind (n INTEGER CHECK "
                            "(n = 0)); INSERT INTO left_behind SELECT " +
                                count),
              "");
  } else {
    absl::StatusOr<std::vector<state::EtcdKeyValue>> keys =
        client_->Range("/gdt/test/", /*prefix=*/true, /*keys_only=*/true);
    ASSERT_TRUE(keys.ok()) << keys.status();
    for (const state::EtcdKeyValue& kv : *keys) {
      EXPECT_FALSE(absl::EndsWith(kv.key, "/" + gone.id) ||
                   absl::StrContains(kv.key, "/" + gone.id + "/"))
          << kv.key;
    }
  }
  absl::StatusOr<std::unique_ptr<state::StateStore>> reopened = Open();
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  absl::StatusOr<state::StoredState> after = (*reopened)->Load();
  ASSERT_TRUE(after.ok()) << after.status();
  ASSERT_EQ(after->gangs.size(), 2u);
  EXPECT_EQ(after->gangs[0].id, before->gangs[1].id);
  EXPECT_EQ(after->gangs[1].id, before->gangs[2].id);
  EXPECT_THAT(after->gpu_leases, IsEmpty());
  EXPECT_THAT(after->port_leases, IsEmpty());
  EXPECT_EQ(after->hosts.size(), 2u);
  absl::StatusOr<std::vector<state::KvToken>> tokens =
      (*reopened)->LoadKvTokens();
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  ASSERT_EQ(tokens->size(), 1u);
  EXPECT_EQ(tokens->at(0).gang_id, kept);
  EXPECT_EQ(tokens->at(0).epoch, 3u);
  // The earlier epochs' token hashes come back with it.
  EXPECT_EQ(
      tokens->at(0).earlier_sha256,
      (std::map<uint32_t, std::string>{{1, "sha-1-" + kept}, {2, "sha-2"}}));
  absl::StatusOr<std::vector<state::CheckpointRecord>> records =
      (*reopened)->ListCheckpointRecords(gone.id);
  ASSERT_TRUE(records.ok()) << records.status();
  EXPECT_THAT(*records, IsEmpty());
  records = (*reopened)->ListCheckpointRecords(kept);
  ASSERT_TRUE(records.ok()) << records.status();
  EXPECT_EQ(records->size(), 1u);

  // A fresh gang under the same id inherits no preemption, elastic or
  // preemptible record and no member of the old one.
  state::Gang fresh;
  fresh.id = gone.id;
  fresh.key = gone.key;
  fresh.sequence = 99;
  state::Member member;
  member.index = 2;
  member.job_id = 202;
  fresh.members[2] = member;
  ASSERT_TRUE((*reopened)->SaveMember(fresh, member).ok());
  absl::StatusOr<state::StoredState> again = (*reopened)->Load();
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_EQ(again->gangs.size(), 3u);
  const state::Gang& reloaded = again->gangs.at(2);
  EXPECT_TRUE(reloaded.SameRecord(fresh));
  EXPECT_EQ(reloaded.preemptions, 0u);
  EXPECT_EQ(reloaded.nodes_min, 0u);
  EXPECT_EQ(reloaded.preempt_notice_ms, 0);
  ASSERT_EQ(reloaded.members.size(), 1u);
  EXPECT_FALSE(reloaded.members.at(2).preemptible);
}

// A gang stored in a state this version does not know (a damaged row, or
// a newer gdt-coord's) stops the load with one line naming it, instead of
// loading a gang in state "unknown".
TEST_P(StoreTest, AGangInAnUnknownStateStopsTheLoad) {
  {
    absl::StatusOr<std::unique_ptr<state::StateStore>> store = Open();
    ASSERT_TRUE(store.ok()) << store.status();
    Fill(**store);
  }
  if (GetParam() == "etcd") {
    absl::StatusOr<std::vector<state::EtcdKeyValue>> all = client_->Range(
        "/gdt/test/gangs/", /*prefix=*/true, /*keys_only=*/false);
    ASSERT_TRUE(all.ok()) << all.status();
    int changed = 0;
    for (const state::EtcdKeyValue& kv : *all) {
      if (kv.key.find("/gangs/") == std::string::npos) continue;
      nlohmann::json gang = nlohmann::json::parse(kv.value);
      gang["state"] = 999;
      ASSERT_TRUE(client_
                      ->Txn(nlohmann::json::array(),
                            nlohmann::json::array(
                                {state::EtcdClient::Put(kv.key, gang.dump())}),
                            nlohmann::json::array())
                      .ok());
      ++changed;
    }
    ASSERT_GT(changed, 0);
  } else {
    ASSERT_EQ(test::ExecSql(Path(), "UPDATE gangs SET state = 999"), "");
  }
  absl::StatusOr<std::unique_ptr<state::StateStore>> store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  const absl::StatusOr<state::StoredState> loaded = (*store)->Load();
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(loaded.status().message(),
              ::testing::HasSubstr("is stored in state 999, which this "
                                   "gdt-coord does not know"));
}

TEST(SqliteStoreTest, RejectsANewerSchemaVersion) {
  test::TempDir dir;
  const std::string path = dir.path() + "/state/coord.db";
  {
    absl::StatusOr<std::unique_ptr<state::SqliteStore>> store =
        state::SqliteStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
  }
  // Simulate a database written by a future gdt-coord.
  ASSERT_EQ(test::ExecSql(path, "INSERT INTO schema_version VALUES (99)"), "");

  absl::StatusOr<std::unique_ptr<state::SqliteStore>> store =
      state::SqliteStore::Open(path);

  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(), ::testing::HasSubstr("version 99"));
}

TEST(SqliteStoreTest, OneStoreAtATimePerFile) {
  test::TempDir dir;
  const std::string path = dir.path() + "/coord.db";
  {
    absl::StatusOr<std::unique_ptr<state::SqliteStore>> first =
        state::SqliteStore::Open(path);
    ASSERT_TRUE(first.ok()) << first.status();
    absl::StatusOr<std::unique_ptr<state::SqliteStore>> second =
        state::SqliteStore::Open(path);
    EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(second.status().message(),
              "state file " + path +
                  " is in use by another process (another gdt-coord?)");
    // Another file is another store.
    EXPECT_TRUE(state::SqliteStore::Open(dir.path() + "/other.db").ok());
  }
  // Closed: free again.
  EXPECT_TRUE(state::SqliteStore::Open(path).ok());
}

TEST(SqliteStoreTest, AStateFileMovedOrReplacedUnderTheStoreIsNoticed) {
  test::TempDir dir;
  const std::string path = dir.path() + "/coord.db";
  absl::StatusOr<std::unique_ptr<state::SqliteStore>> store =
      state::SqliteStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_TRUE((*store)->CheckStorage().ok());
  // Moved away: writes still succeed, into the file a restart would not
  // read, and the check says so.
  std::filesystem::rename(path, path + ".moved");
  EXPECT_TRUE((*store)->SaveSecret("s", "v").ok());
  absl::Status moved = (*store)->CheckStorage();
  EXPECT_EQ(moved.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(moved.message(),
              ::testing::HasSubstr("state file " + path +
                                   ": No such file or directory (removed"));
  // Put back: fine again.
  std::filesystem::rename(path + ".moved", path);
  EXPECT_TRUE((*store)->CheckStorage().ok());
  // Another file in its place.
  std::filesystem::copy_file(path, path + ".copy");
  std::filesystem::rename(path + ".copy", path);
  absl::Status replaced = (*store)->CheckStorage();
  EXPECT_EQ(replaced.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(replaced.message(), ::testing::HasSubstr("was replaced"));
  // An in-memory store has no file to lose.
  absl::StatusOr<std::unique_ptr<state::SqliteStore>> memory =
      state::SqliteStore::Open(":memory:");
  ASSERT_TRUE(memory.ok()) << memory.status();
  EXPECT_TRUE((*memory)->CheckStorage().ok());
}

// A serving coordinator's store (WatchedStore) on a SQLite state file, on a
// fake clock of its own.
struct ServingStore {
  // Opens the file at `path`; fails the test when it does not open.
  void Open(const std::string& path) {
    absl::StatusOr<std::unique_ptr<state::SqliteStore>> opened =
        state::SqliteStore::Open(path);
    ASSERT_TRUE(opened.ok()) << opened.status();
    store.emplace(std::move(*opened), clock);
    store->Serve();
  }
  FakeClock clock;
  std::optional<coordinator::WatchedStore> store;
};

// The store's first write (`name` = `value`) once its storage check is due
// finds the state file at `path` deleted, restores it and says so, and the
// write is in the new file; what the store logged meanwhile.
std::string ExpectRestoredByTheNextCheck(ServingStore& serving,
                                         const std::string& path,
                                         const std::string& name,
                                         const std::string& value) {
  test::LogCapture captured;
  serving.clock.Advance(coordinator::WatchedStore::kCheckStorageEvery);
  const absl::Status written = serving.store->SaveSecret(name, value);
  const std::string log = captured.text();
  EXPECT_TRUE(written.ok()) << written;
  EXPECT_TRUE(serving.store->CheckStorage().ok());
  EXPECT_THAT(log, ::testing::HasSubstr(
                       "event=state_file_restored path=" + path + " was="));
  EXPECT_THAT(log, ::testing::Not(::testing::HasSubstr("state_file_moved")));
  return log;
}

// The state file at `path`, opened again once its store is gone, holds the
// secrets the tests of a deleted state file write before it is deleted,
// while it is gone and after it is back. The store that opened it goes to
// `reopened` when given, for more checks.
void ExpectSecretsOfEveryPhase(
    const std::string& path,
    std::unique_ptr<state::SqliteStore>* reopened = nullptr) {
  absl::StatusOr<std::unique_ptr<state::SqliteStore>> store =
      state::SqliteStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  for (const auto& [name, value] :
       std::vector<std::pair<std::string, std::string>>{
           {"before", "1"}, {"while_deleted", "2"}, {"after", "3"}}) {
    absl::StatusOr<std::string> loaded = (*store)->LoadSecret(name);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(*loaded, value) << name;
  }
  if (reopened != nullptr) *reopened = std::move(*store);
}

// A serving coordinator's store answers a write that the file's lock (held
// by another process's transaction) refuses as Unavailable, marked as the
// store's refusal; other Unavailable errors are not the store's.
TEST(WatchedStoreTest, ARefusedWriteIsMarkedAsTheStoresRefusal) {
  test::TempDir dir;
  const std::string path = dir.path() + "/coord.db";
  ServingStore serving;
  ASSERT_NO_FATAL_FAILURE(serving.Open(path));
  coordinator::WatchedStore& store = *serving.store;
  sqlite3* other = nullptr;
  ASSERT_EQ(
      sqlite3_open_v2(path.c_str(), &other, SQLITE_OPEN_READWRITE, nullptr),
      SQLITE_OK);
  std::unique_ptr<sqlite3, int (*)(sqlite3*)> closer(other, sqlite3_close_v2);
  ASSERT_EQ(sqlite3_exec(other, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr),
            SQLITE_OK);

  const absl::Status refused = store.SaveSecret("s", "v");

  EXPECT_TRUE(absl::IsUnavailable(refused)) << refused;
  EXPECT_TRUE(coordinator::IsStateStoreRefusal(refused)) << refused;
  EXPECT_FALSE(coordinator::IsStateStoreRefusal(
      absl::UnavailableError("port 29510 on h1 is not available")));
  ASSERT_EQ(sqlite3_exec(other, "COMMIT", nullptr, nullptr, nullptr),
            SQLITE_OK);
  EXPECT_TRUE(store.SaveSecret("s", "v").ok());
}

// Joins are held back for one commit; when that commit fails (the disk is
// full), they are not lost: the store writes them again with its next
// change, and a restart finds them.
TEST(SqliteStoreTest, JoinsWhoseCommitFailsAreWrittenAgain) {
  test::TempDir dir;
  const std::string path = dir.path() + "/coord.db";
  state::Gang gang;
  gang.id = "gang-1";
  gang.key = test::TrainKey(3);
  gang.created_unix_ms = 1;
  state::Member first;
  first.index = 1;
  first.job_id = 101;
  state::Member second = first;
  second.index = 2;
  second.job_id = 202;
  state::Member third = first;
  third.index = 3;
  third.job_id = 303;
  {
    absl::StatusOr<std::unique_ptr<state::SqliteStore>> store =
        state::SqliteStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->SaveJoin(gang, first, true).ok());
    ASSERT_TRUE((*store)->Flush().ok());
    ASSERT_TRUE((*store)->SaveJoin(gang, second, false).ok());
    {
      // The commit cannot grow the write-ahead log.
      FileSizeLimit full(std::filesystem::file_size(path + "-wal"));
      const absl::Status flushed = (*store)->Flush();
      EXPECT_FALSE(flushed.ok());
      EXPECT_FALSE(state::IsPermanentStoreError(flushed)) << flushed;
      // Still full: refused again, and a join meanwhile waits too.
      ASSERT_TRUE((*store)->SaveJoin(gang, third, false).ok());
      EXPECT_FALSE((*store)->Flush().ok());
    }
    // Space again: the next change stores them with itself.
    ASSERT_TRUE(
        (*store)->SaveHost(state::Host{test::CpuHost("cpu-01", 2)}).ok());
  }
  absl::StatusOr<std::unique_ptr<state::SqliteStore>> reopened =
      state::SqliteStore::Open(path);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  absl::StatusOr<state::StoredState> loaded = (*reopened)->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->gangs.size(), 1u);
  std::vector<int64_t> jobs;
  for (const auto& [index, member] : loaded->gangs.at(0).members) {
    jobs.push_back(member.job_id);
  }
  EXPECT_THAT(jobs, ElementsAre(101, 202, 303));
  EXPECT_EQ(loaded->hosts.size(), 1u);
}

// A join the store only holds back succeeds on a full disk: it does not
// show that the store recovered. One failing line for the outage and one
// recovered line once a write is committed again.
TEST(WatchedStoreTest, AHeldBackJoinIsNoRecovery) {
  test::TempDir dir;
  const std::string path = dir.path() + "/coord.db";
  ServingStore serving;
  ASSERT_NO_FATAL_FAILURE(serving.Open(path));
  coordinator::WatchedStore& store = *serving.store;
  state::Gang gang;
  gang.id = "gang-1";
  gang.key = test::TrainKey(3);
  gang.created_unix_ms = 1;
  state::Member member;
  member.index = 1;
  member.job_id = 101;
  ASSERT_TRUE(store.SaveJoin(gang, member, true).ok());
  ASSERT_TRUE(store.Flush().ok());
  std::optional<test::LogCapture> captured(std::in_place);
  {
    FileSizeLimit full(std::filesystem::file_size(path + "-wal"));
    member.index = 2;
    member.job_id = 202;
    ASSERT_TRUE(store.SaveJoin(gang, member, false).ok());
    EXPECT_TRUE(coordinator::IsStateStoreRefusal(store.Flush()));
    member.index = 3;
    member.job_id = 303;
    EXPECT_TRUE(store.SaveJoin(gang, member, false).ok());
    EXPECT_TRUE(coordinator::IsStateStoreRefusal(store.Flush()));
  }
  EXPECT_TRUE(store.SaveHost(state::Host{test::CpuHost("cpu-01", 2)}).ok());
  const std::string log = captured->text();
  captured.reset();

  auto count = [&](const std::string& event) {
    size_t found = 0;
    for (size_t at = log.find(event); at != std::string::npos;
         at = log.find(event, at + 1)) {
      ++found;
    }
    return found;
  };
  EXPECT_EQ(count("event=state_store_failing "), 1u) << log;
  EXPECT_EQ(count("event=state_store_recovered "), 1u) << log;
  EXPECT_LT(log.find("event=state_store_failing "),
            log.find("event=state_store_recovered "))
      << log;
}

// A state file that is no database any more (overwritten under the
// coordinator) is a permanent error: retrying does not cure it. The log
// line says so and what to do, at once even within the minute after a
// transient line; a locked file is transient.
TEST(WatchedStoreTest, APermanentStoreErrorIsLoggedAsSuch) {
  test::TempDir dir;
  const std::string path = dir.path() + "/coord.db";
  ServingStore serving;
  ASSERT_NO_FATAL_FAILURE(serving.Open(path));
  coordinator::WatchedStore& store = *serving.store;
  ASSERT_TRUE(store.SaveSecret("s", "v").ok());
  std::optional<test::LogCapture> captured(std::in_place);
  {
    sqlite3* other = nullptr;
    ASSERT_EQ(
        sqlite3_open_v2(path.c_str(), &other, SQLITE_OPEN_READWRITE, nullptr),
        SQLITE_OK);
    std::unique_ptr<sqlite3, int (*)(sqlite3*)> closer(other, sqlite3_close_v2);
    ASSERT_EQ(sqlite3_exec(other, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr),
              SQLITE_OK);
    EXPECT_TRUE(coordinator::IsStateStoreRefusal(store.SaveSecret("s", "w")));
    ASSERT_EQ(sqlite3_exec(other, "ROLLBACK", nullptr, nullptr, nullptr),
              SQLITE_OK);
  }
  // Garbage in place of the database, its log and its shared index.
  for (const std::string& file : {path, path + "-wal", path + "-shm"}) {
    const auto size = std::filesystem::file_size(file);
    std::fstream out(file, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(out.good()) << file;
    out << std::string(size, 'x');
  }
  const absl::Status refused = store.SaveSecret("s", "x");
  const std::string log = captured->text();
  captured.reset();

  EXPECT_TRUE(coordinator::IsStateStoreRefusal(refused)) << refused;
  EXPECT_THAT(log, ::testing::HasSubstr(
                       "event=state_store_failing kind=transient "
                       "call=SaveSecret failures=1 error=\"INTERNAL: sqlite: "
                       "database is locked"));
  EXPECT_THAT(log,
              ::testing::HasSubstr("event=state_store_failing kind=permanent "
                                   "call=SaveSecret failures=1"));
  EXPECT_THAT(log, ::testing::HasSubstr("restore the file from a backup"));
}

// A state file deleted while the store holds it open is written anew from
// what the store holds; later writes go to the new file, and a restart
// reads everything. A moved file is left for the operator to move back.
TEST(SqliteStoreTest, ADeletedStateFileIsWrittenAnew) {
  test::TempDir dir;
  const std::string path = dir.path() + "/coord.db";
  {
    absl::StatusOr<std::unique_ptr<state::SqliteStore>> store =
        state::SqliteStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->SaveSecret("before", "1").ok());
    // Moved: not restored.
    std::filesystem::rename(path, path + ".moved");
    EXPECT_EQ((*store)->RestoreStorage().status().code(),
              absl::StatusCode::kFailedPrecondition);
    EXPECT_FALSE(std::filesystem::exists(path));
    std::filesystem::rename(path + ".moved", path);
    ASSERT_TRUE((*store)->CheckStorage().ok());
    // Nothing to restore while the file is there.
    EXPECT_EQ((*store)->RestoreStorage().status().code(),
              absl::StatusCode::kFailedPrecondition);

    ASSERT_TRUE(std::filesystem::remove(path));
    ASSERT_TRUE((*store)->SaveSecret("while_deleted", "2").ok());
    // A join held back is committed first.
    state::Gang gang;
    gang.id = "gang-1";
    gang.key = test::TrainKey(2);
    state::Member member;
    member.index = 1;
    member.job_id = 101;
    ASSERT_TRUE((*store)->SaveJoin(gang, member, true).ok());
    EXPECT_FALSE((*store)->CheckStorage().ok());

    absl::StatusOr<state::StateStore::Restored> restored =
        (*store)->RestoreStorage();

    ASSERT_TRUE(restored.ok()) << restored.status();
    EXPECT_EQ(restored->path, path);
    EXPECT_EQ(restored->made_directory, "");
    EXPECT_TRUE((*store)->CheckStorage().ok());
    EXPECT_EQ(std::filesystem::status(path).permissions() &
                  std::filesystem::perms::all,
              std::filesystem::perms::owner_read |
                  std::filesystem::perms::owner_write);
    ASSERT_TRUE((*store)->SaveSecret("after", "3").ok());
    // No temporary file is left.
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    EXPECT_THAT(names, ElementsAre("coord.db", "coord.db-shm", "coord.db-wal",
                                   "coord.db.lock"));
    // Still one coordinator per file.
    EXPECT_EQ(state::SqliteStore::Open(path).status().code(),
              absl::StatusCode::kFailedPrecondition);
  }
  std::unique_ptr<state::SqliteStore> reopened;
  ASSERT_NO_FATAL_FAILURE(ExpectSecretsOfEveryPhase(path, &reopened));
  absl::StatusOr<state::StoredState> state = reopened->Load();
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_EQ(state->gangs.size(), 1u);
  EXPECT_EQ(state->gangs.at(0).members.at(1).job_id, 101);
}

// A serving coordinator's store notices a deleted state file with its next
// write and restores it, saying so.
TEST(WatchedStoreTest, ADeletedStateFileIsRestoredAndLogged) {
  test::TempDir dir;
  const std::string path = dir.path() + "/coord.db";
  ServingStore serving;
  ASSERT_NO_FATAL_FAILURE(serving.Open(path));
  coordinator::WatchedStore& store = *serving.store;
  ASSERT_TRUE(store.SaveSecret("s", "1").ok());
  ASSERT_TRUE(std::filesystem::remove(path));

  ExpectRestoredByTheNextCheck(serving, path, "s", "2");

  EXPECT_TRUE(std::filesystem::exists(path));
  // The write that noticed it is in the new file, and so are later ones.
  EXPECT_EQ(store.LoadSecret("s").value_or(""), "2");
  ASSERT_TRUE(store.SaveSecret("t", "3").ok());
  EXPECT_EQ(test::ExecSql(path, "SELECT 1"), "");
}

// A state file deleted with its directory (`rm -rf` of the state dir) is
// restored too: the directory is made again with the mode it had, and
// everything written before, meanwhile and after is in the new file.
TEST(WatchedStoreTest, ADeletedStateDirectoryIsMadeAgainAndRestored) {
  test::TempDir dir;
  const std::string state_dir = dir.path() + "/state";
  const std::string path = state_dir + "/coord.db";
  ASSERT_TRUE(std::filesystem::create_directory(state_dir));
  ASSERT_EQ(chmod(state_dir.c_str(), 0750), 0);
  {
    ServingStore serving;
    ASSERT_NO_FATAL_FAILURE(serving.Open(path));
    ASSERT_TRUE(serving.store->SaveSecret("before", "1").ok());
    ASSERT_GT(std::filesystem::remove_all(state_dir), 0u);
    ASSERT_TRUE(serving.store->SaveSecret("while_deleted", "2").ok());

    const std::string log =
        ExpectRestoredByTheNextCheck(serving, path, "after", "3");

    EXPECT_THAT(log, ::testing::HasSubstr(" made_dir=" + state_dir));
    struct stat info = {};
    ASSERT_EQ(stat(state_dir.c_str(), &info), 0);
    EXPECT_EQ(info.st_mode & 07777, 0750u);
    EXPECT_EQ(info.st_uid, getuid());
    // Still one coordinator per file: the lock file was made and taken too.
    EXPECT_EQ(state::SqliteStore::Open(path).status().code(),
              absl::StatusCode::kFailedPrecondition);
  }
  ASSERT_NO_FATAL_FAILURE(ExpectSecretsOfEveryPhase(path));
}

// A real etcd, a client, and a store fenced by the leader key this test
// won (as replica "a").
struct FencedEtcd {
  std::unique_ptr<test::EtcdTestServer> etcd;
  std::shared_ptr<state::EtcdClient> client;
  std::unique_ptr<state::EtcdStore> store;
  std::string leader_key;
};

void StartFencedEtcd(FencedEtcd* out) {
  absl::StatusOr<std::unique_ptr<test::EtcdTestServer>> etcd =
      test::EtcdTestServer::Start();
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  out->etcd = std::move(*etcd);
  absl::StatusOr<std::unique_ptr<state::EtcdClient>> created =
      state::EtcdClient::Create(out->etcd->endpoints(),
                                std::chrono::seconds(5));
  ASSERT_TRUE(created.ok()) << created.status();
  out->client = std::move(*created);
  out->leader_key = state::EtcdStore::Prefix("test") + "leader";
  absl::StatusOr<state::EtcdTxnResult> won = out->client->Txn(
      nlohmann::json::array(
          {state::EtcdClient::CreateRevisionIs(out->leader_key, 0)}),
      nlohmann::json::array({state::EtcdClient::Put(out->leader_key, "a:1")}),
      nlohmann::json::array());
  ASSERT_TRUE(won.ok()) << won.status();
  ASSERT_TRUE(won->succeeded);
  absl::StatusOr<std::unique_ptr<state::EtcdStore>> store =
      state::EtcdStore::Open(out->client, "test");
  ASSERT_TRUE(store.ok()) << store.status();
  out->store = std::move(*store);
  out->store->SetFence(out->leader_key, won->revision);
}

// Another replica takes over: the leader key is deleted and created again.
void TakeOver(const FencedEtcd& fenced) {
  ASSERT_TRUE(fenced.client
                  ->Txn(nlohmann::json::array(),
                        nlohmann::json::array(
                            {state::EtcdClient::Delete(fenced.leader_key)}),
                        nlohmann::json::array())
                  .ok());
  ASSERT_TRUE(fenced.client
                  ->Txn(nlohmann::json::array(),
                        nlohmann::json::array(
                            {state::EtcdClient::Put(fenced.leader_key, "b:2")}),
                        nlohmann::json::array())
                  .ok());
}

TEST(EtcdStoreTest, FencedWritesFailOnceTheLeaderKeyChanged) {
  FencedEtcd fenced;
  ASSERT_NO_FATAL_FAILURE(StartFencedEtcd(&fenced));
  ASSERT_TRUE(
      fenced.store->SaveHost(state::Host{test::CpuHost("cpu-01", 1)}).ok());

  ASSERT_NO_FATAL_FAILURE(TakeOver(fenced));
  absl::Status refused =
      fenced.store->SaveHost(state::Host{test::CpuHost("cpu-02", 1)});

  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_THAT(refused.message(), ::testing::HasSubstr("no longer the leader"));
  absl::StatusOr<state::StoredState> state = fenced.store->Load();
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_EQ(state->hosts.size(), 1u);  // cpu-02 was never written.
  EXPECT_EQ(state->hosts[0].spec.name, "cpu-01");
}

TEST(EtcdStoreTest, ARemovalOfAGangIsFencedLikeEveryWrite) {
  FencedEtcd fenced;
  ASSERT_NO_FATAL_FAILURE(StartFencedEtcd(&fenced));
  state::Gang gang;
  gang.id = "lint-p5-pl77-n1";
  gang.key = test::TrainKey(1);
  gang.state = state::GangState::kDone;
  ASSERT_TRUE(fenced.store->SaveGang(gang).ok());

  ASSERT_NO_FATAL_FAILURE(TakeOver(fenced));
  absl::Status refused = fenced.store->DeleteGang(gang.id);

  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_THAT(refused.message(), ::testing::HasSubstr("no longer the leader"));
  absl::StatusOr<state::StoredState> state = fenced.store->Load();
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_EQ(state->gangs.size(), 1u);  // Still there for the new leader.
  EXPECT_EQ(state->gangs[0].id, gang.id);
}

TEST(EtcdStoreTest, UnreachableEtcdIsUnavailable) {
  absl::StatusOr<std::unique_ptr<state::EtcdClient>> client =
      state::EtcdClient::Create({"127.0.0.1:1"}, std::chrono::seconds(2));
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<std::unique_ptr<state::EtcdStore>> store =
      state::EtcdStore::Open(std::move(*client), "test");
  ASSERT_TRUE(store.ok()) << store.status();

  absl::StatusOr<state::StoredState> state = (*store)->Load();

  EXPECT_EQ(state.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(state.status().message(), ::testing::HasSubstr("127.0.0.1:1"));
}

TEST(EtcdStoreTest, RejectsABadClusterName) {
  absl::StatusOr<std::unique_ptr<state::EtcdClient>> client =
      state::EtcdClient::Create({"127.0.0.1:1"}, std::chrono::seconds(1));
  ASSERT_TRUE(client.ok()) << client.status();

  absl::StatusOr<std::unique_ptr<state::EtcdStore>> store =
      state::EtcdStore::Open(std::move(*client), "a/b");

  EXPECT_EQ(store.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(store.status().message(), ::testing::HasSubstr("'a/b'"));
}

// Checkpoint manifest records.

TEST_P(StoreTest, CheckpointRecordsKeepTheNewestPerGangAcrossReopen) {
  {
    absl::StatusOr<std::unique_ptr<state::StateStore>> store = Open();
    ASSERT_TRUE(store.ok()) << store.status();
    for (int64_t step : {10, 30, 20, 40}) {
      state::CheckpointRecord r{"gang-a", 1, step, 0, 100 + step, "{}", step};
      ASSERT_TRUE((*store)->SaveCheckpointRecord(r, 3).ok());
    }
    // Older than the three kept: not kept.
    state::CheckpointRecord old{"gang-a", 1, 5, 0, 105, "{}", 50};
    ASSERT_TRUE((*store)->SaveCheckpointRecord(old, 3).ok());
    state::CheckpointRecord other{"gang-b", 2, 5, 0, 7, "{\"b\":1}", 1};
    ASSERT_TRUE((*store)->SaveCheckpointRecord(other, 3).ok());
  }
  absl::StatusOr<std::unique_ptr<state::StateStore>> store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<std::vector<state::CheckpointRecord>> a =
      (*store)->ListCheckpointRecords("gang-a");
  ASSERT_TRUE(a.ok()) << a.status();
  std::vector<int64_t> steps;
  for (const state::CheckpointRecord& r : *a) steps.push_back(r.step);
  EXPECT_THAT(steps, ElementsAre(40, 30, 20));  // Steps 10 and 5 pruned.
  EXPECT_EQ((*a)[0].job_id, 140);
  absl::StatusOr<std::vector<state::CheckpointRecord>> b =
      (*store)->ListCheckpointRecords("gang-b");
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->size(), 1u);
  EXPECT_EQ((*b)[0].manifest_json, "{\"b\":1}");
  EXPECT_EQ((*b)[0].epoch, 2u);
  ASSERT_TRUE((*store)->DeleteCheckpointRecords("gang-a").ok());
  EXPECT_THAT(*(*store)->ListCheckpointRecords("gang-a"), IsEmpty());
  // The state itself is untouched by records.
  absl::StatusOr<state::StoredState> state = (*store)->Load();
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_THAT(state->gangs, IsEmpty());
}

// Ties go to the latest record; a record past the window is not kept, even
// when it ties with one that is dropped too.
TEST_P(StoreTest, CheckpointRecordsOfEqualStepsKeepTheLatest) {
  absl::StatusOr<std::unique_ptr<state::StateStore>> store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  for (const auto& [step, job] :
       std::vector<std::pair<int64_t, int64_t>>{{40, 1}, {30, 2}, {20, 3}}) {
    state::CheckpointRecord r{"gang-a", 1, step, 0, job, "{}", job};
    ASSERT_TRUE((*store)->SaveCheckpointRecord(r, 3).ok());
  }
  auto jobs = [&] {
    absl::StatusOr<std::vector<state::CheckpointRecord>> records =
        (*store)->ListCheckpointRecords("gang-a");
    EXPECT_TRUE(records.ok()) << records.status();
    std::vector<int64_t> ids;
    if (!records.ok()) return ids;
    for (const state::CheckpointRecord& r : *records) ids.push_back(r.job_id);
    return ids;
  };
  state::CheckpointRecord late{"gang-a", 2, 20, 0, 4, "{}", 4};
  ASSERT_TRUE((*store)->SaveCheckpointRecord(late, 2).ok());
  EXPECT_THAT(jobs(), ElementsAre(1, 2));  // Both 20s are past the window.
  state::CheckpointRecord tie{"gang-a", 2, 30, 0, 5, "{}", 5};
  ASSERT_TRUE((*store)->SaveCheckpointRecord(tie, 2).ok());
  EXPECT_THAT(jobs(), ElementsAre(1, 5));  // 40, then the latest 30.
}

// Host tokens survive a restart and can be deleted.
TEST_P(StoreTest, HostTokensAreSavedListedAndDeleted) {
  {
    absl::StatusOr<std::unique_ptr<state::StateStore>> store = Open();
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->SaveHostToken({"gpu-02", "bb", 2}).ok());
    ASSERT_TRUE((*store)->SaveHostToken({"gpu-01", "aa", 1}).ok());
    ASSERT_TRUE((*store)->SaveHostToken({"gpu-01", "cc", 3}).ok());  // New.
  }
  absl::StatusOr<std::unique_ptr<state::StateStore>> store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<std::vector<state::HostTokenRecord>> records =
      (*store)->LoadHostTokens();
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 2u);
  EXPECT_EQ((*records)[0].host_name, "gpu-01");
  EXPECT_EQ((*records)[0].sha256, "cc");
  EXPECT_EQ((*records)[0].created_unix_ms, 3);
  EXPECT_EQ((*records)[1].host_name, "gpu-02");
  EXPECT_EQ(*(*store)->DeleteHostToken("gpu-01"), true);
  EXPECT_EQ(*(*store)->DeleteHostToken("gpu-01"), false);
  EXPECT_EQ((*store)->LoadHostTokens()->size(), 1u);
}

// Coordinator secrets survive a restart; an unknown one is empty.
TEST_P(StoreTest, SecretsAreSavedAndReplaced) {
  {
    absl::StatusOr<std::unique_ptr<state::StateStore>> store = Open();
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_EQ(*(*store)->LoadSecret("member_token_key"), "");
    ASSERT_TRUE((*store)->SaveSecret("member_token_key", "k1").ok());
    ASSERT_TRUE((*store)->SaveSecret("member_token_key", "k2").ok());
    ASSERT_TRUE((*store)->SaveSecret("other", "o").ok());
  }
  absl::StatusOr<std::unique_ptr<state::StateStore>> store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<std::string> key = (*store)->LoadSecret("member_token_key");
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ(*key, "k2");
  EXPECT_EQ(*(*store)->LoadSecret("other"), "o");
}

// Large gangs.

// A gang of `size` members on 8-GPU hosts, as admission leaves it: every
// member placed, running, with a master port.
state::Gang LargeRunningGang(uint32_t size) {
  state::Gang gang;
  gang.key = test::TrainKey(size);
  gang.id = absl::StrCat("train-p5-pl77-n", size);
  gang.state = state::GangState::kRunning;
  gang.master_host = "gpu-node-00001";
  gang.master_addr = "10.1.0.1";
  gang.master_port = 29510;
  gang.created_unix_ms = 1'700'000'000'000;
  gang.sequence = 1;
  for (uint32_t index = 1; index <= size; ++index) {
    state::Member& member = gang.members[index];
    member.index = index;
    member.job_id = 9'000'000'000 + index;
    member.job_name = absl::StrCat("train ", index, "/", size);
    member.gpus_per_node = 8;
    member.procs_per_node = 8;
    member.launcher = 1;
    member.arrival_host = absl::StrFormat("gpu-node-%05u", index);
    member.job_timeout_seconds = 86'400;
    member.node_rank = static_cast<int32_t>(index - 1);
    member.host_name = member.arrival_host;
    member.gpu_indices = {0, 1, 2, 3, 4, 5, 6, 7};
  }
  return gang;
}

// Admission writes a gang of hundreds or thousands of members whole, on a
// store with its default limits (etcd: 128 operations and 1.5 MiB per
// transaction), and a reopened store holds every member and lease.
TEST_P(StoreTest, AGangOfThousandsOfMembersIsAdmittedWhole) {
  for (uint32_t size : {200u, 1024u, 4096u}) {
    SCOPED_TRACE(size);
    const state::Gang gang = LargeRunningGang(size);
    {
      absl::StatusOr<std::unique_ptr<state::StateStore>> store = Open();
      ASSERT_TRUE(store.ok()) << store.status();
      // It formed member by member, then was admitted.
      state::Gang forming = gang;
      forming.state = state::GangState::kForming;
      forming.master_port = 0;
      for (auto& [index, member] : forming.members) {
        member.node_rank = -1;
        member.host_name.clear();
        member.gpu_indices.clear();
        if (index <= 3) {
          ASSERT_TRUE((*store)->SaveMember(forming, member).ok());
        }
      }
      const absl::Status formed = (*store)->SaveGang(forming);
      ASSERT_TRUE(formed.ok()) << formed;
      const absl::Status admitted = (*store)->SaveGang(gang);
      ASSERT_TRUE(admitted.ok()) << admitted;
    }
    absl::StatusOr<std::unique_ptr<state::StateStore>> reopened = Open();
    ASSERT_TRUE(reopened.ok()) << reopened.status();
    absl::StatusOr<state::StoredState> loaded = (*reopened)->Load();
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    const auto found =
        std::find_if(loaded->gangs.begin(), loaded->gangs.end(),
                     [&](const state::Gang& g) { return g.id == gang.id; });
    ASSERT_NE(found, loaded->gangs.end());
    EXPECT_TRUE(found->SameRecord(gang));
    size_t leases = 0;
    for (const state::GpuLease& lease : loaded->gpu_leases) {
      leases += lease.gang_id == gang.id ? 1 : 0;
    }
    EXPECT_EQ(leases, size_t{size} * 8);
    EXPECT_EQ(loaded->port_leases.size(), 1u);
    if (GetParam() == "etcd") {
      // Its members and leases are one value; the admission's transaction
      // must stay under etcd's default 1.5 MiB with room to spare.
      absl::StatusOr<std::vector<state::EtcdKeyValue>> roster =
          client_->Range("/gdt/test/rosters/" + gang.id, /*prefix=*/false,
                         /*keys_only=*/false);
      ASSERT_TRUE(roster.ok()) << roster.status();
      ASSERT_EQ(roster->size(), 1u);
      std::cout << size << " members: roster of "
                << roster->front().value.size() << " bytes\n";
      EXPECT_LT(roster->front().value.size(), size_t{160} * size);
    }
    // It ends: every lease goes with the same one write.
    state::Gang done = gang;
    done.state = state::GangState::kDone;
    ASSERT_TRUE((*reopened)->SaveGang(done).ok());
    loaded = (*reopened)->Load();
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_THAT(loaded->gpu_leases, IsEmpty());
    EXPECT_THAT(loaded->port_leases, IsEmpty());
  }
}

// A fenced admission of a large gang is refused whole once the leader key
// changed: no record, member or lease of it lands.
TEST(EtcdStoreTest, ALargeGangsAdmissionIsFencedWhole) {
  FencedEtcd fenced;
  ASSERT_NO_FATAL_FAILURE(StartFencedEtcd(&fenced));
  ASSERT_NO_FATAL_FAILURE(TakeOver(fenced));

  const absl::Status refused = fenced.store->SaveGang(LargeRunningGang(1024));

  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  absl::StatusOr<std::vector<state::EtcdKeyValue>> all =
      fenced.client->Range("/gdt/test/", /*prefix=*/true, /*keys_only=*/true);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 1u);  // The leader key alone.
}

// State an older gdt-coord wrote (each member and the leases under keys of
// their own) loads as it was, and the next save of the gang rewrites it in
// the current layout without losing a member or a lease.
TEST(EtcdStoreTest, ARunningGangInTheOlderLayoutLoadsAndIsRewritten) {
  absl::StatusOr<std::unique_ptr<test::EtcdTestServer>> etcd =
      test::EtcdTestServer::Start();
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  absl::StatusOr<std::unique_ptr<state::EtcdClient>> created =
      state::EtcdClient::Create((*etcd)->endpoints(), std::chrono::seconds(5));
  ASSERT_TRUE(created.ok()) << created.status();
  std::shared_ptr<state::EtcdClient> client = std::move(*created);
  const state::Gang gang = LargeRunningGang(2);
  const std::string prefix = state::EtcdStore::Prefix("test");
  nlohmann::json ops = nlohmann::json::array();
  ops.push_back(state::EtcdClient::Put(
      prefix + "gangs/" + gang.id,
      nlohmann::json({{"id", gang.id},
                      {"instance", gang.key.instance},
                      {"project_id", gang.key.project_id},
                      {"pipeline_id", gang.key.pipeline_id},
                      {"group_name", gang.key.group_name},
                      {"size", gang.key.size},
                      {"state", 2},
                      {"epoch", gang.epoch},
                      {"reason", ""},
                      {"master_host", gang.master_host},
                      {"master_addr", gang.master_addr},
                      {"master_port", gang.master_port},
                      {"created_unix_ms", gang.created_unix_ms},
                      {"sequence", gang.sequence}})
          .dump()));
  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& [index, member] : gang.members) {
    ops.push_back(state::EtcdClient::Put(
        absl::StrFormat("%smembers/%s/%010u", prefix, gang.id, index),
        nlohmann::json({{"gang_id", gang.id},
                        {"index", member.index},
                        {"job_id", member.job_id},
                        {"job_name", member.job_name},
                        {"gpus_per_node", member.gpus_per_node},
                        {"procs_per_node", member.procs_per_node},
                        {"launcher", member.launcher},
                        {"arrival_host", member.arrival_host},
                        {"job_timeout_seconds", member.job_timeout_seconds},
                        {"left", member.left},
                        {"node_rank", member.node_rank},
                        {"host_name", member.host_name},
                        {"gpu_indices", member.gpu_indices},
                        {"exit_code", member.exit_code}})
            .dump()));
    for (uint32_t gpu : member.gpu_indices) {
      gpus.push_back(
          {{"host", member.host_name}, {"gpu", gpu}, {"member", index}});
    }
  }
  ops.push_back(state::EtcdClient::Put(
      prefix + "leases/" + gang.id,
      nlohmann::json(
          {{"gang_id", gang.id},
           {"gpus", gpus},
           {"port", {{"host", gang.master_host}, {"port", gang.master_port}}}})
          .dump()));
  ASSERT_TRUE(
      client->Txn(nlohmann::json::array(), ops, nlohmann::json::array()).ok());
  absl::StatusOr<std::unique_ptr<state::EtcdStore>> store =
      state::EtcdStore::Open(client, "test");
  ASSERT_TRUE(store.ok()) << store.status();

  absl::StatusOr<state::StoredState> old = (*store)->Load();
  ASSERT_TRUE(old.ok()) << old.status();
  ASSERT_EQ(old->gangs.size(), 1u);
  EXPECT_TRUE(old->gangs[0].SameRecord(gang));
  EXPECT_EQ(old->gpu_leases.size(), 16u);
  ASSERT_EQ(old->port_leases.size(), 1u);
  EXPECT_EQ(old->port_leases[0].port, 29510u);
  // A member leaves (SaveMember), then the gang is saved whole.
  state::Gang saved = old->gangs[0];
  saved.members.at(2).left = true;
  ASSERT_TRUE((*store)->SaveMember(saved, saved.members.at(2)).ok());
  ASSERT_TRUE((*store)->SaveGang(saved).ok());

  absl::StatusOr<state::StoredState> now = (*store)->Load();
  ASSERT_TRUE(now.ok()) << now.status();
  ASSERT_EQ(now->gangs.size(), 1u);
  EXPECT_TRUE(now->gangs[0].SameRecord(saved));
  EXPECT_EQ(now->gpu_leases, old->gpu_leases);
  EXPECT_EQ(now->port_leases, old->port_leases);
  absl::StatusOr<std::vector<state::EtcdKeyValue>> left_over =
      client->Range(prefix + "leases/", /*prefix=*/true, /*keys_only=*/true);
  ASSERT_TRUE(left_over.ok()) << left_over.status();
  EXPECT_THAT(*left_over, IsEmpty());
}

// Members of a running gang that exit are stored one by one: the exit
// codes survive a reopen, the leases stay, and (etcd) the gang's roster is
// not rewritten for each exit.
TEST_P(StoreTest, ExitReportsOfARunningGangStoreOneMemberEach) {
  constexpr uint32_t kMembers = 8;
  std::string gang_id;
  int64_t roster_revision = 0;
  {
    absl::StatusOr<std::unique_ptr<state::StateStore>> store = Open();
    ASSERT_TRUE(store.ok()) << store.status();
    absl::StatusOr<std::unique_ptr<Scheduler>> scheduler =
        Scheduler::Create(clock_, **store, SchedulerOptions{});
    ASSERT_TRUE(scheduler.ok()) << scheduler.status();
    Scheduler& s = **scheduler;
    ASSERT_TRUE(s.RegisterHost(test::GpuHost("gpu-01", 8)).ok());
    for (uint32_t index = 1; index <= kMembers; ++index) {
      absl::StatusOr<std::string> joined =
          s.Join(test::Joining(test::TrainKey(kMembers), index, 1), index);
      ASSERT_TRUE(joined.ok()) << joined.status();
      gang_id = *joined;
    }
    for (const AdmissionProposal& proposal : s.Plan()) {
      ASSERT_TRUE(s.Admit(proposal, proposal.candidate_ports.front()).ok());
    }
    auto roster = [&]() -> int64_t {
      if (GetParam() != "etcd") return 0;
      absl::StatusOr<std::vector<state::EtcdKeyValue>> kvs =
          client_->Range("/gdt/test/rosters/" + gang_id, /*prefix=*/false,
                         /*keys_only=*/true);
      return kvs.ok() && kvs->size() == 1 ? kvs->front().mod_revision : -1;
    };
    roster_revision = roster();
    for (uint32_t index = 1; index < kMembers; ++index) {
      ASSERT_TRUE(s.ReportExit(gang_id, 1, index, 100 + index, 0).ok());
    }
    EXPECT_EQ(roster(), roster_revision);
  }
  absl::StatusOr<std::unique_ptr<state::StateStore>> reopened = Open();
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  absl::StatusOr<state::StoredState> loaded = (*reopened)->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->gangs.size(), 1u);
  const state::Gang& gang = loaded->gangs[0];
  EXPECT_EQ(gang.state, state::GangState::kRunning);
  for (uint32_t index = 1; index <= kMembers; ++index) {
    EXPECT_EQ(gang.members.at(index).exit_code, index < kMembers ? 0 : -1);
  }
  EXPECT_EQ(loaded->gpu_leases.size(), size_t{kMembers});
  EXPECT_EQ(loaded->port_leases.size(), 1u);
}

}  // namespace
}  // namespace gdt::coordinator
