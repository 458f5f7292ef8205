// gdt-ckpt's coordinator clients (ckpt/) against a real gdt-coord server on
// 127.0.0.1:0 with a gang's store opened as at admission: manifests recorded
// and listed through CoordinatorRegistry, and the checkpoint notice of two
// members shared through KvNoticeBroadcast.
#include <chrono>
#include <future>
#include <map>
#include <sstream>
#include <string>

#include "ckpt/notice.h"
#include "ckpt/notice_broadcast_client.h"
#include "ckpt/registry_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/coordinator_fixture.h"
#include "testing/temp_dir.h"

namespace gdt {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class CkptCoordinatorTest : public test::InProcessCoordinatorTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(InProcessCoordinatorTest::SetUp());
    ASSERT_NO_FATAL_FAILURE(StartCoordinator());
    env_ = OpenJobGang();
  }

  ckpt::CkptEnv env_;
};

TEST_F(CkptCoordinatorTest, RegistryRecordsAndListsNewestFirst) {
  auto registry = ckpt::RegistryFromEnv(env_, 5s);
  ASSERT_TRUE(registry.ok()) << registry.status();
  ASSERT_NE(*registry, nullptr);
  ASSERT_TRUE((*registry)->Record(4, 0, 101, R"({"step":4})").ok());
  ASSERT_TRUE((*registry)->Record(8, 0, 101, R"({"step":8})").ok());
  absl::StatusOr<std::vector<std::string>> listed = (*registry)->List();
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_THAT(*listed, ElementsAre(R"({"step":8})", R"({"step":4})"));

  ckpt::CkptEnv wrong = env_;
  wrong["GDT_KV_TOKEN"] = "guess";
  auto stranger = ckpt::RegistryFromEnv(wrong, 5s);
  ASSERT_TRUE(stranger.ok());
  absl::Status denied = (*stranger)->Record(1, 0, 1, "{}");
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(denied.message(),
              HasSubstr("checkpoint record: coordinator " +
                        server_->bound_address() + ": wrong gang token"));

  // Outside a gdt job there is no registry; inside one, a missing token is
  // named.
  auto outside = ckpt::RegistryFromEnv({}, 5s);
  ASSERT_TRUE(outside.ok());
  EXPECT_EQ(*outside, nullptr);
  ckpt::CkptEnv no_token = env_;
  no_token.erase("GDT_KV_TOKEN");
  EXPECT_THAT(ckpt::RegistryFromEnv(no_token, 5s).status().message(),
              HasSubstr("GDT_KV_TOKEN is not set"));
}

// Member 1 reaches its notice 1 s in; member 2's own notice is ten minutes
// away, yet it gets the notice within about a second of member 1.
TEST_F(CkptCoordinatorTest, FirstMembersNoticeReachesTheOther) {
  test::TempDir dir;
  const std::string poll = R"(
for i in $(seq 1 100); do test -f "$GDT_CHECKPOINT_NOTICE_FILE" && exit 0; sleep 0.1; done
exit 3)";
  const auto run = [&](const std::string& timeout, const std::string& sub) {
    auto plan = ckpt::PlanNotice({{"CI_JOB_TIMEOUT", timeout},
                                  {"GDT_CHECKPOINT_NOTICE", "599"},
                                  {"GDT_CHECKPOINT_SIGNAL", "none"},
                                  {"GDT_CHECKPOINT_DIR", dir.path() + sub}},
                                 std::chrono::system_clock::now());
    auto broadcast = ckpt::NoticeBroadcastFromEnv(env_);
    std::ostringstream err;
    if (!plan.ok() || !broadcast.ok() || *broadcast == nullptr) {
      return std::make_pair(-1, std::string("setup failed"));
    }
    const int code = ckpt::RunWithNotice({"/bin/bash", "-c", poll},
                                         {{"PATH", "/usr/bin:/bin"}}, *plan,
                                         err, broadcast->get());
    return std::make_pair(code, err.str());
  };
  const auto start = std::chrono::steady_clock::now();
  auto second = std::async(std::launch::async, run, "1200", "/m2");
  auto first = std::async(std::launch::async, run, "600", "/m1");
  const auto [code1, err1] = first.get();
  const auto [code2, err2] = second.get();
  EXPECT_EQ(code1, 0) << err1;
  EXPECT_EQ(code2, 0) << err2;
  EXPECT_THAT(err1, HasSubstr("checkpoint notice: the job times out in"));
  EXPECT_THAT(err2, HasSubstr("checkpoint notice (announced by another "
                              "member of the gang): the job times out in"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_TRUE(server_->coordinator()
                  .kv()
                  .Get({"g-1", 1, "secret"}, ckpt::kNoticeKey)
                  .ok());
}

}  // namespace
}  // namespace gdt
