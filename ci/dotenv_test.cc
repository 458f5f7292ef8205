#include "ci/dotenv.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/temp_dir.h"

namespace gdt::ci {
namespace {

using test::TempDir;
using test::WriteTextFile;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> Parse(
    const std::string& text) {
  return ParseDotenv({"build.env"}, {text});
}

TEST(DotenvTest, ReadsKeyValueLinesAsGitLabDoes) {
  auto vars = Parse(
      "DATASET_VERSION=v3\n"
      "  SPACED  =  padded value \r\n"
      "QUOTED=\"kept as is\"\n"
      "URL=http://h/?a=b\n"
      "EMPTY=\n"
      "9LIVES=$HOME/x\n"
      "DATASET_VERSION=v4");
  ASSERT_TRUE(vars.ok()) << vars.status();
  EXPECT_THAT(*vars, ElementsAre(Pair("DATASET_VERSION", "v4"),
                                 Pair("SPACED", "padded value"),
                                 Pair("QUOTED", "\"kept as is\""),
                                 Pair("URL", "http://h/?a=b"),
                                 Pair("EMPTY", ""), Pair("9LIVES", "$HOME/x")));
  // A byte order mark is dropped; several files make one report.
  vars = ParseDotenv({"a.env", "b.env"}, {"\xEF\xBB\xBFX=1", "X=2\nY=3\n"});
  ASSERT_TRUE(vars.ok()) << vars.status();
  EXPECT_THAT(*vars, ElementsAre(Pair("X", "2"), Pair("Y", "3")));
  vars = Parse("");
  ASSERT_TRUE(vars.ok()) << vars.status();
  EXPECT_THAT(*vars, IsEmpty());
}

TEST(DotenvTest, RefusesWhatGitLabRefuses) {
  const auto error = [](const std::string& text) {
    auto vars = Parse(text);
    EXPECT_FALSE(vars.ok()) << text;
    return std::string(vars.status().message());
  };
  EXPECT_THAT(error("A=1\n\nB=2\n"), HasSubstr("build.env:2: not KEY=VALUE"));
  EXPECT_THAT(error("# comment\nA=1\n"), HasSubstr("build.env:1:"));
  EXPECT_THAT(error("export A=1\n"), HasSubstr("'export A'"));
  EXPECT_THAT(error("# A=1\n"), HasSubstr("'# A'"));
  EXPECT_THAT(error("=1\n"), HasSubstr("''"));
  EXPECT_THAT(error("A-B=1\n"), HasSubstr("'A-B'"));
  EXPECT_THAT(error(std::string(256, 'K') + "=1\n"), HasSubstr("255"));
  std::string many;
  for (int i = 0; i <= 20; ++i) absl::StrAppend(&many, "V", i, "=x\n");
  EXPECT_THAT(error(many), HasSubstr("sets 21 variables; GitLab takes at "
                                     "most 20"));
  // Repeated keys count once.
  std::string repeated;
  for (int i = 0; i < 30; ++i) absl::StrAppend(&repeated, "V", i % 20, "=x\n");
  EXPECT_TRUE(Parse(repeated).ok());
  EXPECT_THAT(error("A=" + std::string(kDotenvMaxBytes - 3, 'x') + "\n"),
              HasSubstr("5120 bytes; GitLab takes less than 5120"));
  EXPECT_TRUE(Parse("A=" + std::string(kDotenvMaxBytes - 4, 'x') + "\n").ok());
}

TEST(DotenvTest, ReadsAStoredReport) {
  TempDir dir;
  const std::string report = DotenvReportDir(dir.path(), 7);
  EXPECT_EQ(report, dir.path() + "/7.dotenv");
  auto vars = ReadDotenvReport(report);
  ASSERT_TRUE(vars.ok()) << vars.status();
  EXPECT_THAT(*vars, IsEmpty());

  std::filesystem::create_directories(report);
  WriteTextFile(report + "/1", "A=1\n");
  WriteTextFile(report + "/2", "B=2\nbad\n");
  WriteTextFile(report + "/paths", "one.env\nout/two.env\n");
  vars = ReadDotenvReport(report);
  ASSERT_FALSE(vars.ok());
  EXPECT_THAT(vars.status().message(), HasSubstr("out/two.env:2:"));
  WriteTextFile(report + "/2", "B=2\n");
  vars = ReadDotenvReport(report);
  ASSERT_TRUE(vars.ok()) << vars.status();
  EXPECT_THAT(*vars, ElementsAre(Pair("A", "1"), Pair("B", "2")));
}

// The report's files were written by the job's account; run-local reads
// them, as root on a host with member accounts. A file the job swapped for
// a link to a file only root may read, a FIFO (whose open would wait for a
// writer for good), a hard link or a linked directory is refused and named,
// never read.
TEST(DotenvTest, AStoredReportIsReadWithoutFollowingWhatTheJobPutThere) {
  TempDir dir;
  const std::string secret = dir.path() + "/root-only.env";
  WriteTextFile(secret, "LEAKED=root-only-secret\n");
  const std::string report = DotenvReportDir(dir.path(), 8);
  const auto plant = [&](const std::function<int(const char*)>& make) {
    std::filesystem::remove_all(report);
    std::filesystem::create_directories(report);
    WriteTextFile(report + "/1", "A=1\n");
    WriteTextFile(report + "/paths", "build.env\nsecret.env\n");
    EXPECT_EQ(make((report + "/2").c_str()), 0) << std::strerror(errno);
    auto vars = ReadDotenvReport(report);
    EXPECT_FALSE(vars.ok());
    EXPECT_EQ(vars.status().code(), absl::StatusCode::kFailedPrecondition);
    return std::string(vars.status().message());
  };
  EXPECT_EQ(plant([&](const char* p) { return symlink(secret.c_str(), p); }),
            absl::StrCat("dotenv report ", report, ": cannot read 2: it is a ",
                         "symbolic link, which is not followed"));
  EXPECT_THAT(plant([](const char* p) { return symlink("/dev/zero", p); }),
              HasSubstr("symbolic link"));
  EXPECT_THAT(plant([](const char* p) { return mkfifo(p, 0666); }),
              HasSubstr("cannot read 2: it is not a regular file"));
  EXPECT_THAT(plant([&](const char* p) { return link(secret.c_str(), p); }),
              HasSubstr("cannot read 2: it has 2 hard links"));

  // The report directory itself a link to a directory holding "1".
  std::filesystem::remove_all(report);
  const std::string elsewhere = dir.path() + "/elsewhere";
  std::filesystem::create_directories(elsewhere);
  WriteTextFile(elsewhere + "/1", "LEAKED=root-only-secret\n");
  ASSERT_EQ(symlink(elsewhere.c_str(), report.c_str()), 0);
  auto vars = ReadDotenvReport(report);
  ASSERT_FALSE(vars.ok());
  EXPECT_THAT(vars.status().message(), HasSubstr("it is not a directory"));
  // Discarding it removes the link, not what it points at.
  DiscardDotenvReport(report);
  EXPECT_FALSE(
      std::filesystem::exists(std::filesystem::symlink_status(report)));
  EXPECT_TRUE(std::filesystem::exists(elsewhere + "/1"));

  // Endless files end at GitLab's limit.
  std::filesystem::create_directories(report);
  WriteTextFile(report + "/1", std::string(kDotenvMaxBytes, 'x'));
  vars = ReadDotenvReport(report);
  ASSERT_FALSE(vars.ok());
  EXPECT_EQ(vars.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(vars.status().message(), HasSubstr("GitLab takes less than"));
  DiscardDotenvReport(report);
  EXPECT_FALSE(std::filesystem::exists(report));
}

}  // namespace
}  // namespace gdt::ci
