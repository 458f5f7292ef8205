#ifndef GDT_COMMON_LOGGING_H_
#define GDT_COMMON_LOGGING_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gdt {

// Log lines are logfmt-style `key=value` pairs (docs/operations.md):
//   ts=2026-11-22T15:04:05.123Z level=info prog=gdt-coord event=gang_admitted
//   gang=train-p5-pl77-n2 master=10.0.0.1:29510
// Messages start with `event=<snake_case>` and carry their facts as
// key=value; values with spaces or quotes go through LogValue().

// Returns OK when `level` is one of trace, debug, info, warn, error,
// critical, off. Errors: InvalidArgument naming the value and the choices,
// e.g. "unknown log_level 'verbose' (use trace, ..., off)".
absl::Status CheckLogLevel(const std::string& level);

// The level to use: $GDT_LOG_LEVEL when set and not empty (it overrides the
// config, e.g. for a systemd drop-in), else `configured`.
// Errors: InvalidArgument naming GDT_LOG_LEVEL or log_level and the choices.
absl::StatusOr<std::string> EffectiveLogLevel(const std::string& configured);

// Points spdlog's default logger at stderr with the key=value pattern above
// (UTC timestamps) and sets the level from EffectiveLogLevel(`level`).
// $GDT_LOG_FORMAT=json writes one JSON object per line instead (see
// LogLineJson). Called once, from main(). Errors: those of
// EffectiveLogLevel, and InvalidArgument for a GDT_LOG_FORMAT other than
// logfmt or json (the line format then stays logfmt); on a bad
// $GDT_LOG_LEVEL the configured level still applies.
absl::Status InitLogging(const std::string& program, const std::string& level);

// One log line as a JSON object for log shippers: {"ts": ..., "level": ...,
// "prog": ...} plus every key=value pair of `message` as a string field
// (quoted values unescaped). A message that is not all key=value pairs
// becomes {"msg": message} instead, so nothing is lost.
std::string LogLineJson(std::string_view ts, std::string_view level,
                        std::string_view program, std::string_view message);

// `value` as a logfmt value: unchanged when it is non-empty and has no
// space, quote, backslash, '=' or control character, else in double quotes
// with backslash escapes.
std::string LogValue(std::string_view value);

}  // namespace gdt

#endif  // GDT_COMMON_LOGGING_H_
