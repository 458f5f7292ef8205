#include "sim/sim_command.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/cli_parse.h"
#include "common/file.h"
#include "nlohmann/json.hpp"

namespace gdt::sim {

void AddSimulateOptions(CLI::App& app, SimulateFlags& flags) {
  // Every time flag: whole seconds from 0 to the longest a trace may give.
  const CLI::Validator kSeconds = CLI::Range(
      policy::Seconds{0}, static_cast<policy::Seconds>(kMaxTraceSeconds));
  app.add_option("--trace", flags.trace_path,
                 "CSV trace (job_id,submit_time_s,...,gpus,duration_s,...)")
      ->required();
  app.add_option("--hosts", flags.options.hosts, "GPU hosts")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--gpus-per-host", flags.options.gpus_per_host,
                 "GPUs per host")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--policy", flags.policy,
                 "gdt (priority, backfill, deadlock breaking) | preempt (gdt "
                 "plus checkpoint-aware preemption) | preempt+elastic (and "
                 "multi-member jobs may start at half size or more) | fifo "
                 "(strict FIFO) | naive (no coordinator)")
      ->check(
          CLI::IsMember({"gdt", "preempt", "preempt+elastic", "fifo", "naive"}))
      ->capture_default_str();
  app.add_option("--seed", flags.options.seed,
                 "seed for pickup skew and runner hosts")
      ->capture_default_str();
  app.add_option("--runner-slots", flags.options.runner_slots,
                 "runner slots in the cluster (0: 4 per GPU)")
      ->capture_default_str();
  app.add_option("--max-skew", flags.options.max_pickup_skew,
                 "largest member pickup delay, seconds")
      ->check(kSeconds)
      ->capture_default_str();
  app.add_option("--timeout-granularity", flags.options.timeout_granularity,
                 "job timeout = duration rounded up to this, seconds (0: the "
                 "duration itself)")
      ->check(kSeconds)
      ->capture_default_str();
  app.add_option("--max-nodes", flags.options.max_nodes_per_job,
                 "largest gang accepted")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--backfill-order", flags.backfill_order,
                 "gdt: order of the gangs tried behind the head: aged "
                 "(highest wait / sqrt(job timeout) first) | shortest (job "
                 "timeout, then GPUs) | queue (priority, then FIFO)")
      ->check(CLI::IsMember({"aged", "shortest", "queue"}))
      ->capture_default_str();
  app.add_option("--max-preemptions", flags.options.preempt.max_preemptions,
                 "preempt: a job is preempted at most this many times")
      ->capture_default_str();
  app.add_option("--grace", flags.options.preempt.grace,
                 "preempt: seconds from the checkpoint notice to the stop")
      ->check(kSeconds)
      ->capture_default_str();
  app.add_option("--checkpoint-interval", flags.options.checkpoint_interval,
                 "preempt: seconds of run between a job's checkpoints (0: jobs "
                 "never checkpoint, a stopped job loses its whole run)")
      ->check(kSeconds)
      ->capture_default_str();
  app.add_option("--restart-overhead", flags.options.restart_overhead,
                 "preempt: seconds a restarted job spends before progressing")
      ->check(kSeconds)
      ->capture_default_str();
  app.add_option("--demote-after", flags.demote_after_gpu_hours,
                 "preempt: GPU-hours of a run after which a job of the same "
                 "priority may preempt it (0: never)")
      ->check(FiniteRange(0, 1e9))
      ->capture_default_str();
  app.add_option("--min-run", flags.options.preempt.min_run,
                 "preempt: seconds a job runs before a job of the same "
                 "priority may preempt it")
      ->check(kSeconds)
      ->capture_default_str();
  app.add_option("--preemptible-fraction", flags.options.preemptible_fraction,
                 "preempt: share of the jobs (without a preemptible column) "
                 "that may be preempted")
      ->check(FiniteRange(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--elastic-knee", flags.options.elastic_knee,
                 "preempt+elastic: members up to which a job's speed grows "
                 "linearly (each one beyond adds half)")
      ->capture_default_str();
  app.add_option("--aging-step", flags.options.preempt.aging_step,
                 "preempt: a waiting job ranks one level higher per this many "
                 "seconds waited (0: no aging)")
      ->check(kSeconds)
      ->capture_default_str();
  app.add_option("--overdue-fraction",
                 flags.options.preempt.overdue_backlog_fraction,
                 "preempt: a waiting job is overdue (served first, in queue "
                 "order) once it has waited this share of the backlog; the "
                 "others go by aged key (0: queue order, as in gdt)")
      ->check(FiniteRange(0.0, 10.0))
      ->capture_default_str();
  app.add_option("--served-behind-head",
                 flags.options.preempt.served_behind_head,
                 "preempt: waiting jobs behind the head that may have "
                 "victims chosen for them in one pass (0: the head only)")
      ->capture_default_str();
  app.add_option("--reservation-depth", flags.options.reservation_depth,
                 "gdt, preempt: the first N waiting jobs that do not fit each "
                 "get a reservation that no later job may delay (1: the head "
                 "only, EASY backfill; default: 1 for gdt, 4 for preempt and "
                 "preempt+elastic)")
      ->check(CLI::Range(1, 1000000));
  CLI::Option* compare = app.add_flag(
      "--compare", flags.compare,
      "replay the trace with fifo, gdt, preempt and preempt+elastic (same "
      "flags) and print each next to strict FIFO's figures");
  compare->excludes("--policy");
  app.add_option("--decisions", flags.decisions_path,
                 "write every admission, preemption and bounce of the replay "
                 "to this file, one line each (to check that a change to the "
                 "policy leaves its decisions as they were)")
      ->excludes(compare);
  app.add_flag("--json", flags.json,
               "print one JSON object (its fields: docs/scheduling.md)");
}

