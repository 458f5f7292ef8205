#include "sim/simulator.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gdt::sim {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;
using ::testing::StartsWith;

TEST(ShapeForTest, MembersTimesGpusIsTheJobsGpus) {
  const std::vector<std::pair<uint32_t, std::pair<uint32_t, uint32_t>>> cases =
      {{1, {1, 1}},  {4, {1, 4}},  {7, {1, 7}},  {8, {1, 8}},  {12, {2, 6}},
       {16, {2, 8}}, {20, {4, 5}}, {24, {3, 8}}, {32, {4, 8}}, {64, {8, 8}}};
  for (const auto& [gpus, want] : cases) {
    const GangShape shape = ShapeFor(gpus, 8);
    EXPECT_EQ(shape.members, want.first) << gpus;
    EXPECT_EQ(shape.gpus_per_member, want.second) << gpus;
  }
}

TEST(ParseTraceTest, ReadsTheTraceColumns) {
  absl::StatusOr<std::vector<TraceJob>> jobs = ParseTrace(
      "job_id,submit_time_s,virtual_cluster,gpus,duration_s,model\n"
      "0,0,0e4a51,1,17466,\"Transformer (batch size 128)\"\n"
      "1,12,103959,16,500,\"LM (batch size 10)\"\r\n");
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_THAT(*jobs, SizeIs(2));
  EXPECT_EQ((*jobs)[1].id, 1);
  EXPECT_EQ((*jobs)[1].submit, 12);
  EXPECT_EQ((*jobs)[1].gpus, 16u);
  EXPECT_EQ((*jobs)[1].duration, 500);
}

TEST(ParseTraceTest, NamesTheBadLine) {
  absl::StatusOr<std::vector<TraceJob>> jobs =
      ParseTrace("job_id,submit_time_s,gpus,duration_s\n0,0,1,10\n1,x,1,10\n");
  EXPECT_EQ(jobs.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(jobs.status().message(),
              HasSubstr("trace:3: field submit_time_s: must be"));
  EXPECT_FALSE(ParseTrace("a,b\n1,2\n").ok());
}

// 120 jobs of 1..32 GPUs arriving faster than 4 hosts x 8 GPUs can serve.
std::vector<TraceJob> SyntheticTrace() {
  const uint32_t sizes[] = {1, 1, 2, 4, 1, 8, 16, 1, 4, 32, 1, 2};
  std::vector<TraceJob> jobs;
  for (int i = 0; i < 120; ++i) {
    TraceJob job;
    job.id = i;
    job.submit = i * 200;
    job.gpus = sizes[i % 12];
    job.duration = 600 + (i * 7919) % 5400;
    jobs.push_back(job);
  }
  return jobs;
}

SimOptions SmallCluster(policy::Mode mode) {
  SimOptions options;
  options.hosts = 4;
  options.gpus_per_host = 8;
  options.mode = mode;
  return options;
}

TEST(SimulateTest, GdtFinishesEveryJobAndBeatsFifo) {
  const std::vector<TraceJob> trace = SyntheticTrace();
  absl::StatusOr<SimResult> gdt =
      Simulate(trace, SmallCluster(policy::Mode::kBackfill));
  absl::StatusOr<SimResult> fifo =
      Simulate(trace, SmallCluster(policy::Mode::kStrictFifo));
  ASSERT_TRUE(gdt.ok()) << gdt.status();
  ASSERT_TRUE(fifo.ok()) << fifo.status();

  EXPECT_EQ(gdt->jobs, 120u);
  EXPECT_EQ(gdt->finished, 120u);
  EXPECT_EQ(fifo->finished, 120u);
  EXPECT_FALSE(gdt->stalled);
  EXPECT_EQ(gdt->deadlocks, 0u);
  EXPECT_LT(gdt->mean_wait, fifo->mean_wait);
  EXPECT_LE(gdt->mean_jct, fifo->mean_jct);
  EXPECT_GT(gdt->gpu_utilisation, 0.0);
  EXPECT_LE(gdt->gpu_utilisation, 1.0);
  EXPECT_LE(gdt->p50_jct, gdt->p99_jct);
  EXPECT_LE(gdt->p99_jct, gdt->max_jct);

  // Deterministic for a seed.
  absl::StatusOr<SimResult> again =
      Simulate(trace, SmallCluster(policy::Mode::kBackfill));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->mean_jct, gdt->mean_jct);
  EXPECT_EQ(again->makespan, gdt->makespan);
}

