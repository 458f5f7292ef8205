#ifndef GDT_GITLAB_CI_EXPAND_H_
#define GDT_GITLAB_CI_EXPAND_H_

// `parallel: {distributed: {...}}` in a .gitlab-ci.yml: validation (lint)
// and expansion into plain GitLab YAML (`parallel: N`, GDT_* variables, tags,
// retry, checkpoint artifacts). The mapping is documented in
// docs/user-guide.md ("The parallel:distributed block").

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "ci/include.h"

namespace gdt::ci {

// One problem in a CI file. Line and column are 1-based; 0 when the problem
// has no place in the file.
struct CiDiagnostic {
  int line = 0;
  int column = 0;
  std::string message;  // One line, no trailing newline.
  // The included file it is in (its path in the project); empty for the
  // file being linted or expanded.
  std::string file;
};

// "file:line:column: message" (just "file: message" without a place);
// `diagnostic.file` instead of `file` when it is set.
std::string FormatDiagnostic(std::string_view file,
                             const CiDiagnostic& diagnostic);

// A gdt gang as a job describes it, in either form.
struct GangSpec {
  std::string job;
  int line = 0;             // The job's key, 1-based.
  std::string file;         // The included file it is in; empty: the main.
  bool from_block = false;  // parallel:distributed (else parallel + GDT_*).
  int nodes = 1;            // The most members (`parallel: N`).
  // Elastic gangs (`nodes: 2..8`): the fewest members the gang may start
  // with; 0 for a fixed size.
  int nodes_min = 0;
  int gpus_per_node = 0;
  int procs_per_node = 1;
  std::string launcher = "torchrun";
  std::optional<int64_t> gang_timeout_seconds;
  std::optional<int> priority;
  std::string topology_same;  // Empty: no topology constraint.
  std::string topology_mode;  // "required" or "preferred" with a label.
  std::optional<int64_t> checkpoint_notice_seconds;
  std::optional<int> checkpoint_keep;
  std::string checkpoint_store;  // "", "artifacts" or "none".
  // The gang may be stopped (after a checkpoint notice) for a gang that
  // outranks it, and is then retried.
  bool preemptible = false;
  // For a preemptible gang: how many retries of its job's `retry:` (its
  // own, an inherited one, or the one expand adds) bring back the exit code
  // of a preempted job (76). Written as GDT_PREEMPT_RETRIES; the
  // coordinator stops a gang only while a retry is left.
  int preempt_retries = 0;
  // GDT_* variables written empty (GitLab sends "", which gdt reads as
  // unset): ones a template's block sets that this job's block does not,
  // so that GitLab's merge of `variables` through extends keeps no stale
  // value.
  std::vector<std::string> cleared;

  // The GDT_* job variables of this spec, in the documented order, values
  // as GitLab sends them (strings).
  std::vector<std::pair<std::string, std::string>> Variables() const;
  // One line for humans: "4 nodes x 8 GPUs, 8 processes per node (world
  // size 32), launcher torchrun".
  std::string Describe() const;
};

struct CiExpandOptions {
  // The most nodes a gang may have (a cluster's max_nodes_per_job); GitLab's
  // own limit for `parallel` is 200 and always applies.
  int max_nodes = 200;
  // Runner tag added to every expanded job's `tags` (none when empty).
  std::string runner_tag = "gdt";
  // The files the CI file includes from its project (ReadLocalIncludes),
  // read with it: their templates, default:, variables and same-name jobs
  // are part of each job's configuration. Null: `include:` is not read,
  // and what it may bring is unknown.
  const CiIncludes* includes = nullptr;
  // Lint: the project's main file, when it includes the file linted
  // (FindIncludingConfig). An `extends` name the file does not define is
  // then looked for in that whole configuration.
  const CiIncludingConfig* including = nullptr;
};

// Whether `tag` can be a runner tag on gdt-ci's command line: empty (no
// tag), or at most 255 letters, digits and - _ . : / + = @. Expand writes it
// quoted where YAML would otherwise read another type (`yes`, `123`).
absl::Status CheckRunnerTag(std::string_view tag);

// The result of expanding or linting one CI file.
struct CiExpansion {
  // Expand: the rewritten file (only the text of jobs with the block
  // changes). Empty when there are errors.
  std::string text;
  std::vector<GangSpec> gangs;  // In file order.
  std::vector<CiDiagnostic> errors;
  // Lint only: what GitLab accepts and gdt runs, but probably not as meant
  // (a gang of manual jobs). Never fails the file.
  std::vector<CiDiagnostic> warnings;
  bool ok() const { return errors.empty(); }
};

// Expands every job (hidden ones included, so `extends:` templates work)
// whose `parallel` is `{distributed: {...}}`, in every document of the file
// (a component's `spec:` header is skipped). Each such job's `parallel`
// entry is replaced in place by `parallel: N`, and gdt's entries are added
// to the job's effective configuration (ci/inheritance.h: merge keys,
// extends, default, !reference): the GDT_* variables, the runner tag to the
// tags it has or inherits, a `retry` for the gang's failure classes unless
// it has or inherits one, and with `checkpoint: {store: artifacts}` the
// `checkpoints/` path to its artifacts. Every other line of the file is
// kept byte for byte. Errors (every one found, in file order): YAML syntax,
// encoding, tabs in indentation, control characters; in a rewritten job,
// duplicate or complex keys and inherited entries it cannot see (an
// include, a parent in another file); and any unknown key, wrong type or
// out-of-range value in a block; also a GDT_* variable that the block sets
// too, and a block under `default:`. Runs in time linear in the file.
// Never throws.
CiExpansion ExpandCiYaml(std::string_view text,
                         const CiExpandOptions& options = {});

// Validates both forms: the blocks as ExpandCiYaml does, duplicate and
// complex keys anywhere, and for jobs without the block (hidden ones too)
// `parallel` (an integer 1..200, `matrix` for jobs that are not gangs, or
// null), the configured maximum nodes, and every GDT_* variable (known
// name, type and range; outputs such as GDT_NODE_RANK must not be set). A
// job is a gang when it, or what it inherits, sets a GDT_* input variable,
// carries the runner tag or a parallel:distributed block. `gangs` lists the
// gang jobs of both forms (not hidden templates, which never run); `text`
// is empty.
CiExpansion LintCiYaml(std::string_view text,
                       const CiExpandOptions& options = {});

// gdt-ci's exit codes for expand and lint (docs/user-guide.md).
inline constexpr int kCiFileOk = 0;
inline constexpr int kCiFileInvalid = 1;  // Diagnostics were printed.
inline constexpr int kCiUsageError = 2;   // Bad flags, unreadable file.

// What `gdt-ci lint` prints: without `json`, one "file:line:column:
// message" line per error, or, when there is none, one "file:line:column:
// warning: message" line per warning, one line per gang job
// ("file:line: job: <Describe()> [parallel:distributed|parallel + GDT_*]")
// and "file: ok (G gang jobs)". With `json`, one document: {"file", "ok",
// "errors": [{"line", "column", "message"}], "warnings": [same],
// "gangs": [{"job", "line",
// "form", "nodes", "gpus_per_node", "procs_per_node", "launcher",
// "variables": {...}}]}.
std::string FormatLintReport(std::string_view file, const CiExpansion& lint,
                             bool json);

}  // namespace gdt::ci

#endif  // GDT_GITLAB_CI_EXPAND_H_
