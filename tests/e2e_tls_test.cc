// End to end over TLS: gdt-coord, gdt-agent and gdt-executor with
// mutual TLS from certificates the openssl CLI makes for this test, one
// two-member job through gdt-ci run-local whose script uses gdt-kv and
// gdt-ckpt save (so the job-side KV and checkpoint clients talk TLS with the
// agent's files), and the operator's
// `gdt-coord status` with and without the CA; and, as an attacker holding
// one host's certificate, that it cannot act for another host.
#include <filesystem>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/coordinator_client.h"
#include "rendezvous/tls.h"
#include "testing/cluster.h"
#include "testing/test_certs.h"

namespace gdt::test {
namespace {

using std::chrono::seconds;
using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;

TEST(EndToEndTlsTest, JobRunsOverMutualTlsAndPlaintextIsRefused) {
  GdtCluster cluster;
  const std::string cert_dir = cluster.dir().Sub("certs");
  fs::create_directories(cert_dir);
  absl::StatusOr<TestCerts> certs = MakeTestCerts(cert_dir);
  ASSERT_TRUE(certs.ok()) << certs.status();
  cluster.UseTls(*certs);
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.StartAgent({.name = "local", .cpu_slots = 2}).ok())
      << cluster.Logs();
  // Status() runs `gdt-coord status` with GDT_TLS_*: the agent registered
  // over mTLS and the CLI reads the TLS-only coordinator.
  ASSERT_TRUE(cluster.WaitForHosts(1, seconds(20)).ok()) << cluster.Logs();

  const std::string project = cluster.dir().Sub("project");
  fs::create_directories(project);
  const std::string kv = GDT_KV_BIN;
  const std::string ckpt = GDT_CKPT_BIN;
  WriteFile(project + "/.gitlab-ci.yml",
            absl::StrCat(
                "kv:\n  parallel: 2\n  timeout: 5 minutes\n"
                "  variables:\n    GDT_LAUNCHER: nccl\n  script:\n",
                "    - n=$(", kv, " add arrived 1)\n",
                "    - if [ \"$n\" = 2 ]; then ", kv, " set all-here yes; fi\n",
                "    - ", kv, " wait all-here --timeout 60\n",
                "    - echo \"tls kv barrier passed\"\n",
                // The checkpoint records go over TLS too.
                "    - mkdir -p ck && echo w > ck/w.bin\n", "    - ", ckpt,
                " save --step 3 --dir ck --store artifacts "
                "--world-size 2 --rank $((CI_NODE_INDEX - 1))\n"));
  CommandResult run = cluster.RunLocal(project, "kv", {}, seconds(120));
  ASSERT_TRUE(run.status.success()) << run.output << cluster.Logs();
  int passed = 0;
  for (const auto& entry :
       fs::directory_iterator(cluster.run_dir() + "/logs")) {
    const std::string log = ReadFile(entry.path().string());
    if (log.find("tls kv barrier passed") != std::string::npos) ++passed;
    EXPECT_THAT(log, Not(HasSubstr("is not recorded with the coordinator")));
    EXPECT_THAT(log, Not(HasSubstr("WARNING: TLS is off")));
  }
  EXPECT_EQ(passed, 2) << run.output;
  EXPECT_THAT(cluster.Logs(), Not(HasSubstr("WARNING: TLS is off")));

