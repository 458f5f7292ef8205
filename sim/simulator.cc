#include "sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <limits>
#include <optional>
#include <queue>
#include <random>
#include <string>
#include <unordered_map>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace gdt::sim {
namespace {

// A whole number written as an integer or as a decimal with nothing after
// the point ("8", "8.0", "8.", "1e3"); nullopt for anything else.
std::optional<int64_t> WholeNumber(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  int64_t value = 0;
  if (absl::SimpleAtoi(text, &value)) return value;
  double real = 0;
  if (!absl::SimpleAtod(text, &real) || !std::isfinite(real) ||
      real != std::floor(real) || std::fabs(real) > 9.0e15) {
    return std::nullopt;
  }
  return static_cast<int64_t>(real);
}

struct Event {
  policy::Seconds time = 0;
  int kind = 0;  // kFinish before kReady at the same time.
  uint64_t seq = 0;
  uint32_t job = 0;
  uint32_t member = 0;
  uint32_t epoch = 0;  // kFinish, kStop: the run they belong to.

  bool operator>(const Event& other) const {
    return std::tie(time, kind, seq) >
           std::tie(other.time, other.kind, other.seq);
  }
};
constexpr int kFinish = 0;
constexpr int kStop = 1;  // A preempted gang's grace is over.
constexpr int kReady = 2;

struct JobState {
  policy::GangSpec spec;
  policy::Seconds submit = 0;
  policy::Seconds duration = 0;
  uint32_t gpus = 0;
  policy::Seconds start = -1;
  policy::Seconds end = -1;
  bool failed = false;
  std::vector<bool> joined;  // By member index - 1.
  // Preemption: work left (seconds at full size), the current run, the
  // queued time so far and since when it is queued again.
  policy::Seconds remaining = 0;
  policy::Seconds run_start = 0;
  policy::Seconds overhead = 0;  // Of the current run.
  double rate = 1;               // Speed of the current run over full size.
  uint32_t run_gpus = 0;         // GPUs of the current run.
  uint32_t epoch = 0;
  bool running = false;
  policy::Seconds queued_since = 0;
  policy::Seconds waited = 0;
  double lost_gpu_seconds = 0;
  // Stopped for a gang of no higher priority: its retry queues as if it
  // had arrived later by the length of the run it was stopped in.
  bool requeue_after_run = false;
};

// Nearest-rank percentile of sorted values.
double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  size_t rank = static_cast<size_t>(std::ceil(p * sorted.size()));
  rank = std::clamp<size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

// Speed of `n` members relative to `full`: linear up to `knee` members,
// half a member's worth for each one beyond.
double ElasticRate(uint32_t n, uint32_t full, uint32_t knee) {
  auto speed = [knee](uint32_t m) {
    return m <= knee ? m : knee + 0.5 * (m - knee);
  };
  return speed(n) / speed(full);
}

double Mean(const std::vector<double>& values) {
  if (values.empty()) return 0;
  double sum = 0;
  for (const double v : values) sum += v;
  return sum / values.size();
}

// One line's fields split at `delimiter` (RFC 4180: a quoted field may hold
// delimiters and doubled quotes); nullopt when a quote is not closed.
std::optional<std::vector<std::string>> SplitCsvLine(absl::string_view line,
                                                     char delimiter) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c != '"') {
        fields.back() += c;
      } else if (i + 1 < line.size() && line[i + 1] == '"') {
        fields.back() += '"';
        ++i;
      } else {
        quoted = false;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == delimiter) {
      fields.emplace_back();
    } else {
      fields.back() += c;
    }
  }
  if (quoted) return std::nullopt;
  return fields;
}

