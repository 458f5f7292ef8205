#include "ci/runner_config.h"

#include <chrono>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/temp_dir.h"

namespace gdt::ci {
namespace {

using std::chrono::seconds;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(RunnerConfigTest, ReadsTheExampleConfigToml) {
  absl::StatusOr<RunnerConfig> config =
      LoadRunnerConfigToml(std::string(GDT_EXAMPLES_DIR) + "/config.toml", "");

  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->run_exec, "/usr/bin/gdt-executor");
  EXPECT_THAT(config->prepare_args,
              ElementsAre("--config", "/etc/gdt/executor.yaml", "prepare"));
  EXPECT_EQ(config->prepare_exec_timeout, seconds(7200));
  EXPECT_EQ(config->graceful_kill_timeout, seconds(60));
  EXPECT_EQ(config->builds_dir, "/var/lib/gdt/builds");
  EXPECT_EQ(config->shell, "bash");
  EXPECT_EQ(config->prepare_timeout, seconds(7200));
}

// The runner's saved system ID beside config.toml names the runner in the
// job log's header; a malformed one is ignored.
TEST(RunnerConfigTest, ReadsTheSavedSystemIdBesideTheConfig) {
  test::TempDir dir;
  const std::string path = dir.path() + "/config.toml";
  test::WriteTextFile(path,
                      "[[runners]]\nname = \"r\"\nexecutor = \"custom\"\n"
                      "[runners.custom]\nrun_exec = \"/bin/true\"\n");
  absl::StatusOr<RunnerConfig> config = LoadRunnerConfigToml(path, "");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->system_id, "");

  test::WriteTextFile(dir.path() + "/.runner_system_id", "s_0123456789aB\n");
  config = LoadRunnerConfigToml(path, "");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->system_id, "s_0123456789aB");

  test::WriteTextFile(dir.path() + "/.runner_system_id", "s_short");
  config = LoadRunnerConfigToml(path, "");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->system_id, "");
}

TEST(RunnerConfigTest, FeatureFlagsAreATableOfBooleans) {
  const std::string head = "[[runners]]\nexecutor = \"custom\"\n";
  const std::string tail = "[runners.custom]\nrun_exec = \"x\"\n";
  absl::StatusOr<RunnerConfig> config = ParseRunnerConfigToml(
      head +
          "[runners.feature_flags]\nFF_SCRIPT_SECTIONS = true\n"
          "FF_TIMESTAMPS = false\n" +
          tail,
      "c.toml", "");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_THAT(
      config->feature_flags,
      ElementsAre(
          std::pair<const std::string, bool>("FF_SCRIPT_SECTIONS", true),
          std::pair<const std::string, bool>("FF_TIMESTAMPS", false)));

  EXPECT_THAT(ParseRunnerConfigToml(
                  head + "[runners.feature_flags]\nFF_X = \"yes\"\n" + tail,
                  "c.toml", "")
                  .status()
                  .message(),
              HasSubstr("runners.feature_flags.FF_X"));
}

// `clean_git_config` is a boolean; unset, the custom executor's default
// (which depends on GIT_STRATEGY).
TEST(RunnerConfigTest, CleanGitConfigIsABoolean) {
  const std::string head = "[[runners]]\nexecutor = \"custom\"\n";
  const std::string tail = "[runners.custom]\nrun_exec = \"x\"\n";
  absl::StatusOr<RunnerConfig> config =
      ParseRunnerConfigToml(head + tail, "c.toml", "");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->clean_git_config, std::nullopt);

  config = ParseRunnerConfigToml(head + "clean_git_config = false\n" + tail,
                                 "c.toml", "");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->clean_git_config, std::optional<bool>(false));

  EXPECT_THAT(ParseRunnerConfigToml(head + "clean_git_config = \"no\"\n" + tail,
                                    "c.toml", "")
                  .status()
                  .message(),
              HasSubstr("runners.clean_git_config must be a boolean"));
}

TEST(RunnerConfigTest, CustomBuildDirIsATableWithABoolean) {
  const std::string head = "[[runners]]\nexecutor = \"custom\"\n";
  const std::string tail = "[runners.custom]\nrun_exec = \"x\"\n";
  absl::StatusOr<RunnerConfig> config =
      ParseRunnerConfigToml(head + tail, "c.toml", "");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_FALSE(config->custom_build_dir_enabled);

  config = ParseRunnerConfigToml(
      head + tail + "[runners.custom_build_dir]\nenabled = true\n", "c.toml",
      "");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->custom_build_dir_enabled);

  EXPECT_THAT(ParseRunnerConfigToml(
                  head + tail + "[runners.custom_build_dir]\nenabled = 1\n",
                  "c.toml", "")
                  .status()
                  .message(),
              HasSubstr("runners.custom_build_dir.enabled must be a boolean"));
  EXPECT_THAT(ParseRunnerConfigToml(head + "custom_build_dir = true\n" + tail,
                                    "c.toml", "")
                  .status()
                  .message(),
              HasSubstr("runners.custom_build_dir must be a table"));
}

