#include "launch/kv_done_signal.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace gdt::launch {

absl::Status KvDoneSignal::Announce(int exit_code) {
  return client_.Set(
      kDoneKey, absl::StrCat(exit_code),
      std::chrono::system_clock::now() + std::chrono::seconds(10));
}

absl::StatusOr<std::optional<int>> KvDoneSignal::WaitUntil(
    std::chrono::system_clock::time_point deadline) {
  absl::StatusOr<std::string> value = client_.Wait(kDoneKey, deadline);
  // Not yet, or the coordinator away for now (restarting): the caller asks
  // again; a coordinator that is briefly away never stops a worker.
  if (absl::IsDeadlineExceeded(value.status()) ||
      absl::IsUnavailable(value.status())) {
    return std::nullopt;
  }
  if (!value.ok()) return value.status();
  int code = 0;
  if (!absl::SimpleAtoi(*value, &code)) {
    return absl::DataLossError(
        absl::StrCat("key ", kDoneKey, " holds '", *value, "', not a code"));
  }
  return code;
}

}  // namespace gdt::launch
