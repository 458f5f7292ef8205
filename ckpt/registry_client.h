#ifndef GDT_CKPT_REGISTRY_CLIENT_H_
#define GDT_CKPT_REGISTRY_CLIENT_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/command.h"
#include "rendezvous/checkpoint_client.h"

namespace gdt::ckpt {

// gdt-ckpt's ManifestRegistry on the coordinator's CheckpointRecords RPCs,
// with the member's gang credential (GDT_COORDINATOR, GDT_GANG_ID,
// GDT_EPOCH, GDT_KV_TOKEN). Each call waits at most `timeout`.
class CoordinatorRegistry final : public ckpt::ManifestRegistry {
 public:
  CoordinatorRegistry(rendezvous::KvTarget target,
                      std::chrono::milliseconds timeout);

  absl::Status Record(int64_t step, int rank, int64_t job_id,
                      const std::string& manifest_json) override;
  absl::StatusOr<std::vector<std::string>> List() override;

 private:
  rendezvous::CheckpointClient client_;
  std::chrono::milliseconds timeout_;
};

// The registry of the job's gang, or null outside a gdt job (GDT_COORDINATOR
// unset). Inside one, a missing GDT_GANG_ID, GDT_EPOCH or GDT_KV_TOKEN is a
// FailedPrecondition naming it.
absl::StatusOr<std::unique_ptr<ckpt::ManifestRegistry>> RegistryFromEnv(
    const ckpt::CkptEnv& env, std::chrono::milliseconds timeout);

}  // namespace gdt::ckpt

#endif  // GDT_CKPT_REGISTRY_CLIENT_H_
