#ifndef GDT_COMMON_TLS_CONFIG_H_
#define GDT_COMMON_TLS_CONFIG_H_

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace gdt {

// The `tls` section shared by the coordinator, agent and executor configs
// (docs/security.md "TLS"). Plain data; credentials are built from it by
// rendezvous/tls.h. One section serves both roles of a daemon: its server
// (cert_file/key_file, require_client_cert) and its client connections
// (ca_file to verify peers, cert_file/key_file as the client certificate
// for mTLS).
struct TlsConfig {
  bool enabled = false;
  // `tls: off` was written: plaintext on purpose. Unset and not enabled
  // means plaintext by default; both print a warning at start-up.
  bool explicitly_off = false;
  std::string ca_file;    // PEM; empty = the system's roots (clients).
  std::string cert_file;  // PEM certificate chain.
  std::string key_file;   // PEM private key of cert_file.
  bool require_client_cert = false;  // Servers: mTLS.
  // Coordinator only: whether an agent's client certificate must name the
  // host it registers and heartbeats for. Unset = on whenever
  // require_client_cert is on (see AgentCertMustMatchHost).
  std::optional<bool> agent_cert_must_match_host;
};

// Whether the coordinator refuses host-scoped calls (RegisterHost,
// Heartbeat, CheckMemberToken, an agent's member reports) whose client
// certificate does not name the host: with mTLS unless switched off. A
// certificate is what the network cannot forge, so with mTLS it is the
// host's identity; a host token alone can be copied by whoever reads it.
bool AgentCertMustMatchHost(const TlsConfig& tls);

// Config files fill it in with ParseTlsConfig (common/yaml_config.h), which
// keeps yaml-cpp out of this header and of everyone who only uses the data.

// Role-specific checks. A server needs cert_file and key_file; mTLS needs
// ca_file; cert_file and key_file come together.
// Errors: InvalidArgument naming the setting.
absl::Status ValidateServerTls(const TlsConfig& tls);
absl::Status ValidateClientTls(const TlsConfig& tls);

// The start-up warning for a plaintext config (empty when TLS is on), e.g.
// "gdt-coord: TLS is off (tls: off): gRPC traffic is plaintext ...".
std::string PlaintextWarning(const TlsConfig& tls, std::string_view program);

// Whether a server may listen on `listen_address` with `tls`. Plaintext
// must never happen by accident: a listener that other machines can reach
// (any address but loopback: 0.0.0.0, [::], a host's own address or name)
// without a `tls` section is refused unless the config says `tls: off`.
// Errors: FailedPrecondition, one line naming the address and both ways
// out.
absl::Status CheckListenerTls(const TlsConfig& tls,
                              std::string_view listen_address);

}  // namespace gdt

#endif  // GDT_COMMON_TLS_CONFIG_H_
