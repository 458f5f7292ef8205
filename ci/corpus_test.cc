// gdt-ci on real CI files from public projects
// (tests/data/gitlab-ci-corpus/, sources in its SOURCES.md): lint reads every
// file, and a parallel:distributed block inserted into jobs of each file
// expands to valid YAML that changes nothing outside the job, changes the
// job's effective configuration (as GitLab computes it) by exactly gdt's
// additions, leaves every other job's effective configuration alone, and
// expands to itself (also with Windows line breaks and a byte order mark).
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "ci/expand.h"
#include "ci/include.h"
#include "ci/inheritance.h"
#include "ci/job_file.h"
#include "ci/rules.h"
#include "ci/yaml_tree.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/temp_dir.h"

namespace gdt::ci {
namespace {

namespace fs = std::filesystem;
const std::string kCorpus = GDT_CI_CORPUS;

// What lint must say about the files where it finds a real problem.
const std::map<std::string, std::vector<std::string>>& KnownFindings() {
  static const std::map<std::string, std::vector<std::string>> findings = {
      {"NVIDIA-nvidia-container-toolkit--nvidia-ci.yml",
       {"NVIDIA-nvidia-container-toolkit--nvidia-ci.yml:242:3: duplicate key "
        "'variables' (first at line 240); YAML keeps only one of them"}},
      // gitlab-ci-local's own test expects GitLab's refusal here.
      {"firecow-gitlab-ci-local--tests__test-cases__reference__"
       ".gitlab-ci-11-level-deep.yml",
       {"firecow-gitlab-ci-local--tests__test-cases__reference__"
        ".gitlab-ci-11-level-deep.yml:25:5: jobs:test:script config should "
        "be a string or a nested array of strings up to 10 levels deep, not "
        "one that its !reference values nest deeper (GitLab refuses the "
        "pipeline)"}},
      // gitlab-ci-local's own tests expect refusals here. Its first job
      // selects from a job without parallel, which GitLab accepts (the
      // need stays that job).
      {"firecow-gitlab-ci-local--tests__test-cases__needs-parallel-matrix-"
       "error__.gitlab-ci.yml",
       {"firecow-gitlab-ci-local--tests__test-cases__needs-parallel-matrix-"
        "error__.gitlab-ci.yml:31:7: test-plain-parallel job: undefined need: "
        "build-int: [foo] (build-int has parallel: 3, whose jobs are "
        "numbered, not a matrix); GitLab refuses the pipeline",
        "firecow-gitlab-ci-local--tests__test-cases__needs-parallel-matrix-"
        "error__.gitlab-ci.yml:50:7: test-zero-match job: undefined need: "
        "build-foo: [nope] (no job of build-foo's parallel:matrix has these "
        "values); GitLab refuses the pipeline"}},
      // gitlab-ci-local selects every job that agrees on the variables a
      // selector names; GitLab names the need from the selector's values
      // alone and finds no job of that name.
      {"firecow-gitlab-ci-local--tests__test-cases__needs-parallel-matrix-"
       "expressions__.gitlab-ci.yml",
       {"firecow-gitlab-ci-local--tests__test-cases__needs-parallel-matrix-"
        "expressions__.gitlab-ci.yml:56:7: linux:test-mixed: [aws, "
        "monitoring] job: undefined need: linux:build: [aws] (GitLab names "
        "the job from the selector's values alone and in its order, and no "
        "job is named so; linux:build's jobs are named like linux:build: "
        "[aws, monitoring], so give every variable of the job, in "
        "linux:build's order); GitLab refuses the pipeline"}},
      // gitlab-ci-local fills in component data the header does not ask
      // for; GitLab gives a component only the fields `spec: component:`
      // lists.
      {"firecow-gitlab-ci-local--tests__test-cases__include-component__com"
       "ponent-local__templates__my-component.yml",
       {"firecow-gitlab-ci-local--tests__test-cases__include-component__com"
        "ponent-local__templates__my-component.yml:9:7: '$[[ component.name"
        " ]]': unknown interpolation key: `name` (the spec: header's compon"
        "ent: list, GitLab's component data for the file, does not give it)"
        "; GitLab fills in this file's $[[ ... ]] from its spec: inputs hea"
        "der and refuses the pipeline",
        "firecow-gitlab-ci-local--tests__test-cases__include-component__com"
        "ponent-local__templates__my-component.yml:9:7: '$[[ component.vers"
        "ion ]]': unknown interpolation key: `version` (the spec: header's "
        "component: list, GitLab's component data for the file, does not gi"
        "ve it); GitLab fills in this file's $[[ ... ]] from its spec: inpu"
        "ts header and refuses the pipeline",
        "firecow-gitlab-ci-local--tests__test-cases__include-component__com"
        "ponent-local__templates__my-component.yml:9:7: '$[[ component.refe"
        "rence ]]': unknown interpolation key: `reference` (the spec: heade"
        "r's component: list, GitLab's component data for the file, does no"
        "t give it); GitLab fills in this file's $[[ ... ]] from its spec: "
        "inputs header and refuses the pipeline",
        "firecow-gitlab-ci-local--tests__test-cases__include-component__com"
        "ponent-local__templates__my-component.yml:10:7: '$[[ component.sha"
        " ]]': unknown interpolation key: `sha` (the spec: header's compone"
        "nt: list, GitLab's component data for the file, does not give it);"
        " GitLab fills in this file's $[[ ... ]] from its spec: inputs head"
        "er and refuses the pipeline"}},
      {"firecow-gitlab-ci-local--tests__test-cases__needs-parallel-matrix-"
       "static__.gitlab-ci.yml",
       {"firecow-gitlab-ci-local--tests__test-cases__needs-parallel-matrix-"
        "static__.gitlab-ci.yml:49:7: test-partial job: undefined need: "
        "build-multi: [x64] (GitLab names the job from the selector's values "
        "alone and in its order, and no job is named so; build-multi's jobs "
        "are named like build-multi: [x64, linux], so give every variable of "
        "the job, in build-multi's order); GitLab refuses the pipeline"}},
      {"firecow-gitlab-ci-local--tests__test-cases__needs-parallel-matrix-"
       "expressions-non-parallel-consumer__.gitlab-ci.yml",
       {"firecow-gitlab-ci-local--tests__test-cases__needs-parallel-matrix-"
        "expressions-non-parallel-consumer__.gitlab-ci.yml:19:7: linux:test "
        "job: undefined need: linux:build: [$[[ matrix.PROVIDER ]]] (GitLab "
        "fills in $[[ matrix.* ]] only in a job with parallel:matrix, which "
        "linux:test has not); GitLab refuses the pipeline"}},
  };
  return findings;
}

std::vector<std::string> CorpusFiles() {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(kCorpus)) {
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() == ".yml") names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

nlohmann::json Unordered(const CiValue& value) {
  return nlohmann::json::parse(value.dump());
}

// The byte offset where line `line` (0-based) starts.
size_t LineStart(const std::string& text, int line) {
  size_t pos = 0;
  for (int i = 0; i < line && pos != std::string::npos; ++i) {
    pos = text.find('\n', pos);
    if (pos != std::string::npos) ++pos;
  }
  return pos == std::string::npos ? text.size() : pos;
}

struct Candidate {
  std::string job;
  int line = 0;      // The job's key, 0-based.
  int end_line = 0;  // The next top-level key's line, or the end.
  int indent = 2;
  bool has_tags = false;
  bool has_retry = false;
  bool has_artifacts = false;
  bool runs = false;  // Has a script or extends a job: a job, not a snippet.
};

// Jobs written as block mappings that have no `parallel` yet.
std::vector<Candidate> Candidates(const std::string& text) {
  YamlError error;
  const auto tree = YamlTree::Parse(text, &error);
  std::vector<Candidate> out;
  if (!error.message.empty()) return out;
  const auto& documents = tree->documents();
  for (size_t d = 0; d < documents.size(); ++d) {
    const YamlNode& root = documents[d];
    if (!root.IsMap()) continue;
    for (size_t i = 0; i < root.size(); ++i) {
      const auto [key, value] = root.Entry(i);
      if (!key.IsScalar() || IsCiKeyword(key.Scalar()) || !value.IsMap() ||
          value.IsFlow() || key.Mark().column != 0 ||
          value.Mark().line <= key.Mark().line ||
          value.Mark().pos < key.Mark().pos) {
        continue;
      }
      Candidate c;
      c.job = key.Scalar();
      c.line = key.Mark().line;
      c.end_line = i + 1 < root.size() ? root.Entry(i + 1).first.Mark().line
                   : d + 1 < documents.size()
                       ? documents[d + 1].PropertiesMark().line
                       : 1 << 30;
      c.indent = value.Mark().column;
      bool skip = false;
      for (const auto& entry : value) {
        const std::string& k = entry.first.Scalar();
        skip = skip || k == "parallel" || k == "trigger" || k == "<<";
        c.runs = c.runs || k == "script" || k == "extends";
        c.has_tags = c.has_tags || k == "tags";
        c.has_retry = c.has_retry || k == "retry";
        c.has_artifacts = c.has_artifacts || k == "artifacts";
      }
      if (!skip && c.runs) out.push_back(c);
    }
  }
  return out;
}

// One file's documents and inheritance model.
class Model {
 public:
  explicit Model(const std::string& text)
      : tree_(YamlTree::Parse(text, &error_)), model_(tree_->documents()) {
    for (const YamlNode& root : tree_->documents()) {
      for (const auto& entry : root) {
        const CiValue job = ToCiValue(entry.second);
        if (!job.is_object() || !job.contains("extends")) continue;
        const CiValue& extends = job["extends"];
        std::vector<std::string>& parents = parents_[entry.first.Scalar()];
        if (extends.is_string()) parents.push_back(extends);
        if (extends.is_array()) {
          for (const CiValue& p : extends) {
            if (p.is_string()) parents.push_back(p);
          }
        }
      }
    }
  }
  absl::StatusOr<CiConfigModel::Effective> Resolve(
      const std::string& job) const {
    return model_.Resolve(job);
  }
  // Whether `job` extends `ancestor`, directly or through its parents.
  bool Extends(const std::string& job, const std::string& ancestor,
               int depth = 0) const {
    const auto found = parents_.find(job);
    if (found == parents_.end() || depth > 11) return false;
    for (const std::string& parent : found->second) {
      if (parent == ancestor || Extends(parent, ancestor, depth + 1)) {
        return true;
      }
    }
    return false;
  }

