#include "coordinator/metrics_server.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"

namespace gdt::coordinator {
namespace {

TEST(MetricsServerTest, ServesMetricsOnAKernelChosenPort) {
  absl::StatusOr<std::unique_ptr<MetricsServer>> server =
      MetricsServer::Start("127.0.0.1:0", [] { return "up 1\n"; });
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = (*server)->bound_address();
  ASSERT_THAT(address, ::testing::StartsWith("127.0.0.1:"));
  const int port = std::stoi(address.substr(address.rfind(':') + 1));
  ASSERT_GT(port, 0);

  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(5);
  client.set_read_timeout(5);
  httplib::Result metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics) << httplib::to_string(metrics.error());
  EXPECT_EQ(metrics->status, 200);
  EXPECT_EQ(metrics->body, "up 1\n");
  EXPECT_THAT(metrics->get_header_value("Content-Type"),
              ::testing::StartsWith("text/plain; version=0.0.4"));

  httplib::Result other = client.Get("/");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 404);
}

TEST(MetricsServerTest, BadOrBusyAddressesAreOneClearError) {
  absl::StatusOr<std::unique_ptr<MetricsServer>> no_port =
      MetricsServer::Start("localhost", [] { return ""; });
  EXPECT_EQ(no_port.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_port.status().message(),
              ::testing::HasSubstr(
                  "metrics_address 'localhost' is not host:port: no port"));

  absl::StatusOr<std::unique_ptr<MetricsServer>> first =
      MetricsServer::Start("127.0.0.1:0", [] { return ""; });
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<std::unique_ptr<MetricsServer>> second =
      MetricsServer::Start((*first)->bound_address(), [] { return ""; });
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), ::testing::HasSubstr("for metrics"));
}

}  // namespace
}  // namespace gdt::coordinator
