#include "common/metrics.h"

#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gdt {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(MetricRegistryTest, RendersCountersWithHelpTypeAndLabels) {
  MetricRegistry registry;
  registry.DeclareCounter("gdt_failures_total", "Failures by class.");
  registry.Increment("gdt_failures_total", {{"class", "signal"}});
  registry.Increment("gdt_failures_total", {{"class", "signal"}}, 2);

  EXPECT_EQ(registry.Render(),
            "# HELP gdt_failures_total Failures by class.\n"
            "# TYPE gdt_failures_total counter\n"
            "gdt_failures_total{class=\"signal\"} 3\n");
}

TEST(MetricRegistryTest, HistogramBucketsAreCumulativeWithInfSumAndCount) {
  MetricRegistry registry;
  registry.DeclareHistogram("lat_seconds", "Latency.", {0.001, 0.01, 1});
  registry.Observe("lat_seconds", {}, 0.0005);
  registry.Observe("lat_seconds", {}, 0.005);
  registry.Observe("lat_seconds", {}, 0.005);
  registry.Observe("lat_seconds", {}, 5);

  EXPECT_EQ(registry.Render(),
            "# HELP lat_seconds Latency.\n"
            "# TYPE lat_seconds histogram\n"
            "lat_seconds_bucket{le=\"0.001\"} 1\n"
            "lat_seconds_bucket{le=\"0.01\"} 3\n"
            "lat_seconds_bucket{le=\"1\"} 3\n"
            "lat_seconds_bucket{le=\"+Inf\"} 4\n"
            "lat_seconds_sum 5.0105\n"
            "lat_seconds_count 4\n");
}

TEST(MetricRegistryTest, HistogramLabelsComeBeforeLe) {
  MetricRegistry registry;
  registry.DeclareHistogram("rpc_seconds", "RPCs.", {1});
  registry.Observe("rpc_seconds", {{"method", "Heartbeat"}}, 0.5);
  EXPECT_THAT(registry.Render(),
              HasSubstr("rpc_seconds_bucket{method=\"Heartbeat\",le=\"1\"} 1\n"
                        "rpc_seconds_bucket{method=\"Heartbeat\",le=\"+Inf\"} "
                        "1\nrpc_seconds_sum{method=\"Heartbeat\"} 0.5\n"));
}

TEST(MetricRegistryTest, GaugesCanBeClearedAndSetAgain) {
  MetricRegistry registry;
  registry.DeclareGauge("gdt_host_up", "Up.");
  registry.SetGauge("gdt_host_up", {{"host", "old"}}, 1);
  registry.ClearGauge("gdt_host_up");
  registry.SetGauge("gdt_host_up", {{"host", "new"}}, 0);
  const std::string text = registry.Render();
  EXPECT_THAT(text, HasSubstr("gdt_host_up{host=\"new\"} 0\n"));
  EXPECT_THAT(text, Not(HasSubstr("old")));
}

TEST(MetricRegistryTest, EscapesLabelValuesAndHelp) {
  MetricRegistry registry;
  registry.DeclareCounter("c_total", "Back\\slash\nnewline.");
  registry.Touch("c_total", {{"host", "a\"b\\c\nd"}});
  EXPECT_EQ(registry.Render(),
            "# HELP c_total Back\\\\slash\\nnewline.\n"
            "# TYPE c_total counter\n"
            "c_total{host=\"a\\\"b\\\\c\\nd\"} 0\n");
}

TEST(MetricRegistryTest, UndeclaredOrMistypedUpdatesAreIgnored) {
  MetricRegistry registry;
  registry.DeclareGauge("g", "A gauge.");
  registry.Increment("g");          // Wrong type.
  registry.Increment("missing");    // Not declared.
  registry.Increment("g", {}, -1);  // Counters never go down.
  EXPECT_EQ(registry.Render(), "# HELP g A gauge.\n# TYPE g gauge\n");
  EXPECT_EQ(registry.Value("missing"), 0);
}

TEST(FormatMetricValueTest, IntegersFractionsAndSpecials) {
  EXPECT_EQ(FormatMetricValue(3), "3");
  EXPECT_EQ(FormatMetricValue(0.25), "0.25");
  EXPECT_EQ(FormatMetricValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatMetricValue(std::nan("")), "NaN");
}

}  // namespace
}  // namespace gdt
