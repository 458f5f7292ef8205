#include "common/tls_config.h"

#include "common/yaml_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gdt {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<TlsConfig> Parse(const std::string& yaml) {
  return ParseTlsConfig(YAML::Load(yaml)["tls"]);
}

TEST(TlsConfigTest, OffIsExplicitPlaintext) {
  absl::StatusOr<TlsConfig> tls = Parse("tls: off");
  ASSERT_TRUE(tls.ok()) << tls.status();
  EXPECT_FALSE(tls->enabled);
  EXPECT_TRUE(tls->explicitly_off);
  EXPECT_THAT(PlaintextWarning(*tls, "gdt-agent"),
              HasSubstr("gdt-agent: WARNING: TLS is off (tls: off)"));
}

TEST(TlsConfigTest, DefaultIsPlaintextWithAWarning) {
  EXPECT_THAT(PlaintextWarning(TlsConfig(), "gdt-coord"),
              HasSubstr("no tls section in the config"));
}

TEST(TlsConfigTest, MapEnablesTls) {
  absl::StatusOr<TlsConfig> tls = Parse(
      "tls: {ca_file: /ca.pem, cert_file: /c.pem, key_file: /k.pem, "
      "require_client_cert: true}");
  ASSERT_TRUE(tls.ok()) << tls.status();
  EXPECT_TRUE(tls->enabled);
  EXPECT_EQ(tls->ca_file, "/ca.pem");
  EXPECT_EQ(tls->cert_file, "/c.pem");
  EXPECT_EQ(tls->key_file, "/k.pem");
  EXPECT_TRUE(tls->require_client_cert);
  EXPECT_EQ(PlaintextWarning(*tls, "gdt-coord"), "");
  EXPECT_TRUE(ValidateServerTls(*tls).ok());
}

TEST(TlsConfigTest, AgentCertificatesMustNameTheirHostUnderMtlsByDefault) {
  const std::string mtls =
      "tls: {ca_file: /ca.pem, cert_file: /c.pem, key_file: /k.pem, "
      "require_client_cert: true";
  absl::StatusOr<TlsConfig> tls =
      ParseTlsConfig(YAML::Load(mtls + "}")["tls"], "tls", true);
  ASSERT_TRUE(tls.ok()) << tls.status();
  EXPECT_TRUE(AgentCertMustMatchHost(*tls));
  tls = ParseTlsConfig(
      YAML::Load(mtls + ", agent_cert_must_match_host: false}")["tls"], "tls",
      true);
  ASSERT_TRUE(tls.ok()) << tls.status();
  EXPECT_FALSE(AgentCertMustMatchHost(*tls));
  // Without client certificates there is nothing to match.
  tls = ParseTlsConfig(
      YAML::Load("tls: {cert_file: /c.pem, key_file: /k.pem}")["tls"], "tls",
      true);
  ASSERT_TRUE(tls.ok()) << tls.status();
  EXPECT_FALSE(AgentCertMustMatchHost(*tls));
  EXPECT_THAT(
      ParseTlsConfig(YAML::Load("tls: {cert_file: /c.pem, key_file: /k.pem, "
                                "agent_cert_must_match_host: true}")["tls"],
                     "tls", true)
          .status()
          .message(),
      HasSubstr("tls.agent_cert_must_match_host needs "
                "tls.require_client_cert: true"));
  // Agents and executors have no such setting.
  EXPECT_THAT(
      Parse(mtls + ", agent_cert_must_match_host: true}").status().message(),
      HasSubstr("tls.agent_cert_must_match_host is a coordinator "
                "setting"));
}

TEST(TlsConfigTest, BadInputNamesTheKey) {
  EXPECT_THAT(Parse("tls: {ca: /x}").status().message(),
              HasSubstr("unknown key 'tls.ca'"));
  EXPECT_THAT(Parse("tls: on").status().message(),
              HasSubstr("tls must be 'off' or a map"));
  EXPECT_THAT(Parse("tls: [1]").status().message(),
              HasSubstr("tls must be 'off' or a map"));
  EXPECT_THAT(Parse("tls: {ca_file: {a: 1}}").status().message(),
              HasSubstr("tls.ca_file must be a non-empty path"));
  EXPECT_THAT(Parse("tls: {cert_file: /c.pem}").status().message(),
              HasSubstr("must be given together"));
  EXPECT_THAT(Parse("tls: {require_client_cert: maybe}").status().message(),
              HasSubstr("tls.require_client_cert must be true or false"));
  EXPECT_THAT(Parse("tls: {require_client_cert: true}").status().message(),
              HasSubstr("needs tls.ca_file"));
}

TEST(TlsConfigTest, ServerNeedsCertificateAndKey) {
  absl::StatusOr<TlsConfig> tls = Parse("tls: {ca_file: /ca.pem}");
  ASSERT_TRUE(tls.ok());
  EXPECT_TRUE(ValidateClientTls(*tls).ok());
  EXPECT_THAT(ValidateServerTls(*tls).message(),
              HasSubstr("tls.cert_file and tls.key_file are required"));
}

TEST(TlsConfigTest, PlaintextOnAReachableAddressNeedsTlsOff) {
  const TlsConfig none;
  for (const char* reachable :
       {"0.0.0.0:7070", "[::]:7070", "10.0.0.7:0", "gpu-07.example.com:7071"}) {
    const absl::Status refused = CheckListenerTls(none, reachable);
    EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition)
        << reachable;
    EXPECT_THAT(refused.message(), HasSubstr(reachable));
    EXPECT_THAT(refused.message(), HasSubstr("`tls: off`"));
  }
  for (const char* loopback :
       {"127.0.0.1:0", "127.3.0.1:7070", "[::1]:7070", "localhost:7070"}) {
    EXPECT_TRUE(CheckListenerTls(none, loopback).ok()) << loopback;
  }
  absl::StatusOr<TlsConfig> off = Parse("tls: off");
  ASSERT_TRUE(off.ok());
  EXPECT_TRUE(CheckListenerTls(*off, "0.0.0.0:7070").ok());
  TlsConfig on;
  on.enabled = true;
  EXPECT_TRUE(CheckListenerTls(on, "0.0.0.0:7070").ok());
}

}  // namespace
}  // namespace gdt
