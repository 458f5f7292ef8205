#include "coordinator/coordinator.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/fake_clock.h"
#include "common/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/file_size_limit.h"
#include "testing/log_capture.h"
#include "testing/scheduler_fixtures.h"
#include "testing/sqlite_edit.h"
#include "testing/temp_dir.h"

namespace gdt::coordinator {
namespace {

using test::GpuHost;
using test::Joining;
using test::TrainKey;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

// Answers CheckPort from a set of busy ports, or fails like an unreachable
// agent; records every question.
class FakePortChecker : public PortChecker {
 public:
  absl::StatusOr<bool> IsPortFree(const std::string& agent_endpoint,
                                  uint32_t port) override {
    MutexLock lock(mu_);
    asked_.push_back(port);
    if (unreachable_) return absl::UnavailableError("connection refused");
    return busy_.count(port) == 0;
  }
  void SetBusy(std::set<uint32_t> busy) {
    MutexLock lock(mu_);
    busy_ = std::move(busy);
  }
  void SetUnreachable(bool unreachable) {
    MutexLock lock(mu_);
    unreachable_ = unreachable;
  }
  std::vector<uint32_t> asked() {
    MutexLock lock(mu_);
    return asked_;
  }

 private:
  Mutex mu_;
  std::set<uint32_t> busy_ ABSL_GUARDED_BY(mu_);
  bool unreachable_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<uint32_t> asked_ ABSL_GUARDED_BY(mu_);
};

class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    coordinator_ = test::MemoryCoordinator(clock_, checker_);
    ASSERT_NE(coordinator_, nullptr);
    coordinator_->SetEventSink([this](std::vector<state::MemberEvent> events) {
      MutexLock lock(mu_);
      for (state::MemberEvent& event : events)
        events_.push_back(std::move(event));
      cv_.NotifyAll();
    });
    ASSERT_TRUE(coordinator_->RegisterHost(test::GpuHost("gpu-01", 8)).ok());
  }

  // Waits (bounded) for an Admitted event on `stream_id`.
  std::optional<state::Assignment> WaitAdmitted(uint64_t stream_id) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(10);
    MutexLock lock(mu_);
    while (true) {
      for (const state::MemberEvent& event : events_) {
        if (event.stream_id == stream_id &&
            event.kind == state::MemberEvent::Kind::kAdmitted) {
          return event.assignment;
        }
      }
      if (!cv_.WaitUntil(mu_, deadline) &&
          std::chrono::steady_clock::now() >= deadline) {
        return std::nullopt;
      }
    }
  }

  bool Admitted(uint64_t stream_id) {
    MutexLock lock(mu_);
    for (const state::MemberEvent& event : events_) {
      if (event.stream_id == stream_id &&
          event.kind == state::MemberEvent::Kind::kAdmitted) {
        return true;
      }
    }
    return false;
  }

  FakeClock clock_;
  FakePortChecker checker_;
  std::unique_ptr<Coordinator> coordinator_;
  Mutex mu_;
  CondVar cv_;
  std::vector<state::MemberEvent> events_ ABSL_GUARDED_BY(mu_);
};

TEST_F(CoordinatorTest, MasterPortSkipsPortsTheAgentReportsBusy) {
  checker_.SetBusy({29510, 29511});
  ASSERT_TRUE(
      coordinator_->Join(test::Joining(test::TrainKey(2), 1, 1), 1).ok());
  ASSERT_TRUE(
      coordinator_->Join(test::Joining(test::TrainKey(2), 2, 1), 2).ok());

  coordinator_->RunAdmissionPass();

  std::optional<state::Assignment> first = WaitAdmitted(1);
  std::optional<state::Assignment> second = WaitAdmitted(2);
  ASSERT_TRUE(first.has_value());
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(first->master_port, 29512u);
  EXPECT_EQ(second->master_port, 29512u);
  EXPECT_EQ(checker_.asked(), (std::vector<uint32_t>{29510, 29511, 29512}));
}

