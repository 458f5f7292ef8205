#include "common/peer_loss.h"

#include <algorithm>

#include "absl/strings/numbers.h"

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

bool HasMarker(std::string_view text) {
  for (std::string_view marker : kMarkers) {
    if (text.find(marker) != std::string_view::npos) return true;
  }
  return false;
}

std::string_view Trimmed(std::string_view line) {
  const size_t start = line.find_first_not_of(' ');
  if (start == std::string_view::npos) return {};
  line.remove_prefix(start);
  return line.substr(0, line.find_last_not_of(' ') + 1);
}

}  // namespace

void PeerLossDetector::EndEntry() {
  if (!in_entry_) return;
  in_entry_ = false;
  const FailureEntry& entry = entry_;
  const bool killed =
      entry.signal || (entry.has_exit_code && entry.exit_code < 0);
  const bool own_error = entry.recorded && !entry.lost_peer;
  const bool left_on_its_own = !entry.recorded && entry.has_exit_code &&
                               entry.exit_code != 0 && entry.exit_code != 1;
  if (killed || own_error || left_on_its_own) own_failure_ = true;
}

void PeerLossDetector::Line(std::string_view line) {
  const std::string_view text = Trimmed(line);
  if (text == "Failures:" || text.find("Root Cause (first observed failure)") !=
                                 std::string_view::npos) {
    EndEntry();
    in_summary_ = true;
    return;
  }
  if (!in_summary_) return;
  if (text.substr(0, 5) == "=====") {
    EndEntry();
    in_summary_ = false;
    return;
  }
  if (text.substr(0, 5) == "-----") {
    EndEntry();
    return;
  }
  // "[0]:" opens an entry.
  if (text.size() >= 4 && text.front() == '[' &&
      text.substr(text.size() - 2) == "]:") {
    int index = 0;
    const std::string_view digits = text.substr(1, text.size() - 3);
    if (absl::SimpleAtoi(absl::string_view(digits.data(), digits.size()),
                         &index)) {
      EndEntry();
      in_entry_ = true;
      entry_ = FailureEntry{};
      return;
    }
  }
  if (!in_entry_) return;
  // "  exitcode  : -9 (pid: 4711)".
  if (std::string_view code = SummaryValue(line, "exitcode"); !code.empty()) {
    const std::string_view number = code.substr(0, code.find(' '));
    entry_.has_exit_code = absl::SimpleAtoi(
        absl::string_view(number.data(), number.size()), &entry_.exit_code);
  }
  if (std::string_view file = SummaryValue(line, "error_file"); !file.empty()) {
    entry_.recorded = Trimmed(file) != "<N/A>";
  }
  // "  traceback : Signal 9 (SIGKILL) received by PID 4711".
  if (SummaryValue(line, "traceback").substr(0, 7) == "Signal ") {
    entry_.signal = true;
  }
  if (HasMarker(line)) entry_.lost_peer = true;
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
