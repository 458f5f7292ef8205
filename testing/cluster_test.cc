// The cluster harness (testing/cluster.h) on its own: what keeps test
// clusters that run side by side out of each other's way.
#include "testing/cluster.h"

#include <unistd.h>

#include "gtest/gtest.h"

namespace gdt::test {
namespace {

// Another test process starting now cannot take this process's master
// port range (it would skip the claimed slot), and the range lies below
// the kernel's ephemeral ports.
TEST(TestMasterPortBaseTest, TheRangeIsClaimedForTheLifeOfTheProcess) {
  const int base = TestMasterPortBase();
  EXPECT_EQ(TestMasterPortBase(), base);
  EXPECT_GE(base, 20000);
  EXPECT_LE(base + 39, 32767);
  ASSERT_EQ((base - 20000) % 40, 0);
  const int slot = (base - 20000) / 40;
  EXPECT_LT(slot, kMasterPortSlots);
  const int again = ClaimMasterPortSlot(slot);
  EXPECT_LT(again, 0) << "slot " << slot << " was not held";
  if (again >= 0) close(again);
}

}  // namespace
}  // namespace gdt::test
