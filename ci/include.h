#ifndef GDT_CI_INCLUDE_H_
#define GDT_CI_INCLUDE_H_

// `include:local` as GitLab reads it, for gdt-ci lint, expand and
// run-local: the files of the project that a CI file includes, nested,
// in the order GitLab merges them (docs/user-guide.md, "Included files").
//
//  - A local include is a path relative to the project directory (a
//    leading `/` is the project directory too), written as a string, a
//    list item or `local:`. `*` matches within one directory, `**` across
//    directories; a pattern matches files in name order.
//  - A nested include is relative to the project directory as well, not to
//    the including file.
//  - Each file's includes are merged first, then the file itself over
//    them (deep: mappings key by key, anything else replaced), and the main
//    file last, over everything it includes.
//  - At most kMaxIncludes files in all and kMaxNesting levels; a file
//    included again is read once (GitLab ignores the repetition); a file
//    that includes itself, directly or through others, is an error.
//  - `project:`, `remote:`, `template:` and `component:` includes are not
//    read; the caller is told (`unseen`) and treats what they may add as
//    unknown.
//  - An entry's `rules:` decide whether it is read: `if:` against the
//    variables GitLab gives include rules (CiIncludeVariables: the
//    pipeline's predefined ones, the main file's top-level ones, the
//    pipeline's own; when the set is not complete, a rule naming any other
//    variable is left to the pipeline: read), `exists:` against the
//    project's files, `changes:` taken as matched.
//  - A file with a `spec: inputs:` header gets the entry's `inputs:` and
//    the header's defaults, checked (type, options, regex), and its text
//    holds them in place of each `$[[ inputs.NAME ]]` (functions
//    expand_vars, truncate, posix_escape), its lines where they were.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ci/rules.h"

