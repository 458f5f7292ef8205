#include "agent/gpu_discovery.h"

#include <dlfcn.h>

#include <cstdint>

#include "absl/strings/str_cat.h"

namespace gdt::agent {
namespace {

// The few NVML entry points we call, with their C signatures (nvml.h). NVML
// returns 0 (NVML_SUCCESS) on success.
using NvmlDevice = void*;
struct NvmlMemory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
using InitFn = int (*)();
using ShutdownFn = int (*)();
using CountFn = int (*)(unsigned int*);
using HandleFn = int (*)(unsigned int, NvmlDevice*);
using TextFn = int (*)(NvmlDevice, char*, unsigned int);
using MemoryFn = int (*)(NvmlDevice, NvmlMemory*);
using MinorFn = int (*)(NvmlDevice, unsigned int*);

class Library {
 public:
  explicit Library(const std::string& path)
      : handle_(dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {}
  ~Library() {
    if (handle_ != nullptr) dlclose(handle_);
  }
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;

  bool loaded() const { return handle_ != nullptr; }
  template <typename Fn>
  Fn Get(const char* name) const {
    return reinterpret_cast<Fn>(dlsym(handle_, name));
  }

 private:
  void* handle_;
};

}  // namespace

absl::StatusOr<std::vector<GpuConfig>> DiscoverNvmlGpus(
    const std::string& library) {
  Library nvml(library);
  if (!nvml.loaded()) {
    return absl::NotFoundError(absl::StrCat("cannot load ", library));
  }
  const auto init = nvml.Get<InitFn>("nvmlInit_v2");
  const auto shutdown = nvml.Get<ShutdownFn>("nvmlShutdown");
  const auto count = nvml.Get<CountFn>("nvmlDeviceGetCount_v2");
  const auto handle = nvml.Get<HandleFn>("nvmlDeviceGetHandleByIndex_v2");
  const auto uuid = nvml.Get<TextFn>("nvmlDeviceGetUUID");
  const auto name = nvml.Get<TextFn>("nvmlDeviceGetName");
  const auto memory = nvml.Get<MemoryFn>("nvmlDeviceGetMemoryInfo");
  // Optional: without it the device node is taken to be /dev/nvidia<index>.
  const auto minor_number = nvml.Get<MinorFn>("nvmlDeviceGetMinorNumber");
  if (!init || !shutdown || !count || !handle || !uuid || !name || !memory) {
    return absl::NotFoundError(
        absl::StrCat(library, " lacks an NVML function gdt uses"));
  }
  if (int rc = init(); rc != 0) {
    return absl::InternalError(absl::StrCat("nvmlInit_v2 failed: ", rc));
  }
  std::vector<GpuConfig> gpus;
  absl::Status status;
  unsigned int devices = 0;
  if (int rc = count(&devices); rc != 0) {
    status =
        absl::InternalError(absl::StrCat("nvmlDeviceGetCount failed: ", rc));
  }
  for (unsigned int i = 0; status.ok() && i < devices; ++i) {
    NvmlDevice device = nullptr;
    char text[96] = {};
    NvmlMemory info = {};
    GpuConfig gpu;
    gpu.index = i;
    if (int rc = handle(i, &device); rc != 0) {
      status = absl::InternalError(
          absl::StrCat("nvmlDeviceGetHandleByIndex(", i, ") failed: ", rc));
      break;
    }
    if (uuid(device, text, sizeof(text)) == 0) gpu.uuid = text;
    if (name(device, text, sizeof(text)) == 0) gpu.model = text;
    if (memory(device, &info) == 0) gpu.memory_bytes = info.total;
    if (unsigned int number = 0;
        minor_number && minor_number(device, &number) == 0) {
      gpu.device = absl::StrCat("/dev/nvidia", number);
    }
    gpus.push_back(std::move(gpu));
  }
  shutdown();
  if (!status.ok()) return status;
  return gpus;
}

GpuInventory ResolveGpus(const std::vector<GpuConfig>& configured,
                         const std::string& library) {
  GpuInventory inventory;
  if (!configured.empty()) {
    inventory.gpus = configured;
    inventory.source = "config";
    inventory.note = "the config declares the GPUs";
    return inventory;
  }
  absl::StatusOr<std::vector<GpuConfig>> found = DiscoverNvmlGpus(library);
  if (found.ok() && !found->empty()) {
    inventory.gpus = std::move(*found);
    inventory.source = "nvml";
    return inventory;
  }
  inventory.gpus = configured;
  inventory.source = "config";
  inventory.note = found.ok() ? "NVML reports no GPU"
                              : std::string(found.status().message());
  return inventory;
}

}  // namespace gdt::agent
