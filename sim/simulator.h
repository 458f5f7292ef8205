// Trace replay through the admission policy in virtual time. Pure: the trace
// comes in as text and the result goes out as data; the gdt-sim binary does
// the file reading, the timing and the printing.
//
// Job to gang mapping: a job of g GPUs on hosts of G GPUs is a gang of m
// members with g/m GPUs each, where m is the smallest count >= ceil(g/G) that
// divides g (so members x GPUs per member = g exactly and no member exceeds
// a host): 12 -> 2x6, 20 -> 4x5, 64 -> 8x8, 7 -> 1x7.
//
// GitLab model: each member job becomes ready at submit time plus a random
// pickup skew in [0, max_pickup_skew]; ready members wait in one FIFO
// pending queue until a runner slot is free, on a host drawn at random among
// those with free slots, and hold that slot until their gang finishes (or is
// bounced, after which its members are queued again, like a `retry:`). The
// job timeout given to the policy as its run-time bound is the duration
// rounded up to a whole multiple of timeout_granularity. A gang runs for
// exactly its trace duration, plus the cost of its preemptions (kPreempt):
// work since its last checkpoint is done again and each restart costs an
// overhead. Wait is the time a job spends queued: submit to first start, plus
// each stop to the next start.
#ifndef GDT_POLICY_SIMULATOR_H_
#define GDT_POLICY_SIMULATOR_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "policy/admission_policy.h"

namespace gdt::sim {

struct TraceJob {
  // A number for the trace's job_id: its value when it is an integer,
  // otherwise a fixed hash of the text (used where a job is drawn by id,
  // e.g. which are preemptible).
  int64_t id = 0;
  policy::Seconds submit = 0;
  uint32_t gpus = 0;
  policy::Seconds duration = 0;
  int32_t priority = 0;  // Optional column `priority`; higher goes first.
  // Optional column `preemptible` (0 or 1); without it
  // SimOptions::preemptible_fraction decides.
  std::optional<bool> preemptible = std::nullopt;
  // The job_id as the trace writes it (any text up to kMaxTraceIdBytes);
  // empty: the decimal id.
  std::string name = {};
  // The line of the trace it came from (0: not from a trace).
  size_t line = 0;
  // The trace gave a fraction of a GPU, rounded up into `gpus`.
  bool gpus_rounded_up = false;

