// The C API's errors without a communicator: bad environment, no GPU (or,
// on a GPU host, an unreachable store) -- one line in the caller's buffer
// and the documented ncclResult_t.
#include <cuda_runtime_api.h>
#include <stdlib.h>

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nccl_bootstrap/gdt_nccl_bootstrap.h"

namespace {

using ::testing::HasSubstr;

class CApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name :
         {"GDT_COORDINATOR", "GDT_GANG_ID", "GDT_EPOCH", "GDT_KV_TOKEN",
          "GDT_NODE_RANK", "GDT_WORLD_SIZE", "GDT_NPROC_PER_NODE",
          "GDT_LOCAL_RANK", "LOCAL_RANK", "GDT_NCCL_RANKS_PER_ROOT"}) {
      unsetenv(name);
    }
  }
};

TEST_F(CApiTest, NullCommIsAnInvalidArgument) {
  char error[128];
  EXPECT_EQ(gdtNcclCommInitFromEnv(nullptr, nullptr, 0, nullptr, nullptr, error,
                                   sizeof error),
            ncclInvalidArgument);
  EXPECT_STREQ(error, "gdtNcclCommInitFromEnv: comm is NULL");
}

TEST_F(CApiTest, MissingEnvironmentIsInvalidUsageNamingTheVariable) {
  ncclComm_t comm = nullptr;
  char error[256];
  EXPECT_EQ(gdtNcclCommInitFromEnv(&comm, "world", 1000, nullptr, nullptr,
                                   error, sizeof error),
            ncclInvalidUsage);
  EXPECT_THAT(error, HasSubstr("GDT_COORDINATOR is not set"));
  char tiny[8];
  gdtNcclCommInitFromEnv(&comm, "world", 1000, nullptr, nullptr, tiny,
                         sizeof tiny);
  EXPECT_STREQ(tiny, "GDT_COO");  // Truncated, still terminated.
}

TEST_F(CApiTest, NoGpuOrNoStoreIsOneClearLine) {
  setenv("GDT_COORDINATOR", "127.0.0.1:1", 1);  // Nothing listens there.
  setenv("GDT_GANG_ID", "g", 1);
  setenv("GDT_EPOCH", "1", 1);
  setenv("GDT_KV_TOKEN", "t", 1);
  setenv("GDT_NODE_RANK", "0", 1);
  setenv("GDT_WORLD_SIZE", "1", 1);
  ncclComm_t comm = nullptr;
  int rank = -1;
  char error[512];
  const ncclResult_t result = gdtNcclCommInitFromEnv(
      &comm, nullptr, 500, &rank, nullptr, error, sizeof error);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    EXPECT_EQ(result, ncclInvalidUsage);
    EXPECT_THAT(error, HasSubstr("no usable CUDA device"));
  } else {
    EXPECT_EQ(result, ncclSystemError);
    EXPECT_THAT(error, HasSubstr("deadline passed"));
  }
  EXPECT_EQ(comm, nullptr);
  EXPECT_EQ(rank, -1);
}

}  // namespace
