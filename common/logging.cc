#include "common/logging.h"

#include "absl/strings/str_cat.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace gdt {

absl::Status InitLogging(const std::string& program, const std::string& level) {
  auto logger = spdlog::stderr_logger_mt(program);
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %n: %v");
  spdlog::set_default_logger(logger);
  const spdlog::level::level_enum parsed = spdlog::level::from_str(level);
  if (parsed == spdlog::level::off && level != "off") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown log level '", level,
                     "' (use trace, debug, info, warn, error, critical, off)"));
  }
  spdlog::set_level(parsed);
  return absl::OkStatus();
}

}  // namespace gdt
