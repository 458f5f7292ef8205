#ifndef GDT_RENDEZVOUS_TLS_H_
#define GDT_RENDEZVOUS_TLS_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/tls_config.h"
#include "grpcpp/security/server_credentials.h"
#include "rendezvous/channel.h"

namespace gdt::rendezvous {

// Client credentials from a `tls` section: TLS verifying the peer against
// tls.ca_file (the system's roots when empty) and presenting
// cert_file/key_file when both are set (mTLS); plaintext when TLS is off.
// Reads the files now. Errors: InvalidArgument naming the setting and file,
// e.g. "tls.ca_file: cannot read /etc/gdt/ca.pem: No such file or directory".
absl::StatusOr<ClientSecurity> LoadClientSecurity(const TlsConfig& tls);

// Server credentials: TLS with cert_file/key_file, asking for and verifying
// client certificates against ca_file when require_client_cert (mTLS);
// plaintext when TLS is off. Errors: as LoadClientSecurity, and
// InvalidArgument when cert_file/key_file are missing.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> LoadServerCredentials(
    const TlsConfig& tls);

// Client TLS from the environment of a job or CLI (GDT_TLS_CA_FILE,
// GDT_TLS_CERT_FILE, GDT_TLS_KEY_FILE): TLS when any is set, plaintext when
// none is. `getenv` returns nullptr for unset variables.
// Errors: as LoadClientSecurity, naming the variable.
absl::StatusOr<ClientSecurity> ClientSecurityFromEnvironment(
    const std::function<const char*(const char*)>& getenv);

}  // namespace gdt::rendezvous

#endif  // GDT_RENDEZVOUS_TLS_H_
