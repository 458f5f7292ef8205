#include "nccl_bootstrap/id_exchange.h"

#include <map>
#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gdt::nccl {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<RankInfo> RankFrom(std::map<std::string, std::string> env) {
  return RankFromEnvironment([&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(RankFromEnvironmentTest, OneProcessPerMember) {
  absl::StatusOr<RankInfo> rank =
      RankFrom({{"GDT_NODE_RANK", "2"}, {"GDT_WORLD_SIZE", "4"}});
  ASSERT_TRUE(rank.ok()) << rank.status();
  EXPECT_EQ(rank->rank, 2);
  EXPECT_EQ(rank->nranks, 4);
  EXPECT_EQ(rank->local_rank, 0);
}

TEST(RankFromEnvironmentTest, SeveralProcessesPerMemberUseTheLocalRank) {
  absl::StatusOr<RankInfo> rank = RankFrom({{"GDT_NODE_RANK", "1"},
                                            {"GDT_NPROC_PER_NODE", "4"},
                                            {"GDT_LOCAL_RANK", "3"},
                                            {"GDT_WORLD_SIZE", "8"}});
  ASSERT_TRUE(rank.ok()) << rank.status();
  EXPECT_EQ(rank->rank, 7);
  EXPECT_EQ(rank->local_rank, 3);
  // LOCAL_RANK (torchrun's name) also works.
  rank = RankFrom({{"GDT_NODE_RANK", "0"},
                   {"GDT_NPROC_PER_NODE", "2"},
                   {"LOCAL_RANK", "1"},
                   {"GDT_WORLD_SIZE", "2"}});
  ASSERT_TRUE(rank.ok()) << rank.status();
  EXPECT_EQ(rank->rank, 1);
}

TEST(RankFromEnvironmentTest, BadEnvironmentNamesTheVariable) {
  EXPECT_THAT(RankFrom({{"GDT_WORLD_SIZE", "2"}}).status().message(),
              HasSubstr("GDT_NODE_RANK is not set"));
  EXPECT_THAT(RankFrom({{"GDT_NODE_RANK", "0"}}).status().message(),
              HasSubstr("GDT_WORLD_SIZE is not set"));
  EXPECT_THAT(
      RankFrom({{"GDT_NODE_RANK", "x"}, {"GDT_WORLD_SIZE", "2"}})
          .status()
          .message(),
      HasSubstr("GDT_NODE_RANK must be a non-negative integer, got 'x'"));
  EXPECT_THAT(RankFrom({{"GDT_NODE_RANK", "0"},
                        {"GDT_NPROC_PER_NODE", "2"},
                        {"GDT_WORLD_SIZE", "2"}})
                  .status()
                  .message(),
              HasSubstr("set GDT_LOCAL_RANK (0..1)"));
  EXPECT_THAT(RankFrom({{"GDT_NODE_RANK", "2"}, {"GDT_WORLD_SIZE", "2"}})
                  .status()
                  .message(),
              HasSubstr("is not below GDT_WORLD_SIZE 2"));
  EXPECT_EQ(RankFrom({{"GDT_NODE_RANK", "0"},
                      {"GDT_NPROC_PER_NODE", "2"},
                      {"GDT_LOCAL_RANK", "2"},
                      {"GDT_WORLD_SIZE", "4"}})
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(RootsTest, OneRootUpTo256RanksThenMore) {
  EXPECT_EQ(RootCount(1), 1);
  EXPECT_EQ(RootCount(256), 1);
  EXPECT_EQ(RootCount(257), 2);
  EXPECT_EQ(RootCount(1024), 4);
  EXPECT_EQ(RootCount(6, 2), 3);
}

TEST(RootsTest, RootRanksAreDistinctAndSpreadEvenly) {
  EXPECT_EQ(RootRank(0, 1024, 4), 0);
  EXPECT_EQ(RootRank(1, 1024, 4), 256);
  EXPECT_EQ(RootRank(3, 1024, 4), 768);
  for (int nranks : {257, 300, 1000, 4097}) {
    const int nroots = RootCount(nranks);
    std::set<int> creators;
    for (int root = 0; root < nroots; ++root) {
      const int creator = RootRank(root, nranks, nroots);
      EXPECT_LT(creator, nranks);
      creators.insert(creator);
    }
    EXPECT_EQ(creators.size(), static_cast<size_t>(nroots)) << nranks;
  }
}

TEST(UniqueIdKeyTest, NamesCommunicatorAndRoot) {
  EXPECT_EQ(UniqueIdKey("world", 2), "gdt/nccl/world/unique_id/2");
}

}  // namespace
}  // namespace gdt::nccl
