#include "ctl/dashboard.h"

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
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
  absl::StatusOr<std::unique_ptr<Dashboard>> dashboard = Dashboard::Start(
      "127.0.0.1:0", {}, [&](uint32_t, const std::string&) { return status; });
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
  nlohmann::json expected =
      nlohmann::json::parse(RenderStatusJson(status, true));
  expected["next_page_token"] = "";  // All of it fits one page.
  EXPECT_EQ(nlohmann::json::parse(api->body), expected);

  httplib::Result missing = client.Get("/etc/passwd");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
}

TEST(DashboardTest, AFailedFetchIsA503WithTheReason) {
  absl::StatusOr<std::unique_ptr<Dashboard>> dashboard = Dashboard::Start(
      "127.0.0.1:0", {},
      [](uint32_t,
         const std::string&) -> absl::StatusOr<v1::GetStatusResponse> {
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
  absl::StatusOr<std::unique_ptr<Dashboard>> dashboard = Dashboard::Start(
      "127.0.0.1:0", access,
      [](uint32_t, const std::string&) { return OneHostOneGang(); });
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

// Pages `hosts` hosts named h0, h1, ... as GetStatus does: the token is
// the index of the next host.
absl::StatusOr<v1::GetStatusResponse> HostPage(int hosts, uint32_t limit,
                                               const std::string& token) {
  int start = 0;
  if (!token.empty() && !absl::SimpleAtoi(token, &start)) {
    return absl::InvalidArgumentError(
        "page_token 'x' is not one this "
        "coordinator gave out");
  }
  v1::GetStatusResponse page;
  for (int i = start; i < hosts && i < start + static_cast<int>(limit); ++i) {
    v1::HostStatus* host = page.add_hosts();
    host->mutable_host()->set_name(absl::StrCat("h", i));
    host->set_state(v1::HOST_STATE_UP);
  }
  if (start + static_cast<int>(limit) < hosts) {
    page.set_next_page_token(absl::StrCat(start + limit));
  }
  return page;
}

TEST(DashboardTest, StatusIsPagedWithLimitAndPageToken) {
  std::vector<uint32_t> limits;
  absl::StatusOr<std::unique_ptr<Dashboard>> dashboard = Dashboard::Start(
      "127.0.0.1:0", {}, [&](uint32_t limit, const std::string& token) {
        limits.push_back(limit);
        return HostPage(3, limit, token);
      });
  ASSERT_TRUE(dashboard.ok()) << dashboard.status();
  httplib::Client client = ClientFor(**dashboard);

  httplib::Result first = client.Get("/api/status?limit=2");
  ASSERT_TRUE(first);
  ASSERT_EQ(first->status, 200) << first->body;
  const nlohmann::json one = nlohmann::json::parse(first->body);
  ASSERT_EQ(one["hosts"].size(), 2u);
  EXPECT_EQ(one["hosts"][1]["name"], "h1");
  EXPECT_EQ(one["summary"]["hosts_up"], 2);  // This page's.
  ASSERT_EQ(one["next_page_token"], "2");

  httplib::Result second =
      client.Get("/api/status?limit=2&page_token=" +
                 one["next_page_token"].get<std::string>());
  ASSERT_TRUE(second);
  ASSERT_EQ(second->status, 200) << second->body;
  const nlohmann::json two = nlohmann::json::parse(second->body);
  ASSERT_EQ(two["hosts"].size(), 1u);
  EXPECT_EQ(two["hosts"][0]["name"], "h2");
  EXPECT_EQ(two["next_page_token"], "");

  // No limit, 0, or too many: the largest page.
  ASSERT_TRUE(client.Get("/api/status"));
  ASSERT_TRUE(client.Get("/api/status?limit=0"));
  ASSERT_TRUE(client.Get("/api/status?limit=5000"));
  EXPECT_EQ(limits, (std::vector<uint32_t>{2, 2, 1000, 1000, 1000}));

  httplib::Result bad_limit = client.Get("/api/status?limit=ten");
  ASSERT_TRUE(bad_limit);
  EXPECT_EQ(bad_limit->status, 400);
  EXPECT_EQ(nlohmann::json::parse(bad_limit->body)["error"],
            "limit 'ten' is not a whole number of items (0 = 1000)");
  httplib::Result bad_token = client.Get("/api/status?page_token=x");
  ASSERT_TRUE(bad_token);
  EXPECT_EQ(bad_token->status, 400);
  EXPECT_THAT(
      nlohmann::json::parse(bad_token->body)["error"].get<std::string>(),
      HasSubstr("page_token 'x'"));
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
  absl::StatusOr<std::unique_ptr<Dashboard>> no_port = Dashboard::Start(
      "localhost", {},
      [](uint32_t, const std::string&) { return v1::GetStatusResponse(); });
  EXPECT_EQ(no_port.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(no_port.status().message(),
            "dashboard_address 'localhost' is not host:port: no port");

  absl::StatusOr<std::unique_ptr<Dashboard>> first = Dashboard::Start(
      "127.0.0.1:0", {},
      [](uint32_t, const std::string&) { return v1::GetStatusResponse(); });
  ASSERT_TRUE(first.ok());
  absl::StatusOr<std::unique_ptr<Dashboard>> second = Dashboard::Start(
      (*first)->bound_address(), {},
      [](uint32_t, const std::string&) { return v1::GetStatusResponse(); });
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr("for the dashboard"));
}

}  // namespace
}  // namespace gdt::ctl
