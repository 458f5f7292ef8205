// The cluster harness (testing/cluster.h) on its own: what keeps test
// clusters that run side by side out of each other's way.
#include "testing/cluster.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace gdt::test {
namespace {

// Whether this process can bind the abstract socket that claims `slot`.
bool CanClaimSlot(int slot) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const std::string name = absl::StrCat("gdt-test-master-ports-", slot);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  name.copy(address.sun_path + 1, name.size());
  const bool bound =
      bind(fd, reinterpret_cast<const sockaddr*>(&address),
           static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 +
                                  name.size())) == 0;
  close(fd);
  return bound;
}

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
  EXPECT_FALSE(CanClaimSlot(slot));
}

}  // namespace
}  // namespace gdt::test
