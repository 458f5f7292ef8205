#include "rendezvous/tls.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "grpcpp/security/credentials.h"

namespace gdt::rendezvous {
namespace {

// Reads a PEM file named by setting `key`; "" for an empty path.
absl::StatusOr<std::string> ReadPem(const std::string& path,
                                    const std::string& key) {
  if (path.empty()) return std::string();
  absl::StatusOr<std::string> text = ReadTextFile(path);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ": ", text.status().message()));
  }
  if (text->find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ": ", path, " is not a PEM file"));
  }
  return text;
}

struct Pems {
  std::string ca, cert, key;
};

absl::StatusOr<Pems> ReadPems(const TlsConfig& tls, const std::string& ca_key,
                              const std::string& cert_key,
                              const std::string& key_key) {
  Pems pems;
  absl::StatusOr<std::string> ca = ReadPem(tls.ca_file, ca_key);
  if (!ca.ok()) return ca.status();
  absl::StatusOr<std::string> cert = ReadPem(tls.cert_file, cert_key);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPem(tls.key_file, key_key);
  if (!key.ok()) return key.status();
  pems.ca = std::move(*ca);
  pems.cert = std::move(*cert);
  pems.key = std::move(*key);
  return pems;
}

absl::StatusOr<ClientSecurity> ClientFrom(const TlsConfig& tls,
                                          const std::string& ca_key,
                                          const std::string& cert_key,
                                          const std::string& key_key) {
  ClientSecurity security;
  if (!tls.enabled) return security;
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(cert_key, " and ", key_key, " must be given together"));
  }
  absl::StatusOr<Pems> pems = ReadPems(tls, ca_key, cert_key, key_key);
  if (!pems.ok()) return pems.status();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = pems->ca;
  options.pem_private_key = pems->key;
  options.pem_cert_chain = pems->cert;
  security.credentials = grpc::SslCredentials(options);
  security.ca_setting = ca_key;
  return security;
}

}  // namespace

absl::StatusOr<ClientSecurity> LoadClientSecurity(const TlsConfig& tls) {
  return ClientFrom(tls, "tls.ca_file", "tls.cert_file", "tls.key_file");
}

absl::StatusOr<ClientSecurity> ClientSecurityFromEnvironment(
    const std::function<const char*(const char*)>& getenv) {
  TlsConfig tls;
  for (auto [name, field] : {std::pair{"GDT_TLS_CA_FILE", &tls.ca_file},
                             std::pair{"GDT_TLS_CERT_FILE", &tls.cert_file},
                             std::pair{"GDT_TLS_KEY_FILE", &tls.key_file}}) {
    const char* value = getenv(name);
    if (value != nullptr && *value != '\0') {
      *field = value;
      tls.enabled = true;
    }
  }
  return ClientFrom(tls, "GDT_TLS_CA_FILE", "GDT_TLS_CERT_FILE",
                    "GDT_TLS_KEY_FILE");
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> LoadServerCredentials(
    const TlsConfig& tls) {
  if (!tls.enabled) return grpc::InsecureServerCredentials();
  if (tls.cert_file.empty() || tls.key_file.empty()) {
    return absl::InvalidArgumentError(
        "tls.cert_file and tls.key_file are required to serve TLS");
  }
  if (tls.require_client_cert && tls.ca_file.empty()) {
    return absl::InvalidArgumentError(
        "tls.require_client_cert needs tls.ca_file");
  }
  absl::StatusOr<Pems> pems =
      ReadPems(tls, "tls.ca_file", "tls.cert_file", "tls.key_file");
  if (!pems.ok()) return pems.status();
  grpc::SslServerCredentialsOptions options(
      tls.require_client_cert
          ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
          : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  options.pem_root_certs = pems->ca;
  options.pem_key_cert_pairs.push_back({pems->key, pems->cert});
  return grpc::SslServerCredentials(options);
}

}  // namespace gdt::rendezvous
