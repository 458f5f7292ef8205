#include "common/http_client.h"

#include <atomic>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/sha256.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "testing/temp_dir.h"

namespace gdt {
namespace {

using test::ReadTextFile;
using test::TempDir;
using test::WriteTextFile;
using ::testing::HasSubstr;

// A real HTTP server on 127.0.0.1 (cpp-httplib) with a few routes.
class HttpClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_.Get("/json", [](const httplib::Request&, httplib::Response& res) {
      res.set_header("X-Checksum-Sha256", "abc");
      res.set_content("{\"id\": 7}", "application/json");
    });
    server_.Get("/big", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(std::string(2000, 'x'), "text/plain");
    });
    server_.Get("/missing",
                [](const httplib::Request&, httplib::Response& res) {
                  res.status = 404;
                  res.set_content(std::string(500, 'e'), "text/plain");
                });
    server_.Get("/moved", [](const httplib::Request&, httplib::Response& res) {
      res.set_redirect("/json");
    });
    server_.Get("/slow", [](const httplib::Request&, httplib::Response& res) {
      std::this_thread::sleep_for(std::chrono::seconds(2));
      res.set_content("late", "text/plain");
    });
    server_.Get("/loop", [](const httplib::Request&, httplib::Response& res) {
      std::this_thread::sleep_for(std::chrono::milliseconds(400));
      res.set_redirect("/loop");
    });
    server_.Get("/who", [](const httplib::Request& req,
                           httplib::Response& res) {
      res.set_content(absl::StrCat("token=", req.get_header_value("X-Token")),
                      "text/plain");
    });
    server_.Get("/here", [](const httplib::Request&, httplib::Response& res) {
      res.set_redirect("/who");
    });
    server_.Get(
        "/away", [this](const httplib::Request&, httplib::Response& res) {
          res.set_redirect(
              absl::StrCat("http://127.0.0.1:", other_port_.load(), "/who"));
        });
    server_.Post(
        "/echo", [](const httplib::Request& req, httplib::Response& res) {
          res.set_content(
              absl::StrCat(req.get_header_value("X-Token"), ":", req.body),
              "text/plain");
        });
    server_.Put(
        "/put", [](const httplib::Request& req, httplib::Response& res) {
          res.set_content(absl::StrCat("got ", req.body.size()), "text/plain");
        });
    port_ = server_.bind_to_any_port("127.0.0.1");
    ASSERT_GT(port_, 0);
    // The socket listens already; connections wait for the accept loop.
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  void TearDown() override {
    server_.stop();
    thread_.join();
  }
  std::string Url(const std::string& path) const {
    return absl::StrCat("http://127.0.0.1:", port_, path);
  }

  TempDir dir_;
  httplib::Server server_;
  int port_ = 0;
  std::atomic<int> other_port_{0};  // CredentialsAreNotSentToAnotherOrigin.
  std::thread thread_;
};

TEST_F(HttpClientTest, GetKeepsBodyAndHeaders) {
  HttpClient client;
  absl::StatusOr<HttpResponse> response = client.Send({.url = Url("/json")});
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->body, "{\"id\": 7}");
  EXPECT_EQ(response->Header("x-checksum-sha256"), "abc");
  // The same client again (its connection is kept).
  EXPECT_TRUE(client.Send({.url = Url("/json")}).ok());
}

TEST_F(HttpClientTest, ErrorStatusIsAnAnswerWithItsBodyCut) {
  HttpClient client;
  HttpRequest request{.url = Url("/missing")};
  request.max_error_body_bytes = 100;
  absl::StatusOr<HttpResponse> response = client.Send(request);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 404);
  EXPECT_FALSE(response->ok());
  EXPECT_EQ(response->body.size(), 100u);
}

