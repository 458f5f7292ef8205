// The gang key-value store over the wire: a real gdt-coord server (both
// services, SQLite state in a temp dir) on 127.0.0.1:0, members admitted
// through JoinGang, and the real KvClient.
#include "kv/kv_service.h"

#include <sys/stat.h>

#include <chrono>
#include <future>
#include <set>
#include <thread>

#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "rendezvous/coordinator_client.h"
#include "rendezvous/kv_client.h"
#include "testing/coordinator_fixture.h"

namespace gdt::kv {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

rendezvous::KvClient::Deadline In(std::chrono::milliseconds timeout) {
  return std::chrono::system_clock::now() + timeout;
}

class KvServiceTest : public test::InProcessCoordinatorTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(InProcessCoordinatorTest::SetUp());
    config_.kv_max_keys_per_gang = 3;
    ASSERT_NO_FATAL_FAILURE(StartCoordinator());
  }

  static v1::GangKey Key(uint32_t size) {
    v1::GangKey key;
    key.set_instance("https://gitlab.example.com");
    key.set_project_id(5);
    key.set_pipeline_id(77);
    key.set_group_name("allreduce");
    key.set_size(size);
    return key;
  }

  // Registers a CPU host and admits a gang of `size` members; returns their
  // assignments in member order.
  std::vector<v1::Assignment> AdmitGang(uint32_t size) {
    EXPECT_TRUE(client_->RegisterHost(LoopbackHost("cpu-01", size), 5s).ok());
    std::vector<std::future<absl::StatusOr<v1::Assignment>>> joins;
    for (uint32_t index = 1; index <= size; ++index) {
      joins.push_back(std::async(std::launch::async, [this, index, size] {
        v1::JoinGangRequest request;
        *request.mutable_key() = Key(size);
        request.set_member_index(index);
        request.set_job_id(100 + index);
        request.set_job_name("allreduce");
        request.set_launcher(v1::LAUNCHER_NCCL);
        return client_->JoinGang(request, In(20s), nullptr, nullptr);
      }));
    }
    std::vector<v1::Assignment> assignments;
    for (auto& join : joins) {
      absl::StatusOr<v1::Assignment> assignment = join.get();
      EXPECT_TRUE(assignment.ok()) << assignment.status();
      if (assignment.ok()) assignments.push_back(*assignment);
    }
    return assignments;
  }

  rendezvous::KvClient ClientFor(const v1::Assignment& assignment) {
    return rendezvous::KvClient(rendezvous::KvTarget{server_->bound_address(),
                                                     assignment.gang_id(),
                                                     assignment.epoch(),
                                                     assignment.kv_token(),
                                                     {}});
  }

  void EndGang(const std::vector<v1::Assignment>& assignments) {
    for (size_t i = 0; i < assignments.size(); ++i) {
      const uint32_t index = static_cast<uint32_t>(i + 1);
      v1::ReportExitRequest exit;
      exit.set_gang_id(assignments[i].gang_id());
      exit.set_epoch(assignments[i].epoch());
      exit.set_member_index(index);
      exit.set_job_id(100 + index);
      ASSERT_TRUE(client_->ReportExit(exit, 5s).ok());
      v1::LeaveGangRequest leave;
      *leave.mutable_key() = Key(static_cast<uint32_t>(assignments.size()));
      leave.set_member_index(index);
      leave.set_job_id(100 + index);
      ASSERT_TRUE(client_->LeaveGang(leave, 5s).ok());
    }
  }
};

