#include "common/logging.h"

#include <cstdlib>
#include <ctime>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "spdlog/pattern_formatter.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace gdt {
namespace {

bool IsKeyChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
}

// `message` as key=value pairs, or nullopt when it is not entirely pairs.
std::optional<std::vector<std::pair<std::string, std::string>>> ParseLogfmt(
    std::string_view message) {
  std::vector<std::pair<std::string, std::string>> pairs;
  size_t i = 0;
  while (i < message.size()) {
    if (message[i] == ' ') {
      ++i;
      continue;
    }
    const size_t key_start = i;
    while (i < message.size() && IsKeyChar(message[i])) ++i;
    if (i == key_start || i >= message.size() || message[i] != '=') {
      return std::nullopt;
    }
    std::string key(message.substr(key_start, i - key_start));
    ++i;  // '='
    std::string value;
    if (i < message.size() && message[i] == '"') {
      ++i;
      bool closed = false;
      while (i < message.size()) {
        const char c = message[i++];
        if (c == '"') {
          closed = true;
          break;
        }
        if (c == '\\' && i < message.size()) {
          const char escaped = message[i++];
          value += escaped == 'n' ? '\n' : escaped == 't' ? '\t' : escaped;
        } else {
          value += c;
        }
      }
      if (!closed || (i < message.size() && message[i] != ' ')) {
        return std::nullopt;
      }
    } else {
      while (i < message.size() && message[i] != ' ') value += message[i++];
    }
    pairs.emplace_back(std::move(key), std::move(value));
  }
  if (pairs.empty()) return std::nullopt;
  return pairs;
}

class JsonLineFormatter : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg,
              spdlog::memory_buf_t& dest) override {
    const auto since_epoch = msg.time.time_since_epoch();
    const std::time_t seconds =
        std::chrono::duration_cast<std::chrono::seconds>(since_epoch).count();
    const int millis = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(since_epoch)
            .count() %
        1000);
    std::tm utc{};
    gmtime_r(&seconds, &utc);
    const std::string ts =
        absl::StrFormat("%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
                        utc.tm_year + 1900, utc.tm_mon + 1, utc.tm_mday,
                        utc.tm_hour, utc.tm_min, utc.tm_sec, millis);
    const spdlog::string_view_t level =
        spdlog::level::to_string_view(msg.level);
    const std::string line =
        LogLineJson(
            ts, std::string_view(level.data(), level.size()),
            std::string_view(msg.logger_name.data(), msg.logger_name.size()),
            std::string_view(msg.payload.data(), msg.payload.size())) +
        "\n";
    dest.append(line.data(), line.data() + line.size());
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonLineFormatter>();
  }
};

}  // namespace

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
  const char* format = std::getenv("GDT_LOG_FORMAT");
  const std::string line_format =
      format == nullptr || *format == '\0' ? "logfmt" : format;
  if (line_format == "json") {
    logger->set_formatter(std::make_unique<JsonLineFormatter>());
  } else {
    logger->set_pattern("ts=%Y-%m-%dT%H:%M:%S.%eZ level=%l prog=%n %v",
                        spdlog::pattern_time_type::utc);
  }
  spdlog::set_default_logger(logger);
  absl::Status format_status = absl::OkStatus();
  if (line_format != "json" && line_format != "logfmt") {
    format_status = absl::InvalidArgumentError(absl::StrCat(
        "unknown GDT_LOG_FORMAT '", line_format, "' (use logfmt or json)"));
  }
  absl::StatusOr<std::string> effective = EffectiveLogLevel(level);
  if (!effective.ok()) {
    // Callers that go on regardless log at the configured level.
    if (CheckLogLevel(level).ok()) {
      spdlog::set_level(spdlog::level::from_str(level));
    }
    return effective.status();
  }
  spdlog::set_level(spdlog::level::from_str(*effective));
  return format_status;
}

std::string LogLineJson(std::string_view ts, std::string_view level,
                        std::string_view program, std::string_view message) {
  nlohmann::ordered_json line = {
      {"ts", ts}, {"level", level}, {"prog", program}};
  if (auto pairs = ParseLogfmt(message); pairs.has_value()) {
    for (auto& [key, value] : *pairs) {
      // The prefix's fields stay what the logger says.
      if (key == "ts" || key == "level" || key == "prog") key = "msg_" + key;
      line[key] = std::move(value);
    }
  } else {
    line["msg"] = message;
  }
  return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
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
