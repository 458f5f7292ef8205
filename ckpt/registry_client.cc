#include "ckpt/registry_client.h"

#include <utility>

namespace gdt::ckpt {

CoordinatorRegistry::CoordinatorRegistry(rendezvous::KvTarget target,
                                         std::chrono::milliseconds timeout)
    : client_(std::move(target)), timeout_(timeout) {}

absl::Status CoordinatorRegistry::Record(int64_t step, int rank, int64_t job_id,
                                         const std::string& manifest_json) {
  return client_.Record(step, static_cast<uint32_t>(rank), job_id,
                        manifest_json,
                        std::chrono::system_clock::now() + timeout_);
}

absl::StatusOr<std::vector<std::string>> CoordinatorRegistry::List() {
  absl::StatusOr<std::vector<rendezvous::CheckpointRecordInfo>> records =
      client_.List(std::chrono::system_clock::now() + timeout_);
  if (!records.ok()) return records.status();
  std::vector<std::string> manifests;
  for (rendezvous::CheckpointRecordInfo& r : *records) {
    manifests.push_back(std::move(r.manifest_json));
  }
  return manifests;
}

absl::StatusOr<std::unique_ptr<ckpt::ManifestRegistry>> RegistryFromEnv(
    const ckpt::CkptEnv& env, std::chrono::milliseconds timeout) {
  const auto get = [&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  const char* coordinator = get("GDT_COORDINATOR");
  if (coordinator == nullptr || *coordinator == '\0') {
    return std::unique_ptr<ckpt::ManifestRegistry>();
  }
  absl::StatusOr<rendezvous::KvTarget> target =
      rendezvous::KvTargetFromEnvironment(get);
  if (!target.ok()) return target.status();
  return std::unique_ptr<ckpt::ManifestRegistry>(
      std::make_unique<CoordinatorRegistry>(*std::move(target), timeout));
}

}  // namespace gdt::ckpt
