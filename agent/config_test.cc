#include "agent/config.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gdt::agent {
namespace {

using ::testing::HasSubstr;

TEST(ConfigTest, DefaultsNeedOnlyTheCoordinator) {
  absl::StatusOr<Config> config = ParseConfig("coordinator: coord:7070\n");

  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->coordinator, "coord:7070");
  EXPECT_EQ(config->listen_address, "0.0.0.0:7071");
  EXPECT_EQ(config->advertise_endpoint, "");
  EXPECT_FALSE(config->host.name.empty());  // gethostname()
  EXPECT_EQ(config->host.address, "127.0.0.1");
  EXPECT_TRUE(config->host.gpus.empty());
  EXPECT_EQ(config->host.cpu_slots, 1u);
  EXPECT_EQ(config->host.runner_slots, 0u);  // Not declared.
  EXPECT_EQ(config->scratch_dir, "/var/lib/gdt/agent");
  EXPECT_EQ(config->host_token_file, "");  // No host token.
  EXPECT_EQ(config->kill_grace, std::chrono::seconds(10));
  // The agent's port is capped: its peers are few.
  EXPECT_EQ(config->max_connections_per_peer, 128u);
  EXPECT_EQ(config->max_connections, 512u);
}

TEST(ConfigTest, ConnectionCaps) {
  absl::StatusOr<Config> config = ParseConfig(
      "coordinator: c:1\nmax_connections_per_peer: 4\nmax_connections: 0\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->max_connections_per_peer, 4u);
  EXPECT_EQ(config->max_connections, 0u);  // No cap.
  EXPECT_EQ(config->peer_ipv6_prefix_length, 64u);
  config = ParseConfig("coordinator: c:1\npeer_ipv6_prefix_length: 56\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->peer_ipv6_prefix_length, 56u);
}

TEST(ConfigTest, GpuCountBecomesIndicesWithoutDetails) {
  absl::StatusOr<Config> config = ParseConfig(R"(
coordinator: 10.0.0.1:7070
listen_address: 127.0.0.1:0
host:
  name: gpu-07
  address: 10.0.0.7
  gpus: 3
  labels: {rack: r1, nvlink_domain: d0}
  network_interface: eth1
  cpu_slots: 2
  runner_slots: 4
scratch_dir: /tmp/agent
kill_grace_seconds: 4
log_level: debug
)");

  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->host.gpus.size(), 3u);
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(config->host.gpus[i].index, i);
    EXPECT_EQ(config->host.gpus[i].uuid, "");
    EXPECT_EQ(config->host.gpus[i].model, "");
  }
  EXPECT_EQ(config->host.name, "gpu-07");
  EXPECT_EQ(config->host.address, "10.0.0.7");
  EXPECT_EQ(config->host.labels.at("rack"), "r1");
  EXPECT_EQ(config->host.labels.at("nvlink_domain"), "d0");
  EXPECT_EQ(config->host.network_interface, "eth1");
  EXPECT_EQ(config->host.cpu_slots, 2u);
  EXPECT_EQ(config->host.runner_slots, 4u);
  EXPECT_EQ(config->kill_grace, std::chrono::seconds(4));
  EXPECT_EQ(config->log_level, "debug");
}

TEST(ConfigTest, GpuListKeepsDetails) {
  absl::StatusOr<Config> config = ParseConfig(R"(
coordinator: coord:7070
host:
  gpus:
    - {index: 4, uuid: GPU-aaa, model: H100, memory_bytes: 85899345920}
    - {uuid: GPU-bbb, device: /dev/nvidia7}
)");

  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->host.gpus.size(), 2u);
  EXPECT_EQ(config->host.gpus[0].index, 4u);
  EXPECT_EQ(config->host.gpus[0].uuid, "GPU-aaa");
  EXPECT_EQ(config->host.gpus[0].model, "H100");
  EXPECT_EQ(config->host.gpus[0].memory_bytes, 85899345920u);
  EXPECT_EQ(config->host.gpus[1].index, 1u);  // Its position.
  EXPECT_EQ(config->host.gpus[1].uuid, "GPU-bbb");
  EXPECT_EQ(config->host.gpus[0].device, "");  // /dev/nvidia<index>.
  EXPECT_EQ(config->host.gpus[1].device, "/dev/nvidia7");
}

