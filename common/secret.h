#ifndef GDT_COMMON_SECRET_H_
#define GDT_COMMON_SECRET_H_

// Small helpers for the secrets of docs/security.md: random tokens, their
// SHA-256 for storage, HMAC, constant-time comparison
// and reading a token file. Nothing here logs a secret.

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace gdt {

// 32 random bytes from getrandom(2) as 64 lowercase hex characters.
// Errors: Internal when the kernel gives no randomness.
absl::StatusOr<std::string> NewSecretToken();

// Lowercase hex SHA-256 of `bytes`: Sha256Hex (common/sha256.h) under a name
// that marks the hash of a secret, which is compared with SameSecret.
std::string SecretSha256Hex(std::string_view bytes);

// Lowercase hex HMAC-SHA256 of `message` under `key`.
std::string HmacSha256Hex(std::string_view key, std::string_view message);

// True when `a` and `b` are equal; the time taken depends only on the
// lengths.
bool SameSecret(std::string_view a, std::string_view b);

// Reads a token from the file at `path`: its first line, surrounding
// whitespace removed. `what` names the setting in errors ("admin_token_file").
// Errors: NotFound "cannot read <what> <path>: <reason>" (missing, not
// permitted, or a read error); InvalidArgument "<what> <path> is a
// directory, not a token file" and "<what> <path> is empty".
absl::StatusOr<std::string> ReadTokenFile(const std::string& path,
                                          std::string_view what);

// Daemons log a warning (and go on) when a token file they read can be
// read by others than its owner: a job running as another user on the
// host could then speak for the host or the operator. Returns that
// warning's reason, e.g. "mode 0644 lets group and others read it; chmod
// 600", or "" when the mode is 0600 or stricter (or the file is gone).
std::string TokenFileModeProblem(const std::string& path);

}  // namespace gdt

#endif  // GDT_COMMON_SECRET_H_
