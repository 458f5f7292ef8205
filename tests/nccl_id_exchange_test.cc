// The NCCL unique-id exchange through a real gdt-coord server on
// 127.0.0.1:0: ranks as threads with stand-in ids (always built), and -- when
// NCCL was found -- as separate processes exchanging real ncclGetUniqueId
// ids, which needs no GPU.
#include <chrono>
#include <future>
#include <map>
#include <string>
#include <vector>

#include "common/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nccl_bootstrap/id_exchange.h"
#include "testing/coordinator_fixture.h"

namespace gdt {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

class IdExchangeTest : public test::InProcessCoordinatorTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(InProcessCoordinatorTest::SetUp());
    ASSERT_NO_FATAL_FAILURE(StartCoordinator());
    OpenJobGang();
  }

  rendezvous::KvTarget Target() const {
    return {server_->bound_address(), "g-1", 1, "secret", {}};
  }

  // Runs `nranks` ranks as threads; each root's id is 128 copies of a byte
  // that names its creator.
  std::vector<absl::StatusOr<std::vector<nccl::UniqueId>>> RunRanks(
      int nranks, int nroots, const std::vector<int>& skip = {},
      std::chrono::milliseconds timeout = 20s) {
    std::vector<std::future<absl::StatusOr<std::vector<nccl::UniqueId>>>>
        futures;
    for (int r = 0; r < nranks; ++r) {
      if (std::find(skip.begin(), skip.end(), r) != skip.end()) continue;
      futures.push_back(std::async(std::launch::async, [=, this] {
        rendezvous::KvClient kv(Target());
        nccl::RankInfo rank{r, nranks, 0};
        return nccl::ExchangeUniqueIds(
            kv, rank, nroots, "world",
            [r]() -> absl::StatusOr<nccl::UniqueId> {
              nccl::UniqueId id;
              id.fill(static_cast<char>('A' + r % 26));
              return id;
            },
            std::chrono::system_clock::now() + timeout);
      }));
    }
    std::vector<absl::StatusOr<std::vector<nccl::UniqueId>>> results;
    for (auto& future : futures) results.push_back(future.get());
    return results;
  }
};

TEST_F(IdExchangeTest, EveryRankGetsRankZerosId) {
  auto results = RunRanks(8, 1);
  ASSERT_EQ(results.size(), 8u);
  for (const auto& ids : results) {
    ASSERT_TRUE(ids.ok()) << ids.status();
    ASSERT_EQ(ids->size(), 1u);
    EXPECT_EQ(std::string((*ids)[0].data(), 128), std::string(128, 'A'));
  }
}

TEST_F(IdExchangeTest, SeveralRootsComeFromSpreadRanksInRootOrder) {
  auto results = RunRanks(6, 3);  // Roots created by ranks 0, 2, 4.
  for (const auto& ids : results) {
    ASSERT_TRUE(ids.ok()) << ids.status();
    ASSERT_EQ(ids->size(), 3u);
    EXPECT_EQ((*ids)[0][0], 'A');
    EXPECT_EQ((*ids)[1][0], 'C');
    EXPECT_EQ((*ids)[2][0], 'E');
  }
}

