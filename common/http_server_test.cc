#include "common/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/host_port.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "testing/wait.h"

namespace gdt {
namespace {

using ::gdt::test::WaitFor;
using std::chrono::milliseconds;
using std::chrono::seconds;

std::unique_ptr<HttpServer> StartServer(const HttpServer::Limits& limits) {
  std::vector<HttpServer::Route> routes;
  routes.push_back({"/ok", [](const httplib::Request&, httplib::Response& res) {
                      res.set_content("ok", "text/plain");
                    }});
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(
      "127.0.0.1:0", "test_address", "the test", std::move(routes), limits);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

// A client that sends a request one byte at a time and never finishes it,
// each byte well within the server's read timeout.
class TricklingClient {
 public:
  explicit TricklingClient(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&address),
                         sizeof(address)) == 0;
    thread_ = std::thread([this] {
      const std::string request = "GET /ok HTTP/1.1\r\nX-Slow: ";
      size_t i = 0;
      while (!stop_) {
        const char byte = i < request.size() ? request[i] : 'a';
        ++i;
        if (send(fd_, &byte, 1, MSG_NOSIGNAL) != 1) {
          cut_ = true;
          return;
        }
        ++sent_;
        std::this_thread::sleep_for(milliseconds(100));
      }
    });
  }
  ~TricklingClient() {
    stop_ = true;
    thread_.join();
    close(fd_);
  }
  bool connected() const { return connected_; }
  // The server shut the connection down.
  bool cut() const { return cut_; }
  int bytes_sent() const { return sent_; }

 private:
  int fd_ = -1;
  bool connected_ = false;
  std::atomic<bool> stop_{false};
  std::atomic<bool> cut_{false};
  std::atomic<int> sent_{0};
  std::thread thread_;
};

int PortOf(const HttpServer& server) {
  absl::StatusOr<HostPort> parsed = ParseHostPort(server.bound_address());
  return parsed.ok() ? parsed->port : -1;
}

TEST(HttpServerTest, AClientThatNeverFinishesItsRequestDoesNotStopTheStop) {
  std::unique_ptr<HttpServer> server = StartServer(HttpServer::Limits());
  ASSERT_NE(server, nullptr);
  TricklingClient slow(PortOf(*server));
  ASSERT_TRUE(slow.connected());
  // Let the server take the connection on one of its threads.
  std::this_thread::sleep_for(milliseconds(300));

  std::future<void> stopped =
      std::async(std::launch::async, [&server] { server.reset(); });

  ASSERT_EQ(stopped.wait_for(seconds(20)), std::future_status::ready)
      << "the server did not stop while a client trickled its request";
}

TEST(HttpServerTest, TricklingClientsDoNotHoldEveryThread) {
  HttpServer::Limits limits;
  limits.threads = 2;
  limits.max_connection_age = milliseconds(2000);
  limits.check_interval = milliseconds(100);
  std::unique_ptr<HttpServer> server = StartServer(limits);
  ASSERT_NE(server, nullptr);
  std::vector<std::unique_ptr<TricklingClient>> slow;
  for (int i = 0; i < 4; ++i) {
    slow.push_back(std::make_unique<TricklingClient>(PortOf(*server)));
    ASSERT_TRUE(slow.back()->connected());
  }

  // The slow clients came first and hold both threads; a request that
  // comes after them is served once they have had their time.
  for (const auto& trickling : slow) {
    ASSERT_TRUE(
        WaitFor([&] { return trickling->bytes_sent() >= 5; }, seconds(20)));
  }
  httplib::Client client(server->bound_address());
  client.set_connection_timeout(seconds(30));
  client.set_read_timeout(seconds(30));
  const auto start = std::chrono::steady_clock::now();
  httplib::Result result = client.Get("/ok");
  const auto waited = std::chrono::steady_clock::now() - start;

  ASSERT_TRUE(result) << httplib::to_string(result.error());
  EXPECT_EQ(result->status, 200);
  EXPECT_EQ(result->body, "ok");
  // The slow clients are cut after their age, not when they give up.
  EXPECT_LT(waited, seconds(15));
  for (const auto& trickling : slow) {
    EXPECT_TRUE(WaitFor([&] { return trickling->cut(); }, seconds(20)));
  }
}

}  // namespace
}  // namespace gdt
