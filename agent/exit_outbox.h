// Stage exits the agent owes the coordinator, kept on disk until the
// coordinator has them.
//
// The agent runs on the host where a member's script ran and outlives both
// the script and its executor, so it is the one place that always learns
// how a member ended. An executor that gives up reporting (the coordinator
// was down for longer than it retries) or dies loses that fact; the agent
// does not: each exit is written here before anything tries to send it,
// and stays until the coordinator acknowledges it (or refuses it for
// good), across coordinator outages of any length and agent restarts.
#ifndef GDT_AGENT_EXIT_OUTBOX_H_
#define GDT_AGENT_EXIT_OUTBOX_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "agent/disk_reserve.h"
#include "common/mutex.h"

namespace gdt::agent {

// How one member's user script ended, as the agent saw it.
struct ExitRecord {
  std::string gang_id;
  uint32_t epoch = 0;
  uint32_t member_index = 0;
  int64_t job_id = 0;
  int32_t exit_code = 0;  // 128+N when killed by signal N.
  int32_t signal = 0;     // N when killed by a signal, else 0.
  // Stopped by its executor's signal (the job was cancelled, or the gang
  // failed and the member is being stopped).
  bool cancelled = false;
  // The output shows it lost a peer (common/peer_loss.h).
  bool peer_suspected = false;
  // Non-empty: the member was lost rather than exited (its executor went
  // away mid-stage); the exit code means nothing then.
  std::string lost_reason;
  // When the script exited (or was found lost), by this host's clock.
  int64_t exited_unix_ms = 0;

  // One record per member job and epoch: the first word on it counts.
  std::string Key() const;
};

// The records, one file each under a directory. Thread-safe.
class ExitOutbox {
 public:
  // `dir` is created on the first Add().
  explicit ExitOutbox(std::string dir);

  // Space set aside for when the file system is full (a job filled it):
  // a record that cannot be written for lack of space is written there.
  // Set before Add(); `reserve` must outlive the outbox.
  void SetReserve(DiskReserve* reserve) { reserve_ = reserve; }

  // Reads what a previous agent left in the directory; files that do not
  // parse are removed with a warning. Call once, before Add().
  void Load();

  // Writes `record` to disk (atomically) and keeps it until Remove(). A
  // record with the key of one still kept is ignored: the first counts.
  // Errors: those of writing the file (the record is then kept in memory
  // only, and still delivered while this agent lives).
  absl::Status Add(const ExitRecord& record);

  // Forgets the record with `key` and removes its file. Idempotent.
  void Remove(const std::string& key);

  // The records kept, oldest first.
  std::vector<ExitRecord> Pending() const;
  size_t size() const;

 private:
  std::string PathOf(const std::string& key) const;

  const std::string dir_;
  DiskReserve* reserve_ = nullptr;
  mutable Mutex mu_;
  // By sequence number, so Pending() keeps arrival order.
  std::map<uint64_t, ExitRecord> records_ ABSL_GUARDED_BY(mu_);
  uint64_t next_ ABSL_GUARDED_BY(mu_) = 0;
};

// The record as the file holds it (JSON), and back.
std::string ExitRecordToText(const ExitRecord& record, uint64_t sequence);
// Errors: InvalidArgument for text that is not such a record.
absl::Status ExitRecordFromText(const std::string& text, ExitRecord* record,
                                uint64_t* sequence);

}  // namespace gdt::agent

#endif  // GDT_AGENT_EXIT_OUTBOX_H_