TEST_F(CoordinatorTest, UnreachableAgentDelaysAdmissionUntilTheNextPass) {
  checker_.SetUnreachable(true);
  ASSERT_TRUE(
      coordinator_->Join(test::Joining(test::TrainKey(1), 1, 1), 1).ok());

  coordinator_->RunAdmissionPass();

  EXPECT_FALSE(Admitted(1));
  Snapshot snapshot = coordinator_->GetSnapshot(false);
  EXPECT_EQ(snapshot.gangs.at(0).state, state::GangState::kForming);
  EXPECT_THAT(snapshot.gangs.at(0).reason, HasSubstr("agent unreachable"));
  EXPECT_TRUE(snapshot.hosts.at(0).leased_gpus.empty());

  checker_.SetUnreachable(false);
  coordinator_->RunAdmissionPass();

  EXPECT_TRUE(Admitted(1));
}

TEST_F(CoordinatorTest, SchedulerThreadAdmitsAfterTheLastJoin) {
  coordinator_->Start();

  ASSERT_TRUE(
      coordinator_->Join(test::Joining(test::TrainKey(2), 1, 4), 1).ok());
  ASSERT_TRUE(
      coordinator_->Join(test::Joining(test::TrainKey(2), 2, 4), 2).ok());

  std::optional<state::Assignment> first = WaitAdmitted(1);
  std::optional<state::Assignment> second = WaitAdmitted(2);
  ASSERT_TRUE(first.has_value());
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(first->node_rank, 0u);
  EXPECT_EQ(second->node_rank, 1u);
  coordinator_->Stop();
}

TEST_F(CoordinatorTest, AdmissionIssuesOneKvTokenAndTheGangEndClearsIt) {
  ASSERT_TRUE(
      coordinator_->Join(test::Joining(test::TrainKey(2), 1, 1), 1).ok());
  ASSERT_TRUE(
      coordinator_->Join(test::Joining(test::TrainKey(2), 2, 1), 2).ok());
  EXPECT_EQ(coordinator_->kv().gang_count(), 0u);  // Not before admission.

  coordinator_->RunAdmissionPass();

  std::optional<state::Assignment> first = WaitAdmitted(1);
  std::optional<state::Assignment> second = WaitAdmitted(2);
  ASSERT_TRUE(first.has_value());
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(first->kv_token.size(), 64u);
  EXPECT_EQ(first->kv_token, second->kv_token);
  const kv::KvCaller member{first->gang_id, first->epoch, first->kv_token};
  ASSERT_TRUE(coordinator_->kv().Set(member, "k", "v").ok());

  // A member that joins again gets the same token.
  ASSERT_TRUE(
      coordinator_->Join(test::Joining(test::TrainKey(2), 2, 1), 3).ok());
  std::optional<state::Assignment> again = WaitAdmitted(3);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->kv_token, first->kv_token);

  // Member 2 fails; the store lives until every member has left.
  ASSERT_TRUE(
      coordinator_->ReportExit(first->gang_id, first->epoch, 2, 102, 1, false)
          .ok());
  ASSERT_TRUE(coordinator_->Leave(test::TrainKey(2), 2, 102).ok());
  EXPECT_EQ(*coordinator_->kv().Get(member, "k"), "v");
  ASSERT_TRUE(coordinator_->Leave(test::TrainKey(2), 1, 101).ok());
  EXPECT_EQ(coordinator_->kv().gang_count(), 0u);
  // Its members now hear what any caller without a token hears.
  EXPECT_EQ(coordinator_->kv().Get(member, "k").status().code(),
            absl::StatusCode::kPermissionDenied);
}

