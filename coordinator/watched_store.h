#ifndef GDT_COORDINATOR_WATCHED_STORE_H_
#define GDT_COORDINATOR_WATCHED_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/clock.h"
#include "state/state_store.h"

namespace gdt::coordinator {

// The coordinator's state store as callers of a serving coordinator see it.
// A store that cannot be written (its file system is full, another process
// holds its file locked, it became read-only, an I/O error) would otherwise
// answer each caller with the store's own Internal error and leave the
// coordinator's log silent. Once Serve() was called, a failure
//  - is logged as one `event=state_store_failing` line, then at most once a
//    minute (with the number of failures since the last line) or when its
//    kind changes, and `event=state_store_recovered` once a call succeeds
//    again. `kind=permanent` (state::IsPermanentStoreError: a corrupt file,
//    a connection that became read-only) says that retrying does not cure
//    it and what the operator does; `kind=transient` the others;
//  - reaches the caller as Unavailable (the change was not made; the same
//    call later may succeed), naming the store's error, when the store
//    answered Internal, Unavailable, DeadlineExceeded or Unknown; other
//    codes (FailedPrecondition from a deposed HA leader, a request too
//    large for etcd) pass unchanged and unlogged.
// Before Serve() (loading the state at start-up) errors pass unchanged and
// unlogged, so that gdt-coord's start-up says what went wrong once, with its
// own exit code.
// While serving, it also looks (at most every kCheckStorageEvery, on a
// write or a Flush) whether the store still writes where a restart reads
// (StateStore::CheckStorage): a deleted state file is written anew from
// the open database (StateStore::RestoreStorage) and logged as
// `event=state_file_restored`; one moved or replaced under the coordinator
// (or deleted and not restored) is logged as `event=state_file_moved`, at
// most once a minute, and `event=state_file_back` once it is where it was;
// writes go on.
// Whether `status` is a WatchedStore's Unavailable (the store refused a
// change), rather than another Unavailable of the same call.
bool IsStateStoreRefusal(const absl::Status& status);

class WatchedStore final : public state::StateStore {
 public:
  static constexpr std::chrono::seconds kLogEvery{60};
  static constexpr std::chrono::seconds kCheckStorageEvery{5};

  WatchedStore(std::unique_ptr<state::StateStore> store, const Clock& clock)
      : store_(std::move(store)), clock_(clock) {}

  // From now on failures are logged and answered as Unavailable.
  void Serve() { serving_ = true; }

  absl::Status SaveHost(const state::Host& host) override;
  absl::Status SetHostDrained(const std::string& name, bool drained) override;
  absl::Status DeleteHost(const std::string& name) override;
  absl::Status SaveGang(const state::Gang& gang) override;
  absl::Status SaveMember(const state::Gang& gang,
                          const state::Member& member) override;
  absl::Status SaveJoin(const state::Gang& gang, const state::Member& member,
                        bool gang_changed) override;
  absl::Status Flush() override;
  std::vector<DroppedJoin> TakeDroppedJoins() override {
    return store_->TakeDroppedJoins();
  }
  absl::Status DeleteGang(const std::string& gang_id) override;
  absl::StatusOr<state::StoredState> Load() override;
  absl::Status SaveKvToken(const state::KvToken& token) override;
  absl::Status DeleteKvToken(const std::string& gang_id) override;
  absl::StatusOr<std::vector<state::KvToken>> LoadKvTokens() override;
  absl::Status SaveCheckpointRecord(const state::CheckpointRecord& record,
                                    size_t keep_per_gang) override;
  absl::StatusOr<std::vector<state::CheckpointRecord>> ListCheckpointRecords(
      const std::string& gang_id) override;
  absl::Status DeleteCheckpointRecords(const std::string& gang_id) override;
  absl::Status SaveHostToken(const state::HostTokenRecord& record) override;
  absl::StatusOr<bool> DeleteHostToken(const std::string& host_name) override;
  absl::StatusOr<std::vector<state::HostTokenRecord>> LoadHostTokens() override;
  absl::Status SaveSecret(const std::string& name,
                          const std::string& value) override;
  absl::StatusOr<std::string> LoadSecret(const std::string& name) override;
  absl::Status CheckStorage() override { return store_->CheckStorage(); }
  absl::StatusOr<Restored> RestoreStorage() override {
    return store_->RestoreStorage();
  }

 private:
  // On a write: CheckStorage() when it is due, and its line.
  void MaybeCheckStorage(Clock::TimePoint now);

  // Whether a call's success shows that the store can be written again:
  // a write's does; a read's does not, nor that of a write the store may
  // only hold back for a later commit (SaveJoin), which succeeds on a full
  // disk.
  enum class Kind { kWrite, kHeldBack, kRead };
  // Notes the outcome of one call to the store named `what`; returns what
  // the caller gets.
  absl::Status Note(const char* what, absl::Status status,
                    Kind kind = Kind::kWrite);
  template <typename T>
  absl::StatusOr<T> Note(const char* what, absl::StatusOr<T> result,
                         Kind kind = Kind::kWrite) {
    if (result.ok()) {
      Note(what, absl::OkStatus(), kind).IgnoreError();
      return result;
    }
    return Note(what, result.status(), kind);
  }

  std::unique_ptr<state::StateStore> store_;
  const Clock& clock_;
  bool serving_ = false;
  // Failures since the last line logged; the time of that line.
  int64_t failures_ = 0;
  int64_t unlogged_failures_ = 0;
  std::optional<Clock::TimePoint> last_logged_;
  bool last_logged_permanent_ = false;  // The kind that line said.
  std::optional<Clock::TimePoint> failing_since_;
  std::optional<Clock::TimePoint> storage_checked_;
  std::optional<Clock::TimePoint> storage_logged_;
  bool storage_moved_ = false;
};

}  // namespace gdt::coordinator

#endif  // GDT_COORDINATOR_WATCHED_STORE_H_
