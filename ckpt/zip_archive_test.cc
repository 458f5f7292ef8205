#include "ckpt/zip_archive.h"

#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/temp_dir.h"

namespace gdt::ckpt {
namespace {

using test::ReadTextFile;
using test::TempDir;
using test::WriteTextFile;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

TEST(ZipArchiveTest, RoundTrip) {
  TempDir dir;
  fs::create_directories(dir.path() + "/src/ckpt/step-5");
  WriteTextFile(dir.path() + "/src/ckpt/step-5/model.pt",
                std::string(5000, 'm'));
  WriteTextFile(dir.path() + "/src/ckpt/step-5/manifest.json", "{}");
  const std::string zip = dir.path() + "/a.zip";
  ASSERT_TRUE(CreateZip(dir.path() + "/src",
                        {"ckpt/step-5/model.pt", "ckpt/step-5/manifest.json"},
                        zip)
                  .ok());
  ASSERT_TRUE(ExtractZip(zip, dir.path() + "/out").ok());
  EXPECT_EQ(ReadTextFile(dir.path() + "/out/ckpt/step-5/model.pt"),
            std::string(5000, 'm'));
  EXPECT_EQ(ReadTextFile(dir.path() + "/out/ckpt/step-5/manifest.json"), "{}");
}

TEST(ZipArchiveTest, TruncatedZipIsDataLoss) {
  TempDir dir;
  fs::create_directories(dir.path() + "/src");
  std::string noise;
  for (int i = 0; i < 20000; ++i) noise.push_back(static_cast<char>(i * 7919));
  WriteTextFile(dir.path() + "/src/model.pt", noise);
  const std::string zip = dir.path() + "/a.zip";
  ASSERT_TRUE(CreateZip(dir.path() + "/src", {"model.pt"}, zip).ok());
  fs::resize_file(zip, fs::file_size(zip) / 2);
  const absl::Status status = ExtractZip(zip, dir.path() + "/out");
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_THAT(status.message(), HasSubstr(zip));
}

TEST(ZipArchiveTest, NotAZipIsDataLoss) {
  TempDir dir;
  WriteTextFile(dir.path() + "/a.zip", "<html>sign in</html>");
  EXPECT_EQ(ExtractZip(dir.path() + "/a.zip", dir.path() + "/out").code(),
            absl::StatusCode::kDataLoss);
}

TEST(ZipArchiveTest, EntryOutsideDestinationIsRefused) {
  TempDir dir;
  fs::create_directories(dir.path() + "/src");
  WriteTextFile(dir.path() + "/evil", "x");
  const std::string zip = dir.path() + "/a.zip";
  ASSERT_TRUE(CreateZip(dir.path() + "/src", {"../evil"}, zip).ok());
  fs::remove(dir.path() + "/evil");
  const absl::Status status = ExtractZip(zip, dir.path() + "/out");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("../evil"));
  EXPECT_FALSE(fs::exists(dir.path() + "/evil"));
}

}  // namespace
}  // namespace gdt::ckpt
