#include "ctl/dashboard.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/secret.h"
#include "common/subprocess.h"
#include "ctl/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "testing/temp_dir.h"

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

size_t Count(const std::string& text, char c) {
  return static_cast<size_t>(std::count(text.begin(), text.end(), c));
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

DashboardRequest From(const std::string& peer,
                      const std::string& authorization = "",
                      const std::string& host = "127.0.0.1:8481",
                      bool forwarded = false) {
  return {peer, authorization, host, forwarded};
}

TEST(DashboardTest, ReadersFollowTheStatusRule) {
  const DashboardAccess open;
  EXPECT_TRUE(
      CheckDashboardReader(open, From("10.1.2.3", "", "coord:8481")).ok());
  const DashboardAccess loopback{SecretSha256Hex("t"), "loopback"};
  EXPECT_TRUE(CheckDashboardReader(loopback, From("127.0.0.1")).ok());
  EXPECT_TRUE(CheckDashboardReader(loopback, From("::1")).ok());
  EXPECT_TRUE(CheckDashboardReader(loopback, From("::ffff:127.0.0.1")).ok());
  EXPECT_EQ(CheckDashboardReader(loopback, From("10.1.2.3")).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(CheckDashboardReader(loopback, From("10.1.2.3", "Bearer x")).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(
      CheckDashboardReader(loopback, From("10.1.2.3", "Bearer t")).ok());
  const DashboardAccess anyone{SecretSha256Hex("t"), "anyone"};
  EXPECT_TRUE(CheckDashboardReader(anyone, From("10.1.2.3")).ok());
}

// A proxy on the coordinator's host connects from loopback: what it passes
// on says so, and its readers need the token as any remote reader does.
TEST(DashboardTest, AProxiedRequestIsNotALoopbackReader) {
  const DashboardAccess loopback{SecretSha256Hex("t"), "loopback"};
  EXPECT_EQ(CheckDashboardReader(loopback,
                                 From("127.0.0.1", "", "coord.example", true))
                .code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(CheckDashboardReader(loopback, From("127.0.0.1", "Bearer t",
                                                  "coord.example", true))
                  .ok());

  absl::StatusOr<std::unique_ptr<Dashboard>> dashboard = Dashboard::Start(
      "127.0.0.1:0", loopback,
      [](uint32_t, const std::string&) { return OneHostOneGang(); });
  ASSERT_TRUE(dashboard.ok()) << dashboard.status();
  httplib::Client client = ClientFor(**dashboard);
  for (const char* header : {"X-Forwarded-For", "X-Real-IP", "Forwarded"}) {
    httplib::Result proxied =
        client.Get("/api/status", {{header, "for=203.0.113.9"}});
    ASSERT_TRUE(proxied);
    EXPECT_EQ(proxied->status, 401) << header;
    EXPECT_THAT(proxied->body, ::testing::Not(HasSubstr("gpu-01"))) << header;
  }
  httplib::Result direct = client.Get("/api/status");
  ASSERT_TRUE(direct);
  EXPECT_EQ(direct->status, 200);
}

// DNS rebinding: a page from attacker.example that resolves to 127.0.0.1
// reaches the dashboard from loopback but names its own host.
TEST(DashboardTest, WithoutATokenOnlyALoopbackHostIsServedToLoopback) {
  for (const DashboardAccess& access :
       {DashboardAccess{}, DashboardAccess{SecretSha256Hex("t"), "loopback"},
        DashboardAccess{SecretSha256Hex("t"), "anyone"}}) {
    for (const char* host : {"localhost", "localhost:8481", "LOCALHOST.:1",
                             "app.localhost:80", "127.0.0.1", "127.1.2.3:8481",
                             "[::1]:8481", "[::1]", "coord.internal:9000"}) {
      EXPECT_TRUE(CheckDashboardReader(access, From("127.0.0.1", "", host),
                                       "coord.internal")
                      .ok())
          << host;
    }
    for (const char* host :
         {"attacker.example", "attacker.example:8481", "127.0.0.1.nip.io",
          "localhost.attacker.example", "[::2]:80", "0.0.0.0:8481"}) {
      const absl::Status refused =
          CheckDashboardReader(access, From("127.0.0.1", "", host), "0.0.0.0");
      EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied) << host;
      EXPECT_THAT(refused.message(), HasSubstr("DNS rebinding")) << host;
    }
  }
  // A valid token is enough whatever the Host.
  const DashboardAccess loopback{SecretSha256Hex("t"), "loopback"};
  EXPECT_TRUE(CheckDashboardReader(
                  loopback, From("127.0.0.1", "Bearer t", "attacker.example"))
                  .ok());
  // Remote readers name the machine as they know it.
  EXPECT_TRUE(CheckDashboardReader(DashboardAccess{},
                                   From("10.1.2.3", "", "coord.example:8481"))
                  .ok());

  absl::StatusOr<std::unique_ptr<Dashboard>> dashboard = Dashboard::Start(
      "127.0.0.1:0", {},
      [](uint32_t, const std::string&) { return OneHostOneGang(); });
  ASSERT_TRUE(dashboard.ok()) << dashboard.status();
  httplib::Client client = ClientFor(**dashboard);
  httplib::Result rebound =
      client.Get("/api/status", {{"Host", "attacker.example:80"}});
  ASSERT_TRUE(rebound);
  EXPECT_EQ(rebound->status, 403);
  EXPECT_THAT(rebound->body, ::testing::Not(HasSubstr("gpu-01")));
  EXPECT_EQ(Count(rebound->body, '\n'), 1u) << rebound->body;
  EXPECT_THAT(nlohmann::json::parse(rebound->body)["error"].get<std::string>(),
              HasSubstr("'attacker.example:80'"));
  httplib::Result local = client.Get("/api/status", {{"Host", "localhost"}});
  ASSERT_TRUE(local);
  EXPECT_EQ(local->status, 200);
}

// Query values need not be UTF-8, and errors may quote them: every answer
// is a JSON line naming the parameter, never an empty 500.
TEST(DashboardTest, QueryValuesThatAreNotUtf8AreA400NamingTheParameter) {
  absl::StatusOr<std::unique_ptr<Dashboard>> dashboard = Dashboard::Start(
      "127.0.0.1:0", {},
      [](uint32_t,
         const std::string& token) -> absl::StatusOr<v1::GetStatusResponse> {
        // As the coordinator does: quote the first 64 bytes of the token.
        if (!token.empty()) {
          return absl::InvalidArgumentError(
              absl::StrCat("page_token '", token.substr(0, 64),
                           "' is not one this coordinator's GetStatus issued"));
        }
        return OneHostOneGang();
      });
  ASSERT_TRUE(dashboard.ok()) << dashboard.status();
  httplib::Client client = ClientFor(**dashboard);
  // Longer than the 32 and 64 bytes the messages quote, cut mid-character
  // when counted in bytes.
  std::string cut_limit = "a";
  for (int i = 0; i < 40; ++i) cut_limit += "%C3%A9";
  const std::string cut_token = cut_limit;
  for (const auto& [query, parameter] :
       {std::pair<std::string, std::string>{"limit=%ff", "limit '"},
        {"limit=" + cut_limit, "limit '"},
        {"page_token=%ff", "page_token '"},
        {"page_token=" + cut_token, "page_token '"},
        {"limit=%1b%5b2J", "limit '"}}) {
    httplib::Result answer = client.Get("/api/status?" + query);
    ASSERT_TRUE(answer) << query;
    EXPECT_EQ(answer->status, 400) << query;
    EXPECT_FALSE(answer->has_header("EXCEPTION_WHAT")) << query;
    EXPECT_EQ(Count(answer->body, '\n'), 1u) << answer->body;
    const nlohmann::json error = nlohmann::json::parse(answer->body);
    EXPECT_THAT(error["error"].get<std::string>(), HasSubstr(parameter))
        << query;
  }
}

TEST(DashboardTest, AnExceptionInAHandlerIsA500JsonLine) {
  absl::StatusOr<std::unique_ptr<Dashboard>> dashboard = Dashboard::Start(
      "127.0.0.1:0", {},
      [](uint32_t,
         const std::string&) -> absl::StatusOr<v1::GetStatusResponse> {
        throw std::runtime_error("secret internals");
      });
  ASSERT_TRUE(dashboard.ok()) << dashboard.status();
  httplib::Client client = ClientFor(**dashboard);
  httplib::Result answer = client.Get("/api/status");
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 500);
  EXPECT_FALSE(answer->has_header("EXCEPTION_WHAT"));
  EXPECT_THAT(answer->body, ::testing::Not(HasSubstr("secret internals")));
  EXPECT_THAT(nlohmann::json::parse(answer->body)["error"].get<std::string>(),
              HasSubstr("could not answer"));
}

TEST(DashboardTest, AnAddressOpenToTheNetworkWithoutATokenIsWarnedAbout) {
  const DashboardAccess none;
  const DashboardAccess token{SecretSha256Hex("t"), "loopback"};
  const DashboardAccess anyone{SecretSha256Hex("t"), "anyone"};
  EXPECT_EQ(DashboardExposureWarning("127.0.0.1:8481", none), "");
  EXPECT_EQ(DashboardExposureWarning("localhost:8481", anyone), "");
  EXPECT_EQ(DashboardExposureWarning("[::1]:8481", none), "");
  EXPECT_EQ(DashboardExposureWarning("0.0.0.0:8481", token), "");
  const std::string open = DashboardExposureWarning("0.0.0.0:8481", none);
  EXPECT_THAT(open, HasSubstr("0.0.0.0:8481"));
  EXPECT_THAT(open, HasSubstr("no admin_token_file"));
  EXPECT_THAT(open, HasSubstr("plain HTTP"));
  EXPECT_EQ(open.find('\n'), std::string::npos);
  EXPECT_THAT(DashboardExposureWarning("10.0.0.5:8481", anyone),
              HasSubstr("status_without_token: anyone"));
}

std::string FindChromium() {
  for (const char* path : {"/usr/bin/chromium", "/usr/bin/chromium-browser",
                           "/usr/local/bin/chromium"}) {
    if (access(path, X_OK) == 0) return path;
  }
  return "";
}

// In a real browser: a #token= that is not valid %-encoding is reported on
// the page as a refused token is, instead of leaving it at "connecting".
TEST(DashboardTest, ChromiumReportsAMalformedTokenInTheAddress) {
  const std::string chromium = FindChromium();
  ASSERT_FALSE(chromium.empty())
      << "chromium is missing: scripts/setup.sh installs it";
  absl::StatusOr<std::unique_ptr<Dashboard>> dashboard = Dashboard::Start(
      "127.0.0.1:0", {SecretSha256Hex("s3cret"), "nobody"},
      [](uint32_t, const std::string&) { return OneHostOneGang(); });
  ASSERT_TRUE(dashboard.ok()) << dashboard.status();
  test::TempDir dir;
  SpawnOptions options;
  options.argv = {chromium,
                  "--headless=new",
                  "--no-sandbox",
                  "--disable-gpu",
                  "--no-first-run",
                  "--disable-extensions",
                  "--disable-background-networking",
                  "--user-data-dir=" + dir.Sub("profile"),
                  "--virtual-time-budget=5000",
                  "--dump-dom",
                  (*dashboard)->url() + "#token=%E0%A4%A"};
  options.env = {{"HOME", dir.path()},
                 {"PATH", "/usr/local/bin:/usr/bin:/bin"}};
  absl::StatusOr<std::unique_ptr<Subprocess>> browser =
      Subprocess::Spawn(options);
  ASSERT_TRUE(browser.ok()) << browser.status();
  std::string dom;
  std::string log;
  const std::optional<ExitStatus> exit = (*browser)->WaitUntil(
      std::chrono::steady_clock::now() + std::chrono::seconds(90),
      [&](OutputSource source, std::string_view chunk) {
        (source == OutputSource::kStdout ? dom : log).append(chunk);
      });
  ASSERT_TRUE(exit.has_value()) << "chromium did not finish\n" << log;
  ASSERT_TRUE(exit->success()) << log;
  EXPECT_THAT(dom, HasSubstr("the token in the address is malformed")) << dom;
  EXPECT_THAT(dom, HasSubstr("data-state=\"error\"")) << dom;
  EXPECT_THAT(dom, ::testing::Not(HasSubstr("gpu-01"))) << dom;
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