// Status readers (GetStatus, the dashboard, /metrics) share one snapshot
// until anything else takes the coordinator's lock: a flood of status reads
// no longer builds a snapshot per read under the lock, and heartbeats (like
// joins and exits, which take the same lock) stay fast meanwhile, while
// status still shows a change at once.
TEST_F(CoordinatorTest, AFloodOfStatusReadsLeavesOtherCallsFast) {
  // A cluster whose snapshot takes a while to build: 500 hosts, 200 gangs.
  for (int i = 0; i < 500; ++i) {
    ASSERT_TRUE(
        coordinator_->RegisterHost(test::GpuHost(absl::StrCat("h-", i), 8))
            .ok());
  }
  for (int i = 0; i < 200; ++i) {
    state::GangKey key = test::TrainKey(8);
    key.project_id = 1000 + i;
    key.pipeline_id = 5000 + i;
    ASSERT_TRUE(coordinator_->Join(test::Joining(key, 1, 1), 1000 + i).ok());
  }
  const auto heartbeats_ms = [&](std::chrono::milliseconds length) {
    std::vector<double> ms;
    const auto end = std::chrono::steady_clock::now() + length;
    while (std::chrono::steady_clock::now() < end) {
      const auto start = std::chrono::steady_clock::now();
      EXPECT_TRUE(coordinator_->Heartbeat("gpu-01"));
      ms.push_back(std::chrono::duration<double, std::milli>(
                       std::chrono::steady_clock::now() - start)
                       .count());
      std::this_thread::sleep_for(10ms);  // A pace, not a wait for a state.
    }
    std::sort(ms.begin(), ms.end());
    return ms;
  };
  const auto build_start = std::chrono::steady_clock::now();
  ASSERT_EQ(coordinator_->GetSnapshot(true).hosts.size(), 501u);
  const double build_ms = std::chrono::duration<double, std::milli>(
                              std::chrono::steady_clock::now() - build_start)
                              .count();
  const std::vector<double> quiet = heartbeats_ms(1s);

  std::atomic<bool> stop{false};
  std::atomic<int> reads{0};
  std::vector<std::thread> readers;
  for (int i = 0; i < 8; ++i) {
    readers.emplace_back([&, i] {
      while (!stop) {
        coordinator_->SharedSnapshot(i % 2 == 0);
        ++reads;
      }
    });
  }
  const uint64_t built_before = coordinator_->snapshots_built();
  const std::vector<double> flooded = heartbeats_ms(3s);
  const uint64_t built = coordinator_->snapshots_built() - built_before;
  stop = true;
  for (std::thread& reader : readers) reader.join();

  const auto at = [](const std::vector<double>& ms, double q) {
    return ms[static_cast<size_t>(q * (ms.size() - 1))];
  };
  std::cout << "snapshot build " << build_ms
            << " ms; heartbeats quiet: " << quiet.size() << ", median "
            << at(quiet, 0.5) << " ms, p90 " << at(quiet, 0.9)
            << " ms; during 8 readers: " << flooded.size() << ", median "
            << at(flooded, 0.5) << " ms, p90 " << at(flooded, 0.9)
            << " ms, max " << flooded.back() << " ms; reads " << reads
            << ", snapshots built " << built << "\n";
  // At most one build for each snapshot kind after each heartbeat (and the
  // scheduler's own passes), however many reads.
  EXPECT_LE(built, 2 * flooded.size() + 20);
  EXPECT_GT(reads, static_cast<int>(built));
  // A heartbeat waits for the builds in progress, not for every reader's:
  // before, the median was about 6 builds (100 ms with 8 readers), now 2.
  EXPECT_LT(at(flooded, 0.5), at(quiet, 0.5) + 4 * build_ms + 5);

  // A change shows at once.
  ASSERT_TRUE(coordinator_->SetDrained("h-7", true).ok());
  const Snapshot after = coordinator_->GetSnapshot(false);
  const auto host = std::find_if(
      after.hosts.begin(), after.hosts.end(),
      [](const HostView& view) { return view.host.spec.name == "h-7"; });
  ASSERT_NE(host, after.hosts.end());
  EXPECT_TRUE(host->drained);
}

