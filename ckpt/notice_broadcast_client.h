#ifndef GDT_CKPT_NOTICE_BROADCAST_CLIENT_H_
#define GDT_CKPT_NOTICE_BROADCAST_CLIENT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "ckpt/command.h"
#include "ckpt/notice.h"
#include "rendezvous/kv_client.h"
#include "rendezvous/kv_keys.h"

namespace gdt::ckpt {

// The key in the gang's key-value store that carries the notice (see
// rendezvous/kv_keys.h; the coordinator sets it too when it preempts).
inline constexpr const char* kNoticeKey = rendezvous::kCheckpointNoticeKey;

// gdt-ckpt run's NoticeBroadcast on the gang's key-value store: Announce is
// a compare-and-set of kNoticeKey (the first member wins; later ones find
// it set), Announced a Get with a 300 ms deadline.
class KvNoticeBroadcast final : public ckpt::NoticeBroadcast {
 public:
  explicit KvNoticeBroadcast(rendezvous::KvTarget target)
      : client_(std::move(target)) {}

  absl::Status Announce(int64_t deadline_unix_s) override;
  absl::StatusOr<std::optional<std::string>> Announced() override;

 private:
  rendezvous::KvClient client_;
};

// The broadcast of the job's gang, or null outside a gdt job
// (GDT_COORDINATOR unset). Errors as KvTargetFromEnvironment's.
absl::StatusOr<std::unique_ptr<ckpt::NoticeBroadcast>> NoticeBroadcastFromEnv(
    const ckpt::CkptEnv& env);

}  // namespace gdt::ckpt

#endif  // GDT_CKPT_NOTICE_BROADCAST_CLIENT_H_