namespace {

// The simulator's options for `policy`, or nullopt for an unknown name.
std::optional<SimOptions> OptionsFor(const SimulateFlags& flags,
                                     const std::string& policy) {
  const std::map<std::string, policy::Mode> modes = {
      {"gdt", policy::Mode::kBackfill},
      {"preempt", policy::Mode::kPreempt},
      {"preempt+elastic", policy::Mode::kPreempt},
      {"fifo", policy::Mode::kStrictFifo},
      {"naive", policy::Mode::kNaive}};
  auto mode = modes.find(policy);
  if (mode == modes.end()) return std::nullopt;
  SimOptions options = flags.options;
  options.mode = mode->second;
  options.elastic = policy == "preempt+elastic";
  options.preempt.demote_after_gpu_seconds =
      flags.demote_after_gpu_hours * 3600.0;
  options.backfill_order = flags.backfill_order == "queue"
                               ? policy::BackfillOrder::kQueue
                           : flags.backfill_order == "shortest"
                               ? policy::BackfillOrder::kShortestFirst
                               : policy::BackfillOrder::kAgedShortestFirst;
  return options;
}

// Reads and checks the trace; on failure fills `report` and returns nullopt.
std::optional<std::vector<TraceJob>> LoadTrace(const SimulateFlags& flags,
                                               SimulateReport& report) {
  const absl::StatusOr<std::string> text = ReadTextFile(flags.trace_path);
  if (!text.ok()) {
    report.exit_code = kSimExitFailure;
    report.error = std::string(text.status().message());
    return std::nullopt;
  }
  absl::StatusOr<std::vector<TraceJob>> trace =
      ParseTrace(*text, flags.trace_path);
  if (!trace.ok()) {
    report.exit_code = kSimExitFailure;
    report.error = std::string(trace.status().message());
    return std::nullopt;
  }
  // A job larger than the whole cluster is a mistake in the trace or the
  // cluster flags, not a job to count as failed.
  const SimOptions& options = flags.options;
  const uint64_t cluster_gpus = uint64_t{options.hosts} * options.gpus_per_host;
  for (const TraceJob& job : *trace) {
    if (job.gpus > cluster_gpus) {
      report.exit_code = kSimExitFailure;
      report.error = absl::StrCat(
          flags.trace_path, ":", job.line, ": field gpus: job ", job.Name(),
          " needs ", job.gpus, " GPUs, more than the cluster's ", options.hosts,
          " x ", options.gpus_per_host, " = ", cluster_gpus,
          " (--hosts, --gpus-per-host)");
      return std::nullopt;
    }
  }
  return std::move(*trace);
}

nlohmann::json ResultJson(const std::string& policy, const SimulateFlags& flags,
                          const SimResult& r, double wall_s) {
  return {{"policy", policy},
          {"backfill_order", flags.backfill_order},
          {"hosts", flags.options.hosts},
          {"gpus_per_host", flags.options.gpus_per_host},
          {"runner_slots", r.runner_slots},
          {"seed", flags.options.seed},
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
          {"gpus_rounded_up", r.gpus_rounded_up},
          {"deadlocks", r.deadlocks},
          {"stalled", r.stalled},
          {"stalled_at_s", r.stalled_at},
          {"makespan_s", r.makespan},
          {"preemptions", r.preemptions},
          {"jobs_preempted", r.jobs_preempted},
          {"max_preemptions_per_job", r.max_preemptions_per_job},
          {"lost_gpu_hours", r.lost_gpu_hours},
          {"started_smaller", r.started_smaller},
          {"preemptible_jobs", r.preemptible_jobs},
          {"non_preemptible_preempted", r.non_preemptible_preempted},
          {"replay_wall_s", wall_s}};
}

std::string ResultText(const std::string& policy, const SimulateFlags& flags,
                       const SimResult& r, double wall_s) {
  return absl::StrFormat(
      "policy %s, %u hosts x %u GPUs, %u runner slots, seed %u\n"
      "jobs %u  finished %u  failed (infeasible) %u%s\n"
      "JCT s   mean %.0f  p50 %.0f  p99 %.0f  max %.0f\n"
      "wait s  mean %.0f  p99 %.0f  max %.0f\n"
      "GPU utilisation %.3f\n"
      "deadlocks broken %u  stalled %s%s\n"
      "makespan %d s\n"
      "preemptions %u (%u jobs, at most %u per job), lost GPU-hours %.1f\n"
      "elastic starts below full size %u\n"
      "replay wall time %.2f s\n",
      policy, flags.options.hosts, flags.options.gpus_per_host, r.runner_slots,
      flags.options.seed, r.jobs, r.finished, r.failed,
      r.gpus_rounded_up > 0
          ? absl::StrCat("  GPUs rounded up ", r.gpus_rounded_up)
          : "",
      r.mean_jct, r.p50_jct, r.p99_jct, r.max_jct, r.mean_wait, r.p99_wait,
      r.max_wait, r.gpu_utilisation, r.deadlocks, r.stalled ? "yes" : "no",
      r.stalled ? absl::StrCat(" (at ", r.stalled_at, " s)") : "", r.makespan,
      r.preemptions, r.jobs_preempted, r.max_preemptions_per_job,
      r.lost_gpu_hours, r.started_smaller, wall_s);
}

// `value` over FIFO's, or 1 when both are 0 (nobody waited in either).
double Ratio(double value, double fifo) {
  if (fifo == 0)
    return value == 0 ? 1.0 : std::numeric_limits<double>::infinity();
  return value / fifo;
}

// One line per decision: the virtual time, then what happened.
void WriteDecisions(std::ostream& out, policy::Seconds now,
                    const policy::Decisions& decisions) {
  for (const policy::Bounce& bounce : decisions.bounced) {
    out << now << " bounce " << bounce.gang_id << '\n';
  }
  for (const policy::Admission& admission : decisions.admitted) {
    out << now << " admit " << admission.gang_id;
    for (const policy::MemberPlacement& member : admission.members) {
      out << ' ' << member.member_index << '@' << member.host << ':'
          << absl::StrJoin(member.gpus, ",");
    }
    if (!admission.not_needed.empty()) {
      out << " not_needed " << absl::StrJoin(admission.not_needed, ",");
    }
    out << '\n';
  }
  for (const policy::Preemption& preemption : decisions.preempted) {
    out << now << " preempt " << preemption.gang_id << " by " << preemption.by
        << " stop_by " << preemption.stop_by << ": " << preemption.reason
        << '\n';
  }
}

SimulateReport RunCompare(const SimulateFlags& flags,
                          const std::vector<TraceJob>& trace) {
  SimulateReport report;
  const std::vector<std::string> policies = {"fifo", "gdt", "preempt",
                                             "preempt+elastic"};
  // The replays are independent: one thread each.
  std::vector<std::future<absl::StatusOr<SimResult>>> replays;
  for (const std::string& policy : policies) {
    SimOptions options = *OptionsFor(flags, policy);
    replays.push_back(std::async(std::launch::async, [&trace, options] {
      return Simulate(trace, options);
    }));
  }
  std::vector<SimResult> results;
  for (size_t i = 0; i < policies.size(); ++i) {
    absl::StatusOr<SimResult> result = replays[i].get();
    if (!result.ok()) {
      // Bad options are the same for every policy: said once, as a single
      // replay says them.
      report.exit_code = kSimExitFailure;
      report.error =
          absl::IsInvalidArgument(result.status())
              ? std::string(result.status().message())
              : absl::StrCat(policies[i], ": ", result.status().message());
      return report;
    }
    results.push_back(std::move(*result));
  }
  const SimResult& fifo = results[0];
  bool stalled = false;
  std::vector<std::string> above;  // Policies whose longest wait beats FIFO's.
  nlohmann::json rows = nlohmann::json::array();
  std::string table = absl::StrFormat(
      "%s, %u hosts x %u GPUs, %u runner slots, seed %u; \"x\" is the ratio "
      "to strict FIFO in this run\n"
      "%-16s %8s %11s %7s %11s %7s %11s %7s %14s %10s %9s %7s\n",
      flags.trace_path, flags.options.hosts, flags.options.gpus_per_host,
      fifo.runner_slots, flags.options.seed, "policy", "finished", "mean JCT s",
      "x", "mean wait s", "x", "max wait s", "x", "preemptions", "lost GPU-h",
      "deadlocks", "stalled");
  for (size_t i = 0; i < policies.size(); ++i) {
    const SimResult& r = results[i];
    stalled = stalled || r.stalled;
    const double jct = Ratio(r.mean_jct, fifo.mean_jct);
    const double wait = Ratio(r.mean_wait, fifo.mean_wait);
    const double max_wait = Ratio(r.max_wait, fifo.max_wait);
    if (r.max_wait > fifo.max_wait) above.push_back(policies[i]);
    table += absl::StrFormat(
        "%-16s %8u %11.0f %7.3f %11.0f %7.3f %11.0f %7.3f %14s %10.1f %9u "
        "%7s\n",
        policies[i], r.finished, r.mean_jct, jct, r.mean_wait, wait, r.max_wait,
        max_wait,
        absl::StrCat(r.preemptions, " (max ", r.max_preemptions_per_job, ")"),
        r.lost_gpu_hours, r.deadlocks, r.stalled ? "yes" : "no");
    nlohmann::json row = ResultJson(policies[i], flags, r, 0);
    row.erase("replay_wall_s");
    row["to_fifo"] = {
        {"mean_jct", jct}, {"mean_wait", wait}, {"max_wait", max_wait}};
    rows.push_back(std::move(row));
  }
  if (!above.empty()) {
    table += absl::StrCat(
        "longest wait above FIFO's: ", absl::StrJoin(above, ", "), "\n");
  }
  if (flags.json) {
    report.output = nlohmann::json{{"trace", flags.trace_path},
                                   {"baseline", "fifo"},
                                   {"results", std::move(rows)}}
                        .dump(2) +
                    "\n";
  } else {
    report.output = std::move(table);
  }
  report.exit_code = stalled ? kSimExitStalled : kSimExitOk;
  return report;
}

}  // namespace