TEST_F(KvServiceTest, MembersShareOneStoreThroughTheGangToken) {
  std::vector<v1::Assignment> gang = AdmitGang(2);
  ASSERT_EQ(gang.size(), 2u);
  EXPECT_EQ(gang[0].kv_token().size(), 64u);
  struct stat state;
  ASSERT_EQ(stat(config_.state_path.c_str(), &state), 0);
  EXPECT_EQ(state.st_mode & 0777, 0600u);  // It holds the token.
  EXPECT_EQ(gang[0].kv_token(), gang[1].kv_token());
  rendezvous::KvClient rank0 = ClientFor(gang[0]);
  rendezvous::KvClient rank1 = ClientFor(gang[1]);

  std::future<absl::StatusOr<std::string>> waited = std::async(
      std::launch::async, [&rank1] { return rank1.Wait("id", In(10s)); });
  ASSERT_TRUE(rank0.Set("id", std::string("\0\1binary", 8), In(5s)).ok());
  absl::StatusOr<std::string> value = waited.get();
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, std::string("\0\1binary", 8));

  EXPECT_EQ(*rank1.Add("ready", 1, In(5s)), 1);
  EXPECT_EQ(*rank0.Add("ready", 1, In(5s)), 2);
  absl::StatusOr<rendezvous::KvCasOutcome> lost =
      rank1.CompareAndSet("ready", "1", "x", In(5s));
  ASSERT_TRUE(lost.ok()) << lost.status();
  EXPECT_FALSE(lost->swapped);
  EXPECT_EQ(lost->current, "2");
  absl::StatusOr<rendezvous::KvCasOutcome> won =
      rank1.CompareAndSet("leader", std::nullopt, "rank1", In(5s));
  ASSERT_TRUE(won.ok()) << won.status();
  EXPECT_TRUE(won->swapped);
  EXPECT_EQ(*rank0.Get("leader", In(5s)), "rank1");
  EXPECT_EQ(rank0.Get("missing", In(5s)).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(KvServiceTest, StrangersAndLimitsGetClearErrors) {
  std::vector<v1::Assignment> gang = AdmitGang(1);
  ASSERT_EQ(gang.size(), 1u);
  v1::Assignment forged = gang[0];
  forged.set_kv_token(std::string(64, '0'));
  absl::Status denied = ClientFor(forged).Set("k", "v", In(5s));
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(denied.message(), HasSubstr("wrong gang token"));
  // A gang that does not exist is refused alike, so a guess tells nothing.
  v1::Assignment unknown = forged;
  unknown.set_gang_id("no-such-gang");
  absl::Status nobody = ClientFor(unknown).Set("k", "v", In(5s));
  EXPECT_EQ(nobody.code(), denied.code());
  EXPECT_EQ(std::string(nobody.message()),
            absl::StrReplaceAll(denied.message(),
                                {{gang[0].gang_id(), "no-such-gang"}}));
  forged.set_kv_token("");
  EXPECT_EQ(ClientFor(forged).Get("k", In(5s)).status().code(),
            absl::StatusCode::kUnauthenticated);
  forged = gang[0];
  forged.set_epoch(7);
  EXPECT_EQ(ClientFor(forged).Get("k", In(5s)).status().code(),
            absl::StatusCode::kFailedPrecondition);

  rendezvous::KvClient member = ClientFor(gang[0]);
  absl::Status big = member.Set("big", std::string(64 * 1024 + 1, 'x'), In(5s));
  EXPECT_EQ(big.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(big.message(), HasSubstr("above the limit of 65536 bytes"));
  EXPECT_TRUE(member.Set("big", std::string(64 * 1024, 'x'), In(5s)).ok());
  EXPECT_TRUE(member.Set("b", "", In(5s)).ok());
  EXPECT_TRUE(member.Set("c", "", In(5s)).ok());
  absl::Status full = member.Set("d", "", In(5s));
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(full.message(), HasSubstr("already has 3 keys, the limit"));
}

TEST_F(KvServiceTest, WaitEndsAtItsDeadlineAndIsForgotten) {
  std::vector<v1::Assignment> gang = AdmitGang(1);
  ASSERT_EQ(gang.size(), 1u);
  const auto started = std::chrono::steady_clock::now();
  absl::StatusOr<std::string> value =
      ClientFor(gang[0]).Wait("never", In(300ms));
  EXPECT_EQ(value.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(value.status().message(), HasSubstr("kv wait 'never'"));
  EXPECT_GE(std::chrono::steady_clock::now() - started, 250ms);
  // The server forgets the waiter once gRPC reports the cancellation.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (server_->coordinator().kv().waiter_count() != 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  EXPECT_EQ(server_->coordinator().kv().waiter_count(), 0u);
}

TEST_F(KvServiceTest, StoreIsClearedWhenTheGangEnds) {
  std::vector<v1::Assignment> gang = AdmitGang(2);
  ASSERT_EQ(gang.size(), 2u);
  rendezvous::KvClient member = ClientFor(gang[0]);
  ASSERT_TRUE(member.Set("k", "v", In(5s)).ok());
  std::future<absl::StatusOr<std::string>> pending = std::async(
      std::launch::async, [&member] { return member.Wait("never", In(20s)); });
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (server_->coordinator().kv().waiter_count() != 1 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  ASSERT_EQ(server_->coordinator().kv().waiter_count(), 1u);

  EndGang(gang);

  absl::StatusOr<std::string> ended = pending.get();
  EXPECT_EQ(ended.status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(ended.status().message(), HasSubstr("ended"));
  absl::StatusOr<std::string> gone = member.Get("k", In(5s));
  // An ended gang's members hear what any stranger hears.
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(gone.status().message(), HasSubstr("has no key-value store"));
  EXPECT_EQ(server_->coordinator().kv().gang_count(), 0u);
}

TEST_F(KvServiceTest, TokenSurvivesACoordinatorRestartButTheDataDoesNot) {
  std::vector<v1::Assignment> gang = AdmitGang(1);
  ASSERT_EQ(gang.size(), 1u);
  ASSERT_TRUE(ClientFor(gang[0]).Set("k", "v", In(5s)).ok());

  ASSERT_NO_FATAL_FAILURE(RestartCoordinator());

  rendezvous::KvClient member = ClientFor(gang[0]);
  EXPECT_EQ(member.Get("k", In(5s)).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(member.Set("k", "again", In(5s)).ok());
  v1::Assignment forged = gang[0];
  forged.set_kv_token(std::string(64, 'f'));
  EXPECT_EQ(ClientFor(forged).Get("k", In(5s)).status().code(),
            absl::StatusCode::kPermissionDenied);
}

TEST_F(KvServiceTest, WaitsRacingTheirDeadlinesEndCleanly) {
  std::vector<v1::Assignment> gang = AdmitGang(1);
  ASSERT_EQ(gang.size(), 1u);
  rendezvous::KvClient member = ClientFor(gang[0]);
  // Connected first: a wait whose deadline passes before the channel ever
  // reaches the coordinator is UNAVAILABLE (a loaded machine takes longer
  // than the shortest deadline here to connect), and this test is about
  // deadlines at the server.
  ASSERT_EQ(member.Get("k0", In(5s)).status().code(),
            absl::StatusCode::kNotFound);
  // Waiters whose deadlines fall around the moment their key is set: each
  // ends exactly once, with the value or DEADLINE_EXCEEDED, and the server
  // keeps no waiter.
  std::vector<std::future<absl::StatusOr<std::string>>> waits;
  for (int i = 0; i < 40; ++i) {
    waits.push_back(std::async(std::launch::async, [&member, i] {
      return member.Wait("k" + std::to_string(i % 3),
                         In(std::chrono::milliseconds(20 + 5 * i)));
    }));
  }
  for (int k = 0; k < 3; ++k) {  // The fixture allows 3 keys.
    ASSERT_TRUE(member.Set("k" + std::to_string(k), "v", In(5s)).ok());
  }
  for (auto& wait : waits) {
    absl::StatusOr<std::string> value = wait.get();
    if (value.ok()) {
      EXPECT_EQ(*value, "v");
    } else {
      EXPECT_EQ(value.status().code(), absl::StatusCode::kDeadlineExceeded);
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (server_->coordinator().kv().waiter_count() != 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  EXPECT_EQ(server_->coordinator().kv().waiter_count(), 0u);
}

}  // namespace
}  // namespace gdt::kv
