// Checkpoint manifest records over the wire: a real gdt-coord
// server (SQLite state in a temp dir) on 127.0.0.1:0, a gang admitted through
// JoinGang, retried into epoch 2, and the real CheckpointClient.
#include "coordinator/checkpoint_service.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/retry_after.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "rendezvous/checkpoint_client.h"
#include "rendezvous/coordinator_client.h"
#include "testing/coordinator_fixture.h"
#include "testing/wait.h"

namespace gdt::coordinator {
namespace {

using namespace std::chrono_literals;
using ::gdt::test::WaitFor;
using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::HasSubstr;

class CheckpointServiceTest : public test::InProcessCoordinatorTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(InProcessCoordinatorTest::SetUp());
    ASSERT_NO_FATAL_FAILURE(StartCoordinator());
    ASSERT_TRUE(client_->RegisterHost(LoopbackHost("cpu-01", 1), 5s).ok());
  }

  static v1::GangKey Key() {
    v1::GangKey key;
    key.set_instance("https://gitlab.example.com");
    key.set_project_id(5);
    key.set_pipeline_id(77);
    key.set_group_name("train");
    key.set_size(1);
    return key;
  }

  // Joins the one-member gang as job `job_id` and returns its assignment.
  v1::Assignment Join(int64_t job_id) {
    v1::JoinGangRequest request;
    *request.mutable_key() = Key();
    request.set_member_index(1);
    request.set_job_id(job_id);
    request.set_job_name("train");
    request.set_launcher(v1::LAUNCHER_NCCL);
    absl::StatusOr<v1::Assignment> assignment =
        client_->JoinGang(request, DeadlineIn(20s), nullptr, nullptr);
    EXPECT_TRUE(assignment.ok()) << assignment.status();
    return assignment.value_or(v1::Assignment());
  }

  // Fails the gang (exit 137) and leaves it, as a killed member's job does.
  void Fail(const v1::Assignment& assignment, int64_t job_id) {
    v1::ReportExitRequest exit;
    exit.set_gang_id(assignment.gang_id());
    exit.set_epoch(assignment.epoch());
    exit.set_member_index(1);
    exit.set_job_id(job_id);
    exit.set_exit_code(137);
    ASSERT_TRUE(client_->ReportExit(exit, 5s).ok());
    v1::LeaveGangRequest leave;
    *leave.mutable_key() = Key();
    leave.set_member_index(1);
    leave.set_job_id(job_id);
    ASSERT_TRUE(client_->LeaveGang(leave, 5s).ok());
  }

  rendezvous::CheckpointClient ClientFor(const v1::Assignment& assignment) {
    return rendezvous::CheckpointClient(
        rendezvous::KvTarget{server_->bound_address(),
                             assignment.gang_id(),
                             assignment.epoch(),
                             assignment.kv_token(),
                             {}});
  }
};

TEST_F(CheckpointServiceTest, RetriedEpochListsTheEarlierEpochsRecords) {
  const v1::Assignment first = Join(101);
  ASSERT_EQ(first.epoch(), 1u);
  rendezvous::CheckpointClient epoch1 = ClientFor(first);
  ASSERT_TRUE(epoch1.Record(4, 0, 101, R"({"step": 4})", DeadlineIn(5s)).ok());
  ASSERT_TRUE(epoch1.Record(8, 0, 101, R"({"step": 8})", DeadlineIn(5s)).ok());
  Fail(first, 101);

  // A restart in between: the records are in the coordinator's state.
  ASSERT_NO_FATAL_FAILURE(RestartCoordinator());

  const v1::Assignment retry = Join(201);
  ASSERT_EQ(retry.epoch(), 2u);
  EXPECT_EQ(retry.gang_id(), first.gang_id());
  absl::StatusOr<std::vector<rendezvous::CheckpointRecordInfo>> listed =
      ClientFor(retry).List(DeadlineIn(5s));
  ASSERT_TRUE(listed.ok()) << listed.status();
  using Info = rendezvous::CheckpointRecordInfo;
  EXPECT_THAT(*listed,
              ElementsAre(AllOf(Field(&Info::step, 8), Field(&Info::epoch, 1u),
                                Field(&Info::job_id, 101),
                                Field(&Info::manifest_json, R"({"step": 8})")),
                          Field(&Info::step, 4)));
  EXPECT_GT((*listed)[0].recorded_unix_ms, 0);

  // The old epoch's credential no longer works.
  absl::Status stale =
      ClientFor(first).Record(12, 0, 101, "{}", DeadlineIn(5s));
  EXPECT_EQ(stale.code(), absl::StatusCode::kFailedPrecondition);
}

