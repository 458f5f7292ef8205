#include "agent/exit_outbox.h"

#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "testing/temp_dir.h"

namespace gdt::agent {
namespace {

namespace fs = std::filesystem;

ExitRecord Exit(const std::string& gang, uint32_t epoch, int64_t job,
                int32_t code) {
  ExitRecord record;
  record.gang_id = gang;
  record.epoch = epoch;
  record.member_index = 2;
  record.job_id = job;
  record.exit_code = code;
  record.exited_unix_ms = 1764063733123;
  return record;
}

size_t FilesIn(const std::string& dir) {
  std::error_code error;
  size_t count = 0;
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    (void)entry;
    ++count;
  }
  return count;
}

TEST(ExitOutboxTest, KeepsExitsOnDiskForTheNextAgent) {
  test::TempDir dir;
  const std::string path = dir.Sub("outbox");
  {
    ExitOutbox outbox(path);
    outbox.Load();  // Nothing there yet.
    ExitRecord failed = Exit("train-p5-pl77-n2", 1, 1002, 3);
    failed.signal = 0;
    failed.peer_suspected = true;
    ASSERT_TRUE(outbox.Add(failed).ok());
    ExitRecord lost = Exit("train-p5-pl77-n2", 2, 2002, 0);
    lost.lost_reason = "its executor went away";
    lost.cancelled = true;
    ASSERT_TRUE(outbox.Add(lost).ok());
    EXPECT_EQ(FilesIn(path), 2u);
    EXPECT_EQ(fs::status(path).permissions() & fs::perms::all,
              fs::perms::owner_all);
  }
  // The agent restarted: the next one owes the same exits, in order.
  ExitOutbox next(path);
  next.Load();
  const std::vector<ExitRecord> pending = next.Pending();
  ASSERT_EQ(pending.size(), 2u);
  EXPECT_EQ(pending[0].gang_id, "train-p5-pl77-n2");
  EXPECT_EQ(pending[0].epoch, 1u);
  EXPECT_EQ(pending[0].member_index, 2u);
  EXPECT_EQ(pending[0].job_id, 1002);
  EXPECT_EQ(pending[0].exit_code, 3);
  EXPECT_TRUE(pending[0].peer_suspected);
  EXPECT_EQ(pending[0].exited_unix_ms, 1764063733123);
  EXPECT_EQ(pending[1].lost_reason, "its executor went away");
  EXPECT_TRUE(pending[1].cancelled);

  // Acknowledged records are gone from memory and disk.
  next.Remove(pending[0].Key());
  next.Remove(pending[1].Key());
  next.Remove(pending[1].Key());  // Idempotent.
  EXPECT_EQ(next.size(), 0u);
  EXPECT_EQ(FilesIn(path), 0u);
}

TEST(ExitOutboxTest, TheFirstExitOfAMemberJobCounts) {
  test::TempDir dir;
  ExitOutbox outbox(dir.Sub("outbox"));
  ASSERT_TRUE(outbox.Add(Exit("g", 1, 7, 3)).ok());
  ASSERT_TRUE(outbox.Add(Exit("g", 1, 7, 143)).ok());
  // Another epoch's job is another record.
  ASSERT_TRUE(outbox.Add(Exit("g", 2, 8, 0)).ok());
  const std::vector<ExitRecord> pending = outbox.Pending();
  ASSERT_EQ(pending.size(), 2u);
  EXPECT_EQ(pending[0].exit_code, 3);
  EXPECT_EQ(pending[1].job_id, 8);
}

TEST(ExitOutboxTest, DropsFilesThatAreNoRecords) {
  test::TempDir dir;
  const std::string path = dir.Sub("outbox");
  {
    ExitOutbox outbox(path);
    ASSERT_TRUE(outbox.Add(Exit("g", 1, 7, 3)).ok());
  }
  test::WriteTextFile(path + "/garbage.json", "{not json");
  test::WriteTextFile(path + "/other.json", "{\"gang_id\": \"h\"}");
  // What a crash during an atomic write leaves.
  test::WriteTextFile(path + "/g%231%237.json.tmp-1-2", "{");
  ExitOutbox outbox(path);
  outbox.Load();
  ASSERT_EQ(outbox.size(), 1u);
  EXPECT_EQ(outbox.Pending()[0].job_id, 7);
  EXPECT_EQ(FilesIn(path), 1u);
}

TEST(ExitOutboxTest, RecordTextRoundTrips) {
  ExitRecord record = Exit("gang with spaces/and slashes", 4, 99, 137);
  record.signal = 9;
  ExitRecord back;
  uint64_t sequence = 0;
  ASSERT_TRUE(
      ExitRecordFromText(ExitRecordToText(record, 12), &back, &sequence).ok());
  EXPECT_EQ(sequence, 12u);
  EXPECT_EQ(back.Key(), record.Key());
  EXPECT_EQ(back.signal, 9);
  EXPECT_EQ(back.exit_code, 137);
  EXPECT_FALSE(ExitRecordFromText("[]", &back, &sequence).ok());
}

// A job filled the file system of the agent's scratch dir: an exit is
// still kept on disk, in the space the agent set aside, and the next agent
// finds it.
TEST(ExitOutboxTest, AnExitIsKeptOnAFullDiskInTheReserve) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: mounts a tmpfs";
  test::TempDir dir;
  const std::string disk = dir.Sub("disk");
  fs::create_directories(disk);
  ASSERT_EQ(mount("tmpfs", disk.c_str(), "tmpfs", 0, "size=8m"), 0)
      << strerror(errno);
  struct Unmount {
    std::string path;
    ~Unmount() { umount2(path.c_str(), MNT_DETACH); }
  } unmount{disk};
  DiskReserve reserve(disk + "/.disk-reserve");
  reserve.Refill();
  ASSERT_EQ(reserve.slots(), static_cast<size_t>(DiskReserve::kSlots));
  ExitOutbox outbox(disk + "/.exit-outbox");
  outbox.SetReserve(&reserve);
  fs::create_directories(disk + "/.exit-outbox");
  // What a job does: write until the disk is full.
  auto fill = [&] {
    std::ofstream out(disk + "/fill", std::ios::binary | std::ios::app);
    const std::string block(4096, 'x');
    while (out.write(block.data(), block.size()) && out.flush()) {
    }
  };
  fill();
  const ExitRecord record = Exit("g1", 1, 101, 3);
  EXPECT_TRUE(outbox.Add(record).ok());
  EXPECT_EQ(reserve.slots(), static_cast<size_t>(DiskReserve::kSlots - 1));
  ExitOutbox next(disk + "/.exit-outbox");
  next.Load();
  ASSERT_EQ(next.Pending().size(), 1u);
  EXPECT_EQ(next.Pending()[0].Key(), record.Key());
  EXPECT_EQ(next.Pending()[0].exit_code, 3);

  // Without a reserve the write fails for lack of space (the job took
  // again what the used slot had left over).
  fill();
  ExitOutbox bare(disk + "/.exit-outbox");
  absl::Status failed = bare.Add(Exit("g1", 1, 102, 0));
  EXPECT_FALSE(failed.ok());
  EXPECT_TRUE(IsNoSpace(failed)) << failed;
  // Space back: the reserve is made up.
  fs::remove(disk + "/fill");
  reserve.Refill();
  EXPECT_EQ(reserve.slots(), static_cast<size_t>(DiskReserve::kSlots));
}

}  // namespace
}  // namespace gdt::agent