// HA.
TEST(ConfigTest, CoordinatorMayListReplicas) {
  absl::StatusOr<Config> config =
      ParseConfig("coordinator: \"c1:7070, c2:7070\"\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->coordinator, "c1:7070, c2:7070");
  EXPECT_THAT(ParseConfig("coordinator: c1:7070,c2\n").status().message(),
              HasSubstr("coordinator must be host:port, got 'c2'"));
}

TEST(ConfigTest, UnknownKeysAreNamed) {
  EXPECT_THAT(ParseConfig("coordinator: c:1\nlisten: x\n").status().message(),
              HasSubstr("unknown key 'listen'"));
  EXPECT_THAT(
      ParseConfig("coordinator: c:1\nhost: {gpu: 2}\n").status().message(),
      HasSubstr("unknown key 'host.gpu'"));
  EXPECT_THAT(ParseConfig("coordinator: c:1\nhost:\n  gpus:\n    - {idx: 0}\n")
                  .status()
                  .message(),
              HasSubstr("unknown key 'host.gpus[0].idx'"));
}

TEST(ConfigTest, BadValuesGiveOneClearLine) {
  struct Case {
    const char* yaml;
    const char* message;
  };
  const Case cases[] = {
      {"listen_address: 0.0.0.0:1\n", "coordinator is required"},
      {"coordinator: nohostport\n", "coordinator must be host:port"},
      {"coordinator: c:1\nhost: {gpus: -1}\n", "host.gpus must be an integer"},
      {"coordinator: c:1\nhost: {gpus: [{index: 0}, {index: 0}]}\n",
       "index 0 twice"},
      {"coordinator: c:1\nhost: {gpus: 1025}\n",
       "host.gpus must be an integer between 0 and 1024, got '1025'"},
      {"coordinator: c:1\nhost: {cpu_slots: 0}\n",
       "cpu_slots must be at least"},
      {"coordinator: c:1\nkill_grace_seconds: soon\n", "kill_grace_seconds"},
      {"coordinator: c:1\nscratch_dir: relative\n", "scratch_dir must be"},
      {"coordinator: c:1\nlog_level: loud\n", "unknown log_level 'loud'"},
      {"coordinator: c:1\nhost: {runner_slots: many}\n",
       "host.runner_slots must be an integer"},
      {"coordinator: c:1\nbuilds_root: builds\n", "builds_root must be"},
      {"coordinator: c:1\ncgroup_parent: gdt\n", "cgroup_parent must be"},
      {"coordinator: c:1\nhost: {gpus: [{device: nvidia0}]}\n",
       "host.gpus[0].device must be an absolute path like /dev/nvidia0, got "
       "'nvidia0'"},
      {"coordinator: c:1\nconfine_gpu_devices: maybe\n",
       "confine_gpu_devices must be true or false"},
      {"coordinator: c:1\nmember_uid_pool: gdt-slot0\n",
       "member_uid_pool must be a list"},
      {"coordinator: c:1\nmember_user: a\nmember_uid_pool: [b]\n", "not both"},
      {"coordinator: c:1\nstage_environment_passthrough: NCCL_DEBUG\n",
       "stage_environment_passthrough must be a list"},
      {"coordinator: c:1\nstage_environment_passthrough: [\"A=B\"]\n",
       "stage_environment_passthrough[0] must be a variable name"},
      {"coordinator: c:1\nstage_environment_passthrough: [\"*\"]\n",
       "stage_environment_passthrough[0] must be a variable name"},
      {"coordinator: c:1\nmember_pids_max: -1\n",
       "member_pids_max must be an integer"},
      {"coordinator: c:1\nmax_connections_per_peer: many\n",
       "max_connections_per_peer must be an integer between 0 and 2147483647, "
       "got 'many'"},
      {"coordinator: c:1\nmax_connections: -1\n",
       "max_connections must be an integer between 0 and 2147483647"},
      {"coordinator: c:1\npeer_ipv6_prefix_length: 31\n",
       "peer_ipv6_prefix_length must be an integer between 32 and 128, got "
       "'31'"},
      {"coordinator: c:1\npeer_ipv6_prefix_length: 129\n",
       "peer_ipv6_prefix_length must be an integer between 32 and 128, got "
       "'129'"},
      {"coordinator: c:1\npeer_ipv6_prefix_length: /64\n",
       "peer_ipv6_prefix_length must be an integer between 32 and 128"},
      {"coordinator: c:1\nmember_memory_max: 64GB\n",
       "member_memory_max must be a size in bytes, optionally with K, M, G or "
       "T (e.g. 64G), got '64GB'"},
      {"coordinator: c:1\nmember_memory_max: -1\n",
       "member_memory_max must be a size"},
      {"coordinator: c:1\nmember_memory_max: G\n",
       "member_memory_max must be a size"},
      {"coordinator: c:1\nmember_memory_max: 99999999999T\n",
       "member_memory_max must be a size"},
      {"coordinator: c:1\nmember_disk_max: 10GB\n",
       "member_disk_max must be a size in bytes, optionally with K, M, G or "
       "T (e.g. 64G), got '10GB'"},
      {"coordinator: c:1\nhost: {name: gpu\xff}\n",
       "host.name is not valid UTF-8: 'gpu\\xff'"},
      {"coordinator: c:1\nhost: {labels: {\"rack\xc3\": a}}\n",
       "host.labels has a name that is not valid UTF-8"},
      {"coordinator: [c\n", "bad YAML"},
      {"- a\n- b\n", "must be a YAML map"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<Config> config = ParseConfig(c.yaml);
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument)
        << c.yaml;
    EXPECT_THAT(config.status().message(), HasSubstr(c.message)) << c.yaml;
    EXPECT_EQ(std::string(config.status().message()).find('\n'),
              std::string::npos)
        << c.yaml;
  }
}

// A list of GPUs has the count form's bound (kMaxGpusPerNode): 1024
// entries load, one more is refused in one line before any is read.
TEST(ConfigTest, AGpuListHasTheCountsBound) {
  const auto list = [](int n) {
    std::string yaml = "coordinator: c:1\nhost:\n  gpus:\n";
    for (int i = 0; i < n; ++i) yaml += "    - {uuid: GPU-x}\n";
    return yaml;
  };
  absl::StatusOr<Config> full = ParseConfig(list(1024));
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(full->host.gpus.size(), 1024u);
  EXPECT_EQ(full->host.gpus.back().index, 1023u);
  absl::StatusOr<Config> over = ParseConfig(list(1025));
  EXPECT_EQ(over.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(over.status().message(),
            "host.gpus lists 1025 GPUs; a host may have at most 1024");
}

// The agent serves TLS too, so it needs a certificate and key.
TEST(ConfigTest, TlsSection) {
  absl::StatusOr<Config> config = ParseConfig(
      "coordinator: c:1\ntls: {ca_file: /ca.pem, cert_file: /c.pem, "
      "key_file: /k.pem}\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->tls.enabled);
  EXPECT_EQ(config->tls.key_file, "/k.pem");
  EXPECT_THAT(ParseConfig("coordinator: c:1\ntls: {ca_file: /ca.pem}\n")
                  .status()
                  .message(),
              ::testing::HasSubstr("tls.cert_file and tls.key_file are "
                                   "required to serve TLS"));
  EXPECT_THAT(
      ParseConfig("coordinator: c:1\ntls: {ca: /x}\n").status().message(),
      ::testing::HasSubstr("unknown key 'tls.ca'"));
}

TEST(ConfigTest, MissingFileIsNotFound) {
  EXPECT_EQ(LoadConfig("/nonexistent/agent.yaml").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ConfigTest, HostTokenFile) {
  absl::StatusOr<Config> config =
      ParseConfig("coordinator: c:1\nhost_token_file: /etc/gdt/host.token\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->host_token_file, "/etc/gdt/host.token");
}

TEST(ConfigTest, IsolationSettings) {
  absl::StatusOr<Config> config = ParseConfig(
      "coordinator: c:1\nmember_uid_pool: [gdt-slot0, \"61001:61001\"]\n"
      "cgroup_parent: \"off\"\nbuilds_root: /b\ncache_root: /c\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_THAT(config->member_uid_pool,
              ::testing::ElementsAre("gdt-slot0", "61001:61001"));
  EXPECT_EQ(config->cgroup_parent, "off");
  EXPECT_EQ(config->builds_root, "/b");
  EXPECT_EQ(config->cache_root, "/c");
  config = ParseConfig(
      "coordinator: c:1\nstage_environment_passthrough: [NCCL_*, "
      "LD_LIBRARY_PATH]\nmember_pids_max: 0\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_THAT(config->stage_environment_passthrough,
              ::testing::ElementsAre("NCCL_*", "LD_LIBRARY_PATH"));
  EXPECT_EQ(config->member_pids_max, 0u);
  for (const auto& [text, bytes] :
       std::vector<std::pair<std::string, uint64_t>>{{"0", 0},
                                                     {"1048576", 1048576},
                                                     {"512K", 512ull << 10},
                                                     {"256M", 256ull << 20},
                                                     {"64G", 64ull << 30},
                                                     {"2T", 2ull << 40}}) {
    config = ParseConfig("coordinator: c:1\nmember_memory_max: " + text + "\n");
    ASSERT_TRUE(config.ok()) << text << ": " << config.status();
    EXPECT_EQ(config->member_memory_max, bytes) << text;
    config = ParseConfig("coordinator: c:1\nmember_disk_max: " + text + "\n");
    ASSERT_TRUE(config.ok()) << text << ": " << config.status();
    EXPECT_EQ(config->member_disk_max, bytes) << text;
  }
  absl::StatusOr<Config> defaults = ParseConfig("coordinator: c:1\n");
  ASSERT_TRUE(defaults.ok());
  EXPECT_TRUE(defaults->member_uid_pool.empty());
  EXPECT_TRUE(defaults->stage_environment_passthrough.empty());
  EXPECT_EQ(defaults->member_pids_max, 32768u);
  EXPECT_EQ(defaults->member_memory_max, 0u);
  EXPECT_EQ(defaults->member_disk_max, 0u);
  EXPECT_FALSE(defaults->confine_gpu_devices);
  config = ParseConfig("coordinator: c:1\nconfine_gpu_devices: true\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->confine_gpu_devices);
  EXPECT_EQ(defaults->builds_root, "/var/lib/gdt/builds");
}

}  // namespace
}  // namespace gdt::agent
