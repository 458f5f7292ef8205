#include "common/peer_loss.h"

#include <string>

#include "gtest/gtest.h"

namespace gdt {
namespace {

TEST(PeerLossDetectorTest, SeesGlooAndNcclPeerLoss) {
  PeerLossDetector gloo;
  gloo.Feed(
      "step 3\nRuntimeError: [../gloo/transport/tcp/pair.cc:589] Read "
      "error [10.0.0.2]:6209: Connection reset by peer\n");
  EXPECT_TRUE(gloo.detected());

  PeerLossDetector nccl;
  nccl.Feed(
      "ncclRemoteError: A call failed possibly due to a network error "
      "or a remote process exiting prematurely.\nNCCL WARN: remote "
      "process exited or there was a network error\n");
  EXPECT_TRUE(nccl.detected());
}

TEST(PeerLossDetectorTest, SeesAMarkerSplitAcrossChunks) {
  PeerLossDetector detector;
  detector.Feed(std::string(500, 'x') + "Connection res");
  EXPECT_FALSE(detector.detected());
  detector.Feed("et by peer\n");
  EXPECT_TRUE(detector.detected());
}

TEST(PeerLossDetectorTest, IgnoresOrdinaryFailures) {
  PeerLossDetector detector;
  detector.Feed("Traceback (most recent call last):\nValueError: bad lr\n");
  detector.Feed("Signal 9 (SIGKILL) received by PID 17376\n");
  EXPECT_FALSE(detector.detected());
}

// Member 2 of 2 runs ranks 2 and 3; rank 2 is killed. Rank 3 loses its
// peer, but torchrun's summary names rank 2, killed, as the first failure:
// this member is the culprit.
TEST(PeerLossDetectorTest, OwnRankKilledFirstIsNotAVictim) {
  PeerLossDetector detector;
  detector.Feed(
      "[rank3]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/"
      "pair.cc:534] Connection closed by peer [127.0.0.1]:41234\n");
  EXPECT_TRUE(detector.detected());
  detector.Feed(
      "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
      "============================================================\n"
      "train.py FAILED\n"
      "------------------------------------------------------------\n"
      "Failures:\n"
      "[1]:\n"
      "  time      : 2026-11-25_06:58:01\n"
      "  rank      : 3 (local_rank: 1)\n"
      "  exitcode  : 1 (pid: 4712)\n"
      "  traceback : To enable traceback see: https://pytorch.org/docs/\n"
      "------------------------------------------------------------\n"
      "Root Cause (first observed failure):\n"
      "[0]:\n"
      "  time      : 2026-11-25_06:58:00\n"
      "  rank      : 2 (local_rank: 0)\n"
      "  exitcode  : -");
  detector.Feed(
      "9 (pid: 4711)\n"
      "  traceback : Signal 9 (SIGKILL) received by PID 4711\n"
      "============================================================\n");
  EXPECT_TRUE(detector.own_failure());
  EXPECT_FALSE(detector.detected());
}

// Member 1's ranks both fail on the lost peer: the first observed failure is
// an ordinary exit whose cause is the peer: a victim.
TEST(PeerLossDetectorTest, RootCauseThatLostAPeerStaysAVictim) {
  PeerLossDetector detector;
  detector.Feed(
      "[rank0]: RuntimeError: Connection closed by peer [127.0.0.1]:5000\n"
      "Root Cause (first observed failure):\n"
      "[0]:\n"
      "  rank      : 0 (local_rank: 0)\n"
      "  exitcode  : 1 (pid: 4700)\n"
      "  traceback : To enable traceback see: https://pytorch.org/docs/\n"
      "============================================================\n"
      "  exitcode  : -9 (outside the summary)\n");
  EXPECT_FALSE(detector.own_failure());
  EXPECT_TRUE(detector.detected());
}

// What torchrun 1.13 printed for member 2 of 2 (ranks 2 and 3) when rank 2
// left with sys.exit(3): rank 3 lost its peer, torchrun ended it before it
// failed by itself, and the summary shows rank 2 alone, unrecorded, exit 3.
TEST(PeerLossDetectorTest, RankThatExitedWithItsOwnCodeMakesTheCulprit) {
  PeerLossDetector detector;
  detector.Feed(
      "RuntimeError: [./gloo/transport/tcp/pair.cc:598] Connection closed by "
      "peer [127.0.0.1]:49889\n"
      "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
      "============================================================\n"
      "train.py FAILED\n"
      "------------------------------------------------------------\n"
      "Failures:\n"
      "  <NO_OTHER_FAILURES>\n"
      "------------------------------------------------------------\n"
      "Root Cause (first observed failure):\n"
      "[0]:\n"
      "  time      : 2026-11-25_12:18:15\n"
      "  host      : localhost\n"
      "  rank      : 2 (local_rank: 0)\n"
      "  exitcode  : 3 (pid: 21844)\n"
      "  error_file: <N/A>\n"
      "  traceback : To enable traceback see: "
      "https://pytorch.org/docs/stable/elastic/errors.html\n"
      "============================================================\n");
  EXPECT_TRUE(detector.own_failure());
  EXPECT_FALSE(detector.detected());
}

// Ranks that record their errors (@record): the one that recorded a lost
// peer is a victim even when torchrun calls it the root cause (same second
// as the rank that failed on its own, and listed first); the member is the
// culprit because its other rank recorded its own error.
TEST(PeerLossDetectorTest, RecordedErrorsDecideRankByRank) {
  const std::string summary_start =
      "============================================================\n"
      "train.py FAILED\n"
      "------------------------------------------------------------\n"
      "Failures:\n";
  const std::string victim_entry =
      "[0]:\n"
      "  rank      : 3 (local_rank: 1)\n"
      "  exitcode  : 1 (pid: 22284)\n"
      "  error_file: /tmp/torchelastic_x/none_y/attempt_0/1/error.json\n"
      "  traceback : Traceback (most recent call last):\n"
      "      dist.all_reduce(t)\n"
      "    RuntimeError: [./gloo/transport/tcp/pair.cc:598] Connection "
      "closed by peer [127.0.0.1]:49889\n";
  const std::string own_entry =
      "[1]:\n"
      "  rank      : 2 (local_rank: 0)\n"
      "  exitcode  : 1 (pid: 22285)\n"
      "  error_file: /tmp/torchelastic_x/none_y/attempt_0/0/error.json\n"
      "  traceback : Traceback (most recent call last):\n"
      "    ValueError: loss is NaN\n";
  const std::string root_cause =
      "------------------------------------------------------------\n"
      "Root Cause (first observed failure):\n";
  const std::string end =
      "============================================================\n";

  PeerLossDetector culprit;
  culprit.Feed(summary_start + own_entry + root_cause + victim_entry + end);
  EXPECT_TRUE(culprit.own_failure());
  EXPECT_FALSE(culprit.detected());

  // Only victims: member 1.
  PeerLossDetector victim;
  victim.Feed(summary_start + "  <NO_OTHER_FAILURES>\n" + root_cause +
              victim_entry + end);
  EXPECT_FALSE(victim.own_failure());
  EXPECT_TRUE(victim.detected());
}

}  // namespace
}  // namespace gdt
