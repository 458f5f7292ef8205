#include "agent/exit_outbox.h"

#include <filesystem>
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

}  // namespace
}  // namespace gdt::agent
