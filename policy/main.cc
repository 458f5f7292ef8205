// gdt-sim: replays a job trace through the gang admission policy in virtual
// time and prints the result. Reads the file, times the replay and prints;
// the replay itself is gdt::policy::Simulate().
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "CLI/CLI.hpp"
#include "nlohmann/json.hpp"
#include "policy/simulator.h"

namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;  // Unreadable trace, replay error.
constexpr int kExitStalled = 3;  // The replay stalled for good.

int Fail(const std::string& message) {
  std::fprintf(stderr, "gdt-sim: %s\n", message.c_str());
  return kExitFailure;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Replay a GPU job trace through gdt's gang admission policy"};
  app.set_version_flag("--version", "gdt-sim " GDT_VERSION);
  std::string trace_path;
  std::string policy_name = "gdt";
  gdt::policy::SimOptions options;
  bool json = false;
  app.add_option("--trace", trace_path,
                 "CSV trace (job_id,submit_time_s,...,gpus,duration_s,...)")
      ->required();
  app.add_option("--hosts", options.hosts, "GPU hosts")->capture_default_str();
  app.add_option("--gpus-per-host", options.gpus_per_host, "GPUs per host")
      ->capture_default_str();
  app.add_option("--policy", policy_name, "gdt | fifo | naive")
      ->check(CLI::IsMember({"gdt", "fifo", "naive"}))
      ->capture_default_str();
  app.add_option("--seed", options.seed, "seed for pickup skew and hosts")
      ->capture_default_str();
  app.add_option("--runner-slots", options.runner_slots,
                 "runner slots in the cluster (0: 4 per GPU)")
      ->capture_default_str();
  app.add_option("--max-skew", options.max_pickup_skew,
                 "largest member pickup delay, seconds")
      ->capture_default_str();
  app.add_option("--timeout-granularity", options.timeout_granularity,
                 "job timeout = duration rounded up to this, seconds")
      ->capture_default_str();
  app.add_option("--max-nodes", options.max_nodes_per_job,
                 "largest gang accepted")
      ->capture_default_str();
  app.add_flag("--json", json, "print one JSON object");
  CLI11_PARSE(app, argc, argv);

  const std::map<std::string, gdt::policy::Mode> modes = {
      {"gdt", gdt::policy::Mode::kBackfill},
      {"fifo", gdt::policy::Mode::kStrictFifo},
      {"naive", gdt::policy::Mode::kNaive}};
  options.mode = modes.at(policy_name);

  const auto started = std::chrono::steady_clock::now();
  std::ifstream file(trace_path);
  if (!file) return Fail("cannot read " + trace_path);
  std::stringstream text;
  text << file.rdbuf();
  absl::StatusOr<std::vector<gdt::policy::TraceJob>> trace =
      gdt::policy::ParseTrace(text.str());
  if (!trace.ok()) {
    return Fail(trace_path + ": " + std::string(trace.status().message()));
  }
  absl::StatusOr<gdt::policy::SimResult> result =
      gdt::policy::Simulate(*trace, options);
  if (!result.ok()) return Fail(std::string(result.status().message()));
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started)
          .count();

  const gdt::policy::SimResult& r = *result;
  if (json) {
    nlohmann::json out = {
        {"policy", policy_name},
        {"hosts", options.hosts},
        {"gpus_per_host", options.gpus_per_host},
        {"runner_slots", r.runner_slots},
        {"seed", options.seed},
        {"jobs", r.jobs},
        {"finished", r.finished},
        {"failed", r.failed},
        {"jct_s",
         {{"mean", r.mean_jct},
          {"p50", r.p50_jct},
          {"p99", r.p99_jct},
          {"max", r.max_jct}}},
        {"wait_s",
         {{"mean", r.mean_wait}, {"p99", r.p99_wait}, {"max", r.max_wait}}},
        {"gpu_utilisation", r.gpu_utilisation},
        {"deadlocks", r.deadlocks},
        {"stalled", r.stalled},
        {"stalled_at_s", r.stalled_at},
        {"makespan_s", r.makespan},
        {"replay_wall_s", wall_s}};
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("policy %s, %u hosts x %u GPUs, %u runner slots, seed %llu\n",
                policy_name.c_str(), options.hosts, options.gpus_per_host,
                r.runner_slots, static_cast<unsigned long long>(options.seed));
    std::printf("jobs %llu  finished %llu  failed (infeasible) %llu\n",
                static_cast<unsigned long long>(r.jobs),
                static_cast<unsigned long long>(r.finished),
                static_cast<unsigned long long>(r.failed));
    std::printf("JCT s   mean %.0f  p50 %.0f  p99 %.0f  max %.0f\n", r.mean_jct,
                r.p50_jct, r.p99_jct, r.max_jct);
    std::printf("wait s  mean %.0f  p99 %.0f  max %.0f\n", r.mean_wait,
                r.p99_wait, r.max_wait);
    std::printf("GPU utilisation %.3f\n", r.gpu_utilisation);
    std::printf("deadlocks broken %llu  stalled %s",
                static_cast<unsigned long long>(r.deadlocks),
                r.stalled ? "yes" : "no");
    if (r.stalled) {
      std::printf(" (at %lld s)", static_cast<long long>(r.stalled_at));
    }
    std::printf("\nmakespan %lld s\nreplay wall time %.2f s\n",
                static_cast<long long>(r.makespan), wall_s);
  }
  return r.stalled ? kExitStalled : kExitOk;
}