TEST(SimulateTest, InfeasibleJobsFailInsteadOfWaiting) {
  SimOptions options = SmallCluster(policy::Mode::kBackfill);
  const std::vector<TraceJob> trace = {{0, 0, 64, 100}, {1, 0, 1, 100}};
  absl::StatusOr<SimResult> result = Simulate(trace, options);
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->failed, 1u);  // 8 members of 8 GPUs on 4 hosts.
  EXPECT_EQ(result->finished, 1u);
  EXPECT_FALSE(result->stalled);
}

// Two gangs of 4 members x 8 GPUs submitted together on 4 hosts with one
// runner slot each. When GitLab's pickup interleaves their members, naive
// placement stalls for good; gdt bounces one gang and finishes both.
TEST(SimulateTest, InterleavedGangsStallNaiveButNotGdt) {
  const std::vector<TraceJob> trace = {{0, 0, 32, 1000}, {1, 0, 32, 1000}};
  int interleaved = 0;
  for (uint64_t seed = 0; seed < 10; ++seed) {
    SimOptions options = SmallCluster(policy::Mode::kBackfill);
    options.runner_slots = 4;
    options.seed = seed;
    absl::StatusOr<SimResult> gdt = Simulate(trace, options);
    options.mode = policy::Mode::kNaive;
    absl::StatusOr<SimResult> naive = Simulate(trace, options);
    ASSERT_TRUE(gdt.ok() && naive.ok());

    EXPECT_EQ(gdt->finished, 2u) << "seed " << seed;
    EXPECT_FALSE(gdt->stalled) << "seed " << seed;
    if (gdt->deadlocks > 0) {
      ++interleaved;
      EXPECT_TRUE(naive->stalled) << "seed " << seed;
      EXPECT_EQ(naive->finished, 0u) << "seed " << seed;
    } else {
      EXPECT_EQ(naive->finished, 2u) << "seed " << seed;
    }
  }
  EXPECT_GT(interleaved, 0);
}

TEST(ParseTraceTest, ReadsOptionalPriorityAndPreemptible) {
  absl::StatusOr<std::vector<TraceJob>> jobs = ParseTrace(
      "job_id,submit_time_s,gpus,duration_s,priority,preemptible\n"
      "0,0,8,100,5,0\n1,0,8,100,-2,1\n");
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_THAT(*jobs, SizeIs(2));
  EXPECT_EQ((*jobs)[0].priority, 5);
  EXPECT_EQ((*jobs)[0].preemptible, false);
  EXPECT_EQ((*jobs)[1].priority, -2);
  EXPECT_EQ((*jobs)[1].preemptible, true);
  absl::StatusOr<std::vector<TraceJob>> bad = ParseTrace(
      "job_id,submit_time_s,gpus,duration_s,preemptible\n0,0,8,100,yes\n");
  EXPECT_THAT(bad.status().message(),
              HasSubstr("trace:2: field preemptible: must be 0 or 1"));
}

// A full cluster of long low-priority jobs; an urgent job arrives later.
std::vector<TraceJob> UrgentTrace(bool low_preemptible) {
  std::vector<TraceJob> trace;
  for (int i = 0; i < 4; ++i) {
    trace.push_back(TraceJob{i, 0, 8, 100000, 0, low_preemptible});
  }
  trace.push_back(TraceJob{4, 10000, 8, 1000, 10, std::nullopt});
  return trace;
}

TEST(SimulateTest, HigherPriorityStartsWithinTheGraceByPreempting) {
  SimOptions options = SmallCluster(policy::Mode::kPreempt);
  absl::StatusOr<SimResult> preempt =
      Simulate(UrgentTrace(/*low_preemptible=*/true), options);
  ASSERT_TRUE(preempt.ok()) << preempt.status();
  absl::StatusOr<SimResult> gdt =
      Simulate(UrgentTrace(true), SmallCluster(policy::Mode::kBackfill));
  ASSERT_TRUE(gdt.ok());

  EXPECT_EQ(preempt->finished, 5u);
  EXPECT_EQ(preempt->preemptions, 1u);
  EXPECT_EQ(preempt->jobs_preempted, 1u);
  EXPECT_EQ(preempt->non_preemptible_preempted, 0u);
  // The victim loses at most a checkpoint interval and the grace, and pays
  // one restart: (1,800 + 300 + 120) s x 8 GPUs.
  EXPECT_GT(preempt->lost_gpu_hours, 0.0);
  EXPECT_LE(preempt->lost_gpu_hours, (1800 + 300 + 120) * 8 / 3600.0);
  // Nobody waits long: the urgent job within the grace plus pickup skew,
  // the victim until the urgent job is done.
  EXPECT_LE(preempt->max_wait, 300 + 30 + 1000 + 30 + 1);
  // Without preemption the urgent job waits for a long job to end.
  EXPECT_GT(gdt->max_wait, 80000);
}

