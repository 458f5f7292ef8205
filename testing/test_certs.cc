#include "testing/test_certs.h"

#include <chrono>
#include <fstream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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

}  // namespace

absl::StatusOr<TestCerts> MakeTestCerts(
    const std::string& dir, const std::vector<std::string>& extra_ips) {
  TestCerts certs;
  if (absl::Status status = MakeCa(dir, "gdt-test-ca"); !status.ok()) {
    return status;
  }
  if (absl::Status status = MakeCa(dir, "other-ca"); !status.ok()) {
    return status;
  }
  std::string san = "DNS:localhost,IP:127.0.0.1";
  for (const std::string& ip : extra_ips) absl::StrAppend(&san, ",IP:", ip);
  const std::string ext = dir + "/node.ext";
  {
    std::ofstream out(ext);
    out << "subjectAltName=" << san << "\n"
        << "extendedKeyUsage=serverAuth,clientAuth\n"
        << "basicConstraints=CA:FALSE\n";
  }
  if (absl::Status status = Openssl(
          {"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
           "-nodes", "-subj", "/CN=gdt-node", "-keyout", dir + "/node.key",
           "-out", dir + "/node.csr"});
      !status.ok()) {
    return status;
  }
  if (absl::Status status =
          Openssl({"x509", "-req", "-in", dir + "/node.csr", "-CA",
                   dir + "/gdt-test-ca.pem", "-CAkey", dir + "/gdt-test-ca.key",
                   "-CAcreateserial", "-days", "2", "-extfile", ext, "-out",
                   dir + "/node.pem"});
      !status.ok()) {
    return status;
  }
  certs.ca_file = dir + "/gdt-test-ca.pem";
  certs.cert_file = dir + "/node.pem";
  certs.key_file = dir + "/node.key";
  certs.other_ca_file = dir + "/other-ca.pem";
  return certs;
}

}  // namespace gdt::test
