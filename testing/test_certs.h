#ifndef GDT_TESTS_SUPPORT_TEST_CERTS_H_
#define GDT_TESTS_SUPPORT_TEST_CERTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gdt::test {

// PEM files made by the `openssl` CLI for one test (docs/security.md "TLS"
// shows the same commands): a CA, a certificate for servers and clients
// (serverAuth + clientAuth; SAN localhost, 127.0.0.1 and `extra_ips`)
// signed by it, and a second, unrelated CA for "wrong CA" cases.
struct TestCerts {
  std::string ca_file;
  std::string ca_key_file;  // To issue more certificates (MakeHostCert).
  std::string cert_file;
  std::string key_file;
  std::string other_ca_file;
};

// Writes the files under `dir` (which must exist). Takes about a second.
// Errors: FailedPrecondition naming the openssl step that failed (with its
// output), e.g. when openssl is not installed.
absl::StatusOr<TestCerts> MakeTestCerts(
    const std::string& dir, const std::vector<std::string>& extra_ips = {});

// A certificate for one agent's host, as an operator issues it when the
// coordinator requires agent certificates to name their host: signed by
// `certs`' CA, common name and DNS subjectAltName `host_name`, and (so that
// it also serves the agent's server side) DNS localhost, IP 127.0.0.1 and
// `ips`. Returns `certs` with cert_file and key_file replaced by the new
// files, <dir>/host-<host_name>.{pem,key}.
// Errors: as MakeTestCerts.
absl::StatusOr<TestCerts> MakeHostCert(
    const TestCerts& certs, const std::string& dir,
    const std::string& host_name, const std::vector<std::string>& ips = {});

}  // namespace gdt::test

#endif  // GDT_TESTS_SUPPORT_TEST_CERTS_H_
