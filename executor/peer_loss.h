#ifndef GDT_EXECUTOR_PEER_LOSS_H_
#define GDT_EXECUTOR_PEER_LOSS_H_

#include <string>
#include <string_view>

namespace gdt::executor {

// Watches a user stage's output for signs that its processes lost a peer —
// a collective broke because another member died first ("Connection reset
// by peer" from gloo, NCCL's "remote process exited or there was a network
// error", ...). A member whose script then fails reports that, so the
// coordinator can blame the member that really failed (the root
// cause names the member whose training was killed, not the survivor whose
// collective broke a moment earlier).
//
// Not thread-safe; feed it from the one output thread.
class PeerLossDetector {
 public:
  // Chunks in order, as they arrive; a marker split across chunks counts.
  void Feed(std::string_view chunk);
  bool detected() const { return detected_; }

 private:
  bool detected_ = false;
  std::string carry_;  // The end of the previous chunks.
};

}  // namespace gdt::executor

#endif  // GDT_EXECUTOR_PEER_LOSS_H_
