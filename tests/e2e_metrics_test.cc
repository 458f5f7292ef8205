// End to end: a Prometheus scrape of gdt-coord's /metrics while a real gang
// (gdt-ci run-local → gdt-executor → gdt-coord → gdt-agent, plain shell jobs)
// runs, and after it ends.
#include <chrono>
#include <filesystem>
#include <optional>
#include <sstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "testing/cluster.h"
#include "tests/e2e_util.h"

namespace gdt::test {
namespace {

using std::chrono::seconds;

// GET /metrics from `endpoint` (host:port); nullopt when it cannot be read.
std::optional<std::string> Scrape(const std::string& endpoint) {
  const size_t colon = endpoint.rfind(':');
  int port = 0;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(endpoint.substr(colon + 1), &port)) {
    return std::nullopt;
  }
  httplib::Client client(endpoint.substr(0, colon), port);
  client.set_connection_timeout(2);
  client.set_read_timeout(5);
  httplib::Result result = client.Get("/metrics");
  if (!result || result->status != 200) return std::nullopt;
  return result->body;
}

// The value of the sample named exactly `series` (name plus labels), or -1.
double Sample(const std::string& text, const std::string& series) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(series + " ", 0) == 0) {
      double value = 0;
      if (absl::SimpleAtod(line.substr(series.size() + 1), &value)) {
        return value;
      }
    }
  }
  return -1;
}

TEST(EndToEndMetricsTest, ScrapeAndStatusDuringARunShowTheGang) {
  GdtCluster cluster;
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  ASSERT_FALSE(cluster.metrics_endpoint().empty()) << cluster.Logs();
  ASSERT_TRUE(cluster.StartAgent({.name = "local", .cpu_slots = 2}).ok())
      << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForHosts(1, seconds(20)).ok()) << cluster.Logs();

  // Two members that run until the test releases them.
  const std::string release = cluster.dir().Sub("release");
  const std::string project = MakeShellProject(
      cluster.dir(),
      absl::StrCat("while [ ! -e ", release, " ]; do sleep 0.05; done"));
  std::unique_ptr<Subprocess> run = StartRunLocal(cluster, project, "train");
  ASSERT_NE(run, nullptr);

  std::string during;
  const bool admitted = WaitFor(
      [&] {
        std::optional<std::string> text = Scrape(cluster.metrics_endpoint());
        if (!text.has_value()) return false;
        during = *text;
        return Sample(during, "gdt_gangs_admitted_total") == 1 &&
               Sample(during, "gdt_gangs{state=\"running\"}") == 1;
      },
      seconds(60));
  // While it runs, the operator's view shows it too (and fits 100 columns).
  CommandResult overview =
      RunProcess({BinaryPath("gdt-coord"), "status", "--coordinator",
                  cluster.coordinator_endpoint()},
                 {}, std::chrono::seconds(20));
  absl::StatusOr<nlohmann::json> json_status = cluster.Status();
  WriteFile(release, "");
  ASSERT_TRUE(admitted) << during << cluster.Logs();
  ASSERT_TRUE(overview.status.success()) << overview.output;
  EXPECT_THAT(overview.output, ::testing::HasSubstr("running  train-"))
      << overview.output;
  EXPECT_THAT(overview.output,
              ::testing::HasSubstr("gangs      0 forming, 1 running"))
      << overview.output;
  for (absl::string_view line : absl::StrSplit(overview.output, '\n')) {
    EXPECT_LE(line.size(), 100u) << line;
  }
  ASSERT_TRUE(json_status.ok()) << json_status.status();
  ASSERT_EQ((*json_status)["gangs"].size(), 1u) << json_status->dump();
  const std::string gang_id = (*json_status)["gangs"][0]["gang_id"];
  CommandResult detail =
      RunProcess({BinaryPath("gdt-coord"), "status", "--coordinator",
                  cluster.coordinator_endpoint(), gang_id},
                 {}, std::chrono::seconds(20));
  ASSERT_TRUE(detail.status.success()) << detail.output;
  EXPECT_THAT(detail.output, ::testing::HasSubstr("GANG      " + gang_id))
      << detail.output;
  EXPECT_THAT(detail.output, ::testing::HasSubstr("rank 1  local"))
      << detail.output;
  EXPECT_EQ(Sample(during, "gdt_gang_formation_seconds_count"), 1) << during;
  EXPECT_EQ(Sample(during, "gdt_gang_formation_seconds_bucket{le=\"+Inf\"}"), 1)
      << during;
  EXPECT_GE(Sample(during, "gdt_gang_formation_seconds_sum"), 0) << during;
  EXPECT_EQ(Sample(during, "gdt_gang_admission_wait_seconds_count"), 1)
      << during;
  EXPECT_EQ(Sample(during, "gdt_host_cpu_slots{host=\"local\",state=\"used\"}"),
            2)
      << during;
  EXPECT_EQ(Sample(during, "gdt_rpcs_total{method=\"JoinGang\",code=\"OK\"}"),
            2)
      << during;

  std::string output;
  std::optional<ExitStatus> status = run->WaitUntil(
      std::chrono::steady_clock::now() + seconds(120),
      [&](OutputSource, std::string_view data) { output.append(data); });
  ASSERT_TRUE(status.has_value()) << output << cluster.Logs();
  EXPECT_TRUE(status->success()) << output << cluster.Logs();

  std::string after;
  EXPECT_TRUE(WaitFor(
      [&] {
        std::optional<std::string> text = Scrape(cluster.metrics_endpoint());
        if (!text.has_value()) return false;
        after = *text;
        return Sample(after, "gdt_gangs{state=\"running\"}") == 0;
      },
      seconds(20)))
      << after;
  EXPECT_EQ(Sample(after, "gdt_gangs_admitted_total"), 1) << after;
  EXPECT_EQ(Sample(after, "gdt_failures_total{class=\"exit_nonzero\"}"), -1)
      << after;
  EXPECT_EQ(Sample(after, "gdt_rpcs_total{method=\"LeaveGang\",code=\"OK\"}"),
            2)
      << after;
}

}  // namespace
}  // namespace gdt::test