TEST_F(IdExchangeTest, AMissingRootRankIsNamedAtTheDeadline) {
  auto results = RunRanks(3, 1, /*skip=*/{0}, 500ms);
  ASSERT_EQ(results.size(), 2u);
  for (const auto& ids : results) {
    EXPECT_EQ(ids.status().code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_THAT(ids.status().message(),
                HasSubstr("the NCCL unique id of root 0 (created by rank 0) "
                          "did not arrive in time"));
  }
}

// A rank 0 that runs the exchange again in the same epoch must not replace
// the id the other ranks may already hold: it fails with one line.
TEST_F(IdExchangeTest, ASecondPublicationInTheEpochIsRefusedNotReplaced) {
  auto first = RunRanks(2, 1);
  ASSERT_TRUE(first[0].ok()) << first[0].status();
  auto again = RunRanks(1, 1);  // "Rank 0 of 1" publishes the same key.
  ASSERT_FALSE(again[0].ok());
  EXPECT_EQ(again[0].status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(again[0].status().message(),
            "rank 0: the NCCL unique id of communicator \"world\" root 0 was "
            "already published in this epoch (by an earlier run of this "
            "rank); other ranks may hold it, so it is not replaced: give the "
            "new communicator another name, or retry the gang");
  // A late rank still gets the first id.
  auto late = RunRanks(2, 1, {0});
  ASSERT_TRUE(late[0].ok()) << late[0].status();
  EXPECT_EQ((*late[0])[0], (*first[0])[0]);
}

TEST_F(IdExchangeTest, WrongTokenIsRefusedNotWaitedOn) {
  rendezvous::KvTarget target = Target();
  target.token = "wrong";
  rendezvous::KvClient kv(target);
  absl::StatusOr<std::vector<nccl::UniqueId>> ids = nccl::ExchangeUniqueIds(
      kv, nccl::RankInfo{1, 2, 0}, 1, "world",
      []() -> absl::StatusOr<nccl::UniqueId> { return nccl::UniqueId{}; },
      std::chrono::system_clock::now() + 20s);
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kPermissionDenied);
}

#ifdef GDT_NCCL_ID_TOOL
// Runs `nranks` member processes of nccl_id_tool and returns their stdout.
std::vector<std::string> RunToolProcesses(const std::string& endpoint,
                                          int nranks,
                                          const std::string& per_root) {
  std::vector<std::unique_ptr<Subprocess>> children;
  for (int r = 0; r < nranks; ++r) {
    SpawnOptions options;
    options.argv = {GDT_NCCL_ID_TOOL};
    options.env = CurrentEnvironment();
    options.env["GDT_COORDINATOR"] = endpoint;
    options.env["GDT_GANG_ID"] = "g-1";
    options.env["GDT_EPOCH"] = "1";
    options.env["GDT_KV_TOKEN"] = "secret";
    options.env["GDT_NODE_RANK"] = std::to_string(r);
    options.env["GDT_WORLD_SIZE"] = std::to_string(nranks);
    options.env["GDT_NCCL_RANKS_PER_ROOT"] = per_root;
    options.env["NCCL_SOCKET_IFNAME"] = "lo";
    options.die_with_parent = true;
    absl::StatusOr<std::unique_ptr<Subprocess>> child =
        Subprocess::Spawn(options);
    EXPECT_TRUE(child.ok()) << child.status();
    if (child.ok()) children.push_back(std::move(*child));
  }
  std::vector<std::string> outputs;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  for (auto& child : children) {
    std::string out;
    std::string err;
    std::optional<ExitStatus> status = child->WaitUntil(
        deadline, [&](OutputSource source, std::string_view text) {
          (source == OutputSource::kStdout ? out : err).append(text);
        });
    EXPECT_TRUE(status.has_value() && status->success()) << err;
    outputs.push_back(out);
  }
  return outputs;
}

TEST_F(IdExchangeTest, ProcessesShareARealNcclUniqueId) {
  std::vector<std::string> outputs =
      RunToolProcesses(server_->bound_address(), 4, "256");
  ASSERT_EQ(outputs.size(), 4u);
  EXPECT_EQ(outputs[0].size(), 2 * 128 + 1);  // One 128-byte id in hex.
  EXPECT_NE(outputs[0], std::string(256, '0') + "\n");
  for (const std::string& output : outputs) EXPECT_EQ(output, outputs[0]);
}

TEST_F(IdExchangeTest, ProcessesShareSeveralRealRootIds) {
  std::vector<std::string> outputs =
      RunToolProcesses(server_->bound_address(), 6, "2");
  ASSERT_EQ(outputs.size(), 6u);
  EXPECT_EQ(outputs[0].size(), 3 * (2 * 128) + 2 + 1);  // Three ids.
  for (const std::string& output : outputs) EXPECT_EQ(output, outputs[0]);
}
#endif

}  // namespace
}  // namespace gdt
