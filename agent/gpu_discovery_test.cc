#include "agent/gpu_discovery.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gdt::agent {
namespace {

using ::testing::HasSubstr;

TEST(GpuDiscoveryTest, MissingLibraryIsNotFound) {
  absl::StatusOr<std::vector<GpuConfig>> gpus =
      DiscoverNvmlGpus("libgdt-no-such-nvml.so.1");
  EXPECT_EQ(gpus.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(gpus.status().message(),
              HasSubstr("cannot load libgdt-no-such-nvml.so.1"));
}

TEST(GpuDiscoveryTest, LibraryWithoutNvmlIsNotFound) {
  // libc loads but has none of NVML's functions.
  absl::StatusOr<std::vector<GpuConfig>> gpus = DiscoverNvmlGpus("libc.so.6");
  EXPECT_EQ(gpus.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(gpus.status().message(), HasSubstr("lacks an NVML function"));
}

TEST(GpuDiscoveryTest, DeclaredGpusWinAndNoNvmlMeansNone) {
  const std::vector<GpuConfig> declared = {{0, "", "H100", 0, ""},
                                           {1, "", "H100", 0, ""}};
  GpuInventory inventory = ResolveGpus(declared, "libgdt-no-such-nvml.so.1");
  EXPECT_EQ(inventory.source, "config");
  ASSERT_EQ(inventory.gpus.size(), 2u);
  EXPECT_EQ(inventory.gpus[1].model, "H100");

  inventory = ResolveGpus({}, "libgdt-no-such-nvml.so.1");
  EXPECT_EQ(inventory.source, "config");
  EXPECT_TRUE(inventory.gpus.empty());
  EXPECT_THAT(inventory.note, HasSubstr("cannot load"));
}

}  // namespace
}  // namespace gdt::agent
