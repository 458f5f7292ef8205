#ifndef GDT_COMMON_SHA256_H_
#define GDT_COMMON_SHA256_H_

// SHA-256 through OpenSSL's libcrypto, as lowercase hex (what sha256sum and
// GitLab's X-Checksum-SHA256 print).

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace gdt {

// `bytes` as lowercase hex, two digits a byte.
std::string HexEncode(std::string_view bytes);

std::string Sha256Hex(std::string_view bytes);

// SHA-1, for names computed the way others compute them (GitLab's
// `cache:key:files` digest); never for integrity.
std::string Sha1Hex(std::string_view bytes);

// Hashes the file at `path` in chunks. NotFound/Unavailable with
// "cannot read <path>: <reason>" when it cannot be read.
absl::StatusOr<std::string> Sha256FileHex(const std::string& path);

// Incremental hashing, e.g. of a download while it is written.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Update(std::string_view bytes);
  // The hex digest of everything given; call once.
  std::string FinishHex();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace gdt

#endif  // GDT_COMMON_SHA256_H_
