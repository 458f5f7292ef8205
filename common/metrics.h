// A small metric registry with Prometheus text exposition (format 0.0.4):
// counters, gauges and histograms, each a family of series told apart by
// labels. No HTTP and no gRPC here; a server renders Render() on a scrape.
#ifndef GDT_COMMON_METRICS_H_
#define GDT_COMMON_METRICS_H_

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/mutex.h"

namespace gdt {

// Label name/value pairs of one series, in the order they are rendered.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// Thread-safe. Families must be declared (with their help text, and bucket
// bounds for histograms) before series are updated; updates to an undeclared
// family, or to a family of another type, are ignored (a programming error
// that must not take the daemon down).
class MetricRegistry {
 public:
  void DeclareCounter(const std::string& name, const std::string& help);
  void DeclareGauge(const std::string& name, const std::string& help);
  // `bounds` are the upper bounds of the buckets, ascending; +Inf is implied.
  void DeclareHistogram(const std::string& name, const std::string& help,
                        std::vector<double> bounds);

  // Adds `by` (>= 0) to a counter series, creating it at 0 first.
  void Increment(const std::string& name, const MetricLabels& labels = {},
                 double by = 1);
  // Creates a counter series at 0 if it does not exist, so that dashboards
  // see it before the first event.
  void Touch(const std::string& name, const MetricLabels& labels = {});
  void SetGauge(const std::string& name, const MetricLabels& labels,
                double value);
  // Removes every series of a gauge family (before setting a fresh set).
  void ClearGauge(const std::string& name);
  void Observe(const std::string& name, const MetricLabels& labels,
               double value);

  // Current value of a counter or gauge series; 0 when absent. For tests.
  double Value(const std::string& name, const MetricLabels& labels = {}) const;

  // Every family in declaration order, in the Prometheus text format.
  std::string Render() const;

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Series {
    double value = 0;               // Counter or gauge.
    std::vector<uint64_t> buckets;  // Histogram: per bucket, not cumulative.
    uint64_t count = 0;
    double sum = 0;
  };
  struct Family {
    std::string name;
    std::string help;
    Type type = Type::kCounter;
    std::vector<double> bounds;
    std::map<MetricLabels, Series> series;
  };

  void Declare(const std::string& name, const std::string& help, Type type,
               std::vector<double> bounds);
  Family* Find(const std::string& name, Type type)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable Mutex mu_;
  std::vector<Family> families_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, size_t, std::less<>> index_ ABSL_GUARDED_BY(mu_);
};

// Formats a sample value as Prometheus expects: integers without a fraction,
// "+Inf", "-Inf", "NaN", else up to 10 significant digits.
std::string FormatMetricValue(double value);

// Escapes a label value: backslash, double quote and newline.
std::string EscapeLabelValue(std::string_view value);

}  // namespace gdt

#endif  // GDT_COMMON_METRICS_H_