// The newest 32 records of a gang may hold 1 MiB each; the list answers
// with the newest that fit in 3 MiB of manifests instead of an answer above
// the client's 4 MiB message limit, which failed every resume of the gang.
TEST_F(CheckpointServiceTest, ListOfLargeManifestsStaysWithinAMessage) {
  // 32 records of 1 MiB at once are far beyond a gang's pace.
  config_.checkpoint_record_rate_per_gang = 0;
  ASSERT_NO_FATAL_FAILURE(RestartCoordinator());
  const v1::Assignment first = Join(101);
  rendezvous::CheckpointClient client = ClientFor(first);
  for (int step = 0; step < 32; ++step) {
    ASSERT_TRUE(client
                    .Record(step, 0, 101,
                            std::string(Coordinator::kMaxManifestBytes,
                                        static_cast<char>('a' + step % 26)),
                            DeadlineIn(10s))
                    .ok());
  }
  absl::StatusOr<std::vector<rendezvous::CheckpointRecordInfo>> listed =
      client.List(DeadlineIn(10s));
  ASSERT_TRUE(listed.ok()) << listed.status();
  using Info = rendezvous::CheckpointRecordInfo;
  EXPECT_THAT(*listed,
              ElementsAre(Field(&Info::step, 31), Field(&Info::step, 30),
                          Field(&Info::step, 29)));
  // The bound counts bytes: a small newer record pushes out the oldest.
  ASSERT_TRUE(
      client.Record(40, 0, 101, R"({"step": 40})", DeadlineIn(5s)).ok());
  listed = client.List(DeadlineIn(10s));
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_THAT(*listed,
              ElementsAre(Field(&Info::step, 40), Field(&Info::step, 31),
                          Field(&Info::step, 30)));
}