  // An operator without the CA: one clear line, exit 3, quickly.
  CommandResult plain =
      RunProcess({BinaryPath("gdt-coord"), "status", "--coordinator",
                  cluster.coordinator_endpoint()},
                 {{"GDT_TLS_CA_FILE", ""}}, seconds(20));
  EXPECT_EQ(plain.status.code(), 3) << plain.output;
  EXPECT_THAT(plain.output, HasSubstr("it may require TLS"));
  // With the CA but no client certificate: refused by mTLS, naming it.
  CommandResult no_cert = RunProcess(
      {BinaryPath("gdt-coord"), "status", "--coordinator",
       cluster.coordinator_endpoint(), "--tls-ca-file", certs->ca_file},
      {}, seconds(20));
  EXPECT_EQ(no_cert.status.code(), 3) << no_cert.output;
  EXPECT_THAT(no_cert.output,
              HasSubstr("client certificate (set tls.cert_file and "
                        "tls.key_file)"));
}

// With mTLS a client certificate is what identifies an agent: whoever holds
// host-a's certificate and key (a job on host-a can read them, since the
// agent hands its paths to the jobs' TLS clients) must not register or
// heartbeat as host-b, or the next jobs' scripts and secrets would go where
// it says. The coordinator's default under require_client_cert refuses it.
TEST(EndToEndTlsTest, AnAgentCertificateActsOnlyForItsOwnHost) {
  GdtCluster cluster;
  const std::string cert_dir = cluster.dir().Sub("certs");
  fs::create_directories(cert_dir);
  absl::StatusOr<TestCerts> certs = MakeTestCerts(cert_dir);
  ASSERT_TRUE(certs.ok()) << certs.status();
  cluster.UseTls(*certs);
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Logs();
  // Each agent gets a certificate for its own host (as an operator issues
  // them): both register.
  ASSERT_TRUE(cluster.StartAgent({.name = "host-a"}).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.StartAgent({.name = "host-b"}).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForHosts(2, seconds(20)).ok()) << cluster.Logs();

  // A real gdt-agent for host-c that holds host-a's certificate is refused
  // on every try, and says why.
  ASSERT_TRUE(
      cluster.StartAgent({.name = "host-c", .tls_cert_host = "host-a"}).ok())
      << cluster.Logs();
  const std::string rogue_log = cluster.dir().Sub("agent-host-c.log");
  EXPECT_TRUE(WaitFor(
      [&] {
        return ReadFile(rogue_log).find("event=host_refused") !=
               std::string::npos;
      },
      seconds(20)))
      << cluster.Logs();
  EXPECT_THAT(ReadFile(rogue_log),
              HasSubstr("agent certificate names 'host-a'"));
  EXPECT_THAT(ReadFile(rogue_log), HasSubstr("not host 'host-c'"));

  // By hand, with host-a's certificate: re-registering host-b exactly as
  // its agent does (same endpoint) and heartbeating for it are refused.
  TlsConfig stolen;
  stolen.enabled = true;
  stolen.ca_file = certs->ca_file;
  stolen.cert_file = cluster.dir().Sub("agent-certs/host-host-a.pem");
  stolen.key_file = cluster.dir().Sub("agent-certs/host-host-a.key");
  absl::StatusOr<rendezvous::ClientSecurity> security =
      rendezvous::LoadClientSecurity(stolen);
  ASSERT_TRUE(security.ok()) << security.status();
  rendezvous::CoordinatorClient rogue(cluster.coordinator_endpoint(),
                                      *security);
  v1::HostSpec spec;
  spec.set_name("host-b");
  spec.set_address("127.0.0.1");
  spec.set_agent_endpoint(cluster.AgentEndpoint(1));
  spec.set_cpu_slots(64);
  const absl::Status registered =
      rogue.RegisterHost(spec, seconds(10)).status();
  EXPECT_EQ(registered.code(), absl::StatusCode::kPermissionDenied)
      << registered;
  EXPECT_THAT(registered.message(),
              HasSubstr("agent certificate names 'host-a'"));
  EXPECT_THAT(registered.message(), HasSubstr("not host 'host-b'"));
  const absl::Status heartbeat =
      rogue.Heartbeat("host-b", seconds(10)).status();
  EXPECT_EQ(heartbeat.code(), absl::StatusCode::kPermissionDenied) << heartbeat;
  // The same certificate still serves its own host.
  EXPECT_TRUE(rogue.Heartbeat("host-a", seconds(10)).ok());

  // host-b kept its own registration (not the 64 slots), host-c never
  // joined.
  absl::StatusOr<nlohmann::json> status = cluster.Status();
  ASSERT_TRUE(status.ok()) << status.status();
  std::set<std::string> names;
  for (const auto& host : (*status)["hosts"]) {
    names.insert(host.value("name", ""));
    if (host.value("name", "") == "host-b") {
      EXPECT_EQ(host.value("state", ""), "up") << host.dump();
      EXPECT_EQ(host.value("cpu_slots", 0), 1) << host.dump();
    }
  }
  EXPECT_EQ(names, (std::set<std::string>{"host-a", "host-b"}))
      << status->dump();
}

}  // namespace
}  // namespace gdt::test
