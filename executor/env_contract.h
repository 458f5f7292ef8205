#ifndef GDT_EXECUTOR_ENV_CONTRACT_H_
#define GDT_EXECUTOR_ENV_CONTRACT_H_

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "gdt/v1/agent.pb.h"
#include "gdt/v1/coordinator.pb.h"

namespace gdt::executor {

// What a member's user script sees besides the job's own variables
// (docs/environment.md): the environment and the files the agent writes before
// the stage starts (it sets each file's env_var to the file's path).
struct StageEnvironment {
  std::map<std::string, std::string> env;
  std::vector<v1::StageFile> files;
};

// Builds the environment contract for a member placed by `assignment`.
// Generic: GDT_GANG_ID, GDT_EPOCH, GDT_NODE_RANK, GDT_NUM_NODES,
// GDT_NPROC_PER_NODE, GDT_WORLD_SIZE, GDT_MASTER_ADDR, GDT_MASTER_PORT,
// GDT_PEERS (newline-separated, rank order), GDT_COORDINATOR, GDT_KV_TOKEN
// (the gang key-value store's secret, when the assignment carries one),
// CUDA_VISIBLE_DEVICES ("" for a CPU-only member), GDT_CHECKPOINT_DIR
// (<project_dir>/checkpoints, only when `project_dir` is known), and the
// GDT_HOSTFILE file ("addr slots=P" per rank). The torchrun launcher (also
// the default) adds PET_*; the env launcher adds MASTER_ADDR, MASTER_PORT,
// RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE; the nccl launcher adds
// GDT_LOCAL_RANK=0 for one process per member; NCCL_SOCKET_IFNAME and
// GLOO_SOCKET_IFNAME follow the host's network interface. Never sets
// CI_NODE_INDEX. Pure function.
StageEnvironment BuildEnvironmentContract(const v1::Assignment& assignment,
                                          const std::string& project_dir);

// Whether `name` is a variable of the contract that gdt decides for a member
// placed with `launcher`: the leased GPUs, the gang's rendezvous and ranks,
// the network interface. The runner exports every job variable inside the
// stage script, after the agent set the contract, so a job, project, group
// or runner variable of such a name would silently win; gdt refuses the job
// instead. Not included: GDT_NPROC_PER_NODE (the job's own input, passed
// on unchanged), GDT_CHECKPOINT_DIR (a job may point it elsewhere) and
// GDT_LOCAL_RANK (a multi-process script sets it itself).
bool IsGdtOwnedVariable(std::string_view name, v1::Launcher launcher);

}  // namespace gdt::executor

#endif  // GDT_EXECUTOR_ENV_CONTRACT_H_