TEST(SimulateTest, NonPreemptibleJobsAreNeverStopped) {
  absl::StatusOr<SimResult> result =
      Simulate(UrgentTrace(/*low_preemptible=*/false),
               SmallCluster(policy::Mode::kPreempt));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->finished, 5u);
  EXPECT_EQ(result->preemptions, 0u);
  EXPECT_EQ(result->preemptible_jobs, 1u);  // Only the urgent job.
  EXPECT_GT(result->max_wait, 80000);
}

TEST(ParseTraceTest, AmbiguousColumnsAreRefusedAndABomIsSkipped) {
  // A column named twice, or a quoted field with a comma, would be read
  // from the wrong place.
  EXPECT_THAT(ParseTrace("job_id,submit_time_s,gpus,duration_s,gpus\n"
                         "0,0,1,100,64\n")
                  .status()
                  .message(),
              HasSubstr("trace:1: the header names column gpus twice"));
  absl::StatusOr<std::vector<TraceJob>> quoted = ParseTrace(
      "job_id,model,submit_time_s,gpus,duration_s\n"
      "0,\"a,7,2,\"\"3\"\",b\",0,1,100\n");
  ASSERT_TRUE(quoted.ok()) << quoted.status();
  EXPECT_EQ(quoted->at(0).duration, 100);
  EXPECT_EQ(quoted->at(0).gpus, 1u);
  EXPECT_THAT(ParseTrace("job_id,model,submit_time_s,gpus,duration_s\n"
                         "0,\"a,7,0,1,100\n")
                  .status()
                  .message(),
              HasSubstr("trace:2: a quoted field is not closed"));
  absl::StatusOr<std::vector<TraceJob>> bom = ParseTrace(
      "\xEF\xBB\xBFjob_id,submit_time_s,gpus,duration_s\n"
      "0,0,1,100\n");
  ASSERT_TRUE(bom.ok()) << bom.status();
  EXPECT_EQ(bom->size(), 1u);
}

// Traces exported from other systems: text job ids, counts written as
// decimals by dataframe exports, optional columns left empty, booleans.
TEST(ParseTraceTest, ReadsTextIdsWholeDecimalsAndEmptyOptionalFields) {
  absl::StatusOr<std::vector<TraceJob>> jobs = ParseTrace(
      "job_id,submit_time_s,gpus,duration_s,priority,preemptible\n"
      "app-7f3a,0,8.0,100,,\n"
      " 42 ,5,2,60,3.0,TRUE\n"
      "\"job, quoted\",9,1.,30,-1,false\n");
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 3u);
  EXPECT_EQ(jobs->at(0).Name(), "app-7f3a");
  EXPECT_EQ(jobs->at(0).gpus, 8u);
  EXPECT_EQ(jobs->at(0).priority, 0);
  EXPECT_EQ(jobs->at(0).preemptible, std::nullopt);
  EXPECT_EQ(jobs->at(1).id, 42);
  EXPECT_EQ(jobs->at(1).priority, 3);
  EXPECT_EQ(jobs->at(1).preemptible, true);
  EXPECT_EQ(jobs->at(2).Name(), "job, quoted");
  EXPECT_EQ(jobs->at(2).gpus, 1u);
  EXPECT_EQ(jobs->at(2).preemptible, false);
  // The same text always gets the same number, so draws by id repeat.
  absl::StatusOr<std::vector<TraceJob>> again =
      ParseTrace("job_id,submit_time_s,gpus,duration_s\napp-7f3a,0,8,100\n");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->at(0).id, jobs->at(0).id);
  EXPECT_GE(jobs->at(0).id, 0);

  absl::StatusOr<SimResult> result =
      Simulate(*jobs, SmallCluster(policy::Mode::kBackfill));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->finished, 3u);
}

