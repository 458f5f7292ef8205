// The NCCL communicator end to end on one GPU host: a real gdt-coord
// server, two nccl_allreduce processes with the job environment, each
// building its communicator with nccl_bootstrap and checking the sum.
// Labelled `gpu`; skipped with the reason when CUDA reports no device.
#include <cuda_runtime_api.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "common/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/coordinator_fixture.h"

namespace gdt {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

int DevicesOrSkipReason(std::string* reason) {
  int devices = 0;
  cudaError_t error = cudaGetDeviceCount(&devices);
  if (error != cudaSuccess) {
    *reason =
        std::string("no GPU: cudaGetDeviceCount: ") + cudaGetErrorString(error);
    return 0;
  }
  if (devices == 0) *reason = "no GPU: CUDA sees 0 devices";
  return devices;
}

class NcclCommTest : public test::InProcessCoordinatorTest {};

TEST_F(NcclCommTest, TwoProcessesAllReduceOnOneHost) {
  std::string reason;
  const int devices = DevicesOrSkipReason(&reason);
  if (devices == 0) GTEST_SKIP() << reason;
  if (devices < 2) {
    GTEST_SKIP() << "needs 2 GPUs (NCCL refuses two ranks on one GPU), found "
                 << devices;
  }
  ASSERT_NO_FATAL_FAILURE(StartCoordinator());
  const std::map<std::string, std::string> job_env = OpenJobGang();

  std::vector<std::unique_ptr<Subprocess>> ranks;
  for (int r = 0; r < 2; ++r) {
    SpawnOptions options;
    options.argv = {GDT_NCCL_ALLREDUCE};
    options.env = CurrentEnvironment();
    for (const auto& [name, value] : job_env) options.env[name] = value;
    options.env["GDT_NODE_RANK"] = std::to_string(r);
    options.env["GDT_WORLD_SIZE"] = "2";
    options.env["CUDA_VISIBLE_DEVICES"] = std::to_string(r);
    options.die_with_parent = true;
    absl::StatusOr<std::unique_ptr<Subprocess>> child =
        Subprocess::Spawn(options);
    ASSERT_TRUE(child.ok()) << child.status();
    ranks.push_back(std::move(*child));
  }
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  for (auto& rank : ranks) {
    std::string output;
    std::optional<ExitStatus> status = rank->WaitUntil(
        deadline, [&output](OutputSource, std::string_view text) {
          output.append(text);
        });
    ASSERT_TRUE(status.has_value()) << "rank did not finish: " << output;
    EXPECT_EQ(status->code(), 0) << output;
    EXPECT_THAT(output, HasSubstr("sum 3 correct"));
    std::printf("%s", output.c_str());  // The ready time, for the report.
  }
}

}  // namespace
}  // namespace gdt