namespace gdt::ci {

// The variables GitLab knows when it reads a pipeline's includes.
struct CiIncludeVariables {
  // Predefined ones GitLab documents for include rules: the project's
  // (CI_PROJECT_*, CI_DEFAULT_BRANCH, CI_SERVER_*), the pipeline's
  // (CI_PIPELINE_SOURCE) and the commit's (CI_COMMIT_*). The main file's
  // top-level variables win over them.
  ExpressionVariables predefined;
  // The pipeline's own variables (a manual run's, a trigger's): they win
  // over the file's.
  ExpressionVariables pipeline;
  // Every variable the pipeline has is here (run-local): a rule naming
  // another one sees it unset, as GitLab does. Otherwise (lint, expand)
  // such a rule is left to the pipeline, and the file is read.
  bool complete = false;
};

// The variables of a pipeline given as KEY=VALUE pairs (gdt-ci's --var):
// the names GitLab predefines (CI_*, GITLAB_*) are predefined ones, e.g.
// CI_COMMIT_BRANCH=main; the others are the pipeline's own.
CiIncludeVariables PipelineVariablesOf(
    const std::vector<std::pair<std::string, std::string>>& vars);

// One file that the main file includes.
struct CiIncludedFile {
  std::string path;  // Relative to the project directory ("ci/train.yml").
  std::string text;  // With its inputs filled in.
};

// What a CI file includes from its project.
struct CiIncludes {
  // Every local file read, in GitLab's merge order (the first is merged
  // first, so later ones win); each once.
  std::vector<CiIncludedFile> files;
  // Some include is not a local file (project, remote, template,
  // component): what it adds is not known.
  bool unseen = false;
  // Some unread include merges after (so over) a local file that was read:
  // a template that file defines may get keys from it. False when every
  // unread include merges under every file read (an included file's own
  // includes merge under it, and the main file over everything).
  bool unseen_over_seen = false;
  // Problems: where (`file` empty for the main file; line and column
  // 1-based, 0 without a place) and what, in one line.
  struct Problem {
    std::string file;
    int line = 0;
    int column = 0;
    std::string message;
  };
  std::vector<Problem> errors;
  // One note for each include that is not read (see `unseen`), at its
  // place: lint shows them as warnings.
  std::vector<Problem> unread;
  // The same includes in a few words each, with their place
  // ("template 'Jobs/Build.gitlab-ci.yml' (.gitlab-ci.yml:3)"), and those of
  // them that merge over a file read (see `unseen_over_seen`).
  std::vector<std::string> unread_names;
  std::vector<std::string> unread_over_seen_names;
  bool ok() const { return errors.empty(); }
};

inline constexpr size_t kMaxIncludes = 150;
inline constexpr int kMaxIncludeNesting = 100;
// The most bytes of all included files together (GitLab refuses far less).
inline constexpr size_t kMaxIncludedBytes = size_t{64} << 20;
// The most directory entries a `*`/`**` pattern walks in the project.
inline constexpr size_t kMaxGlobEntries = 200'000;
// The most steps matching all wildcards against those entries may take
// (pattern length x path length / 64, summed: a step matches one part of
// the pattern at 64 places of a path): a long pattern in a large project is
// refused rather than matched for minutes.
inline constexpr uint64_t kMaxGlobSteps = 4'000'000;

// Reads the local files that `text` (the file `file`, as the user named it)
// includes, nested, from `project_dir`. A project directory that does not
// exist is a problem without a place. Errors: a file that does not
// exist, is a directory, is not .yml/.yaml, is outside the project
// (`..`, a symbolic link out), does not parse, includes itself; more than
// kMaxIncludes files or kMaxIncludeNesting levels; an `include:` that is
// not a path, list or mapping.
CiIncludes ReadLocalIncludes(std::string_view file, std::string_view text,
                             const std::string& project_dir,
                             const CiIncludeVariables& known = {});

// The configuration GitLab reads the file being linted in, when that is
// not the file alone: the project's main CI file when it includes the file
// (a fragment), or else a child pipeline's configuration that reads it (a
// job's `trigger:include`, which GitLab turns into a configuration of
// just `include:` with that value). GitLab only ever reads the file as
// part of that configuration, so the names it may `extends` are those of
// all the files read with it, and no others: a child pipeline does not
// see its parent's templates.
struct CiIncludingConfig {
  std::string main_path;  // As shown in messages (".gitlab-ci.yml").
  // Top-level names (jobs, templates, keywords) defined by the main file
  // and every file it includes; for a child pipeline, by the files its
  // `trigger:include` reads (of every such child pipeline that reads the
  // file).
  std::set<std::string> names;
  bool unseen = false;  // Some include of the configuration is not read.
  // The configuration's stages (`stages:` of the file merged last that
  // lists them, else GitLab's build, test and deploy), without .pre and
  // .post; nullopt when gdt cannot tell: a list it cannot read (a
  // !reference), `types:`, or child pipelines that read the file with
  // other stages.
  std::optional<std::vector<std::string>> stages;
  // For a child pipeline: the job that starts it (the first, when several
  // do); empty for the main file's configuration.
  std::string trigger_job;
};

// `.gitlab-ci.yml` in `project_dir`, when it is not `file` itself and it
// includes `file` (directly or through other files); otherwise the child
// pipelines that its jobs (or, two levels down at most, the child
// pipelines' jobs) start with `trigger:include`, when they read `file`.
// A child pipeline's includes are read as GitLab reads them for it: with
// the parent's predefined variables but CI_PIPELINE_SOURCE
// `parent_pipeline`, and as its pipeline variables what the trigger job
// forwards: its YAML variables (its own over the top-level ones it
// inherits) unless `trigger:forward:yaml_variables: false`, and the
// parent's pipeline variables only with `trigger:forward:
// pipeline_variables: true` (they win). nullopt otherwise, also when it
// cannot be read.
std::optional<CiIncludingConfig> FindIncludingConfig(
    std::string_view file, const std::string& project_dir,
    const CiIncludeVariables& known = {});

}  // namespace gdt::ci

#endif  // GDT_CI_INCLUDE_H_
