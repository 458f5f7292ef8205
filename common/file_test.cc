#include "common/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/temp_dir.h"

namespace gdt {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// The real file system, except that the named step fails the way a full disk
// or a broken rename would.
class FaultyEnv : public Env {
 public:
  enum class Fail { kNothing, kCreate, kAppend, kSync, kRename };
  explicit FaultyEnv(Fail fail) : fail_(fail) {}

  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path, mode_t mode) override {
    if (fail_ == Fail::kCreate) return absl::UnavailableError("disk gone");
    absl::StatusOr<std::unique_ptr<WritableFile>> file =
        Env::Default()->NewWritableFile(path, mode);
    if (!file.ok()) return file.status();
    return std::make_unique<FaultyFile>(std::move(*file), fail_);
  }
  absl::Status RenameFile(const std::string& from,
                          const std::string& to) override {
    if (fail_ == Fail::kRename) return absl::UnavailableError("cross-device");
    return Env::Default()->RenameFile(from, to);
  }
  absl::Status RemoveFile(const std::string& path) override {
    return Env::Default()->RemoveFile(path);
  }
  absl::Status SyncDir(const std::string& dir) override {
    ++dir_syncs;
    return Env::Default()->SyncDir(dir);
  }

  int dir_syncs = 0;

 private:
  class FaultyFile : public WritableFile {
   public:
    FaultyFile(std::unique_ptr<WritableFile> real, Fail fail)
        : real_(std::move(real)), fail_(fail) {}
    absl::Status Append(std::string_view data) override {
      if (fail_ == Fail::kAppend) {
        // Half the data reaches the temporary file, as with ENOSPC.
        real_->Append(data.substr(0, data.size() / 2)).IgnoreError();
        return absl::UnavailableError("no space left on device");
      }
      return real_->Append(data);
    }
    absl::Status Sync() override {
      if (fail_ == Fail::kSync) return absl::UnavailableError("I/O error");
      return real_->Sync();
    }
    absl::Status Close() override { return real_->Close(); }

   private:
    std::unique_ptr<WritableFile> real_;
    Fail fail_;
  };

  Fail fail_;
};

int FilesIn(const std::string& dir) {
  int count = 0;
  for ([[maybe_unused]] const auto& entry :
       std::filesystem::directory_iterator(dir)) {
    ++count;
  }
  return count;
}

TEST(WriteFileAtomicallyTest, ReplacesTheFileAndLeavesNoTemporary) {
  test::TempDir dir;
  const std::string path = dir.path() + "/port";
  FaultyEnv env(FaultyEnv::Fail::kNothing);

  ASSERT_TRUE(WriteFileAtomically(path, "old\n", 0644, &env).ok());
  ASSERT_TRUE(WriteFileAtomically(path, "new\n", 0644, &env).ok());

  EXPECT_EQ(test::ReadTextFile(path), "new\n");
  EXPECT_EQ(FilesIn(dir.path()), 1);
  EXPECT_EQ(env.dir_syncs, 2);
}

