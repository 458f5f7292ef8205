#include "common/zip_archive.h"

#include <archive.h>
#include <archive_entry.h>

#include <chrono>
#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/temp_dir.h"

namespace gdt {
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

// A file comes back with its permission bits and modification time (an
// executable stays one; an unchanged file looks unchanged).
TEST(ZipArchiveTest, KeepsModesAndTimes) {
  TempDir dir;
  fs::create_directories(dir.path() + "/src/bin");
  WriteTextFile(dir.path() + "/src/bin/tool", "#!/bin/sh\n");
  fs::permissions(dir.path() + "/src/bin/tool", fs::perms(0750));
  const auto old_time =
      fs::last_write_time(dir.path() + "/src/bin/tool") - std::chrono::hours(5);
  fs::last_write_time(dir.path() + "/src/bin/tool", old_time);
  const std::string zip = dir.path() + "/a.zip";
  ASSERT_TRUE(CreateZip(dir.path() + "/src", {"bin/tool"}, zip).ok());

  ASSERT_TRUE(ExtractZip(zip, dir.path() + "/out").ok());

  const std::string out = dir.path() + "/out/bin/tool";
  EXPECT_EQ(fs::status(out).permissions() & fs::perms::all, fs::perms(0750));
  // A zip keeps whole seconds.
  const auto off = fs::last_write_time(out) - old_time;
  EXPECT_LT(std::chrono::abs(off), std::chrono::seconds(1));
}

// Links already in the destination (a job may have left them there) are
// replaced, as gitlab-runner does, never written through: neither a link in
// place of a file nor one in place of a directory on the way.
TEST(ZipArchiveTest, LinksInTheDestinationAreReplacedNotFollowed) {
  TempDir dir;
  fs::create_directories(dir.path() + "/src/ckpt");
  WriteTextFile(dir.path() + "/src/model.pt", "from the zip");
  WriteTextFile(dir.path() + "/src/ckpt/state.pt", "from the zip too");
  const std::string zip = dir.path() + "/a.zip";
  ASSERT_TRUE(
      CreateZip(dir.path() + "/src", {"model.pt", "ckpt/state.pt"}, zip).ok());
  const std::string outside = dir.path() + "/outside";
  fs::create_directories(outside);
  WriteTextFile(outside + "/victim", "untouched");
  const std::string out = dir.path() + "/out";
  fs::create_directories(out);
  fs::create_symlink(outside + "/victim", out + "/model.pt");
  fs::create_symlink(outside, out + "/ckpt");

  absl::Status extracted = ExtractZip(zip, out);
  ASSERT_TRUE(extracted.ok()) << extracted;
  EXPECT_EQ(ReadTextFile(outside + "/victim"), "untouched");
  EXPECT_FALSE(fs::exists(outside + "/state.pt"));
  EXPECT_FALSE(fs::is_symlink(out + "/model.pt"));
  EXPECT_FALSE(fs::is_symlink(out + "/ckpt"));
  EXPECT_EQ(ReadTextFile(out + "/model.pt"), "from the zip");
  EXPECT_EQ(ReadTextFile(out + "/ckpt/state.pt"), "from the zip too");
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

// A zip of kilobytes that expands to megabytes stops at the bound; entries
// not selected are skipped, whatever they hold.
TEST(ZipArchiveTest, ExtractionIsBoundedAndSelective) {
  TempDir dir;
  fs::create_directories(dir.path() + "/src/a");
  WriteTextFile(dir.path() + "/src/a/zeros", std::string(16 << 20, '\0'));
  WriteTextFile(dir.path() + "/src/a/small", "small");
  const std::string zip = dir.path() + "/a.zip";
  ASSERT_TRUE(CreateZip(dir.path() + "/src", {"a/small", "a/zeros"}, zip).ok());
  ASSERT_LT(fs::file_size(zip), 1u << 20);
  ExtractLimits limits;
  limits.max_bytes = 1 << 20;
  const absl::Status status = ExtractZip(zip, dir.path() + "/out", limits);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_THAT(status.message(),
              HasSubstr("its files expand to more than 1048576 bytes (at "
                        "entry \"a/zeros\")"));
  EXPECT_LE(fs::file_size(dir.path() + "/out/a/zeros"), 1u << 20);

  limits.select = [](const std::string& name) { return name == "a/small"; };
  ASSERT_TRUE(ExtractZip(zip, dir.path() + "/picked", limits).ok());
  EXPECT_EQ(ReadTextFile(dir.path() + "/picked/a/small"), "small");
  EXPECT_FALSE(fs::exists(dir.path() + "/picked/a/zeros"));
}

// gitlab-runner stores a link in the artifacts as a link: an extraction
// that selects it is refused, one that does not skips it.
TEST(ZipArchiveTest, ALinkIsRefusedOnlyWhereItIsExtracted) {
  TempDir dir;
  const std::string zip = dir.path() + "/a.zip";
  {
    archive* a = archive_write_new();
    archive_write_set_format_zip(a);
    ASSERT_EQ(archive_write_open_filename(a, zip.c_str()), ARCHIVE_OK);
    archive_entry* link = archive_entry_new();
    archive_entry_set_pathname(link, "venv/python");
    archive_entry_set_filetype(link, AE_IFLNK);
    archive_entry_set_perm(link, 0777);
    archive_entry_set_symlink(link, "/etc/shadow");
    ASSERT_EQ(archive_write_header(a, link), ARCHIVE_OK);
    archive_entry_free(link);
    archive_entry* file = archive_entry_new();
    archive_entry_set_pathname(file, "ckpt/manifest.json");
    archive_entry_set_filetype(file, AE_IFREG);
    archive_entry_set_perm(file, 0644);
    archive_entry_set_size(file, 2);
    ASSERT_EQ(archive_write_header(a, file), ARCHIVE_OK);
    ASSERT_EQ(archive_write_data(a, "{}", 2), 2);
    archive_entry_free(file);
    ASSERT_EQ(archive_write_close(a), ARCHIVE_OK);
    archive_write_free(a);
  }
  const absl::Status all = ExtractZip(zip, dir.path() + "/all");
  EXPECT_EQ(all.code(), absl::StatusCode::kInvalidArgument) << all;
  EXPECT_THAT(all.message(),
              HasSubstr("\"venv/python\" is not a regular file"));
  ExtractLimits limits;
  limits.select = [](const std::string& name) {
    return name == "ckpt/manifest.json";
  };
  ASSERT_TRUE(ExtractZip(zip, dir.path() + "/some", limits).ok());
  EXPECT_EQ(ReadTextFile(dir.path() + "/some/ckpt/manifest.json"), "{}");
  EXPECT_FALSE(
      fs::exists(fs::symlink_status(dir.path() + "/some/venv/python")));
}

// As gitlab-runner's cache archiver and extractor: directories (an empty
// one too) and links go into the zip and come back as they were, a
// directory with its mode and time, a link with its target untouched.
TEST(ZipArchiveTest, LinksAndEmptyDirectoriesRoundTripWhenAsked) {
  TempDir dir;
  const std::string src = dir.path() + "/src";
  fs::create_directories(src + "/vendor/empty");
  WriteTextFile(src + "/vendor/libfoo.so.1", "lib");
  fs::create_symlink("libfoo.so.1", src + "/vendor/libfoo.so");
  fs::permissions(src + "/vendor/empty", fs::perms::owner_all);
  const auto old = fs::file_time_type::clock::now() - std::chrono::hours(48);
  fs::last_write_time(src + "/vendor/empty", old);
  const std::string zip = dir.path() + "/a.zip";
  const absl::Status created = CreateZip(
      src, {"vendor", "vendor/empty", "vendor/libfoo.so", "vendor/libfoo.so.1"},
      zip);
  ASSERT_TRUE(created.ok()) << created;

  const std::string out = dir.path() + "/out";
  ExtractLimits limits;
  limits.links = true;
  const absl::Status extracted = ExtractZip(zip, out, limits);

  ASSERT_TRUE(extracted.ok()) << extracted;
  EXPECT_TRUE(fs::is_directory(out + "/vendor/empty"));
  EXPECT_EQ(fs::status(out + "/vendor/empty").permissions(),
            fs::perms::owner_all);
  EXPECT_LT(fs::last_write_time(out + "/vendor/empty"),
            fs::file_time_type::clock::now() - std::chrono::hours(24));
  ASSERT_TRUE(fs::is_symlink(out + "/vendor/libfoo.so"));
  EXPECT_EQ(fs::read_symlink(out + "/vendor/libfoo.so"), "libfoo.so.1");
  EXPECT_EQ(ReadTextFile(out + "/vendor/libfoo.so"), "lib");
  // Without asking, a link in the zip is still refused.
  EXPECT_EQ(ExtractZip(zip, dir.path() + "/plain").code(),
            absl::StatusCode::kInvalidArgument);
}

// A link entry never becomes a way out: a later entry beneath it, or a
// link the destination already had where it goes, is replaced, not
// followed.
TEST(ZipArchiveTest, ExtractedLinksAreNotFollowedByLaterEntries) {
  TempDir dir;
  const std::string outside = dir.path() + "/outside";
  fs::create_directories(outside);
  const std::string zip = dir.path() + "/a.zip";
  {
    archive* a = archive_write_new();
    archive_write_set_format_zip(a);
    ASSERT_EQ(archive_write_open_filename(a, zip.c_str()), ARCHIVE_OK);
    archive_entry* link = archive_entry_new();
    archive_entry_set_pathname(link, "vendor");
    archive_entry_set_filetype(link, AE_IFLNK);
    archive_entry_set_perm(link, 0777);
    archive_entry_set_symlink(link, outside.c_str());
    ASSERT_EQ(archive_write_header(a, link), ARCHIVE_OK);
    archive_entry_free(link);
    archive_entry* file = archive_entry_new();
    archive_entry_set_pathname(file, "vendor/planted.sh");
    archive_entry_set_filetype(file, AE_IFREG);
    archive_entry_set_perm(file, 0755);
    archive_entry_set_size(file, 2);
    ASSERT_EQ(archive_write_header(a, file), ARCHIVE_OK);
    ASSERT_EQ(archive_write_data(a, "hi", 2), 2);
    archive_entry_free(file);
    ASSERT_EQ(archive_write_close(a), ARCHIVE_OK);
    archive_write_free(a);
  }
  const std::string out = dir.path() + "/out";
  ExtractLimits limits;
  limits.links = true;

  const absl::Status extracted = ExtractZip(zip, out, limits);

  ASSERT_TRUE(extracted.ok()) << extracted;
  EXPECT_FALSE(fs::exists(outside + "/planted.sh"));
  EXPECT_FALSE(fs::is_symlink(out + "/vendor"));
  EXPECT_EQ(ReadTextFile(out + "/vendor/planted.sh"), "hi");
}

}  // namespace
}  // namespace gdt