// The periodic checks forget a finished gang after its retention: late
// calls for it are NOT_FOUND, and a retried job of its key forms it afresh.
TEST_F(CoordinatorTest, TheTimeChecksForgetAFinishedGangAfterItsRetention) {
  ASSERT_TRUE(
      coordinator_->Join(test::Joining(test::TrainKey(2), 1, 1), 1).ok());
  ASSERT_TRUE(
      coordinator_->Join(test::Joining(test::TrainKey(2), 2, 1), 2).ok());
  coordinator_->RunAdmissionPass();
  std::optional<state::Assignment> first = WaitAdmitted(1);
  ASSERT_TRUE(first.has_value());
  const std::string gang = first->gang_id;
  const kv::KvCaller member{gang, first->epoch, first->kv_token};
  state::CheckpointRecord record;
  record.step = 10;
  record.manifest_json = "{}";
  ASSERT_TRUE(coordinator_->RecordCheckpoint(member, record).ok());
  for (uint32_t index : {1u, 2u}) {
    ASSERT_TRUE(
        coordinator_->ReportExit(gang, 1, index, 100 + index, 0, false).ok());
    ASSERT_TRUE(
        coordinator_->Leave(test::TrainKey(2), index, 100 + index).ok());
  }
  coordinator_->RunAdmissionPass();
  ASSERT_EQ(coordinator_->GetSnapshot(true).gangs.size(), 1u);

  clock_.Advance(std::chrono::hours(168));
  ASSERT_TRUE(coordinator_->Heartbeat("gpu-01"));
  coordinator_->RunAdmissionPass();

  EXPECT_TRUE(coordinator_->GetSnapshot(true).gangs.empty());
  EXPECT_EQ(coordinator_->ReportExit(gang, 1, 1, 101, 0, false).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(coordinator_->Watch(gang, 1, 1, 101, 70).code(),
            absl::StatusCode::kNotFound);
  EXPECT_FALSE(coordinator_->ListCheckpoints(member).ok());
  EXPECT_TRUE(coordinator_->Leave(test::TrainKey(2), 1, 101).ok());
  JoinRequest retry = test::Joining(test::TrainKey(2), 1, 1);
  retry.job_id = 201;
  absl::StatusOr<std::string> fresh = coordinator_->Join(retry, 3);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ(*fresh, gang);
  EXPECT_EQ(coordinator_->GetSnapshot(true).gangs.at(0).epoch, 1u);
}

// Coordinators on one SQLite state file, each opened after the one before
// it stopped (a restart), and the member events all of them sent.
class CoordinatorKvTokenTest : public ::testing::Test {
 protected:
  // A coordinator on the state file; nullptr, with the test failed, when it
  // does not start.
  std::unique_ptr<Coordinator> Open() {
    absl::StatusOr<std::unique_ptr<state::SqliteStore>> store =
        state::SqliteStore::Open(path_);
    EXPECT_TRUE(store.ok()) << store.status();
    if (!store.ok()) return nullptr;
    absl::StatusOr<std::unique_ptr<Coordinator>> coordinator =
        Coordinator::Create(clock_, std::move(*store), SchedulerOptions{},
                            checker_);
    EXPECT_TRUE(coordinator.ok()) << coordinator.status();
    if (!coordinator.ok()) return nullptr;
    (*coordinator)
        ->SetEventSink([this](std::vector<state::MemberEvent> events) {
          for (state::MemberEvent& event : events)
            seen_.push_back(std::move(event));
        });
    return std::move(*coordinator);
  }

  // Registers host gpu-01 with `coordinator` and admits a gang of one
  // member there (stream 1).
  void AdmitAGang(Coordinator& coordinator) {
    ASSERT_TRUE(coordinator.RegisterHost(test::GpuHost("gpu-01", 8)).ok());
    ASSERT_TRUE(
        coordinator.Join(test::Joining(test::TrainKey(1), 1, 1), 1).ok());
    coordinator.RunAdmissionPass();
  }

  // What the last Admitted event on `stream_id` assigned.
  std::optional<state::Assignment> LastAdmission(uint64_t stream_id) const {
    std::optional<state::Assignment> assignment;
    for (const state::MemberEvent& event : seen_) {
      if (event.stream_id == stream_id &&
          event.kind == state::MemberEvent::Kind::kAdmitted) {
        assignment = event.assignment;
      }
    }
    return assignment;
  }

  // The key-value store token the last admission on `stream_id` handed out.
  std::optional<std::string> AdmittedToken(uint64_t stream_id) const {
    std::optional<state::Assignment> assignment = LastAdmission(stream_id);
    if (!assignment.has_value()) return std::nullopt;
    return assignment->kv_token;
  }

  test::TempDir dir_;
  const std::string path_ = dir_.path() + "/coord.db";
  FakeClock clock_;
  FakePortChecker checker_;
  std::vector<state::MemberEvent> seen_;
};

TEST_F(CoordinatorKvTokenTest, TokenIsPersistedAndReloaded) {
  std::string token;
  {
    std::unique_ptr<Coordinator> coordinator = Open();
    ASSERT_NE(coordinator, nullptr);
    ASSERT_NO_FATAL_FAILURE(AdmitAGang(*coordinator));
    token = AdmittedToken(1).value_or("");
    ASSERT_EQ(token.size(), 64u);
  }
  absl::StatusOr<std::unique_ptr<state::SqliteStore>> store =
      state::SqliteStore::Open(path_);
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<std::vector<state::KvToken>> tokens = (*store)->LoadKvTokens();
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  ASSERT_EQ(tokens->size(), 1u);
  EXPECT_EQ(tokens->at(0).token, token);
  absl::StatusOr<std::unique_ptr<Coordinator>> restarted = Coordinator::Create(
      clock_, std::move(*store), SchedulerOptions{}, checker_);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  const kv::KvCaller member{tokens->at(0).gang_id, tokens->at(0).epoch, token};
  EXPECT_EQ((*restarted)->kv().Get(member, "k").status().code(),
            absl::StatusCode::kNotFound);  // Token kept, data not.
}

// The admission of a gang was stored but its key-value store token was
// not (the state store refused it; here the token's row is missing, as
// after a restart since). A member admitted while the store refuses writes
// still gets a working token, not an empty one; once the store takes
// writes again the coordinator saves it, so a restart still knows it.
TEST_F(CoordinatorKvTokenTest, ATokenTheStoreRefusesIsHandedOutAndSavedLater) {
  std::string gang;
  {
    std::unique_ptr<Coordinator> coordinator = Open();
    ASSERT_NE(coordinator, nullptr);
    ASSERT_NO_FATAL_FAILURE(AdmitAGang(*coordinator));
    ASSERT_TRUE(AdmittedToken(1).has_value());
    gang = coordinator->GetSnapshot(false).gangs.at(0).id;
  }
  ASSERT_EQ(test::ExecSql(path_, "DELETE FROM gang_kv_tokens"), "");
  std::string token;
  {
    std::unique_ptr<Coordinator> coordinator = Open();
    ASSERT_NE(coordinator, nullptr);
    {
      // Another process holds the file's write lock: every write is
      // refused.
      sqlite3* other = nullptr;
      ASSERT_EQ(sqlite3_open_v2(path_.c_str(), &other, SQLITE_OPEN_READWRITE,
                                nullptr),
                SQLITE_OK);
      std::unique_ptr<sqlite3, int (*)(sqlite3*)> closer(other,
                                                         sqlite3_close_v2);
      ASSERT_EQ(
          sqlite3_exec(other, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr),
          SQLITE_OK);
      // The member's executor reconnects to the running gang.
      ASSERT_TRUE(
          coordinator->Join(test::Joining(test::TrainKey(1), 1, 1), 2).ok());
      ASSERT_TRUE(AdmittedToken(2).has_value());
      token = *AdmittedToken(2);
      ASSERT_EQ(token.size(), 64u);
      const kv::KvCaller member{gang, 1, token};
      EXPECT_TRUE(coordinator->kv().Set(member, "k", "v").ok());
      coordinator->RunAdmissionPass();  // Refused again.
      ASSERT_EQ(sqlite3_exec(other, "COMMIT", nullptr, nullptr, nullptr),
                SQLITE_OK);
    }
    coordinator->RunAdmissionPass();  // Saves it.
    // Joining again gives the same token.
    ASSERT_TRUE(
        coordinator->Join(test::Joining(test::TrainKey(1), 1, 1), 3).ok());
    EXPECT_EQ(AdmittedToken(3), token);
  }
  // The token outlives a restart.
  {
    std::unique_ptr<Coordinator> restarted = Open();
    ASSERT_NE(restarted, nullptr);
    ASSERT_TRUE(
        restarted->Join(test::Joining(test::TrainKey(1), 1, 1), 4).ok());
    EXPECT_EQ(AdmittedToken(4), token);
  }
}

// The store refused a running gang's key-value store token (its disk
// filled between the admission and the token) and the coordinator
// restarted before it could save it: the members still hold the token
// they were given, and it still opens their gang's store (the data in it
// is gone, as for every gang across a restart).
TEST_F(CoordinatorKvTokenTest, AnUnsavedTokenStillWorksAfterARestart) {
  std::string gang;
  std::string token;
  {
    std::unique_ptr<Coordinator> coordinator = Open();
    ASSERT_NE(coordinator, nullptr);
    ASSERT_TRUE(coordinator->RegisterHost(test::GpuHost("gpu-01", 8)).ok());
    // Every other write goes through; the token's is refused.
    ASSERT_EQ(test::ExecSql(path_,
                            "CREATE TRIGGER refuse_tokens BEFORE INSERT ON "
                            "gang_kv_tokens BEGIN SELECT RAISE(ABORT, "
                            "'database or disk is full'); END"),
              "");
    std::optional<test::LogCapture> captured(std::in_place);
    ASSERT_TRUE(
        coordinator->Join(test::Joining(test::TrainKey(1), 1, 1), 1).ok());
    coordinator->RunAdmissionPass();
    const std::string log = captured->text();
    captured.reset();
    EXPECT_THAT(log, HasSubstr("event=gang_kv_token_unsaved"));
    std::optional<state::Assignment> admitted = LastAdmission(1);
    ASSERT_TRUE(admitted.has_value());
    token = admitted->kv_token;
    gang = admitted->gang_id;
    ASSERT_EQ(token.size(), 64u);
    EXPECT_TRUE(coordinator->kv().Set({gang, 1, token}, "k", "v").ok());
  }  // Stopped while the token is still unsaved.
  const auto stored_tokens = [&]() -> std::vector<state::KvToken> {
    absl::StatusOr<std::unique_ptr<state::SqliteStore>> store =
        state::SqliteStore::Open(path_);
    EXPECT_TRUE(store.ok()) << store.status();
    if (!store.ok()) return {};
    return (*store)->LoadKvTokens().value_or(std::vector<state::KvToken>{});
  };
  ASSERT_TRUE(stored_tokens().empty());

  std::unique_ptr<Coordinator> restarted = Open();
  ASSERT_NE(restarted, nullptr);
  const kv::KvCaller member{gang, 1, token};
  EXPECT_EQ(restarted->kv().Get(member, "k").status().code(),
            absl::StatusCode::kNotFound);  // Token kept, data not.
  EXPECT_TRUE(restarted->kv().Set(member, "k2", "v2").ok());
  EXPECT_EQ(restarted->kv().Get(member, "k2").value_or(""), "v2");
  // Another token is still refused.
  EXPECT_FALSE(restarted->kv().Get({gang, 1, std::string(64, '0')}, "k2").ok());
  // Once the store takes it, the token is saved as it was handed out.
  ASSERT_EQ(test::ExecSql(path_, "DROP TRIGGER refuse_tokens"), "");
  restarted->RunAdmissionPass();
  restarted.reset();
  const std::vector<state::KvToken> saved = stored_tokens();
  ASSERT_EQ(saved.size(), 1u);
  EXPECT_EQ(saved.at(0).token, token);
}

// A join is held back for the next commit, that commit fails (the disk is
// full), and when it is written again its row is refused for good (here a
// trigger an operator added to the state file refuses it). The store
// drops that join instead of refusing every later write: the member hears
// why and is taken out of its gang, which waits for it again and is not
// admitted without it, and other writes go on.
TEST(CoordinatorHeldBackJoinTest, AJoinThatCannotBeStoredIsDroppedAndToldSo) {
  test::TempDir dir;
  const std::string path = dir.path() + "/coord.db";
  FakeClock clock;
  FakePortChecker checker;
  absl::StatusOr<std::unique_ptr<state::SqliteStore>> store =
      state::SqliteStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<std::unique_ptr<Coordinator>> created = Coordinator::Create(
      clock, std::move(*store), SchedulerOptions{}, checker);
  ASSERT_TRUE(created.ok()) << created.status();
  Coordinator& coordinator = **created;
  std::vector<state::MemberEvent> seen;
  coordinator.SetEventSink([&seen](std::vector<state::MemberEvent> events) {
    for (state::MemberEvent& event : events) seen.push_back(std::move(event));
  });
  ASSERT_TRUE(coordinator.RegisterHost(test::GpuHost("gpu-01", 8)).ok());
  ASSERT_TRUE(coordinator.Join(test::Joining(test::TrainKey(2), 1, 1), 1).ok());
  coordinator.RunAdmissionPass();  // Commits it.
  ASSERT_TRUE(coordinator.Join(test::Joining(test::TrainKey(2), 2, 1), 2).ok());
  {
    test::FileSizeLimit full(std::filesystem::file_size(path + "-wal"));
    coordinator.RunAdmissionPass();  // Its commit fails; so does the gang's.
  }
  ASSERT_EQ(test::ExecSql(path,
                          "CREATE TRIGGER refuse_member BEFORE INSERT ON "
                          "members WHEN NEW.member_index = 2 BEGIN SELECT "
                          "RAISE(ABORT, 'member 2 is refused'); END"),
            "");
  std::optional<test::LogCapture> captured(std::in_place);
  coordinator.RunAdmissionPass();
  // Another change is stored at once.
  const absl::Status registered =
      coordinator.RegisterHost(test::GpuHost("gpu-02", 8));
  const std::string log = captured->text();
  captured.reset();

  EXPECT_TRUE(registered.ok()) << registered;
  std::optional<state::MemberEvent> aborted;
  for (const state::MemberEvent& event : seen) {
    EXPECT_NE(event.kind, state::MemberEvent::Kind::kAdmitted);
    if (event.stream_id == 2 &&
        event.kind == state::MemberEvent::Kind::kAborted) {
      aborted = event;
    }
  }
  ASSERT_TRUE(aborted.has_value());
  EXPECT_THAT(aborted->reason,
              HasSubstr("could not store the join of member 2 (job 102)"));
  EXPECT_THAT(aborted->reason, HasSubstr("member 2 is refused"));
  EXPECT_THAT(log, HasSubstr("event=join_dropped gang="));
  Snapshot snapshot = coordinator.GetSnapshot(false);
  ASSERT_EQ(snapshot.gangs.size(), 1u);
  EXPECT_EQ(snapshot.gangs.at(0).state, state::GangState::kForming);
  EXPECT_EQ(snapshot.gangs.at(0).members.count(2), 0u);
  EXPECT_THAT(snapshot.gangs.at(0).reason, HasSubstr("1/2 members present"));
  EXPECT_EQ(snapshot.hosts.size(), 2u);
}

TEST_F(CoordinatorKvTokenTest, StateThatDoesNotLoadIsAnErrorNotACrash) {
  {
    std::unique_ptr<Coordinator> coordinator = Open();
    ASSERT_NE(coordinator, nullptr);
    ASSERT_TRUE(coordinator->RegisterHost(test::GpuHost("gpu-01", 8)).ok());
  }
  // A damaged row: the host's GPUs are not JSON.
  ASSERT_EQ(test::ExecSql(path_, "UPDATE hosts SET gpus = 'not json'"), "");
  absl::StatusOr<std::unique_ptr<state::SqliteStore>> store =
      state::SqliteStore::Open(path_);
  ASSERT_TRUE(store.ok()) << store.status();
  // Failing to load ends the coordinator it was building (whose destructor
  // once flushed through a scheduler that was never made).
  absl::StatusOr<std::unique_ptr<Coordinator>> coordinator =
      Coordinator::Create(clock_, std::move(*store), SchedulerOptions{},
                          checker_);
  ASSERT_FALSE(coordinator.ok());
  EXPECT_THAT(std::string(coordinator.status().message()),
              ::testing::HasSubstr("gpu-01"));
}

}  // namespace
}  // namespace gdt::coordinator