TEST(RunnerConfigTest, PrepareTimeoutIsAGoDurationString) {
  const std::string head =
      "[[runners]]\nexecutor = \"custom\"\nprepare_timeout = ";
  const std::string tail = "\n[runners.custom]\nrun_exec = \"x\"\n";
  absl::StatusOr<RunnerConfig> config =
      ParseRunnerConfigToml(head + "\"1m30s\"" + tail, "c.toml", "");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->prepare_timeout, seconds(90));
  config = ParseRunnerConfigToml(
      "[[runners]]\nexecutor = \"custom\"\nget_sources_timeout = \"2m\"" + tail,
      "c.toml", "");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->get_sources_timeout, seconds(120));

  EXPECT_THAT(ParseRunnerConfigToml(head + "90" + tail, "c.toml", "")
                  .status()
                  .message(),
              HasSubstr("c.toml: runners.prepare_timeout must be a duration"));
  EXPECT_THAT(ParseRunnerConfigToml(head + "\"soon\"" + tail, "c.toml", "")
                  .status()
                  .message(),
              HasSubstr("runners.prepare_timeout must be a duration"));
  // Go's parser: "inf" is no duration, a micro sign is a unit.
  EXPECT_FALSE(
      ParseRunnerConfigToml(head + "\"inf\"" + tail, "c.toml", "").ok());
  config =
      ParseRunnerConfigToml(head + "\"1500000\u00b5s\"" + tail, "c.toml", "");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->prepare_timeout, std::chrono::milliseconds(1500));
  // Past ten years the clock arithmetic would overflow.
  EXPECT_THAT(ParseRunnerConfigToml(head + "\"2562047h\"" + tail, "c.toml", "")
                  .status()
                  .message(),
              HasSubstr("at most ten years"));
}

// Seconds beyond what the clock holds are refused, not wrapped around.
TEST(RunnerConfigTest, TimeoutsAreBounded) {
  const std::string head =
      "[[runners]]\nexecutor = \"custom\"\n[runners.custom]\nrun_exec = "
      "\"x\"\ngraceful_kill_timeout = ";
  EXPECT_THAT(
      ParseRunnerConfigToml(head + "9223372036854775807\n", "c.toml", "")
          .status()
          .message(),
      HasSubstr("c.toml: runners.custom.graceful_kill_timeout must be "
                "a non-negative integer (seconds), at most 316224000"));
  absl::StatusOr<RunnerConfig> config =
      ParseRunnerConfigToml(head + "316224000\n", "c.toml", "");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->graceful_kill_timeout, seconds(316224000));
}

TEST(RunnerConfigTest, BadInputIsOneLineNamingTheKey) {
  EXPECT_THAT(ParseRunnerConfigToml("concurrent = 1\n", "c.toml", "")
                  .status()
                  .message(),
              HasSubstr("c.toml: no [[runners]] entry"));
  EXPECT_THAT(ParseRunnerConfigToml("[[runners]]\nexecutor = \"custom\"\n"
                                    "[runners.custom]\nrun_exec = 5\n",
                                    "c.toml", "")
                  .status()
                  .message(),
              HasSubstr("c.toml: runners.custom.run_exec must be a string"));
  EXPECT_THAT(
      ParseRunnerConfigToml("[[runners]]\nexecutor = \"shell\"\n", "c.toml", "")
          .status()
          .message(),
      HasSubstr("no [[runners]] entry with executor = \"custom\""));
  EXPECT_THAT(
      ParseRunnerConfigToml("[[runners]\n", "c.toml", "").status().message(),
      HasSubstr("c.toml:1:"));
  EXPECT_THAT(
      ParseRunnerConfigToml("[[runners]]\nexecutor = \"custom\"\nshell = "
                            "\"pwsh\"\n[runners.custom]\nrun_exec = \"x\"\n",
                            "c.toml", "")
          .status()
          .message(),
      HasSubstr("gdt needs bash"));
}

