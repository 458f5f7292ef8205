// libFuzzer target for checkpoint manifests: ParseManifest on any
// manifest.json returns a value or one error line, never accepts a file path
// or dir that is absolute or has a ".." or "." part, and an accepted manifest
// survives ManifestToJson → ParseManifest unchanged. Built by gdt_fuzzer()
// (cmake/GdtCompilerOptions.cmake); docs/security.md "Fuzzing".
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "ckpt/checkpoint.h"

namespace {

void Fail(const char* what, std::string_view text) {
  std::fprintf(stderr, "checkpoint_manifest_fuzzer: %s\n--- input ---\n%.*s\n",
               what, static_cast<int>(text.size()), text.data());
  std::abort();
}

bool Escapes(const std::string& path) {
  if (path.empty() || path.front() == '/') return true;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    if (path.compare(start, end - start, "..") == 0 ||
        path.compare(start, end - start, ".") == 0) {
      return true;
    }
    start = end + 1;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 256 * 1024) return 0;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const absl::StatusOr<gdt::ckpt::CheckpointManifest> manifest =
      gdt::ckpt::ParseManifest(text);
  if (!manifest.ok()) {
    const std::string message(manifest.status().message());
    if (message.empty() || message.find('\n') != std::string::npos) {
      Fail("the error is not one line", text);
    }
    return 0;
  }
  for (const gdt::ckpt::ManifestFile& file : manifest->files) {
    if (Escapes(file.path)) Fail("a file path escapes the directory", text);
  }
  if (Escapes(manifest->dir)) Fail("the dir escapes the project", text);
  (void)manifest->total_bytes();
  const std::string json = gdt::ckpt::ManifestToJson(*manifest);
  const absl::StatusOr<gdt::ckpt::CheckpointManifest> again =
      gdt::ckpt::ParseManifest(json);
  if (!again.ok()) Fail("a written manifest does not parse", text);
  if (gdt::ckpt::ManifestToJson(*again) != json) {
    Fail("the manifest changed through write/parse", text);
  }
  return 0;
}
