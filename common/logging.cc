#include "common/logging.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace gdt {

absl::Status CheckLogLevel(const std::string& level) {
  for (const char* known :
       {"trace", "debug", "info", "warn", "error", "critical", "off"}) {
    if (level == known) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown log_level '", level,
                   "' (use trace, debug, info, warn, error, critical, off)"));
}

absl::Status InitLogging(const std::string& program, const std::string& level) {
  auto logger = spdlog::stderr_logger_mt(program);
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %n: %v");
  spdlog::set_default_logger(logger);
  GDT_RETURN_IF_ERROR(CheckLogLevel(level));
  spdlog::set_level(spdlog::level::from_str(level));
  return absl::OkStatus();
}

}  // namespace gdt
