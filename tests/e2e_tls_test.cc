// End to end over TLS: gdt-coord, gdt-agent and gdt-executor with
// mutual TLS from certificates the openssl CLI makes for this test, one
// two-member job through gdt-ci run-local whose script uses gdt-kv (so the
// job-side KV client talks TLS with the agent's files), and the operator's
// `gdt-coord status` with and without the CA.
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
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
  WriteFile(project + "/.gitlab-ci.yml",
            absl::StrCat("kv:\n  parallel: 2\n  timeout: 5 minutes\n"
                         "  variables:\n    GDT_LAUNCHER: nccl\n  script:\n",
                         "    - n=$(", kv, " add arrived 1)\n",
                         "    - if [ \"$n\" = 2 ]; then ", kv,
                         " set all-here yes; fi\n", "    - ", kv,
                         " wait all-here --timeout 60\n",
                         "    - echo \"tls kv barrier passed\"\n"));
  CommandResult run = cluster.RunLocal(project, "kv", {}, seconds(120));
  ASSERT_TRUE(run.status.success()) << run.output << cluster.Logs();
  int passed = 0;
  for (const auto& entry :
       fs::directory_iterator(cluster.run_dir() + "/logs")) {
    const std::string log = ReadFile(entry.path().string());
    if (log.find("tls kv barrier passed") != std::string::npos) ++passed;
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

}  // namespace
}  // namespace gdt::test
