#ifndef GDT_KV_KV_CLI_H_
#define GDT_KV_KV_CLI_H_

#include <functional>
#include <iosfwd>

namespace gdt::kv {

// Exit codes of gdt-kv (docs/kv.md).
inline constexpr int kExitOk = 0;
inline constexpr int kExitNoMatch = 1;  // get: no such key; cas: not swapped.
inline constexpr int kExitUsage = 2;    // Bad arguments or environment.
inline constexpr int kExitTimeout = 3;  // The deadline passed.
inline constexpr int kExitRefused = 4;  // The coordinator refused the call.
inline constexpr int kExitUnavailable = 5;  // Coordinator gone / gang ended.

// gdt-kv: the gang key-value store from shell and Python.
//   gdt-kv [--timeout S] [--json] set K V|-     (V "-": read stdin)
//   gdt-kv get K
//   gdt-kv wait K [--timeout S]
//   gdt-kv cas K OLD NEW [--absent]             (--absent: only if no key)
//   gdt-kv add K N
// Reads GDT_COORDINATOR, GDT_GANG_ID, GDT_EPOCH and GDT_KV_TOKEN through
// `getenv`. Prints values (get, wait), the current value (cas) or the new
// count (add) on `out`, one line each, or one JSON object with --json; one
// clear line on `err` for every failure. Returns the exit code above.
int RunKvCli(int argc, const char* const* argv,
             const std::function<const char*(const char*)>& getenv,
             std::istream& in, std::ostream& out, std::ostream& err);

}  // namespace gdt::kv

#endif  // GDT_KV_KV_CLI_H_