TEST(RunnerConfigTest, CloneUrlIsAString) {
  const std::string head = "[[runners]]\nexecutor = \"custom\"\n";
  const std::string tail = "[runners.custom]\nrun_exec = \"x\"\n";
  absl::StatusOr<RunnerConfig> config =
      ParseRunnerConfigToml(head + tail, "c.toml", "");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->clone_url, "");

  config = ParseRunnerConfigToml(
      head + "clone_url = \"https://mirror.test/git\"\n" + tail, "c.toml", "");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->clone_url, "https://mirror.test/git");

  EXPECT_THAT(
      ParseRunnerConfigToml(head + "clone_url = 5\n" + tail, "c.toml", "")
          .status()
          .message(),
      HasSubstr("runners.clone_url must be a string"));
}

// `clean_git_config = true` written out is told from the default.
TEST(RunnerConfigTest, CleanGitConfigWrittenOutIsKnownFromTheDefault) {
  absl::StatusOr<RunnerConfig> config = ParseRunnerConfigToml(
      "[[runners]]\nexecutor = \"custom\"\nclean_git_config = true\n"
      "[runners.custom]\nrun_exec = \"x\"\n",
      "c.toml", "");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->clean_git_config, std::optional<bool>(true));
}

// The four hook scripts of a [[runners]] entry.
TEST(RunnerConfigTest, ReadsTheRunnersHookScripts) {
  absl::StatusOr<RunnerConfig> config = ParseRunnerConfigToml(
      "[[runners]]\nexecutor = \"custom\"\n"
      "pre_get_sources_script = \"echo a\"\n"
      "post_get_sources_script = \"echo b\"\n"
      "pre_build_script = \"source /etc/profile\"\n"
      "post_build_script = \"echo d\"\n"
      "[runners.custom]\nrun_exec = \"/bin/true\"\n",
      "config.toml", "");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->pre_get_sources_script, "echo a");
  EXPECT_EQ(config->post_get_sources_script, "echo b");
  EXPECT_EQ(config->pre_build_script, "source /etc/profile");
  EXPECT_EQ(config->post_build_script, "echo d");
  // output_limit is in kilobytes; the runner's default is 4 MiB.
  EXPECT_EQ(config->output_limit_bytes, 4 * 1024 * 1024);
  absl::StatusOr<RunnerConfig> limited = ParseRunnerConfigToml(
      "[[runners]]\nexecutor = \"custom\"\noutput_limit = 8\n"
      "[runners.custom]\nrun_exec = \"/bin/true\"\n",
      "config.toml", "");
  ASSERT_TRUE(limited.ok()) << limited.status();
  EXPECT_EQ(limited->output_limit_bytes, 8192);
  const absl::Status bad = ParseRunnerConfigToml(
                               "[[runners]]\nexecutor = \"custom\"\n"
                               "output_limit = -1\n",
                               "config.toml", "")
                               .status();
  EXPECT_THAT(bad.message(), HasSubstr("runners.output_limit"));
}

// The runner shows a token without its known prefix, 9 characters long, in
// the job log's header and CI_RUNNER_SHORT_TOKEN.
TEST(RunnerConfigTest, TheTokenIsShownShortAsTheRunnerShowsIt) {
  EXPECT_EQ(ShortenRunnerToken("glrt-abcdefgh12345"), "abcdefgh1");
  EXPECT_EQ(ShortenRunnerToken("glrt-t1_abcdefgh12345"), "abcdefgh1");
  EXPECT_EQ(ShortenRunnerToken("t2_abcdefgh12345"), "abcdefgh1");
  EXPECT_EQ(ShortenRunnerToken("glrtr-abcdefgh12345"), "abcdefgh1");
  EXPECT_EQ(ShortenRunnerToken("GR1348941abcdefgh12345"), "abcdefgh1");
  EXPECT_EQ(ShortenRunnerToken("short"), "short");
  absl::StatusOr<RunnerConfig> config = ParseRunnerConfigToml(
      "[[runners]]\nname = \"gpu\"\ntoken = \"glrt-abcdefgh12345\"\n"
      "executor = \"custom\"\n[runners.custom]\nrun_exec = \"/bin/true\"\n",
      "config.toml", "");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->runner_short_token, "abcdefgh1");
  EXPECT_FALSE(ParseRunnerConfigToml("[[runners]]\ntoken = 5\n"
                                     "executor = \"custom\"\n",
                                     "config.toml", "")
                   .ok());
}

}  // namespace
}  // namespace gdt::ci
