#include "executor/env_contract.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gdt::executor {

StageEnvironment BuildEnvironmentContract(const v1::Assignment& assignment,
                                          const std::string& project_dir) {
  const uint32_t procs = std::max<uint32_t>(assignment.procs_per_node(), 1);
  const uint32_t world_size = assignment.world_size() != 0
                                  ? assignment.world_size()
                                  : assignment.num_nodes() * procs;
  const std::string node_rank = absl::StrCat(assignment.node_rank());
  const std::string num_nodes = absl::StrCat(assignment.num_nodes());
  const std::string master_port = absl::StrCat(assignment.master_port());

  StageEnvironment result;
  std::map<std::string, std::string>& env = result.env;
  env["GDT_GANG_ID"] = assignment.gang_id();
  env["GDT_EPOCH"] = absl::StrCat(assignment.epoch());
  env["GDT_NODE_RANK"] = node_rank;
  env["GDT_NUM_NODES"] = num_nodes;
  env["GDT_NPROC_PER_NODE"] = absl::StrCat(procs);
  env["GDT_WORLD_SIZE"] = absl::StrCat(world_size);
  env["GDT_MASTER_ADDR"] = assignment.master_addr();
  env["GDT_MASTER_PORT"] = master_port;
  env["GDT_PEERS"] = absl::StrJoin(assignment.peers(), "\n");
  env["GDT_COORDINATOR"] = assignment.coordinator_endpoint();
  // The gang key-value store's secret: every launcher gets it so
  // gdt-kv works from any script. Never logged.
  if (!assignment.kv_token().empty()) {
    env["GDT_KV_TOKEN"] = assignment.kv_token();
  }
  env["CUDA_VISIBLE_DEVICES"] = absl::StrJoin(assignment.gpu_indices(), ",");
  if (!project_dir.empty()) {
    env["GDT_CHECKPOINT_DIR"] = absl::StrCat(project_dir, "/checkpoints");
  }
  if (!assignment.network_interface().empty()) {
    env["NCCL_SOCKET_IFNAME"] = assignment.network_interface();
    env["GLOO_SOCKET_IFNAME"] = assignment.network_interface();
  }

  switch (assignment.launcher()) {
    case v1::LAUNCHER_UNSPECIFIED:
    case v1::LAUNCHER_TORCHRUN:
      env["PET_NNODES"] = num_nodes;
      env["PET_NODE_RANK"] = node_rank;
      env["PET_NPROC_PER_NODE"] = absl::StrCat(procs);
      env["PET_MASTER_ADDR"] = assignment.master_addr();
      env["PET_MASTER_PORT"] = master_port;
      // The coordinator owns restarts: torchrun must not restart on its own.
      env["PET_MAX_RESTARTS"] = "0";
      break;
    case v1::LAUNCHER_ENV:
      env["MASTER_ADDR"] = assignment.master_addr();
      env["MASTER_PORT"] = master_port;
      env["RANK"] = node_rank;
      env["WORLD_SIZE"] = num_nodes;
      env["LOCAL_RANK"] = "0";
      env["LOCAL_WORLD_SIZE"] = "1";
      break;
    case v1::LAUNCHER_NCCL:
      // nccl_bootstrap computes its rank as GDT_NODE_RANK x
      // GDT_NPROC_PER_NODE + GDT_LOCAL_RANK. With one process per member the
      // local rank is 0; with more, the script starts them and sets
      // GDT_LOCAL_RANK in each (left unset here, so a forgotten one is an
      // error rather than a duplicate rank).
      if (procs == 1) env["GDT_LOCAL_RANK"] = "0";
      break;
    default:  // none: the generic set only.
      break;
  }

  std::string hostfile;
  for (const std::string& peer : assignment.peers()) {
    absl::StrAppend(&hostfile, peer, " slots=", procs, "\n");
  }
  v1::StageFile file;
  file.set_env_var("GDT_HOSTFILE");
  file.set_name("hostfile");
  file.set_content(hostfile);
  result.files.push_back(std::move(file));
  return result;
}

bool IsGdtOwnedVariable(std::string_view name, v1::Launcher launcher) {
  static constexpr std::string_view kAlways[] = {
      "GDT_GANG_ID",        "GDT_EPOCH",         "GDT_NODE_RANK",
      "GDT_NUM_NODES",      "GDT_WORLD_SIZE",    "GDT_MASTER_ADDR",
      "GDT_MASTER_PORT",    "GDT_PEERS",         "GDT_COORDINATOR",
      "GDT_KV_TOKEN",       "GDT_HOSTFILE",      "CUDA_VISIBLE_DEVICES",
      "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"};
  static constexpr std::string_view kTorchrun[] = {
      "PET_NNODES",      "PET_NODE_RANK",   "PET_NPROC_PER_NODE",
      "PET_MASTER_ADDR", "PET_MASTER_PORT", "PET_MAX_RESTARTS"};
  static constexpr std::string_view kEnv[] = {
      "MASTER_ADDR", "MASTER_PORT", "RANK",
      "WORLD_SIZE",  "LOCAL_RANK",  "LOCAL_WORLD_SIZE"};
  auto in = [name](const auto& names) {
    return std::find(std::begin(names), std::end(names), name) !=
           std::end(names);
  };
  if (in(kAlways)) return true;
  switch (launcher) {
    case v1::LAUNCHER_UNSPECIFIED:
    case v1::LAUNCHER_TORCHRUN:
      return in(kTorchrun);
    case v1::LAUNCHER_ENV:
      return in(kEnv);
    default:
      return false;
  }
}

}  // namespace gdt::executor
