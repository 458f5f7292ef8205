// libFuzzer target for the trace reader and a short replay of what it
// reads (built only when the compiler supports -fsanitize=fuzzer; ctest
// runs it briefly as gdt_sim_trace_fuzzer_smoke). Besides "no crash, no
// hang, no sanitizer report" it checks the contracts of sim/simulator.h: a
// refusal is one line naming the source, what is read is within the
// documented bounds, and a replay accounts for every job.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_set.h"
#include "sim/simulator.h"

namespace {

void Fail(const char* what, std::string_view text) {
  std::fprintf(stderr, "sim_trace_fuzzer: %s\n--- input ---\n%.*s\n", what,
               static_cast<int>(text.size()), text.data());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 64 * 1024) return 0;  // Small inputs keep runs fast.
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const absl::StatusOr<std::vector<gdt::sim::TraceJob>> trace =
      gdt::sim::ParseTrace(text, "fuzz.csv");
  if (!trace.ok()) {
    const std::string message(trace.status().message());
    if (message.find('\n') != std::string::npos) {
      Fail("a refusal is not one line", text);
    }
    if (message.rfind("fuzz.csv:", 0) != 0) {
      Fail("a refusal does not name the file", text);
    }
    return 0;
  }
  if (trace->empty()) Fail("an empty trace was read", text);
  absl::flat_hash_set<std::string> names;
  for (const gdt::sim::TraceJob& job : *trace) {
    if (job.submit < 0 || job.submit > gdt::sim::kMaxTraceSeconds ||
        job.duration < 1 || job.duration > gdt::sim::kMaxTraceSeconds ||
        job.line < 2) {
      Fail("a job outside the documented bounds", text);
    }
    if (!names.insert(job.Name()).second) Fail("a job_id read twice", text);
  }
  if (trace->size() > 64) return 0;
  gdt::sim::SimOptions options;
  options.hosts = 2;
  options.gpus_per_host = 8;
  options.mode = gdt::policy::Mode::kPreempt;
  options.preemptible_fraction = 0.5;
  const absl::StatusOr<gdt::sim::SimResult> result =
      gdt::sim::Simulate(*trace, options);
  if (!result.ok()) Fail("a trace that was read did not replay", text);
  if (!result->stalled && result->finished + result->failed != result->jobs) {
    Fail("a replay lost a job", text);
  }
  if (result->non_preemptible_preempted != 0) {
    Fail("a job that was not preemptible was stopped", text);
  }
  if (result->max_preemptions_per_job > options.preempt.max_preemptions) {
    Fail("a job was preempted more often than allowed", text);
  }
  return 0;
}
