// TLS: a real gdt-coord server (CoordinatorServer on 127.0.0.1:0)
// with certificates made by the openssl CLI at test time, and the real
// CoordinatorClient / KvClient. What an operator would notice: plaintext
// clients are refused by a TLS-only coordinator, the right CA works, a
// wrong CA or a missing client certificate (mTLS) is refused with one clear
// line, quickly.
#include "rendezvous/tls.h"

#include <chrono>
#include <map>
#include <memory>
#include <optional>

#include "common/tls_config.h"
#include "coordinator/server.h"
#include "gmock/gmock.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "rendezvous/coordinator_client.h"
#include "rendezvous/kv_client.h"
#include "rendezvous/metadata.h"
#include "testing/coordinator_fixture.h"
#include "testing/test_certs.h"

namespace gdt::coordinator {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

class TlsTest : public test::InProcessCoordinatorTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(InProcessCoordinatorTest::SetUp());
    absl::StatusOr<gdt::test::TestCerts> certs =
        gdt::test::MakeTestCerts(temp_.path());
    ASSERT_TRUE(certs.ok()) << certs.status();
    certs_ = *certs;
  }

  // (Re)starts the coordinator serving TLS only with certs_.
  void StartWithTls(bool require_client_cert,
                    std::optional<bool> agent_cert_must_match_host = {}) {
    config_.tls.enabled = true;
    config_.tls.ca_file = certs_.ca_file;
    config_.tls.cert_file = certs_.cert_file;
    config_.tls.key_file = certs_.key_file;
    config_.tls.require_client_cert = require_client_cert;
    config_.tls.agent_cert_must_match_host = agent_cert_must_match_host;
    ASSERT_NO_FATAL_FAILURE(RestartCoordinator());
  }

  // `cert`: the client certificate to present (certs_'s own by default).
  rendezvous::ClientSecurity Client(
      const std::string& ca, bool with_cert,
      const gdt::test::TestCerts* cert = nullptr) {
    if (cert == nullptr) cert = &certs_;
    TlsConfig tls;
    tls.enabled = true;
    tls.ca_file = ca;
    if (with_cert) {
      tls.cert_file = cert->cert_file;
      tls.key_file = cert->key_file;
    }
    absl::StatusOr<rendezvous::ClientSecurity> security =
        rendezvous::LoadClientSecurity(tls);
    EXPECT_TRUE(security.ok()) << security.status();
    return security.ok() ? *security : rendezvous::ClientSecurity();
  }

  absl::Status Status(const rendezvous::ClientSecurity& security) {
    rendezvous::CoordinatorClient client(server_->bound_address(), security);
    return client.GetStatus(v1::GetStatusRequest(), 5s).status();
  }

  gdt::test::TestCerts certs_;
};

TEST_F(TlsTest, ClientWithTheRightCaIsServed) {
  StartWithTls(false);
  EXPECT_TRUE(Status(Client(certs_.ca_file, false)).ok());
}

TEST_F(TlsTest, PlaintextClientIsRefusedByTlsOnlyCoordinator) {
  StartWithTls(false);
  const auto start = std::chrono::steady_clock::now();
  const absl::Status status = Status(rendezvous::ClientSecurity());
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(status.message(),
              HasSubstr("the server closed the connection; if this repeats, "
                        "it may require TLS"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 4s);
}

TEST_F(TlsTest, WrongCaIsRefusedWithOneClearLine) {
  StartWithTls(false);
  const absl::Status status = Status(Client(certs_.other_ca_file, false));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(),
              HasSubstr("coordinator " + server_->bound_address() +
                        ": TLS handshake failed: certificate verify failed"));
  EXPECT_THAT(status.message(), HasSubstr("check tls.ca_file"));
  EXPECT_EQ(status.message().find('\n'), std::string::npos) << status;
}

TEST_F(TlsTest, MutualTlsRefusesClientWithoutCertificate) {
  StartWithTls(true);
  const absl::Status without = Status(Client(certs_.ca_file, false));
  EXPECT_EQ(without.code(), absl::StatusCode::kUnavailable) << without;
  EXPECT_THAT(without.message(),
              HasSubstr("coordinator " + server_->bound_address() + ": "));
  EXPECT_THAT(without.message(),
              HasSubstr("client certificate (set tls.cert_file and "
                        "tls.key_file)"));
  EXPECT_TRUE(Status(Client(certs_.ca_file, true)).ok());
}