  std::string Name() const;
};

// Largest submit time and duration a trace may give, seconds (about 317
// years), and the largest priority either way.
inline constexpr double kMaxTraceSeconds = 1e10;
inline constexpr int32_t kMaxTracePriority = 1000000;
inline constexpr size_t kMaxTraceIdBytes = 255;

// Parses CSV (or, when the header has tabs and no comma, tab-separated
// text) with a header naming at least job_id, submit_time_s, gpus and
// duration_s, and optionally priority and preemptible, in any case and
// order (other columns are ignored; fields may be quoted). A job_id is any
// text; a submit time is seconds or, for every job alike, a UTC date and
// time "YYYY-MM-DD HH:MM:SS"; a fraction of a GPU is rounded up (and
// flagged); counts written as whole decimals ("8.0", as spreadsheet and
// dataframe exports write them) are whole numbers; an empty optional field
// takes its default.
// Errors: InvalidArgument, one line "SOURCE:LINE: field NAME: why: the
// line" (or without the field where the line as a whole is wrong): a
// header without the four columns, a bad or out-of-range number (times from
// 0 to kMaxTraceSeconds, priorities within kMaxTracePriority), a job_id seen
// before, an unclosed quote, or a trace without jobs.
absl::StatusOr<std::vector<TraceJob>> ParseTrace(
    std::string_view csv, std::string_view source = "trace");

struct GangShape {
  uint32_t members = 0;
  uint32_t gpus_per_member = 0;
};

// The mapping described at the top of this file. `gpus_per_host` > 0.
GangShape ShapeFor(uint32_t gpus, uint32_t gpus_per_host);

struct SimOptions {
  uint32_t hosts = 32;
  uint32_t gpus_per_host = 8;
  // Runner slots in the whole cluster, spread evenly over the hosts;
  // 0 means 4 per GPU.
  uint32_t runner_slots = 0;
  policy::Mode mode = policy::Mode::kBackfill;
  uint64_t seed = 0;
  policy::Seconds max_pickup_skew = 30;
  policy::Seconds timeout_granularity = 3600;
  uint32_t max_nodes_per_job = 8;
  policy::BackfillOrder backfill_order =
      policy::BackfillOrder::kAgedShortestFirst;  // gdt only.
  // policy::PolicyOptions::reservation_depth (gdt and preempt; 0: the
  // mode's default).
  uint32_t reservation_depth = policy::PolicyOptions{}.reservation_depth;
  // kPreempt: every job is preemptible, writes a checkpoint every
  // `checkpoint_interval` seconds of its run, and pays `restart_overhead`
  // seconds (GPUs held, no progress) each time it starts again after a
  // preemption. A preempted job keeps the work of its last checkpoint and
  // loses the rest; its members are queued again like a `retry:`, and its
  // queue time moves on by the run it was stopped in when the job it made
  // room for had no higher priority, as the coordinator does.
  policy::PreemptOptions preempt = {};
  policy::Seconds checkpoint_interval = 1800;
  policy::Seconds restart_overhead = 120;
  // Share of the jobs without a `preemptible` column that are preemptible,
  // chosen by job id (deterministic); the others are never stopped.
  double preemptible_fraction = 1.0;
  // Elastic gangs: every job of more than one member may start with as few
  // as half its members (rounded up) when it is next in line and does not
  // fit whole. Its speed is linear in its members up to `elastic_knee`
  // members, and each member beyond the knee adds half a member's speed;
  // the trace's duration is the run time at full size.
  bool elastic = false;
  uint32_t elastic_knee = 4;
  // When set, called with every pass's decisions that are not empty, in
  // order, with the virtual time of the pass (gdt-sim --decisions).
  std::function<void(policy::Seconds, const policy::Decisions&)> on_decisions =
      nullptr;
};

struct SimResult {
  uint64_t jobs = 0;
  uint64_t finished = 0;
  uint64_t failed = 0;     // Infeasible at join.
  uint64_t deadlocks = 0;  // Runner-slot deadlocks broken by a bounce.
  bool stalled = false;    // Nothing could ever progress again.
  policy::Seconds stalled_at = 0;
  uint32_t runner_slots = 0;
  // Over finished jobs, in seconds. JCT = end - submit; wait = start -
  // submit (pickup skew included).
  double mean_jct = 0;
  double p50_jct = 0;
  double p99_jct = 0;
  double max_jct = 0;
  double mean_wait = 0;
  double p99_wait = 0;
  double max_wait = 0;
  // GPU-seconds of finished jobs / (GPUs x makespan).
  double gpu_utilisation = 0;
  // Last end (or the stall) minus the first submit.
  policy::Seconds makespan = 0;
  // kPreempt: preemptions, the most any one job had, the jobs preempted at
  // least once, and the GPU-hours of work lost (since the last checkpoint)
  // plus restart overhead.
  uint64_t preemptions = 0;
  uint32_t max_preemptions_per_job = 0;
  uint64_t jobs_preempted = 0;
  double lost_gpu_hours = 0;
  uint64_t started_smaller = 0;  // Elastic starts below full size.
  // Preemptions of jobs that were not preemptible: the policy must never
  // make one, so anything but 0 is a bug.
  uint64_t non_preemptible_preempted = 0;
  uint64_t preemptible_jobs = 0;
  // Jobs whose fraction of a GPU the trace reader rounded up.
  uint64_t gpus_rounded_up = 0;
};

// Largest cluster simulated, in GPUs.
inline constexpr uint64_t kMaxClusterGpus = uint64_t{1} << 20;

// Replays `jobs` (any order) on a uniform cluster. A job that can never run
// (more GPUs than the cluster, more members than runner slots, or a shape
// the policy refuses at join) counts as failed.
// Errors: InvalidArgument for an empty cluster, one of more than
// kMaxClusterGpus GPUs, or a negative time or GPU-hour option.
absl::StatusOr<SimResult> Simulate(const std::vector<TraceJob>& jobs,
                                   const SimOptions& options);

}  // namespace gdt::sim

#endif  // GDT_POLICY_SIMULATOR_H_
