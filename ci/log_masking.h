// Secrets hidden in job log lines the way gitlab-runner's build logger hides
// them before a line reaches the job's trace: the values of masked
// variables, the values of URL parameters that carry credentials, and
// GitLab tokens recognised by their prefixes; each becomes "[MASKED]".
#ifndef GDT_CI_LOG_MASKING_H_
#define GDT_CI_LOG_MASKING_H_

#include <string>
#include <string_view>
#include <vector>

namespace gdt::ci {

class LogMasker {
 public:
  // `phrases`: the values of the job's masked variables (trimmed of white
  // space; empty ones are ignored). `all_token_prefixes`: the runner's
  // FF_MASK_ALL_DEFAULT_TOKENS, which masks every GitLab token prefix
  // (glcbt-, glrt-, gldt-, ...); without it only personal access tokens
  // (glpat-) are masked.
  LogMasker(std::vector<std::string> phrases, bool all_token_prefixes);

  // `line` with every secret replaced, in the runner's order: masked
  // values first (longest first), then credentials in URL parameters
  // (`?private_token=...`: the value up to the next `?`, `&`, white space
  // or control character), then tokens (a prefix followed by at least one
  // of `0-9A-Za-z-._=` keeps the prefix and loses the rest).
  std::string Mask(std::string_view line) const;

 private:
  std::vector<std::string> phrases_;         // Longest first.
  std::vector<std::string> token_prefixes_;  // Longest first.
};

}  // namespace gdt::ci

#endif  // GDT_CI_LOG_MASKING_H_