SimulateReport RunSimulate(const SimulateFlags& flags) {
  SimulateReport report;
  std::optional<SimOptions> options = OptionsFor(flags, flags.policy);
  if (!options.has_value()) {
    report.exit_code = kSimExitFailure;
    report.error = absl::StrCat("unknown policy '", flags.policy,
                                "' (use gdt, preempt, preempt+elastic, fifo "
                                "or naive)");
    return report;
  }
  const auto started = std::chrono::steady_clock::now();
  std::optional<std::vector<TraceJob>> trace = LoadTrace(flags, report);
  if (!trace.has_value()) return report;
  if (flags.compare) return RunCompare(flags, *trace);
  std::ofstream decisions;
  if (!flags.decisions_path.empty()) {
    decisions.open(flags.decisions_path, std::ios::out | std::ios::trunc);
    if (!decisions) {
      report.exit_code = kSimExitFailure;
      report.error =
          absl::StrCat("cannot write --decisions file ", flags.decisions_path);
      return report;
    }
    options->on_decisions = [&decisions](policy::Seconds now,
                                         const policy::Decisions& made) {
      WriteDecisions(decisions, now, made);
    };
  }
  absl::StatusOr<SimResult> result = Simulate(*trace, *options);
  if (decisions.is_open()) {
    decisions.close();
    if (!decisions) {
      report.exit_code = kSimExitFailure;
      report.error =
          absl::StrCat("cannot write --decisions file ", flags.decisions_path);
      return report;
    }
  }
  if (!result.ok()) {
    report.exit_code = kSimExitFailure;
    report.error = std::string(result.status().message());
    return report;
  }
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started)
          .count();
  report.output =
      flags.json
          ? ResultJson(flags.policy, flags, *result, wall_s).dump(2) + "\n"
          : ResultText(flags.policy, flags, *result, wall_s);
  report.exit_code = result->stalled ? kSimExitStalled : kSimExitOk;
  return report;
}

}  // namespace gdt::sim
