// GPU discovery for the host inventory: NVML, loaded at run time with
// dlopen (no build-time CUDA dependency), else the GPUs the config declares.
#ifndef GDT_AGENT_GPU_DISCOVERY_H_
#define GDT_AGENT_GPU_DISCOVERY_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/config.h"

namespace gdt::agent {

inline constexpr char kNvmlLibrary[] = "libnvidia-ml.so.1";

// Lists the GPUs NVML sees (index, UUID, name, total memory) through
// `library`. Errors: NotFound when the library cannot be loaded or lacks a
// symbol we use; Internal naming the failing NVML call.
absl::StatusOr<std::vector<GpuConfig>> DiscoverNvmlGpus(
    const std::string& library = kNvmlLibrary);

struct GpuInventory {
  std::vector<GpuConfig> gpus;
  std::string source;  // "nvml" or "config".
  std::string note;    // Why config was used, or empty.
};

// The configured GPUs when the config declares any (an explicit inventory
// wins); else NVML's when the library loads and reports at least one; else
// none (a CPU-only host). `note` says why NVML was not used.
GpuInventory ResolveGpus(const std::vector<GpuConfig>& configured,
                         const std::string& library = kNvmlLibrary);

}  // namespace gdt::agent

#endif  // GDT_AGENT_GPU_DISCOVERY_H_