// A decimal number ("12", "-3", "100.5", "1e3"); nullopt for anything else,
// hexadecimal, "nan" and "inf" included.
std::optional<double> DecimalNumber(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  if (text.empty()) return std::nullopt;
  for (const char c : text) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c)) && c != '.' &&
        c != 'e' && c != 'E' && c != '+' && c != '-') {
      return std::nullopt;
    }
  }
  double value = 0;
  if (!absl::SimpleAtod(text, &value) || !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

// Days from 1970-01-01 to the given date of the proleptic Gregorian
// calendar (H. Hinnant's days_from_civil).
int64_t DaysFromCivil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

// A UTC date and time "YYYY-MM-DD HH:MM:SS" (or with a 'T' between them,
// fractions of a second and a trailing 'Z'), as seconds since 1970-01-01;
// nullopt when `text` is not one.
std::optional<double> DateTime(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  if (absl::EndsWith(text, "Z")) text.remove_suffix(1);
  if (text.size() < 19 || text[4] != '-' || text[7] != '-' ||
      (text[10] != ' ' && text[10] != 'T') || text[13] != ':' ||
      text[16] != ':') {
    return std::nullopt;
  }
  auto number = [&](size_t at, size_t digits) -> int64_t {
    int64_t value = 0;
    for (size_t i = at; i < at + digits; ++i) {
      if (!absl::ascii_isdigit(static_cast<unsigned char>(text[i]))) return -1;
      value = value * 10 + (text[i] - '0');
    }
    return value;
  };
  const int64_t year = number(0, 4), month = number(5, 2), day = number(8, 2);
  const int64_t hour = number(11, 2), minute = number(14, 2);
  const int64_t second = number(17, 2);
  double fraction = 0;
  if (text.size() > 19) {
    if (text[19] != '.' || text.size() == 20 ||
        !absl::SimpleAtod(absl::StrCat("0", text.substr(19)), &fraction) ||
        number(20, text.size() - 20) < 0) {
      return std::nullopt;
    }
  }
  constexpr int64_t kDays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (year < 0 || month < 1 || month > 12 || day < 1 ||
      day > kDays[month - 1] || hour < 0 || hour > 23 || minute < 0 ||
      minute > 59 || second < 0 || second > 60) {
    return std::nullopt;
  }
  const bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
  if (month == 2 && day == 29 && !leap) return std::nullopt;
  return static_cast<double>(DaysFromCivil(year, month, day) * 86400 +
                             hour * 3600 + minute * 60 + second) +
         fraction;
}

}  // namespace

std::string TraceJob::Name() const {
  return name.empty() ? absl::StrCat(id) : name;
}