TEST_F(HttpClientTest, BodyAboveTheCapIsRefused) {
  HttpClient client;
  HttpRequest request{.url = Url("/big")};
  request.max_body_bytes = 1000;
  absl::StatusOr<HttpResponse> response = client.Send(request);
  EXPECT_EQ(response.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(response.status().message(),
              HasSubstr("GET " + Url("/big") +
                        ": the answer is larger than 1000 bytes"));
}

TEST_F(HttpClientTest, DownloadWritesTheFileWithItsSha256) {
  HttpClient client;
  const std::string dest = dir_.path() + "/out";
  absl::StatusOr<HttpResponse> response =
      client.Send({.url = Url("/big"), .download_to = dest});
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(ReadTextFile(dest), std::string(2000, 'x'));
  EXPECT_EQ(response->downloaded_bytes, 2000u);
  EXPECT_EQ(response->downloaded_sha256, Sha256Hex(std::string(2000, 'x')));
  // A refused download leaves no file behind.
  response = client.Send({.url = Url("/missing"), .download_to = dest});
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 404);
  EXPECT_FALSE(std::ifstream(dest).good());
}

TEST_F(HttpClientTest, PostAndPutSendTheirBodies) {
  HttpClient client;
  absl::StatusOr<HttpResponse> posted = client.Send({.method = "POST",
                                                     .url = Url("/echo"),
                                                     .headers = {"X-Token: t"},
                                                     .body = "hello"});
  ASSERT_TRUE(posted.ok()) << posted.status();
  EXPECT_EQ(posted->body, "t:hello");
  const std::string file = dir_.path() + "/in";
  WriteTextFile(file, "12345");
  absl::StatusOr<HttpResponse> put =
      client.Send({.method = "PUT", .url = Url("/put"), .upload_file = file});
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(put->body, "got 5");
  EXPECT_EQ(client
                .Send({.method = "PUT",
                       .url = Url("/put"),
                       .upload_file = dir_.path() + "/none"})
                .status()
                .code(),
            absl::StatusCode::kNotFound);
}

TEST_F(HttpClientTest, RedirectsAreFollowedOnlyWhenAsked) {
  HttpClient plain;
  absl::StatusOr<HttpResponse> response = plain.Send({.url = Url("/moved")});
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 302);
  HttpClient following({.follow_redirects = true});
  response = following.Send({.url = Url("/moved")});
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->body, "{\"id\": 7}");
}

// Credentials stay with their origin: a redirect to another port (another
// server, e.g. object storage) gets the request without them.
TEST_F(HttpClientTest, CredentialsAreNotSentToAnotherOrigin) {
  httplib::Server other;
  other.Get("/who", [](const httplib::Request& req, httplib::Response& res) {
    res.set_content(absl::StrCat("token=", req.get_header_value("X-Token")),
                    "text/plain");
  });
  other_port_ = other.bind_to_any_port("127.0.0.1");
  ASSERT_GT(other_port_, 0);
  std::thread other_thread([&other] { other.listen_after_bind(); });
  absl::StatusOr<HttpResponse> away;
  absl::StatusOr<HttpResponse> here;
  {
    HttpClient client({.follow_redirects = true});
    away = client.Send(
        {.url = Url("/away"), .credential_headers = {"X-Token: secret"}});
    here = client.Send(
        {.url = Url("/here"), .credential_headers = {"X-Token: secret"}});
  }
  other.stop();
  other_thread.join();
  ASSERT_TRUE(away.ok()) << away.status();
  EXPECT_EQ(away->body, "token=");
  ASSERT_TRUE(here.ok()) << here.status();
  EXPECT_EQ(here->body, "token=secret") << here->status;
}

TEST_F(HttpClientTest, TimeoutAndUnreachableAreUnavailable) {
  HttpClient client({.timeout = std::chrono::milliseconds(300)});
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<HttpResponse> response = client.Send({.url = Url("/slow")});
  EXPECT_EQ(response.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(response.status().message(), HasSubstr("GET " + Url("/slow")));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  // Port 1 on loopback: nothing listens.
  response = client.Send({.url = "http://127.0.0.1:1/"});
  EXPECT_EQ(response.status().code(), absl::StatusCode::kUnavailable);
}

// A server that answers each hop slowly with another redirect holds the
// caller no longer than the timeout, not the timeout for every hop.
TEST_F(HttpClientTest, TheTimeoutBoundsTheRedirectsFollowedToo) {
  HttpClient client(
      {.timeout = std::chrono::milliseconds(1000), .follow_redirects = true});
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<HttpResponse> response = client.Send({.url = Url("/loop")});
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(response.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(response.status().message(), HasSubstr(Url("/loop")));
  EXPECT_LT(took, std::chrono::milliseconds(1800));
}

}  // namespace
}  // namespace gdt
