#ifndef GDT_COMMON_LOGGING_H_
#define GDT_COMMON_LOGGING_H_

#include <string>

#include "absl/status/status.h"

namespace gdt {

// Points spdlog's default logger at stderr with the program's name and sets
// the level ("trace".."critical", "off"). Called once, from main().
// Errors: InvalidArgument for an unknown level name.
absl::Status InitLogging(const std::string& program, const std::string& level);

}  // namespace gdt

#endif  // GDT_COMMON_LOGGING_H_
