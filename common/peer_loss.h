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
// summary settles it. It lists every rank that had failed when torchrun
// looked ("Failures:" and "Root Cause (first observed failure):"; its pick
// of the root cause is by second-resolution times, so the order is not to
// be trusted), each with its exit code and, when the training script
// records its errors (torchrun's @record), the rank's traceback. A rank
// failed on its own, making this member the culprit whatever else its
// output says, when it
//   - was killed by a signal (a negative exit code, "Signal N" traceback);
//   - recorded an error that is not a lost peer (its own exception);
//   - recorded nothing and exited with a code other than 1, the code of an
//     uncaught Python exception: it left deliberately (sys.exit(3),
//     os._exit) or crashed.
// A rank that recorded a lost peer is a victim; one that recorded nothing
// and exited 1 tells nothing (the output decides, as without torchrun).
//
class PeerLossDetector {
 public:
  // Chunks in order, as they arrive; a marker split across chunks counts.
  void Feed(std::string_view chunk);
  // The output shows a lost peer and no local rank failed on its own.
  bool detected() const { return detected_ && !own_failure_; }
  // torchrun's summary shows one of this member's ranks failed on its own
  // (see above).
  bool own_failure() const { return own_failure_; }

 private:
  // One "[N]:" entry of torchrun's failure summary.
  struct FailureEntry {
    bool has_exit_code = false;
    int exit_code = 0;
    bool recorded = false;  // error_file is not "<N/A>".
    bool signal = false;    // traceback : Signal N (...)
    bool lost_peer = false;
  };

  void Line(std::string_view line);
  void EndEntry();

  bool detected_ = false;
  bool own_failure_ = false;
  bool in_summary_ = false;
  bool in_entry_ = false;
  FailureEntry entry_;
  std::string carry_;  // The end of the previous chunks.
  std::string line_;   // The current, unfinished line (bounded).
};

}  // namespace gdt

#endif  // GDT_COMMON_PEER_LOSS_H_
