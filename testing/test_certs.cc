#include "testing/test_certs.h"

#include <chrono>
#include <fstream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "common/subprocess.h"

namespace gdt::test {
namespace {

absl::Status Openssl(const std::vector<std::string>& args) {
  SpawnOptions options;
  options.argv = {"openssl"};
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  options.env = {{"PATH", "/usr/bin:/bin"}};
  options.die_with_parent = true;
  absl::StatusOr<std::unique_ptr<Subprocess>> child =
      Subprocess::Spawn(options);
  if (!child.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot run openssl (apt-get install openssl): ",
                     child.status().message()));
  }
  std::string output;
  const std::optional<ExitStatus> exit = (*child)->WaitUntil(
      std::chrono::steady_clock::now() + std::chrono::seconds(30),
      [&output](OutputSource, std::string_view chunk) {
        output.append(chunk);
      });
  if (!exit.has_value() || !exit->success()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "openssl ", absl::StrJoin(args, " "), " failed: ", output));
  }
  return absl::OkStatus();
}

absl::Status MakeCa(const std::string& dir, const std::string& name) {
  return Openssl({"req", "-x509", "-newkey", "ec", "-pkeyopt",
                  "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
                  "-subj", "/CN=" + name, "-keyout", dir + "/" + name + ".key",
                  "-out", dir + "/" + name + ".pem"});
}

// Issues <dir>/<stem>.pem and .key (serverAuth and clientAuth) with common
// name `cn` and subjectAltName `san`, signed by the CA in `ca_file`.
absl::Status Issue(const std::string& dir, const std::string& stem,
                   const std::string& cn, const std::string& san,
                   const std::string& ca_file, const std::string& ca_key_file) {
  const std::string ext = dir + "/" + stem + ".ext";
  {
    std::ofstream out(ext);
    out << "subjectAltName=" << san << "\n"
        << "extendedKeyUsage=serverAuth,clientAuth\n"
        << "basicConstraints=CA:FALSE\n";
  }
  GDT_RETURN_IF_ERROR(Openssl(
      {"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
       "-nodes", "-subj", "/CN=" + cn, "-keyout", dir + "/" + stem + ".key",
       "-out", dir + "/" + stem + ".csr"}));
  return Openssl({"x509", "-req", "-in", dir + "/" + stem + ".csr", "-CA",
                  ca_file, "-CAkey", ca_key_file, "-CAcreateserial", "-days",
                  "2", "-extfile", ext, "-out", dir + "/" + stem + ".pem"});
}

}  // namespace

absl::StatusOr<TestCerts> MakeTestCerts(
    const std::string& dir, const std::vector<std::string>& extra_ips) {
  GDT_RETURN_IF_ERROR(MakeCa(dir, "gdt-test-ca"));
  GDT_RETURN_IF_ERROR(MakeCa(dir, "other-ca"));
  std::string san = "DNS:localhost,IP:127.0.0.1";
  for (const std::string& ip : extra_ips) absl::StrAppend(&san, ",IP:", ip);
  TestCerts certs;
  certs.ca_file = dir + "/gdt-test-ca.pem";
  certs.ca_key_file = dir + "/gdt-test-ca.key";
  GDT_RETURN_IF_ERROR(
      Issue(dir, "node", "gdt-node", san, certs.ca_file, certs.ca_key_file));
  certs.cert_file = dir + "/node.pem";
  certs.key_file = dir + "/node.key";
  certs.other_ca_file = dir + "/other-ca.pem";
  return certs;
}

absl::StatusOr<TestCerts> MakeHostCert(const TestCerts& certs,
                                       const std::string& dir,
                                       const std::string& host_name,
                                       const std::vector<std::string>& ips) {
  std::string san =
      absl::StrCat("DNS:", host_name, ",DNS:localhost,IP:127.0.0.1");
  for (const std::string& ip : ips) absl::StrAppend(&san, ",IP:", ip);
  const std::string stem = "host-" + host_name;
  GDT_RETURN_IF_ERROR(
      Issue(dir, stem, host_name, san, certs.ca_file, certs.ca_key_file));
  TestCerts host = certs;
  host.cert_file = dir + "/" + stem + ".pem";
  host.key_file = dir + "/" + stem + ".key";
  return host;
}

}  // namespace gdt::test