TEST(ParseTraceTest, NamesWhatIsWrongWithABadLine) {
  const std::string header = "job_id,submit_time_s,gpus,duration_s\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"0,0,1,-5\n", "trace:2: field duration_s: must be"},
      {"0,-1,1,5\n", "field submit_time_s: must be"},
      {"0,nan,1,5\n", "field submit_time_s: must be"},
      {"0,0,1,inf\n", "field duration_s: must be"},
      {"0,0,1,0x10\n", "field duration_s: must be"},
      {"0,0,1,1e300\n", "field duration_s: must be"},
      {"0,0,-2,5\n", "field gpus: must be"},
      {"0,0,x,5\n", "field gpus: must be"},
      {",0,1,5\n", "field job_id: must be 1 to 255 characters"},
      {std::string(256, 'j') + ",0,1,5\n", "field job_id: must be 1 to 255"},
      {"0,0,1\n", "expected at least 4 fields, got 3"},
      {"0,0,1,5\n0,9,2,5\n", "trace:3: field job_id: 0 is already on line 2"},
      {"a,0,1,5\n a ,9,2,5\n", "field job_id: a is already on line 2"},
      {std::string("0,0,1,5\n\x01\x02", 10), "\\x01\\x02"},
  };
  for (const auto& [body, want] : cases) {
    absl::StatusOr<std::vector<TraceJob>> jobs = ParseTrace(header + body);
    EXPECT_EQ(jobs.status().code(), absl::StatusCode::kInvalidArgument) << body;
    EXPECT_THAT(jobs.status().message(), HasSubstr(want)) << body;
  }
  EXPECT_THAT(ParseTrace("job_id,submit_time_s,gpus,duration_s,priority\n"
                         "0,0,1,5,-2147483648\n")
                  .status()
                  .message(),
              HasSubstr("trace:2: field priority: must be"));
  EXPECT_THAT(ParseTrace(header).status().message(), HasSubstr("no jobs"));
  EXPECT_THAT(ParseTrace("").status().message(), HasSubstr("empty"));
}

// Shapes of traces exported from other systems: tab-separated, header names
// in another case or with spaces, submit times as dates, fractions of a GPU
// (shared GPUs) and jobs without GPUs.
TEST(ParseTraceTest, ReadsTheShapesOtherSystemsExport) {
  absl::StatusOr<std::vector<TraceJob>> tabs = ParseTrace(
      "Job_ID\tGPUs\t Submit_Time_S \tDuration_S\tuser\n"
      "a\t2\t10\t60.4\tbob, alice\n"
      "b\t0\t5\t30\t\n");
  ASSERT_TRUE(tabs.ok()) << tabs.status();
  ASSERT_EQ(tabs->size(), 2u);
  EXPECT_EQ(tabs->at(0).Name(), "a");
  EXPECT_EQ(tabs->at(0).gpus, 2u);
  EXPECT_EQ(tabs->at(0).submit, 10);
  EXPECT_EQ(tabs->at(0).duration, 60);
  EXPECT_EQ(tabs->at(0).line, 2u);
  EXPECT_EQ(tabs->at(1).gpus, 0u);

  absl::StatusOr<std::vector<TraceJob>> dates = ParseTrace(
      "job_id,submit_time_s,gpus,duration_s\r\n"
      "1,2020-07-01 12:00:00,0.5,100\r\n"
      "2,2020-07-01T12:00:30.5Z,1.25,100\r\n"
      "3,2020-02-29 00:00:00,8,100\r\n");
  ASSERT_TRUE(dates.ok()) << dates.status();
  EXPECT_EQ(dates->at(0).submit, 1593604800);
  EXPECT_EQ(dates->at(1).submit - dates->at(0).submit, 31);  // 30.5 rounded.
  EXPECT_EQ(dates->at(2).submit, 1582934400);
  // A fraction of a GPU still takes a whole one, and says so.
  EXPECT_EQ(dates->at(0).gpus, 1u);
  EXPECT_TRUE(dates->at(0).gpus_rounded_up);
  EXPECT_EQ(dates->at(1).gpus, 2u);
  EXPECT_FALSE(dates->at(2).gpus_rounded_up);
  absl::StatusOr<SimResult> result =
      Simulate(*dates, SmallCluster(policy::Mode::kBackfill));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->finished, 3u);
  EXPECT_EQ(result->gpus_rounded_up, 2u);
}

