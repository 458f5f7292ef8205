// libFuzzer target for the runner's environment: pipeline authors
// control every CUSTOM_ENV_* value. The input is "KEY=VALUE" lines (the
// variables; a line without '=' is skipped), optionally followed by a line
// "---" and a JOB_RESPONSE_FILE text. ReadJobEnv never fails, and
// ResolveJobInfo returns a JobInfo or one error line; an accepted member is
// i of N with 1 <= i <= N. Built by gdt_fuzzer()
// (cmake/GdtCompilerOptions.cmake); docs/security.md "Fuzzing".
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "executor/job_env.h"
#include "gitlab/job_payload.h"

namespace {

void Fail(const char* what, std::string_view text) {
  std::fprintf(stderr, "job_env_fuzzer: %s\n--- input ---\n%.*s\n", what,
               static_cast<int>(text.size()), text.data());
  std::abort();
}

constexpr std::string_view kDefaultPayload =
    R"({"id":101,"token":"t","job_info":{"name":"train 1/2","project_id":5,)"
    R"("pipeline_id":77}})";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 64 * 1024) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::string_view variables = text;
  std::string_view payload_text = kDefaultPayload;
  if (const size_t split = text.find("\n---\n");
      split != std::string_view::npos) {
    variables = text.substr(0, split);
    payload_text = text.substr(split + 5);
  }
  gdt::executor::Environment environment;
  size_t start = 0;
  while (start < variables.size()) {
    size_t end = variables.find('\n', start);
    if (end == std::string_view::npos) end = variables.size();
    const std::string_view line = variables.substr(start, end - start);
    if (const size_t eq = line.find('='); eq != std::string_view::npos) {
      environment[std::string(line.substr(0, eq))] =
          std::string(line.substr(eq + 1));
    }
    start = end + 1;
  }
  const gdt::executor::JobEnv env = gdt::executor::ReadJobEnv(environment);
  (void)env.MemberStatePath();
  absl::StatusOr<gdt::gitlab::JobPayload> payload =
      gdt::gitlab::ParseJobPayload(payload_text);
  if (!payload.ok()) return 0;
  const absl::StatusOr<gdt::executor::JobInfo> job =
      gdt::executor::ResolveJobInfo(env, *payload);
  if (!job.ok()) {
    const std::string message(job.status().message());
    if (message.empty() || message.find('\n') != std::string::npos) {
      Fail("the error is not one line", text);
    }
    return 0;
  }
  if (job->member_total < 1 || job->member_index < 1 ||
      job->member_index > job->member_total) {
    Fail("an accepted member is not i of N", text);
  }
  (void)gdt::executor::GangKeyOf(*job);
  return 0;
}
