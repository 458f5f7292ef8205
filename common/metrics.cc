#include "common/metrics.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"

namespace gdt {
namespace {

std::string RenderLabels(const MetricLabels& labels,
                         const std::string& extra_name = "",
                         const std::string& extra_value = "") {
  if (labels.empty() && extra_name.empty()) return "";
  std::string out = "{";
  bool first = true;
  for (const auto& [name, value] : labels) {
    if (!first) out += ",";
    first = false;
    absl::StrAppend(&out, name, "=\"", EscapeLabelValue(value), "\"");
  }
  if (!extra_name.empty()) {
    if (!first) out += ",";
    absl::StrAppend(&out, extra_name, "=\"", extra_value, "\"");
  }
  return out + "}";
}

std::string EscapeHelp(std::string_view help) {
  std::string out;
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string FormatMetricValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == std::floor(value) && std::fabs(value) < 1e15) {
    return absl::StrCat(static_cast<int64_t>(value));
  }
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.10g", value);
  return buffer;
}

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

void MetricRegistry::Declare(const std::string& name, const std::string& help,
                             Type type, std::vector<double> bounds) {
  MutexLock lock(mu_);
  if (index_.count(name) != 0) return;
  index_[name] = families_.size();
  families_.push_back(Family{name, help, type, std::move(bounds), {}});
}

void MetricRegistry::DeclareCounter(const std::string& name,
                                    const std::string& help) {
  Declare(name, help, Type::kCounter, {});
}

void MetricRegistry::DeclareGauge(const std::string& name,
                                  const std::string& help) {
  Declare(name, help, Type::kGauge, {});
}

void MetricRegistry::DeclareHistogram(const std::string& name,
                                      const std::string& help,
                                      std::vector<double> bounds) {
  Declare(name, help, Type::kHistogram, std::move(bounds));
}

MetricRegistry::Family* MetricRegistry::Find(const std::string& name,
                                             Type type) {
  auto found = index_.find(name);
  if (found == index_.end()) return nullptr;
  Family& family = families_[found->second];
  return family.type == type ? &family : nullptr;
}

void MetricRegistry::Increment(const std::string& name,
                               const MetricLabels& labels, double by) {
  if (!(by >= 0)) return;
  MutexLock lock(mu_);
  if (Family* family = Find(name, Type::kCounter)) {
    family->series[labels].value += by;
  }
}

void MetricRegistry::Touch(const std::string& name,
                           const MetricLabels& labels) {
  Increment(name, labels, 0);
}

void MetricRegistry::SetGauge(const std::string& name,
                              const MetricLabels& labels, double value) {
  MutexLock lock(mu_);
  if (Family* family = Find(name, Type::kGauge)) {
    family->series[labels].value = value;
  }
}

void MetricRegistry::ClearGauge(const std::string& name) {
  MutexLock lock(mu_);
  if (Family* family = Find(name, Type::kGauge)) family->series.clear();
}

void MetricRegistry::Observe(const std::string& name,
                             const MetricLabels& labels, double value) {
  MutexLock lock(mu_);
  Family* family = Find(name, Type::kHistogram);
  if (family == nullptr) return;
  Series& series = family->series[labels];
  if (series.buckets.empty()) series.buckets.assign(family->bounds.size(), 0);
  for (size_t i = 0; i < family->bounds.size(); ++i) {
    if (value <= family->bounds[i]) {
      ++series.buckets[i];
      break;
    }
  }
  ++series.count;
  series.sum += value;
}

double MetricRegistry::Value(const std::string& name,
                             const MetricLabels& labels) const {
  MutexLock lock(mu_);
  auto found = index_.find(name);
  if (found == index_.end()) return 0;
  const Family& family = families_[found->second];
  auto series = family.series.find(labels);
  if (series == family.series.end()) return 0;
  return family.type == Type::kHistogram
             ? static_cast<double>(series->second.count)
             : series->second.value;
}

std::string MetricRegistry::Render() const {
  MutexLock lock(mu_);
  std::string out;
  for (const Family& family : families_) {
    const char* type = family.type == Type::kCounter ? "counter"
                       : family.type == Type::kGauge ? "gauge"
                                                     : "histogram";
    absl::StrAppend(&out, "# HELP ", family.name, " ", EscapeHelp(family.help),
                    "\n# TYPE ", family.name, " ", type, "\n");
    for (const auto& [labels, series] : family.series) {
      if (family.type != Type::kHistogram) {
        absl::StrAppend(&out, family.name, RenderLabels(labels), " ",
                        FormatMetricValue(series.value), "\n");
        continue;
      }
      uint64_t cumulative = 0;
      for (size_t i = 0; i < family.bounds.size(); ++i) {
        cumulative += series.buckets[i];
        absl::StrAppend(
            &out, family.name, "_bucket",
            RenderLabels(labels, "le", FormatMetricValue(family.bounds[i])),
            " ", cumulative, "\n");
      }
      absl::StrAppend(&out, family.name, "_bucket",
                      RenderLabels(labels, "le", "+Inf"), " ", series.count,
                      "\n", family.name, "_sum", RenderLabels(labels), " ",
                      FormatMetricValue(series.sum), "\n", family.name,
                      "_count", RenderLabels(labels), " ", series.count, "\n");
    }
  }
  return out;
}

}  // namespace gdt
