// libFuzzer target for the YAML configs: the first byte picks
// coord.yaml, agent.yaml or executor.yaml, the rest is the file. ParseConfig
// returns a Config or one error line and never throws, crashes or hangs; an
// accepted config passes its own validation. Built by gdt_fuzzer()
// (cmake/GdtCompilerOptions.cmake); docs/security.md "Fuzzing".
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "agent/config.h"
#include "coordinator/config.h"
#include "executor/config.h"

namespace {

void Fail(const char* what, std::string_view text) {
  std::fprintf(stderr, "config_fuzzer: %s\n--- input ---\n%.*s\n", what,
               static_cast<int>(text.size()), text.data());
  std::abort();
}

void CheckError(const absl::Status& status, std::string_view text) {
  if (status.message().empty()) Fail("an error without a message", text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > 64 * 1024) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1,
                              size - 1);
  switch (data[0] % 3) {
    case 0: {
      const auto config = gdt::coordinator::ParseConfig(text);
      if (!config.ok()) {
        CheckError(config.status(), text);
      } else if (!gdt::coordinator::ValidateConfig(*config).ok()) {
        Fail("an accepted coordinator config does not validate", text);
      }
      break;
    }
    case 1: {
      const auto config = gdt::agent::ParseConfig(text);
      if (!config.ok()) {
        CheckError(config.status(), text);
      } else if (!gdt::agent::ValidateConfig(*config).ok()) {
        Fail("an accepted agent config does not validate", text);
      }
      break;
    }
    default: {
      const auto config = gdt::executor::ParseConfig(text);
      if (!config.ok()) CheckError(config.status(), text);
      break;
    }
  }
  return 0;
}
