#include "policy/topology.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gdt::policy {
namespace {

using ::testing::ElementsAre;

RankInput On(uint32_t index, const std::string& host, const std::string& rack,
             const std::string& nvlink = "") {
  RankInput input;
  input.member_index = index;
  input.host = host;
  input.labels["rack"] = rack;
  if (!nvlink.empty()) input.labels["nvlink_domain"] = nvlink;
  return input;
}

TEST(OrderRanksTest, MembersSharingARackGetAdjacentRanks) {
  // Index order alternates racks; rank order must not.
  const std::vector<uint32_t> order =
      OrderRanks({On(1, "a1", "ra"), On(2, "b1", "rb"), On(3, "a2", "ra"),
                  On(4, "b2", "rb")});
  EXPECT_THAT(order, ElementsAre(1u, 3u, 2u, 4u));
}

TEST(OrderRanksTest, RankZeroIsWhereMostPeersShareItsDomain) {
  // Rack rb holds three members, ra one: rank 0 goes to rb.
  const std::vector<uint32_t> order =
      OrderRanks({On(1, "a1", "ra"), On(2, "b1", "rb"), On(3, "b2", "rb"),
                  On(4, "b3", "rb")});
  EXPECT_THAT(order, ElementsAre(2u, 3u, 4u, 1u));
}

TEST(OrderRanksTest, NarrowerDomainsStayTogetherInsideARack) {
  const std::vector<uint32_t> order =
      OrderRanks({On(1, "h1", "r", "nv1"), On(2, "h2", "r", "nv2"),
                  On(3, "h3", "r", "nv1"), On(4, "h4", "r", "nv2"),
                  On(5, "h5", "r", "nv2")});
  // nv2 has three members, so rank 0 is there; nv1's pair follows together.
  EXPECT_THAT(order, ElementsAre(2u, 4u, 5u, 1u, 3u));
}

TEST(OrderRanksTest, MembersOnOneHostAreAdjacent) {
  const std::vector<uint32_t> order = OrderRanks(
      {On(1, "h1", "r"), On(2, "h2", "r"), On(3, "h1", "r"), On(4, "h2", "r")});
  EXPECT_THAT(order, ElementsAre(1u, 3u, 2u, 4u));
}

TEST(OrderRanksTest, WithoutLabelsKeepsIndexOrderPerHost) {
  std::vector<RankInput> members;
  for (uint32_t i = 1; i <= 3; ++i) {
    members.push_back(RankInput{i, "h" + std::to_string(i), {}});
  }
  EXPECT_THAT(OrderRanks(members), ElementsAre(1u, 2u, 3u));
  EXPECT_TRUE(OrderRanks({}).empty());
}

}  // namespace
}  // namespace gdt::policy
