#include "executor/config.h"

#include <chrono>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gdt::executor {
namespace {

using ::testing::HasSubstr;

TEST(ConfigTest, ParsesEveryKey) {
  absl::StatusOr<Config> config = ParseConfig(R"(
coordinator: coord.example:7070
builds_root: /srv/builds
cache_root: /srv/cache
arrival_host: runner-3
join_timeout_seconds: 120
rpc_timeout_seconds: 5
exit_barrier_timeout_seconds: 900
exit_report_retry_seconds: 7
kill_grace_seconds: 60
log_level: debug
)");

  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->coordinator, "coord.example:7070");
  EXPECT_EQ(config->builds_root, "/srv/builds");
  EXPECT_EQ(config->cache_root, "/srv/cache");
  EXPECT_EQ(config->arrival_host, "runner-3");
  EXPECT_EQ(config->join_timeout, std::chrono::seconds(120));
  EXPECT_EQ(config->rpc_timeout, std::chrono::seconds(5));
  EXPECT_EQ(config->exit_barrier_timeout, std::chrono::seconds(900));
  EXPECT_EQ(config->exit_report_retry, std::chrono::seconds(7));
  EXPECT_EQ(config->kill_grace, std::chrono::seconds(60));
  EXPECT_EQ(config->log_level, "debug");
}

TEST(ConfigTest, FillsDefaults) {
  absl::StatusOr<Config> config = ParseConfig("coordinator: c:1\n");

  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->builds_root, "/var/lib/gdt/builds");
  EXPECT_EQ(config->cache_root, "/var/lib/gdt/cache");
  EXPECT_FALSE(config->arrival_host.empty());
  EXPECT_EQ(config->join_timeout, std::chrono::seconds(3600));
  EXPECT_EQ(config->rpc_timeout, std::chrono::seconds(10));
  EXPECT_EQ(config->exit_barrier_timeout, std::chrono::seconds(600));
  EXPECT_EQ(config->kill_grace, std::chrono::seconds(0));  // The agent's.
  EXPECT_THAT(ParseConfig("coordinator: c:1\nkill_grace_seconds: 600\n")
                  .status()
                  .message(),
              HasSubstr("kill_grace_seconds must be at most 290"));
  EXPECT_EQ(config->log_level, "warn");
}

TEST(ConfigTest, UnknownKeyIsNamed) {
  absl::StatusOr<Config> config =
      ParseConfig("coordinator: c:1\ncoordinater: c:2\n");

  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(config.status().message(), HasSubstr("coordinater"));
}

TEST(ConfigTest, RejectsBadValues) {
  EXPECT_THAT(ParseConfig("builds_root: /b\n").status().message(),
              HasSubstr("coordinator"));
  EXPECT_THAT(ParseConfig("coordinator: c:1\njoin_timeout_seconds: 0\n")
                  .status()
                  .message(),
              HasSubstr("join_timeout_seconds"));
  EXPECT_FALSE(
      ParseConfig("coordinator: c:1\nrpc_timeout_seconds: soon\n").ok());
  EXPECT_THAT(
      ParseConfig("coordinator: c:1\nbuilds_root: rel\n").status().message(),
      HasSubstr("builds_root"));
  EXPECT_THAT(
      ParseConfig("coordinator: c:1\nlog_level: loud\n").status().message(),
      HasSubstr("loud"));
  EXPECT_FALSE(ParseConfig("- a\n- b\n").ok());
  EXPECT_FALSE(ParseConfig("coordinator: [\n").ok());
}

// `coordinator:` with nothing after it is YAML's null: refused naming the
// key, as when the key is missing, never read as a host called "null".
TEST(ConfigTest, AKeyWithoutAValueIsNamed) {
  for (const char* key : {"coordinator", "builds_root", "cache_root",
                          "arrival_host", "log_level"}) {
    for (const char* value : {"", " ~", " null", " ''"}) {
      std::string yaml = absl::StrCat(key, ":", value, "\n");
      if (std::string_view(key) != "coordinator") {
        yaml = absl::StrCat("coordinator: c:1\n", yaml);
      }
      absl::StatusOr<Config> config = ParseConfig(yaml);
      EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument)
          << yaml;
      EXPECT_THAT(config.status().message(),
                  HasSubstr(absl::StrCat("'", key, "' has no value")))
          << yaml;
    }
  }
  // A quoted "null" is text like any other.
  absl::StatusOr<Config> quoted =
      ParseConfig("coordinator: c:1\narrival_host: 'null'\n");
  ASSERT_TRUE(quoted.ok()) << quoted.status();
  EXPECT_EQ(quoted->arrival_host, "null");
}

// The executor is a TLS client only; a CA alone is enough.
TEST(ConfigTest, TlsSection) {
  absl::StatusOr<Config> config =
      ParseConfig("coordinator: c:1\ntls: {ca_file: /ca.pem}\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->tls.enabled);
  EXPECT_EQ(config->tls.ca_file, "/ca.pem");
  EXPECT_THAT(ParseConfig("coordinator: c:1\ntls: {cert_file: /c.pem}\n")
                  .status()
                  .message(),
              HasSubstr("tls.cert_file and tls.key_file must be given "
                        "together"));
  EXPECT_THAT(ParseConfig("coordinator: c:1\ntls: yes\n").status().message(),
              HasSubstr("tls must be 'off' or a map"));
}

TEST(ConfigTest, LoadConfigNamesMissingFile) {
  absl::StatusOr<Config> config = LoadConfig("/nonexistent/executor.yaml");

  EXPECT_EQ(config.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(config.status().message(),
              HasSubstr("/nonexistent/executor.yaml"));
}

TEST(ConfigTest, ConfigPathPrefersFlagThenEnvironment) {
  const std::map<std::string, std::string> with_env = {
      {"GDT_EXECUTOR_CONFIG", "/env.yaml"}};

  EXPECT_EQ(ResolveConfigPath("/flag.yaml", with_env), "/flag.yaml");
  EXPECT_EQ(ResolveConfigPath("", with_env), "/env.yaml");
  EXPECT_EQ(ResolveConfigPath("", {}), "/etc/gdt/executor.yaml");
}

}  // namespace
}  // namespace gdt::executor
