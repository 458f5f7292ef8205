#include "common/logging.h"

#include <cstdlib>
#include <optional>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

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

}  // namespace
}  // namespace gdt
