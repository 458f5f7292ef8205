// Small helpers shared by the benchmark programs: percentiles, a one-line
// report format, process RSS. Benchmarks are plain programs (no pass/fail):
// scripts/bench.sh runs them and docs/benchmarks.md records their output.
#ifndef GDT_BENCH_BENCH_UTIL_H_
#define GDT_BENCH_BENCH_UTIL_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace gdt::bench {

struct Stats {
  size_t n = 0;
  double p50 = 0;
  double p99 = 0;
  double max = 0;
  double mean = 0;
};

// Nearest-rank percentiles of `samples` (any unit).
inline Stats Summarize(std::vector<double> samples) {
  Stats stats;
  stats.n = samples.size();
  if (samples.empty()) return stats;
  std::sort(samples.begin(), samples.end());
  auto rank = [&](double p) {
    size_t index = static_cast<size_t>(p * static_cast<double>(samples.size()));
    if (index > 0 &&
        static_cast<double>(index) == p * static_cast<double>(samples.size())) {
      --index;
    }
    return samples[std::min(index, samples.size() - 1)];
  };
  stats.p50 = rank(0.50);
  stats.p99 = rank(0.99);
  stats.max = samples.back();
  double sum = 0;
  for (double sample : samples) sum += sample;
  stats.mean = sum / static_cast<double>(samples.size());
  return stats;
}

inline double MillisSince(std::chrono::steady_clock::time_point start,
                          std::chrono::steady_clock::time_point end) {
  return std::chrono::duration<double, std::milli>(end - start).count();
}

// "MET" or "MISSED" for a value against an upper bound.
inline const char* Verdict(double value, double bound) {
  return value <= bound ? "MET" : "MISSED";
}

// Resident set size of process `pid` ("self" for this one), in MiB; -1 when
// it cannot be read.
inline double RssMiB(const std::string& pid = "self") {
  std::ifstream status("/proc/" + pid + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      return std::stod(line.substr(6)) / 1024.0;  // kB.
    }
  }
  return -1;
}

}  // namespace gdt::bench

#endif  // GDT_BENCH_BENCH_UTIL_H_
