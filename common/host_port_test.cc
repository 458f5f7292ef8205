#include "common/host_port.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gdt {
namespace {

using ::testing::HasSubstr;

TEST(ParseHostPortTest, NamesAndIpv4) {
  absl::StatusOr<HostPort> name = ParseHostPort("coord.example:7000");
  ASSERT_TRUE(name.ok()) << name.status();
  EXPECT_EQ(name->host, "coord.example");
  EXPECT_EQ(name->port, 7000);

  absl::StatusOr<HostPort> any = ParseHostPort("0.0.0.0:0");
  ASSERT_TRUE(any.ok()) << any.status();
  EXPECT_EQ(any->host, "0.0.0.0");
  EXPECT_EQ(any->port, 0);
}

TEST(ParseHostPortTest, BracketedIpv6) {
  absl::StatusOr<HostPort> loopback = ParseHostPort("[::1]:65535");
  ASSERT_TRUE(loopback.ok()) << loopback.status();
  EXPECT_EQ(loopback->host, "::1");
  EXPECT_EQ(loopback->port, 65535);
}

TEST(ParseHostPortTest, BadInputSaysWhatIsWrong) {
  const struct {
    const char* text;
    const char* why;
  } cases[] = {
      {"coord", "no port"},
      {"coord:", "no port"},
      {":7000", "no host"},
      {"[::1]", "no ':port' after the ']'"},
      {"[::1:7000", "no closing ']'"},
      {"::1:7000", "must be in brackets"},
      {"dns:///coord:7000", "a URL or gRPC target (scheme://, dns:///)"},
      {"http://coord:7000", "is not a host"},
      {"coord:http", "port 'http' is not a number in [0, 65535]"},
      {"coord:65536", "port '65536' is not a number"},
      {"coord:-1", "port '-1' is not a number"},
      {"coord:+7", "port '+7' is not a number"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<HostPort> parsed = ParseHostPort(c.text);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument)
        << c.text;
    EXPECT_THAT(parsed.status().message(),
                HasSubstr(std::string("'") + c.text + "' is not host:port: "))
        << c.text;
    EXPECT_THAT(parsed.status().message(), HasSubstr(c.why)) << c.text;
  }
}

TEST(JoinHostPortTest, BracketsIpv6Only) {
  EXPECT_EQ(JoinHostPort("10.0.0.1", 29500), "10.0.0.1:29500");
  EXPECT_EQ(JoinHostPort("node-1", 0), "node-1:0");
  EXPECT_EQ(JoinHostPort("::1", 7000), "[::1]:7000");
  EXPECT_EQ(JoinHostPort("[::1]", 7000), "[::1]:7000");
}

TEST(JoinHostPortTest, RoundTrips) {
  for (const char* text : {"a:1", "[fe80::1]:2", "127.0.0.1:65535"}) {
    absl::StatusOr<HostPort> parsed = ParseHostPort(text);
    ASSERT_TRUE(parsed.ok()) << text;
    EXPECT_EQ(JoinHostPort(parsed->host, parsed->port), text);
  }
}

TEST(ProbeListenTest, SaysWhyAnAddressCannotBeListenedOn) {
  // A port another process listens on.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)),
            0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t length = sizeof(address);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const std::string busy = JoinHostPort("127.0.0.1", ntohs(address.sin_port));
  const absl::Status in_use = ProbeListen(busy);
  EXPECT_TRUE(absl::IsUnavailable(in_use)) << in_use;
  EXPECT_EQ(in_use.message(), "Address already in use");
  close(fd);
  EXPECT_TRUE(ProbeListen(busy).ok());
  // An address of no interface here (TEST-NET-3).
  EXPECT_EQ(ProbeListen("203.0.113.7:0").message(),
            "Cannot assign requested address");
  EXPECT_TRUE(absl::IsInvalidArgument(ProbeListen("nohost")));
}

}  // namespace
}  // namespace gdt
