#include "common/yaml_config.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gdt {
namespace {

using ::testing::HasSubstr;
using Numbers = std::map<std::string, int>;

absl::StatusOr<Numbers> ParseNumbers(std::string_view text) {
  Numbers numbers;
  absl::Status status = ParseYamlConfig(
      text, [&numbers](const std::string& key, const YAML::Node& value) {
        if (key == "refused") return absl::InvalidArgumentError("no refused");
        numbers[key] = value.as<int>();  // Throws on a non-number.
        return absl::OkStatus();
      });
  if (!status.ok()) return status;
  return numbers;
}

TEST(YamlConfigTest, HandsEveryEntryOverAndAnEmptyFileHasNone) {
  absl::StatusOr<Numbers> numbers = ParseNumbers("a: 1\nb: 2\n");
  ASSERT_TRUE(numbers.ok()) << numbers.status();
  EXPECT_EQ(*numbers, (Numbers{{"a", 1}, {"b", 2}}));
  EXPECT_TRUE(ParseNumbers("").value().empty());
}

TEST(YamlConfigTest, ErrorsAreOneLineNamingLineAndColumn) {
  EXPECT_EQ(ParseNumbers("- a\n- b\n").status().message(),
            "the config must be a YAML map");
  const absl::Status syntax = ParseNumbers("a: 1\nb: [\n").status();
  EXPECT_EQ(syntax.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(syntax.message(), HasSubstr("bad YAML at line 3, column 1"));
  // A conversion inside the entry's parser throws too, and is caught.
  const absl::Status type = ParseNumbers("a: 1\nb: x\n").status();
  EXPECT_EQ(type.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(type.message(), HasSubstr("bad YAML at line 2, column 4"));
  EXPECT_EQ(ParseNumbers("refused: 1\n").status().message(), "no refused");
}

TEST(YamlConfigTest, LoadNamesTheFile) {
  const std::string path = ::testing::TempDir() + "yaml_config_test_" +
                           std::to_string(getpid()) + ".yaml";
  std::ofstream(path) << "a: [\n";
  absl::StatusOr<Numbers> loaded = LoadYamlConfig<Numbers>(path, ParseNumbers);
  std::filesystem::remove(path);
  EXPECT_THAT(loaded.status().message(),
              HasSubstr(path + ": bad YAML at line"));
  EXPECT_THAT(LoadYamlConfig<Numbers>(path, ParseNumbers).status().message(),
              HasSubstr(path));
}

TEST(YamlConfigTest, BooleansAreReadAsYamlCppReadsThemAndOthersNamed) {
  for (const char* text : {"true", "True", "TRUE", "yes", "on"}) {
    EXPECT_EQ(ReadYamlBool(YAML::Load(text), "k").value_or(false), true)
        << text;
  }
  for (const char* text : {"false", "False", "no", "OFF"}) {
    EXPECT_EQ(ReadYamlBool(YAML::Load(text), "k").value_or(true), false)
        << text;
  }
  for (const char* text : {"maybe", "1", "[true]", "{a: b}", "''"}) {
    absl::StatusOr<bool> read = ReadYamlBool(YAML::Load(text), "x.enabled");
    EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_EQ(read.status().message(), "x.enabled must be true or false")
        << text;
  }
}

}  // namespace
}  // namespace gdt
