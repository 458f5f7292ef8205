// Helpers shared by the coordinator's tests (test-only; not in any library).
#ifndef GDT_COORDINATOR_TEST_SUPPORT_H_
#define GDT_COORDINATOR_TEST_SUPPORT_H_

#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>
#include <utility>

#include "common/clock.h"
#include "coordinator/coordinator.h"
#include "coordinator/port_checker.h"
#include "coordinator/scheduler.h"
#include "gtest/gtest.h"
#include "state/model.h"
#include "state/sqlite_store.h"

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

// An empty state in memory; nullptr (and a test failure) when SQLite
// cannot open one.
inline std::unique_ptr<state::SqliteStore> MemoryStore() {
  absl::StatusOr<std::unique_ptr<state::SqliteStore>> store =
      state::SqliteStore::Open(":memory:");
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

// A scheduler over `store`; nullptr (and a test failure) when it cannot
// load it.
inline std::unique_ptr<coordinator::Scheduler> MakeScheduler(
    const Clock& clock, state::StateStore& store,
    const coordinator::SchedulerOptions& options = {}) {
  absl::StatusOr<std::unique_ptr<coordinator::Scheduler>> scheduler =
      coordinator::Scheduler::Create(clock, store, options);
  EXPECT_TRUE(scheduler.ok()) << scheduler.status();
  return scheduler.ok() ? std::move(*scheduler) : nullptr;
}

// A coordinator (its scheduler thread not started) over an empty state in
// memory that asks `ports` about ports; nullptr (and a test failure) when
// it cannot be made.
inline std::unique_ptr<coordinator::Coordinator> MemoryCoordinator(
    const Clock& clock, coordinator::PortChecker& ports) {
  std::unique_ptr<state::SqliteStore> store = MemoryStore();
  if (store == nullptr) return nullptr;
  absl::StatusOr<std::unique_ptr<coordinator::Coordinator>> coordinator =
      coordinator::Coordinator::Create(clock, std::move(store),
                                       coordinator::SchedulerOptions{}, ports);
  EXPECT_TRUE(coordinator.ok()) << coordinator.status();
  return coordinator.ok() ? std::move(*coordinator) : nullptr;
}

}  // namespace gdt::test

#endif  // GDT_COORDINATOR_TEST_SUPPORT_H_
