#include "executor/peer_loss.h"

#include <algorithm>

namespace gdt::executor {
namespace {

constexpr std::string_view kMarkers[] = {
    "Connection reset by peer",                            // gloo, sockets.
    "Connection closed by peer",                           // gloo.
    "remote process exited or there was a network error",  // NCCL.
    "NCCL communicator was aborted",
};
// Longer than every marker, so a split marker is always seen whole.
constexpr size_t kCarry = 64;

}  // namespace

void PeerLossDetector::Feed(std::string_view chunk) {
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

}  // namespace gdt::executor