// Under mTLS a heartbeat (like every call that acts for a host) needs a
// client certificate naming that host, unless the operator switched the
// check off for a certificate shared by every host.
TEST_F(TlsTest, HostCallsNeedACertificateNamingTheHost) {
  absl::StatusOr<gdt::test::TestCerts> gpu01 =
      gdt::test::MakeHostCert(certs_, temp_.path(), "gpu-01");
  ASSERT_TRUE(gpu01.ok()) << gpu01.status();
  StartWithTls(true);
  rendezvous::CoordinatorClient own(server_->bound_address(),
                                    Client(certs_.ca_file, true, &*gpu01));
  EXPECT_TRUE(own.Heartbeat("gpu-01", 5s).ok());
  // Host names are DNS names: case does not matter.
  EXPECT_TRUE(own.Heartbeat("GPU-01", 5s).ok());
  const absl::Status other = own.Heartbeat("gpu-02", 5s).status();
  EXPECT_EQ(other.code(), absl::StatusCode::kPermissionDenied) << other;
  EXPECT_THAT(other.message(),
              HasSubstr("agent certificate names 'gpu-01', 'localhost', "
                        "not host 'gpu-02'"));
  rendezvous::CoordinatorClient shared(server_->bound_address(),
                                       Client(certs_.ca_file, true));
  EXPECT_EQ(shared.Heartbeat("gpu-01", 5s).status().code(),
            absl::StatusCode::kPermissionDenied);
  // A status reader's certificate need not name anything.
  EXPECT_TRUE(Status(Client(certs_.ca_file, true)).ok());

  StartWithTls(true, /*agent_cert_must_match_host=*/false);
  rendezvous::CoordinatorClient shared_off(server_->bound_address(),
                                           Client(certs_.ca_file, true));
  EXPECT_TRUE(shared_off.Heartbeat("gpu-01", 5s).ok());
}

