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
  std::string cert_file;
  std::string key_file;
  std::string other_ca_file;
};

// Writes the files under `dir` (which must exist). Takes about a second.
// Errors: FailedPrecondition naming the openssl step that failed (with its
// output), e.g. when openssl is not installed.
absl::StatusOr<TestCerts> MakeTestCerts(
    const std::string& dir, const std::vector<std::string>& extra_ips = {});

}  // namespace gdt::test

#endif  // GDT_TESTS_SUPPORT_TEST_CERTS_H_
