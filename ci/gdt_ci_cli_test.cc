// The real gdt-ci binary: expand and lint as a user or a CI job runs them.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/cli_run.h"
#include "testing/temp_dir.h"

namespace gdt::ci {
namespace {

using test::CliRun;
using test::ReadTextFile;
using test::RunCli;
using test::TempDir;
using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::string kTestData = GDT_CI_TESTDATA;

// Runs gdt-ci with `args`; `stream` "stdout" or "stderr" is kept.
CliRun GdtCi(const std::vector<std::string>& args, const std::string& stream) {
  return RunCli(GDT_CI_BIN, args, stream);
}

TEST(GdtCiCliTest, ExpandWritesTheExpansion) {
  TempDir dir;
  const std::string out = dir.path() + "/child.yml";
  const CliRun run =
      GdtCi({"expand", "--file", kTestData + "/expand/all-keys.yml", "-o", out},
            "stderr");
  EXPECT_EQ(run.code, 0) << run.output;
  EXPECT_EQ(run.output, "");
  EXPECT_EQ(ReadTextFile(out),
            ReadTextFile(kTestData + "/expand/all-keys.expected.yml"));
}

TEST(GdtCiCliTest, ExpandWritesThroughALinkAndNeverReplacesADevice) {
  TempDir dir;
  const std::string target = dir.path() + "/target.yml";
  const std::string link = dir.path() + "/link.yml";
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  const std::string input = kTestData + "/expand/all-keys.yml";
  const CliRun run = GdtCi({"expand", "--file", input, "-o", link}, "stderr");
  EXPECT_EQ(run.code, 0) << run.output;
  struct stat st;
  ASSERT_EQ(lstat(link.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << "the link was replaced";
  EXPECT_EQ(ReadTextFile(target),
            ReadTextFile(kTestData + "/expand/all-keys.expected.yml"));

  // A full device: one line and exit 2, and the device is still one.
  const CliRun full =
      GdtCi({"expand", "--file", input, "-o", "/dev/full"}, "stderr");
  EXPECT_EQ(full.code, 2);
  EXPECT_EQ(full.output,
            "gdt-ci expand: cannot write the output (disk full "
            "or output closed)\n");
  ASSERT_EQ(stat("/dev/full", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
}

TEST(GdtCiCliTest, AnEndlessInputIsRefusedWithOneLine) {
  for (const char* command : {"expand", "lint"}) {
    const CliRun run = GdtCi({command, "--file", "/dev/zero"}, "stderr");
    EXPECT_EQ(run.code, 2) << command;
    EXPECT_EQ(run.output, absl::StrCat("gdt-ci ", command,
                                       ": cannot read /dev/zero: it is larger "
                                       "than 64 MiB\n"));
  }
}

TEST(GdtCiCliTest, ExpandPrintsToStdoutByDefault) {
  const CliRun run = GdtCi(
      {"expand", "--file", kTestData + "/expand/merge-into-job.yml"}, "stdout");
  EXPECT_EQ(run.code, 0);
  EXPECT_EQ(run.output,
            ReadTextFile(kTestData + "/expand/merge-into-job.expected.yml"));
}

TEST(GdtCiCliTest, BadBlockIsOneLineAndExitCodeOne) {
  const std::string file = kTestData + "/malformed/launcher-typo.yml";
  for (const char* command : {"expand", "lint"}) {
    const CliRun run = GdtCi({command, "--file", file}, "stderr");
    EXPECT_EQ(run.code, 1) << command;
    EXPECT_EQ(run.output,
              file +
                  ":7:17: train: parallel:distributed:launcher must be one "
                  "of torchrun, env, nccl, none, not 'torchrn' (did you "
                  "mean 'torchrun'?)\n")
        << command;
  }
  // Nothing half-written on stdout either.
  EXPECT_EQ(GdtCi({"expand", "--file", file}, "stdout").output, "");
}

TEST(GdtCiCliTest, LintJsonForScripts) {
  const CliRun bad = GdtCi(
      {"lint", "--json", "--file", kTestData + "/malformed/nodes-zero.yml"},
      "stdout");
  EXPECT_EQ(bad.code, 1);
  const nlohmann::json json = nlohmann::json::parse(bad.output);
  EXPECT_EQ(json["ok"], false);
  EXPECT_EQ(json["errors"][0]["line"], 6);
  EXPECT_EQ(json["errors"][0]["column"], 14);

  const CliRun good =
      GdtCi({"lint", "--json", "--file", kTestData + "/expand/all-keys.yml"},
            "stdout");
  EXPECT_EQ(good.code, 0);
  EXPECT_EQ(nlohmann::json::parse(good.output)["gangs"][0]["nodes"], 4);
}

TEST(GdtCiCliTest, LintExplainsTheGangs) {
  const CliRun run =
      GdtCi({"lint", "--file", kTestData + "/expand/no-block.yml"}, "stdout");
  EXPECT_EQ(run.code, 0);
  EXPECT_THAT(run.output,
              HasSubstr("train: 2 nodes x 8 GPUs, 8 processes per node "
                        "(world size 16), launcher torchrun [parallel + "
                        "GDT_* variables]"));
}

TEST(GdtCiCliTest, UsageAndIoErrorsExitTwo) {
  const CliRun missing =
      GdtCi({"lint", "--file", "/nonexistent.yml"}, "stderr");
  EXPECT_EQ(missing.code, 2);
  EXPECT_THAT(missing.output, StartsWith("gdt-ci lint: cannot read "));
  EXPECT_EQ(std::count(missing.output.begin(), missing.output.end(), '\n'), 1);

  // A directory is not an empty file: one line and exit 2, both commands.
  for (const char* command : {"lint", "expand"}) {
    const CliRun directory = GdtCi({command, "--file", kTestData}, "stderr");
    EXPECT_EQ(directory.code, 2) << command;
    EXPECT_EQ(directory.output,
              absl::StrCat("gdt-ci ", command, ": cannot read ", kTestData,
                           ": it is a directory, not a file\n"));
  }

  const CliRun unwritable =
      GdtCi({"expand", "--file", kTestData + "/expand/all-keys.yml", "-o",
             "/nonexistent/dir/child.yml"},
            "stderr");
  EXPECT_EQ(unwritable.code, 2);
  EXPECT_THAT(unwritable.output,
              StartsWith("gdt-ci expand: cannot write /nonexistent/dir/"));

  const CliRun bad_tag =
      GdtCi({"expand", "--file", kTestData + "/expand/all-keys.yml", "--tag",
             "gpu: a100"},
            "stderr");
  EXPECT_EQ(bad_tag.code, 2);
  EXPECT_THAT(bad_tag.output, StartsWith("gdt-ci expand: --tag 'gpu: a100': "));

  const CliRun bad_flag = GdtCi({"lint", "--max-nodes", "0"}, "stderr");
  EXPECT_EQ(bad_flag.code, 2);
  EXPECT_THAT(bad_flag.output, HasSubstr("--max-nodes"));
}

}  // namespace
}  // namespace gdt::ci