 private:
  YamlError error_;
  std::unique_ptr<YamlTree> tree_;
  CiConfigModel model_;
  std::map<std::string, std::vector<std::string>> parents_;
};

std::string Crlf(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\n') out += '\r';
    out += c;
  }
  return out;
}

// Inserts the block (and, with `own`, the job's own tags/retry/artifacts
// where it has none) after the job's key line, and checks the expansion.
// Returns false when expand refused with the one line it gives for what it
// cannot see.
bool CheckExpansion(const std::string& name, const std::string& text,
                    const Candidate& c, bool own) {
  SCOPED_TRACE(absl::StrCat(name, " job '", c.job, "'", own ? " (own)" : ""));
  const std::string pad(static_cast<size_t>(c.indent), ' ');
  std::string block =
      absl::StrCat(pad, "parallel:\n", pad, pad, "distributed:\n", pad, pad,
                   pad, "nodes: 2\n", pad, pad, pad, "gpus_per_node: 8\n", pad,
                   pad, pad, "checkpoint: {}\n");
  if (own) {
    if (!c.has_tags) absl::StrAppend(&block, pad, "tags: [corpus]\n");
    if (!c.has_retry) absl::StrAppend(&block, pad, "retry: 0\n");
    if (!c.has_artifacts) {
      absl::StrAppend(&block, pad,
                      "artifacts: {paths: [out/], when: always}\n");
    }
  }
  const size_t at = LineStart(text, c.line + 1);
  const std::string input = text.substr(0, at) + block + text.substr(at);
  const size_t job_begin = LineStart(input, c.line);
  const size_t job_end = LineStart(
      input, c.end_line >= (1 << 30)
                 ? c.end_line
                 : c.end_line + static_cast<int>(std::count(
                                    block.begin(), block.end(), '\n')));

  const CiExpansion expansion = ExpandCiYaml(input);
  // A job that extends this one and replaces what the block needs (its own
  // tags without the runner tag, its own artifacts:paths without
  // checkpoints/, its own parallel:matrix, or through a parent from an
  // included file listed after this one) is refused at that job: the file
  // is not for gdt as is.
  std::vector<CiDiagnostic> errors;
  for (const CiDiagnostic& d : expansion.errors) {
    const bool child =
        d.message.rfind(c.job + ": ", 0) != 0 &&
        (absl::StrContains(d.message, "replace the ones it inherits") ||
         absl::StrContains(d.message, "replace the template's") ||
         absl::StrContains(d.message,
                           "which gives it parallel:distributed, but") ||
         absl::StrContains(d.message, "not parallel:matrix"));
    if (child) {
      std::cout << "[ child    ] " << name << ": " << d.message << "\n";
    } else {
      errors.push_back(d);
    }
  }
  if (!expansion.ok() && errors.empty()) return false;
  if (!expansion.ok()) {
    // A refusal is one line at the job naming what gdt cannot see.
    EXPECT_EQ(errors.size(), 1u);
    const CiDiagnostic& d = errors[0];
    EXPECT_TRUE(d.line == c.line + 1 || d.line == c.line + 2) << d.line;
    EXPECT_EQ(d.message.rfind(c.job + ": ", 0), 0u) << d.message;
    EXPECT_THAT(d.message,
                ::testing::AnyOf(
                    ::testing::HasSubstr("gdt cannot see whether it inherits"),
                    ::testing::HasSubstr("gdt cannot tell what it adds to")));
    std::cout << "[ refused  ] " << name << ": " << d.message << "\n";
    return false;
  }
  const std::string& out = expansion.text;
  // Valid YAML, and nothing outside the job changed.
  YamlError error;
  const auto tree = YamlTree::Parse(out, &error);
  EXPECT_EQ(error.message, "");
  // A job that is no gang and takes its variables or artifacts by
  // `!reference` from this one gets that line written out (the reference
  // as it read before): every other line outside the job stays.
  const auto referenced_as = [&](const std::string& rest) {
    for (const char* quote : {"", "'", "\""}) {
      if (input.find(absl::StrCat("!reference [", quote, c.job, quote, rest)) !=
          std::string::npos) {
        return true;
      }
    }
    return false;
  };
  const bool referenced = referenced_as("");
  const std::vector<std::string> in_lines = absl::StrSplit(input, '\n');
  const std::vector<std::string> out_lines = absl::StrSplit(out, '\n');
  const int job_lines = static_cast<int>(std::count(
      input.begin() + static_cast<std::ptrdiff_t>(job_begin),
      input.begin() +
          static_cast<std::ptrdiff_t>(std::min(job_end, input.size())),
      '\n'));
  const int outside = static_cast<int>(in_lines.size()) - job_lines;
  EXPECT_GE(static_cast<int>(out_lines.size()), outside);
  if (static_cast<int>(out_lines.size()) < outside) return true;
  const int out_job_lines = static_cast<int>(out_lines.size()) - outside;
  for (int i = 0, o = 0; i < static_cast<int>(in_lines.size());) {
    if (i == c.line) {
      i += job_lines;
      o += out_job_lines;
      continue;
    }
    const std::string& was = in_lines[static_cast<size_t>(i)];
    const std::string& is = out_lines[static_cast<size_t>(o)];
    if (referenced && is != was) {
      EXPECT_THAT(was, ::testing::HasSubstr("!reference")) << is;
    } else {
      EXPECT_EQ(is, was) << "line " << i + 1;
    }
    ++i;
    ++o;
  }

  // The job: before plus exactly gdt's additions.
  const Model model_before(input);
  const Model model_after(out);
  const auto before = model_before.Resolve(c.job);
  const auto after = model_after.Resolve(c.job);
  EXPECT_TRUE(before.ok() && after.ok());
  if (!before.ok() || !after.ok()) return true;
  CiValue expected = before->config;
  expected["parallel"] = 2;
  for (const auto& [key, value] : expansion.gangs.at(0).Variables()) {
    expected["variables"][key] = value;
  }
  CiValue& tags = expected["tags"];
  if (!tags.is_array()) tags = CiValue::array();
  if (std::find(tags.begin(), tags.end(), CiValue("gdt")) == tags.end()) {
    tags.push_back("gdt");
  }
  if (!expected.contains("retry") || expected["retry"].is_null()) {
    expected["retry"] = {{"max", 2},
                         {"when", {"runner_system_failure", "script_failure"}}};
  }
  CiValue& artifacts = expected["artifacts"];
  if (!artifacts.is_object()) artifacts = CiValue::object();
  CiValue& paths = artifacts["paths"];
  if (paths.is_string()) paths = CiValue::array({paths});
  if (!paths.is_array()) paths = CiValue::array();
  if (std::find(paths.begin(), paths.end(), CiValue("checkpoints/")) ==
      paths.end()) {
    paths.push_back("checkpoints/");
  }
  if (!artifacts.contains("when") || artifacts["when"].is_null()) {
    artifacts["when"] = "always";
  }
  EXPECT_EQ(Unordered(after->config), Unordered(expected));

  // Every other job as before (those that use it through `!reference`
  // too), except those that inherit the block (the expanded entries reach
  // them the same way).
  // (A reference to the whole job, as a bag of variables, is left out.)
  for (const Candidate& other :
       referenced_as("]") ? std::vector<Candidate>() : Candidates(text)) {
    if (other.job == c.job || model_before.Extends(other.job, c.job)) continue;
    const auto other_before = model_before.Resolve(other.job);
    if (!other_before.ok() ||
        other_before->config.value("parallel", CiValue()).is_object()) {
      continue;
    }
    const auto other_after = model_after.Resolve(other.job);
    EXPECT_TRUE(other_after.ok()) << other.job;
    if (other_after.ok()) {
      EXPECT_EQ(Unordered(other_after->config), Unordered(other_before->config))
          << other.job;
    }
  }

  // Idempotent, and the same with Windows line breaks.
  const CiExpansion again = ExpandCiYaml(out);
  EXPECT_TRUE(again.ok());
  EXPECT_EQ(again.text, out);
  const CiExpansion crlf = ExpandCiYaml(Crlf(input));
  EXPECT_TRUE(crlf.ok());
  EXPECT_EQ(crlf.text, Crlf(out));
  // And with a UTF-8 byte order mark, which GitLab skips.
  const std::string bom = "\xEF\xBB\xBF";
  const CiExpansion marked = ExpandCiYaml(bom + input);
  EXPECT_TRUE(marked.ok());
  EXPECT_EQ(marked.text, bom + out);
  return true;
}

// The configuration a file of the corpus is read with in its project: the
// top-level names of every corpus file of the same project
// (`<owner>-<repo>--`), and whether any of them includes what gdt does not
// read (project, remote, template, component).
CiIncludingConfig ProjectOf(const std::string& name) {
  const std::string prefix = name.substr(0, name.find("--") + 2);
  CiIncludingConfig project;
  project.main_path = prefix + "gitlab-ci.yml";
  for (const std::string& other : CorpusFiles()) {
    if (!absl::StartsWith(other, prefix)) continue;
    YamlError error;
    const auto tree =
        YamlTree::Parse(test::ReadTextFile(kCorpus + "/" + other), &error);
    if (!error.message.empty()) continue;
    for (const YamlNode& root : tree->documents()) {
      if (!root.IsMap()) continue;
      for (const auto& entry : root) {
        const YamlNode& key = entry.first;
        const YamlNode& value = entry.second;
        if (!key.IsScalar()) continue;
        project.names.insert(key.Scalar());
        if (key.Scalar() != "include") continue;
        std::vector<YamlNode> entries;
        if (value.IsSequence()) {
          for (const YamlNode& item : value) entries.push_back(item);
        } else {
          entries.push_back(value);
        }
        for (const YamlNode& included : entries) {
          if (!included.IsMap()) continue;
          for (const auto& field : included) {
            const std::string& kind = field.first.Scalar();
            project.unseen = project.unseen || kind == "project" ||
                             kind == "remote" || kind == "template" ||
                             kind == "component";
          }
        }
      }
    }
  }
  return project;
}

TEST(CorpusTest, LintReadsEveryFile) {
  const std::vector<std::string> files = CorpusFiles();
  EXPECT_GE(files.size(), 30u);
  int fragments = 0;
  for (const std::string& name : files) {
    SCOPED_TRACE(name);
    const std::string text = test::ReadTextFile(kCorpus + "/" + name);
    CiExpansion lint = LintCiYaml(text);
    // A fragment that another file of its project includes may extend
    // that file's templates, use its stages and need its jobs: alone,
    // GitLab would refuse it, so lint does; with its project's
    // configuration, it reads.
    if (!lint.ok() &&
        std::all_of(lint.errors.begin(), lint.errors.end(),
                    [](const CiDiagnostic& d) {
                      return absl::StrContains(
                                 d.message, ": unknown keys in `extends` (") ||
                             absl::EndsWith(d.message,
                                            "; if another file includes this "
                                            "one, lint that file)");
                    })) {
      ++fragments;
      const CiIncludingConfig project = ProjectOf(name);
      CiExpandOptions options;
      options.including = &project;
      lint = LintCiYaml(text, options);
    }
    const auto known = KnownFindings().find(name);
    if (known == KnownFindings().end()) {
      EXPECT_TRUE(lint.ok()) << FormatDiagnostic(name, lint.errors[0]);
    } else {
      std::vector<std::string> found;
      for (const CiDiagnostic& d : lint.errors) {
        found.push_back(FormatDiagnostic(name, d));
      }
      EXPECT_EQ(found, known->second);
    }
  }
  EXPECT_GE(fragments, 5);
}

TEST(CorpusTest, AnInsertedBlockExpandsToExactlyGdtsAdditions) {
  int verified_files = 0;
  for (const std::string& name : CorpusFiles()) {
    const std::string text = test::ReadTextFile(kCorpus + "/" + name);
    if (KnownFindings().count(name) != 0) continue;
    int verified = 0;
    int tried = 0;
    // Two jobs a file, more until one expands, keep the test fast.
    for (const Candidate& c : Candidates(text)) {
      if (tried++ >= (verified > 0 ? 2 : 8)) break;
      if (CheckExpansion(name, text, c, /*own=*/false) ||
          CheckExpansion(name, text, c, /*own=*/true)) {
        ++verified;
      }
    }
    if (verified > 0) {
      ++verified_files;
    } else {
      std::cout << "[ no job   ] " << name << ": " << tried
                << " jobs tried, none expanded\n";
    }
  }
  std::cout << "[ corpus   ] " << verified_files
            << " files with a job expanded and checked\n";
  EXPECT_GE(verified_files, 30);
}

// run-local reads every job of every file as GitLab would compute it: no
// crash, and either a job with a script or one line naming the job. Read
// alone, most files lack what their includes bring (parents, references,
// the script of a template's job they override), so about a quarter read.
TEST(CorpusTest, RunLocalReadsEveryJob) {
  int jobs = 0;
  int read = 0;
  for (const std::string& name : CorpusFiles()) {
    const std::string text = test::ReadTextFile(kCorpus + "/" + name);
    YamlError error;
    const auto tree = YamlTree::Parse(text, &error);
    if (!error.message.empty()) continue;
    for (const YamlNode& root : tree->documents()) {
      for (const auto& entry : root) {
        if (!entry.first.IsScalar() || IsCiKeyword(entry.first.Scalar()) ||
            entry.first.Scalar().rfind('.', 0) == 0 || !entry.second.IsMap()) {
          continue;
        }
        const std::string& job = entry.first.Scalar();
        SCOPED_TRACE(absl::StrCat(name, " job '", job, "'"));
        ++jobs;
        const absl::StatusOr<CiJob> parsed = ParseCiJob(text, job);
        if (parsed.ok()) {
          ++read;
          EXPECT_FALSE(parsed->script.empty());
        } else {
          const std::string message(parsed.status().message());
          EXPECT_EQ(message.find('\n'), std::string::npos) << message;
          EXPECT_THAT(message, ::testing::HasSubstr(job)) << message;
        }
      }
    }
  }
  std::cout << "[ run-local] " << read << " of " << jobs << " jobs read\n";
  EXPECT_GE(read, 200);
}

// Every `rules:` list of the corpus (jobs, templates and workflow:), which
// GitLab accepts, reads as rules whose `if:` expressions parse.
void CollectRules(const CiValue& value, bool workflow,
                  std::vector<std::pair<const CiValue*, bool>>* out) {
  if (value.is_object()) {
    for (const auto& [key, child] : value.items()) {
      if (key == "rules" && child.is_array()) {
        out->emplace_back(&child, workflow);
      } else {
        CollectRules(child, workflow || key == "workflow", out);
      }
    }
  } else if (value.is_array()) {
    for (const CiValue& child : value) CollectRules(child, workflow, out);
  }
}

TEST(CorpusTest, EveryRulesListAndExpressionReads) {
  size_t expressions = 0;
  for (const std::string& name : CorpusFiles()) {
    YamlError error;
    const auto tree = YamlTree::Parse(
        test::ReadTextFile(absl::StrCat(kCorpus, "/", name)), &error);
    if (!error.message.empty()) continue;
    for (const YamlNode& document : tree->documents()) {
      const CiValue config = ToCiValue(document);
      std::vector<std::pair<const CiValue*, bool>> lists;
      CollectRules(config, false, &lists);
      for (const auto& [list, workflow] : lists) {
        // Rules with a !reference (resolved only for a whole job) are left
        // out; the others must read.
        CiValue plain = CiValue::array();
        for (const CiValue& rule : *list) {
          if (rule.is_object() &&
              !absl::StrContains(rule.dump(), "\"!reference\"")) {
            plain.push_back(rule);
            if (rule.contains("if")) ++expressions;
          }
        }
        absl::StatusOr<std::vector<CiRule>> rules =
            ReadRules(plain, name, /*job_rules=*/!workflow);
        EXPECT_TRUE(rules.ok()) << rules.status();
      }
    }
  }
  EXPECT_GE(expressions, 300u);
}

// GitLab's own gems: one template with a `spec: inputs:` header, included
// sixteen times with another gem_name each, makes sixteen jobs and
// templates with the names filled in.
TEST(CorpusTest, AFileIncludedWithInputsIsFilledInEachTime) {
  test::TempDir project;
  const fs::path templates =
      fs::path(project.path()) / ".gitlab/ci/templates/gem.gitlab-ci.yml";
  fs::create_directories(templates.parent_path());
  test::WriteTextFile(
      templates.string(),
      test::ReadTextFile(
          kCorpus +
          "/gitlabhq-gitlabhq--gitlab__ci__templates__gem.gitlab-ci.yml"));
  const std::string main = test::ReadTextFile(
      kCorpus + "/gitlabhq-gitlabhq--gitlab__ci__gitlab-gems.gitlab-ci.yml");
  const CiIncludes includes = ReadLocalIncludes(
      ".gitlab/ci/gitlab-gems.gitlab-ci.yml", main, project.path());
  ASSERT_TRUE(includes.ok()) << includes.errors[0].message;
  ASSERT_EQ(includes.files.size(), 16u);
  std::vector<std::string> jobs;
  for (const CiIncludedFile& file : includes.files) {
    YamlError error;
    const auto tree = YamlTree::Parse(file.text, &error);
    ASSERT_TRUE(error.message.empty()) << error.message << "\n" << file.text;
    ASSERT_EQ(tree->documents().size(), 2u);
    const CiValue config = ToCiValue(tree->documents()[1]);
    for (const auto& [name, value] : config.items()) {
      if (name.rfind("gems ", 0) == 0) {
        jobs.push_back(name);
        EXPECT_EQ(value["extends"], ".gems:rules:" + name.substr(5));
        EXPECT_EQ(value["trigger"]["include"],
                  "gems/" + name.substr(5) + "/.gitlab-ci.yml");
        const CiValue rules = config[".gems:rules:" + name.substr(5)]["rules"];
        EXPECT_EQ(rules[0]["if"], "'true' != 'true'");
      }
    }
  }
  EXPECT_EQ(jobs.size(), 16u);
  EXPECT_NE(std::find(jobs.begin(), jobs.end(), "gems gitlab-rspec"),
            jobs.end());
  CiExpandOptions options;
  options.includes = &includes;
  // The file is a piece of GitLab's configuration: the job its gems need
  // is in the file that includes it, so lint says that, for each of them.
  const CiExpansion lint = LintCiYaml(main, options);
  EXPECT_EQ(lint.errors.size(), 16u);
  for (const CiDiagnostic& error : lint.errors) {
    EXPECT_THAT(error.message,
                ::testing::MatchesRegex(
                    "gems .* job: undefined need: clone-gitlab-repo \\(GitLab "
                    "refuses the pipeline; if another file includes this "
                    "one, lint that file\\)"));
  }
}

// A copy of corpus files as a project: `files` maps each corpus file to its
// path in the project.
void WriteProject(const std::string& dir,
                  const std::map<std::string, std::string>& files) {
  for (const auto& [corpus, path] : files) {
    const fs::path full = fs::path(dir) / path;
    fs::create_directories(full.parent_path());
    test::WriteTextFile(full.string(),
                        test::ReadTextFile(kCorpus + "/" + corpus));
  }
}

// gitlab-ci-local's include-rules case: locally (GITLAB_CI "false" there)
// it includes .gitlab-ci-to-be-added.yml; GitLab, where GITLAB_CI is
// "true", includes .gitlab-ci-not-to-be-added.yml instead, and the tag
// file only in a tag pipeline. lint, which knows no pipeline, reads all.
TEST(CorpusTest, IncludeRulesDecideWithThePipelinesVariables) {
  test::TempDir project;
  const std::string prefix =
      "firecow-gitlab-ci-local--tests__test-cases__"
      "include-rules__";
  WriteProject(
      project.path(),
      {{prefix + ".gitlab-ci-to-be-added.yml", ".gitlab-ci-to-be-added.yml"},
       {prefix + ".gitlab-ci-not-to-be-added.yml",
        ".gitlab-ci-not-to-be-added.yml"},
       {prefix + ".gitlab-ci-issue685.yml", ".gitlab-ci-issue685.yml"}});
  const std::string main =
      test::ReadTextFile(kCorpus + "/" + prefix + ".gitlab-ci.yml");
  const auto read = [&](const CiIncludeVariables& known) {
    const CiIncludes includes =
        ReadLocalIncludes(".gitlab-ci.yml", main, project.path(), known);
    EXPECT_TRUE(includes.ok()) << includes.errors.at(0).message;
    std::vector<std::string> paths;
    for (const CiIncludedFile& file : includes.files) {
      paths.push_back(file.path);
    }
    return paths;
  };
  EXPECT_EQ(read({}),
            (std::vector<std::string>{".gitlab-ci-to-be-added.yml",
                                      ".gitlab-ci-issue685.yml",
                                      ".gitlab-ci-not-to-be-added.yml"}));
  CiIncludeVariables gitlab;
  gitlab.complete = true;
  gitlab.predefined = {{"GITLAB_CI", "true"}, {"CI_COMMIT_BRANCH", "main"}};
  EXPECT_EQ(read(gitlab),
            (std::vector<std::string>{".gitlab-ci-not-to-be-added.yml"}));
  gitlab.predefined["CI_COMMIT_TAG"] = "v1.0.0";
  EXPECT_EQ(read(gitlab),
            (std::vector<std::string>{".gitlab-ci-issue685.yml",
                                      ".gitlab-ci-not-to-be-added.yml"}));
}

// gitlab-ci-local's include-inputs defaults case, filled in as its test
// expects: every type's default, one given input, an array in a script.
TEST(CorpusTest, InputDefaultsAreFilledInAsGitLabCiLocalExpects) {
  test::TempDir project;
  const std::string prefix =
      "firecow-gitlab-ci-local--tests__test-cases__"
      "include-inputs__input-templates__default__";
  WriteProject(project.path(), {{prefix + ".gitlab-ci-input-template.yml",
                                 ".gitlab-ci-input-template.yml"}});
  const std::string main =
      test::ReadTextFile(kCorpus + "/" + prefix + ".gitlab-ci.yml");
  const CiIncludes includes =
      ReadLocalIncludes(".gitlab-ci.yml", main, project.path());
  ASSERT_TRUE(includes.ok()) << includes.errors.at(0).message;
  ASSERT_EQ(includes.files.size(), 1u);
  YamlError error;
  const auto tree = YamlTree::Parse(includes.files[0].text, &error);
  ASSERT_TRUE(error.message.empty()) << error.message;
  const CiValue script =
      ToCiValue(tree->documents().at(1))["scan-website"]["script"];
  EXPECT_EQ(script, CiValue::parse(R"(["echo string", "echo 1", "echo true",
      "echo overwrite default value", ["alice", "bob"]])"));
  CiExpandOptions options;
  options.includes = &includes;
  const CiExpansion lint = LintCiYaml(main, options);
  EXPECT_TRUE(lint.ok()) << FormatDiagnostic("main", lint.errors.at(0));
}

// The Hetzner fleeting plugin's pipeline as a project: a component listed
// after its local files merges over them, so a gang job that extends their
// templates may inherit entries gdt cannot see; lint and expand say so in
// one line naming the component.
TEST(CorpusTest, AnUnreadComponentOverTheFilesReadIsNamed) {
  test::TempDir project;
  const std::string prefix = "hetznercloud-fleeting-plugin-hetzner--";
  std::map<std::string, std::string> files;
  for (const char* part :
       {"build", "common", "release", "rules", "test", "upload"}) {
    files[absl::StrCat(prefix, "gitlab__ci__", part, ".gitlab-ci.yml")] =
        absl::StrCat(".gitlab/ci/", part, ".gitlab-ci.yml");
  }
  WriteProject(project.path(), files);
  const std::string main =
      test::ReadTextFile(kCorpus + "/" + prefix + "gitlab-ci.yml") +
      "\ntrain:\n  stage: test\n  extends:\n"
      "    - .rules:merge_request_or_release\n    - .go-cache\n"
      "  script: [make train]\n  parallel:\n    distributed:\n"
      "      nodes: 2\n";
  const CiIncludes includes =
      ReadLocalIncludes(".gitlab-ci.yml", main, project.path());
  ASSERT_TRUE(includes.ok()) << includes.errors.at(0).message;
  EXPECT_EQ(includes.files.size(), 6u);
  EXPECT_TRUE(includes.unseen_over_seen);
  CiExpandOptions options;
  options.includes = &includes;
  for (const CiExpansion& result :
       {LintCiYaml(main, options), ExpandCiYaml(main, options)}) {
    ASSERT_EQ(result.errors.size(), 1u);
    EXPECT_THAT(result.errors[0].message,
                ::testing::HasSubstr(
                    "train: the file includes component "
                    "'$CI_SERVER_FQDN/apricote/releaser-pleaser/run@v0.9.0' "
                    "(.gitlab-ci.yml:15), which gdt does not read and which "
                    "GitLab merges over the files gdt read"));
    EXPECT_THAT(result.errors[0].message,
                ::testing::HasSubstr("inherits tags, retry"));
  }
}

// A file without a gang is no work for expand: it comes back byte for byte
// (also read with its project's files, for pipelines whose every local
// include is in the corpus).
TEST(CorpusTest, ExpandLeavesAFileWithoutAGangAsItIs) {
  int files = 0;
  for (const std::string& name : CorpusFiles()) {
    SCOPED_TRACE(name);
    const std::string text = test::ReadTextFile(kCorpus + "/" + name);
    const CiExpansion expansion = ExpandCiYaml(text);
    ASSERT_TRUE(expansion.ok()) << FormatDiagnostic(name, expansion.errors[0]);
    EXPECT_EQ(expansion.text, text);
    ++files;
  }
  EXPECT_GE(files, 200);
  struct Pipeline {
    std::string prefix;
    std::vector<std::string> paths;  // Of the included files.
  };
  const std::vector<Pipeline> pipelines = {
      {"Kitware-VTK-m--",
       {".gitlab/ci/centos7.yml", ".gitlab/ci/centos8.yml",
        ".gitlab/ci/doxygen.yml", ".gitlab/ci/frontier.yml",
        ".gitlab/ci/macos.yml", ".gitlab/ci/opensuse.yml",
        ".gitlab/ci/rhel8.yml", ".gitlab/ci/ubuntu1604.yml",
        ".gitlab/ci/ubuntu1804.yml", ".gitlab/ci/ubuntu2004.yml",
        ".gitlab/ci/ubuntu2204.yml", ".gitlab/ci/windows10.yml"}},
      {"LLNL-axom--",
       {".gitlab/build_ruby.yml", ".gitlab/build_lassen.yml",
        ".gitlab/build_tioga.yml"}},
  };
  for (const Pipeline& pipeline : pipelines) {
    SCOPED_TRACE(pipeline.prefix);
    test::TempDir project;
    std::map<std::string, std::string> files_of;
    for (const std::string& path : pipeline.paths) {
      std::string corpus = path.substr(1);
      for (size_t at = corpus.find('/'); at != std::string::npos;
           at = corpus.find('/')) {
        corpus.replace(at, 1, "__");
      }
      files_of[pipeline.prefix + corpus] = path;
    }
    WriteProject(project.path(), files_of);
    const std::string main =
        test::ReadTextFile(kCorpus + "/" + pipeline.prefix + "gitlab-ci.yml");
    const CiIncludes includes =
        ReadLocalIncludes(".gitlab-ci.yml", main, project.path());
    ASSERT_TRUE(includes.ok()) << includes.errors.at(0).message;
    EXPECT_EQ(includes.files.size(), pipeline.paths.size());
    CiExpandOptions options;
    options.includes = &includes;
    const CiExpansion lint = LintCiYaml(main, options);
    EXPECT_TRUE(lint.ok()) << FormatDiagnostic("main", lint.errors.at(0));
    const CiExpansion expansion = ExpandCiYaml(main, options);
    ASSERT_TRUE(expansion.ok())
        << FormatDiagnostic("main", expansion.errors.at(0));
    EXPECT_EQ(expansion.text, main);
  }
}

}  // namespace
}  // namespace gdt::ci