// A caller without the gang's token hears one refusal whether the gang
// exists, never did, or has ended; a member of an earlier epoch, even
// across a coordinator restart, learns that its epoch is over.
TEST_F(CheckpointServiceTest, OnlyTheGangsTokensLearnWhetherTheGangExists) {
  const v1::Assignment first = Join(101);
  Fail(first, 101);
  const v1::Assignment retry = Join(201);
  ASSERT_EQ(retry.epoch(), 2u);
  ASSERT_NO_FATAL_FAILURE(RestartCoordinator());

  absl::Status stale = ClientFor(first).Record(3, 0, 101, "{}", DeadlineIn(5s));
  EXPECT_EQ(stale.code(), absl::StatusCode::kFailedPrecondition) << stale;
  EXPECT_THAT(stale.message(),
              HasSubstr("is at epoch 2; the store of epoch 1 is gone"));
  EXPECT_EQ(ClientFor(first).List(DeadlineIn(5s)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(ClientFor(retry).Record(4, 0, 201, "{}", DeadlineIn(5s)).ok());

  // Strangers: a guessed token for the real gang (current and old epoch), a
  // made-up gang.
  v1::Assignment guess = retry;
  guess.set_kv_token(std::string(64, '0'));
  const absl::Status real = ClientFor(guess).List(DeadlineIn(5s)).status();
  EXPECT_EQ(real.code(), absl::StatusCode::kPermissionDenied) << real;
  guess.set_epoch(1);
  const absl::Status old = ClientFor(guess).List(DeadlineIn(5s)).status();
  v1::Assignment made_up = guess;
  made_up.set_gang_id(retry.gang_id() + "x");
  const absl::Status none = ClientFor(made_up).List(DeadlineIn(5s)).status();
  made_up.set_epoch(2);
  const absl::Status none2 = ClientFor(made_up).List(DeadlineIn(5s)).status();
  auto as_other_gang = [&](const absl::Status& status) {
    std::string message(status.message());
    const std::string from = "gang " + retry.gang_id() + " ";
    const size_t at = message.find(from);
    if (at != std::string::npos) {
      message.replace(at, from.size(), "gang " + retry.gang_id() + "x ");
    }
    return absl::Status(status.code(), message);
  };
  EXPECT_EQ(none, as_other_gang(old));
  EXPECT_EQ(none2, as_other_gang(real));

  // Once the gang has ended its own members are strangers as well.
  v1::ReportExitRequest exit;
  exit.set_gang_id(retry.gang_id());
  exit.set_epoch(retry.epoch());
  exit.set_member_index(1);
  exit.set_job_id(201);
  ASSERT_TRUE(client_->ReportExit(exit, 5s).ok());
  v1::LeaveGangRequest leave;
  *leave.mutable_key() = Key();
  leave.set_member_index(1);
  leave.set_job_id(201);
  ASSERT_TRUE(client_->LeaveGang(leave, 5s).ok());
  EXPECT_EQ(ClientFor(retry).List(DeadlineIn(5s)).status(), real);
  EXPECT_EQ(ClientFor(first).List(DeadlineIn(5s)).status(), old);
}

TEST_F(CheckpointServiceTest, StrangersAndBadRecordsAreRefused) {
  const v1::Assignment member = Join(101);
  v1::Assignment forged = member;
  forged.set_kv_token(std::string(64, '0'));
  absl::Status denied =
      ClientFor(forged).Record(1, 0, 101, "{}", DeadlineIn(5s));
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(denied.message(), HasSubstr("wrong gang token"));
  forged.set_kv_token("");
  EXPECT_EQ(ClientFor(forged).List(DeadlineIn(5s)).status().code(),
            absl::StatusCode::kUnauthenticated);

  rendezvous::CheckpointClient client = ClientFor(member);
  absl::Status negative = client.Record(-1, 0, 101, "{}", DeadlineIn(5s));
  EXPECT_EQ(negative.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(negative.message(), HasSubstr("negative"));
  EXPECT_EQ(client.Record(1, 0, 101, "", DeadlineIn(5s)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      client.Record(1, 0, 101, std::string((1 << 20) + 1, 'x'), DeadlineIn(5s))
          .code(),
      absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::vector<rendezvous::CheckpointRecordInfo>> none =
      client.List(DeadlineIn(5s));
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
}

// Eight clients holding one member's token send 1 MiB manifests as fast as
// they can (each is a write to the state under the coordinator's lock):
// a few get in, the rest are refused with the bound and a retry hint, and
// status calls meanwhile answer as fast as without the flood. Small
// records at a member's pace go in.
TEST_F(CheckpointServiceTest, AFloodOfRecordsIsRefusedAtTheGangsPace) {
  const v1::Assignment member = Join(101);
  std::atomic<bool> stop{false};
  std::atomic<int> accepted{0};
  std::atomic<int> refused{0};
  std::atomic<int> other{0};
  std::atomic<int> hinted{0};
  std::string refusal;
  Mutex refusal_mu;
  std::vector<std::thread> flood;
  for (int i = 0; i < 8; ++i) {
    flood.emplace_back([&, i] {
      rendezvous::CheckpointClient client = ClientFor(member);
      const std::string manifest(Coordinator::kMaxManifestBytes,
                                 static_cast<char>('a' + i));
      for (int step = 0; !stop; ++step) {
        const absl::Status status =
            client.Record(step, 0, 101, manifest, DeadlineIn(10s));
        if (status.ok()) {
          ++accepted;
        } else if (absl::IsResourceExhausted(status)) {
          ++refused;
          // The hint reaches the client, which gdt-ckpt save waits out.
          if (RetryAfter(status).has_value()) ++hinted;
          MutexLock lock(refusal_mu);
          refusal = std::string(status.message());
        } else {
          ++other;
        }
      }
    });
  }
  std::vector<double> status_ms;
  const auto end = std::chrono::steady_clock::now() + 4s;
  while (std::chrono::steady_clock::now() < end) {
    const auto start = std::chrono::steady_clock::now();
    EXPECT_TRUE(client_->GetStatus(v1::GetStatusRequest(), 10s).ok());
    status_ms.push_back(std::chrono::duration<double, std::milli>(
                            std::chrono::steady_clock::now() - start)
                            .count());
    std::this_thread::sleep_for(50ms);  // A pace, not a wait for a state.
  }
  stop = true;
  for (std::thread& thread : flood) thread.join();
  std::sort(status_ms.begin(), status_ms.end());
  std::cout << "records accepted " << accepted << " (" << accepted
            << " MiB), refused " << refused << "; status calls "
            << status_ms.size() << ", median "
            << status_ms[status_ms.size() / 2] << " ms, max "
            << status_ms.back() << " ms\n";

  // 64 units at once and 2 a second; a 1 MiB manifest costs 17.
  EXPECT_LE(accepted, 5);
  EXPECT_GT(refused, 0);
  EXPECT_EQ(hinted, refused.load());
  EXPECT_EQ(other, 0);
  {
    MutexLock lock(refusal_mu);
    EXPECT_THAT(refusal, HasSubstr("records checkpoints faster than 2 small "
                                   "manifests a second per member"));
    EXPECT_THAT(refusal, HasSubstr("retry in"));
  }
  // A member's own pace: a small manifest every half second goes in.
  ASSERT_TRUE(WaitFor(
      [&] {
        return ClientFor(member)
            .Record(1000, 0, 101, R"({"step": 1000})", DeadlineIn(5s))
            .ok();
      },
      20s));
  for (int step = 1001; step < 1004; ++step) {
    std::this_thread::sleep_for(500ms);  // The member's pace.
    EXPECT_TRUE(ClientFor(member)
                    .Record(step, 0, 101, R"({"step": 1})", DeadlineIn(5s))
                    .ok())
        << step;
  }
}

}  // namespace
}  // namespace gdt::coordinator