// Every refusal is one line naming the source, the line and the field.
TEST(ParseTraceTest, RefusalsNameTheFileTheLineAndTheField) {
  const std::string header = "job_id,submit_time_s,gpus,duration_s\n";
  EXPECT_EQ(
      ParseTrace(header + "0,0,1,10\n1,x,1,10\n", "a.csv").status().message(),
      "a.csv:3: field submit_time_s: must be seconds from 0 to 1e+10 "
      "or a date and time YYYY-MM-DD HH:MM:SS (UTC) from 1970 on: "
      "1,x,1,10");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"0,2020-07-01 12:00:00,1,5\n1,3,1,5\n",
       "a.csv:3: field submit_time_s: seconds, but the first job gives a "
       "date"},
      {"0,3,1,5\n1,2020-07-01 12:00:00,1,5\n",
       "a.csv:3: field submit_time_s: a date, but the first job gives "
       "seconds"},
      {"0,2020-02-30 00:00:00,1,5\n", "a.csv:2: field submit_time_s: must"},
      {"0,2021-02-29 00:00:00,1,5\n", "a.csv:2: field submit_time_s: must"},
      {"0,2020-07-01 25:00:00,1,5\n", "a.csv:2: field submit_time_s: must"},
      {"0,1969-12-31 23:59:59,1,5\n", "a.csv:2: field submit_time_s: must"},
      {"0,1593604800000,1,5\n", "(milliseconds? divide by 1000)"},
      {"0,0,0x8,5\n", "a.csv:2: field gpus: must be a number from 0"},
      {"0,0,1,5\n   \n0,1,1,5\n",
       "a.csv:4: field job_id: 0 is already on "
       "line 2"},
      {"0,0,1,5,\"open\n", "a.csv:2: a quoted field is not closed"},
  };
  for (const auto& [body, want] : cases) {
    absl::StatusOr<std::vector<TraceJob>> jobs =
        ParseTrace(header + body, "a.csv");
    EXPECT_EQ(jobs.status().code(), absl::StatusCode::kInvalidArgument) << body;
    EXPECT_THAT(jobs.status().message(), HasSubstr(want)) << body;
  }
  EXPECT_EQ(
      ParseTrace("job_id;submit_time_s;gpus;duration_s\n0;0;1;5\n", "a.csv")
          .status()
          .message(),
      "a.csv:1: the header must name job_id, submit_time_s, gpus and "
      "duration_s (comma- or tab-separated); it lacks job_id, "
      "submit_time_s, gpus, duration_s: "
      "job_id;submit_time_s;gpus;duration_s");
  EXPECT_THAT(ParseTrace("id,submit_time_s,GPUs,runtime\n0,0,1,5\n", "a.csv")
                  .status()
                  .message(),
              HasSubstr("it lacks job_id, duration_s: "));
  EXPECT_EQ(ParseTrace("\n\r\n", "a.csv").status().message(),
            "a.csv: the trace is empty (no header, no jobs)");
  EXPECT_EQ(ParseTrace(header, "a.csv").status().message(),
            "a.csv: the trace has a header but no jobs");
}

TEST(ShapeForTest, HugeJobsDoNotWrapAround) {
  // gpus + gpus_per_host - 1 used to wrap to 0 members and divide by zero.
  const GangShape shape = ShapeFor(4294967295u, 4294967295u);
  EXPECT_EQ(shape.members, 1u);
  EXPECT_EQ(shape.gpus_per_member, 4294967295u);
}

// Jobs that can never run fail at once instead of crashing or bouncing for
// ever: more GPUs than the cluster, more members than runner slots.
TEST(SimulateTest, JobsThatCanNeverRunFailAtOnce) {
  SimOptions options = SmallCluster(policy::Mode::kPreempt);
  options.runner_slots = 2;
  const std::vector<TraceJob> trace = {
      {0, 0, 4294967291u, 100}, {1, 0, 24, 100}, {2, 0, 16, 100}};
  absl::StatusOr<SimResult> result = Simulate(trace, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->failed, 2u);  // 3 members on 2 slots, and the huge one.
  EXPECT_EQ(result->finished, 1u);
  EXPECT_FALSE(result->stalled);
}

TEST(SimulateTest, RejectsBadOptionsAndDuplicateJobs) {
  const std::vector<TraceJob> trace = {{0, 0, 1, 100}};
  SimOptions skew = SmallCluster(policy::Mode::kBackfill);
  skew.max_pickup_skew = -1;  // Used to divide by zero.
  EXPECT_THAT(Simulate(trace, skew).status().message(),
              HasSubstr("pickup skew"));
  SimOptions grace = SmallCluster(policy::Mode::kPreempt);
  grace.preempt.grace = -300;
  EXPECT_THAT(Simulate(trace, grace).status().message(), HasSubstr("grace"));
  SimOptions huge = SmallCluster(policy::Mode::kBackfill);
  huge.hosts = 100000;
  huge.gpus_per_host = 100000;
  EXPECT_EQ(Simulate(trace, huge).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Simulate({{3, 0, 1, 100}, {3, 5, 1, 100}},
                       SmallCluster(policy::Mode::kBackfill))
                  .status()
                  .message(),
              HasSubstr("job id 3 appears twice"));
}

TEST(SimulateTest, RejectsAnEmptyCluster) {
  SimOptions options;
  options.hosts = 0;
  EXPECT_EQ(Simulate({}, options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gdt::sim
