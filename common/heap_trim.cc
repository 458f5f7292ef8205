#include "common/heap_trim.h"

#include <malloc.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <utility>

namespace gdt {
namespace {

// RssAnon from /proc/self/status, in bytes; 0 when it cannot be read.
size_t ResidentAnonBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("RssAnon:", 0) == 0) {
      return std::stoull(line.substr(8)) * 1024;  // "RssAnon:  1234 kB".
    }
  }
  return 0;
}

}  // namespace

HeapTrimmer::Hooks HeapTrimmer::SystemHooks() {
  Hooks hooks;
  hooks.read = [] {
    HeapReading reading;
    reading.resident_anon_bytes = ResidentAnonBytes();
    const struct mallinfo2 info = mallinfo2();
    reading.allocated_bytes = info.uordblks + info.hblkhd;
    return reading;
  };
  hooks.trim = [] { malloc_trim(0); };
  return hooks;
}

HeapTrimmer::HeapTrimmer(size_t min_release_bytes, int max_calls_between_trims,
                         Hooks hooks)
    : min_release_bytes_(min_release_bytes),
      max_calls_between_trims_(std::max(1, max_calls_between_trims)),
      hooks_(std::move(hooks)),
      baseline_slack_(Slack(hooks_.read())) {}

size_t HeapTrimmer::Slack(const HeapReading& reading) {
  return reading.resident_anon_bytes > reading.allocated_bytes
             ? reading.resident_anon_bytes - reading.allocated_bytes
             : 0;
}

size_t HeapTrimmer::MaybeTrim() {
  const HeapReading before = hooks_.read();
  const size_t slack = Slack(before);
  const bool due = slack >= baseline_slack_ + min_release_bytes_;
  // Memory given back by other means lowers the bar for the next trim.
  if (!due && slack < baseline_slack_) baseline_slack_ = slack;
  if (calls_until_trim_ > 0) {
    --calls_until_trim_;
    return 0;
  }
  if (!due) {
    calls_between_trims_ = std::max(1, calls_between_trims_ / 2);
    return 0;
  }
  hooks_.trim();
  calls_until_trim_ = calls_between_trims_ - 1;
  calls_between_trims_ =
      std::min(2 * calls_between_trims_, max_calls_between_trims_);
  const HeapReading after = hooks_.read();
  baseline_slack_ = Slack(after);
  return before.resident_anon_bytes > after.resident_anon_bytes
             ? before.resident_anon_bytes - after.resident_anon_bytes
             : 0;
}

}  // namespace gdt
