// libFuzzer target for the job response file parser: whatever
// JOB_RESPONSE_FILE holds, ParseJobPayload returns a value or one error line
// (no crash, hang or sanitizer report), and an accepted payload survives
// SerializeJobPayload → ParseJobPayload with the same identity. Built by
// gdt_fuzzer() (cmake/GdtCompilerOptions.cmake); docs/security.md
// "Fuzzing".
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "gitlab/job_payload.h"

namespace {

void Fail(const char* what, std::string_view text) {
  std::fprintf(stderr, "job_payload_fuzzer: %s\n--- input ---\n%.*s\n", what,
               static_cast<int>(text.size()), text.data());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 256 * 1024) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const absl::StatusOr<gdt::gitlab::JobPayload> payload =
      gdt::gitlab::ParseJobPayload(text);
  if (!payload.ok()) {
    const std::string message(payload.status().message());
    if (message.empty()) Fail("an error without a message", text);
    return 0;
  }
  (void)payload->Variable("CI_PIPELINE_ID");
  (void)gdt::gitlab::ParseNodeSuffix(payload->name);
  const std::string again = gdt::gitlab::SerializeJobPayload(*payload);
  const absl::StatusOr<gdt::gitlab::JobPayload> reparsed =
      gdt::gitlab::ParseJobPayload(again);
  if (!reparsed.ok()) Fail("a serialized payload does not parse", text);
  if (reparsed->id != payload->id || reparsed->name != payload->name ||
      reparsed->project_id != payload->project_id ||
      reparsed->pipeline_id != payload->pipeline_id ||
      reparsed->token != payload->token) {
    Fail("the identity changed through serialize/parse", text);
  }
  return 0;
}
