// The trace-replay command shared by `gdt-coord simulate` and `gdt-sim`:
// its flags, the file reading, the timing and the printing. The replay is
// gdt::sim::Simulate().
#ifndef GDT_POLICY_SIM_COMMAND_H_
#define GDT_POLICY_SIM_COMMAND_H_

#include <string>

#include "CLI/CLI.hpp"
#include "sim/simulator.h"

namespace gdt::sim {

struct SimulateFlags {
  std::string trace_path;
  std::string policy = "gdt";
  std::string backfill_order = "aged";
  double demote_after_gpu_hours = 8;  // Into options.preempt.
  SimOptions options;
  bool json = false;
  // Replays fifo, gdt, preempt and preempt+elastic and prints each with its
  // ratios to FIFO's (`policy` is not used).
  bool compare = false;
  // When not empty, every decision of the replay is written there, one
  // line each (not with `compare`).
  std::string decisions_path;
};

// Adds --trace, --hosts, --gpus-per-host, --policy, --seed, --runner-slots,
// --max-skew, --timeout-granularity, --max-nodes, the preemption options
// (--max-preemptions, --grace, --checkpoint-interval, --restart-overhead,
// --demote-after, --aging-step), --compare, --json and --decisions to `app`.
void AddSimulateOptions(CLI::App& app, SimulateFlags& flags);

inline constexpr int kSimExitOk = 0;
inline constexpr int kSimExitFailure = 1;  // Unreadable trace, bad cluster.
inline constexpr int kSimExitStalled = 3;  // The replay stalled for good.

struct SimulateReport {
  int exit_code = kSimExitOk;
  std::string output;  // For stdout: the table, or one JSON object.
  std::string error;   // One line for stderr when exit_code is a failure.
};

// Reads the trace, replays it and renders the result (jobs, JCT and wait
// statistics, GPU utilisation, deadlocks, stall, makespan, replay wall time
// covering reading, parsing and the replay).
SimulateReport RunSimulate(const SimulateFlags& flags);

}  // namespace gdt::sim

#endif  // GDT_POLICY_SIM_COMMAND_H_