TEST(WriteFileAtomicallyTest, AppliesTheMode) {
  test::TempDir dir;
  const std::string path = dir.path() + "/secret";

  ASSERT_TRUE(WriteFileAtomically(path, "x", 0600).ok());

  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(WriteFileAtomicallyTest, FailedStepKeepsTheOldFileWhole) {
  for (FaultyEnv::Fail fail :
       {FaultyEnv::Fail::kCreate, FaultyEnv::Fail::kAppend,
        FaultyEnv::Fail::kSync, FaultyEnv::Fail::kRename}) {
    SCOPED_TRACE(static_cast<int>(fail));
    test::TempDir dir;
    const std::string path = dir.path() + "/state.json";
    ASSERT_TRUE(WriteFileAtomically(path, "old contents\n").ok());
    FaultyEnv env(fail);

    const absl::Status status =
        WriteFileAtomically(path, "new contents that never land\n", 0644, &env);

    EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(status.message(), StartsWith("cannot write " + path + ": "));
    EXPECT_EQ(test::ReadTextFile(path), "old contents\n");
    EXPECT_EQ(FilesIn(dir.path()), 1) << "the temporary file was left behind";
  }
}

TEST(ReadTextFileTest, ReadsWholeUpToTheLimit) {
  test::TempDir dir;
  const std::string path = dir.path() + "/f";
  ASSERT_TRUE(WriteFileAtomically(path, std::string(200000, 'x')).ok());
  absl::StatusOr<std::string> whole = ReadTextFile(path);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->size(), 200000u);
  EXPECT_TRUE(ReadTextFile(path, 200000).ok());
  EXPECT_EQ(ReadTextFile(path, 199999).status().code(),
            absl::StatusCode::kInvalidArgument);
  // An endless file stops at the limit.
  const absl::Status endless = ReadTextFile("/dev/zero", 1 << 20).status();
  EXPECT_EQ(endless.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(endless.message(),
            "cannot read /dev/zero: it is larger than 1 MiB");
  EXPECT_EQ(ReadTextFile(dir.path() + "/none").status().code(),
            absl::StatusCode::kNotFound);
}

// A FIFO nobody writes to reads as empty at once (opening it for reading
// would otherwise wait for a writer for ever); a pipe that is written to
// is read to its end; a directory is refused.
TEST(ReadTextFileTest, AFifoWithoutAWriterDoesNotHang) {
  test::TempDir dir;
  const std::string fifo = dir.path() + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  absl::StatusOr<std::string> empty = ReadTextFile(fifo);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(*empty, "");

  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  ASSERT_EQ(write(fds[1], "job: 1\n", 7), 7);
  close(fds[1]);
  absl::StatusOr<std::string> piped =
      ReadTextFile("/proc/self/fd/" + std::to_string(fds[0]));
  close(fds[0]);
  ASSERT_TRUE(piped.ok()) << piped.status();
  EXPECT_EQ(*piped, "job: 1\n");

  EXPECT_EQ(ReadTextFile(dir.path()).status().message(),
            "cannot read " + dir.path() + ": it is a directory, not a file");
}

// What a less trusted account put in place is read only as the regular file
// it wrote: a link, a FIFO, a device or a hard link to another file is not
// opened for reading (a FIFO would block), and the size is bounded.
TEST(ReadPlainFileTest, ReadsOnlyARegularFileOfOneLink) {
  test::TempDir dir;
  const std::string plain = dir.path() + "/plain";
  ASSERT_TRUE(WriteFileAtomically(plain, "A=1\n").ok());
  absl::StatusOr<std::string> read = ReadPlainFile(plain, 100);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, "A=1\n");
  EXPECT_EQ(ReadPlainFile(plain, 3).status().code(),
            absl::StatusCode::kInvalidArgument);
  const auto refused = [](const std::string& path) {
    const absl::Status status = ReadPlainFile(path, 1 << 20).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition)
        << path << ": " << status;
    return std::string(status.message());
  };
  const std::string secret = dir.path() + "/secret";
  ASSERT_TRUE(WriteFileAtomically(secret, "SECRET=1\n", 0600).ok());
  const std::string linked = dir.path() + "/link";
  ASSERT_EQ(symlink(secret.c_str(), linked.c_str()), 0);
  EXPECT_EQ(refused(linked), "cannot read " + linked +
                                 ": it is a symbolic link, which is not "
                                 "followed");
  const std::string zero = dir.path() + "/zero";
  ASSERT_EQ(symlink("/dev/zero", zero.c_str()), 0);
  EXPECT_THAT(refused(zero), HasSubstr("symbolic link"));
  EXPECT_THAT(refused("/dev/zero"), HasSubstr("not a regular file"));
  const std::string fifo = dir.path() + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0666), 0);
  EXPECT_THAT(refused(fifo), HasSubstr("not a regular file"));
  const std::string hard = dir.path() + "/hard";
  ASSERT_EQ(link(secret.c_str(), hard.c_str()), 0);
  EXPECT_THAT(refused(hard), HasSubstr("has 2 hard links"));
  EXPECT_EQ(ReadPlainFile(dir.path() + "/none", 10).status().code(),
            absl::StatusCode::kNotFound);
  // Relative to a directory descriptor.
  const int fd = open(dir.path().c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(fd, 0);
  read = ReadPlainFile("plain", 100, fd);
  close(fd);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, "A=1\n");
}

TEST(WriteFileAtomicallyTest, MissingDirectoryIsNotFound) {
  test::TempDir dir;
  const std::string path = dir.path() + "/missing/port";

  const absl::Status status = WriteFileAtomically(path, "x");

  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), StartsWith("cannot write " + path + ": "));
  EXPECT_THAT(status.message(), HasSubstr("No such file or directory"));
}

// Links in the way are removed, never followed; paths that would leave the
// root are refused.
TEST(CreateFileBeneathTest, ReplacesLinksAndStaysBeneathTheRoot) {
  test::TempDir dir;
  const std::string root = dir.path() + "/root";
  const std::string outside = dir.path() + "/outside";
  std::filesystem::create_directories(root);
  std::filesystem::create_directories(outside);
  test::WriteTextFile(outside + "/victim", "untouched");
  std::filesystem::create_symlink(outside + "/victim", root + "/file");
  std::filesystem::create_symlink(outside, root + "/dir");

  absl::StatusOr<int> fd = CreateFileBeneath(root, "file", 0600);
  ASSERT_TRUE(fd.ok()) << fd.status();
  ASSERT_EQ(write(*fd, "new", 3), 3);
  close(*fd);
  fd = CreateFileBeneath(root, "dir/sub/f");
  ASSERT_TRUE(fd.ok()) << fd.status();
  close(*fd);
  ASSERT_TRUE(MakeDirsBeneath(root, "dir/other").ok());

  EXPECT_EQ(test::ReadTextFile(outside + "/victim"), "untouched");
  EXPECT_EQ(test::ReadTextFile(root + "/file"), "new");
  EXPECT_FALSE(std::filesystem::is_symlink(root + "/dir"));
  EXPECT_TRUE(std::filesystem::is_regular_file(root + "/dir/sub/f"));
  EXPECT_TRUE(std::filesystem::is_directory(root + "/dir/other"));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(outside),
                          std::filesystem::directory_iterator()),
            1);

  for (const char* bad : {"../escape", "/etc/passwd", "", "a/../../b"}) {
    absl::StatusOr<int> refused = CreateFileBeneath(root, bad);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/escape"));
  std::filesystem::create_directories(root + "/a-dir");
  absl::StatusOr<int> directory = CreateFileBeneath(root, "a-dir");
  EXPECT_EQ(directory.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(directory.status().message()),
              HasSubstr("it is a directory"));
}

}  // namespace
}  // namespace gdt
