#ifndef GDT_COMMON_LOGGING_H_
#define GDT_COMMON_LOGGING_H_

#include <string>

#include "absl/status/status.h"

namespace gdt {

// Returns OK when `level` is one of trace, debug, info, warn, error,
// critical, off. Errors: InvalidArgument naming the value and the choices,
// e.g. "unknown log_level 'verbose' (use trace, ..., off)".
absl::Status CheckLogLevel(const std::string& level);

// Points spdlog's default logger at stderr with the program's name and sets
// the level ("trace".."critical", "off"). Called once, from main().
// Errors: InvalidArgument for an unknown level name.
absl::Status InitLogging(const std::string& program, const std::string& level);

}  // namespace gdt

#endif  // GDT_COMMON_LOGGING_H_