// A host's token does not outweigh its certificate: with gpu-01's token but
// gpu-02's certificate, neither heartbeats nor member token checks for
// gpu-01 are served.
TEST_F(TlsTest, AHostTokenNeedsTheCertificateOfItsHost) {
  absl::StatusOr<gdt::test::TestCerts> gpu01 =
      gdt::test::MakeHostCert(certs_, temp_.path(), "gpu-01");
  ASSERT_TRUE(gpu01.ok()) << gpu01.status();
  absl::StatusOr<gdt::test::TestCerts> gpu02 =
      gdt::test::MakeHostCert(certs_, temp_.path(), "gpu-02");
  ASSERT_TRUE(gpu02.ok()) << gpu02.status();
  StartWithTls(true);
  rendezvous::CoordinatorClient operator_client(server_->bound_address(),
                                                Client(certs_.ca_file, true));
  absl::StatusOr<std::string> token =
      operator_client.CreateHostToken("gpu-01", 5s);
  ASSERT_TRUE(token.ok()) << token.status();

  rendezvous::CoordinatorClient thief(server_->bound_address(),
                                      Client(certs_.ca_file, true, &*gpu02));
  thief.AddMetadata(rendezvous::kHostTokenMetadata, *token);
  const absl::Status heartbeat = thief.Heartbeat("gpu-01", 5s).status();
  EXPECT_EQ(heartbeat.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(heartbeat.message(),
              HasSubstr("agent certificate names 'gpu-02'"));
  const absl::Status check = thief.CheckMemberToken("gdt-mt2.x.y", 5s).status();
  EXPECT_EQ(check.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(check.message(), HasSubstr("not host 'gpu-01'"));

  // The host's own certificate with its token gets as far as the member
  // token itself.
  rendezvous::CoordinatorClient own(server_->bound_address(),
                                    Client(certs_.ca_file, true, &*gpu01));
  own.AddMetadata(rendezvous::kHostTokenMetadata, *token);
  EXPECT_TRUE(own.Heartbeat("gpu-01", 5s).ok());
  const absl::Status forged = own.CheckMemberToken("gdt-mt2.x.y", 5s).status();
  EXPECT_FALSE(forged.ok());
  EXPECT_THAT(forged.message(),
              ::testing::Not(HasSubstr("agent certificate names")));
}

TEST_F(TlsTest, KvClientTalksTls) {
  StartWithTls(false);
  rendezvous::KvTarget target{server_->bound_address(), "no-such-gang", 1,
                              "token", Client(certs_.ca_file, false)};
  rendezvous::KvClient kv(target);
  // The coordinator answered (no such gang), so the TLS channel works.
  const absl::StatusOr<std::string> value =
      kv.Get("key", std::chrono::system_clock::now() + 5s);
  ASSERT_FALSE(value.ok());
  EXPECT_NE(value.status().code(), absl::StatusCode::kUnavailable)
      << value.status();
  EXPECT_NE(value.status().code(), absl::StatusCode::kDeadlineExceeded)
      << value.status();
}

TEST_F(TlsTest, UnreadableCertificateIsOneLineNamingTheSetting) {
  Config config;
  config.listen_address = "127.0.0.1:0";
  config.state_path = temp_.path() + "/coord.db";
  config.tls.enabled = true;
  config.tls.cert_file = temp_.path() + "/missing.pem";
  config.tls.key_file = certs_.key_file;
  absl::StatusOr<std::unique_ptr<CoordinatorServer>> server =
      CoordinatorServer::Start(config, clock_);
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(server.status().message(), HasSubstr("tls.cert_file: "));
  EXPECT_THAT(server.status().message(), HasSubstr("missing.pem"));
}

// Job-side clients (gdt-kv, nccl_bootstrap, gdt-launch, gdt-rsh) take TLS
// from the GDT_TLS_* variables the agent exports.
TEST_F(TlsTest, KvTargetReadsTlsVariables) {
  std::map<std::string, std::string> env = {{"GDT_COORDINATOR", "h:1"},
                                            {"GDT_GANG_ID", "g"},
                                            {"GDT_EPOCH", "1"},
                                            {"GDT_KV_TOKEN", "t"}};
  auto getenv = [&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  absl::StatusOr<rendezvous::KvTarget> plain =
      rendezvous::KvTargetFromEnvironment(getenv);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->security.tls());
  env["GDT_TLS_CA_FILE"] = certs_.ca_file;
  absl::StatusOr<rendezvous::KvTarget> tls =
      rendezvous::KvTargetFromEnvironment(getenv);
  ASSERT_TRUE(tls.ok()) << tls.status();
  EXPECT_TRUE(tls->security.tls());
  env["GDT_TLS_CA_FILE"] = temp_.path() + "/nope.pem";
  EXPECT_THAT(rendezvous::KvTargetFromEnvironment(getenv).status().message(),
              HasSubstr("GDT_TLS_CA_FILE: "));
  env["GDT_TLS_CA_FILE"] = certs_.ca_file;
  env["GDT_TLS_CERT_FILE"] = certs_.cert_file;
  EXPECT_THAT(rendezvous::KvTargetFromEnvironment(getenv).status().message(),
              HasSubstr("GDT_TLS_CERT_FILE and GDT_TLS_KEY_FILE must be given "
                        "together"));
}

// A closed connection is also what a restarting coordinator looks like: it
// gets a hint but stays retryable; a certificate problem does not.
TEST(ExplainConnectFailureTest, OnlyHandshakeFailuresAreFinal) {
  rendezvous::ClientSecurity tls;
  tls.credentials = grpc::SslCredentials(grpc::SslCredentialsOptions());
  tls.ca_setting = "tls.ca_file";
  const absl::Status closed = rendezvous::ExplainConnectFailure(
      absl::UnavailableError("Socket closed"), "coordinator", "h:1", tls);
  EXPECT_THAT(closed.message(), HasSubstr("coordinator h:1: the server "
                                          "closed the connection"));
  EXPECT_FALSE(rendezvous::IsTlsHandshakeFailure(closed));
  const absl::Status verify = rendezvous::ExplainConnectFailure(
      absl::UnavailableError("failed to connect to all addresses; last "
                             "error: UNKNOWN: ipv4:1.2.3.4:5: Ssl handshake "
                             "failed: SSL_ERROR_SSL: error:1000007d:SSL "
                             "routines:OPENSSL_internal:CERTIFICATE_VERIFY_"
                             "FAILED"),
      "coordinator", "h:1", tls);
  EXPECT_TRUE(rendezvous::IsTlsHandshakeFailure(verify));
  EXPECT_THAT(verify.message(), HasSubstr("certificate verify failed"));
  const absl::Status refused = rendezvous::ExplainConnectFailure(
      absl::UnavailableError("Connection refused"), "coordinator", "h:1", tls);
  EXPECT_EQ(refused.message(), "Connection refused");
  const absl::Status denied = rendezvous::ExplainConnectFailure(
      absl::PermissionDeniedError("no"), "coordinator", "h:1", tls);
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace gdt::coordinator
