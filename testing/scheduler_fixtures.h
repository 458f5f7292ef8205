// Helpers shared by the coordinator's tests (test-only; not in any library).
#ifndef GDT_COORDINATOR_TEST_SUPPORT_H_
#define GDT_COORDINATOR_TEST_SUPPORT_H_

#include <stdlib.h>

#include <filesystem>
#include <string>

#include "coordinator/scheduler.h"
#include "gtest/gtest.h"
#include "state/model.h"

namespace gdt::test {

inline state::HostSpec CpuHost(const std::string& name, uint32_t slots) {
  state::HostSpec spec;
  spec.name = name;
  spec.address = "10.0.0." + std::to_string(name.size() + slots);
  spec.agent_endpoint = name + ":7071";
  spec.cpu_slots = slots;
  spec.network_interface = "eth0";
  return spec;
}

inline state::HostSpec GpuHost(const std::string& name, uint32_t gpus) {
  state::HostSpec spec = CpuHost(name, 0);
  for (uint32_t i = 0; i < gpus; ++i) {
    spec.gpus.push_back(state::GpuInfo{
        i, "GPU-" + name + "-" + std::to_string(i), "H100", 80ull << 30});
  }
  spec.labels["rack"] = "r1";
  return spec;
}

inline state::GangKey TrainKey(uint32_t size) {
  return state::GangKey{"https://gitlab.example.com", 5, 77, "train", size};
}

inline coordinator::JoinRequest Joining(const state::GangKey& key,
                                        uint32_t index, uint32_t gpus = 0,
                                        const std::string& arrival_host = "") {
  coordinator::JoinRequest request;
  request.key = key;
  request.member_index = index;
  request.job_id = 100 + index;
  request.job_name = key.group_name + " " + std::to_string(index) + "/" +
                     std::to_string(key.size);
  request.gpus_per_node = gpus;
  request.procs_per_node = 2;
  request.launcher = 1;
  request.arrival_host = arrival_host;
  return request;
}

}  // namespace gdt::test

#endif  // GDT_COORDINATOR_TEST_SUPPORT_H_
