#include "common/logging.h"

#include <cstdlib>

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

absl::StatusOr<std::string> EffectiveLogLevel(const std::string& configured) {
  const char* env = std::getenv("GDT_LOG_LEVEL");
  if (env == nullptr || *env == '\0') {
    GDT_RETURN_IF_ERROR(CheckLogLevel(configured));
    return configured;
  }
  if (!CheckLogLevel(env).ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown GDT_LOG_LEVEL '", env,
                     "' (use trace, debug, info, warn, error, critical, off)"));
  }
  return std::string(env);
}

absl::Status InitLogging(const std::string& program, const std::string& level) {
  auto logger = spdlog::get(program);
  if (logger == nullptr) logger = spdlog::stderr_logger_mt(program);
  logger->set_pattern("ts=%Y-%m-%dT%H:%M:%S.%eZ level=%l prog=%n %v",
                      spdlog::pattern_time_type::utc);
  spdlog::set_default_logger(logger);
  absl::StatusOr<std::string> effective = EffectiveLogLevel(level);
  if (!effective.ok()) {
    // Callers that go on regardless log at the configured level.
    if (CheckLogLevel(level).ok()) {
      spdlog::set_level(spdlog::level::from_str(level));
    }
    return effective.status();
  }
  spdlog::set_level(spdlog::level::from_str(*effective));
  return absl::OkStatus();
}

std::string LogValue(std::string_view value) {
  bool plain = !value.empty();
  for (char c : value) {
    if (c == ' ' || c == '"' || c == '\\' || c == '=' ||
        static_cast<unsigned char>(c) < 0x20) {
      plain = false;
      break;
    }
  }
  if (plain) return std::string(value);
  std::string out = "\"";
  for (char c : value) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace gdt
