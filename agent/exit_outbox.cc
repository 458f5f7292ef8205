#include "agent/exit_outbox.h"

#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "agent/disk_reserve.h"
#include "agent/supervisor.h"
#include "common/file.h"
#include "common/logging.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace gdt::agent {
namespace {

namespace fs = std::filesystem;

constexpr absl::string_view kSuffix = ".json";

}  // namespace

std::string ExitRecord::Key() const {
  return absl::StrCat(gang_id, "#", epoch, "#", job_id);
}

std::string ExitRecordToText(const ExitRecord& record, uint64_t sequence) {
  nlohmann::json json = {
      {"sequence", sequence},
      {"gang_id", record.gang_id},
      {"epoch", record.epoch},
      {"member_index", record.member_index},
      {"job_id", record.job_id},
      {"exit_code", record.exit_code},
      {"signal", record.signal},
      {"cancelled", record.cancelled},
      {"peer_suspected", record.peer_suspected},
      {"lost_reason", record.lost_reason},
      {"exited_unix_ms", record.exited_unix_ms},
  };
  return json.dump() + "\n";
}

absl::Status ExitRecordFromText(const std::string& text, ExitRecord* record,
                                uint64_t* sequence) {
  const nlohmann::json json =
      nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("gang_id") ||
      !json["gang_id"].is_string() ||
      json["gang_id"].get<std::string>().empty()) {
    return absl::InvalidArgumentError("not an exit record");
  }
  // Every field but the gang id has a default: a record is never dropped
  // for a field it lacks.
  auto number = [&json](const char* key, auto fallback) {
    using T = decltype(fallback);
    auto it = json.find(key);
    if (it == json.end() || !it->is_number()) return fallback;
    return it->template get<T>();
  };
  auto flag = [&json](const char* key) {
    auto it = json.find(key);
    return it != json.end() && it->is_boolean() && it->get<bool>();
  };
  record->gang_id = json["gang_id"].get<std::string>();
  record->epoch = number("epoch", uint32_t{0});
  record->member_index = number("member_index", uint32_t{0});
  record->job_id = number("job_id", int64_t{0});
  record->exit_code = number("exit_code", int32_t{0});
  record->signal = number("signal", int32_t{0});
  record->cancelled = flag("cancelled");
  record->peer_suspected = flag("peer_suspected");
  auto lost = json.find("lost_reason");
  record->lost_reason =
      lost != json.end() && lost->is_string() ? lost->get<std::string>() : "";
  record->exited_unix_ms = number("exited_unix_ms", int64_t{0});
  *sequence = number("sequence", uint64_t{0});
  return absl::OkStatus();
}

ExitOutbox::ExitOutbox(std::string dir) : dir_(std::move(dir)) {}

std::string ExitOutbox::PathOf(const std::string& key) const {
  return (fs::path(dir_) / absl::StrCat(EscapePathComponent(key), kSuffix))
      .string();
}

void ExitOutbox::Load() {
  std::error_code error;
  std::vector<std::pair<uint64_t, ExitRecord>> found;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir_, error)) {
    const std::string path = entry.path().string();
    const std::string name = entry.path().filename().string();
    // The temporary file of an atomic write cut short by a crash.
    if (name.size() <= kSuffix.size() || !absl::EndsWith(name, kSuffix)) {
      fs::remove(entry.path(), error);
      continue;
    }
    absl::StatusOr<std::string> text = ReadTextFile(path);
    ExitRecord record;
    uint64_t sequence = 0;
    absl::Status parsed = text.ok()
                              ? ExitRecordFromText(*text, &record, &sequence)
                              : text.status();
    if (!parsed.ok() || PathOf(record.Key()) != path) {
      spdlog::warn("event=exit_record_dropped file={} reason={}",
                   LogValue(path),
                   LogValue(parsed.ok() ? "its name does not match its record"
                                        : std::string(parsed.message())));
      fs::remove(entry.path(), error);
      continue;
    }
    found.emplace_back(sequence, std::move(record));
  }
  MutexLock lock(mu_);
  for (auto& [sequence, record] : found) {
    records_.emplace(sequence, std::move(record));
    if (sequence >= next_) next_ = sequence + 1;
  }
  if (!found.empty()) {
    spdlog::info("event=exit_outbox_loaded records={} dir={}", found.size(),
                 LogValue(dir_));
  }
}

absl::Status ExitOutbox::Add(const ExitRecord& record) {
  const std::string key = record.Key();
  uint64_t sequence = 0;
  {
    MutexLock lock(mu_);
    for (const auto& [number, kept] : records_) {
      if (kept.Key() == key) return absl::OkStatus();
    }
    sequence = next_++;
    records_.emplace(sequence, record);
  }
  std::error_code error;
  // Only the agent reads it: member accounts need not see who ran here.
  if (fs::create_directories(dir_, error)) {
    fs::permissions(dir_, fs::perms::owner_all, error);
  }
  if (error) {
    return absl::InternalError(
        absl::StrCat("cannot create ", dir_, ": ", error.message()));
  }
  const std::string text = ExitRecordToText(record, sequence);
  absl::Status written = WriteFileAtomically(PathOf(key), text, 0600);
  if (written.ok() || reserve_ == nullptr || !IsNoSpace(written)) {
    return written;
  }
  if (absl::Status reserved =
          reserve_->WriteFrom(PathOf(key), text, 0600, std::nullopt);
      !reserved.ok()) {
    return absl::Status(written.code(), absl::StrCat(written.message(), " (",
                                                     reserved.message(), ")"));
  }
  return absl::OkStatus();
}

void ExitOutbox::Remove(const std::string& key) {
  {
    MutexLock lock(mu_);
    for (auto it = records_.begin(); it != records_.end(); ++it) {
      if (it->second.Key() == key) {
        records_.erase(it);
        break;
      }
    }
  }
  std::error_code error;
  fs::remove(PathOf(key), error);
}

std::vector<ExitRecord> ExitOutbox::Pending() const {
  MutexLock lock(mu_);
  std::vector<ExitRecord> pending;
  pending.reserve(records_.size());
  for (const auto& [sequence, record] : records_) pending.push_back(record);
  return pending;
}

size_t ExitOutbox::size() const {
  MutexLock lock(mu_);
  return records_.size();
}

}  // namespace gdt::agent
