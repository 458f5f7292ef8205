#include "common/logging.h"

#include <cstdlib>
#include <optional>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace gdt {
namespace {

// Sets GDT_LOG_LEVEL for one test and restores it afterwards.
class ScopedLogLevelEnv {
 public:
  explicit ScopedLogLevelEnv(const char* value) {
    if (const char* old = std::getenv("GDT_LOG_LEVEL")) saved_ = old;
    if (value != nullptr) {
      setenv("GDT_LOG_LEVEL", value, 1);
    } else {
      unsetenv("GDT_LOG_LEVEL");
    }
  }
  ~ScopedLogLevelEnv() {
    if (saved_.has_value()) {
      setenv("GDT_LOG_LEVEL", saved_->c_str(), 1);
    } else {
      unsetenv("GDT_LOG_LEVEL");
    }
  }

 private:
  std::optional<std::string> saved_;
};

TEST(EffectiveLogLevelTest, ConfigWhenTheEnvironmentIsUnsetOrEmpty) {
  {
    ScopedLogLevelEnv env(nullptr);
    EXPECT_EQ(EffectiveLogLevel("warn").value(), "warn");
  }
  ScopedLogLevelEnv env("");
  EXPECT_EQ(EffectiveLogLevel("debug").value(), "debug");
}

TEST(EffectiveLogLevelTest, EnvironmentOverridesTheConfig) {
  ScopedLogLevelEnv env("trace");
  EXPECT_EQ(EffectiveLogLevel("info").value(), "trace");
}

TEST(EffectiveLogLevelTest, BadValuesNameTheirSource) {
  {
    ScopedLogLevelEnv env("loud");
    EXPECT_THAT(EffectiveLogLevel("info").status().message(),
                ::testing::HasSubstr("unknown GDT_LOG_LEVEL 'loud'"));
  }
  ScopedLogLevelEnv env(nullptr);
  EXPECT_THAT(EffectiveLogLevel("verbose").status().message(),
              ::testing::HasSubstr("unknown log_level 'verbose'"));
}

TEST(LogValueTest, QuotesOnlyWhatNeedsIt) {
  EXPECT_EQ(LogValue("train-p5-pl77-n2"), "train-p5-pl77-n2");
  EXPECT_EQ(LogValue("10.0.0.1:29510"), "10.0.0.1:29510");
  EXPECT_EQ(LogValue(""), "\"\"");
  EXPECT_EQ(LogValue("agent unreachable: refused"),
            "\"agent unreachable: refused\"");
  EXPECT_EQ(LogValue("a=\"b\"\\\n"), "\"a=\\\"b\\\"\\\\\\n\"");
}

TEST(LogLineJsonTest, KeyValueMessagesBecomeFields) {
  const nlohmann::json line = nlohmann::json::parse(
      LogLineJson("2026-11-22T15:04:05.123Z", "warn", "gdt-coord",
                  "event=gang_not_admitted gang=train-p5 reason=\"no free "
                  "port: \\\"x\\\"\" "
                  "level=9"));
  EXPECT_EQ(line["ts"], "2026-11-22T15:04:05.123Z");
  EXPECT_EQ(line["level"], "warn");
  EXPECT_EQ(line["prog"], "gdt-coord");
  EXPECT_EQ(line["event"], "gang_not_admitted");
  EXPECT_EQ(line["gang"], "train-p5");
  EXPECT_EQ(line["reason"], "no free port: \"x\"");
  EXPECT_EQ(line["msg_level"], "9");
  EXPECT_FALSE(line.contains("msg"));
}

TEST(LogLineJsonTest, FreeTextIsKeptWhole) {
  for (const std::string text :
       {"agent started on 10.0.0.1", "a=1 and more", "k=\"open", ""}) {
    const nlohmann::json line =
        nlohmann::json::parse(LogLineJson("t", "info", "gdt-agent", text));
    EXPECT_EQ(line["msg"], text);
    EXPECT_EQ(line.size(), 4u) << line.dump();
  }
  // Bytes that are not UTF-8 do not break the line.
  const nlohmann::json binary = nlohmann::json::parse(
      LogLineJson("t", "info", "p", "event=x value=\xff\xfe"));
  EXPECT_EQ(binary["event"], "x");
}

TEST(InitLoggingTest, AnUnknownLineFormatIsOneClearError) {
  setenv("GDT_LOG_FORMAT", "xml", 1);
  const absl::Status status = InitLogging("gdt-logging-test", "info");
  unsetenv("GDT_LOG_FORMAT");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "unknown GDT_LOG_FORMAT 'xml' (use logfmt or json)");
}

}  // namespace
}  // namespace gdt
