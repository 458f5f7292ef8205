// libFuzzer target for gdt-ci expand and lint (built only when the compiler
// supports -fsanitize=fuzzer; see gitlab/CMakeLists.txt and
// docs/user-guide.md "Fuzzing the expander"). Besides "no crash, no hang,
// no sanitizer report" it checks the contracts of ci/expand.h:
// every diagnostic is one line, and a successful expansion is plain GitLab
// YAML that expands to itself.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "ci/expand.h"

namespace {

void Fail(const char* what, std::string_view text) {
  std::fprintf(stderr, "ci_expand_fuzzer: %s\n--- input ---\n%.*s\n", what,
               static_cast<int>(text.size()), text.data());
  std::abort();
}

void CheckOneLine(const gdt::ci::CiExpansion& result, std::string_view text) {
  for (const gdt::ci::CiDiagnostic& d : result.errors) {
    if (d.message.empty() || d.message.find('\n') != std::string::npos) {
      Fail("a diagnostic is not one line", text);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 64 * 1024) return 0;  // CI files are small; keep runs fast.
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const gdt::ci::CiExpansion expansion = gdt::ci::ExpandCiYaml(text);
  CheckOneLine(expansion, text);
  const gdt::ci::CiExpansion lint = gdt::ci::LintCiYaml(text);
  CheckOneLine(lint, text);
  if (expansion.ok()) {
    const gdt::ci::CiExpansion again = gdt::ci::ExpandCiYaml(expansion.text);
    if (!again.ok()) Fail("the expansion does not expand", text);
    if (again.text != expansion.text) Fail("expansion is not idempotent", text);
  }
  (void)gdt::ci::FormatLintReport("f", lint, /*json=*/true);
  return 0;
}
