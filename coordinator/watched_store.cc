#include "coordinator/watched_store.h"

#include <chrono>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "spdlog/spdlog.h"

namespace gdt::coordinator {
namespace {

// Marks the Unavailable a WatchedStore returns.
constexpr char kRefusalPayload[] = "gdt.dev/state-store-refusal";

}  // namespace

bool IsStateStoreRefusal(const absl::Status& status) {
  return absl::IsUnavailable(status) &&
         status.GetPayload(kRefusalPayload).has_value();
}

absl::Status WatchedStore::Note(const char* what, absl::Status status,
                                Kind kind) {
  if (!serving_) return status;
  const Clock::TimePoint now = clock_.Now();
  if (kind != Kind::kRead) MaybeCheckStorage(now);
  if (status.ok()) {
    // A read, or a flush with nothing to commit, succeeds on a full disk.
    if (kind == Kind::kWrite && failing_since_.has_value()) {
      spdlog::info("event=state_store_recovered failures={} failing_ms={}",
                   failures_,
                   std::chrono::duration_cast<std::chrono::milliseconds>(
                       now - *failing_since_)
                       .count());
      failures_ = 0;
      unlogged_failures_ = 0;
      failing_since_.reset();
      last_logged_.reset();
      last_logged_permanent_ = false;
    }
    return status;
  }
  // Other refusals (a deposed HA leader, a request too large for etcd, bad
  // input) are final and say nothing about the store: passed on unlogged.
  if (!absl::IsInternal(status) && !absl::IsUnavailable(status) &&
      !absl::IsDeadlineExceeded(status) && !absl::IsUnknown(status)) {
    return status;
  }
  ++failures_;
  if (!failing_since_.has_value()) failing_since_ = now;
  // Retrying does not cure a permanent error (a corrupt file, one the
  // store can no longer write): said at once, even within the minute.
  const bool permanent = state::IsPermanentStoreError(status);
  if (!last_logged_.has_value() || now - *last_logged_ >= kLogEvery ||
      permanent != last_logged_permanent_) {
    spdlog::error(
        "event=state_store_failing kind={} call={} failures={} error={} "
        "action={}",
        permanent ? "permanent" : "transient", what, unlogged_failures_ + 1,
        LogValue(status.ToString()),
        LogValue(
            permanent
                ? "the change was not made and its caller was told to retry, "
                  "but retrying does not cure this error: the state file is "
                  "damaged, not a database, or cannot be opened or written "
                  "by gdt-coord; stop gdt-coord, restore the file from a "
                  "backup (or make it and its directory readable and "
                  "writable by gdt-coord) and start gdt-coord again"
                : "the change was not made and its caller was told to retry; "
                  "free space on (or unlock, or make writable) the state "
                  "file's file system and the coordinator recovers by "
                  "itself"));
    last_logged_ = now;
    last_logged_permanent_ = permanent;
    unlogged_failures_ = 0;
  } else {
    ++unlogged_failures_;
  }
  absl::Status refusal = absl::UnavailableError(absl::StrCat(
      "the coordinator cannot use its state store now (nothing was changed; "
      "retry): ",
      status.message()));
  refusal.SetPayload(kRefusalPayload, absl::Cord("1"));
  return refusal;
}

void WatchedStore::MaybeCheckStorage(Clock::TimePoint now) {
  if (storage_checked_.has_value() &&
      now - *storage_checked_ < kCheckStorageEvery) {
    return;
  }
  storage_checked_ = now;
  const absl::Status storage = store_->CheckStorage();
  if (storage.ok()) {
    if (storage_moved_) {
      spdlog::info("event=state_file_back");
      storage_moved_ = false;
      storage_logged_.reset();
    }
    return;
  }
  // A deleted file (not a moved or replaced one) is written anew.
  absl::StatusOr<Restored> restored = store_->RestoreStorage();
  if (restored.ok()) {
    spdlog::warn(
        "event=state_file_restored path={} was={}{}", LogValue(restored->path),
        LogValue(std::string(storage.message())),
        restored->made_directory.empty()
            ? std::string()
            : absl::StrCat(" made_dir=", LogValue(restored->made_directory)));
    storage_moved_ = false;
    storage_logged_.reset();
    return;
  }
  storage_moved_ = true;
  if (storage_logged_.has_value() && now - *storage_logged_ < kLogEvery) {
    return;
  }
  storage_logged_ = now;
  const absl::Status& restore = restored.status();
  const bool restore_tried =
      !absl::IsFailedPrecondition(restore) && !absl::IsUnimplemented(restore);
  spdlog::error(
      "event=state_file_moved error={}{} action={}",
      LogValue(std::string(storage.message())),
      restore_tried ? absl::StrCat(" restore_error=",
                                   LogValue(std::string(restore.message())))
                    : std::string(),
      LogValue("the coordinator goes on from memory, but what it stores "
               "from now on is lost at its next restart; put the file back "
               "where it was, or plan the restart"));
}

absl::Status WatchedStore::SaveHost(const state::Host& host) {
  return Note("SaveHost", store_->SaveHost(host));
}

absl::Status WatchedStore::SetHostDrained(const std::string& name,
                                          bool drained) {
  return Note("SetHostDrained", store_->SetHostDrained(name, drained));
}

absl::Status WatchedStore::DeleteHost(const std::string& name) {
  return Note("DeleteHost", store_->DeleteHost(name));
}

absl::Status WatchedStore::SaveGang(const state::Gang& gang) {
  return Note("SaveGang", store_->SaveGang(gang));
}

absl::Status WatchedStore::SaveMember(const state::Gang& gang,
                                      const state::Member& member) {
  return Note("SaveMember", store_->SaveMember(gang, member));
}

absl::Status WatchedStore::SaveJoin(const state::Gang& gang,
                                    const state::Member& member,
                                    bool gang_changed) {
  return Note("SaveJoin", store_->SaveJoin(gang, member, gang_changed),
              Kind::kHeldBack);
}

absl::Status WatchedStore::Flush() {
  // The coordinator flushes once a second: a state file deleted while it
  // writes nothing is restored too, before a restart could lose it with
  // the deleted file.
  if (serving_) MaybeCheckStorage(clock_.Now());
  return Note("Flush", store_->Flush(), Kind::kRead);
}

absl::Status WatchedStore::DeleteGang(const std::string& gang_id) {
  return Note("DeleteGang", store_->DeleteGang(gang_id));
}

absl::StatusOr<state::StoredState> WatchedStore::Load() {
  return Note("Load", store_->Load(), Kind::kRead);
}

absl::Status WatchedStore::SaveKvToken(const state::KvToken& token) {
  return Note("SaveKvToken", store_->SaveKvToken(token));
}

absl::Status WatchedStore::DeleteKvToken(const std::string& gang_id) {
  return Note("DeleteKvToken", store_->DeleteKvToken(gang_id));
}

absl::StatusOr<std::vector<state::KvToken>> WatchedStore::LoadKvTokens() {
  return Note("LoadKvTokens", store_->LoadKvTokens(), Kind::kRead);
}

absl::Status WatchedStore::SaveCheckpointRecord(
    const state::CheckpointRecord& record, size_t keep_per_gang) {
  return Note("SaveCheckpointRecord",
              store_->SaveCheckpointRecord(record, keep_per_gang));
}

absl::StatusOr<std::vector<state::CheckpointRecord>>
WatchedStore::ListCheckpointRecords(const std::string& gang_id) {
  return Note("ListCheckpointRecords", store_->ListCheckpointRecords(gang_id),
              Kind::kRead);
}

absl::Status WatchedStore::DeleteCheckpointRecords(const std::string& gang_id) {
  return Note("DeleteCheckpointRecords",
              store_->DeleteCheckpointRecords(gang_id));
}

absl::Status WatchedStore::SaveHostToken(const state::HostTokenRecord& record) {
  return Note("SaveHostToken", store_->SaveHostToken(record));
}

absl::StatusOr<bool> WatchedStore::DeleteHostToken(
    const std::string& host_name) {
  return Note("DeleteHostToken", store_->DeleteHostToken(host_name));
}

absl::StatusOr<std::vector<state::HostTokenRecord>>
WatchedStore::LoadHostTokens() {
  return Note("LoadHostTokens", store_->LoadHostTokens(), Kind::kRead);
}

absl::Status WatchedStore::SaveSecret(const std::string& name,
                                      const std::string& value) {
  return Note("SaveSecret", store_->SaveSecret(name, value));
}

absl::StatusOr<std::string> WatchedStore::LoadSecret(const std::string& name) {
  return Note("LoadSecret", store_->LoadSecret(name), Kind::kRead);
}

}  // namespace gdt::coordinator
