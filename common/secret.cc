#include "common/secret.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/sha256.h"

namespace gdt {

absl::StatusOr<std::string> NewSecretToken() {
  unsigned char bytes[32];
  size_t filled = 0;
  while (filled < sizeof(bytes)) {
    const ssize_t n = getrandom(bytes + filled, sizeof(bytes) - filled, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(
          absl::StrCat("cannot read random bytes: ", std::strerror(errno)));
    }
    filled += static_cast<size_t>(n);
  }
  return HexEncode(
      std::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
}

std::string SecretSha256Hex(std::string_view bytes) { return Sha256Hex(bytes); }

std::string HmacSha256Hex(std::string_view key, std::string_view message) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(),
       digest, &length);
  return HexEncode(
      std::string_view(reinterpret_cast<const char*>(digest), length));
}

bool SameSecret(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return diff == 0;
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path,
                                          std::string_view what) {
  // A directory opens like a file and then reads as nothing: say what it is.
  struct stat info = {};
  if (stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        std::string(what), " ", path, " is a directory, not a token file"));
  }
  std::ifstream file(path);
  if (!file) {
    return absl::NotFoundError(absl::StrCat("cannot read ", std::string(what),
                                            " ", path, ": ",
                                            std::strerror(errno)));
  }
  std::string line;
  errno = 0;
  std::getline(file, line);
  if (file.bad() || (file.fail() && !file.eof())) {
    const int error = errno;
    return absl::NotFoundError(
        absl::StrCat("cannot read ", std::string(what), " ", path, ": ",
                     error != 0 ? std::strerror(error) : "read error"));
  }
  std::string token(absl::StripAsciiWhitespace(line));
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(what), " ", path, " is empty"));
  }
  return token;
}

std::string TokenFileModeProblem(const std::string& path) {
  struct stat info = {};
  if (stat(path.c_str(), &info) != 0) return "";
  if ((info.st_mode & 077) == 0) return "";
  return absl::StrFormat(
      "mode %04o lets %s read it; chmod 600 %s", info.st_mode & 07777,
      (info.st_mode & 07) != 0 ? "every user" : "its group", path);
}

}  // namespace gdt
