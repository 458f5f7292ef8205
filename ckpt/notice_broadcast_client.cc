#include "ckpt/notice_broadcast_client.h"

#include <chrono>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gdt::ckpt {

absl::Status KvNoticeBroadcast::Announce(int64_t deadline_unix_s) {
  absl::StatusOr<rendezvous::KvCasOutcome> outcome = client_.CompareAndSet(
      kNoticeKey, std::nullopt, absl::StrCat(deadline_unix_s),
      std::chrono::system_clock::now() + std::chrono::seconds(2));
  return outcome.status();  // Not swapped: another member was first.
}

absl::StatusOr<std::optional<std::string>> KvNoticeBroadcast::Announced() {
  absl::StatusOr<std::string> value =
      client_.Get(kNoticeKey, std::chrono::system_clock::now() +
                                  std::chrono::milliseconds(300));
  if (value.ok()) return std::optional<std::string>(*std::move(value));
  if (value.status().code() == absl::StatusCode::kNotFound) {
    return std::optional<std::string>();
  }
  return value.status();
}

absl::StatusOr<std::unique_ptr<ckpt::NoticeBroadcast>> NoticeBroadcastFromEnv(
    const ckpt::CkptEnv& env) {
  const auto get = [&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  const char* coordinator = get("GDT_COORDINATOR");
  if (coordinator == nullptr || *coordinator == '\0') {
    return std::unique_ptr<ckpt::NoticeBroadcast>();
  }
  absl::StatusOr<rendezvous::KvTarget> target =
      rendezvous::KvTargetFromEnvironment(get);
  if (!target.ok()) return target.status();
  return std::unique_ptr<ckpt::NoticeBroadcast>(
      std::make_unique<KvNoticeBroadcast>(*std::move(target)));
}

}  // namespace gdt::ckpt
