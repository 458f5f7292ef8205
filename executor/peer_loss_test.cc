#include "executor/peer_loss.h"

#include "gtest/gtest.h"

namespace gdt::executor {
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

}  // namespace
}  // namespace gdt::executor
