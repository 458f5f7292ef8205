#ifndef GDT_COMMON_PEER_LOSS_H_
#define GDT_COMMON_PEER_LOSS_H_

#include <string>
#include <string_view>

namespace gdt {

// Watches a user stage's output for signs that its processes lost a peer —
// a collective broke because another member died first ("Connection reset
// by peer" from gloo, NCCL's "remote process exited or there was a network
// error", ...). A member whose script then fails reports that, so the
// coordinator can blame the member that really failed (the root
// cause names the member whose training was killed, not the survivor whose
// collective broke a moment earlier).
//
// A member that runs several local ranks sees both: when one of its own
// ranks dies, its other ranks lose that peer too. torchrun's failure
// summary settles it: its "Root Cause (first observed failure)" names the
// local rank that failed first with its exit code, and a negative exit code
// (or a "Signal N" traceback) means that rank was killed, i.e. this member
// failed first. Such a member is not a victim whatever else its output says.
//
// Not thread-safe; feed it from the one output thread.
class PeerLossDetector {
 public:
  // Chunks in order, as they arrive; a marker split across chunks counts.
  void Feed(std::string_view chunk);
  // The output shows a lost peer and no local rank killed first.
  bool detected() const { return detected_ && !own_rank_killed_; }
  // torchrun named one of this member's ranks, killed by a signal, as the
  // first failure.
  bool own_rank_killed() const { return own_rank_killed_; }

 private:
  void Line(std::string_view line);

  bool detected_ = false;
  bool own_rank_killed_ = false;
  bool in_root_cause_ = false;
  std::string carry_;  // The end of the previous chunks.
  std::string line_;   // The current, unfinished line (bounded).
};

}  // namespace gdt

#endif  // GDT_COMMON_PEER_LOSS_H_