absl::StatusOr<std::vector<TraceJob>> ParseTrace(std::string_view csv,
                                                 std::string_view source_name) {
  const absl::string_view source(source_name.data(), source_name.size());
  std::vector<TraceJob> jobs;
  std::vector<absl::string_view> lines =
      absl::StrSplit(absl::string_view(csv.data(), csv.size()), '\n');
  int id_col = -1, submit_col = -1, gpus_col = -1, duration_col = -1;
  int priority_col = -1, preemptible_col = -1;
  char delimiter = ',';
  // Whether submit times are dates: the first job decides for all.
  std::optional<bool> dates;
  size_t line_no = 0;
  absl::flat_hash_map<std::string, size_t> line_of_id;
  for (absl::string_view line : lines) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line_no == 1 && absl::StartsWith(line, "\xEF\xBB\xBF")) {
      line.remove_prefix(3);  // A UTF-8 byte order mark.
    }
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    // The line quoted, escaped and cut short: a binary file must not flood
    // the terminal.
    auto quote = [&]() {
      constexpr size_t kQuoted = 80;
      std::string quoted = absl::CHexEscape(line.substr(0, kQuoted));
      if (line.size() > kQuoted) absl::StrAppend(&quoted, "...");
      return quoted;
    };
    // One line "SOURCE:LINE: what: the line".
    auto bad = [&](absl::string_view what) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ":", line_no, ": ", what, ": ", quote()));
    };
    if (id_col < 0 && line.find(',') == absl::string_view::npos &&
        line.find('\t') != absl::string_view::npos) {
      delimiter = '\t';  // A header with tabs and no comma: tab-separated.
    }
    std::optional<std::vector<std::string>> cells =
        SplitCsvLine(line, delimiter);
    if (!cells.has_value()) return bad("a quoted field is not closed");
    const std::vector<absl::string_view> fields(cells->begin(), cells->end());
    if (id_col < 0) {
      // Column names match whatever their case and surrounding spaces.
      for (size_t i = 0; i < fields.size(); ++i) {
        const int col = static_cast<int>(i);
        const std::string field =
            absl::AsciiStrToLower(absl::StripAsciiWhitespace(fields[i]));
        for (auto [name, column] :
             {std::pair{"job_id", &id_col},
              std::pair{"submit_time_s", &submit_col},
              std::pair{"gpus", &gpus_col},
              std::pair{"duration_s", &duration_col},
              std::pair{"priority", &priority_col},
              std::pair{"preemptible", &preemptible_col}}) {
          if (field != name) continue;
          if (*column >= 0) {
            return bad(
                absl::StrCat("the header names column ", name, " twice"));
          }
          *column = col;
        }
      }
      std::vector<std::string> missing;
      for (auto [name, column] :
           {std::pair{"job_id", id_col}, std::pair{"submit_time_s", submit_col},
            std::pair{"gpus", gpus_col},
            std::pair{"duration_s", duration_col}}) {
        if (column < 0) missing.push_back(name);
      }
      if (!missing.empty()) {
        return bad(
            absl::StrCat("the header must name job_id, submit_time_s, gpus and "
                         "duration_s (comma- or tab-separated); it lacks ",
                         absl::StrJoin(missing, ", ")));
      }
      continue;
    }
    auto bad_field = [&](absl::string_view field, absl::string_view why) {
      return bad(absl::StrCat("field ", field, ": ", why));
    };
    const size_t needed = static_cast<size_t>(
        std::max({id_col, submit_col, gpus_col, duration_col}));
    if (fields.size() <= needed) {
      return bad(absl::StrCat("expected at least ", needed + 1, " fields, got ",
                              fields.size()));
    }
    TraceJob job;
    job.line = line_no;
    job.name = std::string(absl::StripAsciiWhitespace(fields[id_col]));
    if (job.name.empty() || job.name.size() > kMaxTraceIdBytes) {
      return bad_field("job_id", absl::StrCat("must be 1 to ", kMaxTraceIdBytes,
                                              " characters"));
    }
    if (!absl::SimpleAtoi(job.name, &job.id)) {
      // FNV-1a, kept positive: the same text always draws the same way.
      uint64_t hash = 14695981039346656037u;
      for (unsigned char c : job.name) hash = (hash ^ c) * 1099511628211u;
      job.id = static_cast<int64_t>(hash >> 1);
    }
    // Finite and below kMaxTraceSeconds, so that sums of times stay exact.
    std::optional<double> submit = DecimalNumber(fields[submit_col]);
    std::optional<double> date;
    if (!submit.has_value()) date = submit = DateTime(fields[submit_col]);
    if (!dates.has_value()) dates = date.has_value();
    if (submit.has_value() && *dates != date.has_value()) {
      return bad_field("submit_time_s",
                       *dates ? "seconds, but the first job gives a date"
                              : "a date, but the first job gives seconds");
    }
    if (!submit.has_value() || *submit < 0 || *submit > kMaxTraceSeconds) {
      std::string why = absl::StrCat(
          "must be seconds from 0 to ", kMaxTraceSeconds,
          " or a date and time YYYY-MM-DD HH:MM:SS (UTC) from 1970 on");
      if (submit.has_value() && *submit > kMaxTraceSeconds &&
          *submit <= kMaxTraceSeconds * 1000) {
        absl::StrAppend(&why, " (milliseconds? divide by 1000)");
      }
      return bad_field("submit_time_s", why);
    }
    const std::optional<double> duration = DecimalNumber(fields[duration_col]);
    if (!duration.has_value() || *duration < 0 ||
        *duration > kMaxTraceSeconds) {
      return bad_field("duration_s", absl::StrCat("must be seconds from 0 to ",
                                                  kMaxTraceSeconds));
    }
    // Fractions of a GPU (shared GPUs) are rounded up: gdt hands out whole
    // GPUs.
    const std::optional<double> gpus = DecimalNumber(fields[gpus_col]);
    if (!gpus.has_value() || *gpus < 0 ||
        *gpus > std::numeric_limits<uint32_t>::max()) {
      return bad_field("gpus",
                       absl::StrCat("must be a number from 0 to ",
                                    std::numeric_limits<uint32_t>::max()));
    }
    job.gpus = static_cast<uint32_t>(std::ceil(*gpus));
    job.gpus_rounded_up = static_cast<double>(job.gpus) != *gpus;
    // An optional column that is missing on this line or empty: its default.
    auto optional_field = [&](int col) -> std::optional<absl::string_view> {
      if (col < 0 || static_cast<size_t>(col) >= fields.size()) {
        return std::nullopt;
      }
      absl::string_view value = absl::StripAsciiWhitespace(fields[col]);
      if (value.empty()) return std::nullopt;
      return value;
    };
    if (auto priority = optional_field(priority_col); priority.has_value()) {
      std::optional<int64_t> value = WholeNumber(*priority);
      if (!value.has_value() || *value < -kMaxTracePriority ||
          *value > kMaxTracePriority) {
        return bad_field("priority", absl::StrCat("must be an integer from ",
                                                  -kMaxTracePriority, " to ",
                                                  kMaxTracePriority));
      }
      job.priority = static_cast<int32_t>(*value);
    }
    if (auto preemptible = optional_field(preemptible_col);
        preemptible.has_value()) {
      if (*preemptible == "1" || absl::EqualsIgnoreCase(*preemptible, "true")) {
        job.preemptible = true;
      } else if (*preemptible == "0" ||
                 absl::EqualsIgnoreCase(*preemptible, "false")) {
        job.preemptible = false;
      } else {
        return bad_field("preemptible", "must be 0 or 1 (or true or false)");
      }
    }
    if (auto [it, added] = line_of_id.try_emplace(job.name, line_no); !added) {
      return bad_field(
          "job_id", absl::StrCat(job.name, " is already on line ", it->second));
    }
    job.submit = static_cast<policy::Seconds>(std::llround(*submit));
    job.duration = std::max<policy::Seconds>(1, std::llround(*duration));
    jobs.push_back(job);
  }
  if (id_col < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": the trace is empty (no header, no jobs)"));
  }
  if (jobs.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": the trace has a header but no jobs"));
  }
  return jobs;
}

