#include "common/peer_loss.h"

#include <algorithm>

namespace gdt {
namespace {

constexpr std::string_view kMarkers[] = {
    "Connection reset by peer",                            // gloo, sockets.
    "Connection closed by peer",                           // gloo.
    "remote process exited or there was a network error",  // NCCL.
    "NCCL communicator was aborted",
};
// Longer than every marker, so a split marker is always seen whole.
constexpr size_t kCarry = 64;
// Longer lines are cut; torchrun's summary lines are short.
constexpr size_t kMaxLine = 4096;

// The value after "key : " in a torchrun summary line, else empty.
std::string_view SummaryValue(std::string_view line, std::string_view key) {
  const size_t start = line.find_first_not_of(' ');
  if (start == std::string_view::npos) return {};
  line.remove_prefix(start);
  if (line.substr(0, key.size()) != key) return {};
  line.remove_prefix(key.size());
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos ||
      line.substr(0, colon).find_first_not_of(' ') != std::string_view::npos) {
    return {};
  }
  line.remove_prefix(colon + 1);
  const size_t value = line.find_first_not_of(' ');
  return value == std::string_view::npos ? std::string_view()
                                         : line.substr(value);
}

}  // namespace

void PeerLossDetector::Line(std::string_view line) {
  if (line.find("Root Cause (first observed failure)") !=
      std::string_view::npos) {
    in_root_cause_ = true;
    return;
  }
  if (!in_root_cause_) return;
  if (line.find("=====") != std::string_view::npos) {
    in_root_cause_ = false;
    return;
  }
  // "  exitcode  : -9 (pid: 4711)" or "  traceback : Signal 9 (SIGKILL)
  // received by PID 4711".
  if (std::string_view code = SummaryValue(line, "exitcode");
      !code.empty() && code.front() == '-') {
    own_rank_killed_ = true;
  }
  if (SummaryValue(line, "traceback").substr(0, 7) == "Signal ") {
    own_rank_killed_ = true;
  }
}

void PeerLossDetector::Feed(std::string_view chunk) {
  for (char c : chunk) {
    if (c == '\n' || c == '\r') {
      Line(line_);
      line_.clear();
    } else if (line_.size() < kMaxLine) {
      line_.push_back(c);
    }
  }
  if (detected_) return;
  carry_.append(chunk.data(), chunk.size());
  for (std::string_view marker : kMarkers) {
    if (carry_.find(marker) != std::string::npos) {
      detected_ = true;
      carry_.clear();
      return;
    }
  }
  if (carry_.size() > kCarry) carry_.erase(0, carry_.size() - kCarry);
}

}  // namespace gdt
