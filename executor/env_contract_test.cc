#include "executor/env_contract.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gdt::executor {
namespace {

using ::testing::Contains;
using ::testing::Key;
using ::testing::Not;
using ::testing::Pair;

v1::Assignment TwoNodeAssignment(v1::Launcher launcher) {
  v1::Assignment assignment;
  assignment.set_gang_id("g-77-train");
  assignment.set_epoch(2);
  assignment.set_node_rank(1);
  assignment.set_num_nodes(2);
  assignment.set_procs_per_node(4);
  assignment.set_world_size(8);
  assignment.set_host_name("gpu-02");
  assignment.set_host_address("10.0.0.2");
  assignment.add_gpu_indices(0);
  assignment.add_gpu_indices(3);
  assignment.set_master_addr("10.0.0.1");
  assignment.set_master_port(31000);
  assignment.add_peers("10.0.0.1");
  assignment.add_peers("10.0.0.2");
  assignment.set_launcher(launcher);
  assignment.set_coordinator_endpoint("coord:7070");
  return assignment;
}

TEST(EnvContractTest, GenericSetIsAlwaysPresent) {
  StageEnvironment stage = BuildEnvironmentContract(
      TwoNodeAssignment(v1::LAUNCHER_NONE), "/builds/ml/model");

  EXPECT_THAT(stage.env, Contains(Pair("GDT_GANG_ID", "g-77-train")));
  EXPECT_THAT(stage.env, Contains(Pair("GDT_EPOCH", "2")));
  EXPECT_THAT(stage.env, Contains(Pair("GDT_NODE_RANK", "1")));
  EXPECT_THAT(stage.env, Contains(Pair("GDT_NUM_NODES", "2")));
  EXPECT_THAT(stage.env, Contains(Pair("GDT_NPROC_PER_NODE", "4")));
  EXPECT_THAT(stage.env, Contains(Pair("GDT_WORLD_SIZE", "8")));
  EXPECT_THAT(stage.env, Contains(Pair("GDT_MASTER_ADDR", "10.0.0.1")));
  EXPECT_THAT(stage.env, Contains(Pair("GDT_MASTER_PORT", "31000")));
  EXPECT_THAT(stage.env, Contains(Pair("GDT_PEERS", "10.0.0.1\n10.0.0.2")));
  EXPECT_THAT(stage.env, Contains(Pair("GDT_COORDINATOR", "coord:7070")));
  EXPECT_THAT(stage.env, Contains(Pair("CUDA_VISIBLE_DEVICES", "0,3")));
  EXPECT_THAT(stage.env, Contains(Pair("GDT_CHECKPOINT_DIR",
                                       "/builds/ml/model/checkpoints")));
  EXPECT_THAT(stage.env, Not(Contains(Key("CI_NODE_INDEX"))));
  EXPECT_THAT(stage.env, Not(Contains(Key("NCCL_SOCKET_IFNAME"))));
  EXPECT_THAT(stage.env, Not(Contains(Key("PET_NNODES"))));
  EXPECT_THAT(stage.env, Not(Contains(Key("MASTER_ADDR"))));
  ASSERT_EQ(stage.files.size(), 1u);
  EXPECT_EQ(stage.files[0].env_var(), "GDT_HOSTFILE");
  EXPECT_EQ(stage.files[0].content(), "10.0.0.1 slots=4\n10.0.0.2 slots=4\n");
}

TEST(EnvContractTest, TorchrunAddsPetVariablesOnly) {
  StageEnvironment stage =
      BuildEnvironmentContract(TwoNodeAssignment(v1::LAUNCHER_TORCHRUN), "");

  EXPECT_THAT(stage.env, Contains(Pair("PET_NNODES", "2")));
  EXPECT_THAT(stage.env, Contains(Pair("PET_NODE_RANK", "1")));
  EXPECT_THAT(stage.env, Contains(Pair("PET_NPROC_PER_NODE", "4")));
  EXPECT_THAT(stage.env, Contains(Pair("PET_MASTER_ADDR", "10.0.0.1")));
  EXPECT_THAT(stage.env, Contains(Pair("PET_MASTER_PORT", "31000")));
  EXPECT_THAT(stage.env, Contains(Pair("PET_MAX_RESTARTS", "0")));
  for (const char* key : {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE",
                          "LOCAL_RANK", "LOCAL_WORLD_SIZE"}) {
    EXPECT_THAT(stage.env, Not(Contains(Key(key)))) << key;
  }
  // Unknown project dir: no checkpoint dir rather than a wrong one.
  EXPECT_THAT(stage.env, Not(Contains(Key("GDT_CHECKPOINT_DIR"))));
}

TEST(EnvContractTest, UnspecifiedLauncherMeansTorchrun) {
  StageEnvironment stage =
      BuildEnvironmentContract(TwoNodeAssignment(v1::LAUNCHER_UNSPECIFIED), "");

  EXPECT_THAT(stage.env, Contains(Key("PET_NNODES")));
}

TEST(EnvContractTest, EnvLauncherAddsOneProcessPerMemberVariables) {
  StageEnvironment stage =
      BuildEnvironmentContract(TwoNodeAssignment(v1::LAUNCHER_ENV), "");

  EXPECT_THAT(stage.env, Contains(Pair("MASTER_ADDR", "10.0.0.1")));
  EXPECT_THAT(stage.env, Contains(Pair("MASTER_PORT", "31000")));
  EXPECT_THAT(stage.env, Contains(Pair("RANK", "1")));
  EXPECT_THAT(stage.env, Contains(Pair("WORLD_SIZE", "2")));
  EXPECT_THAT(stage.env, Contains(Pair("LOCAL_RANK", "0")));
  EXPECT_THAT(stage.env, Contains(Pair("LOCAL_WORLD_SIZE", "1")));
  EXPECT_THAT(stage.env, Not(Contains(Key("PET_NNODES"))));
  EXPECT_THAT(stage.env, Not(Contains(Key("PET_MAX_RESTARTS"))));
}

TEST(EnvContractTest, NcclLauncherGetsTheGenericSet) {
  StageEnvironment stage =
      BuildEnvironmentContract(TwoNodeAssignment(v1::LAUNCHER_NCCL), "");

  EXPECT_THAT(stage.env, Contains(Key("GDT_MASTER_ADDR")));
  EXPECT_THAT(stage.env, Not(Contains(Key("PET_NNODES"))));
  EXPECT_THAT(stage.env, Not(Contains(Key("RANK"))));
}

TEST(EnvContractTest, NcclLauncherGetsTheKvTokenAndLocalRank) {
  v1::Assignment assignment = TwoNodeAssignment(v1::LAUNCHER_NCCL);
  assignment.set_kv_token("secret");
  assignment.set_procs_per_node(1);

  StageEnvironment stage = BuildEnvironmentContract(assignment, "");

  EXPECT_THAT(stage.env, Contains(Pair("GDT_KV_TOKEN", "secret")));
  EXPECT_THAT(stage.env, Contains(Pair("GDT_LOCAL_RANK", "0")));

  // With several processes per member the script sets the local rank.
  assignment.set_procs_per_node(2);
  stage = BuildEnvironmentContract(assignment, "");
  EXPECT_THAT(stage.env, Not(Contains(Key("GDT_LOCAL_RANK"))));
}

TEST(EnvContractTest, GdtOwnedVariablesCoverWhatTheContractDecides) {
  for (v1::Launcher launcher :
       {v1::LAUNCHER_TORCHRUN, v1::LAUNCHER_UNSPECIFIED, v1::LAUNCHER_ENV,
        v1::LAUNCHER_NCCL, v1::LAUNCHER_NONE}) {
    v1::Assignment assignment = TwoNodeAssignment(launcher);
    assignment.set_network_interface("eth0");
    assignment.set_kv_token("secret");
    const StageEnvironment contract =
        BuildEnvironmentContract(assignment, "/builds/p");
    for (const auto& [name, value] : contract.env) {
      if (name == "GDT_NPROC_PER_NODE" || name == "GDT_CHECKPOINT_DIR" ||
          name == "GDT_LOCAL_RANK") {
        EXPECT_FALSE(IsGdtOwnedVariable(name, launcher)) << name;
      } else {
        EXPECT_TRUE(IsGdtOwnedVariable(name, launcher)) << name;
      }
    }
    EXPECT_TRUE(IsGdtOwnedVariable("GDT_HOSTFILE", launcher));
  }
  // A user's own tuning stays theirs.
  EXPECT_FALSE(IsGdtOwnedVariable("NCCL_DEBUG", v1::LAUNCHER_TORCHRUN));
  EXPECT_FALSE(IsGdtOwnedVariable("NCCL_IB_HCA", v1::LAUNCHER_ENV));
  EXPECT_FALSE(IsGdtOwnedVariable("MASTER_PORT", v1::LAUNCHER_TORCHRUN));
  EXPECT_FALSE(IsGdtOwnedVariable("PET_NNODES", v1::LAUNCHER_ENV));
}

TEST(EnvContractTest, NoTokenNoVariable) {
  StageEnvironment stage =
      BuildEnvironmentContract(TwoNodeAssignment(v1::LAUNCHER_TORCHRUN), "");

  EXPECT_THAT(stage.env, Not(Contains(Key("GDT_KV_TOKEN"))));
}

TEST(EnvContractTest, CpuOnlyMemberSeesNoGpus) {
  v1::Assignment assignment = TwoNodeAssignment(v1::LAUNCHER_NONE);
  assignment.clear_gpu_indices();

  StageEnvironment stage = BuildEnvironmentContract(assignment, "");

  EXPECT_THAT(stage.env, Contains(Pair("CUDA_VISIBLE_DEVICES", "")));
}

TEST(EnvContractTest, NetworkInterfaceSetsSocketIfnames) {
  v1::Assignment assignment = TwoNodeAssignment(v1::LAUNCHER_NONE);
  assignment.set_network_interface("eth1");

  StageEnvironment stage = BuildEnvironmentContract(assignment, "");

  EXPECT_THAT(stage.env, Contains(Pair("NCCL_SOCKET_IFNAME", "eth1")));
  EXPECT_THAT(stage.env, Contains(Pair("GLOO_SOCKET_IFNAME", "eth1")));
}

}  // namespace
}  // namespace gdt::executor