GangShape ShapeFor(uint32_t gpus, uint32_t gpus_per_host) {
  if (gpus == 0) return GangShape{1, 0};
  // In 64 bits: gpus + gpus_per_host must not wrap around.
  uint64_t members = (uint64_t{gpus} + gpus_per_host - 1) /
                     std::max<uint32_t>(1, gpus_per_host);
  while (gpus % members != 0) ++members;
  return GangShape{static_cast<uint32_t>(members),
                   static_cast<uint32_t>(gpus / members)};
}

absl::StatusOr<SimResult> Simulate(const std::vector<TraceJob>& trace,
                                   const SimOptions& options) {
  if (options.hosts == 0 || options.gpus_per_host == 0) {
    return absl::InvalidArgumentError("the cluster needs hosts with GPUs");
  }
  const uint64_t cluster_gpus = uint64_t{options.hosts} * options.gpus_per_host;
  if (cluster_gpus > kMaxClusterGpus) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the cluster has ", options.hosts, " x ", options.gpus_per_host,
        " GPUs; at most ", kMaxClusterGpus, " are simulated"));
  }
  // Negative times would wrap around or divide by zero below.
  const std::pair<const char*, policy::Seconds> times[] = {
      {"pickup skew", options.max_pickup_skew},
      {"timeout granularity", options.timeout_granularity},
      {"checkpoint interval", options.checkpoint_interval},
      {"restart overhead", options.restart_overhead},
      {"grace", options.preempt.grace},
      {"minimum run", options.preempt.min_run},
      {"aging step", options.preempt.aging_step}};
  for (const auto& [what, value] : times) {
    if (value < 0 || value > kMaxTraceSeconds) {
      return absl::InvalidArgumentError(
          absl::StrCat("the ", what, " must be from 0 to ", kMaxTraceSeconds,
                       " s, not ", value));
    }
  }
  if (!(options.preempt.demote_after_gpu_seconds >= 0)) {
    return absl::InvalidArgumentError(
        "the GPU-hours before demotion must be 0 or more");
  }
  SimResult result;
  result.jobs = trace.size();
  const uint32_t slots = options.runner_slots != 0
                             ? options.runner_slots
                             : static_cast<uint32_t>(4 * cluster_gpus);
  result.runner_slots = slots;

  policy::AdmissionPolicy policy(policy::PolicyOptions{
      options.mode, options.max_nodes_per_job, options.backfill_order,
      options.preempt, options.reservation_depth});
  std::vector<std::string> names;
  for (uint32_t h = 0; h < options.hosts; ++h) {
    policy::HostSpec spec;
    spec.name = absl::StrCat("h", h);
    spec.gpus = options.gpus_per_host;
    spec.runner_slots = slots / options.hosts + (h < slots % options.hosts);
    if (absl::Status added = policy.AddHost(spec); !added.ok()) return added;
    names.push_back(spec.name);
  }

  std::mt19937_64 rng(options.seed);
  const policy::Seconds granularity =
      std::max<policy::Seconds>(1, options.timeout_granularity);
  auto skew = [&]() -> policy::Seconds {
    return static_cast<policy::Seconds>(
        rng() % static_cast<uint64_t>(options.max_pickup_skew + 1));
  };

  std::vector<JobState> jobs(trace.size());
  uint64_t done = 0;                                 // Finished or failed.
  std::unordered_map<std::string, uint32_t> job_of;  // Gang id -> job.
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events;
  uint64_t next_seq = 0;
  policy::Seconds first_submit = trace.empty() ? 0 : trace.front().submit;
  for (size_t j = 0; j < trace.size(); ++j) {
    const TraceJob& in = trace[j];
    JobState& job = jobs[j];
    // Only jobs that fit in the cluster are shaped: ShapeFor() searches
    // divisors, which takes long for a huge prime.
    const GangShape shape = in.gpus <= cluster_gpus
                                ? ShapeFor(in.gpus, options.gpus_per_host)
                                : GangShape{1, options.gpus_per_host};
    job.spec.id = absl::StrCat("job", in.Name());
    job.spec.members = shape.members;
    job.spec.gpus_per_member = shape.gpus_per_member;
    job.spec.queue_time = in.submit;
    job.spec.run_bound = std::max<policy::Seconds>(
                             1, (in.duration + granularity - 1) / granularity) *
                         granularity;
    job.submit = in.submit;
    job.duration = in.duration;
    job.gpus = in.gpus;
    job.joined.assign(shape.members, false);
    job.remaining = in.duration;
    job.queued_since = in.submit;
    job.spec.priority = in.priority;
    if (in.gpus_rounded_up) ++result.gpus_rounded_up;
    // A fixed hash of the id, so that the choice does not depend on order.
    const bool drawn =
        static_cast<double>((static_cast<uint64_t>(in.id) * 2654435761u) %
                            1000) < options.preemptible_fraction * 1000;
    job.spec.preemptible = options.mode == policy::Mode::kPreempt &&
                           in.preemptible.value_or(drawn);
    if (job.spec.preemptible) ++result.preemptible_jobs;
    job.spec.checkpoint_interval = options.checkpoint_interval;
    if (options.elastic && shape.members > 1) {
      job.spec.min_members = (shape.members + 1) / 2;
      // The job timeout must hold at the smallest size.
      const policy::Seconds slowest = static_cast<policy::Seconds>(
          std::ceil(static_cast<double>(in.duration) /
                    ElasticRate(job.spec.min_members, shape.members,
                                options.elastic_knee)));
      job.spec.run_bound = std::max<policy::Seconds>(
                               1, (slowest + granularity - 1) / granularity) *
                           granularity;
    }
    first_submit = std::min(first_submit, in.submit);
    if (!job_of.emplace(job.spec.id, static_cast<uint32_t>(j)).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("job id ", in.Name(), " appears twice in the trace"));
    }
    // More GPUs than the cluster has, or more members than runner slots (its
    // members could never all join, and bouncing them would go on for
    // ever): the job can never run. It fails at once, queueing nothing.
    if (in.gpus > cluster_gpus || shape.members > slots) {
      job.failed = true;
      ++result.failed;
      ++done;
      continue;
    }
    for (uint32_t m = 1; m <= shape.members; ++m) {
      events.push(Event{in.submit + skew(), kReady, next_seq++,
                        static_cast<uint32_t>(j), m});
    }
  }

  std::deque<std::pair<uint32_t, uint32_t>> pending;  // (job, member).
  uint64_t running = 0;
  auto free_slots = [&]() {
    uint64_t total = 0;
    for (const std::string& name : names) total += policy.FreeRunnerSlots(name);
    return total;
  };
  // Hands pending members to free runner slots, oldest first.
  auto pick_up = [&]() -> absl::Status {
    while (!pending.empty()) {
      const auto [j, member] = pending.front();
      JobState& job = jobs[j];
      if (job.failed) {
        pending.pop_front();
        continue;
      }
      const size_t first = rng() % names.size();
      size_t host = names.size();
      for (size_t k = 0; k < names.size(); ++k) {
        const size_t h = (first + k) % names.size();
        if (policy.FreeRunnerSlots(names[h]) > 0) {
          host = h;
          break;
        }
      }
      if (host == names.size()) return absl::OkStatus();
      pending.pop_front();
      absl::Status joined = policy.Join(job.spec, member, names[host]);
      if (absl::IsFailedPrecondition(joined)) {
        job.failed = true;
        ++result.failed;
        ++done;
        continue;
      }
      if (!joined.ok()) return joined;
      job.joined[member - 1] = true;
    }
    return absl::OkStatus();
  };

  policy::Seconds now = first_submit;
  policy::Seconds last_end = first_submit;
  while (!events.empty()) {
    now = events.top().time;
    while (!events.empty() && events.top().time == now) {
      const Event event = events.top();
      events.pop();
      JobState& job = jobs[event.job];
      if (event.kind == kReady) {
        pending.emplace_back(event.job, event.member);
        continue;
      }
      if (event.epoch != job.epoch || !job.running) continue;  // Stale.
      if (event.kind == kStop) {
        // The victim keeps the work of its last checkpoint and is queued
        // again, as `retry:` does with its failed jobs.
        if (absl::Status stopped = policy.Finish(job.spec.id); !stopped.ok()) {
          return stopped;
        }
        const policy::Seconds worked =
            std::max<policy::Seconds>(0, now - job.run_start - job.overhead);
        // Seconds of the run up to its last checkpoint.
        policy::Seconds saved = 0;
        if (options.checkpoint_interval > 0) {
          saved = worked / options.checkpoint_interval *
                  options.checkpoint_interval;
        }
        job.remaining = std::max<policy::Seconds>(
            0, job.remaining - static_cast<policy::Seconds>(std::floor(
                                   static_cast<double>(saved) * job.rate)));
        // Restart overhead spent and work since the checkpoint are lost.
        job.lost_gpu_seconds +=
            static_cast<double>(job.run_gpus) * (now - job.run_start - saved);
        job.running = false;
        ++job.epoch;
        ++job.spec.preemptions;
        // As the coordinator queues a retry: a gang stopped for one of its
        // own priority had its turn, so the run does not count as waiting;
        // one stopped for a higher priority keeps its place.
        if (job.requeue_after_run) job.spec.queue_time += now - job.run_start;
        job.queued_since = now;
        --running;
        for (uint32_t m = 1; m <= job.spec.members; ++m) {
          job.joined[m - 1] = false;
          events.push(Event{now + skew(), kReady, next_seq++, event.job, m});
        }
        continue;
      }
      if (absl::Status finished = policy.Finish(job.spec.id); !finished.ok()) {
        return finished;
      }
      job.end = now;
      job.running = false;
      job.lost_gpu_seconds += static_cast<double>(job.run_gpus) * job.overhead;
      last_end = now;
      --running;
      ++done;
      ++result.finished;
    }
    while (true) {
      if (absl::Status picked = pick_up(); !picked.ok()) return picked;
      policy::Decisions decisions = policy.Schedule(now);
      if (decisions.admitted.empty() && decisions.bounced.empty() &&
          decisions.preempted.empty()) {
        break;
      }
      if (options.on_decisions) options.on_decisions(now, decisions);
      for (const policy::Admission& admission : decisions.admitted) {
        const uint32_t j = job_of.at(admission.gang_id);
        JobState& job = jobs[j];
        if (job.start < 0) job.start = now;
        job.waited += now - job.queued_since;
        job.run_start = now;
        job.overhead = job.spec.preemptions > 0 ? options.restart_overhead : 0;
        job.running = true;
        const uint32_t n = static_cast<uint32_t>(admission.members.size());
        job.run_gpus = n * job.spec.gpus_per_member;
        job.rate = ElasticRate(n, job.spec.members, options.elastic_knee);
        if (n < job.spec.members) ++result.started_smaller;
        // Members not needed at this size end; a retry brings all back.
        for (const uint32_t m : admission.not_needed) job.joined[m - 1] = false;
        ++running;
        const policy::Seconds run = static_cast<policy::Seconds>(
            std::ceil(static_cast<double>(job.remaining) / job.rate));
        events.push(Event{now + job.overhead + run, kFinish, next_seq++, j, 0,
                          job.epoch});
      }
      for (const policy::Preemption& preemption : decisions.preempted) {
        const uint32_t j = job_of.at(preemption.gang_id);
        ++result.preemptions;
        if (!jobs[j].spec.preemptible) ++result.non_preemptible_preempted;
        jobs[j].requeue_after_run =
            jobs[job_of.at(preemption.by)].spec.priority <=
            jobs[j].spec.priority;
        events.push(
            Event{preemption.stop_by, kStop, next_seq++, j, 0, jobs[j].epoch});
      }
      for (const policy::Bounce& bounce : decisions.bounced) {
        // The bounced members' jobs fail and `retry:` queues them again.
        ++result.deadlocks;
        const uint32_t j = job_of.at(bounce.gang_id);
        for (uint32_t m = 1; m <= jobs[j].spec.members; ++m) {
          if (!jobs[j].joined[m - 1]) continue;
          jobs[j].joined[m - 1] = false;
          events.push(Event{now + skew(), kReady, next_seq++, j, m});
        }
      }
    }
    if (running == 0 && done < jobs.size() &&
        (events.empty() || free_slots() == 0)) {
      result.stalled = true;
      result.stalled_at = now;
      break;
    }
  }
  std::vector<double> jct;
  std::vector<double> wait;
  double gpu_seconds = 0;
  for (const JobState& job : jobs) {
    if (job.end < 0) continue;
    jct.push_back(static_cast<double>(job.end - job.submit));
    wait.push_back(static_cast<double>(job.waited));
    gpu_seconds += static_cast<double>(job.gpus) * job.duration;
  }
  for (const JobState& job : jobs) {
    result.max_preemptions_per_job =
        std::max(result.max_preemptions_per_job, job.spec.preemptions);
    if (job.spec.preemptions > 0) ++result.jobs_preempted;
    result.lost_gpu_hours += job.lost_gpu_seconds / 3600.0;
  }
  std::sort(jct.begin(), jct.end());
  std::sort(wait.begin(), wait.end());
  result.mean_jct = Mean(jct);
  result.p50_jct = Percentile(jct, 0.50);
  result.p99_jct = Percentile(jct, 0.99);
  result.max_jct = jct.empty() ? 0 : jct.back();
  result.mean_wait = Mean(wait);
  result.p99_wait = Percentile(wait, 0.99);
  result.max_wait = wait.empty() ? 0 : wait.back();
  result.makespan =
      (result.stalled ? result.stalled_at : last_end) - first_submit;
  if (result.makespan > 0) {
    result.gpu_utilisation =
        gpu_seconds / (static_cast<double>(options.hosts) *
                       options.gpus_per_host * result.makespan);
  }
  return result;
}

}  // namespace gdt::sim
