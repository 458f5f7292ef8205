#include "coordinator/config.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gdt::coordinator {
namespace {

using ::testing::HasSubstr;

TEST(ConfigTest, EmptyFileGivesDefaults) {
  absl::StatusOr<Config> config = ParseConfig("");

  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->listen_address, "127.0.0.1:7070");
  EXPECT_EQ(config->state_path, "/var/lib/gdt/coord.db");
  EXPECT_EQ(config->master_port_min, 29510u);
  EXPECT_EQ(config->master_port_max, 29999u);
  EXPECT_EQ(config->max_nodes_per_job, 8u);
  EXPECT_EQ(config->heartbeat_interval, std::chrono::seconds(2));
  EXPECT_EQ(config->host_down_after, std::chrono::seconds(10));
  EXPECT_EQ(config->failed_gang_release, std::chrono::seconds(300));
  EXPECT_EQ(config->elastic_wait, std::chrono::seconds(60));
  EXPECT_EQ(config->finished_gang_retention, std::chrono::hours(168));
  EXPECT_EQ(config->log_level, "info");
  EXPECT_EQ(config->advertise_endpoint, "");
  EXPECT_EQ(config->metrics_address, "");  // No metrics endpoint.
}

TEST(ConfigTest, MetricsAddressIsHostAndPort) {
  absl::StatusOr<Config> config =
      ParseConfig("metrics_address: 127.0.0.1:9464\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->metrics_address, "127.0.0.1:9464");

  for (const char* bad :
       {"metrics_address: 9464\n", "metrics_address: host:port\n",
        "metrics_address: host:70000\n"}) {
    absl::StatusOr<Config> rejected = ParseConfig(bad);
    EXPECT_EQ(rejected.status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
    EXPECT_THAT(rejected.status().message(),
                HasSubstr("metrics_address must be host:port"))
        << bad;
  }
}

TEST(ConfigTest, FinishedGangRetentionIsHoursAndZeroKeepsForever) {
  absl::StatusOr<Config> config =
      ParseConfig("finished_gang_retention_hours: 24\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->finished_gang_retention, std::chrono::hours(24));
  config = ParseConfig("finished_gang_retention_hours: 0\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->finished_gang_retention, std::chrono::hours(0));

  for (const char* bad : {"finished_gang_retention_hours: -1\n",
                          "finished_gang_retention_hours: 87601\n",
                          "finished_gang_retention_hours: week\n"}) {
    absl::StatusOr<Config> rejected = ParseConfig(bad);
    EXPECT_EQ(rejected.status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
    EXPECT_THAT(rejected.status().message(),
                HasSubstr("finished_gang_retention_hours must be"))
        << bad;
  }
}

TEST(ConfigTest, ReadsEveryKey) {
  absl::StatusOr<Config> config = ParseConfig(R"(
listen_address: 0.0.0.0:0
advertise_endpoint: coord.example.com:7070
state_path: /tmp/x/coord.db
master_port_range: {min: 30000, max: 30010}
max_nodes_per_job: 16
heartbeat_interval_seconds: 3
host_down_after_seconds: 12
failed_gang_release_seconds: 90
elastic_wait_seconds: 15
log_level: debug
liveness_listen_address: 0.0.0.0:7071
liveness_advertise_endpoint: coord-hb.example.com:7071
join_rate_per_project: 20
join_burst_per_project: 100
checkpoint_record_rate_per_gang: 4
checkpoint_record_burst_per_gang: 128
kv_max_total_mib: 256
)");

  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->listen_address, "0.0.0.0:0");
  EXPECT_EQ(config->advertise_endpoint, "coord.example.com:7070");
  EXPECT_EQ(config->state_path, "/tmp/x/coord.db");
  EXPECT_EQ(config->master_port_min, 30000u);
  EXPECT_EQ(config->master_port_max, 30010u);
  EXPECT_EQ(config->max_nodes_per_job, 16u);
  EXPECT_EQ(config->heartbeat_interval, std::chrono::seconds(3));
  EXPECT_EQ(config->host_down_after, std::chrono::seconds(12));
  EXPECT_EQ(config->failed_gang_release, std::chrono::seconds(90));
  EXPECT_EQ(config->elastic_wait, std::chrono::seconds(15));
  EXPECT_EQ(config->log_level, "debug");
  EXPECT_EQ(config->liveness_listen_address, "0.0.0.0:7071");
  EXPECT_EQ(config->liveness_advertise_endpoint, "coord-hb.example.com:7071");
  EXPECT_EQ(config->join_rate_per_project, 20u);
  EXPECT_EQ(config->join_burst_per_project, 100u);
  EXPECT_EQ(config->checkpoint_record_rate_per_gang, 4u);
  EXPECT_EQ(config->checkpoint_record_burst_per_gang, 128u);
  EXPECT_EQ(config->kv_max_total_mib, 256u);
}

TEST(ConfigTest, LivenessAddressesAreHostAndPortOrOff) {
  absl::StatusOr<Config> off = ParseConfig("liveness_listen_address: off\n");
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->liveness_listen_address, "off");
  for (const char* bad : {"liveness_listen_address: 7071\n",
                          "liveness_advertise_endpoint: off\n"}) {
    absl::StatusOr<Config> rejected = ParseConfig(bad);
    EXPECT_EQ(rejected.status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
    EXPECT_THAT(rejected.status().message(), HasSubstr("must be host:port"))
        << bad;
  }
}

TEST(ConfigTest, AJoinRateNeedsABurstOfAtLeastOne) {
  absl::StatusOr<Config> config =
      ParseConfig("join_rate_per_project: 5\njoin_burst_per_project: 0\n");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().message(),
            "join_burst_per_project must be at least 1 while "
            "join_rate_per_project is set (0 turns the limit off)");
}

TEST(ConfigTest, ACheckpointRecordRateNeedsABurstOfAtLeastOne) {
  absl::StatusOr<Config> config =
      ParseConfig("checkpoint_record_burst_per_gang: 0\n");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().message(),
            "checkpoint_record_burst_per_gang must be at least 1 while "
            "checkpoint_record_rate_per_gang is set (0 turns the limit off)");
  EXPECT_TRUE(ParseConfig("checkpoint_record_rate_per_gang: 0\n"
                          "checkpoint_record_burst_per_gang: 0\n")
                  .ok());
}

TEST(ConfigTest, UnknownKeyIsNamed) {
  absl::StatusOr<Config> config = ParseConfig("listen_address: a:1\nfoo: 1\n");

  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(config.status().message(), "unknown key 'foo'");
}

TEST(ConfigTest, UnknownNestedKeyIsNamed) {
  absl::StatusOr<Config> config =
      ParseConfig("master_port_range: {min: 1, maxx: 2}\n");

  EXPECT_EQ(config.status().message(), "unknown key 'master_port_range.maxx'");
}

TEST(ConfigTest, RejectsBadValues) {
  EXPECT_THAT(ParseConfig("max_nodes_per_job: lots").status().message(),
              HasSubstr("max_nodes_per_job must be a non-negative integer"));
  EXPECT_THAT(ParseConfig("master_port_range: {min: 3000, max: 2000}")
                  .status()
                  .message(),
              HasSubstr("master_port_range must satisfy"));
  EXPECT_THAT(ParseConfig("log_level: loud").status().message(),
              HasSubstr("unknown log_level 'loud'"));
  EXPECT_THAT(ParseConfig("host_down_after_seconds: 1").status().message(),
              HasSubstr("must be larger than heartbeat_interval_seconds"));
  EXPECT_THAT(ParseConfig("[1, 2]").status().message(),
              HasSubstr("must be a YAML map"));
  EXPECT_THAT(ParseConfig("a: [").status().message(), HasSubstr("bad YAML"));
}

TEST(ConfigTest, KvKeyLimit) {
  absl::StatusOr<Config> config = ParseConfig("kv_max_keys_per_gang: 64\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->kv_max_keys_per_gang, 64u);
  EXPECT_EQ(ParseConfig("").value().kv_max_keys_per_gang, 1024u);
  EXPECT_THAT(ParseConfig("kv_max_keys_per_gang: 0").status().message(),
              HasSubstr("kv_max_keys_per_gang must be >= 1"));
}

TEST(ConfigTest, PreemptionSection) {
  const Config defaults = ParseConfig("").value();
  EXPECT_FALSE(defaults.preemption.enabled);
  EXPECT_EQ(defaults.preemption.grace_s, 300);
  EXPECT_EQ(defaults.preemption.max_preemptions, 3u);

  absl::StatusOr<Config> config = ParseConfig(
      "preemption: {enabled: true, grace_seconds: 60, max_preemptions: 2, "
      "checkpoint_interval_seconds: 600, overdue_fraction: 0.5, "
      "served_behind_head: 0}\n");

  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_DOUBLE_EQ(config->preemption.overdue_fraction, 0.5);
  EXPECT_EQ(config->preemption.served_behind_head, 0u);
  EXPECT_DOUBLE_EQ(defaults.preemption.overdue_fraction, 0.85);
  EXPECT_EQ(defaults.preemption.served_behind_head, 8u);
  EXPECT_EQ(
      ParseConfig("preemption: {overdue_fraction: lots}").status().message(),
      "preemption.overdue_fraction must be a number from 0 (off) to "
      "10, like 0.85");
  EXPECT_FALSE(ParseConfig("preemption: {overdue_fraction: -1}").ok());
  EXPECT_FALSE(ParseConfig("preemption: {overdue_fraction: 11}").ok());
  EXPECT_FALSE(ParseConfig("preemption: {served_behind_head: -1}").ok());
  EXPECT_TRUE(config->preemption.enabled);
  EXPECT_EQ(config->preemption.grace_s, 60);
  EXPECT_EQ(config->preemption.max_preemptions, 2u);
  EXPECT_EQ(config->preemption.checkpoint_interval_s, 600);
  EXPECT_EQ(ParseConfig("preemption: {grace: 1}").status().message(),
            "unknown key 'preemption.grace'");
  EXPECT_EQ(ParseConfig("preemption: {enabled: maybe}").status().message(),
            "preemption.enabled must be true or false");
  EXPECT_THAT(ParseConfig("preemption: yes").status().message(),
              HasSubstr("preemption must be a map"));
  EXPECT_EQ(ParseConfig("preemption: {enabled: true, grace_seconds: 0}")
                .status()
                .message(),
            "preemption.grace_seconds must be at least 1");
}

// The server side of TLS needs a certificate and its key.
TEST(ConfigTest, TlsSection) {
  absl::StatusOr<Config> config = ParseConfig(
      "tls: {ca_file: /ca.pem, cert_file: /c.pem, key_file: /k.pem, "
      "require_client_cert: true}\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->tls.enabled);
  EXPECT_TRUE(config->tls.require_client_cert);
  EXPECT_EQ(config->tls.cert_file, "/c.pem");
  EXPECT_TRUE(ParseConfig("tls: off\n")->tls.explicitly_off);
  EXPECT_FALSE(ParseConfig("")->tls.enabled);
  EXPECT_THAT(ParseConfig("tls: {ca_file: /ca.pem}\n").status().message(),
              ::testing::HasSubstr(
                  "tls.cert_file and tls.key_file are required to serve TLS"));
}

TEST(ConfigTest, MissingFileIsNotFound) {
  EXPECT_EQ(LoadConfig("/nonexistent/gdt/coord.yaml").status().code(),
            absl::StatusCode::kNotFound);
}

// The caps on connections to the main port.
TEST(ConfigTest, ConnectionCaps) {
  absl::StatusOr<Config> defaults = ParseConfig("");
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->max_connections_per_peer, 1024u);
  EXPECT_EQ(defaults->max_connections, 8192u);
  absl::StatusOr<Config> config =
      ParseConfig("max_connections_per_peer: 16\nmax_connections: 0\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->max_connections_per_peer, 16u);
  EXPECT_EQ(config->max_connections, 0u);
  EXPECT_FALSE(ParseConfig("max_connections_per_peer: -1\n").ok());
  EXPECT_EQ(defaults->peer_ipv6_prefix_length, 64u);
  for (uint32_t bits : {32u, 56u, 128u}) {
    absl::StatusOr<Config> prefix =
        ParseConfig("peer_ipv6_prefix_length: " + std::to_string(bits) + "\n");
    ASSERT_TRUE(prefix.ok()) << prefix.status();
    EXPECT_EQ(prefix->peer_ipv6_prefix_length, bits);
  }
  for (const char* bad : {"31", "129", "-1", "wide"}) {
    absl::StatusOr<Config> prefix =
        ParseConfig(std::string("peer_ipv6_prefix_length: ") + bad + "\n");
    EXPECT_EQ(prefix.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(prefix.status().message(),
              std::string("peer_ipv6_prefix_length must be an integer "
                          "between 32 and 128, got '") +
                  bad + "'");
  }
}

// The security settings.
TEST(ConfigTest, SecuritySettings) {
  absl::StatusOr<Config> defaults = ParseConfig("");
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->gitlab_url, "");  // No member verification.
  EXPECT_EQ(defaults->admin_token_file, "");
  EXPECT_EQ(defaults->status_without_token, "loopback");
  EXPECT_FALSE(defaults->require_host_tokens);

  absl::StatusOr<Config> config = ParseConfig(
      "gitlab_url: https://gitlab.example.com\n"
      "gitlab_ca_file: /etc/gdt/ca.pem\n"
      "gitlab_timeout_seconds: 3\n"
      "member_cache_seconds: 30\n"
      "admin_token_file: /etc/gdt/admin.token\n"
      "status_without_token: nobody\n"
      "require_host_tokens: true\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->gitlab_url, "https://gitlab.example.com");
  EXPECT_EQ(config->gitlab_ca_file, "/etc/gdt/ca.pem");
  EXPECT_EQ(config->gitlab_timeout, std::chrono::seconds(3));
  EXPECT_EQ(config->member_cache_ttl, std::chrono::seconds(30));
  EXPECT_EQ(config->admin_token_file, "/etc/gdt/admin.token");
  EXPECT_EQ(config->status_without_token, "nobody");
  EXPECT_TRUE(config->require_host_tokens);

  EXPECT_THAT(ParseConfig("status_without_token: lan\n").status().message(),
              HasSubstr("status_without_token must be loopback, anyone or "
                        "nobody, got 'lan'"));
  EXPECT_THAT(
      ParseConfig("gitlab_url: gitlab.example.com\n").status().message(),
      HasSubstr("gitlab_url must start with https://"));
  EXPECT_THAT(ParseConfig("require_host_tokens: maybe\n").status().message(),
              HasSubstr("require_host_tokens must be true or false"));
  absl::StatusOr<Config> instance = ParseConfig(
      "gitlab_url: http://10.0.0.5:8080\n"
      "gitlab_instance_url: https://gitlab.example.com\n");
  ASSERT_TRUE(instance.ok()) << instance.status();
  EXPECT_EQ(instance->gitlab_instance_url, "https://gitlab.example.com");
  EXPECT_THAT(ParseConfig("gitlab_url: https://a.example\n"
                          "gitlab_instance_url: a.example\n")
                  .status()
                  .message(),
              HasSubstr("gitlab_instance_url must start with https://"));
  EXPECT_THAT(ParseConfig("gitlab_instance_url: https://a.example\n")
                  .status()
                  .message(),
              HasSubstr("gitlab_instance_url needs gitlab_url"));
}

// Members verified by GitLab CI ID token instead of the job API.
TEST(ConfigTest, IdTokenVerificationSettings) {
  absl::StatusOr<Config> defaults = ParseConfig("");
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->member_verification, "job_api");
  EXPECT_EQ(defaults->jwks_url, "");
  EXPECT_EQ(defaults->jwks_refresh_interval, std::chrono::seconds(30));

  absl::StatusOr<Config> config = ParseConfig(
      "gitlab_url: https://gitlab.example.com\n"
      "member_verification: id_token\n"
      "id_token_audience: https://gdt.example.com\n"
      "jwks_refresh_seconds: 5\n"
      "jwks_url: https://gitlab.example.com/oauth/discovery/keys\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->member_verification, "id_token");
  EXPECT_EQ(config->id_token_audience, "https://gdt.example.com");
  EXPECT_EQ(config->jwks_url,
            "https://gitlab.example.com/oauth/discovery/keys");
  EXPECT_EQ(config->jwks_refresh_interval, std::chrono::seconds(5));

  EXPECT_THAT(ParseConfig("member_verification: jwt\n").status().message(),
              HasSubstr("member_verification must be job_api or id_token, "
                        "got 'jwt'"));
  EXPECT_THAT(ParseConfig("member_verification: id_token\n"
                          "id_token_audience: gdt\n")
                  .status()
                  .message(),
              HasSubstr("member_verification: id_token needs gitlab_url"));
  EXPECT_THAT(ParseConfig("gitlab_url: https://gitlab.example.com\n"
                          "member_verification: id_token\n")
                  .status()
                  .message(),
              HasSubstr("needs id_token_audience"));
  EXPECT_THAT(ParseConfig("jwks_url: gitlab/keys\n").status().message(),
              HasSubstr("jwks_url must start with https://"));
  EXPECT_THAT(ParseConfig("jwks_refresh_seconds: 0\n").status().message(),
              HasSubstr("jwks_refresh_seconds must be between 1 and 3600, "
                        "got 0"));
}

}  // namespace
// HA.
TEST(ConfigTest, ReadsTheEtcdSettings) {
  absl::StatusOr<Config> config = ParseConfig(
      "state_store: etcd\n"
      "etcd_endpoints: [10.0.0.1:2379, 10.0.0.2:2379]\n"
      "etcd_cluster: prod\n"
      "lease_ttl_s: 3\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->state_store, "etcd");
  EXPECT_EQ(config->etcd_endpoints,
            (std::vector<std::string>{"10.0.0.1:2379", "10.0.0.2:2379"}));
  EXPECT_EQ(config->etcd_cluster, "prod");
  EXPECT_EQ(config->lease_ttl_s, 3u);

  absl::StatusOr<Config> joined =
      ParseConfig("state_store: etcd\netcd_endpoints: \"a:1, b:2\"\n");
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(joined->etcd_endpoints, (std::vector<std::string>{"a:1", "b:2"}));
}

TEST(ConfigTest, BadEtcdSettingsAreNamed) {
  for (const auto& [yaml, expected] :
       std::vector<std::pair<std::string, std::string>>{
           {"state_store: redis\n", "state_store must be sqlite or etcd"},
           {"state_store: etcd\n", "needs etcd_endpoints"},
           {"state_store: etcd\netcd_endpoints: [nohost]\n",
            "must be host:port, got 'nohost'"},
           {"state_store: etcd\netcd_endpoints: [a:1]\nlease_ttl_s: 1\n",
            "lease_ttl_s must be 2..60"}}) {
    absl::StatusOr<Config> config = ParseConfig(yaml);
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument)
        << yaml;
    EXPECT_THAT(config.status().message(), ::testing::HasSubstr(expected))
        << yaml;
  }
}

}  // namespace gdt::coordinator
