#include "ctl/dashboard.h"

#include "common/secret.h"
#include "ctl/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

namespace gdt::ctl {
namespace {

using ::testing::HasSubstr;

v1::GetStatusResponse OneHostOneGang() {
  v1::GetStatusResponse status;
  v1::HostStatus* host = status.add_hosts();
  host->mutable_host()->set_name("gpu-01");
  for (int i = 0; i < 4; ++i) host->mutable_host()->add_gpus()->set_index(i);
  host->set_state(v1::HOST_STATE_UP);
  host->add_leased_gpus(1);
  v1::GangStatus* gang = status.add_gangs();
  gang->set_gang_id("g-0123456789abcdef");
  gang->mutable_key()->set_group_name("train <b>x</b>");
  gang->mutable_key()->set_size(1);
  gang->set_state(v1::GANG_STATE_RUNNING);
  v1::MemberStatus* member = gang->add_members();
  member->set_member_index(1);
  member->set_host_name("gpu-01");
  member->set_node_rank(0);
  member->add_gpu_indices(1);
  member->set_present(true);
  return status;
}

httplib::Client ClientFor(const Dashboard& dashboard) {
  const std::string& address = dashboard.bound_address();
  httplib::Client client("127.0.0.1",
                         std::stoi(address.substr(address.rfind(':') + 1)));
  client.set_connection_timeout(5);
  client.set_read_timeout(5);
  return client;
}

TEST(DashboardTest, ServesThePageAndTheStatusJsonOfStatusAllJson) {
  const v1::GetStatusResponse status = OneHostOneGang();
  absl::StatusOr<std::unique_ptr<Dashboard>> dashboard =
      Dashboard::Start("127.0.0.1:0", {}, [&] { return status; });
  ASSERT_TRUE(dashboard.ok()) << dashboard.status();
  EXPECT_THAT((*dashboard)->url(), ::testing::StartsWith("http://127.0.0.1:"));
  httplib::Client client = ClientFor(**dashboard);

  httplib::Result page = client.Get("/");
  ASSERT_TRUE(page) << httplib::to_string(page.error());
  EXPECT_EQ(page->status, 200);
  EXPECT_THAT(page->get_header_value("Content-Type"),
              ::testing::StartsWith("text/html"));
  EXPECT_THAT(page->body, HasSubstr("<script src=\"/dashboard.js\""));
  // Nothing may come from elsewhere: the page must work air-gapped.
  EXPECT_THAT(page->get_header_value("Content-Security-Policy"),
              HasSubstr("default-src 'self'"));
  EXPECT_THAT(page->body, ::testing::Not(HasSubstr("https://")));

  httplib::Result script = client.Get("/dashboard.js");
  ASSERT_TRUE(script);
  EXPECT_EQ(script->status, 200);
  EXPECT_THAT(script->get_header_value("Content-Type"),
              ::testing::StartsWith("text/javascript"));
  EXPECT_THAT(script->body, HasSubstr("/api/status"));

  httplib::Result api = client.Get("/api/status");
  ASSERT_TRUE(api);
  EXPECT_EQ(api->status, 200);
  EXPECT_EQ(api->get_header_value("Cache-Control"), "no-store");
  EXPECT_EQ(nlohmann::json::parse(api->body),
            nlohmann::json::parse(RenderStatusJson(status, true)));

  httplib::Result missing = client.Get("/etc/passwd");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
}

TEST(DashboardTest, AFailedFetchIsA503WithTheReason) {
  absl::StatusOr<std::unique_ptr<Dashboard>> dashboard = Dashboard::Start(
      "127.0.0.1:0", {}, []() -> absl::StatusOr<v1::GetStatusResponse> {
        return absl::UnavailableError("the coordinator is not leading");
      });
  ASSERT_TRUE(dashboard.ok()) << dashboard.status();
  httplib::Client client = ClientFor(**dashboard);
  httplib::Result api = client.Get("/api/status");
  ASSERT_TRUE(api);
  EXPECT_EQ(api->status, 503);
  EXPECT_EQ(nlohmann::json::parse(api->body)["error"],
            "the coordinator is not leading");
}

TEST(DashboardTest, WithAnAdminTokenNobodyReadsWithoutIt) {
  DashboardAccess access{SecretSha256Hex("s3cret"), "nobody"};
  absl::StatusOr<std::unique_ptr<Dashboard>> dashboard =
      Dashboard::Start("127.0.0.1:0", access, [] { return OneHostOneGang(); });
  ASSERT_TRUE(dashboard.ok()) << dashboard.status();
  httplib::Client client = ClientFor(**dashboard);

  httplib::Result none = client.Get("/api/status");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401);
  EXPECT_THAT(none->body, HasSubstr("needs the coordinator's admin token"));
  EXPECT_THAT(none->body, ::testing::Not(HasSubstr("gpu-01")));

  httplib::Result wrong =
      client.Get("/api/status", {{"Authorization", "Bearer guess"}});
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 403);

  httplib::Result right =
      client.Get("/api/status", {{"Authorization", "Bearer s3cret"}});
  ASSERT_TRUE(right);
  EXPECT_EQ(right->status, 200);
  EXPECT_THAT(right->body, HasSubstr("gpu-01"));

  // The page itself holds no data and always loads, so it can ask for the
  // token.
  httplib::Result page = client.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
}

TEST(DashboardTest, ReadersFollowTheStatusRule) {
  const DashboardAccess open;
  EXPECT_TRUE(CheckDashboardReader(open, "10.1.2.3", "").ok());
  const DashboardAccess loopback{SecretSha256Hex("t"), "loopback"};
  EXPECT_TRUE(CheckDashboardReader(loopback, "127.0.0.1", "").ok());
  EXPECT_TRUE(CheckDashboardReader(loopback, "::1", "").ok());
  EXPECT_TRUE(CheckDashboardReader(loopback, "::ffff:127.0.0.1", "").ok());
  EXPECT_EQ(CheckDashboardReader(loopback, "10.1.2.3", "").code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(CheckDashboardReader(loopback, "10.1.2.3", "Bearer x").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(CheckDashboardReader(loopback, "10.1.2.3", "Bearer t").ok());
  const DashboardAccess anyone{SecretSha256Hex("t"), "anyone"};
  EXPECT_TRUE(CheckDashboardReader(anyone, "10.1.2.3", "").ok());
}

TEST(DashboardTest, BadOrBusyAddressesAreOneClearError) {
  absl::StatusOr<std::unique_ptr<Dashboard>> no_port =
      Dashboard::Start("localhost", {}, [] { return v1::GetStatusResponse(); });
  EXPECT_EQ(no_port.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(no_port.status().message(),
            "dashboard_address 'localhost' is not host:port: no port");

  absl::StatusOr<std::unique_ptr<Dashboard>> first = Dashboard::Start(
      "127.0.0.1:0", {}, [] { return v1::GetStatusResponse(); });
  ASSERT_TRUE(first.ok());
  absl::StatusOr<std::unique_ptr<Dashboard>> second = Dashboard::Start(
      (*first)->bound_address(), {}, [] { return v1::GetStatusResponse(); });
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr("for the dashboard"));
}

}  // namespace
}  // namespace gdt::ctl
