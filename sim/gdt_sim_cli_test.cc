// The real gdt-sim binary as a user runs it: --compare puts every policy next
// to strict FIFO in one run, and bad flags get gdt's usage exit code.
#include <chrono>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/cli_run.h"
#include "testing/temp_dir.h"

namespace gdt::sim {
namespace {

using test::CliRun;
using test::ReadTextFile;
using test::RunCli;
using test::TempDir;
using test::WriteTextFile;
using ::testing::HasSubstr;
using ::testing::SizeIs;
using ::testing::StartsWith;

const std::string kTraces = GDT_SIM_TRACES;

// Runs gdt-sim with `args`; `stream` "stdout" or "stderr" is kept.
CliRun GdtSim(const std::vector<std::string>& args, const std::string& stream) {
  return RunCli(GDT_SIM_BIN, args, stream, std::chrono::seconds(40));
}

// The first `jobs` jobs of the committed bursty trace (four replays of all
// 3,900 take a minute under the sanitizers on a loaded machine).
std::string BurstyPrefix(const TempDir& dir, size_t jobs) {
  const std::vector<std::string> lines =
      absl::StrSplit(ReadTextFile(kTraces + "/synthetic-bursty.csv"), '\n');
  std::string text;
  for (size_t i = 0; i <= jobs && i < lines.size(); ++i) {
    absl::StrAppend(&text, lines[i], "\n");
  }
  const std::string path = dir.Sub("bursty-prefix.csv");
  WriteTextFile(path, text);
  return path;
}

// The ratios are each policy's figure over FIFO's from the same run, and the
// preempting policies' figures are what a replay of that policy alone prints.
TEST(GdtSimCliTest, CompareGivesEveryPolicyItsRatiosToFifo) {
  TempDir dir;
  const std::string trace = BurstyPrefix(dir, 1000);
  const CliRun compare =
      GdtSim({"--trace", trace, "--compare", "--json"}, "stdout");
  ASSERT_EQ(compare.code, 0) << compare.output;
  const nlohmann::json out = nlohmann::json::parse(compare.output);
  EXPECT_EQ(out["baseline"], "fifo");
  const nlohmann::json& results = out["results"];
  ASSERT_EQ(results.size(), 4u) << out.dump();
  EXPECT_EQ(results[0]["jobs"], 1000);
  EXPECT_EQ(results[0]["policy"], "fifo");
  const double fifo_wait = results[0]["wait_s"]["mean"];
  const double fifo_max = results[0]["wait_s"]["max"];
  ASSERT_GT(fifo_wait, 0);
  for (const nlohmann::json& row : results) {
    const std::string policy = row["policy"];
    SCOPED_TRACE(policy);
    EXPECT_EQ(row["finished"], row["jobs"]);
    EXPECT_DOUBLE_EQ(row["to_fifo"]["mean_wait"].get<double>(),
                     row["wait_s"]["mean"].get<double>() / fifo_wait);
    EXPECT_DOUBLE_EQ(row["to_fifo"]["max_wait"].get<double>(),
                     row["wait_s"]["max"].get<double>() / fifo_max);
    if (policy != "preempt" && policy != "preempt+elastic") continue;
    const CliRun single =
        GdtSim({"--trace", trace, "--policy", policy, "--json"}, "stdout");
    ASSERT_EQ(single.code, 0) << single.output;
    const nlohmann::json alone = nlohmann::json::parse(single.output);
    EXPECT_EQ(alone["wait_s"], row["wait_s"]);
    EXPECT_EQ(alone["preemptions"], row["preemptions"]);
  }
  // Preemption shortens the mean wait on this trace; backfill alone less.
  EXPECT_LT(results[2]["to_fifo"]["mean_wait"].get<double>(),
            results[1]["to_fifo"]["mean_wait"].get<double>());

  // The table has a row per policy, FIFO's at 1.000.
  const CliRun table = GdtSim({"--trace", trace, "--compare"}, "stdout");
  ASSERT_EQ(table.code, 0);
  EXPECT_THAT(table.output, HasSubstr("ratio to strict FIFO"));
  for (const char* policy : {"fifo ", "gdt ", "preempt ", "preempt+elastic "}) {
    EXPECT_THAT(table.output, HasSubstr("\n" + std::string(policy)));
  }
  EXPECT_THAT(table.output, HasSubstr("1.000"));
}

TEST(GdtSimCliTest, BadFlagsGetTheUsageCodeAndOneReason) {
  const std::string trace = kTraces + "/synthetic-bursty.csv";
  const CliRun both =
      GdtSim({"--trace", trace, "--compare", "--policy", "gdt"}, "stderr");
  EXPECT_EQ(both.code, 2) << both.output;
  EXPECT_THAT(both.output, HasSubstr("--compare"));

  const CliRun hosts = GdtSim({"--trace", trace, "--hosts", "many"}, "stderr");
  EXPECT_EQ(hosts.code, 2) << hosts.output;
  EXPECT_THAT(hosts.output, HasSubstr("--hosts"));

  // A trace it cannot read is bad input, not a bad flag.
  const CliRun missing =
      GdtSim({"--trace", kTraces + "/absent.csv", "--compare"}, "stderr");
  EXPECT_EQ(missing.code, 1) << missing.output;
  EXPECT_EQ(missing.output, "gdt-sim: cannot read " + kTraces +
                                "/absent.csv: No such file or directory\n");

  // Values CLI11 would read as something else: an empty number (0), a
  // negative seed (2^64 - 1), an empty cluster.
  for (const std::vector<std::string>& flags :
       std::vector<std::vector<std::string>>{{"--max-skew", ""},
                                             {"--seed", "-1"},
                                             {"--hosts", "0"},
                                             {"--gpus-per-host", "0"}}) {
    std::vector<std::string> args = {"--trace", trace};
    args.insert(args.end(), flags.begin(), flags.end());
    const CliRun bad = GdtSim(args, "stderr");
    EXPECT_EQ(bad.code, 2) << flags[0] << ": " << bad.output;
    EXPECT_THAT(bad.output, HasSubstr(flags[0] + ": ")) << bad.output;
  }

  // A time flag out of range is a bad flag like any other, with or without
  // --compare: one line naming it and the usage exit code, before the trace
  // is read.
  for (const std::vector<std::string>& flags :
       std::vector<std::vector<std::string>>{
           {"--grace", "-1"},
           {"--checkpoint-interval", "-5"},
           {"--max-skew", "-1"},
           {"--restart-overhead", "99999999999"},
           {"--min-run", "-3"},
           {"--aging-step", "-1"},
           {"--timeout-granularity", "-60"},
           {"--compare", "--grace", "-1"}}) {
    std::vector<std::string> args = {"--trace", kTraces + "/absent.csv"};
    args.insert(args.end(), flags.begin(), flags.end());
    const CliRun bad = GdtSim(args, "stderr");
    EXPECT_EQ(bad.code, 2) << flags[0] << ": " << bad.output;
    const std::vector<std::string> lines =
        absl::StrSplit(bad.output, '\n', absl::SkipEmpty());
    ASSERT_THAT(lines, SizeIs(1)) << bad.output;
    EXPECT_THAT(lines[0],
                StartsWith("gdt-sim: " + flags[flags.size() - 2] + ": "))
        << bad.output;
  }

  const CliRun help = GdtSim({"--help"}, "stdout");
  EXPECT_EQ(help.code, 0);
  EXPECT_THAT(help.output, HasSubstr("--compare"));
  EXPECT_THAT(help.output, HasSubstr("0: jobs never checkpoint"));
}

// --reservation-depth takes a whole number from 1 up; anything else is one
// line naming the flag and the usage exit code. Given, it overrides the
// mode's default: preempt's default is 4.
TEST(GdtSimCliTest, ReservationDepthTakesOnlyAPositiveCount) {
  const TempDir dir;
  const std::string trace = BurstyPrefix(dir, 200);
  for (const std::string value : {"0", "-1", "two", "", "1.5"}) {
    const CliRun bad =
        GdtSim({"--trace", trace, "--reservation-depth", value}, "stderr");
    EXPECT_EQ(bad.code, 2) << value << ": " << bad.output;
    // One line naming the flag, as for every other flag.
    const std::vector<std::string> lines =
        absl::StrSplit(bad.output, '\n', absl::SkipEmpty());
    ASSERT_THAT(lines, SizeIs(1)) << value << ": " << bad.output;
    EXPECT_THAT(lines[0], StartsWith("gdt-sim: --reservation-depth: "))
        << value;
  }

  // On 4 hosts the jobs queue: each replay's waits and preemptions, which
  // the depth changes.
  auto replay = [&](const std::string& policy,
                    const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"--trace",  trace,  "--hosts", "4",
                                     "--policy", policy, "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    const CliRun run = GdtSim(args, "stdout");
    EXPECT_EQ(run.code, 0) << run.output;
    const nlohmann::json result =
        nlohmann::json::parse(run.output, nullptr, /*allow_exceptions=*/false);
    if (result.is_discarded()) return std::string("not JSON: ") + run.output;
    return absl::StrCat(result["wait_s"].dump(), " ",
                        result["preemptions"].dump());
  };
  const std::string preempt = replay("preempt", {});
  EXPECT_EQ(replay("preempt", {"--reservation-depth", "4"}), preempt);
  EXPECT_NE(replay("preempt", {"--reservation-depth", "1"}), preempt);
  const std::string gdt = replay("gdt", {});
  EXPECT_EQ(replay("gdt", {"--reservation-depth", "1"}), gdt);
}

// A trace exported from another system (tab-separated, dates, shared GPUs)
// is read, and its rounded-up jobs are counted; a trace it cannot replay is
// one line on stderr naming the file, the line and the field.
TEST(GdtSimCliTest, ForeignTracesAreReadOrRefusedInOneLine) {
  const TempDir dir;
  const std::string tsv = dir.Sub("pai.tsv");
  WriteTextFile(tsv,
                "job_name\tgpus\tsubmit_time_s\tduration_s\n"
                "a\t0.5\t2020-07-01 12:00:00\t600.5\n"
                "b\t8\t2020-07-01 12:00:10\t60\n"
                "c\t0.25\t2020-07-01 12:00:10\t60\n");
  const CliRun missing = GdtSim({"--trace", tsv}, "stderr");
  EXPECT_EQ(missing.code, 1);
  EXPECT_EQ(missing.output,
            absl::StrCat("gdt-sim: ", tsv,
                         ":1: the header must name job_id, submit_time_s, "
                         "gpus and duration_s (comma- or tab-separated); it "
                         "lacks job_id: "
                         "job_name\\tgpus\\tsubmit_time_s\\tduration_s\n"));
  WriteTextFile(tsv,
                "job_id\tgpus\tsubmit_time_s\tduration_s\n"
                "a\t0.5\t2020-07-01 12:00:00\t600.5\n"
                "b\t8\t2020-07-01 12:00:10\t60\n"
                "c\t0.25\t2020-07-01 12:00:10\t60\n");
  const CliRun run = GdtSim({"--trace", tsv, "--json"}, "stdout");
  ASSERT_EQ(run.code, 0) << run.output;
  const nlohmann::json out = nlohmann::json::parse(run.output);
  EXPECT_EQ(out["jobs"], 3);
  EXPECT_EQ(out["finished"], 3);
  EXPECT_EQ(out["gpus_rounded_up"], 2);
  const CliRun text = GdtSim({"--trace", tsv}, "stdout");
  EXPECT_THAT(text.output, HasSubstr("GPUs rounded up 2"));

  const std::string big = dir.Sub("big.csv");
  WriteTextFile(big,
                "job_id,submit_time_s,gpus,duration_s\n0,0,8,60\n"
                "1,5,512,60\n");
  const CliRun large = GdtSim({"--trace", big}, "stderr");
  EXPECT_EQ(large.code, 1);
  EXPECT_EQ(
      large.output,
      absl::StrCat("gdt-sim: ", big,
                   ":3: field gpus: job 1 needs 512 GPUs, more than the "
                   "cluster's 32 x 8 = 256 (--hosts, --gpus-per-host)\n"));
}

// The JSON object of a replay has exactly the fields docs/scheduling.md
// lists, so that scripts reading it do not break silently.
TEST(GdtSimCliTest, JsonHasTheDocumentedFields) {
  const TempDir dir;
  const std::string trace = BurstyPrefix(dir, 50);
  const CliRun run =
      GdtSim({"--trace", trace, "--policy", "preempt", "--json"}, "stdout");
  ASSERT_EQ(run.code, 0) << run.output;
  const nlohmann::json out = nlohmann::json::parse(run.output);
  std::vector<std::string> keys;
  for (const auto& [key, value] : out.items()) keys.push_back(key);
  EXPECT_THAT(
      keys,
      ::testing::UnorderedElementsAre(
          "policy", "backfill_order", "hosts", "gpus_per_host", "runner_slots",
          "seed", "jobs", "finished", "failed", "jct_s", "wait_s",
          "gpu_utilisation", "gpus_rounded_up", "deadlocks", "stalled",
          "stalled_at_s", "makespan_s", "preemptions", "jobs_preempted",
          "max_preemptions_per_job", "lost_gpu_hours", "started_smaller",
          "preemptible_jobs", "non_preemptible_preempted", "replay_wall_s"));
  EXPECT_EQ(out["jct_s"].size(), 4u);
  EXPECT_EQ(out["wait_s"].size(), 3u);
  EXPECT_EQ(out["jobs"], 50);
}

// --decisions writes one line per admission (and preemption), the same on
// every replay of the same input; it cannot go with --compare, and a file
// that cannot be written is one line on stderr.
TEST(GdtSimCliTest, DecisionsListEveryAdmissionTheSameEachTime) {
  const TempDir dir;
  const std::string trace = BurstyPrefix(dir, 50);
  const std::string first = dir.Sub("first.txt");
  const std::string second = dir.Sub("second.txt");
  for (const std::string& path : {first, second}) {
    const CliRun run =
        GdtSim({"--trace", trace, "--policy", "preempt", "--decisions", path},
               "stdout");
    ASSERT_EQ(run.code, 0) << run.output;
  }
  const std::string text = ReadTextFile(first);
  EXPECT_EQ(text, ReadTextFile(second));
  size_t admitted = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const std::vector<std::string> words = absl::StrSplit(line, ' ');
    ASSERT_GE(words.size(), 3u) << line;
    if (words[1] == "admit") ++admitted;
  }
  // Every job of the prefix runs to its end at least once.
  EXPECT_GE(admitted, 50u);

  const CliRun both =
      GdtSim({"--trace", trace, "--compare", "--decisions", dir.Sub("x.txt")},
             "stderr");
  EXPECT_NE(both.code, 0);
  const CliRun unwritable = GdtSim(
      {"--trace", trace, "--decisions", dir.Sub("no/such/dir.txt")}, "stderr");
  EXPECT_EQ(unwritable.code, 1);
  EXPECT_THAT(unwritable.output, HasSubstr("cannot write --decisions file"));
}

}  // namespace
}  // namespace gdt::sim
