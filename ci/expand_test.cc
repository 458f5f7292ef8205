#include "ci/expand.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "ci/inheritance.h"
#include "ci/yaml_tree.h"
#include "common/gang_limits.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/cpu_time.h"
#include "testing/temp_dir.h"

namespace gdt::ci {
namespace {

namespace fs = std::filesystem;
using test::ReadTextFile;
using ::testing::ElementsAre;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;
using ::testing::Pair;

const std::string kTestData = GDT_CI_TESTDATA;

std::vector<std::string> FilesIn(const std::string& dir,
                                 const std::string& suffix) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      names.push_back(name);
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

// What GitLab requires of the expansion: no `distributed` left, `parallel`
// an integer from 1 to 200, every variable value a string (gdt's quoted).
void ExpectValidGitLabStructure(const std::string& name,
                                const std::string& text) {
  const YAML::Node root = YAML::Load(text);
  for (const auto& entry : root) {
    const YAML::Node& job = entry.second;
    if (!job.IsMap()) continue;
    const std::string job_name = entry.first.Scalar();
    if (const YAML::Node parallel = job["parallel"]; parallel) {
      if (parallel.IsMap()) {
        EXPECT_FALSE(parallel["distributed"]) << name << " " << job_name;
      } else {
        ASSERT_TRUE(parallel.IsScalar()) << name << " " << job_name;
        const int n = std::stoi(parallel.Scalar());
        EXPECT_EQ(std::to_string(n), parallel.Scalar()) << name;
        EXPECT_GE(n, 1) << name << " " << job_name;
        EXPECT_LE(n, 200) << name << " " << job_name;
      }
    }
    if (const YAML::Node variables = job["variables"];
        variables && variables.IsMap()) {
      for (const auto& variable : variables) {
        EXPECT_TRUE(variable.second.IsScalar())
            << name << " " << job_name << " " << variable.first.Scalar();
        if (variable.first.Scalar().rfind("GDT_", 0) == 0) {
          EXPECT_EQ(variable.second.Tag(), "!")  // Quoted: a string.
              << name << " " << job_name << " " << variable.first.Scalar();
        }
      }
    }
  }
}

TEST(ExpandGoldenTest, EveryInputExpandsToItsExpectedFile) {
  const std::string dir = kTestData + "/expand";
  const bool update = std::getenv("GDT_UPDATE_GOLDEN") != nullptr;
  std::vector<std::string> inputs;
  for (const std::string& name : FilesIn(dir, ".yml")) {
    if (name.find(".expected.") == std::string::npos) inputs.push_back(name);
  }
  ASSERT_GE(inputs.size(), 5u);
  for (const std::string& name : inputs) {
    SCOPED_TRACE(name);
    const std::string input = ReadTextFile(dir + "/" + name);
    const std::string expected_path =
        dir + "/" + name.substr(0, name.size() - 4) + ".expected.yml";
    const CiExpansion expansion = ExpandCiYaml(input);
    ASSERT_TRUE(expansion.ok())
        << FormatDiagnostic(name, expansion.errors.front());
    if (update) std::ofstream(expected_path) << expansion.text;
    EXPECT_EQ(expansion.text, ReadTextFile(expected_path));
    ExpectValidGitLabStructure(name, expansion.text);
    // The expansion is plain GitLab YAML: linting passes, expanding again
    // changes nothing.
    const CiExpansion lint = LintCiYaml(expansion.text);
    EXPECT_TRUE(lint.ok()) << FormatDiagnostic(name, lint.errors.front());
    EXPECT_EQ(ExpandCiYaml(expansion.text).text, expansion.text);
  }
}

TEST(ExpandGoldenTest, AFileWithoutTheBlockIsUnchanged) {
  const std::string input = ReadTextFile(kTestData + "/expand/no-block.yml");
  EXPECT_EQ(ExpandCiYaml(input).text, input);
}

// Each file under testdata/malformed starts with "# error: L:C: message",
// the one line lint (and, unless the file says "# lint-only", expand) must
// print; "# max-nodes: N" sets the cluster maximum.
TEST(MalformedTest, EachVariantIsOneLineWithItsPlace) {
  const std::string dir = kTestData + "/malformed";
  const std::vector<std::string> names = FilesIn(dir, ".yml");
  EXPECT_GE(names.size(), 20u);
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    const std::string text = ReadTextFile(dir + "/" + name);
    const std::string header = text.substr(0, text.find('\n'));
    ASSERT_EQ(header.rfind("# error: ", 0), 0u);
    const std::string expected = name + ":" + header.substr(9);
    CiExpandOptions options;
    if (const size_t at = text.find("# max-nodes: "); at != std::string::npos) {
      options.max_nodes = std::stoi(text.substr(at + 13));
    }
    const bool lint_only = text.find("# lint-only") != std::string::npos;

    const CiExpansion lint = LintCiYaml(text, options);
    ASSERT_EQ(lint.errors.size(), 1u);
    EXPECT_EQ(FormatDiagnostic(name, lint.errors[0]), expected);
    EXPECT_TRUE(lint.gangs.empty());

    const CiExpansion expansion = ExpandCiYaml(text, options);
    if (lint_only) {
      EXPECT_TRUE(expansion.ok());
      continue;
    }
    ASSERT_EQ(expansion.errors.size(), 1u);
    EXPECT_EQ(FormatDiagnostic(name, expansion.errors[0]), expected);
    EXPECT_TRUE(expansion.text.empty());
  }
}

TEST(ExpandTest, KeepsWindowsLineBreaksAndAMissingFinalNewline) {
  const std::string input =
      "a:\r\n  script: x\r\nb:\r\n  parallel:\r\n    distributed:\r\n"
      "      nodes: 2\r\n  script: y";
  const CiExpansion expansion = ExpandCiYaml(input, {.runner_tag = ""});
  ASSERT_TRUE(expansion.ok()) << expansion.errors[0].message;
  EXPECT_EQ(expansion.text,
            "a:\r\n  script: x\r\nb:\r\n  parallel: 2\r\n  variables:\r\n"
            "    GDT_GPUS_PER_NODE: \"0\"\r\n"
            "    GDT_NPROC_PER_NODE: \"1\"\r\n"
            "    GDT_LAUNCHER: \"torchrun\"\r\n"
            "  retry:\r\n    max: 2\r\n"
            "    when: [runner_system_failure, script_failure]\r\n"
            "  script: y");
}

// A block may take its settings from a shared mapping with a merge key,
// read as GitLab's YAML reader reads it: an entry after the merge key
// replaces the merged one, an entry before it is replaced, and of a list
// of merged mappings the earlier one's entry wins.
TEST(ExpandTest, MergeKeysInTheBlockAreReadAsGitLabReadsThem) {
  const std::string input =
      ".gang: &gang\n  gpus_per_node: 8\n  nodes: 3\n"
      "  checkpoint: &ckpt {keep: 2}\n"
      ".small: &small\n  gpus_per_node: 2\n"
      "train:\n  parallel:\n    distributed:\n      <<: *gang\n"
      "      nodes: 4\n      checkpoint: {<<: *ckpt, notice: 5m}\n"
      "  script: [torchrun t.py]\n"
      "before:\n  parallel:\n    distributed: {nodes: 2, <<: *gang}\n"
      "  script: [x]\n"
      "list:\n  parallel:\n    distributed: {<<: [*small, *gang]}\n"
      "  script: [x]\n";
  for (const CiExpansion& read : {LintCiYaml(input), ExpandCiYaml(input)}) {
    ASSERT_TRUE(read.ok()) << FormatDiagnostic("f", read.errors[0]);
    ASSERT_EQ(read.gangs.size(), 3u);
    EXPECT_EQ(read.gangs[0].nodes, 4);
    EXPECT_EQ(read.gangs[0].gpus_per_node, 8);
    EXPECT_EQ(read.gangs[0].checkpoint_keep, 2);
    EXPECT_EQ(read.gangs[0].checkpoint_notice_seconds, 300);
    EXPECT_EQ(read.gangs[1].nodes, 3);  // The merged entry came later.
    EXPECT_EQ(read.gangs[2].nodes, 3);
    EXPECT_EQ(read.gangs[2].gpus_per_node, 2);
  }
  const CiExpansion typo = LintCiYaml(
      ".g: &g {nodez: 2}\nj:\n  parallel:\n    distributed: {<<: *g}\n"
      "  script: [x]\n");
  ASSERT_FALSE(typo.ok());
  EXPECT_THAT(typo.errors[0].message,
              HasSubstr("unknown key 'nodez' (did you mean 'nodes'?)"));
}

TEST(ExpandTest, AUtf8ByteOrderMarkIsReadAndKept) {
  // Editors on Windows save one; GitLab's YAML reader skips it.
  const std::string bom = "\xEF\xBB\xBF";
  const std::string input =
      bom + "a:\r\n  script: x\r\nb:\r\n  parallel:\r\n    distributed:\r\n" +
      "      nodes: 2\r\n  script: y";
  const CiExpansion expansion = ExpandCiYaml(input, {.runner_tag = ""});
  ASSERT_TRUE(expansion.ok()) << expansion.errors[0].message;
  EXPECT_EQ(expansion.text,
            bom + "a:\r\n  script: x\r\nb:\r\n  parallel: 2\r\n" +
                "  variables:\r\n    GDT_GPUS_PER_NODE: \"0\"\r\n" +
                "    GDT_NPROC_PER_NODE: \"1\"\r\n" +
                "    GDT_LAUNCHER: \"torchrun\"\r\n" + "  retry:\r\n" +
                "    max: 2\r\n" +
                "    when: [runner_system_failure, script_failure]\r\n" +
                "  script: y");
  EXPECT_TRUE(LintCiYaml(input).ok());
  // Places of errors count from the first character after it.
  const CiExpansion lint =
      LintCiYaml(bom +
                 "b:\n  parallel:\n    distributed: {nodes: 2, launcher: x}\n"
                 "  script: [x]\n");
  ASSERT_EQ(lint.errors.size(), 1u);
  EXPECT_EQ(FormatDiagnostic("f", lint.errors[0]),
            "f:3:39: b: parallel:distributed:launcher must be one of "
            "torchrun, env, nccl, none, not 'x'");
  const CiExpansion bad = LintCiYaml(bom + "b: [\xFF");
  ASSERT_EQ(bad.errors.size(), 1u);
  EXPECT_EQ(FormatDiagnostic("f", bad.errors[0]),
            "f:1:5: byte 0xff is not UTF-8; GitLab reads CI files as UTF-8 "
            "(convert a Latin-1 file with iconv -f LATIN1 -t UTF-8)");
}

TEST(ExpandTest, AppendsAfterTheLastEntryEvenAtTheEndOfTheFile) {
  const std::string input =
      "j:\n  parallel:\n    distributed: {nodes: 3, procs_per_node: 2}\n"
      "  variables:\n    A: b";
  const CiExpansion expansion = ExpandCiYaml(input);
  ASSERT_TRUE(expansion.ok()) << expansion.errors[0].message;
  EXPECT_THAT(expansion.text, HasSubstr("    A: b\n    GDT_GPUS_PER_NODE"));
  const YAML::Node root = YAML::Load(expansion.text);
  EXPECT_EQ(root["j"]["parallel"].Scalar(), "3");
  EXPECT_EQ(root["j"]["variables"]["GDT_NPROC_PER_NODE"].Scalar(), "2");
  EXPECT_EQ(root["j"]["tags"][0].Scalar(), "gdt");
}

TEST(ExpandTest, ProcessesDefaultToTheGpusPerNode) {
  const CiExpansion expansion = ExpandCiYaml(
      "j:\n  parallel:\n    distributed: {nodes: 2, gpus_per_node: 4}\n"
      "  script: x\n");
  ASSERT_TRUE(expansion.ok());
  ASSERT_EQ(expansion.gangs.size(), 1u);
  EXPECT_EQ(expansion.gangs[0].procs_per_node, 4);
  EXPECT_EQ(expansion.gangs[0].Describe(),
            "2 nodes x 4 GPUs, 4 processes per node (world size 8), "
            "launcher torchrun");
}

// A preemptible gang tells the coordinator how many retries bring it back
// after a preemption (exit code 76), from the retry: GitLab will apply.
TEST(ExpandTest, PreemptibleGangCarriesTheRetriesThatBringItBack) {
  const std::string block =
      "  parallel:\n    distributed: {nodes: 2, preemptible: true}\n"
      "  script: x\n";
  const struct {
    std::string yaml;
    std::string retries;
    bool warned;
  } cases[] = {
      // No retry: expand's own (max 2, script_failure).
      {"j:\n" + block, "2", false},
      {"default:\n  retry: 1\nj:\n" + block, "1", false},
      {"default:\n  retry: 1\nj:\n  inherit: {default: false}\n" + block, "2",
       false},
      {"j:\n  retry: 0\n" + block, "0", true},
      {"j:\n  retry: {max: 2, when: [runner_system_failure]}\n" + block, "0",
       true},
      {"j:\n  retry: {max: 1, when: [script_failure]}\n" + block, "1", false},
      {"j:\n  retry: {max: 2, when: always}\n" + block, "2", false},
      {"j:\n  retry: {max: 2, exit_codes: [1, 137]}\n" + block, "0", true},
      {"j:\n  retry: {max: 2, exit_codes: [1, 76]}\n" + block, "2", false},
      // Both keys: only when both let 76 through.
      {"j:\n  retry: {max: 2, when: [script_failure], exit_codes: 1}\n" + block,
       "0", true},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.yaml);
    const CiExpansion expansion = ExpandCiYaml(c.yaml);
    ASSERT_TRUE(expansion.ok()) << expansion.errors[0].message;
    EXPECT_THAT(expansion.text,
                HasSubstr("GDT_PREEMPT_RETRIES: \"" + c.retries + "\""));
    const CiExpansion lint = LintCiYaml(c.yaml);
    ASSERT_TRUE(lint.ok()) << lint.errors[0].message;
    if (c.warned) {
      ASSERT_EQ(lint.warnings.size(), 1u);
      EXPECT_THAT(lint.warnings[0].message,
                  HasSubstr("j: preemptible, but its retry: never brings back "
                            "a preempted job (exit code 76), so gdt never "
                            "preempts it"));
    } else {
      EXPECT_TRUE(lint.warnings.empty()) << lint.warnings[0].message;
    }
    // What expand writes, lint takes.
    const CiExpansion relint = LintCiYaml(expansion.text);
    EXPECT_TRUE(relint.ok()) << relint.errors[0].message;
  }
  // A gang that is not preemptible gets no count.
  const CiExpansion plain = ExpandCiYaml(
      "j:\n  parallel:\n    distributed: {nodes: 2}\n  script: x\n");
  ASSERT_TRUE(plain.ok()) << plain.errors[0].message;
  EXPECT_THAT(plain.text, Not(HasSubstr("GDT_PREEMPT_RETRIES")));
  // A plain job's own value is checked like every GDT_* input.
  const CiExpansion bad = LintCiYaml(
      "j:\n  parallel: 2\n  tags: [gdt]\n  script: x\n"
      "  variables: {GDT_PREEMPTIBLE: \"1\", GDT_PREEMPT_RETRIES: \"3\"}\n");
  ASSERT_EQ(bad.errors.size(), 1u);
  EXPECT_THAT(bad.errors[0].message,
              HasSubstr("GDT_PREEMPT_RETRIES must be an integer from 0 to 2"));
}

TEST(ExpandTest, PreemptibleBecomesAVariable) {
  const CiExpansion expansion = ExpandCiYaml(
      "j:\n  parallel:\n    distributed: {nodes: 2, preemptible: true}\n"
      "  script: x\n");
  ASSERT_TRUE(expansion.ok()) << expansion.errors[0].message;
  ASSERT_EQ(expansion.gangs.size(), 1u);
  EXPECT_TRUE(expansion.gangs[0].preemptible);
  EXPECT_THAT(expansion.text, HasSubstr("GDT_PREEMPTIBLE: \"1\""));
  // What expand writes, lint takes; a value the executor would refuse is one
  // line.
  const CiExpansion relint = LintCiYaml(expansion.text);
  EXPECT_TRUE(relint.ok()) << relint.errors[0].message;
  const CiExpansion bad = LintCiYaml(
      "j:\n  parallel: 2\n  tags: [gdt]\n  script: x\n"
      "  variables: {GDT_GPUS_PER_NODE: \"1\", GDT_PREEMPTIBLE: \"yes\"}\n");
  ASSERT_EQ(bad.errors.size(), 1u);
  EXPECT_THAT(bad.errors[0].message, HasSubstr("GDT_PREEMPTIBLE"));
}

TEST(ExpandTest, AnElasticRangeMakesTheMostMembersAndCarriesTheRange) {
  for (const std::string nodes : {"2..8", "\"2..8\"", "2 .. 8"}) {
    SCOPED_TRACE(nodes);
    const CiExpansion expansion =
        ExpandCiYaml(absl::StrCat("j:\n  parallel:\n    distributed:\n"
                                  "      nodes: ",
                                  nodes, "\n  script: x\n"));
    ASSERT_TRUE(expansion.ok()) << expansion.errors[0].message;
    ASSERT_EQ(expansion.gangs.size(), 1u);
    EXPECT_EQ(expansion.gangs[0].nodes, 8);
    EXPECT_EQ(expansion.gangs[0].nodes_min, 2);
    const YAML::Node root = YAML::Load(expansion.text);
    EXPECT_EQ(root["j"]["parallel"].Scalar(), "8");
    EXPECT_EQ(root["j"]["variables"]["GDT_NODES_MIN"].Scalar(), "2");
    EXPECT_EQ(root["j"]["variables"]["GDT_NODES_MAX"].Scalar(), "8");
    EXPECT_EQ(expansion.gangs[0].Describe(),
              "2..8 nodes x 0 GPUs, 1 process per node (world size 2..8), "
              "launcher torchrun, elastic");
  }
  // A range of one size is a fixed gang written as a range.
  const CiExpansion one = ExpandCiYaml(
      "j:\n  parallel:\n    distributed: {nodes: \"1..2\"}\n  script: x\n");
  ASSERT_TRUE(one.ok()) << one.errors[0].message;
  EXPECT_THAT(one.text, HasSubstr("parallel: 2\n"));
  EXPECT_THAT(one.text, HasSubstr("GDT_NODES_MIN: \"1\""));
  // The expansion lints clean: the plain form accepts the variables.
  const CiExpansion lint = LintCiYaml(one.text);
  ASSERT_TRUE(lint.ok()) << lint.errors[0].message;
  ASSERT_EQ(lint.gangs.size(), 1u);
  EXPECT_EQ(lint.gangs[0].nodes_min, 1);
}

TEST(LintTest, APlainElasticMinimumAboveTheMembersIsOneLine) {
  const CiExpansion lint = LintCiYaml(
      "j:\n  parallel: 2\n  tags: [gdt]\n  variables:\n"
      "    GDT_NODES_MIN: \"3\"\n  script: x\n");
  ASSERT_EQ(lint.errors.size(), 1u);
  EXPECT_EQ(FormatDiagnostic("f", lint.errors[0]),
            "f:5:5: j: GDT_NODES_MIN is 3 but the job has only 2 members "
            "(parallel); an elastic gang's minimum must not exceed them");
}

TEST(ExpandTest, EmptyFileIsEmpty) {
  const CiExpansion expansion = ExpandCiYaml("");
  EXPECT_TRUE(expansion.ok());
  EXPECT_EQ(expansion.text, "");
}

TEST(ExpandTest, ReportsEveryErrorInFileOrder) {
  const CiExpansion expansion = ExpandCiYaml(
      "a:\n  parallel:\n    distributed: {nodes: 0}\n  script: x\n"
      "b:\n  parallel:\n    distributed: {nodes: 2, launcher: mpi}\n"
      "  script: x\n");
  ASSERT_EQ(expansion.errors.size(), 2u);
  EXPECT_EQ(expansion.errors[0].line, 3);
  EXPECT_EQ(expansion.errors[1].line, 7);
  EXPECT_THAT(expansion.errors[1].message, HasSubstr("'mpi'"));
}

TEST(ExpandTest, LintReportsDuplicateKeysAnywhere) {
  const CiExpansion expansion =
      LintCiYaml("test:\n  script: x\n  variables:\n    A: 1\n    A: 2\n");
  ASSERT_EQ(expansion.errors.size(), 1u);
  EXPECT_EQ(FormatDiagnostic("f", expansion.errors[0]),
            "f:5:5: duplicate key 'A' (first at line 4); YAML keeps only one "
            "of them");
}

TEST(ExpandTest, RepeatedMergeKeysAreNotDuplicates) {
  const std::string input =
      ".a: &a {image: x}\n.b: &b {tags: [y]}\n"
      "test:\n  <<: *a\n  <<: *b\n  script: z\n";
  const CiExpansion expansion = ExpandCiYaml(input);
  ASSERT_TRUE(expansion.ok()) << expansion.errors[0].message;
  EXPECT_EQ(expansion.text, input);
}

TEST(ExpandTest, AnAnchoredVariablesBlockIsNotChanged) {
  const CiExpansion expansion = ExpandCiYaml(
      "j:\n  variables: &v\n    A: b\n  parallel:\n    distributed: {nodes: "
      "2}\n  script: x\nk:\n  variables: *v\n  script: y\n");
  ASSERT_EQ(expansion.errors.size(), 1u);
  EXPECT_THAT(expansion.errors[0].message,
              HasSubstr("carries an anchor or tag that other jobs may share"));
  EXPECT_EQ(expansion.errors[0].line, 2);
}

TEST(LintTest, AFileWithoutAVisibleJobIsWarnedAbout) {
  // What GitLab refuses as a project's pipeline, and accepts as an
  // included file: a warning, the exit code of a clean file.
  for (const auto& [text, says] :
       std::vector<std::pair<std::string, std::string>>{
           {"",
            "f:1:1: the file is empty: GitLab refuses it as a "
            "project's pipeline (Please provide content of "
            ".gitlab-ci.yml); as a file that another one includes it is "
            "fine"},
           {"# nothing\n", "f:1:1: the file is empty"},
           {"variables:\n  A: b\n.hidden:\n  script: x\n",
            "f:1:1: the file has no visible job: GitLab refuses it "
            "as a project's pipeline (jobs config should contain at least "
            "one visible job)"}}) {
    const CiExpansion lint = LintCiYaml(text);
    EXPECT_TRUE(lint.ok()) << text;
    ASSERT_EQ(lint.warnings.size(), 1u) << text;
    EXPECT_THAT(FormatDiagnostic("f", lint.warnings[0]), HasSubstr(says));
    EXPECT_THAT(FormatLintReport("f", lint, false),
                HasSubstr("f:1:1: warning: the file"));
  }
  // A visible job, or an include gdt does not read, says nothing.
  for (const std::string text :
       {"job:\n  script: x\n", "include: other.yml\n.hidden:\n  script: x\n"}) {
    const CiExpansion lint = LintCiYaml(text);
    EXPECT_TRUE(lint.warnings.empty()) << lint.warnings[0].message;
  }
}

// Lint takes as many GPUs per member as the executor does (one bound in
// common/), in both forms; one more is one line.
TEST(LintTest, GpusPerNodeGoUpToTheExecutorsBound) {
  const std::string most = std::to_string(kMaxGpusPerNode);
  const std::string more = std::to_string(kMaxGpusPerNode + 1);
  const auto block = [](const std::string& gpus) {
    return LintCiYaml(
        "train:\n  script: x\n  parallel:\n    distributed:\n"
        "      nodes: 2\n      gpus_per_node: " +
        gpus + "\n");
  };
  const auto plain = [](const std::string& gpus) {
    return LintCiYaml(
        "train:\n  script: x\n  parallel: 2\n  tags: [gdt]\n"
        "  variables:\n    GDT_GPUS_PER_NODE: \"" +
        gpus + "\"\n");
  };
  for (const std::function<CiExpansion(const std::string&)>& lint :
       {std::function<CiExpansion(const std::string&)>(block),
        std::function<CiExpansion(const std::string&)>(plain)}) {
    const CiExpansion ok = lint(most);
    ASSERT_TRUE(ok.ok()) << ok.errors[0].message;
    ASSERT_EQ(ok.gangs.size(), 1u);
    EXPECT_EQ(ok.gangs[0].gpus_per_node, kMaxGpusPerNode);
    EXPECT_TRUE(lint("72").ok());  // Above the old lint-only bound of 64.
    const CiExpansion refused = lint(more);
    ASSERT_EQ(refused.errors.size(), 1u);
    EXPECT_THAT(refused.errors[0].message, HasSubstr(most));
    EXPECT_THAT(refused.errors[0].message, HasSubstr(more));
  }
}

// GitLab does not check the entries of a hidden key: a snippet whose
// `rules` is one rule (a mapping), referenced from a job's rules list, is
// fine, while the same mapping as a job's own rules is refused.
TEST(LintTest, HiddenKeysAreNotCheckedAsJobs) {
  const CiExpansion snippet = LintCiYaml(
      ".php-changes:\n  rules:\n    changes: ['**/*.php']\n"
      "test:\n  script: x\n  rules:\n    - !reference [.php-changes, rules]\n");
  EXPECT_TRUE(snippet.ok()) << snippet.errors[0].message;
  const CiExpansion job =
      LintCiYaml("test:\n  script: x\n  rules:\n    changes: [a]\n");
  ASSERT_EQ(job.errors.size(), 1u);
  EXPECT_THAT(job.errors[0].message,
              HasSubstr("jobs:test:rules config should be an array"));
}

TEST(LintTest, ListsGangsOfBothForms) {
  const CiExpansion lint = LintCiYaml(
      "block:\n  parallel:\n    distributed: {nodes: 4, gpus_per_node: 8}\n"
      "  script: x\n"
      "plain:\n  parallel: 2\n  variables:\n    GDT_LAUNCHER: env\n"
      "  script: y\n"
      "other:\n  parallel: 3\n  script: z\n");
  ASSERT_TRUE(lint.ok()) << lint.errors[0].message;
  ASSERT_EQ(lint.gangs.size(), 2u);
  EXPECT_EQ(lint.gangs[0].job, "block");
  EXPECT_TRUE(lint.gangs[0].from_block);
  EXPECT_EQ(lint.gangs[1].job, "plain");
  EXPECT_FALSE(lint.gangs[1].from_block);
  EXPECT_EQ(lint.gangs[1].nodes, 2);
  EXPECT_EQ(lint.gangs[1].launcher, "env");

  EXPECT_EQ(FormatLintReport("ci.yml", lint, false),
            "ci.yml:1: block: 4 nodes x 8 GPUs, 8 processes per node (world "
            "size 32), launcher torchrun [parallel:distributed]\n"
            "ci.yml:5: plain: 2 nodes x 0 GPUs, 1 process per node (world "
            "size 2), launcher env [parallel + GDT_* variables]\n"
            "ci.yml: ok (2 gang jobs)\n");
  const nlohmann::json json =
      nlohmann::json::parse(FormatLintReport("ci.yml", lint, true));
  EXPECT_EQ(json["ok"], true);
  EXPECT_EQ(json["gangs"][0]["form"], "distributed");
  EXPECT_EQ(json["gangs"][0]["variables"]["GDT_GPUS_PER_NODE"], "8");
  EXPECT_EQ(json["gangs"][1]["nodes"], 2);
}

TEST(LintTest, TopLevelGdtVariablesMakeGangsOnlyOfTheJobsGdtsRunnerTakes) {
  const CiExpansion lint = LintCiYaml(
      "variables:\n  GDT_GPUS_PER_NODE: \"2\"\n"
      "build:\n  script: [make]\n"
      "check:\n  tags: [cpu]\n  script: [make check]\n"
      "train:\n  tags: [gdt]\n  parallel: 2\n  script: [torchrun t.py]\n"
      "own:\n  variables: {GDT_NPROC_PER_NODE: \"2\"}\n  script: [x]\n");
  ASSERT_TRUE(lint.ok()) << lint.errors[0].message;
  std::vector<std::string> gangs;
  for (const GangSpec& gang : lint.gangs) gangs.push_back(gang.job);
  // A job's own GDT_* variable says it is meant as a gang.
  EXPECT_THAT(gangs, ElementsAre("train", "own"));
  EXPECT_EQ(lint.gangs[0].gpus_per_node, 2);
  ASSERT_EQ(lint.warnings.size(), 1u);
  EXPECT_EQ(FormatDiagnostic("f", lint.warnings[0]),
            "f:1:1: variables: top-level GDT_* variables reach every job, "
            "but 2 jobs without the gdt tag (build, check) go to other "
            "runners and are not gangs (unless a gdt runner also takes "
            "untagged jobs); set GDT_* in the gang jobs or a template they "
            "extend");
}

TEST(LintTest, JsonCarriesEveryErrorWithItsPlace) {
  const CiExpansion lint = LintCiYaml(
      "a:\n  parallel: 0\n  script: x\nb:\n  parallel: 201\n  script: y\n");
  const nlohmann::json json =
      nlohmann::json::parse(FormatLintReport("ci.yml", lint, true));
  EXPECT_EQ(json["ok"], false);
  ASSERT_EQ(json["errors"].size(), 2u);
  EXPECT_EQ(json["errors"][0]["line"], 2);
  EXPECT_EQ(json["errors"][0]["column"], 13);
  EXPECT_EQ(json["errors"][1]["line"], 5);
  EXPECT_EQ(FormatLintReport("ci.yml", lint, false),
            "ci.yml:2:13: a: parallel must be an integer from 1 to 200 "
            "(GitLab's limit), not '0'\n"
            "ci.yml:5:13: b: parallel must be an integer from 1 to 200 "
            "(GitLab's limit), not '201'\n");
}

// The dynamic child pipeline (docs/gitlab-runner-protocol.md): the trigger
// job includes exactly the artifact the generator job writes with gdt-ci
// expand.
TEST(ChildPipelineTemplateTest, TriggerIncludesTheGeneratedArtifact) {
  const std::string dir = std::string(GDT_EXAMPLES_DIR) + "/ci-templates";
  const std::string text = ReadTextFile(dir + "/gdt-child-pipeline.yml");
  const CiExpansion lint = LintCiYaml(text);
  ASSERT_TRUE(lint.ok()) << lint.errors[0].message;
  const YAML::Node root = YAML::Load(text);
  const YAML::Node expand = root["gdt-expand"];
  ASSERT_TRUE(expand.IsMap());
  std::string output;
  for (const YAML::Node& line : expand["script"]) {
    const std::string command = line.Scalar();
    if (command.rfind("gdt-ci expand ", 0) == 0) {
      output = command.substr(command.rfind(" -o ") + 4);
    }
  }
  ASSERT_FALSE(output.empty());
  EXPECT_EQ(expand["artifacts"]["paths"][0].Scalar(), output);
  const YAML::Node include = root["gdt-run"]["trigger"]["include"][0];
  EXPECT_EQ(include["artifact"].Scalar(), output);
  EXPECT_EQ(include["job"].Scalar(), "gdt-expand");
  EXPECT_EQ(root["gdt-run"]["needs"][0].Scalar(), "gdt-expand");

  const CiExpansion example =
      ExpandCiYaml(ReadTextFile(dir + "/example.gdt-ci.yml"));
  ASSERT_TRUE(example.ok()) << example.errors[0].message;
  ExpectValidGitLabStructure("example.gdt-ci.yml", example.text);
}

TEST(GangSpecTest, VariablesInTheDocumentedOrder) {
  GangSpec spec;
  spec.gpus_per_node = 8;
  spec.procs_per_node = 8;
  spec.priority = 3;
  spec.topology_same = "rack";
  spec.topology_mode = "required";
  EXPECT_THAT(
      spec.Variables(),
      ElementsAre(Pair("GDT_GPUS_PER_NODE", "8"),
                  Pair("GDT_NPROC_PER_NODE", "8"),
                  Pair("GDT_LAUNCHER", "torchrun"), Pair("GDT_PRIORITY", "3"),
                  Pair("GDT_TOPOLOGY_SAME", "rack"),
                  Pair("GDT_TOPOLOGY_MODE", "required")));
  spec.preemptible = true;
  spec.preempt_retries = 2;
  const auto variables = spec.Variables();
  ASSERT_GE(variables.size(), 2u);
  EXPECT_THAT(variables[variables.size() - 2], Pair("GDT_PREEMPTIBLE", "1"));
  EXPECT_THAT(variables.back(), Pair("GDT_PREEMPT_RETRIES", "2"));
}

// A CI/CD component: a `spec:` header document, `---`, then the jobs.
TEST(RealWorldTest, ExpandsAndLintsTheSecondDocument) {
  const std::string input =
      "spec:\n  inputs:\n    stage:\n      default: test\n---\n"
      "train:\n  script: x\n  parallel:\n    distributed: {nodes: 2}\n";
  const CiExpansion lint = LintCiYaml(input);
  ASSERT_TRUE(lint.ok()) << lint.errors[0].message;
  ASSERT_EQ(lint.gangs.size(), 1u);
  EXPECT_EQ(lint.gangs[0].job, "train");
  EXPECT_EQ(lint.gangs[0].line, 6);
  const CiExpansion expansion = ExpandCiYaml(input);
  ASSERT_TRUE(expansion.ok()) << expansion.errors[0].message;
  EXPECT_EQ(expansion.text.substr(0, 57), input.substr(0, 57));
  const std::vector<YAML::Node> documents = YAML::LoadAll(expansion.text);
  ASSERT_EQ(documents.size(), 2u);
  EXPECT_EQ(documents[1]["train"]["parallel"].Scalar(), "2");
  EXPECT_EQ(documents[1]["train"]["tags"][0].Scalar(), "gdt");
}

TEST(RealWorldTest, LintWarnsAtDocumentsGitLabIgnores) {
  // GitLab reads the first document, or the jobs after a spec: header
  // (with more documents, the first of the text after its second `---`).
  const auto warned = [](const std::string& text) {
    const CiExpansion lint = LintCiYaml(text);
    EXPECT_TRUE(lint.ok());
    std::vector<int> lines;
    for (const CiDiagnostic& d : lint.warnings) {
      EXPECT_THAT(d.message, HasSubstr("GitLab ignores this document"));
      lines.push_back(d.line);
    }
    return lines;
  };
  EXPECT_THAT(warned("a:\n  script: x\n---\nb:\n  script: y\n"),
              ElementsAre(4));
  EXPECT_THAT(warned("spec:\n  inputs: {}\n---\nb:\n  script: y\n"),
              ElementsAre());
  EXPECT_THAT(warned("---\nspec:\n  inputs: {}\n---\nb:\n  script: y\n"
                     "---\nc:\n  script: z\n"),
              ElementsAre(8));
  EXPECT_THAT(warned("spec:\n  inputs: {}\n---\nb:\n  script: y\n"
                     "---\nc:\n  script: z\n---\nd:\n  script: z\n"),
              ElementsAre(4, 10));
  EXPECT_THAT(warned("a:\n  script: x\n"), ElementsAre());
}

// libyaml counts characters; the tree's offsets are bytes, so text with
// multibyte characters (a comment, a value) before a node leaves its place
// right: a spec: header in another language is still a header, and a node
// with a tag or anchor starts after them.
TEST(RealWorldTest, MarksAfterMultibyteTextAreByteOffsets) {
  const std::string text =
      "# d\xC3\xA9j\xC3\xA0 vu \xE2\x82\xAC \xF0\x9F\x98\x80\n"
      "a: &x \"\xE6\x97\xA5\xE6\x9C\xAC\"\n"
      "b: !reference [a]\n";
  YamlError error;
  const std::unique_ptr<YamlTree> tree = YamlTree::Parse(text, &error);
  ASSERT_TRUE(error.message.empty()) << error.message;
  const YamlNode root = tree->documents().at(0);
  const YamlNode a = root.Entry(0).second;
  EXPECT_EQ(a.PropertiesMark().pos, text.find("&x"));
  EXPECT_EQ(a.Mark().pos, text.find("\"\xE6"));
  EXPECT_EQ(a.Mark().column, 6);  // Characters.
  EXPECT_EQ(a.EndMark().pos, text.find("\nb:"));
  const YamlNode b = root.Entry(1).second;
  EXPECT_EQ(b.Mark().pos, text.find("[a]"));
  EXPECT_EQ(b.Mark().line, 2);
  EXPECT_EQ(b.Mark().column, 14);

  const std::string spec =
      "spec:\n  description: \"\xE5\xAD\xA6\xE7\xBF\x92\xE3\x81\xAE\xE8\xA8"
      "\xAD\xE5\xAE\x9A "
      "\xE5\xAD\xA6\xE7\xBF\x92\xE3\x81\xAE\xE8\xA8\xAD\xE5\xAE"
      "\x9A\"\n  inputs: {}\n---\nb:\n  script: y\n";
  const CiExpansion lint = LintCiYaml(spec);
  EXPECT_TRUE(lint.ok());
  EXPECT_TRUE(lint.warnings.empty()) << lint.warnings[0].message;
}

// A block scalar that keeps its trailing blank lines (`|+`) after a key
// with multibyte characters is still recognised: gdt's variables added
// after it do not take its blank lines.
TEST(RealWorldTest, AKeptBlockScalarAfterAMultibyteKeyKeepsItsLines) {
  const std::string input =
      "train:\n  script: [x]\n  parallel: {distributed: {nodes: 2}}\n"
      "  variables:\n    \xC3\x9C\xC3\x9C\xC3\x9C\xC3\x9C: |+\n      kept\n\n\n"
      "next:\n  script: [y]\n";
  const CiExpansion expansion = ExpandCiYaml(input);
  ASSERT_TRUE(expansion.ok()) << expansion.errors[0].message;
  const YAML::Node variables = YAML::Load(expansion.text)["train"]["variables"];
  EXPECT_EQ(variables["\xC3\x9C\xC3\x9C\xC3\x9C\xC3\x9C"].as<std::string>(),
            "kept\n\n\n")
      << expansion.text;
  EXPECT_EQ(variables["GDT_LAUNCHER"].as<std::string>(), "torchrun");
}

TEST(RealWorldTest, AnAliasCannotNameAnAnchorOfAnEarlierDocument) {
  // GitLab reads the spec: header and the jobs as separate documents, so
  // it refuses the file ("unknown alias"); so do both commands.
  const std::string input =
      "spec:\n  inputs: {}\n.gang: &gang\n  parallel:\n"
      "    distributed: {nodes: 2}\n---\ntrain:\n  <<: *gang\n  script: x\n";
  for (const CiExpansion& result : {LintCiYaml(input), ExpandCiYaml(input)}) {
    ASSERT_EQ(result.errors.size(), 1u);
    EXPECT_EQ(FormatDiagnostic("f", result.errors[0]),
              "f:8:7: YAML syntax error: unknown alias *gang (its anchor is "
              "in an earlier document; each YAML document has its own "
              "anchors)");
  }
  // An anchor and its alias in the same later document are fine.
  EXPECT_TRUE(LintCiYaml(".a: 1\n---\n.t: &t\n  image: x\nb:\n  <<: *t\n"
                         "  script: y\n")
                  .ok());
}

// An explicit document end (`...`) and a directive for the next document
// (`%YAML 1.2`) belong to no job: a rewritten last job keeps them after it.
TEST(RealWorldTest, DocumentEndMarkersAndDirectivesStay) {
  const std::string header =
      "spec:\n  inputs:\n    stage:\n      default: test\n"
      "...\n%YAML 1.2\n---\n";
  const std::string tail = "...\n%YAML 1.2\n---\nother:\n  script: [y]\n";
  const std::string input = header +
                            "train:\n  script: [x]\n  parallel:\n"
                            "    distributed:\n      nodes: 2\n" +
                            tail;
  const CiExpansion expansion = ExpandCiYaml(input);
  ASSERT_TRUE(expansion.ok()) << expansion.errors[0].message;
  EXPECT_EQ(expansion.text.substr(0, header.size()), header);
  EXPECT_EQ(expansion.text.substr(expansion.text.size() - tail.size()), tail);
  const std::vector<YAML::Node> documents = YAML::LoadAll(expansion.text);
  ASSERT_EQ(documents.size(), 3u);
  EXPECT_EQ(documents[1]["train"]["parallel"].Scalar(), "2");
  EXPECT_EQ(documents[1]["train"]["tags"][0].Scalar(), "gdt");
  // A directive without the end marker (libyaml, and so GitLab, reads it
  // too), and a quoted scalar whose next line starts with `%`.
  const std::string quoted =
      "train:\n  script: [x]\n  parallel:\n    distributed:\n"
      "      nodes: 2\n  after: \"a\n%b\"\n%YAML 1.2\n---\nother: {}\n";
  const CiExpansion second = ExpandCiYaml(quoted);
  ASSERT_TRUE(second.ok()) << second.errors[0].message;
  EXPECT_THAT(second.text,
              EndsWith("  after: \"a\n%b\"\n%YAML 1.2\n---\nother: {}\n"));
  EXPECT_TRUE(ExpandCiYaml(second.text).ok());
}

TEST(RealWorldTest, AnAnchoredJobExpandsAndItsAliasFollows) {
  const std::string input =
      "train: &train\n  script: x\n  parallel:\n    distributed: {nodes: 2}"
      "\nagain: *train\n";
  const CiExpansion expansion = ExpandCiYaml(input);
  ASSERT_TRUE(expansion.ok()) << expansion.errors[0].message;
  const YAML::Node root = YAML::Load(expansion.text);
  EXPECT_EQ(root["train"]["parallel"].Scalar(), "2");
  EXPECT_EQ(root["again"]["parallel"].Scalar(), "2");
  EXPECT_THAT(expansion.text, HasSubstr("train: &train\n  script: x\n"));
}

TEST(RealWorldTest, ParallelNullDropsAnInheritedParallel) {
  for (const char* value : {"null", "~", ""}) {
    const CiExpansion lint = LintCiYaml(absl::StrCat(
        ".t:\n  parallel: 4\nj:\n  extends: .t\n  parallel: ", value,
        "\n  script: x\n"));
    EXPECT_TRUE(lint.ok()) << value << ": " << lint.errors[0].message;
  }
}

TEST(RealWorldTest, HiddenJobsAreLintedButAreNoGangs) {
  const CiExpansion lint = LintCiYaml(
      ".gang:\n  variables:\n    GDT_LAUNCHER: mpi\n  parallel: 2\n");
  ASSERT_EQ(lint.errors.size(), 1u);
  EXPECT_EQ(FormatDiagnostic("f", lint.errors[0]),
            "f:3:19: .gang: GDT_LAUNCHER must be one of torchrun, env, nccl, "
            "none, not 'mpi'");
  const CiExpansion fine = LintCiYaml(
      ".gang:\n  variables:\n    GDT_LAUNCHER: env\n  parallel: 2\n");
  ASSERT_TRUE(fine.ok());
  EXPECT_TRUE(fine.gangs.empty());
}

TEST(RealWorldTest, ABlockUnderDefaultIsRefused) {
  const std::string input =
      "default:\n  parallel:\n    distributed: {nodes: 2}\nj:\n  script: x\n";
  for (const CiExpansion& result : {LintCiYaml(input), ExpandCiYaml(input)}) {
    ASSERT_EQ(result.errors.size(), 1u);
    EXPECT_EQ(FormatDiagnostic("f", result.errors[0]),
              "f:2:3: default: GitLab does not accept parallel under default; "
              "put parallel:distributed in each gang job, or in a hidden job "
              "that they extend");
    EXPECT_TRUE(result.text.empty());
  }
}

TEST(RealWorldTest, DuplicateKeysStopExpandOnlyInARewrittenJob) {
  const std::string elsewhere =
      "other:\n  script: x\n  script: y\n"
      "train:\n  script: x\n  parallel:\n    distributed: {nodes: 2}\n";
  EXPECT_TRUE(ExpandCiYaml(elsewhere).ok());
  EXPECT_EQ(LintCiYaml(elsewhere).errors.size(), 1u);
  const CiExpansion inside = ExpandCiYaml(
      "train:\n  script: x\n  tags: [a]\n  tags: [b]\n  parallel:\n"
      "    distributed: {nodes: 2}\n");
  ASSERT_EQ(inside.errors.size(), 1u);
  EXPECT_EQ(FormatDiagnostic("f", inside.errors[0]),
            "f:4:3: duplicate key 'tags' (first at line 3); YAML keeps only "
            "one of them");
  const CiExpansion twice = ExpandCiYaml(
      "train:\n  script: x\ntrain:\n  script: x\n  parallel:\n"
      "    distributed: {nodes: 2}\n");
  ASSERT_EQ(twice.errors.size(), 1u);
  EXPECT_EQ(FormatDiagnostic("f", twice.errors[0]),
            "f:3:1: duplicate job 'train'; GitLab keeps only the last one, so "
            "gdt will not rewrite either");
}

TEST(RealWorldTest, RunnerTagsStayStrings) {
  EXPECT_TRUE(CheckRunnerTag("gpu-a100_x8.v2").ok());
  EXPECT_TRUE(CheckRunnerTag("").ok());
  EXPECT_EQ(CheckRunnerTag("a: b").message(),
            "--tag 'a: b': a runner tag may hold only letters, digits and - _ "
            ". : / + = @");
  EXPECT_FALSE(CheckRunnerTag("x]").ok());
  for (const char* tag : {"yes", "123", "null", "1.5", "-x"}) {
    for (const char* tags : {"", "  tags: [a]\n", "  tags:\n    - a\n"}) {
      const CiExpansion expansion = ExpandCiYaml(
          absl::StrCat("j:\n  script: x\n", tags,
                       "  parallel:\n    distributed: {nodes: 2}\n"),
          {.runner_tag = tag});
      ASSERT_TRUE(expansion.ok()) << tag << ": " << expansion.errors[0].message;
      const YAML::Node written = YAML::Load(expansion.text)["j"]["tags"];
      const YAML::Node last = written[written.size() - 1];
      EXPECT_EQ(last.Scalar(), tag) << expansion.text;
      EXPECT_EQ(last.Tag(), "!")
          << tag << " must be quoted: " << expansion.text;
    }
  }
}

// The job's configuration as GitLab computes it, before and after expand,
// must differ by exactly gdt's additions.
void ExpectOnlyGdtAdditions(const std::string& input, const std::string& job,
                            const std::vector<std::string>& tags,
                            bool checkpoints = false) {
  SCOPED_TRACE(input);
  const CiExpansion expansion = ExpandCiYaml(input);
  ASSERT_TRUE(expansion.ok()) << expansion.errors[0].message;
  const auto before = EffectiveJobConfig(input, job);
  const auto after = EffectiveJobConfig(expansion.text, job);
  ASSERT_TRUE(before.ok() && after.ok());
  CiValue expected = before->config;
  expected["parallel"] = expansion.gangs[0].nodes;
  for (const auto& [name, value] : expansion.gangs[0].Variables()) {
    expected["variables"][name] = value;
  }
  expected["tags"] = tags;
  if (!expected.contains("retry")) {
    expected["retry"] = {{"max", 2},
                         {"when", {"runner_system_failure", "script_failure"}}};
  }
  if (checkpoints) {
    CiValue& paths = expected["artifacts"]["paths"];
    if (paths.is_null()) paths = CiValue::array();
    paths.push_back("checkpoints/");
    if (!expected["artifacts"].contains("when")) {
      expected["artifacts"]["when"] = "always";
    }
  }
  // Key order means nothing to GitLab.
  EXPECT_EQ(nlohmann::json::parse(after->config.dump()),
            nlohmann::json::parse(expected.dump()))
      << expansion.text;
}

// Integers as GitLab's YAML reader (YAML 1.1) reads them: a plain-form
// gang's variables are what GitLab sends the job, so lint reports those.
TEST(InheritanceTest, IntegersAreReadAsGitLabsYamlReaderReadsThem) {
  EXPECT_EQ(Yaml11Integer("42"), 42);
  EXPECT_EQ(Yaml11Integer("-7"), -7);
  EXPECT_EQ(Yaml11Integer("010"), 8);
  EXPECT_EQ(Yaml11Integer("0x1f"), 31);
  EXPECT_EQ(Yaml11Integer("0b101"), 5);
  EXPECT_EQ(Yaml11Integer("1_000"), 1000);
  EXPECT_EQ(Yaml11Integer("0"), 0);
  for (const char* text : {"09", "1_", "_1", "0x", "1.5", "1e3", "abc", "",
                           "99999999999999999999"}) {
    EXPECT_EQ(Yaml11Integer(text), std::nullopt) << text;
  }
  const CiExpansion ok = LintCiYaml(
      "train:\n  tags: [gdt]\n  parallel: 2\n  variables:\n"
      "    GDT_PRIORITY: 010\n    GDT_GPUS_PER_NODE: 0x2\n  script: [x]\n");
  ASSERT_TRUE(ok.ok()) << ok.errors[0].message;
  ASSERT_EQ(ok.gangs.size(), 1u);
  EXPECT_EQ(ok.gangs[0].priority, 8);
  EXPECT_EQ(ok.gangs[0].gpus_per_node, 2);
}

TEST(InheritanceTest, TagsFromAMergeKeyAreKept) {
  ExpectOnlyGdtAdditions(
      ".tpl: &tpl\n  tags: [gpu]\n  variables: {A: b}\n"
      "train:\n  <<: *tpl\n  script: x\n  parallel:\n"
      "    distributed: {nodes: 2}\n",
      "train", {"gpu", "gdt"});
  ExpectOnlyGdtAdditions(
      ".a: &a\n  tags: [a]\n.b: &b\n  tags: [b]\n  retry: 1\n"
      "train:\n  <<: [*a, *b]\n  script: x\n  parallel:\n"
      "    distributed: {nodes: 2}\n",
      "train", {"a", "gdt"});
}

TEST(InheritanceTest, ExtendsChainsAndDefaultAreKept) {
  ExpectOnlyGdtAdditions(
      ".base:\n  tags: [base]\n  variables: {A: '1'}\n"
      "  artifacts:\n    paths: [logs/]\n    expire_in: 1 week\n"
      ".mid:\n  extends: .base\n  retry: 1\n"
      "train:\n  extends: [.other, .mid]\n  script: x\n  parallel:\n"
      "    distributed: {nodes: 2, checkpoint: {}}\n"
      ".other:\n  tags: [lost]\n",
      "train", {"base", "gdt"}, /*checkpoints=*/true);
  ExpectOnlyGdtAdditions(
      "default:\n  tags: [shared]\n  retry: 1\n"
      "train:\n  script: x\n  parallel:\n    distributed: {nodes: 2}\n",
      "train", {"shared", "gdt"});
  // inherit: default: false keeps default's tags away, as before.
  ExpectOnlyGdtAdditions(
      "default:\n  tags: [shared]\n"
      "train:\n  inherit:\n    default: false\n  script: x\n  parallel:\n"
      "    distributed: {nodes: 2}\n",
      "train", {"gdt"});
}

// Tags a job inherits that already hold the runner tag (a template's, or
// default:'s) stay inherited: the job gets no tags entry of its own, and
// expand does not refuse the job as one it could not rewrite.
TEST(InheritanceTest, InheritedTagsWithTheRunnerTagStayInherited) {
  ExpectOnlyGdtAdditions(
      ".gpu:\n  tags: [gdt, a100]\n  retry: 0\n"
      "train:\n  extends: .gpu\n  script: x\n  parallel:\n"
      "    distributed: {nodes: 2}\n",
      "train", {"gdt", "a100"});
  ExpectOnlyGdtAdditions(
      "default:\n  tags: [gdt]\n"
      "train:\n  script: x\n  parallel:\n    distributed: {nodes: 2}\n",
      "train", {"gdt"});
  const CiExpansion expansion = ExpandCiYaml(
      "default:\n  tags: [gdt]\n"
      "train:\n  script: x\n  parallel:\n    distributed: {nodes: 2}\n");
  ASSERT_TRUE(expansion.ok()) << expansion.errors.at(0).message;
  EXPECT_EQ(expansion.text.find("  tags:", expansion.text.find("train:")),
            std::string::npos)
      << expansion.text;
}

TEST(InheritanceTest, ReferencesResolve) {
  ExpectOnlyGdtAdditions(
      ".t:\n  tags: [r]\n"
      "train:\n  tags: !reference [.t, tags]\n  script: x\n  parallel:\n"
      "    distributed: {nodes: 2}\n",
      "train", {"r", "gdt"});
}

TEST(InheritanceTest, AParentsVariablesReferenceIsRepeatedInTheNewEntry) {
  // GitLab merges extends before it resolves !reference, so the parent's
  // `variables: !reference [...]` is replaced whole by the job's own
  // variables: the new entry repeats what it names (gitlab-ci-local's
  // reference test has this shape).
  const std::string input =
      ".defaults:\n  variables:\n    FOO: foo\n"
      ".wrapper:\n  variables: !reference [.defaults, variables]\n"
      "train:\n  extends: .wrapper\n  parallel:\n"
      "    distributed: {nodes: 2}\n  script: x\n";
  const auto before = EffectiveJobConfig(input, "train");
  ASSERT_TRUE(before.ok());
  EXPECT_EQ(before->config["variables"], CiValue({{"FOO", "foo"}}));
  const CiExpansion result = ExpandCiYaml(input);
  ASSERT_TRUE(result.ok()) << result.errors[0].message;
  const auto after = EffectiveJobConfig(result.text, "train");
  ASSERT_TRUE(after.ok());
  const CiValue& variables = after->config["variables"];
  EXPECT_EQ(variables.value("FOO", std::string()), "foo");
  EXPECT_EQ(variables.value("GDT_LAUNCHER", std::string()), "torchrun");
  // A job's own variables replace such a parent's, before gdt too.
  const auto own = EffectiveJobConfig(
      ".defaults:\n  variables:\n    FOO: foo\n"
      ".wrapper:\n  variables: !reference [.defaults, variables]\n"
      "plain:\n  extends: .wrapper\n  variables: {BAR: bar}\n  script: x\n",
      "plain");
  ASSERT_TRUE(own.ok());
  EXPECT_EQ(own->config["variables"], CiValue({{"BAR", "bar"}}));
}

TEST(InheritanceTest, WhatCannotBeSeenIsRefusedWithOneLine) {
  const CiExpansion include = ExpandCiYaml(
      "include: [{local: a.yml}]\n"
      "train:\n  script: x\n  parallel:\n    distributed: {nodes: 2}\n");
  ASSERT_EQ(include.errors.size(), 1u);
  EXPECT_EQ(FormatDiagnostic("f", include.errors[0]),
            "f:3:3: train: the file includes other files, whose default: gdt "
            "cannot read, so gdt cannot see whether it inherits tags, retry; "
            "give the job its own tags, retry (gdt adds to them), or "
            "`inherit: {default: false}`");
  const CiExpansion parent = ExpandCiYaml(
      "include: [{local: a.yml}]\ntrain:\n  extends: .remote\n  tags: [a]\n  "
      "script: x\n  parallel:\n"
      "    distributed: {nodes: 2}\n");
  ASSERT_EQ(parent.errors.size(), 1u);
  EXPECT_THAT(parent.errors[0].message,
              HasSubstr("it extends '.remote', which is not in this file, so "
                        "gdt cannot see whether it inherits retry"));
  EXPECT_TRUE(ExpandCiYaml("include: [{local: a.yml}]\n"
                           "train:\n  tags: [a]\n  retry: 0\n  script: x\n"
                           "  parallel:\n    distributed: {nodes: 2}\n")
                  .ok());
  // GitLab gives a job default:'s keys only where it has none after
  // extends: tags and retry from a template in this file are known, and
  // kept (the template's tags plus the runner tag).
  const CiExpansion inherited = ExpandCiYaml(
      "include: [{local: a.yml}]\n"
      ".tmpl:\n  tags: [shell]\n  retry: 1\n"
      "train:\n  extends: .tmpl\n  script: x\n"
      "  parallel:\n    distributed: {nodes: 2}\n");
  ASSERT_TRUE(inherited.ok()) << inherited.errors[0].message;
  EXPECT_THAT(inherited.text,
              HasSubstr("  tags:\n    - \"shell\"\n    - gdt\n"));
  EXPECT_THAT(inherited.text, Not(HasSubstr("retry:\n    max")));
  // A key the template leaves out is still unseen.
  const CiExpansion partly = ExpandCiYaml(
      "include: [{local: a.yml}]\n"
      ".tmpl:\n  tags: [shell]\n"
      "train:\n  extends: .tmpl\n  script: x\n"
      "  parallel:\n    distributed: {nodes: 2}\n");
  ASSERT_EQ(partly.errors.size(), 1u);
  EXPECT_THAT(partly.errors[0].message,
              HasSubstr("gdt cannot see whether it inherits retry; give the "
                        "job its own retry"));
  const CiExpansion deep = ExpandCiYaml(
      ".a:\n  extends: .b\n.b:\n  extends: .a\n"
      "train:\n  extends: .a\n  script: x\n  parallel:\n"
      "    distributed: {nodes: 2}\n");
  ASSERT_EQ(deep.errors.size(), 1u);
  EXPECT_THAT(
      deep.errors[0].message,
      HasSubstr("its extends chain loops or nests more than 11 levels deep"));
}

// Expand writes a gang's settings where its block is: into the template
// when jobs inherit the block. What else such a job inherits can undo them
// in GitLab's merge; both commands then refuse the job, naming what it
// would lose, instead of a pipeline whose gang runs without the runner tag
// or with settings other than its block says.
TEST(InheritanceTest, AGangThatWouldNotGetWhatItsBlockSaysIsRefused) {
  const std::string gang =
      ".gang:\n  parallel:\n    distributed:\n      nodes: 2\n"
      "      checkpoint: {}\n      preemptible: true\n";
  const std::string gpu =
      ".gpu:\n  tags: [a100]\n  retry: 1\n  artifacts:\n"
      "    paths: [logs/]\n";
  struct Case {
    std::string text;
    std::string says;
  };
  const std::vector<Case> cases = {
      // A later parent's tags replace the template's.
      {gang + gpu + "t:\n  extends: [.gang, .gpu]\n  script: x\n",
       "t: once expanded, GitLab would give this job what it inherits merged "
       "so that it has tags [a100], not [a100, gdt]"},
      // The template's tags replace the other parent's.
      {gpu + gang + "t:\n  extends: [.gpu, .gang]\n  script: x\n",
       "has tags [gdt], not [a100, gdt]"},
      // default: baked into the template for a job that opts out of it.
      {"default:\n  tags: [a100]\n  retry: 1\n" + gang +
           "t:\n  extends: .gang\n  inherit: {default: false}\n"
           "  script: x\n",
       "has tags [a100, gdt], not [gdt]"},
      // Two templates with blocks: the second's variables win.
      {".a:\n  parallel:\n    distributed: {nodes: 2, gpus_per_node: 8}\n"
       ".b:\n  parallel:\n    distributed: {nodes: 4}\n"
       "t:\n  extends: [.a, .b]\n  script: x\n",
       "has GDT_GPUS_PER_NODE 0, not 8"},
  };
  for (const Case& c : cases) {
    for (const bool lint : {false, true}) {
      const CiExpansion r = lint ? LintCiYaml(c.text) : ExpandCiYaml(c.text);
      ASSERT_EQ(r.errors.size(), 1u) << (lint ? "lint " : "expand ") << c.text;
      EXPECT_THAT(r.errors[0].message, HasSubstr(c.says)) << c.text;
      EXPECT_THAT(r.errors[0].message,
                  HasSubstr("give the job the block itself"));
      EXPECT_TRUE(r.text.empty());
    }
  }
  // A job that only extends the template, or that sets its own tags with
  // the runner tag, is fine.
  for (const std::string& text :
       {gang + "t:\n  extends: .gang\n  script: x\n",
        gang + gpu +
            "t:\n  extends: [.gang, .gpu]\n  tags: [a100, gdt]\n"
            "  retry: {max: 2, when: [script_failure]}\n"
            "  artifacts: {paths: [logs/, checkpoints/], when: always}\n"
            "  script: x\n"}) {
    const CiExpansion r = ExpandCiYaml(text);
    EXPECT_TRUE(r.ok()) << text << "\n" << r.errors[0].message;
    EXPECT_TRUE(LintCiYaml(text).ok()) << text;
  }
}

// GitLab refuses the whole file when any entry's extends chain is longer
// than it merges or loops, also where no gang is involved: lint and expand
// said "ok" of such a file, and listed a gang below a too-long chain with
// the block it could not inherit.
TEST(InheritanceTest, ATooLongOrLoopingExtendsChainAnywhereIsRefused) {
  const auto chain = [](int levels, const std::string& first) {
    std::string text = ".t0:\n" + first;
    for (int i = 1; i < levels; ++i) {
      absl::StrAppend(&text, ".t", i, ":\n  extends: .t", i - 1, "\n");
    }
    return text;
  };
  // job -> .t11 -> ... -> .t0 is twelve levels: one too many.
  const std::string gang_block =
      "  script: x\n  parallel:\n    distributed: {nodes: 2}\n";
  const std::string too_long =
      chain(12, gang_block) + "job:\n  extends: .t11\n  tags: [gdt]\n";
  const std::string plain_too_long =
      chain(13, "  script: x\n") + "job:\n  script: y\n";
  const std::string loop =
      ".a:\n  extends: .b\n  script: x\n.b:\n  extends: .a\n"
      "job:\n  script: y\n";
  for (const bool lint : {false, true}) {
    for (const std::string& text : {too_long, plain_too_long, loop}) {
      const CiExpansion r = lint ? LintCiYaml(text) : ExpandCiYaml(text);
      ASSERT_EQ(r.errors.size(), 1u) << text;
      EXPECT_THAT(r.errors[0].message,
                  HasSubstr("its extends chain loops or nests more than 11 "
                            "levels deep; GitLab refuses the file"));
      EXPECT_TRUE(r.gangs.empty());
    }
  }
  // Eleven levels below the job are merged.
  const CiExpansion eleven = LintCiYaml(
      chain(11, gang_block) + "job:\n  extends: .t10\n  tags: [gdt]\n");
  ASSERT_TRUE(eleven.ok()) << eleven.errors[0].message;
  ASSERT_EQ(eleven.gangs.size(), 1u);
  EXPECT_EQ(eleven.gangs[0].nodes, 2);
}

// A script whose !reference values nest a list into itself millions of
// times (each level names the one below ten times) is checked in moments:
// lint walked every path of it, for minutes.
TEST(InheritanceTest, LintChecksANestedScriptReferenceBombQuickly) {
  std::string text = ".r0:\n  s: [a, b, c, d, e, f, g, h, i, j]\n";
  for (int level = 1; level < 9; ++level) {
    text += absl::StrCat(".r", level, ":\n  s:\n");
    for (int i = 0; i < 10; ++i) {
      text += absl::StrCat("    - !reference [.r", level - 1, ", s]\n");
    }
  }
  text += "job:\n  script: !reference [.r8, s]\n";
  const auto start = std::chrono::steady_clock::now();
  const CiExpansion r = LintCiYaml(text);
  // Generous for sanitizer builds on loaded cores; it did not end.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  EXPECT_TRUE(r.ok()) << r.errors[0].message;
}

TEST(InheritanceTest, AnExtendsChainThousandsLongIsOneLine) {
  // Each template extends the one before: the chain is refused without
  // being walked to its end by recursion (which overflowed the stack).
  std::string text = ".t0:\n  tags: [a]\n";
  for (int i = 1; i < 3000; ++i) {
    absl::StrAppend(&text, ".t", i, ":\n  extends: .t", i - 1, "\n");
  }
  const std::string gang =
      "  script: x\n  parallel:\n    distributed: {nodes: 2}\n";
  for (const bool lint : {false, true}) {
    const CiExpansion deep =
        lint ? LintCiYaml(text + "train:\n  extends: .t2999\n" + gang)
             : ExpandCiYaml(text + "train:\n  extends: .t2999\n" + gang);
    ASSERT_EQ(deep.errors.size(), 1u);
    EXPECT_THAT(
        deep.errors[0].message,
        HasSubstr("its extends chain loops or nests more than 11 levels deep"));
  }
  // A job eleven levels down is merged (in a file without the longer
  // chain, which GitLab refuses even unused).
  std::string short_chain = ".t0:\n  tags: [a]\n";
  for (int i = 1; i <= 10; ++i) {
    absl::StrAppend(&short_chain, ".t", i, ":\n  extends: .t", i - 1, "\n");
  }
  const CiExpansion near =
      ExpandCiYaml(short_chain + "train:\n  extends: .t10\n" + gang);
  ASSERT_TRUE(near.ok()) << near.errors[0].message;
  const auto effective = EffectiveJobConfig(near.text, "train");
  ASSERT_TRUE(effective.ok()) << effective.status();
  EXPECT_EQ(effective->config["tags"], CiValue::array({"a", "gdt"}));
}

TEST(InheritanceTest, AMergeChainDeeperThanGdtReadsIsRefused) {
  // Each template merges the one before; the first one's tags lie 100
  // levels down from the job, where gdt stops reading: refused, not lost.
  std::string text = ".m0: &m0\n  tags: [cpu]\n";
  for (int i = 1; i < 99; ++i) {
    absl::StrAppend(&text, ".m", i, ": &m", i, "\n  <<: *m", i - 1, "\n");
  }
  const std::string gang =
      "  script: x\n  parallel:\n    distributed: {nodes: 2}\n";
  for (const bool lint : {false, true}) {
    const std::string input = text + "train:\n  <<: *m98\n" + gang;
    const CiExpansion deep = lint ? LintCiYaml(input) : ExpandCiYaml(input);
    ASSERT_EQ(deep.errors.size(), 1u);
    EXPECT_THAT(deep.errors[0].message,
                HasSubstr("train: its merge keys (<<:) nest more than 90 "
                          "levels deep"));
  }
  const CiExpansion near = ExpandCiYaml(text + "train:\n  <<: *m88\n" + gang);
  ASSERT_TRUE(near.ok()) << near.errors[0].message;
  const auto effective = EffectiveJobConfig(near.text, "train");
  ASSERT_TRUE(effective.ok()) << effective.status();
  EXPECT_EQ(effective->config["tags"], CiValue::array({"cpu", "gdt"}));
}

TEST(InheritanceTest, ALatticeOfTemplatesIsMergedOncePerTemplate) {
  // Eleven levels of six templates, each extending every template of the
  // level below: 6^11 paths, which took minutes when each was walked.
  std::string text;
  for (int level = 0; level < 11; ++level) {
    for (int t = 0; t < 6; ++t) {
      text += absl::StrCat(".l", level, "t", t, ":\n");
      if (level == 0) {
        text += absl::StrCat("  variables: {V", t, ": \"x\"}\n");
        continue;
      }
      text += "  extends: [";
      for (int below = 0; below < 6; ++below) {
        text +=
            absl::StrCat(below == 0 ? "" : ", ", ".l", level - 1, "t", below);
      }
      text += "]\n";
    }
  }
  text +=
      "train:\n  extends: .l10t0\n  script: x\n  parallel:\n"
      "    distributed: {nodes: 2}\n";
  const auto start = gdt::testing::ThreadCpuTime();
  const CiExpansion lint = LintCiYaml(text);
  EXPECT_TRUE(lint.ok()) << (lint.errors.empty() ? "" : lint.errors[0].message);
  ASSERT_EQ(lint.gangs.size(), 1u);
  EXPECT_TRUE(ExpandCiYaml(text).ok());
  EXPECT_LT(gdt::testing::ThreadCpuTime() - start, std::chrono::seconds(5));
}

TEST(InheritanceTest, LargeFilesCostTheirSize) {
  // Each took minutes when every job copied what it inherits, or when a
  // mapping was built key by key with a scan for each key.
  std::string inherits = "default:\n  before_script:\n";
  for (int i = 0; i < 3000; ++i) {
    inherits += absl::StrCat("    - echo ", i, "\n");
  }
  inherits += ".t:\n  script:\n";
  for (int i = 0; i < 3000; ++i) {
    inherits += absl::StrCat("    - echo ", i, "\n");
  }
  for (int i = 0; i < 3000; ++i) {
    inherits += absl::StrCat("j", i, ":\n  extends: .t\n");
  }
  std::string variables =
      "train:\n  script: x\n  parallel:\n    distributed: {nodes: 2}\n"
      "  variables:\n";
  for (int i = 0; i < 30000; ++i) {
    variables += absl::StrCat("    V", i, ": \"", i, "\"\n");
  }
  // Jobs extending a template of many variables (every job once copied
  // them all).
  std::string template_variables = ".v:\n  script: x\n  variables:\n";
  for (int i = 0; i < 3000; ++i) {
    template_variables += absl::StrCat("    V", i, ": \"", i, "\"\n");
  }
  for (int i = 0; i < 3000; ++i) {
    template_variables += absl::StrCat("k", i, ":\n  extends: .v\n");
  }
  template_variables +=
      "train:\n  script: x\n  parallel:\n    distributed: {nodes: 2}\n";
  for (const std::string* text : {&inherits, &variables, &template_variables}) {
    const auto start = std::chrono::steady_clock::now();
    const CiExpansion lint = LintCiYaml(*text);
    EXPECT_TRUE(lint.ok()) << (lint.errors.empty() ? ""
                                                   : lint.errors[0].message);
    EXPECT_TRUE(ExpandCiYaml(*text).ok());
    EXPECT_LT(std::chrono::steady_clock::now() - start,
              std::chrono::seconds(20));
  }
}

TEST(InheritanceTest, BlockArtifactsKeepTheirStyleAndComments) {
  const std::string input =
      "train:\n  script: x\n  parallel:\n"
      "    distributed: {nodes: 2, checkpoint: {}}\n"
      "  artifacts:\n    # what we keep\n    paths:\n      - logs/  # logs\n"
      "    expire_in: 1 week\n";
  const CiExpansion expansion = ExpandCiYaml(input);
  ASSERT_TRUE(expansion.ok()) << expansion.errors[0].message;
  EXPECT_THAT(expansion.text,
              HasSubstr("  artifacts:\n    # what we keep\n    paths:\n"
                        "      - logs/  # logs\n      - checkpoints/\n"
                        "    expire_in: 1 week\n    when: always\n"));
  ExpectOnlyGdtAdditions(input, "train", {"gdt"}, /*checkpoints=*/true);
}

TEST(MessagesTest, EncodingControlCharactersAndComplexKeysAreNamed) {
  const CiExpansion nul =
      LintCiYaml(std::string("a:\n  script: \"x\0y\"\n", 19));
  ASSERT_EQ(nul.errors.size(), 1u);
  EXPECT_EQ(FormatDiagnostic("f", nul.errors[0]),
            "f:2:13: NUL byte (0x00) in the file; YAML allows none (write it "
            "as an escape in a double-quoted string)");
  // Latin-1 text: the byte, its place and the fix, in one line.
  const CiExpansion latin1 = LintCiYaml("a:\n  script: [\"caf\xe9\"]\n");
  ASSERT_EQ(latin1.errors.size(), 1u);
  EXPECT_EQ(FormatDiagnostic("f", latin1.errors[0]),
            "f:2:16: byte 0xe9 is not UTF-8; GitLab reads CI files as UTF-8 "
            "(convert a Latin-1 file with iconv -f LATIN1 -t UTF-8)");
  // A binary file given by mistake is one line too, however many of its
  // lines YAML refuses; a few bad lines in a text file are counted.
  std::string binary;
  for (int i = 0; i < 4096; ++i) {
    binary.push_back(static_cast<char>((i * 7919 + 13) % 256));
  }
  for (const CiExpansion& refused :
       {LintCiYaml(binary), ExpandCiYaml(binary)}) {
    ASSERT_EQ(refused.errors.size(), 1u);
    EXPECT_THAT(refused.errors[0].message,
                MatchesRegex("not a text file: .*, and [0-9]+ more lines "
                             "with bytes YAML refuses; a CI file is YAML text "
                             "in UTF-8"));
  }
  const CiExpansion two = LintCiYaml("a: \"\x01\"\nb: 1\nc: \"\x02\"\n");
  ASSERT_EQ(two.errors.size(), 1u);
  EXPECT_EQ(FormatDiagnostic("f", two.errors[0]),
            "f:1:5: control character (0x01) in the file; YAML allows none "
            "(write it as an escape in a double-quoted string) (1 more line "
            "has such bytes)");
  const CiExpansion utf16 =
      ExpandCiYaml(std::string("\xff\xfe"
                               "a\0:\0\n\0",
                               8));
  ASSERT_EQ(utf16.errors.size(), 1u);
  EXPECT_EQ(FormatDiagnostic("f", utf16.errors[0]),
            "f: the file is UTF-16 (it starts with a UTF-16 byte-order mark); "
            "GitLab reads CI files as UTF-8 (convert it, e.g. iconv -f UTF-16 "
            "-t UTF-8)");
  const CiExpansion complex = LintCiYaml("? [a, b]\n: c\nj:\n  script: x\n");
  ASSERT_EQ(complex.errors.size(), 1u);
  EXPECT_EQ(FormatDiagnostic("f", complex.errors[0]),
            "f:1:3: a mapping or list used as a key (`? ...`); GitLab reads "
            "only names as keys");
  // Deep but valid nesting is read; past 10,000 levels one line says so.
  const std::string deep = "a: " + std::string(5000, '[') +
                           std::string(5000, ']') +
                           "\nj:\n  parallel:\n    distributed: {nodes: 2}\n";
  EXPECT_TRUE(ExpandCiYaml(deep).ok());
  const CiExpansion deeper = LintCiYaml("a: " + std::string(20000, '[') +
                                        std::string(20000, ']') + "\n");
  ASSERT_EQ(deeper.errors.size(), 1u);
  EXPECT_THAT(deeper.errors[0].message,
              HasSubstr("nesting deeper than 10000 levels"));
}

// Expand used to look through every top-level key for each rewritten job
// and every job for each check: from a few thousand jobs on, 8x the jobs
// cost 48x the time (500 -> 4000 jobs, under the sanitizers). Linear is
// 8x; CPU time, not wall time, keeps the ratio steady on a busy machine.
TEST(ScalingTest, EightTimesTheJobsCostAboutEightTimesTheTime) {
  const auto file = [](int jobs) {
    std::string text;
    for (int i = 0; i < jobs; ++i) {
      absl::StrAppend(&text, "t", i,
                      ":\n  tags: [a]\n  script: [./t]\n  parallel:\n"
                      "    distributed: {nodes: 2}\n");
    }
    return text;
  };
  const auto cpu_seconds = [](const std::string& text, int runs) {
    double best = 1e9;
    for (int run = 0; run < runs; ++run) {
      const std::clock_t start = std::clock();
      const CiExpansion expansion = ExpandCiYaml(text);
      const std::clock_t end = std::clock();
      EXPECT_TRUE(expansion.ok());
      best = std::min(best, static_cast<double>(end - start) / CLOCKS_PER_SEC);
    }
    return best;
  };
  const double small_seconds = cpu_seconds(file(500), 3);
  const double large_seconds = cpu_seconds(file(4000), 1);
  EXPECT_LT(large_seconds, 12 * std::max(small_seconds, 0.001))
      << small_seconds << " s for 500 jobs, " << large_seconds << " s for 4000";
}

TEST(InheritanceTest, LintSeesGangsThroughInheritance) {
  const CiExpansion lint = LintCiYaml(
      ".gang:\n  parallel:\n    distributed: {nodes: 4, gpus_per_node: 8}\n"
      ".vars: &vars\n  variables:\n    GDT_GPUS_PER_NODE: \"2\"\n"
      "default:\n  tags: [gdt]\n"
      "train:\n  extends: .gang\n  script: x\n"
      "eval:\n  <<: *vars\n  parallel: 3\n  script: y\n"
      "tagged:\n  parallel: 2\n  script: z\n"
      "plain:\n  inherit:\n    default: false\n  parallel: 2\n  script: w\n");
  ASSERT_TRUE(lint.ok()) << lint.errors[0].message;
  std::vector<std::string> described;
  for (const GangSpec& g : lint.gangs) {
    described.push_back(absl::StrCat(g.job, ": ", g.Describe()));
  }
  EXPECT_THAT(
      described,
      ElementsAre(
          // .gang is hidden: linted, not listed.
          "train: 4 nodes x 8 GPUs, 8 processes per node (world size 32), "
          "launcher torchrun",
          "eval: 3 nodes x 2 GPUs, 1 process per node (world size 3), "
          "launcher torchrun",
          "tagged: 2 nodes x 0 GPUs, 1 process per node (world size 2), "
          "launcher torchrun"));
}

TEST(InheritanceTest, ABlockMergedFromANonJobMappingIsAnError) {
  const std::string input =
      ".defs:\n  gang: &gang\n    parallel:\n      distributed: {nodes: 2}\n"
      "train:\n  <<: *gang\n  script: x\n";
  for (const CiExpansion& result : {LintCiYaml(input), ExpandCiYaml(input)}) {
    ASSERT_EQ(result.errors.size(), 1u);
    EXPECT_EQ(FormatDiagnostic("f", result.errors[0]),
              "f:6:3: train: gets parallel:distributed through a merge key "
              "from a mapping that is not a job; gdt expands only jobs and "
              "hidden jobs, so merge one of those or write the block in the "
              "job");
  }
  // Merging a hidden job with the block is fine: it is expanded, and the
  // alias follows.
  const CiExpansion fine = ExpandCiYaml(
      ".gang: &gang\n  parallel:\n    distributed: {nodes: 2}\n"
      "train:\n  <<: *gang\n  script: x\n");
  ASSERT_TRUE(fine.ok()) << fine.errors[0].message;
  const auto train = EffectiveJobConfig(fine.text, "train");
  ASSERT_TRUE(train.ok());
  EXPECT_EQ(train->config["parallel"], 2);
  EXPECT_EQ(train->config["tags"], CiValue::array({"gdt"}));
}

TEST(InheritanceTest, ABlockFromTheSecondOfTwoMergeKeysIsExpanded) {
  // gitaly's `cover` merges a cache template, then the template with the
  // block: the second merge key brings the block, from a hidden job.
  const std::string input =
      ".cache: &cache\n  cache: {key: k}\n"
      ".pg: &pg\n  parallel:\n    distributed: {nodes: 2}\n  image: pg\n"
      "cover:\n  <<: *cache\n  <<: *pg\n  script: [make]\n";
  const CiExpansion lint = LintCiYaml(input);
  EXPECT_TRUE(lint.ok()) << lint.errors[0].message;
  const CiExpansion result = ExpandCiYaml(input);
  ASSERT_TRUE(result.ok()) << result.errors[0].message;
  const auto cover = EffectiveJobConfig(result.text, "cover");
  ASSERT_TRUE(cover.ok());
  EXPECT_EQ(cover->config["parallel"], 2);
  EXPECT_EQ(cover->config["cache"]["key"], "k");
  EXPECT_EQ(cover->config["tags"], CiValue::array({"gdt"}));
  // The other way round, a later merge key from a mapping that is no job
  // brings the block GitLab would see: refused.
  const CiExpansion later = ExpandCiYaml(
      ".pg: &pg\n  parallel:\n    distributed: {nodes: 2}\n"
      ".defs:\n  gang: &gang\n    parallel:\n      distributed: {nodes: 3}\n"
      "cover:\n  <<: *pg\n  <<: *gang\n  script: [make]\n");
  ASSERT_EQ(later.errors.size(), 1u);
  EXPECT_THAT(later.errors[0].message,
              HasSubstr("cover: gets parallel:distributed through a merge key "
                        "from a mapping that is not a job"));
}

TEST(InheritanceTest, AMergeKeyWithOwnVariablesOrTagsIsRefused) {
  // Merge keys are shallow: train's own variables would replace every
  // GDT_* variable expand writes into .gang, and its own tags the runner
  // tag, so train would run as parallel: 4 without being a gang.
  for (const char* own : {"  variables: {DATA: x}\n", "  tags: [a100]\n"}) {
    const std::string text = absl::StrCat(
        ".gang: &gang\n  parallel:\n    distributed: {nodes: 4}\n"
        "train:\n  <<: *gang\n",
        own, "  script: x\n");
    for (const CiExpansion& result : {LintCiYaml(text), ExpandCiYaml(text)}) {
      ASSERT_EQ(result.errors.size(), 1u) << own;
      EXPECT_THAT(result.errors[0].message,
                  HasSubstr("train: merges a gang job with <<: and sets its "
                            "own "));
      EXPECT_THAT(result.errors[0].message, HasSubstr("use extends:"));
    }
  }
  // Its own tags with the runner tag keep it a gang.
  EXPECT_TRUE(LintCiYaml(".gang: &gang\n  parallel:\n    distributed: "
                         "{nodes: 4}\ntrain:\n  <<: *gang\n  tags: [a100, "
                         "gdt]\n  script: x\n")
                  .ok());
}

// What GitLab sends `job` as GDT_* variables once the expansion is merged
// through extends (empty values left out: gdt reads them as unset).
std::map<std::string, std::string> SentGdtVariables(const std::string& text,
                                                    const std::string& job) {
  std::map<std::string, std::string> sent;
  const auto effective = EffectiveJobConfig(text, job);
  if (!effective.ok()) return sent;
  const CiValue variables =
      effective->config.value("variables", CiValue::object());
  for (const auto& [name, value] : variables.items()) {
    if (name.rfind("GDT_", 0) == 0 && value.is_string() &&
        !value.get<std::string>().empty()) {
      sent[name] = value.get<std::string>();
    }
  }
  return sent;
}

TEST(InheritanceTest, AJobsBlockIsMergedWithTheOneItExtends) {
  // The template is elastic, preemptible and urgent; the job asks for a
  // fixed size and no preemption, and keeps the template's priority (GitLab
  // merges mappings key by key through extends).
  const std::string input =
      ".tpl:\n  parallel:\n    distributed:\n      nodes: 2..8\n"
      "      gpus_per_node: 8\n      preemptible: true\n      priority: 9\n"
      "train:\n  extends: .tpl\n  script: [x]\n  parallel:\n"
      "    distributed:\n      nodes: 2\n      preemptible: false\n";
  const CiExpansion expansion = ExpandCiYaml(input);
  ASSERT_TRUE(expansion.ok()) << expansion.errors[0].message;
  EXPECT_THAT(
      SentGdtVariables(expansion.text, "train"),
      ElementsAre(Pair("GDT_GPUS_PER_NODE", "8"),
                  Pair("GDT_LAUNCHER", "torchrun"),
                  Pair("GDT_NPROC_PER_NODE", "8"), Pair("GDT_PRIORITY", "9")));
  EXPECT_EQ(EffectiveJobConfig(expansion.text, "train")->config["parallel"], 2);
  const CiExpansion lint = LintCiYaml(input);
  ASSERT_TRUE(lint.ok()) << lint.errors[0].message;
  ASSERT_EQ(lint.gangs.size(), 1u);  // .tpl is hidden: not listed.
  EXPECT_EQ(lint.gangs[0].Describe(),
            "2 nodes x 8 GPUs, 8 processes per node (world size 16), launcher "
            "torchrun, priority 9");
  // The expansion lints clean, and so does a block that takes its nodes
  // from the template.
  EXPECT_TRUE(LintCiYaml(expansion.text).ok());
  const CiExpansion sized = ExpandCiYaml(
      ".tpl:\n  parallel:\n    distributed: {nodes: 4, gpus_per_node: 8}\n"
      "train:\n  extends: .tpl\n  script: [x]\n  parallel:\n"
      "    distributed:\n      priority: 5\n");
  ASSERT_TRUE(sized.ok()) << sized.errors[0].message;
  EXPECT_EQ(EffectiveJobConfig(sized.text, "train")->config["parallel"], 4);
  EXPECT_EQ(SentGdtVariables(sized.text, "train")["GDT_PRIORITY"], "5");
}

TEST(InheritanceTest, AChildThatUndoesItsTemplatesBlockIsRefused) {
  const std::string tpl =
      ".tpl:\n  parallel:\n    distributed:\n      nodes: 2..8\n"
      "      gpus_per_node: 8\n      checkpoint: {}\n"
      "train:\n  extends: .tpl\n  script: [x]\n";
  struct Case {
    std::string own;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"  parallel: 3\n",
       "f:10:13: train: its own parallel replaces the elastic "
       "parallel:distributed block (nodes 2..8) it inherits through extends, "
       "but not the GDT_NODES_MIN/GDT_NODES_MAX that block sets, so its "
       "members would be refused; give the job a block of its own (nodes: "
       "...), which is merged with the template's"},
      {"  variables:\n    GDT_GPUS_PER_NODE: \"2\"\n",
       "f:11:5: train: variables:GDT_GPUS_PER_NODE is also set by the "
       "parallel:distributed block it inherits through extends; set it in "
       "one place (a block of the job's own is merged with the template's)"},
      {"  artifacts:\n    paths: [out/]\n",
       "f:11:5: train: its own artifacts:paths replace the ones it inherits, "
       "and with them checkpoints/, where the checkpoints of the template's "
       "checkpoint block are kept; add checkpoints/ to them"},
      {"  tags: [a100]\n",
       "f:10:3: train: gets parallel:distributed from a template, but its own "
       "tags replace the template's; add gdt to them"},
      // Its jobs would keep the gang's tags and GDT_* variables.
      {"  parallel:\n    matrix:\n      - GO: [\"1.20\", \"1.21\"]\n",
       "f:11:5: train: a gdt gang needs parallel: N (or "
       "parallel:distributed), not parallel:matrix: matrix makes differently "
       "configured jobs named 'job: [values]', not N identical members of one "
       "gang"},
  };
  for (const Case& c : cases) {
    const std::string text = tpl + c.own;
    for (const CiExpansion& result : {LintCiYaml(text), ExpandCiYaml(text)}) {
      ASSERT_EQ(result.errors.size(), 1u) << c.own;
      EXPECT_EQ(FormatDiagnostic("f", result.errors[0]), c.error);
    }
  }
  // A matrix under a fixed-size template too (gitlab-pages' test jobs
  // extend a common template and add a matrix), for expand as for lint.
  const std::string fixed =
      ".common:\n  parallel:\n    distributed: {nodes: 2}\n"
      "tests:\n  extends: .common\n  parallel:\n    matrix:\n"
      "      - GO: [\"1.20\", \"1.21\"]\n  script: [x]\n";
  for (const CiExpansion& result : {LintCiYaml(fixed), ExpandCiYaml(fixed)}) {
    ASSERT_EQ(result.errors.size(), 1u);
    EXPECT_THAT(FormatDiagnostic("f", result.errors[0]),
                HasSubstr("f:7:5: tests: a gdt gang needs parallel: N"));
  }
  // The same with what the block needs kept is fine.
  EXPECT_TRUE(ExpandCiYaml(tpl + "  parallel: 8\n  tags: [a100, gdt]\n"
                                 "  artifacts:\n    paths: [out/, "
                                 "checkpoints/]\n")
                  .ok());
}

TEST(LintTest, ThePlainElasticRangeMustMatchTheMembers) {
  const CiExpansion above = LintCiYaml(
      "j:\n  tags: [gdt]\n  variables:\n    GDT_NODES_MIN: \"5\"\n"
      "  script: x\n");
  ASSERT_EQ(above.errors.size(), 1u);
  EXPECT_EQ(FormatDiagnostic("f", above.errors[0]),
            "f:4:5: j: GDT_NODES_MIN is 5 but the job has only 1 member "
            "(parallel); an elastic gang's minimum must not exceed them");
  const CiExpansion max = LintCiYaml(
      "j:\n  parallel: 4\n  variables:\n    GDT_NODES_MIN: \"2\"\n"
      "    GDT_NODES_MAX: \"9\"\n  script: x\n");
  ASSERT_EQ(max.errors.size(), 1u);
  EXPECT_EQ(FormatDiagnostic("f", max.errors[0]),
            "f:5:5: j: GDT_NODES_MAX is 9 but the job has 4 members "
            "(parallel); parallel: N is the elastic maximum, so the two must "
            "agree");
  // A block job sets its range in the block only.
  const std::string block =
      "j:\n  variables:\n    GDT_NODES_MIN: \"5\"\n  parallel:\n"
      "    distributed: {nodes: 2}\n  script: x\n";
  for (const CiExpansion& result : {LintCiYaml(block), ExpandCiYaml(block)}) {
    ASSERT_EQ(result.errors.size(), 1u);
    EXPECT_EQ(FormatDiagnostic("f", result.errors[0]),
              "f:3:5: j: variables:GDT_NODES_MIN is what "
              "parallel:distributed's nodes: min..max sets; write the range "
              "there");
  }
}

TEST(ExpandTest, RewrittenVariablesKeepTheirValues) {
  // A kept block scalar (`|+`) keeps its trailing line breaks, a variable
  // written as a mapping keeps `expand: false` a boolean.
  const CiExpansion kept = ExpandCiYaml(
      "train:\n  script: [x]\n  parallel:\n    distributed:\n      nodes: 2\n"
      "  variables:\n    MSG: |+\n      hello\n\n\n");
  ASSERT_TRUE(kept.ok()) << kept.errors[0].message;
  auto train = EffectiveJobConfig(kept.text, "train");
  ASSERT_TRUE(train.ok());
  EXPECT_EQ(train->config["variables"]["MSG"], "hello\n\n\n");
  EXPECT_EQ(train->config["variables"]["GDT_LAUNCHER"], "torchrun");
  const CiExpansion mapping = ExpandCiYaml(
      "train:\n  script: [x]\n  variables: {A: {value: \"1\", expand: "
      "false}}\n  parallel:\n    distributed:\n      nodes: 2\n");
  ASSERT_TRUE(mapping.ok()) << mapping.errors[0].message;
  train = EffectiveJobConfig(mapping.text, "train");
  ASSERT_TRUE(train.ok());
  EXPECT_EQ(train->config["variables"]["A"],
            CiValue({{"value", "1"}, {"expand", false}}));
  // A flow mapping written in place gets gdt's entries added and keeps
  // every byte, however deep; one gdt must write out (an alias) and that
  // is deeper than it writes is refused, not cut.
  const std::string nest =
      absl::StrCat(std::string(120, '['), std::string(120, ']'));
  const CiExpansion deep = ExpandCiYaml(
      absl::StrCat("train:\n  script: [x]\n  variables: {A: ", nest,
                   "}\n  parallel:\n    distributed: {nodes: 2}\n"));
  ASSERT_TRUE(deep.ok()) << deep.errors[0].message;
  EXPECT_THAT(deep.text, HasSubstr(absl::StrCat("{A: ", nest, ", GDT_")));
  const CiExpansion refused = ExpandCiYaml(
      absl::StrCat(".v: &v {A: ", nest,
                   "}\ntrain:\n  script: [x]\n  variables: *v\n  parallel:\n"
                   "    distributed: {nodes: 2}\n"));
  ASSERT_EQ(refused.errors.size(), 1u);
  EXPECT_EQ(FormatDiagnostic("f", refused.errors[0]),
            "f:4:3: train: cannot rewrite variables: a value in it nests more "
            "than 100 levels deep");
}

TEST(ExpandTest, AnAnchorInsideTheBlockUsedElsewhereIsRefused) {
  for (const char* text :
       {"train:\n  script: [x]\n  parallel: &p\n    distributed:\n"
        "      nodes: 2\n.keep:\n  x: *p\n",
        "train:\n  script: [x]\n  parallel:\n    distributed:\n"
        "      nodes: &n 2\n  variables:\n    N: *n\n"}) {
    for (const CiExpansion& result : {LintCiYaml(text), ExpandCiYaml(text)}) {
      ASSERT_EQ(result.errors.size(), 1u) << text;
      EXPECT_THAT(result.errors[0].message,
                  HasSubstr("train: gdt replaces its parallel:distributed "
                            "block, and with it the anchor &"));
    }
  }
  // An anchor nothing else uses is no harm.
  EXPECT_TRUE(ExpandCiYaml("train:\n  script: [x]\n  parallel: &p\n"
                           "    distributed:\n      nodes: 2\n")
                  .ok());
}

TEST(InheritanceTest, ABlockReachedThroughAReferenceOrMergeInsideIsRefused) {
  // GitLab would receive the block unexpanded, or the expanded template's
  // bare parallel: N (no runner tag, no GDT_* variables).
  for (const char* text :
       {".p:\n  parallel:\n    distributed:\n      nodes: 2\n"
        "train:\n  script: [x]\n  parallel: !reference [.p, parallel]\n",
        ".d: &d\n  distributed:\n    nodes: 2\n"
        "train:\n  script: [x]\n  parallel:\n    <<: *d\n"}) {
    for (const CiExpansion& result : {LintCiYaml(text), ExpandCiYaml(text)}) {
      ASSERT_EQ(result.errors.size(), 1u) << text;
      EXPECT_THAT(result.errors[0].message,
                  HasSubstr("train: its parallel is a parallel:distributed "
                            "block reached through "));
    }
  }
  // A reference to a plain count is read as that count.
  const CiExpansion lint = LintCiYaml(
      ".p:\n  parallel: 3\ntrain:\n  script: [x]\n  tags: [gdt]\n"
      "  parallel: !reference [.p, parallel]\n");
  ASSERT_TRUE(lint.ok()) << lint.errors[0].message;
  ASSERT_EQ(lint.gangs.size(), 1u);
  EXPECT_EQ(lint.gangs[0].nodes, 3);
}

TEST(InheritanceTest, ReferencesGitLabRefusesAreRefused) {
  const std::string block = "  parallel:\n    distributed:\n      nodes: 2\n";
  const CiExpansion cycle = ExpandCiYaml(
      ".a:\n  tags: !reference [.b, tags]\n.b:\n  tags: !reference [.a, "
      "tags]\ntrain:\n  script: [x]\n  tags: !reference [.a, tags]\n" +
      block);
  ASSERT_EQ(cycle.errors.size(), 1u);
  EXPECT_THAT(cycle.errors[0].message,
              HasSubstr("train: tags: !reference nests more than 10 levels "
                        "(or loops)"));
  const CiExpansion mapping = ExpandCiYaml(
      "train:\n  script: [x]\n  tags: !reference {a: b}\n" + block);
  ASSERT_EQ(mapping.errors.size(), 1u);
  EXPECT_THAT(mapping.errors[0].message,
              HasSubstr("train: tags: !reference needs [job, key, ...]"));
}

TEST(InheritanceTest, AMergeKeyChainToAGangJobIsFollowed) {
  const std::string text =
      ".gang: &gang\n  parallel:\n    distributed:\n      nodes: 4\n"
      ".mid: &mid\n  <<: *gang\n  image: foo\n"
      "train:\n  <<: *mid\n  script: [x]\n";
  const CiExpansion expansion = ExpandCiYaml(text);
  ASSERT_TRUE(expansion.ok()) << expansion.errors[0].message;
  const auto train = EffectiveJobConfig(expansion.text, "train");
  ASSERT_TRUE(train.ok());
  EXPECT_EQ(train->config["parallel"], 4);
  EXPECT_EQ(train->config["tags"], CiValue::array({"gdt"}));
  EXPECT_TRUE(LintCiYaml(text).ok());
}

// A problem in the pipeline's variables does not hide the jobs' own:
// lint lists every independent error, as GitLab's lint does.
TEST(LintTest, PipelineVariablesErrorsDoNotHideTheJobs) {
  const CiExpansion lint = LintCiYaml(
      "variables:\n  GDT_NODE_RANK: \"3\"\n  GDT_PRIORITY: high\n"
      "workflow:\n  rules:\n    - variables: {GDT_GPUZ: \"1\"}\n"
      "train:\n  parallel:\n    distributed:\n      nodes: 2\n"
      "      launcher: torchrn\n  script: [x]\n"
      "other:\n  parallel: 500\n  script: [x]\n");
  std::vector<std::string> lines;
  for (const CiDiagnostic& d : lint.errors) {
    lines.push_back(FormatDiagnostic("f", d));
  }
  EXPECT_THAT(
      lines,
      ElementsAre(
          "f:2:3: variables: GDT_NODE_RANK is set by gdt on the host; a job "
          "must not set it",
          "f:3:17: variables: GDT_PRIORITY must be an integer from -1000 to "
          "1000, not 'high'",
          "f:6:19: workflow: rules[0]: unknown gdt variable GDT_GPUZ",
          "f:11:17: train: parallel:distributed:launcher must be one of "
          "torchrun, env, nccl, none, not 'torchrn' (did you mean "
          "'torchrun'?)",
          "f:14:13: other: parallel must be an integer from 1 to 200 "
          "(GitLab's limit), not '500'"));
  EXPECT_TRUE(lint.gangs.empty());
}

TEST(LintTest, RulesVariablesAreCheckedLikeTheJobs) {
  const CiExpansion plain = LintCiYaml(
      "train:\n  script: [x]\n  tags: [gdt]\n  parallel: 2\n"
      "  rules: [{if: $X, variables: {GDT_GPUZ: \"4\", GDT_NODE_RANK: "
      "\"1\"}}]\n");
  ASSERT_EQ(plain.errors.size(), 2u);
  EXPECT_EQ(FormatDiagnostic("f", plain.errors[0]),
            "f:5:32: train: rules[0]: unknown gdt variable GDT_GPUZ");
  EXPECT_EQ(FormatDiagnostic("f", plain.errors[1]),
            "f:5:47: train: rules[0]: GDT_NODE_RANK is set by gdt on the "
            "host; a job must not set it");
  const std::string block =
      "train:\n  script: [x]\n  rules: [{if: $X, variables: "
      "{GDT_GPUS_PER_NODE: \"4\"}}]\n  parallel:\n    distributed:\n"
      "      nodes: 2\n      gpus_per_node: 8\n";
  for (const CiExpansion& result : {LintCiYaml(block), ExpandCiYaml(block)}) {
    ASSERT_EQ(result.errors.size(), 1u);
    EXPECT_EQ(FormatDiagnostic("f", result.errors[0]),
              "f:3:32: train: rules[0]: variables:GDT_GPUS_PER_NODE would "
              "replace what parallel:distributed sets whenever the rule "
              "matches; set it in one place");
  }
  // A rule may raise a priority the block leaves alone.
  EXPECT_TRUE(LintCiYaml("train:\n  script: [x]\n  rules: [{if: $X, "
                         "variables: {GDT_PRIORITY: \"9\"}}]\n  parallel:\n"
                         "    distributed:\n      nodes: 2\n")
                  .ok());
}

// An expression GitLab would refuse the file for is a lint error at its
// place, in any job, template or workflow:; expand leaves it to GitLab.
TEST(LintTest, BadRuleExpressionsAreErrorsAtTheirPlace) {
  const std::string text =
      "workflow:\n  rules:\n    - if: $A == 'x' ||\n"
      ".tmpl:\n  rules:\n    - if: $CI_COMMIT_BRANCH =~ /a(b/\n"
      "build:\n  script: [x]\n  rules:\n    - if: $OK == \"1\"\n"
      "    - if: ($B\n"
      "old:\n  script: [x]\n  except:\n    variables: [$A = 1]\n";
  const CiExpansion lint = LintCiYaml(text);
  ASSERT_EQ(lint.errors.size(), 4u);
  EXPECT_EQ(FormatDiagnostic("f", lint.errors[0]),
            "f:3:11: workflow: rules[0]: if: invalid expression '$A == 'x' "
            "||': an operator lacks an operand; GitLab refuses the file");
  EXPECT_EQ(FormatDiagnostic("f", lint.errors[1]),
            "f:6:11: .tmpl: rules[0]: if: invalid expression "
            "'$CI_COMMIT_BRANCH =~ /a(b/': invalid regular expression /a(b/: "
            "missing ): a(b; GitLab refuses the file");
  EXPECT_EQ(FormatDiagnostic("f", lint.errors[2]),
            "f:11:11: build: rules[1]: if: invalid expression '($B': "
            "unmatched parenthesis; GitLab refuses the file");
  EXPECT_EQ(FormatDiagnostic("f", lint.errors[3]),
            "f:15:17: old: except:variables[0]: invalid expression '$A = 1': "
            "unknown token at '= 1'; GitLab refuses the file");
  EXPECT_TRUE(ExpandCiYaml(text).ok());
}

// A need that selects jobs of a matrix (`needs: [{job: X, parallel:
// {matrix: [...]}}]`) names each selected job "X: [values]"; GitLab
// refuses the pipeline when X has no job of that name.
TEST(LintTest, MatrixNeedsSelectingNoJobAreRefused) {
  const std::string producers =
      "build-int:\n  parallel: 3\n  script: [x]\n"
      ".matrix:\n  parallel:\n    matrix:\n      - NAME: [foo, bar]\n"
      "        ARCH: amd64\n"
      "build-foo:\n  extends: .matrix\n  script: [x]\n"
      "build-plain:\n  script: [x]\n";
  const std::string text =
      producers +
      "numbered:\n  script: [x]\n  needs:\n    - job: build-int\n"
      "      parallel:\n        matrix:\n          - NAME: foo\n"
      "zero:\n  script: [x]\n  needs:\n    - build-int\n    - job: build-foo\n"
      "      parallel:\n        matrix:\n          - NAME: [foo, nope]\n"
      "            ARCH: amd64\n";
  const CiExpansion lint = LintCiYaml(text);
  ASSERT_EQ(lint.errors.size(), 2u);
  EXPECT_EQ(FormatDiagnostic("f", lint.errors[0]),
            "f:18:7: numbered job: undefined need: build-int: [foo] "
            "(build-int has parallel: 3, whose jobs are numbered, not a "
            "matrix); GitLab refuses the pipeline");
  EXPECT_EQ(FormatDiagnostic("f", lint.errors[1]),
            "f:26:7: zero job: undefined need: build-foo: [nope, amd64] (no "
            "job of build-foo's parallel:matrix has these values); GitLab "
            "refuses the pipeline");
  EXPECT_TRUE(ExpandCiYaml(text).ok());
  // GitLab names the selected job from the selector's values alone, in the
  // selector's order: naming some of the variables, or all of them in
  // another order, selects no job.
  const CiExpansion partial =
      LintCiYaml(producers +
                 "some:\n  script: [x]\n  needs:\n    - job: build-foo\n"
                 "      parallel:\n        matrix:\n          - NAME: bar\n"
                 "swapped:\n  script: [x]\n  needs:\n    - job: build-foo\n"
                 "      parallel:\n        matrix:\n          - ARCH: amd64\n"
                 "            NAME: bar\n");
  ASSERT_EQ(partial.errors.size(), 2u);
  EXPECT_EQ(FormatDiagnostic("f", partial.errors[0]),
            "f:18:7: some job: undefined need: build-foo: [bar] (GitLab "
            "names the job from the selector's values alone and in its "
            "order, and no job is named so; build-foo's jobs are named like "
            "build-foo: [bar, amd64], so give every variable of the job, in "
            "build-foo's order); GitLab refuses the pipeline");
  EXPECT_THAT(FormatDiagnostic("f", partial.errors[1]),
              HasSubstr("f:25:7: swapped job: undefined need: build-foo: "
                        "[amd64, bar] (GitLab names the job"));
  // What GitLab accepts: a selector that matches (through extends), an
  // optional need, a job without parallel (the need stays that job), a
  // job gdt cannot see, and a selector whose name is a job's of another
  // matrix row that has fewer variables.
  EXPECT_TRUE(
      LintCiYaml(producers +
                 "rows:\n  script: [x]\n  parallel:\n    matrix:\n"
                 "      - OS: [linux, mac]\n        ARCH: amd64\n"
                 "      - OS: bsd\n"
                 "ok:\n  script: [x]\n  needs:\n    - job: build-foo\n"
                 "      parallel:\n        matrix:\n"
                 "          - NAME: [bar, foo]\n            ARCH: amd64\n"
                 "    - job: rows\n      parallel:\n        matrix:\n"
                 "          - OS: bsd\n"
                 "    - job: build-foo\n      optional: true\n"
                 "      parallel:\n        matrix:\n          - NAME: nope\n"
                 "    - job: build-plain\n      parallel:\n        matrix:\n"
                 "          - NAME: foo\n"
                 "    - job: elsewhere\n      parallel:\n        matrix:\n"
                 "          - NAME: foo\n")
          .ok());
  // A gang's block becomes `parallel: N`: its members are numbered jobs
  // too, also when the block comes from a template.
  const CiExpansion gang = LintCiYaml(
      ".gang:\n  parallel:\n    distributed: {nodes: 2}\n"
      "train:\n  extends: .gang\n  tags: [gdt]\n  script: [x]\n"
      "eval:\n  script: [x]\n  needs:\n    - job: train\n      parallel:\n"
      "        matrix:\n          - GDT_X: a\n");
  ASSERT_EQ(gang.errors.size(), 1u);
  EXPECT_EQ(FormatDiagnostic("f", gang.errors[0]),
            "f:12:7: eval job: undefined need: train: [a] (train is a gang, "
            "whose members are numbered jobs (train 1/N), not a matrix; need "
            "train by its name); GitLab refuses the pipeline");
}

// `$[[ matrix.NAME ]]` in needs is filled in for each job of the needing
// job's matrix: a name that matrix lacks is refused, and in a job without
// a matrix the expression stays, naming a job that does not exist.
TEST(LintTest, MatrixExpressionsInNeedsAreChecked) {
  const std::string build =
      "build:\n  parallel:\n    matrix:\n      - OS: [linux, mac]\n"
      "        ARCH: [amd64]\n  script: [x]\n";
  const std::string text =
      build +
      "test:\n  parallel:\n    matrix:\n      - OS: [linux, mac]\n"
      "  needs:\n    - job: build\n      parallel:\n        matrix:\n"
      "          - OS: $[[ matrix.OS ]]\n            ARCH: $[[ matrix.ARCH ]]\n"
      "  script: [x]\n"
      "plain:\n  needs:\n    - job: build\n      parallel:\n        matrix:\n"
      "          - OS: $[[ matrix.OS ]]\n            ARCH: amd64\n"
      "  script: [x]\n";
  const CiExpansion lint = LintCiYaml(text);
  ASSERT_EQ(lint.errors.size(), 2u);
  EXPECT_EQ(FormatDiagnostic("f", lint.errors[0]),
            "f:16:19: test job: 'ARCH' does not exist in matrix configuration "
            "(its parallel:matrix has no variable ARCH); GitLab refuses the "
            "pipeline");
  EXPECT_EQ(FormatDiagnostic("f", lint.errors[1]),
            "f:21:7: plain job: undefined need: build: [$[[ matrix.OS ]], "
            "amd64] (GitLab fills in $[[ matrix.* ]] only in a job with "
            "parallel:matrix, which plain has not); GitLab refuses the "
            "pipeline");
  EXPECT_TRUE(ExpandCiYaml(text).ok());
  // A 1:1 mapping between two matrices, spaces or none.
  EXPECT_TRUE(
      LintCiYaml(build +
                 "test:\n  parallel:\n    matrix:\n"
                 "      - OS: [linux, mac]\n        ARCH: [amd64]\n"
                 "  needs:\n    - job: build\n      parallel:\n"
                 "        matrix:\n          - OS: ['$[[ matrix.OS ]]']\n"
                 "            ARCH: ['$[[matrix.ARCH]]']\n  script: [x]\n")
          .ok());
}

TEST(LintTest, InheritVariablesFalseDropsTheTopLevelOnes) {
  const std::string top =
      "variables:\n  GDT_GPUS_PER_NODE: \"8\"\n  CUDA_VISIBLE_DEVICES: \"0\"\n";
  EXPECT_TRUE(LintCiYaml(top + "train:\n  inherit:\n    variables: false\n"
                               "  script: [x]\n  tags: [gdt]\n  parallel: 2\n")
                  .ok());
  EXPECT_TRUE(LintCiYaml(top +
                         "train:\n  inherit:\n    variables: "
                         "[GDT_GPUS_PER_NODE]\n  script: [x]\n  tags: [gdt]\n"
                         "  parallel: 2\n")
                  .ok());
  EXPECT_FALSE(
      LintCiYaml(top + "train:\n  script: [x]\n  tags: [gdt]\n  parallel: 2\n")
          .ok());
}

TEST(LintTest, EmptyParallelAndJobsRepeatedAcrossDocumentsAreErrors) {
  const CiExpansion empty =
      LintCiYaml("train:\n  script: [x]\n  tags: [gdt]\n  parallel: {}\n");
  ASSERT_EQ(empty.errors.size(), 1u);
  EXPECT_THAT(empty.errors[0].message,
              HasSubstr("train: parallel is an empty mapping"));
  const CiExpansion twice = LintCiYaml(
      "train:\n  script: [x]\n  parallel:\n    distributed:\n      nodes: "
      "2\n---\ntrain:\n  script: [y]\n");
  ASSERT_EQ(twice.errors.size(), 1u);
  EXPECT_EQ(FormatDiagnostic("f", twice.errors[0]),
            "f:7:1: job 'train' is also in an earlier document (line 1); "
            "GitLab keeps only the last one");
}

TEST(MessagesTest, PlacesNamesAndOrderAreWhatTheUserSees) {
  // Invalid UTF-8 is placed where it is, not at 1:1.
  const CiExpansion utf8 = LintCiYaml(
      "train:\n  script: [\xff\xfe echo]\n  parallel:\n    distributed:\n"
      "      nodes: 2\n");
  ASSERT_EQ(utf8.errors.size(), 1u);
  EXPECT_EQ(FormatDiagnostic("f", utf8.errors[0]),
            "f:2:12: byte 0xff is not UTF-8; GitLab reads CI files as UTF-8 "
            "(convert a Latin-1 file with iconv -f LATIN1 -t UTF-8)");
  // A job name with control characters is one line in the report.
  const CiExpansion named = LintCiYaml(
      "\"tr\\nain\\r\\e[31m\":\n  script: [x]\n  parallel:\n"
      "    distributed: {nodes: 2}\n");
  ASSERT_TRUE(named.ok()) << named.errors[0].message;
  const std::string report = FormatLintReport("f", named, false);
  EXPECT_EQ(std::count(report.begin(), report.end(), '\n'), 2) << report;
  EXPECT_EQ(report.find('\r'), std::string::npos);
  EXPECT_EQ(report.find('\x1b'), std::string::npos);
  // Errors come in file order, whichever check found them.
  const CiExpansion order = LintCiYaml(
      "train:\n  script: [x]\n  tags: notalist\n  variables:\n"
      "    GDT_LAUNCHER: env\n  parallel:\n    distributed: {nodes: 2}\n");
  ASSERT_EQ(order.errors.size(), 2u);
  EXPECT_LT(order.errors[0].line, order.errors[1].line);
  // A block merged into default: is refused like one written there.
  const CiExpansion merged = ExpandCiYaml(
      ".gang: &gang\n  parallel:\n    distributed: {nodes: 2}\n"
      "default:\n  <<: *gang\n");
  ASSERT_EQ(merged.errors.size(), 1u);
  EXPECT_EQ(FormatDiagnostic("f", merged.errors[0]),
            "f:5:3: default: GitLab does not accept parallel under default; "
            "put parallel:distributed in each gang job, or in a hidden job "
            "that they extend");
}

TEST(LintTest, ValuesGitLabReadsOtherwiseAreNamed) {
  // A leading zero is octal for GitLab's YAML 1.1 reader; !!int is an
  // integer.
  const CiExpansion octal = LintCiYaml(
      "train:\n  script: [x]\n  parallel:\n    distributed:\n      nodes: "
      "010\n");
  ASSERT_EQ(octal.errors.size(), 1u);
  EXPECT_THAT(octal.errors[0].message,
              HasSubstr("not '010' (a leading zero: GitLab's YAML reads it "
                        "as octal, 8)"));
  const CiExpansion not_octal = LintCiYaml(
      "train:\n  script: [x]\n  parallel:\n    distributed:\n      nodes: "
      "09\n");
  ASSERT_EQ(not_octal.errors.size(), 1u);
  EXPECT_THAT(not_octal.errors[0].message,
              HasSubstr("not '09' (a leading zero, and not octal: GitLab's "
                        "YAML reads it as text, not a number)"));
  const CiExpansion tagged = ExpandCiYaml(
      "train:\n  script: [x]\n  parallel:\n    distributed:\n      nodes: "
      "!!int 4\n");
  ASSERT_TRUE(tagged.ok()) << tagged.errors[0].message;
  EXPECT_EQ(EffectiveJobConfig(tagged.text, "train")->config["parallel"], 4);
  // extends takes names only.
  const CiExpansion extends = LintCiYaml(
      ".t:\n  script: [y]\ntrain:\n  extends: [1, .t]\n  script: [x]\n"
      "b:\n  extends: {a: b}\n  script: [x]\n");
  ASSERT_EQ(extends.errors.size(), 2u);
  EXPECT_EQ(FormatDiagnostic("f", extends.errors[0]),
            "f:4:12: train: extends must be a job name or a list of them, "
            "not a list holding 1");
  EXPECT_EQ(FormatDiagnostic("f", extends.errors[1]),
            "f:7:12: b: extends must be a job name or a list of them, not a "
            "mapping");
}

TEST(InheritanceTest, LintNamesAChildWhoseOwnTagsDropTheRunnerTag) {
  const CiExpansion lint = LintCiYaml(
      ".gang:\n  parallel:\n    distributed: {nodes: 2}\n"
      "train:\n  extends: .gang\n  tags: [a100]\n  script: x\n"
      "ok:\n  extends: .gang\n  tags: [a100, gdt]\n  script: x\n");
  ASSERT_EQ(lint.errors.size(), 1u);
  EXPECT_EQ(FormatDiagnostic("f", lint.errors[0]),
            "f:6:3: train: gets parallel:distributed from a template, but its "
            "own tags replace the template's; add gdt to them");
}

// ---------------------------------------------------------------------.
// What GitLab reads of an expansion (Ruby's YAML: merge keys applied where
// they stand, !reference kept, YAML 1.1 scalars).

CiValue GitLabJob(const std::string& text, const std::string& job) {
  const auto effective = EffectiveJobConfig(text, job);
  EXPECT_TRUE(effective.ok()) << effective.status();
  return effective.ok() ? effective->config : CiValue();
}

TEST(GitLabReadsTest, EntriesGoAfterATrailingMergeKey) {
  const std::string input =
      ".runner: &runner\n  tags: [gpu-a100]\n  variables:\n"
      "    NCCL_DEBUG: INFO\n"
      "train:\n  stage: test\n  parallel:\n"
      "    distributed: {nodes: 2, gpus_per_node: 8}\n"
      "  script: [torchrun train.py]\n  <<: *runner\n";
  const CiExpansion expansion = ExpandCiYaml(input);
  ASSERT_TRUE(expansion.ok()) << expansion.errors[0].message;
  const CiValue train = GitLabJob(expansion.text, "train");
  EXPECT_EQ(train["parallel"], 2);
  EXPECT_EQ(train["tags"], CiValue::parse(R"(["gpu-a100", "gdt"])"));
  EXPECT_EQ(train["variables"]["NCCL_DEBUG"], "INFO");
  EXPECT_EQ(train["variables"]["GDT_GPUS_PER_NODE"], "8");
  EXPECT_EQ(train["retry"]["max"], 2);
  // The template is unchanged.
  EXPECT_EQ(GitLabJob(expansion.text, ".runner")["tags"],
            CiValue::parse(R"(["gpu-a100"])"));
}

TEST(GitLabReadsTest, AMergeKeyThatReplacesTheJobsOwnEntriesIsRefused) {
  const std::string input =
      ".t: &t\n  tags: [docker]\n  variables: {A: \"1\"}\n"
      "train:\n  parallel: {distributed: {nodes: 2}}\n  tags: [a]\n"
      "  <<: *t\n  script: [x]\n";
  for (const CiExpansion& result : {ExpandCiYaml(input), LintCiYaml(input)}) {
    ASSERT_EQ(result.errors.size(), 1u);
    EXPECT_EQ(FormatDiagnostic("f", result.errors[0]),
              "f:7:3: train: the merge key `<<:` here, written after the "
              "job's own tags (line 6), replaces them and what gdt adds to "
              "them (a YAML merge key overrides the keys written before it); "
              "move `<<:` above the job's own keys");
  }
  // One that merges other keys only is fine.
  const CiExpansion fine = ExpandCiYaml(
      ".t: &t\n  image: x\ntrain:\n  parallel: {distributed: {nodes: 2}}\n"
      "  tags: [a]\n  <<: *t\n  script: [x]\n");
  ASSERT_TRUE(fine.ok()) << fine.errors[0].message;
  EXPECT_EQ(GitLabJob(fine.text, "train")["tags"],
            CiValue::parse(R"(["a", "gdt"])"));
}

TEST(GitLabReadsTest, FlowEntriesKeepAnchorsTagsAndNumbersAsWritten) {
  // Anchors inside the values that another job uses, a !reference value,
  // and YAML 1.1 numbers (0644 is octal 420 for GitLab, 0xFF is 255): the
  // flow entries get gdt's entries added and keep every byte.
  const std::string input =
      ".vars:\n  variables:\n    IMPORTANT: \"the details\"\n"
      "train:\n"
      "  variables: {DATA_DIR: &data /datasets, MY_VAR: !reference [.vars, "
      "variables, IMPORTANT], MODE: 0644, STEPS: 1_000, MASK: 0xFF, "
      "EMPTY: }\n"
      "  tags: [&gpu a100]\n"
      "  parallel:\n    distributed: {nodes: 2, gpus_per_node: 8}\n"
      "  script: [torchrun train.py]\n"
      "evaluate:\n  tags: [*gpu]\n  variables: {DATA_DIR: *data}\n"
      "  script: [python eval.py]\n";
  const CiExpansion expansion = ExpandCiYaml(input);
  ASSERT_TRUE(expansion.ok()) << expansion.errors[0].message;
  EXPECT_THAT(
      expansion.text,
      HasSubstr("  variables: {DATA_DIR: &data /datasets, MY_VAR: !reference "
                "[.vars, variables, IMPORTANT], MODE: 0644, STEPS: 1_000, "
                "MASK: 0xFF, EMPTY: , GDT_GPUS_PER_NODE: \"8\", "
                "GDT_NPROC_PER_NODE: \"8\", GDT_LAUNCHER: \"torchrun\" }\n"
                "  tags: [&gpu a100, gdt]\n"));
  const CiValue train = GitLabJob(expansion.text, "train");
  EXPECT_EQ(train["variables"]["MY_VAR"], "the details");
  EXPECT_EQ(train["variables"]["DATA_DIR"], "/datasets");
  EXPECT_EQ(train["variables"]["GDT_LAUNCHER"], "torchrun");
  const CiValue evaluate = GitLabJob(expansion.text, "evaluate");
  EXPECT_EQ(evaluate["tags"], CiValue::parse(R"(["a100"])"));
  EXPECT_EQ(evaluate["variables"]["DATA_DIR"], "/datasets");
  // An alias as the last value, and empty collections.
  const CiExpansion alias = ExpandCiYaml(
      ".d: &d /x\ntrain:\n  variables: {A: *d}\n  tags: []\n"
      "  parallel:\n    distributed: {nodes: 2}\n  script: [x]\n");
  ASSERT_TRUE(alias.ok()) << alias.errors[0].message;
  EXPECT_THAT(alias.text, HasSubstr("  variables: {A: *d, GDT_GPUS_PER_NODE: "
                                    "\"0\", GDT_NPROC_PER_NODE: \"1\", "
                                    "GDT_LAUNCHER: \"torchrun\"}\n"
                                    "  tags: [gdt]\n"));
  EXPECT_EQ(GitLabJob(alias.text, "train")["variables"]["A"], "/x");
}

TEST(GitLabReadsTest, VariablesRepeatedFromAMergeKeyKeepTheirForm) {
  // gdt's new variables entry replaces the merged one, so it repeats its
  // entries as they are written: !reference keeps its tag, 0644 and 1:30
  // stay the numbers YAML 1.1 reads, strings stay strings.
  const std::string input =
      ".vars:\n  variables:\n    IMPORTANT: \"the details\"\n"
      ".tpl: &tpl\n  image: x\n  variables:\n"
      "    MY_VAR: !reference [.vars, variables, IMPORTANT]\n"
      "    MODE: 0644\n    WARMUP: 1:30\n    TEXT: hello world\n"
      "train:\n  <<: *tpl\n  parallel:\n    distributed: {nodes: 2}\n"
      "  script: [x]\n";
  const CiExpansion expansion = ExpandCiYaml(input);
  ASSERT_TRUE(expansion.ok()) << expansion.errors[0].message;
  EXPECT_THAT(expansion.text,
              HasSubstr("  variables:\n"
                        "    MY_VAR: !reference [.vars, variables, IMPORTANT]\n"
                        "    MODE: 0644\n    WARMUP: 1:30\n"
                        "    TEXT: \"hello world\"\n"
                        "    GDT_GPUS_PER_NODE: \"0\"\n"));
  const CiValue train = GitLabJob(expansion.text, "train");
  EXPECT_EQ(train["variables"]["MY_VAR"], "the details");
  EXPECT_EQ(train["variables"]["TEXT"], "hello world");
  EXPECT_EQ(train["image"], "x");
  // An alias of a flow mapping is written out, with the same rules.
  const CiExpansion alias = ExpandCiYaml(
      ".v: &v {MODE: 0644, R: !reference [.vars, variables, IMPORTANT]}\n"
      ".vars:\n  variables:\n    IMPORTANT: \"the details\"\n"
      "train:\n  variables: *v\n  parallel:\n    distributed: {nodes: 2}\n"
      "  script: [x]\n");
  ASSERT_TRUE(alias.ok()) << alias.errors[0].message;
  EXPECT_THAT(alias.text,
              HasSubstr("  variables: {MODE: 0644, R: !reference [.vars, "
                        "variables, IMPORTANT], GDT_GPUS_PER_NODE: \"0\""));
  EXPECT_EQ(GitLabJob(alias.text, "train")["variables"]["R"], "the details");
}

TEST(GitLabRefusesTest, GangsThatCannotFormAreOneLineEach) {
  const auto only_error = [](const std::string& text) {
    const CiExpansion lint = LintCiYaml(text);
    const CiExpansion expand = ExpandCiYaml(text);
    EXPECT_EQ(lint.errors.size(), 1u) << text;
    EXPECT_EQ(expand.errors.size(), 1u) << text;
    return lint.errors.empty() ? std::string()
                               : FormatDiagnostic("f", lint.errors[0]);
  };
  EXPECT_EQ(only_error("train:\n  resource_group: gpus\n  parallel:\n"
                       "    distributed: {nodes: 4}\n  script: [x]\n"),
            "f:2:3: train: resource_group lets GitLab run one job of the "
            "group at a time, so a gang's members would wait for each other "
            "and it would never form; remove it from the gang job");
  EXPECT_EQ(only_error("train:\n  parallel:\n    distributed: {nodes: 2}\n"
                       "  trigger:\n    include: child.yml\n"),
            "f:4:3: train: a trigger job starts a pipeline and runs nothing "
            "on a runner, so it cannot be a gdt gang (GitLab refuses tags and "
            "retry on it)");
  // GitLab counts every member of a gang a job needs: at most 50.
  EXPECT_EQ(only_error("train:\n  parallel:\n    distributed: {nodes: 64}\n"
                       "  script: [x]\nevaluate:\n  needs: [train]\n"
                       "  script: [y]\n"),
            "f:6:3: evaluate: needs 64 jobs, since each member of a gang "
            "counts (gang train has 64 members); GitLab allows at most 50 "
            "needs per job (its default limit), so it would refuse the "
            "pipeline");
  EXPECT_TRUE(LintCiYaml("train:\n  parallel:\n    distributed: {nodes: 50}\n"
                         "  script: [x]\nevaluate:\n  needs: [train]\n"
                         "  script: [y]\n")
                  .ok());
  // One need written as a mapping counts the same.
  EXPECT_EQ(only_error("train:\n  parallel:\n    distributed: {nodes: 64}\n"
                       "  script: [x]\nevaluate:\n  needs: {job: train}\n"
                       "  script: [y]\n"),
            "f:6:3: evaluate: needs 64 jobs, since each member of a gang "
            "counts (gang train has 64 members); GitLab allows at most 50 "
            "needs per job (its default limit), so it would refuse the "
            "pipeline");
}

// GitLab takes `needs:` as a list or as one need written as a mapping
// (`needs: {job: build, artifacts: false}`), in a job and in its rules;
// anything else is refused.
TEST(GitLabRefusesTest, OneNeedMayBeAMapping) {
  const std::string text =
      "build:\n  script: [make]\n"
      "test:\n  needs:\n    job: build\n    artifacts: false\n"
      "  rules:\n    - if: $A\n      needs: {job: build}\n"
      "  script: [make test]\n"
      "train:\n  needs: {job: build}\n  parallel:\n    distributed:\n"
      "      nodes: 2\n  script: [python train.py]\n";
  const CiExpansion lint = LintCiYaml(text);
  EXPECT_TRUE(lint.ok()) << FormatDiagnostic("f", lint.errors.at(0));
  const CiExpansion expand = ExpandCiYaml(text);
  ASSERT_TRUE(expand.ok()) << FormatDiagnostic("f", expand.errors.at(0));
  EXPECT_THAT(expand.text, HasSubstr("train:\n  needs: {job: build}\n"
                                     "  parallel: 2\n"));
  const CiExpansion scalar = LintCiYaml(
      "build:\n  script: [make]\ntest:\n  needs: build\n"
      "  script: [make test]\n");
  ASSERT_EQ(scalar.errors.size(), 1u);
  EXPECT_EQ(FormatDiagnostic("f", scalar.errors[0]),
            "f:4:10: jobs:test:needs config should be a hash or an array, "
            "not 'build' (GitLab refuses the pipeline)");
}

TEST(GitLabRefusesTest, ABooleanGdtVariableIsOneLine) {
  const CiExpansion lint = LintCiYaml(
      "train:\n  parallel: 2\n  tags: [gdt]\n  variables:\n"
      "    GDT_PREEMPTIBLE: true\n    GDT_PRIORITY: 1.5\n  script: [x]\n");
  ASSERT_EQ(lint.errors.size(), 2u);
  EXPECT_EQ(FormatDiagnostic("f", lint.errors[0]),
            "f:5:22: train: GDT_PREEMPTIBLE is a boolean for GitLab, which "
            "takes only strings and integers as variable values and refuses "
            "the pipeline; quote it: \"true\"");
  EXPECT_THAT(lint.errors[1].message, HasSubstr("GDT_PRIORITY is a float"));
  EXPECT_TRUE(LintCiYaml("train:\n  parallel: 2\n  tags: [gdt]\n  variables:\n"
                         "    GDT_PREEMPTIBLE: \"true\"\n  script: [x]\n")
                  .ok());
}

TEST(LintTest, PlainFormReportNamesPreemptibleAndTheDefaultTopologyMode) {
  const CiExpansion lint = LintCiYaml(
      "train:\n  parallel: 2\n  tags: [gdt]\n  variables:\n"
      "    GDT_GPUS_PER_NODE: \"8\"\n    GDT_PREEMPTIBLE: \"true\"\n"
      "    GDT_TOPOLOGY_SAME: rack\n  script: [x]\n");
  ASSERT_TRUE(lint.ok()) << lint.errors[0].message;
  ASSERT_EQ(lint.gangs.size(), 1u);
  EXPECT_EQ(lint.gangs[0].Describe(),
            "2 nodes x 8 GPUs, 1 process per node (world size 2), launcher "
            "torchrun, same rack (required), preemptible");
  EXPECT_TRUE(lint.gangs[0].checkpoint_store.empty());
}

TEST(GitLabRefusesTest, VariablesUnderDefaultAreOneLine) {
  const CiExpansion lint = LintCiYaml(
      "default:\n  variables:\n    GDT_TOPOLOGY_SAME: rack\n"
      "train:\n  parallel: 2\n  tags: [gdt]\n  script: [x]\n");
  ASSERT_EQ(lint.errors.size(), 1u);
  EXPECT_EQ(FormatDiagnostic("f", lint.errors[0]),
            "f:2:3: default: GitLab does not accept variables under default; "
            "write them as top-level variables:");
}

TEST(GitLabRefusesTest, ExtendsNamesGdtCannotSeeAreOneLine) {
  // No include: a parent defined nowhere is GitLab's "unknown keys in
  // `extends`", for a gang and for any other job.
  const std::string nowhere =
      ".gang:\n  parallel:\n    distributed: {nodes: 2}\ntrain:\n"
      "  extends: [.gang, .nope]\n  script: [x]\nlint:\n  extends: .x\n"
      "  script: [y]\n";
  const CiExpansion lint = LintCiYaml(nowhere);
  ASSERT_EQ(lint.errors.size(), 2u);
  EXPECT_EQ(FormatDiagnostic("f", lint.errors[0]),
            "f:5:12: train: unknown keys in `extends` (.nope): not in this "
            "file, which includes none, so gdt cannot see what the gang "
            "inherits (GitLab refuses it unless a file that includes this "
            "one defines them)");
  EXPECT_EQ(FormatDiagnostic("f", lint.errors[1]),
            "f:8:12: lint: unknown keys in `extends` (.x): not in this file, "
            "which includes none, so GitLab refuses it (if another file "
            "includes this one, lint that file)");
  // Expand also works on a file that another one includes, where the
  // parent listed after the gang's could replace its entries.
  const CiExpansion expand = ExpandCiYaml(nowhere);
  ASSERT_EQ(expand.errors.size(), 1u);
  EXPECT_THAT(expand.errors[0].message,
              HasSubstr("train: extends '.nope' after '.gang', which gives "
                        "it parallel:distributed"));
  // With include:, an unseen parent after the one with the block could
  // replace its tags or parallel; before it, the gang's entries win.
  const std::string later =
      "include: [{local: t.yml}]\n.gang:\n  parallel:\n"
      "    distributed: {nodes: 2}\n  tags: [gpu]\n  retry: 0\n"
      "train:\n  extends: [.gang, .gpu-runner]\n  script: [x]\n";
  for (const CiExpansion& r : {LintCiYaml(later), ExpandCiYaml(later)}) {
    ASSERT_EQ(r.errors.size(), 1u);
    EXPECT_THAT(FormatDiagnostic("f", r.errors[0]),
                HasSubstr("f:8:12: train: extends '.gpu-runner' after "
                          "'.gang', which gives it parallel:distributed, but "
                          "'.gpu-runner' is not in this file"));
  }
  const std::string earlier =
      "include: [{local: t.yml}]\n.gang:\n  parallel:\n"
      "    distributed: {nodes: 2}\n  tags: [gpu]\n  retry: 0\n"
      "train:\n  extends: [.gpu-runner, .gang]\n  script: [x]\n";
  EXPECT_TRUE(ExpandCiYaml(earlier).ok());
}

// GitLab resolves `extends` after merging every include, in every job and
// template, gang or not: a name it does not find, or finds as something
// other than a mapping, refuses the file. Lint says so when it has read
// every include; an include it cannot read may define the name, and
// expand leaves such jobs alone (a file that another includes may name
// that file's templates).
TEST(GitLabRefusesTest, AnyJobsUnknownExtendsIsGitLabsError) {
  const std::string text =
      ".base:\n  script: [x]\nbuild:\n  extends: [.base, .missing]\n"
      ".tpl:\n  extends: .gone\nlisted:\n  extends: .list\n"
      "  script: [y]\n.list: [a, b]\n";
  const CiExpansion lint = LintCiYaml(text);
  ASSERT_EQ(lint.errors.size(), 3u);
  EXPECT_EQ(FormatDiagnostic("f", lint.errors[0]),
            "f:4:12: build: unknown keys in `extends` (.missing): not in "
            "this file, which includes none, so GitLab refuses it (if "
            "another file includes this one, lint that file)");
  EXPECT_THAT(FormatDiagnostic("f", lint.errors[1]),
              HasSubstr("f:6:12: .tpl: unknown keys in `extends` (.gone)"));
  EXPECT_EQ(FormatDiagnostic("f", lint.errors[2]),
            "f:8:12: listed: invalid base hashes in `extends` (.list): not "
            "jobs or templates, so GitLab refuses it");
  EXPECT_TRUE(ExpandCiYaml(text).ok());

  // An include gdt does not read may define the name.
  EXPECT_TRUE(
      LintCiYaml("include: {template: Jobs/Build.gitlab-ci.yml}\n" + text)
          .ok());

  // Every include read: the name is in none of the files.
  test::TempDir dir;
  test::WriteTextFile(dir.Sub("t.yml"), ".base:\n  script: [x]\n");
  const std::string main =
      "include: [{local: t.yml}]\nbuild:\n  extends: .bse\n";
  CiExpandOptions options;
  const CiIncludes includes =
      ReadLocalIncludes(".gitlab-ci.yml", main, dir.path());
  ASSERT_TRUE(includes.ok());
  options.includes = &includes;
  const CiExpansion read = LintCiYaml(main, options);
  ASSERT_EQ(read.errors.size(), 1u);
  EXPECT_EQ(FormatDiagnostic("f", read.errors[0]),
            "f:3:12: build: unknown keys in `extends` (.bse): not in this "
            "file nor in the files it includes, so GitLab refuses it");
  const std::string fixed =
      "include: [{local: t.yml}]\nbuild:\n  extends: .base\n";
  const CiIncludes fixed_includes =
      ReadLocalIncludes(".gitlab-ci.yml", fixed, dir.path());
  options.includes = &fixed_includes;
  EXPECT_TRUE(LintCiYaml(fixed, options).ok());

  // A file that the project's .gitlab-ci.yml includes (a fragment) is read
  // with that whole configuration, so its names count; one that none of
  // the files defines is still refused.
  test::WriteTextFile(dir.Sub(".gitlab-ci.yml"),
                      "include: [t.yml, ci/frag.yml]\nstages: [test]\n");
  const std::string frag =
      "a:\n  extends: .base\nb:\n  extends: [.base, .nope]\n";
  fs::create_directories(dir.Sub("ci"));
  test::WriteTextFile(dir.Sub("ci/frag.yml"), frag);
  const std::optional<CiIncludingConfig> including =
      FindIncludingConfig(dir.Sub("ci/frag.yml"), dir.path());
  ASSERT_TRUE(including.has_value());
  EXPECT_EQ(including->main_path, ".gitlab-ci.yml");
  EXPECT_EQ(including->names.count(".base"), 1u);
  EXPECT_FALSE(including->unseen);
  CiExpandOptions fragment;
  fragment.including = &*including;
  const CiExpansion in_project = LintCiYaml(frag, fragment);
  ASSERT_EQ(in_project.errors.size(), 1u);
  EXPECT_EQ(FormatDiagnostic("ci/frag.yml", in_project.errors[0]),
            "ci/frag.yml:4:12: b: unknown keys in `extends` (.nope): not in "
            "this file nor in .gitlab-ci.yml, which includes it, or the files "
            "that includes, so GitLab refuses it");
  // Its stages are the configuration's: the main file's `stages:` wins
  // over the fragment's own.
  const std::string staged =
      "stages: [build]\nc:\n  stage: build\n  script: [x]\n"
      "d:\n  stage: tset\n  script: [x]\ne:\n  stage: .post\n  script: [x]\n";
  test::WriteTextFile(dir.Sub("ci/frag.yml"), staged);
  const std::optional<CiIncludingConfig> with_stages =
      FindIncludingConfig(dir.Sub("ci/frag.yml"), dir.path());
  ASSERT_TRUE(with_stages.has_value());
  EXPECT_THAT(with_stages->stages, ::testing::Optional(ElementsAre("test")));
  fragment.including = &*with_stages;
  std::vector<std::string> found;
  for (const CiDiagnostic& d : LintCiYaml(staged, fragment).errors) {
    found.push_back(FormatDiagnostic("ci/frag.yml", d));
  }
  EXPECT_THAT(
      found,
      ElementsAre("ci/frag.yml:3:10: c job: chosen stage build does not "
                  "exist; available stages are .pre, test, .post (GitLab "
                  "refuses the pipeline)",
                  "ci/frag.yml:6:10: d job: chosen stage tset does not "
                  "exist; available stages are .pre, test, .post (did you "
                  "mean 'test'?) (GitLab refuses the pipeline)"));
  // Without stages: in the main file, the fragment's own count; a list
  // gdt cannot read is not judged.
  test::WriteTextFile(dir.Sub(".gitlab-ci.yml"),
                      "include: [t.yml, ci/frag.yml]\n");
  const std::optional<CiIncludingConfig> own_stages =
      FindIncludingConfig(dir.Sub("ci/frag.yml"), dir.path());
  ASSERT_TRUE(own_stages.has_value());
  EXPECT_THAT(own_stages->stages, ::testing::Optional(ElementsAre("build")));
  fragment.including = &*own_stages;
  ASSERT_EQ(LintCiYaml(staged, fragment).errors.size(), 1u);
  test::WriteTextFile(dir.Sub(".gitlab-ci.yml"),
                      ".s: [test]\ninclude: [t.yml, ci/frag.yml]\n"
                      "stages: !reference [.s]\n");
  const std::optional<CiIncludingConfig> referenced =
      FindIncludingConfig(dir.Sub("ci/frag.yml"), dir.path());
  ASSERT_TRUE(referenced.has_value());
  EXPECT_FALSE(referenced->stages.has_value());
  fragment.including = &*referenced;
  EXPECT_TRUE(LintCiYaml(staged, fragment).ok());
  test::WriteTextFile(dir.Sub("ci/frag.yml"), frag);
  // Nothing to say when the main file has an include gdt does not read.
  test::WriteTextFile(dir.Sub(".gitlab-ci.yml"),
                      "include: [t.yml, ci/frag.yml, {template: X.yml}]\n");
  const std::optional<CiIncludingConfig> partly =
      FindIncludingConfig(dir.Sub("ci/frag.yml"), dir.path());
  ASSERT_TRUE(partly.has_value());
  EXPECT_TRUE(partly->unseen);
  fragment.including = &*partly;
  EXPECT_TRUE(LintCiYaml(frag, fragment).ok());
  // The main file itself, and a file it does not include, have no
  // including configuration.
  EXPECT_FALSE(
      FindIncludingConfig(dir.Sub(".gitlab-ci.yml"), dir.path()).has_value());
  test::WriteTextFile(dir.Sub("other.yml"), frag);
  EXPECT_FALSE(
      FindIncludingConfig(dir.Sub("other.yml"), dir.path()).has_value());
}

// A file that only a job's `trigger:include` reads is a child pipeline's
// configuration: GitLab reads it with the other files of that
// `trigger:include` and their own includes, never with the parent's.
TEST(GitLabRefusesTest, AChildPipelinesFileIsReadWithItsOwnConfiguration) {
  test::TempDir dir;
  fs::create_directories(dir.Sub("ci/child"));
  // The parent: a template of its own, and a trigger template that a job
  // extends, giving the child's path through a variable it forwards.
  test::WriteTextFile(
      dir.Sub(".gitlab-ci.yml"),
      "include: [ci/parent.yml]\n"
      ".start-child:\n  trigger:\n    include:\n"
      "      - local: ci/child/main.yml\n"
      "      - local: ci/child/$FLAVOUR.yml\n    strategy: depend\n"
      "child-gpu:\n  extends: .start-child\n  variables: {FLAVOUR: gpu}\n"
      "stages: [test, release]\n");
  test::WriteTextFile(dir.Sub("ci/parent.yml"),
                      ".parent-only:\n  tags: [cpu]\n");
  // The child's files: its main file includes a file of its own and
  // extends templates of both that file and its trigger:include sibling.
  const std::string child =
      "include: [ci/child/templates.yml]\n"
      "train:\n  extends: [.child-base, .gpu]\n  script: [x]\n";
  test::WriteTextFile(dir.Sub("ci/child/main.yml"), child);
  test::WriteTextFile(dir.Sub("ci/child/templates.yml"),
                      ".child-base:\n  image: pytorch\n");
  test::WriteTextFile(dir.Sub("ci/child/gpu.yml"),
                      ".gpu:\n  tags: [a100]\n"
                      "grandchild:\n  trigger:\n"
                      "    include: ci/child/grand.yml\n");
  test::WriteTextFile(dir.Sub("ci/child/grand.yml"),
                      "eval:\n  extends: .gpu\n  script: [x]\n");

  const auto lint = [&](const std::string& path, const std::string& text) {
    const CiIncludes includes = ReadLocalIncludes(path, text, dir.path());
    EXPECT_TRUE(includes.ok());
    const std::optional<CiIncludingConfig> including =
        FindIncludingConfig(dir.Sub(path), dir.path());
    CiExpandOptions options;
    options.includes = &includes;
    if (including.has_value()) options.including = &*including;
    std::vector<std::string> found;
    for (const CiDiagnostic& d : LintCiYaml(text, options).errors) {
      found.push_back(FormatDiagnostic(path, d));
    }
    return found;
  };
  const std::optional<CiIncludingConfig> config =
      FindIncludingConfig(dir.Sub("ci/child/main.yml"), dir.path());
  ASSERT_TRUE(config.has_value());
  EXPECT_EQ(config->trigger_job, "child-gpu");
  EXPECT_EQ(config->names.count(".gpu"), 1u);
  EXPECT_EQ(config->names.count(".child-base"), 1u);
  EXPECT_EQ(config->names.count(".parent-only"), 0u);
  // Nor its stages: the child's are GitLab's default ones.
  EXPECT_THAT(config->stages,
              ::testing::Optional(ElementsAre("build", "test", "deploy")));
  EXPECT_FALSE(config->unseen);
  EXPECT_THAT(lint("ci/child/main.yml", child), ::testing::IsEmpty());

  // The parent's template is not there for the child.
  const std::string uses_parent =
      "include: [ci/child/templates.yml]\n"
      "train:\n  extends: [.child-base, .parent-only]\n  script: [x]\n";
  test::WriteTextFile(dir.Sub("ci/child/main.yml"), uses_parent);
  EXPECT_THAT(
      lint("ci/child/main.yml", uses_parent),
      ::testing::ElementsAre(
          "ci/child/main.yml:3:12: train: unknown keys in `extends` "
          "(.parent-only): not in this file nor in the other files of the "
          "child pipeline that job 'child-gpu' of .gitlab-ci.yml starts "
          "(trigger:include), so GitLab refuses it; a child pipeline does "
          "not see its parent's templates"));

  // A child pipeline's own child pipeline (GitLab nests two levels) is
  // read with its own trigger:include alone.
  const std::optional<CiIncludingConfig> grand =
      FindIncludingConfig(dir.Sub("ci/child/grand.yml"), dir.path());
  ASSERT_TRUE(grand.has_value());
  EXPECT_EQ(grand->trigger_job, "grandchild");
  EXPECT_EQ(grand->names.count(".gpu"), 0u);
  EXPECT_EQ(
      lint("ci/child/grand.yml", "eval:\n  extends: .gpu\n  script: [x]\n")
          .size(),
      1u);

  // Without the variable the path is not known: the configuration has an
  // include gdt does not read, and lint says nothing of the names.
  test::WriteTextFile(dir.Sub(".gitlab-ci.yml"),
                      "include: [ci/parent.yml]\n"
                      "child-gpu:\n  trigger:\n    include:\n"
                      "      - local: ci/child/main.yml\n"
                      "      - local: ci/child/$FLAVOUR.yml\n");
  const std::optional<CiIncludingConfig> unseen =
      FindIncludingConfig(dir.Sub("ci/child/main.yml"), dir.path());
  ASSERT_TRUE(unseen.has_value());
  EXPECT_TRUE(unseen->unseen);
  EXPECT_THAT(lint("ci/child/main.yml", uses_parent), ::testing::IsEmpty());
  // A file that no trigger reads has no configuration but its own.
  EXPECT_FALSE(FindIncludingConfig(dir.Sub("ci/child/grand.yml"), dir.path())
                   .has_value());
}

// What a child pipeline's include paths and rules see is what GitLab gives
// the child: the trigger job's YAML variables unless forward:yaml_variables
// is false, the parent's pipeline variables only with
// forward:pipeline_variables (over the YAML ones), the top-level variables
// that inherit:variables lets the job have, and CI_PIPELINE_SOURCE
// parent_pipeline.
TEST(GitLabRefusesTest, AChildPipelineSeesTheVariablesItsTriggerForwards) {
  test::TempDir dir;
  fs::create_directories(dir.Sub("ci/child"));
  test::WriteTextFile(dir.Sub("ci/child/main.yml"), "train:\n  script: [x]\n");
  test::WriteTextFile(dir.Sub("ci/child/gpu.yml"), ".gpu:\n  tags: [a100]\n");
  test::WriteTextFile(dir.Sub("ci/child/cpu.yml"), ".cpu:\n  tags: [cpu]\n");
  const auto child_names = [&](const std::string& parent,
                               const CiIncludeVariables& known) {
    test::WriteTextFile(dir.Sub(".gitlab-ci.yml"), parent);
    const std::optional<CiIncludingConfig> config =
        FindIncludingConfig(dir.Sub("ci/child/main.yml"), dir.path(), known);
    if (!config.has_value()) return std::string("none");
    if (config->unseen) return std::string("unseen");
    std::string names;
    for (const char* name : {".gpu", ".cpu"}) {
      if (config->names.count(name) != 0) names += name;
    }
    return names;
  };
  const std::string include =
      "  trigger:\n    include:\n      - local: ci/child/main.yml\n"
      "      - local: ci/child/$FLAVOUR.yml\n";
  CiIncludeVariables pipeline_gpu;
  pipeline_gpu.pipeline["FLAVOUR"] = "gpu";

  // The parent's pipeline variable stays in the parent by default.
  EXPECT_EQ(child_names("start:\n" + include, pipeline_gpu), "unseen");
  EXPECT_EQ(child_names("start:\n" + include +
                            "    forward: {pipeline_variables: true}\n",
                        pipeline_gpu),
            ".gpu");
  // The job's own variable is forwarded, unless yaml_variables is false.
  EXPECT_EQ(child_names("start:\n  variables: {FLAVOUR: cpu}\n" + include,
                        pipeline_gpu),
            ".cpu");
  EXPECT_EQ(child_names("start:\n  variables: {FLAVOUR: cpu}\n" + include +
                            "    forward: {yaml_variables: false}\n",
                        {}),
            "unseen");
  // Forwarded pipeline variables win over the job's.
  EXPECT_EQ(child_names("start:\n  variables: {FLAVOUR: cpu}\n" + include +
                            "    forward: {pipeline_variables: true}\n",
                        pipeline_gpu),
            ".gpu");
  // Top-level variables: all, none, or those inherit:variables names.
  const std::string top = "variables: {FLAVOUR: gpu}\nstart:\n";
  EXPECT_EQ(child_names(top + include, {}), ".gpu");
  EXPECT_EQ(child_names(top + "  inherit: {variables: false}\n" + include, {}),
            "unseen");
  EXPECT_EQ(
      child_names(top + "  inherit: {variables: [FLAVOUR]}\n" + include, {}),
      ".gpu");
  EXPECT_EQ(
      child_names(top + "  inherit: {variables: [OTHER]}\n" + include, {}),
      "unseen");

  // The child is started by its parent, whatever started the parent.
  CiIncludeVariables pushed;
  pushed.predefined["CI_PIPELINE_SOURCE"] = "push";
  const std::string by_source = [] {
    std::string rules;
    for (const char* flavour : {"gpu", "cpu"}) {
      rules += absl::StrCat(
          "      - local: ci/child/", flavour, ".yml\n        rules:\n",
          "          - if: $CI_PIPELINE_SOURCE == \"",
          std::string(flavour) == "gpu" ? "parent_pipeline" : "push", "\"\n");
    }
    return "start:\n  trigger:\n    include:\n"
           "      - local: ci/child/main.yml\n" +
           rules;
  }();
  EXPECT_EQ(child_names(by_source, pushed), ".gpu");
  pushed.complete = true;
  EXPECT_EQ(child_names(by_source, pushed), ".gpu");

  // gdt-ci's --var: a predefined name (the branch) is the child's too, as
  // it runs on the same commit; another name is a pipeline variable.
  const CiIncludeVariables given =
      PipelineVariablesOf({{"CI_COMMIT_BRANCH", "main"}, {"FLAVOUR", "cpu"}});
  EXPECT_EQ(given.predefined.at("CI_COMMIT_BRANCH"), "main");
  EXPECT_EQ(given.pipeline.at("FLAVOUR"), "cpu");
  EXPECT_EQ(child_names("start:\n  trigger:\n    include:\n"
                        "      - local: ci/child/main.yml\n"
                        "      - local: ci/child/gpu.yml\n"
                        "        rules:\n"
                        "          - if: $CI_COMMIT_BRANCH == \"main\"\n",
                        given),
            ".gpu");
}

// GitLab refuses a `workflow:name` longer than 255 characters (counted as
// characters, not bytes) as written, before expanding variables in it.
TEST(GitLabRefusesTest, AWorkflowNameOver255CharactersIsRefused) {
  const auto file = [](const std::string& name) {
    return "workflow:\n  name: \"" + name + "\"\njob:\n  script: [x]\n";
  };
  std::string at_limit;
  for (int i = 0; i < 255; ++i) at_limit += "\xc3\xa9";  // 255 x U+00E9.
  EXPECT_TRUE(LintCiYaml(file(at_limit)).ok());
  EXPECT_TRUE(LintCiYaml(file("")).ok());
  const CiExpansion lint = LintCiYaml(file(at_limit + "x"));
  ASSERT_EQ(lint.errors.size(), 1u);
  EXPECT_EQ(FormatDiagnostic("f", lint.errors[0]),
            "f:2:9: workflow name is too long (maximum is 255 characters; "
            "this one has 256), so GitLab refuses the file");
  // Variables are expanded only when the pipeline is created.
  EXPECT_TRUE(LintCiYaml(file("$A$B")).ok());
}

// GitLab merges `workflow` of the included files under the main file's
// and checks the merged name: an included file's long name is refused,
// unless the main file (or a file merged after it) gives its own name.
TEST(GitLabRefusesTest, AnIncludedWorkflowNameOver255CharactersIsRefused) {
  test::TempDir dir;
  const std::string long_name(256, 'n');
  test::WriteTextFile(dir.Sub("long.yml"),
                      "workflow:\n  name: " + long_name + "\n");
  test::WriteTextFile(dir.Sub("short.yml"), "workflow:\n  name: short\n");
  const auto lint = [&](const std::string& main) {
    const CiIncludes includes =
        ReadLocalIncludes(".gitlab-ci.yml", main, dir.path());
    EXPECT_TRUE(includes.ok());
    CiExpandOptions options;
    options.includes = &includes;
    std::vector<std::string> found;
    for (const CiDiagnostic& d : LintCiYaml(main, options).errors) {
      found.push_back(FormatDiagnostic(".gitlab-ci.yml", d));
    }
    return found;
  };
  const std::string job = "job:\n  script: [x]\n";
  const std::vector<std::string> refused = {
      "long.yml:2:9: workflow name is too long (maximum is 255 characters; "
      "this one has 256), so GitLab refuses the file"};
  EXPECT_EQ(lint("include: [long.yml]\n" + job), refused);
  // The main file's workflow: without a name keeps the included one.
  EXPECT_EQ(
      lint("include: [long.yml]\nworkflow:\n  rules: [{when: always}]\n" + job),
      refused);
  // A name written later wins, and is the one checked.
  EXPECT_THAT(lint("include: [long.yml, short.yml]\n" + job),
              ::testing::IsEmpty());
  EXPECT_EQ(lint("include: [short.yml, long.yml]\n" + job), refused);
  EXPECT_THAT(lint("include: [long.yml]\nworkflow:\n  name: mine\n" + job),
              ::testing::IsEmpty());
}

TEST(GitLabReadsTest, TopLevelGdtVariablesDoNotChangeABlocksGang) {
  // Top-level variables reach every job: the block's job writes the GDT_*
  // names it does not set empty (unset), unless the job sets them itself.
  const std::string text =
      "variables:\n  GDT_TOPOLOGY_SAME: rack\n  GDT_NODES_MIN: \"1\"\n"
      "  GDT_PRIORITY: \"3\"\n  DATA: /d\n"
      "train:\n  parallel:\n    distributed: {nodes: 4, gpus_per_node: 8}\n"
      "  variables:\n    GDT_PRIORITY: \"5\"\n  script: [x]\n"
      "solo:\n  inherit: {variables: false}\n  parallel:\n"
      "    distributed: {nodes: 2}\n  script: [x]\n";
  const CiExpansion expand = ExpandCiYaml(text);
  ASSERT_TRUE(expand.ok()) << expand.errors[0].message;
  const CiValue train = GitLabJob(expand.text, "train")["variables"];
  EXPECT_EQ(train.value("GDT_TOPOLOGY_SAME", "?"), "");
  EXPECT_EQ(train.value("GDT_NODES_MIN", "?"), "");
  EXPECT_EQ(train.value("GDT_PRIORITY", "?"), "5");
  EXPECT_FALSE(train.contains("DATA"));
  EXPECT_FALSE(
      GitLabJob(expand.text, "solo")["variables"].contains("GDT_NODES_MIN"));
  const CiExpansion lint = LintCiYaml(text);
  ASSERT_TRUE(lint.ok()) << lint.errors[0].message;
  EXPECT_EQ(lint.gangs[0].Describe(),
            "4 nodes x 8 GPUs, 8 processes per node (world size 32), launcher "
            "torchrun");
}

TEST(GitLabReadsTest, WorkflowRulesVariablesDoNotChangeABlocksGang) {
  // A matching workflow rule's variables are the pipeline's, as top-level
  // ones are: every job that inherits those gets them.
  const std::string text =
      "workflow:\n  rules:\n    - if: $CI_COMMIT_BRANCH == \"main\"\n"
      "      variables:\n        GDT_PRIORITY: \"100\"\n"
      "        GDT_TOPOLOGY_SAME: rack\n    - when: always\n"
      "train:\n  parallel:\n    distributed: {nodes: 2}\n  script: [x]\n"
      "solo:\n  inherit: {variables: [OTHER]}\n  parallel:\n"
      "    distributed: {nodes: 2}\n  script: [x]\n";
  const CiExpansion expand = ExpandCiYaml(text);
  ASSERT_TRUE(expand.ok()) << expand.errors[0].message;
  const CiValue train = GitLabJob(expand.text, "train")["variables"];
  EXPECT_EQ(train.value("GDT_PRIORITY", "?"), "");
  EXPECT_EQ(train.value("GDT_TOPOLOGY_SAME", "?"), "");
  EXPECT_FALSE(
      GitLabJob(expand.text, "solo")["variables"].contains("GDT_PRIORITY"));
  // Lint checks them as it checks top-level variables.
  const CiExpansion lint = LintCiYaml(
      "workflow:\n  rules:\n    - variables:\n        GDT_PRIOITY: \"1\"\n");
  ASSERT_EQ(lint.errors.size(), 1u);
  EXPECT_EQ(FormatDiagnostic("f", lint.errors[0]),
            "f:4:9: workflow: rules[0]: unknown gdt variable GDT_PRIOITY (did "
            "you mean 'GDT_PRIORITY'?)");
}

TEST(GitLabReadsTest, ArtifactsByReferenceGainTheCheckpoints) {
  // GitLab puts the mapping a `!reference` names in its place.
  const std::string text =
      ".art:\n  artifacts:\n    paths: [logs/]\n    reports:\n"
      "      junit: j.xml\n"
      "train:\n  artifacts: !reference [.art, artifacts]\n  parallel:\n"
      "    distributed: {nodes: 2, checkpoint: {}}\n  script: [x]\n";
  const CiExpansion expand = ExpandCiYaml(text);
  ASSERT_TRUE(expand.ok()) << expand.errors[0].message;
  const CiValue artifacts = GitLabJob(expand.text, "train")["artifacts"];
  EXPECT_EQ(artifacts["paths"], CiValue::array({"logs/", "checkpoints/"}));
  EXPECT_EQ(artifacts["reports"]["junit"], "j.xml");
  EXPECT_EQ(artifacts["when"], "always");
}

TEST(GitLabReadsTest, TagsWithNoValueTakeDefaultsTags) {
  const std::string text =
      "default:\n  tags: [docker]\ntrain:\n  tags:\n  #  - a100\n"
      "  retry: 0\n  parallel:\n    distributed: {nodes: 2}\n"
      "  script: [x]\n";
  const CiExpansion expand = ExpandCiYaml(text);
  ASSERT_TRUE(expand.ok()) << expand.errors[0].message;
  EXPECT_EQ(GitLabJob(expand.text, "train")["tags"],
            CiValue::array({"docker", "gdt"}));
  // Without default: tags, the runner tag alone.
  const CiExpansion bare = ExpandCiYaml(
      "train:\n  tags:\n  parallel:\n    distributed: {nodes: 2}\n"
      "  script: [x]\n");
  ASSERT_TRUE(bare.ok()) << bare.errors[0].message;
  EXPECT_EQ(GitLabJob(bare.text, "train")["tags"], CiValue::array({"gdt"}));
}

TEST(LintTest, HiddenTemplatesWithTheBlockAreNotListed) {
  const CiExpansion lint = LintCiYaml(
      ".gang:\n  parallel:\n    distributed:\n      nodes: 2\n"
      "      topology: {same: rack}\n"
      "train:\n  extends: .gang\n  script: [x]\n");
  ASSERT_TRUE(lint.ok()) << lint.errors[0].message;
  EXPECT_EQ(FormatLintReport("f", lint, false),
            "f:6: train: 2 nodes x 0 GPUs, 1 process per node (world size 2), "
            "launcher torchrun, same rack (required) [parallel:distributed]\n"
            "f: ok (1 gang job)\n");
}

TEST(ExpandTest, ATabInsideABlockScalarIsContent) {
  // A Makefile recipe in a `|` script: GitLab's YAML reader takes the tab
  // as content, and so does gdt; the bytes stay.
  const std::string text =
      "train:\n  parallel:\n    distributed: {nodes: 2}\n"
      "  script: [torchrun t.py]\nbuild:\n  script:\n    - |\n"
      "      cat > Makefile <<-EOF\n      all:\n      \techo hi\n"
      "      EOF\n";
  EXPECT_TRUE(LintCiYaml(text).ok());
  const CiExpansion expand = ExpandCiYaml(text);
  ASSERT_TRUE(expand.ok()) << expand.errors[0].message;
  EXPECT_THAT(expand.text,
              HasSubstr("build:\n  script:\n    - |\n      cat > Makefile "
                        "<<-EOF\n      all:\n      \techo hi\n      EOF\n"));
  // A tab that indents a key is still one line at its place.
  const CiExpansion bad = LintCiYaml("train:\n  script: [x]\n\tstage: a\n");
  ASSERT_EQ(bad.errors.size(), 1u);
  EXPECT_EQ(FormatDiagnostic("f", bad.errors[0]),
            "f:3:1: tab character in indentation; YAML indents with spaces "
            "only");
}

TEST(ExpandTest, AReferenceBombIsOneLine) {
  // Ten levels of lists that reference the level below ten times: 10^10
  // values from a 1 KB file.
  std::string text = ".r0:\n  tags: [a, b, c, d, e, f, g, h, i, j]\n";
  for (int level = 1; level < 10; ++level) {
    text += absl::StrCat(".r", level, ":\n  tags: [");
    for (int i = 0; i < 10; ++i) {
      text += absl::StrCat(i == 0 ? "" : ", ", "!reference [.r", level - 1,
                           ", tags]");
    }
    text += "]\n";
  }
  text +=
      "train:\n  parallel: {distributed: {nodes: 2}}\n"
      "  tags: !reference [.r9, tags]\n  script: [x]\n";
  const auto start = std::chrono::steady_clock::now();
  for (const CiExpansion& r : {LintCiYaml(text), ExpandCiYaml(text)}) {
    ASSERT_EQ(r.errors.size(), 1u);
    EXPECT_THAT(r.errors[0].message,
                HasSubstr(": its !reference values stand for more than "
                          "100000 values (a reference bomb?)"));
  }
  // Generous for sanitizer builds on loaded cores; it ran for minutes.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
}

TEST(LintTest, AManualGangIsAWarning) {
  const CiExpansion lint = LintCiYaml(
      "train:\n  when: manual\n  parallel:\n    distributed: {nodes: 8}\n"
      "  script: [x]\n");
  ASSERT_TRUE(lint.ok()) << lint.errors[0].message;
  ASSERT_EQ(lint.warnings.size(), 1u);
  EXPECT_EQ(FormatDiagnostic("f", lint.warnings[0]),
            "f:2:3: train: when: manual makes 8 manual jobs, one per member, "
            "each to be played by hand; the gang forms only when 8 of them "
            "are played (the played ones wait for the rest, up to the gang's "
            "join timeout)");
  EXPECT_THAT(FormatLintReport("f", lint, false),
              HasSubstr("f:2:3: warning: train: when: manual makes 8"));
  EXPECT_EQ(nlohmann::json::parse(
                FormatLintReport("f", lint, true))["warnings"][0]["line"],
            2);
  EXPECT_TRUE(ExpandCiYaml("train:\n  when: manual\n  parallel:\n"
                           "    distributed: {nodes: 8}\n  script: [x]\n")
                  .ok());
}

TEST(GitLabRefusesTest, TagsReferencedFromAGangAreOneLine) {
  const std::string text =
      ".gpu:\n  tags: [a100]\n  parallel:\n"
      "    distributed: {nodes: 4, gpus_per_node: 8}\n"
      "train:\n  extends: .gpu\n  script: [t]\n"
      "prepare-data:\n  tags: !reference [.gpu, tags]\n  script: [p]\n";
  for (const CiExpansion& r : {LintCiYaml(text), ExpandCiYaml(text)}) {
    ASSERT_EQ(r.errors.size(), 1u);
    EXPECT_EQ(FormatDiagnostic("f", r.errors[0]),
              "f:9:20: prepare-data: its tags are a !reference to .gpu's, "
              "which has parallel:distributed, so after expansion they carry "
              "the runner tag gdt and the job would run on gdt as an "
              "unplanned one-member gang; write its tags out");
  }
  // A reference to a template without the block is fine.
  EXPECT_TRUE(LintCiYaml(".cpu:\n  tags: [big]\nprep:\n"
                         "  tags: !reference [.cpu, tags]\n  script: [p]\n")
                  .ok());
}

// A job that is no gang and takes its variables or artifacts by
// !reference from a gang job (directly or through a template it extends)
// keeps what it had: GitLab resolves the reference in the expanded file,
// where the gang's entries hold gdt's additions, so expand writes the
// entry out as the reference read before.
TEST(ExpandTest, VariablesReferencedFromAGangKeepTheUsersOnly) {
  const std::string text =
      "train:\n  parallel:\n    distributed:\n      nodes: 2\n"
      "      gpus_per_node: 8\n      checkpoint: {}\n"
      "  variables:\n    DATA: /data\n    MODE: {value: fast, expand: false}\n"
      "  artifacts:\n    paths: [logs/]\n  script: [t]\n"
      "eval:\n  variables: !reference [train, variables]\n"
      "  artifacts: !reference [train, artifacts]\n  script: [e]\n"
      ".base:\n  variables: !reference [train, variables]\n"
      "report:\n  extends: .base\n  script: [r]\n";
  const CiExpansion expansion = ExpandCiYaml(text);
  ASSERT_TRUE(expansion.ok()) << expansion.errors[0].message;
  EXPECT_THAT(expansion.text,
              HasSubstr("eval:\n  variables: {\"DATA\": \"/data\", \"MODE\": "
                        "{\"value\": \"fast\", \"expand\": false}}\n"
                        "  artifacts: {\"paths\": [\"logs/\"]}\n"));
  for (const char* job : {"eval", "report"}) {
    SCOPED_TRACE(job);
    const auto before = EffectiveJobConfig(text, job);
    const auto after = EffectiveJobConfig(expansion.text, job);
    ASSERT_TRUE(before.ok() && after.ok());
    EXPECT_EQ(after->config, before->config);
    EXPECT_FALSE(after->config["variables"].contains("GDT_GPUS_PER_NODE"));
  }
  // The gang itself still gets gdt's variables and checkpoints/.
  const auto train = EffectiveJobConfig(expansion.text, "train");
  ASSERT_TRUE(train.ok());
  EXPECT_EQ(train->config["variables"]["GDT_GPUS_PER_NODE"], "8");
  EXPECT_EQ(train->config["artifacts"]["paths"],
            CiValue::parse(R"(["logs/", "checkpoints/"])"));
  // Expanding again changes nothing.
  const CiExpansion again = ExpandCiYaml(expansion.text);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again.text, expansion.text);
}

// GitLab takes a script nested at most 10 levels deep (the list and 9
// more), also where `!reference`s to lists nest it: a chain of references
// one longer is refused at the job's script.
TEST(LintTest, ScriptsNestAtMostTenLevelsThroughReferences) {
  const auto chain = [](int lists) {
    std::string text = ".s1:\n  - echo test\n";
    for (int i = 2; i < lists; ++i) {
      absl::StrAppend(&text, ".s", i, ":\n  - !reference [.s", i - 1, "]\n");
    }
    absl::StrAppend(&text, "test:\n  script:\n    - !reference [.s", lists - 1,
                    "]\n");
    return text;
  };
  const CiExpansion ten = LintCiYaml(chain(10));
  EXPECT_TRUE(ten.ok()) << ten.errors[0].message;
  const CiExpansion eleven = LintCiYaml(chain(11));
  ASSERT_EQ(eleven.errors.size(), 1u);
  EXPECT_EQ(FormatDiagnostic("f", eleven.errors[0]),
            "f:23:5: jobs:test:script config should be a string or a nested "
            "array of strings up to 10 levels deep, not one that its "
            "!reference values nest deeper (GitLab refuses the pipeline)");
  // Written out: ten lists are fine, eleven are not.
  EXPECT_TRUE(LintCiYaml("a:\n  script: [[[[[[[[[[x]]]]]]]]]]\n").ok());
  const CiExpansion written =
      LintCiYaml("a:\n  script: [[[[[[[[[[[x]]]]]]]]]]]\n");
  ASSERT_EQ(written.errors.size(), 1u);
  EXPECT_THAT(written.errors[0].message,
              HasSubstr("jobs:a:script config should be a string or a nested "
                        "array of strings up to 10 levels deep, not a list"));
}

// A `spec: inputs:` header: GitLab fills `$[[ inputs.x ]]` in before the
// jobs exist. A plain-form gang is checked with each input's default; a
// block cannot take one (expand writes the gang from its values first).
TEST(LintTest, ComponentInputsInParallel) {
  const std::string spec = "spec:\n  inputs:\n    n:\n      default: 2\n---\n";
  // Not a gang: GitLab checks the number after interpolation.
  EXPECT_TRUE(LintCiYaml(spec + "test_job:\n  parallel: $[[ inputs.n ]]\n"
                                "  script: [x]\n")
                  .ok());
  const CiExpansion block =
      LintCiYaml(spec +
                 "train:\n  parallel:\n    distributed:\n"
                 "      nodes: $[[ inputs.n ]]\n  script: [x]\n");
  ASSERT_EQ(block.errors.size(), 1u);
  EXPECT_EQ(FormatDiagnostic("f", block.errors[0]),
            "f:9:14: train: parallel:distributed does not support CI/CD "
            "component inputs ($[[ inputs.n ]]): gdt writes the gang before "
            "GitLab fills them in; write the value (input 'n' defaults to "
            "'2') in the block, or write the gang in the plain form "
            "(parallel: N and GDT_* variables), which may use inputs");
  EXPECT_EQ(FormatDiagnostic("f", ExpandCiYaml(spec + "train:\n  parallel:\n"
                                                      "    distributed:\n"
                                                      "      nodes: "
                                                      "$[[ inputs.n ]]\n")
                                      .errors.at(0)),
            FormatDiagnostic("f", block.errors[0]));
  // The plain form: the gang as GitLab makes it with the default.
  const CiExpansion plain = LintCiYaml(spec +
                                       "train:\n  parallel: $[[ inputs.n ]]\n"
                                       "  tags: [gdt]\n  script: [x]\n");
  ASSERT_TRUE(plain.ok()) << plain.errors[0].message;
  ASSERT_EQ(plain.gangs.size(), 1u);
  EXPECT_EQ(plain.gangs[0].nodes, 2);
  EXPECT_TRUE(plain.warnings.empty());
  // Over the cluster's maximum, by default.
  const CiExpansion over = LintCiYaml(
      spec +
          "train:\n  parallel: $[[ inputs.n ]]\n  tags: [gdt]\n  script: [x]\n",
      {.max_nodes = 1});
  ASSERT_EQ(over.errors.size(), 1u);
  EXPECT_EQ(over.errors[0].message,
            "train: parallel is 2 (the default of input 'n') but this cluster "
            "allows at most 1 nodes per job (--max-nodes)");
  // An input without a default: a warning, the file passes.
  const CiExpansion required = LintCiYaml(
      "spec:\n  inputs:\n    n:\n---\n"
      "train:\n  parallel: $[[ inputs.n ]]\n  tags: [gdt]\n  script: [x]\n");
  ASSERT_TRUE(required.ok()) << required.errors[0].message;
  ASSERT_EQ(required.warnings.size(), 1u);
  EXPECT_EQ(FormatDiagnostic("f", required.warnings[0]),
            "f:6:13: train: parallel is set from an input (input 'n' has no "
            "default), so gdt cannot check the gang's size before the job "
            "runs");
  // No header: GitLab leaves the text as it is, which is no number.
  const CiExpansion headless = LintCiYaml(
      "train:\n  parallel: $[[ inputs.n ]]\n  tags: [gdt]\n  script: [x]\n");
  ASSERT_EQ(headless.errors.size(), 1u);
  EXPECT_THAT(headless.errors[0].message,
              HasSubstr("the file has no spec: inputs header, so GitLab does "
                        "not fill in input 'n'"));
}

TEST(LintTest, ComponentInputsInGdtVariables) {
  const std::string spec =
      "spec:\n  inputs:\n    gpus:\n      default: 8\n"
      "    launcher:\n      default: torchrn\n    free:\n---\n";
  // The default is what the gang gets when no value is passed.
  const CiExpansion gpus = LintCiYaml(
      spec +
      "train:\n  parallel: 2\n  tags: [gdt]\n  script: [x]\n  variables:\n"
      "    GDT_GPUS_PER_NODE: $[[ inputs.gpus ]]\n"
      "    GDT_NPROC_PER_NODE: \"$[[ inputs.gpus ]]\"\n");
  ASSERT_TRUE(gpus.ok()) << gpus.errors[0].message;
  ASSERT_EQ(gpus.gangs.size(), 1u);
  EXPECT_EQ(gpus.gangs[0].gpus_per_node, 8);
  EXPECT_EQ(gpus.gangs[0].procs_per_node, 8);
  // A wrong default is reported as such, in the job's own block too.
  for (const std::string& job :
       {std::string("train:\n  parallel: 2\n  tags: [gdt]\n  script: [x]\n"),
        std::string("train:\n  script: [x]\n  parallel:\n    distributed: "
                    "{nodes: 2}\n")}) {
    const CiExpansion launcher =
        LintCiYaml(spec + job +
                   "  variables:\n    GDT_TOPOLOGY_SAME: rack\n"
                   "    GDT_TOPOLOGY_MODE: $[[ inputs.launcher ]]\n");
    ASSERT_EQ(launcher.errors.size(), 1u) << job;
    EXPECT_EQ(launcher.errors[0].message,
              "train: GDT_TOPOLOGY_MODE must be one of required, preferred, "
              "not 'torchrn' (the default of input 'launcher')");
  }
  // Without a default, or through input functions: unchecked, a warning.
  const CiExpansion free = LintCiYaml(
      spec +
      "train:\n  parallel: 2\n  tags: [gdt]\n  script: [x]\n  variables:\n"
      "    GDT_PRIORITY: $[[ inputs.free ]]\n"
      "    GDT_GPUS_PER_NODE: $[[ inputs.gpus | expand_vars ]]\n");
  ASSERT_TRUE(free.ok()) << free.errors[0].message;
  ASSERT_EQ(free.warnings.size(), 2u);
  EXPECT_EQ(free.warnings[0].message,
            "train: GDT_PRIORITY is set from an input (input 'free' has no "
            "default), so gdt cannot check it; gdt-executor checks the value "
            "when the job runs");
  EXPECT_THAT(free.warnings[1].message,
              HasSubstr("input 'gpus' goes through input functions"));
  // An input the header does not declare: GitLab refuses the file.
  const CiExpansion unknown = LintCiYaml(
      spec +
      "train:\n  parallel: 2\n  tags: [gdt]\n  script: [x]\n  variables:\n"
      "    GDT_PRIORITY: $[[ inputs.prio ]]\n");
  ASSERT_EQ(unknown.errors.size(), 1u);
  EXPECT_EQ(unknown.errors[0].message,
            "train: GDT_PRIORITY: input 'prio' is not declared in the file's "
            "spec: inputs header, so GitLab refuses the file");
}

// A file with a spec: header takes inputs: GitLab fills in every block of
// its configuration and refuses the pipeline for one that names no
// declared input, but leaves the matrix context (and a component's data)
// as written.
TEST(LintTest, HeaderInterpolationsNameDeclaredInputs) {
  const std::string spec =
      "spec:\n  inputs:\n    stage:\n      default: test\n---\n";
  const CiExpansion lint =
      LintCiYaml(spec +
                 "job:\n  stage: $[[ inputs.stage ]]\n"
                 "  script:\n    - echo $[[ inputs.nope ]]\n"
                 "    - echo $[[ env.HOME ]] $[[ inputs ]]\n"
                 "  needs:\n    - job: b\n      parallel:\n        matrix:\n"
                 "          - OS: '$[[ matrix.OS ]] $[[ matrix ]]'\n"
                 "b:\n  script: [x]\n");
  ASSERT_EQ(lint.errors.size(), 3u);
  EXPECT_EQ(FormatDiagnostic("f", lint.errors[0]),
            "f:9:7: '$[[ inputs.nope ]]': unknown interpolation key: `nope` "
            "(the spec: inputs header does not declare it); GitLab fills in "
            "this file's $[[ ... ]] from its spec: inputs header and refuses "
            "the pipeline");
  EXPECT_THAT(lint.errors[1].message,
              HasSubstr("'$[[ env.HOME ]]': unknown interpolation key: `env`"));
  EXPECT_THAT(lint.errors[2].message,
              HasSubstr("'$[[ inputs ]]': invalid interpolation access "
                        "pattern"));
  // Without a header GitLab leaves the text as written.
  EXPECT_TRUE(LintCiYaml("job:\n  script: echo $[[ inputs.nope ]]\n").ok());
}

// GitLab fills in `$[[ component.FIELD ]]` for the fields the header's
// `spec: component:` lists (name, sha, version, reference), and only when
// the file is included as a CI/CD component: lint warns at a listed field
// (the file may be such a component) and refuses any other.
TEST(LintTest, ComponentDataIsCheckedAgainstTheHeader) {
  const std::string job =
      "---\njob:\n  script:\n    - echo $[[ component.name ]]\n"
      "    - echo $[[ component.version ]]\n";
  const CiExpansion listed =
      LintCiYaml("spec:\n  component: [name, version]\n" + job);
  ASSERT_TRUE(listed.ok()) << listed.errors[0].message;
  ASSERT_EQ(listed.warnings.size(), 2u);
  EXPECT_EQ(FormatDiagnostic("f", listed.warnings[0]),
            "f:6:7: '$[[ component.name ]]': GitLab fills in the component "
            "context only when the file is included as a CI/CD component "
            "(include: component:); as a project's pipeline or a local "
            "include GitLab refuses the file");
  const CiExpansion unlisted = LintCiYaml("spec:\n  component: [name]\n" + job);
  ASSERT_EQ(unlisted.errors.size(), 1u);
  EXPECT_THAT(FormatDiagnostic("f", unlisted.errors[0]),
              HasSubstr("f:7:7: '$[[ component.version ]]': unknown "
                        "interpolation key: `version`"));
  const CiExpansion none = LintCiYaml("spec:\n  inputs: {}\n" + job);
  EXPECT_EQ(none.errors.size(), 2u);  // One for each field.
  const CiExpansion bad =
      LintCiYaml("spec:\n  component: [name, branch]\n" + job);
  ASSERT_FALSE(bad.errors.empty());
  EXPECT_EQ(FormatDiagnostic("f", bad.errors[0]),
            "f:2:21: spec: component: must be a list of name, sha, version "
            "and reference (the component data GitLab gives a CI/CD "
            "component), not 'branch'; GitLab refuses the file");
  // Without a header GitLab fills in nothing: the text stays.
  EXPECT_TRUE(LintCiYaml("job:\n  script: echo $[[ component.name ]]\n").ok());
}

// With more documents after the header, GitLab fills in (and takes the jobs
// of) the text after the second `---` line, all of it, and ignores the
// documents between: lint checks the blocks there, not the ignored ones.
TEST(LintTest, HeaderInterpolationsAreCheckedWhereGitLabReads) {
  const std::string spec =
      "spec:\n  inputs:\n    stage:\n      default: test\n---\n";
  const CiExpansion lint =
      LintCiYaml(spec + "ignored:\n  script: echo $[[ inputs.first ]]\n---\n" +
                 "read:\n  script: echo $[[ inputs.second ]]\n---\n" +
                 "later:\n  script: echo $[[ inputs.third ]]\n");
  ASSERT_EQ(lint.errors.size(), 2u);
  EXPECT_EQ(FormatDiagnostic("f", lint.errors[0]),
            "f:10:11: '$[[ inputs.second ]]': unknown interpolation key: "
            "`second` (the spec: inputs header does not declare it); GitLab "
            "fills in this file's $[[ ... ]] from its spec: inputs header and "
            "refuses the pipeline");
  EXPECT_THAT(lint.errors[1].message,
              HasSubstr("'$[[ inputs.third ]]': unknown interpolation key"));
  // Only an ignored document names an unknown input: GitLab runs the file.
  const CiExpansion fine =
      LintCiYaml(spec + "ignored:\n  script: echo $[[ inputs.first ]]\n---\n" +
                 "read:\n  script: echo $[[ inputs.stage ]]\n");
  EXPECT_TRUE(fine.ok()) << fine.errors[0].message;
}

// ---------------------------------------------------------------------.
// Local includes: a project on disk, read as GitLab reads it.

class IncludeTest : public ::testing::Test {
 protected:
  // Writes `text` at `path` in the project, making its directories.
  void Write(const std::string& path, const std::string& text) {
    const fs::path full = fs::path(dir_.path()) / path;
    fs::create_directories(full.parent_path());
    test::WriteTextFile(full.string(), text);
  }
  // The main file's includes, read from the project.
  CiIncludes Includes(const std::string& main,
                      const CiIncludeVariables& known = {}) {
    return ReadLocalIncludes(".gitlab-ci.yml", main, dir_.path(), known);
  }
  static std::vector<std::string> Paths(const CiIncludes& includes) {
    std::vector<std::string> paths;
    for (const CiIncludedFile& file : includes.files) {
      paths.push_back(file.path);
    }
    return paths;
  }
  // Each error of `result` as gdt-ci prints it.
  static std::vector<std::string> Lines(const CiExpansion& result) {
    std::vector<std::string> lines;
    for (const CiDiagnostic& d : result.errors) {
      lines.push_back(FormatDiagnostic(".gitlab-ci.yml", d));
    }
    return lines;
  }
  test::TempDir dir_;
};

// An included file with a header and more than one document after it:
// GitLab fills in and takes only the text after the second `---` line; the
// document between is ignored, inputs, jobs and includes alike.
TEST_F(IncludeTest, AnIncludedFileGivesOnlyTheDocumentGitLabReads) {
  Write("ci/train.yml",
        "spec:\n  inputs:\n    nodes:\n      type: number\n"
        "      default: 2\n---\n"
        "include: ci/missing.yml\n"
        ".ignored:\n  script: echo $[[ inputs.nope ]]\n"
        "  variables: {GDT_GPUS_PER_NODE: \"8\"}\n---\n"
        "train:\n  script: [x]\n  parallel: $[[ inputs.nodes ]]\n"
        "  tags: [gdt]\n");
  const std::string main =
      "include:\n  - local: ci/train.yml\n    inputs:\n      nodes: 3\n"
      "other:\n  extends: .ignored\n  parallel: 2\n";
  const CiIncludes includes = Includes(main);
  ASSERT_TRUE(includes.ok()) << includes.errors[0].message;
  ASSERT_EQ(Paths(includes), std::vector<std::string>{"ci/train.yml"});
  CiExpandOptions options;
  options.includes = &includes;
  const CiExpansion lint = LintCiYaml(main, options);
  // The ignored document's template is not there for GitLab either.
  EXPECT_THAT(Lines(lint),
              ElementsAre(".gitlab-ci.yml:6:12: other: unknown keys in "
                          "`extends` (.ignored): not in this file nor in the "
                          "files it includes, so GitLab refuses it"));
  // Without that job the configuration reads, with the gang of the
  // document GitLab takes.
  const std::string alone =
      "include:\n  - local: ci/train.yml\n    inputs:\n      nodes: 3\n";
  const CiIncludes alone_includes = Includes(alone);
  options.includes = &alone_includes;
  const CiExpansion read = LintCiYaml(alone, options);
  ASSERT_TRUE(read.ok()) << Lines(read)[0];
  ASSERT_EQ(read.gangs.size(), 1u);
  EXPECT_EQ(read.gangs[0].job, "train");
  EXPECT_EQ(read.gangs[0].nodes, 3);
}

// A local include has no component data: GitLab refuses a
// `$[[ component.name ]]` there, also when the header lists the field.
TEST_F(IncludeTest, ComponentDataInALocalIncludeIsRefused) {
  Write("ci/c.yml",
        "spec:\n  component: [name]\n  inputs: {}\n---\n"
        "job:\n  script: echo $[[ component.name ]]\n");
  const CiIncludes includes = Includes("include:\n  - local: ci/c.yml\n");
  ASSERT_EQ(includes.errors.size(), 1u);
  EXPECT_EQ(includes.errors[0].file, "ci/c.yml");
  EXPECT_EQ(includes.errors[0].line, 6);
  EXPECT_EQ(includes.errors[0].message,
            "'$[[ component.name ]]': GitLab fills in the component context "
            "only in a file included as a CI/CD component (include: "
            "component:), not in a local include, and refuses the file");
  // Without a header nothing is filled in.
  Write("ci/plain.yml", "job:\n  script: echo $[[ component.name ]]\n");
  EXPECT_TRUE(Includes("include:\n  - local: ci/plain.yml\n").ok());
}

// A main file whose first document has no spec: header: GitLab reads that
// document alone, so the includes and jobs after `---` do not exist, and
// the pipeline has no visible job.
TEST_F(IncludeTest, OnlyTheMainFilesReadDocumentIncludesAndHasJobs) {
  Write("ci/a.yml", "from-include:\n  script: x\n");
  const std::string main =
      "image: ubuntu:latest\n---\ninclude:\n  - local: ci/a.yml\n"
      "job:\n  script: x\n";
  const CiIncludes includes = Includes(main);
  ASSERT_TRUE(includes.ok());
  EXPECT_TRUE(includes.files.empty());
  CiExpandOptions options;
  options.includes = &includes;
  const CiExpansion lint = LintCiYaml(main, options);
  ASSERT_TRUE(lint.ok()) << Lines(lint)[0];
  ASSERT_EQ(lint.warnings.size(), 2u);
  EXPECT_THAT(lint.warnings[0].message, HasSubstr("has no visible job"));
  EXPECT_THAT(lint.warnings[1].message,
              HasSubstr("GitLab ignores this document"));
}

TEST_F(IncludeTest, TemplatesDefaultAndVariablesOfIncludedFilesAreSeen) {
  Write("ci/templates.yml",
        "variables:\n  GDT_PRIORITY: \"5\"\n"
        ".gpu:\n  tags: [a100]\n  variables: {DATA: /data}\n"
        "default:\n  retry: 1\n");
  const std::string main =
      "include:\n  - local: 'ci/*.yml'\n"
      "train:\n  extends: .gpu\n  parallel:\n    distributed:\n"
      "      nodes: 2\n  script: [x]\n";
  const CiIncludes includes = Includes(main);
  ASSERT_TRUE(includes.ok());
  ASSERT_EQ(includes.files.size(), 1u);
  EXPECT_FALSE(includes.unseen);
  CiExpandOptions options;
  options.includes = &includes;
  const CiExpansion expanded = ExpandCiYaml(main, options);
  ASSERT_TRUE(expanded.ok()) << Lines(expanded)[0];
  // The template's tag is kept with gdt's, the included default's retry
  // is left alone, and the included GDT_PRIORITY is cleared, not run.
  EXPECT_THAT(expanded.text, HasSubstr("  tags:\n    - \"a100\"\n    - gdt\n"));
  EXPECT_THAT(expanded.text, HasSubstr("GDT_PRIORITY: \"\""));
  EXPECT_THAT(expanded.text, Not(HasSubstr("retry")));
  const CiExpansion lint = LintCiYaml(main, options);
  EXPECT_TRUE(lint.ok());
  ASSERT_EQ(lint.gangs.size(), 1u);
  // Without reading them, the same file is refused.
  EXPECT_FALSE(ExpandCiYaml(main).ok());
}

// The needs of jobs in included files are checked as the main file's:
// GitLab fills in $[[ matrix.* ]] after merging the files, also in a file
// with a spec: header (its input interpolation leaves them), and looks the
// selected names up among all jobs.
TEST_F(IncludeTest, MatrixNeedsOfIncludedJobsAreChecked) {
  const std::string jobs =
      "build:\n  script: [x]\n  parallel:\n    matrix:\n"
      "      - OS: [linux, mac]\n        ARCH: amd64\n"
      "test:\n  script: [x]\n  parallel:\n    matrix:\n"
      "      - OS: [linux]\n  needs:\n    - job: build\n"
      "      parallel:\n        matrix:\n"
      "          - OS: $[[ matrix.OS ]]\n"
      "            ARCH: $[[ matrix.NOPE ]]\n"
      "partial:\n  script: [x]\n  needs:\n    - job: build\n"
      "      parallel:\n        matrix:\n          - OS: linux\n";
  Write("ci/plain.yml", jobs);
  Write("ci/header.yml",
        "spec:\n  inputs:\n    stage:\n      default: test\n---\n" + jobs);
  // GitLab's input interpolation leaves any block of the matrix context
  // as written, also without a name or with functions.
  Write("ci/context.yml",
        "spec:\n  inputs:\n    stage:\n      default: test\n---\n"
        "job:\n  stage: $[[ inputs.stage ]]\n"
        "  script: echo '$[[ matrix ]] $[[ matrix.OS | truncate(0,1) ]]'\n");
  const CiIncludes context = Includes("include:\n  - local: ci/context.yml\n");
  ASSERT_TRUE(context.ok()) << context.errors[0].message;
  EXPECT_THAT(
      context.files[0].text,
      HasSubstr("echo '$[[ matrix ]] $[[ matrix.OS | truncate(0,1) ]]'"));
  for (const std::string& file : {"ci/plain.yml", "ci/header.yml"}) {
    SCOPED_TRACE(file);
    const int shift = file == "ci/header.yml" ? 5 : 0;
    const std::string main = "include:\n  - local: " + file + "\n";
    const CiIncludes includes = Includes(main);
    ASSERT_TRUE(includes.ok());
    CiExpandOptions options;
    options.includes = &includes;
    const CiExpansion lint = LintCiYaml(main, options);
    ASSERT_EQ(lint.errors.size(), 2u);
    EXPECT_EQ(FormatDiagnostic(".gitlab-ci.yml", lint.errors[0]),
              absl::StrCat(file, ":", 17 + shift,
                           ":19: test job: 'NOPE' does not exist in matrix "
                           "configuration (its parallel:matrix has no "
                           "variable NOPE); GitLab refuses the pipeline"));
    EXPECT_THAT(FormatDiagnostic(".gitlab-ci.yml", lint.errors[1]),
                HasSubstr(absl::StrCat(file, ":", 22 + shift,
                                       ":7: partial job: undefined need: "
                                       "build: [linux]")));
    // The main file's own job of the same name replaces the included
    // needs: checked there, once.
    const std::string fixed =
        main +
        "test:\n  needs:\n    - job: build\n      parallel:\n"
        "        matrix:\n          - OS: $[[ matrix.OS ]]\n"
        "            ARCH: amd64\n"
        "partial:\n  needs: [build]\n";
    const CiIncludes fixed_includes = Includes(fixed);
    options.includes = &fixed_includes;
    const CiExpansion ok = LintCiYaml(fixed, options);
    EXPECT_TRUE(ok.ok()) << Lines(ok)[0];
  }
}

// A job or template of an included file whose tags, variables or
// artifacts are a !reference to a gang job's would get, once GitLab
// resolves the reference in the expanded pipeline, what expand adds to the
// gang; expand cannot rewrite the included file, so both commands refuse.
TEST_F(IncludeTest, IncludedReferencesToAGangsEntriesAreRefused) {
  Write("ci/other.yml",
        ".tmpl:\n  variables: !reference [train, variables]\n"
        "report:\n  script: [x]\n  extends: .tmpl\n"
        "  artifacts: !reference [train, artifacts]\n"
        "tagged:\n  script: [x]\n  tags: !reference [train, tags]\n"
        "one:\n  script: [x]\n"
        "  variables: {LR: !reference [train, variables, LR]}\n");
  const std::string main =
      "include:\n  - local: ci/other.yml\n"
      "train:\n  script: [x]\n  variables:\n    LR: \"0.1\"\n"
      "  artifacts:\n    paths: [out/]\n"
      "  parallel:\n    distributed:\n      nodes: 2\n";
  const CiIncludes includes = Includes(main);
  ASSERT_TRUE(includes.ok());
  CiExpandOptions options;
  options.includes = &includes;
  options.runner_tag = "gdt";
  for (const bool lint : {false, true}) {
    SCOPED_TRACE(lint ? "lint" : "expand");
    const CiExpansion result =
        lint ? LintCiYaml(main, options) : ExpandCiYaml(main, options);
    const std::vector<std::string> lines = Lines(result);
    // Only the whole entries: one variable taken from the gang is fine,
    // and the artifacts hold nothing gdt adds (no checkpoint block).
    ASSERT_EQ(lines.size(), 2u);
    EXPECT_EQ(lines[0],
              "ci/other.yml:2:25: .tmpl: its variables are a !reference to "
              "train's, which has parallel:distributed; GitLab resolves it "
              "in the expanded pipeline, where they hold the GDT_* variables "
              "expand adds, so the job would look like a gang member, and gdt "
              "does not rewrite an included file; write its variables out");
    EXPECT_THAT(lines[1], HasSubstr("ci/other.yml:9:20: tagged: its tags are a "
                                    "!reference to train's"));
  }
  // With checkpoints kept as artifacts, the artifacts are refused too.
  const std::string checkpointed =
      main + "      checkpoint:\n        keep: 2\n";
  const CiIncludes more = Includes(checkpointed);
  options.includes = &more;
  const std::vector<std::string> lines =
      Lines(ExpandCiYaml(checkpointed, options));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_THAT(lines[1], HasSubstr("ci/other.yml:6:25: report: its artifacts "
                                  "are a !reference to train's"));
  // The main file's job of the same name merges over the included one:
  // the reference stays unless the main file sets that entry itself.
  Write("ci/more.yml",
        "report:\n  variables: !reference [train, variables]\n"
        "  tags: !reference [train, tags]\n");
  const std::string same =
      "include:\n  - local: ci/more.yml\n"
      "train:\n  script: [x]\n  variables:\n    LR: \"0.1\"\n"
      "  parallel:\n    distributed:\n      nodes: 2\n"
      "report:\n  script: [x]\n  variables: {A: b}\n";
  const CiIncludes same_includes = Includes(same);
  options.includes = &same_includes;
  const std::vector<std::string> merged = Lines(ExpandCiYaml(same, options));
  ASSERT_EQ(merged.size(), 1u);
  EXPECT_THAT(merged[0], HasSubstr("ci/more.yml:3:20: report: its tags are a "
                                   "!reference to train's"));
  // Written out, the same jobs are fine.
  Write("ci/other.yml",
        ".tmpl:\n  variables: {LR: \"0.1\"}\n"
        "report:\n  script: [x]\n  extends: .tmpl\n"
        "tagged:\n  script: [x]\n  tags: [cpu]\n");
  const CiIncludes fixed = Includes(main);
  options.includes = &fixed;
  EXPECT_TRUE(ExpandCiYaml(main, options).ok());
}

TEST_F(IncludeTest, NestedIncludesAreFromTheProjectAndMergeUnderTheIncluder) {
  // ci/a.yml includes ci/b.yml by its path in the project, not from ci/.
  Write("ci/a.yml",
        "include: ci/b.yml\n"
        "train:\n  variables: {A: from-a}\n  tags: [a-tag]\n");
  Write("ci/b.yml",
        "train:\n  variables: {A: from-b, B: from-b}\n  tags: [b-tag]\n"
        "  script: [x]\n");
  const std::string main =
      "include: /ci/a.yml\n"
      "train:\n  variables: {C: main}\n  parallel:\n    distributed:\n"
      "      nodes: 2\n";
  const CiIncludes includes = Includes(main);
  ASSERT_TRUE(includes.ok()) << includes.errors[0].message;
  ASSERT_EQ(includes.files.size(), 2u);
  EXPECT_EQ(includes.files[0].path, "ci/b.yml");  // Merged first.
  EXPECT_EQ(includes.files[1].path, "ci/a.yml");
  CiExpandOptions options;
  options.includes = &includes;
  const CiExpansion expanded = ExpandCiYaml(main, options);
  ASSERT_TRUE(expanded.ok()) << Lines(expanded)[0];
  // Mappings merge key by key (a's A over b's), lists are replaced (a's
  // tags, not b's): the job's own tags are a's plus gdt's.
  EXPECT_THAT(expanded.text, HasSubstr("\"a-tag\""));
  EXPECT_THAT(expanded.text, Not(HasSubstr("b-tag")));
  YAML::Node root = YAML::Load(expanded.text);
  EXPECT_EQ(root["train"]["variables"]["C"].as<std::string>(), "main");

  std::vector<std::unique_ptr<YamlTree>> trees;
  std::vector<std::vector<YamlNode>> files;
  for (const std::string* text :
       {&includes.files[0].text, &includes.files[1].text, &main}) {
    YamlError error;
    trees.push_back(YamlTree::Parse(*text, &error));
    files.push_back(trees.back()->documents());
  }
  const CiConfigModel model(files, false);
  const auto train = model.Resolve("train");
  ASSERT_TRUE(train.ok());
  EXPECT_TRUE(train->unknown.empty());
  EXPECT_EQ(train->config["variables"],
            CiValue::parse(R"({"A": "from-a", "B": "from-b", "C": "main"})"));
  EXPECT_EQ(train->config["tags"], CiValue::parse(R"(["a-tag"])"));
  EXPECT_EQ(train->config["script"], CiValue::parse(R"(["x"])"));
}

TEST_F(IncludeTest, LintChecksTheGdtVariablesOfIncludedFiles) {
  Write("ci/vars.yml", "variables:\n  GDT_NODES_MIN: lots\n");
  const std::string main =
      "include: ci/vars.yml\ntrain:\n  parallel: 2\n  tags: [gdt]\n"
      "  script: [x]\n";
  const CiIncludes includes = Includes(main);
  CiExpandOptions options;
  options.includes = &includes;
  const CiExpansion lint = LintCiYaml(main, options);
  ASSERT_EQ(lint.errors.size(), 1u);
  EXPECT_THAT(Lines(lint)[0], ::testing::StartsWith("ci/vars.yml:2:"));
  EXPECT_THAT(Lines(lint)[0], HasSubstr("GDT_NODES_MIN"));

  // A good value there is part of the gang lint describes.
  Write("ci/vars.yml", "variables:\n  GDT_GPUS_PER_NODE: \"8\"\n");
  const CiIncludes good = Includes(main);
  options.includes = &good;
  const CiExpansion gang = LintCiYaml(main, options);
  ASSERT_TRUE(gang.ok()) << Lines(gang)[0];
  ASSERT_EQ(gang.gangs.size(), 1u);
  EXPECT_EQ(gang.gangs[0].gpus_per_node, 8);
}

TEST_F(IncludeTest, AJobOfAnIncludedFileIsLintedThere) {
  Write("ci/train.yml",
        "train:\n  parallel: 2\n  tags: [gdt]\n  variables:\n"
        "    GDT_GPUS_PER_NODE: \"8\"\n  script: [x]\n");
  const std::string main = "include: ci/train.yml\n";
  const CiIncludes includes = Includes(main);
  CiExpandOptions options;
  options.includes = &includes;
  const CiExpansion lint = LintCiYaml(main, options);
  ASSERT_TRUE(lint.ok()) << Lines(lint)[0];
  ASSERT_EQ(lint.gangs.size(), 1u);
  EXPECT_EQ(lint.gangs[0].file, "ci/train.yml");
  EXPECT_EQ(lint.gangs[0].line, 1);
  EXPECT_THAT(FormatLintReport(".gitlab-ci.yml", lint, false),
              HasSubstr("ci/train.yml:1: train: 2 nodes x 8 GPUs"));
}

TEST_F(IncludeTest, ABlockInAnIncludedFileIsRefusedByBothCommands) {
  Write("ci/train.yml",
        "train:\n  parallel:\n    distributed: {nodes: 2}\n  script: [x]\n");
  const std::string main = "include: ci/train.yml\n";
  const CiIncludes includes = Includes(main);
  CiExpandOptions options;
  options.includes = &includes;
  for (const CiExpansion& result :
       {ExpandCiYaml(main, options), LintCiYaml(main, options)}) {
    ASSERT_EQ(result.errors.size(), 1u);
    EXPECT_THAT(Lines(result)[0],
                ::testing::StartsWith(
                    "ci/train.yml:2:3: train: its parallel:distributed block "
                    "is in ci/train.yml, an included file"));
    EXPECT_THAT(Lines(result)[0],
                HasSubstr("gdt-ci expand --file ci/train.yml"));
  }
  // The main file's own parallel replaces the included block.
  const std::string own = "include: ci/train.yml\ntrain:\n  parallel: 2\n";
  const CiIncludes again = Includes(own);
  options.includes = &again;
  EXPECT_TRUE(ExpandCiYaml(own, options).ok());
}

TEST_F(IncludeTest, EachBadIncludeIsOneLineWithItsPlace) {
  Write("ci/ok.yml", "a:\n  script: [x]\n");
  Write("ci/loop-a.yml", "include: ci/loop-b.yml\n");
  Write("ci/loop-b.yml", "x: {script: [y]}\ninclude: [ci/loop-a.yml]\n");
  Write("ci/broken.yml", "a: [\n");
  Write("ci/notes.txt", "a: b\n");
  fs::create_directories(dir_.Sub("ci/dir.yml"));
  test::TempDir outside;
  test::WriteTextFile(outside.Sub("out.yml"), "a: {script: [x]}\n");
  fs::create_symlink(outside.Sub("out.yml"), dir_.Sub("ci/link.yml"));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"include: ci/missing.yml\n",
       ".gitlab-ci.yml:1:10: include: 'ci/missing.yml' does not exist in the "
       "project"},
      {"include:\n  - local: ../secrets.yml\n",
       ".gitlab-ci.yml:2:5: include: '../secrets.yml' leads outside the "
       "project directory (..)"},
      {"include: ci/link.yml\n",
       ".gitlab-ci.yml:1:10: include: 'ci/link.yml' leads outside the "
       "project directory (a symbolic link to "},
      {"include: ci/dir.yml\n",
       ".gitlab-ci.yml:1:10: include: 'ci/dir.yml' is a directory"},
      {"include: ci/loop-a.yml\n",
       "ci/loop-b.yml:2:11: include: 'ci/loop-a.yml' includes itself"},
      {"include: ci/broken.yml\n", "ci/broken.yml:2:1: YAML syntax error: "},
      {"include: ci/notes.txt\n",
       ".gitlab-ci.yml:1:10: include: 'ci/notes.txt' is not a .yml or .yaml "
       "file"},
      {"include: 'ci/*.yaml'\n",
       ".gitlab-ci.yml:1:10: include: no file in the project matches "
       "'ci/*.yaml'"},
      {"include: [[a.yml]]\n",
       ".gitlab-ci.yml:1:11: include: an entry must be a path or a mapping"},
      {"include: [{ref: main}]\n",
       ".gitlab-ci.yml:1:11: include: an entry needs local, project, remote, "
       "template or component"},
  };
  for (const auto& [main, line] : cases) {
    const CiIncludes includes = Includes(main);
    CiExpandOptions options;
    options.includes = &includes;
    for (const CiExpansion& result :
         {ExpandCiYaml(main, options), LintCiYaml(main, options)}) {
      ASSERT_EQ(result.errors.size(), 1u) << main;
      EXPECT_THAT(Lines(result)[0], ::testing::StartsWith(line)) << main;
      EXPECT_EQ(Lines(result)[0].find('\n'), std::string::npos);
    }
  }
  // The same file twice is read once, as GitLab does; a wildcard matches
  // within one directory with `*` and across directories with `**`.
  Write("ci/deeper/c.yml", "c: {script: [x]}\n");
  EXPECT_EQ(
      Includes("include: [ci/ok.yml, {local: /ci/ok.yml}]\n").files.size(), 1u);
  std::vector<std::string> star;
  for (const auto& f : Includes("include: 'ci/o*.yml'\n").files) {
    star.push_back(f.path);
  }
  EXPECT_THAT(star, ElementsAre("ci/ok.yml"));
  std::vector<std::string> both;
  for (const auto& f : Includes("include: 'ci/**c.yml'\n").files) {
    both.push_back(f.path);
  }
  EXPECT_THAT(both, ElementsAre("ci/deeper/c.yml"));
  // Paths longer than a machine word: `*` still stops at each `/`.
  const std::string wide = absl::StrCat("ci/", std::string(70, 'x'), "/",
                                        std::string(70, 'y'), "/deep.yml");
  Write(wide, "deep: {script: [x]}\n");
  const auto matched = [&](const std::string& pattern) {
    std::vector<std::string> paths;
    for (const auto& f :
         Includes(absl::StrCat("include: '", pattern, "'\n")).files) {
      paths.push_back(f.path);
    }
    return paths;
  };
  EXPECT_THAT(matched("ci/*/deep.yml"), ElementsAre());
  EXPECT_THAT(matched("ci/*/*/deep.yml"), ElementsAre(wide));
  EXPECT_THAT(matched("ci/x*/*y/*p.yml"), ElementsAre(wide));
  EXPECT_THAT(matched("ci/**/deep.yml"), ElementsAre(wide));
  EXPECT_THAT(matched("ci/x*y/deep.yml"), ElementsAre());
  EXPECT_THAT(matched("ci/x**y/deep.yml"), ElementsAre(wide));
  // run-local's work dir in the project holds no configuration.
  Write(".gdt-run/7/artifacts/1/c.yml", "c: {script: [x]}\n");
  EXPECT_EQ(Includes("include: '**c.yml'\n").files.size(), 1u);

  // Including the main file again is a cycle too.
  Write("ci/back.yml", "include: .gitlab-ci.yml\n");
  const std::string main = "include: ci/back.yml\n";
  Write(".gitlab-ci.yml", main);
  const CiIncludes back =
      ReadLocalIncludes(dir_.Sub(".gitlab-ci.yml"), main, dir_.path());
  ASSERT_EQ(back.errors.size(), 1u);
  EXPECT_EQ(back.errors[0].file, "ci/back.yml");
  EXPECT_THAT(back.errors[0].message,
              HasSubstr("'.gitlab-ci.yml' includes itself"));
}

TEST_F(IncludeTest, IncludesGdtDoesNotReadStayUnknown) {
  Write("ci/ok.yml", ".gpu: {tags: [a100]}\n");
  const std::string main =
      "include:\n  - ci/ok.yml\n  - remote: 'https://example.com/x.yml'\n"
      "train:\n  extends: .gpu\n  script: x\n  parallel:\n"
      "    distributed: {nodes: 2}\n";
  const CiIncludes includes = Includes(main);
  ASSERT_TRUE(includes.ok());
  EXPECT_TRUE(includes.unseen);
  CiExpandOptions options;
  options.includes = &includes;
  const CiExpansion expanded = ExpandCiYaml(main, options);
  ASSERT_EQ(expanded.errors.size(), 1u);
  EXPECT_EQ(Lines(expanded)[0],
            ".gitlab-ci.yml:5:3: train: the file includes remote "
            "'https://example.com/x.yml' (.gitlab-ci.yml:3), which gdt does "
            "not read and which GitLab merges over the files gdt read: its "
            "default: or a template of the same name as one the job extends "
            "may add entries, so gdt cannot see whether it inherits tags, "
            "retry; give the job its own tags, retry (gdt adds to them)");
  // Lint says the same; inherit: {default: false} does not help, since the
  // unread file may also add to .gpu, which GitLab deep-merges.
  EXPECT_EQ(LintCiYaml(main, options).errors.size(), 1u);
  const std::string no_default =
      "include:\n  - ci/ok.yml\n  - remote: 'https://example.com/x.yml'\n"
      "train:\n  extends: .gpu\n  inherit: {default: false}\n  script: x\n"
      "  parallel:\n    distributed: {nodes: 2}\n";
  const CiIncludes no_default_includes = Includes(no_default);
  options.includes = &no_default_includes;
  const CiExpansion still = ExpandCiYaml(no_default, options);
  ASSERT_EQ(still.errors.size(), 1u);
  EXPECT_THAT(still.errors[0].message,
              HasSubstr("gdt cannot see whether it inherits tags, retry"));
  // Listed before the file read, the unread include merges under it: only
  // its default: is unseen, and the job's tags come from .gpu.
  const std::string before =
      "include:\n  - template: Jobs/Build.gitlab-ci.yml\n  - ci/ok.yml\n"
      "train:\n  extends: .gpu\n  script: x\n  parallel:\n"
      "    distributed: {nodes: 2}\n";
  const CiIncludes before_includes = Includes(before);
  EXPECT_FALSE(before_includes.unseen_over_seen);
  options.includes = &before_includes;
  const CiExpansion under = ExpandCiYaml(before, options);
  ASSERT_EQ(under.errors.size(), 1u);
  EXPECT_EQ(Lines(under)[0],
            ".gitlab-ci.yml:5:3: train: the file includes template "
            "'Jobs/Build.gitlab-ci.yml' (.gitlab-ci.yml:2), which gdt does not "
            "read and whose default: may add entries, so gdt cannot see "
            "whether it inherits retry; give the job its own retry (gdt adds "
            "to them), or `inherit: {default: false}`");
}

// GitLab gives a job default:'s keys only where it has none after extends.
// A template in an included file whose own unread include merges under
// it (a component's id_tokens file) keeps its tags: the job's tags are
// known. An unread include after that file could redefine the template,
// so there they stay unknown (above).
TEST_F(IncludeTest, KeysOfATemplateNoUnreadIncludeCanOverrideAreKnown) {
  Write("ci/tmpl.yml",
        "include:\n  - project: lc-templates/id_tokens\n"
        "    file: id_tokens.yml\n"
        ".gpu:\n  tags: [shell, matrix]\n  retry: 1\n");
  const std::string main =
      "include:\n  - local: ci/tmpl.yml\n"
      "train:\n  extends: .gpu\n  script: x\n  parallel:\n"
      "    distributed: {nodes: 2}\n";
  const CiIncludes includes = Includes(main);
  ASSERT_TRUE(includes.ok());
  EXPECT_TRUE(includes.unseen);
  EXPECT_FALSE(includes.unseen_over_seen);
  CiExpandOptions options;
  options.includes = &includes;
  const CiExpansion expanded = ExpandCiYaml(main, options);
  ASSERT_TRUE(expanded.ok()) << Lines(expanded)[0];
  EXPECT_THAT(
      expanded.text,
      HasSubstr("  tags:\n    - \"shell\"\n    - \"matrix\"\n    - gdt\n"));
  EXPECT_THAT(expanded.text, Not(HasSubstr("retry:\n    max")));
  // The same unread include listed after the file: it merges over it.
  const std::string after =
      "include:\n  - local: ci/tmpl.yml\n"
      "  - project: other/project\n    file: x.yml\n"
      "train:\n  extends: .gpu\n  script: x\n  parallel:\n"
      "    distributed: {nodes: 2}\n";
  const CiIncludes later = Includes(after);
  EXPECT_TRUE(later.unseen_over_seen);
  options.includes = &later;
  const CiExpansion refused = ExpandCiYaml(after, options);
  ASSERT_EQ(refused.errors.size(), 1u);
  EXPECT_THAT(refused.errors[0].message,
              HasSubstr("gdt cannot see whether it inherits tags, retry"));
}

TEST_F(IncludeTest, LintNotesEachIncludeItDoesNotRead) {
  // Real files include GitLab's templates, other projects' files, remote
  // files and components: lint says, as a warning at each, what it leaves
  // unseen (the file stays valid).
  Write("ci/a.yml",
        "include:\n  - template: Jobs/SAST.gitlab-ci.yml\n"
        "x:\n  script: [x]\n");
  const std::string main =
      "include:\n  - local: ci/a.yml\n  - 'https://example.com/y.yml'\n"
      "  - project: my/group\n    file: [/a.yml, /b.yml]\n"
      "  - component: $CI_SERVER_FQDN/org/c/d@1.0\n"
      "  - local: ci/$VAR.yml\n"
      "train:\n  script: x\n";
  const CiIncludes includes = Includes(main);
  ASSERT_TRUE(includes.ok());
  CiExpandOptions options;
  options.includes = &includes;
  const CiExpansion lint = LintCiYaml(main, options);
  EXPECT_TRUE(lint.ok());
  std::vector<std::string> lines;
  for (const CiDiagnostic& d : lint.warnings) {
    lines.push_back(FormatDiagnostic(".gitlab-ci.yml", d));
  }
  const std::string unseen =
      " is not read (gdt reads only local files of this project), so the "
      "jobs, templates and default: it may bring are unseen";
  EXPECT_THAT(
      lines,
      ElementsAre(
          ".gitlab-ci.yml:3:5: include: remote 'https://example.com/y.yml'" +
              unseen,
          ".gitlab-ci.yml:4:5: include: project 'my/group'" + unseen,
          ".gitlab-ci.yml:6:5: include: component "
          "'$CI_SERVER_FQDN/org/c/d@1.0'" +
              unseen,
          ".gitlab-ci.yml:7:5: include: local 'ci/$VAR.yml' is not read (its "
          "path holds a variable, which GitLab fills in from the pipeline), so "
          "the jobs, templates and default: it may bring are unseen",
          "ci/a.yml:2:5: include: template 'Jobs/SAST.gitlab-ci.yml'" +
              unseen));
  // Expand, which prints no warnings, is not changed by them.
  EXPECT_TRUE(ExpandCiYaml(main, options).ok());
}

TEST_F(IncludeTest, HostileIncludesStayFast) {
  for (int i = 0; i < 160; ++i) {
    Write(absl::StrCat("many/f", i, ".yml"),
          absl::StrCat("j", i, ": {script: [x]}\n"));
  }
  for (int i = 0; i < 120; ++i) {
    Write(absl::StrCat("deep/d", i, ".yml"),
          absl::StrCat("include: deep/d", i + 1, ".yml\n"));
  }
  // Long paths that a long pattern has to be matched against in full.
  const std::string long_name(240, 'a');
  const std::string long_dir =
      absl::StrCat("long/", long_name, "/", long_name, "/", long_name, "/");
  for (int i = 0; i < 600; ++i) {
    Write(absl::StrCat(long_dir, long_name, i, ".yml"), "");
  }
  std::string costly = "include: 'long/";
  for (int i = 0; i < 900; ++i) costly += "**a";
  costly += "**.yml'\n";
  std::string many = "include:\n";
  std::string same = "include:\n";
  for (int i = 0; i < 10'000; ++i) {
    absl::StrAppend(&many, "  - many/f", i % 160, ".yml\n");
    absl::StrAppend(&same, "  - many/f0.yml\n");
  }
  const std::vector<std::pair<std::string, std::string>> cases = {
      {many, ".gitlab-ci.yml:152:5: include: more than 150 included files"},
      {"include: 'many/**'\n",
       ".gitlab-ci.yml:1:10: include: more than 150 included files"},
      {"include: deep/d0.yml\n",
       "deep/d99.yml:1:10: include: includes nest more than 100 levels"},
      {costly,
       ".gitlab-ci.yml:1:10: include: matching 'long/**a**a**a**a**a**a"},
  };
  for (const auto& [main, line] : cases) {
    const auto start = gdt::testing::ThreadCpuTime();
    const CiIncludes includes = Includes(main);
    CiExpandOptions options;
    options.includes = &includes;
    const CiExpansion lint = LintCiYaml(main, options);
    EXPECT_LT(gdt::testing::ThreadCpuTime() - start, std::chrono::seconds(1))
        << line;
    ASSERT_EQ(lint.errors.size(), 1u);
    EXPECT_THAT(Lines(lint)[0], ::testing::StartsWith(line));
  }
  const auto start = gdt::testing::ThreadCpuTime();
  const CiIncludes once = Includes(same);
  EXPECT_TRUE(once.ok());
  EXPECT_EQ(once.files.size(), 1u);
  EXPECT_LT(gdt::testing::ThreadCpuTime() - start, std::chrono::seconds(1));
}

TEST_F(IncludeTest, DuplicateKeysInAnIncludedFileAreErrorsThere) {
  Write("ci/build.yml",
        "build:\n  script: [make]\n  variables: {A: \"1\"}\n"
        "  variables: {B: \"2\"}\n");
  const std::string main = "include: ci/build.yml\n";
  const CiIncludes includes = Includes(main);
  ASSERT_TRUE(includes.ok());
  CiExpandOptions options;
  options.includes = &includes;
  const CiExpansion lint = LintCiYaml(main, options);
  ASSERT_EQ(lint.errors.size(), 1u);
  EXPECT_THAT(Lines(lint)[0],
              ::testing::StartsWith("ci/build.yml:4:3: duplicate key "
                                    "'variables' (first at line 3)"));
}

TEST_F(IncludeTest, KeywordTypesAreCheckedInIncludedFiles) {
  Write("ci/build.yml",
        "variables: true\nbuild:\n  script: [make]\n  tags: gpu\n");
  const std::string main = "include: ci/build.yml\n";
  const CiIncludes includes = Includes(main);
  CiExpandOptions options;
  options.includes = &includes;
  const CiExpansion lint = LintCiYaml(main, options);
  EXPECT_THAT(Lines(lint),
              ElementsAre(HasSubstr("ci/build.yml:1:12: variables config "
                                    "should be a hash of key value pairs"),
                          HasSubstr("ci/build.yml:4:9: jobs:build:tags config "
                                    "should be an array of strings")));
}

// retry, only/except, parallel:matrix, release and pages are checked in
// depth, one line per key naming the job.
TEST(GitLabRefusesTest, RetryOnlyMatrixReleaseAndPagesAreChecked) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"build:\n  script: [x]\n  retry: 3\n",
       "f:3:10: build: retry must be 0, 1 or 2"},
      {"build:\n  script: [x]\n  retry: {max: 1, when: [oops]}\n",
       "f:3:10: build: retry:when: unknown failure reason 'oops'"},
      {"build:\n  script: [x]\n  retry: {max: 1, tries: 2}\n",
       "f:3:10: build: unknown key retry:tries"},
      {"build:\n  script: [x]\n  retry: {exit_codes: [x]}\n",
       "f:3:10: build: retry:exit_codes"},
      {"build:\n  script: [x]\n  only: main\n",
       "f:3:9: build: only has to be either an array of conditions or a "
       "hash"},
      {"build:\n  script: [x]\n  except: {refs: [main], branches: [x]}\n",
       "f:3:11: build: except"},
      {"build:\n  script: [x]\n  parallel:\n    matrix: {A: [1, 2]}\n",
       "f:4:5: build: parallel:matrix must be a list of variable maps"},
      {"build:\n  script: [x]\n  parallel:\n    matrix: [{A: {b: c}}]\n",
       "f:4:5: build: parallel:matrix: A: values must be strings"},
      {"build:\n  script: [x]\n  parallel:\n    matrix:\n"
       "      - {A: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],\n"
       "         B: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]}\n",
       "f:4:5: build: parallel:matrix makes more than 200 jobs"},
      {"build:\n  script: [x]\n  release: v1\n",
       "f:3:12: build: release config should be a hash"},
      {"build:\n  script: [x]\n  release: {description: x}\n",
       "f:3:12: build: release tag_name can't be blank"},
      {"build:\n  script: [x]\n  release: {tag_name: v1, tag: x}\n",
       "f:3:12: build: release config contains unknown keys: tag"},
      {"build:\n  script: [x]\n  release: {tag_name: v1, milestones: {a: b}}\n",
       "f:3:12: build: release:milestones"},
      {"pages:\n  script: [x]\n  pages: [public]\n",
       "f:3:10: pages: pages config should be a hash or a boolean value"},
      {"pages:\n  script: [x]\n  pages: {publish: dist, keep: 1}\n",
       "f:3:10: pages: pages config contains unknown keys: keep"},
  };
  for (const auto& [file, line] : cases) {
    const CiExpansion lint = LintCiYaml(file);
    ASSERT_EQ(lint.errors.size(), 1u) << file;
    EXPECT_THAT(FormatDiagnostic("f", lint.errors[0]),
                ::testing::StartsWith(line))
        << file;
    EXPECT_THAT(lint.errors[0].message,
                HasSubstr("(GitLab refuses the pipeline)"));
  }
  for (const std::string ok : {
           "build:\n  script: [x]\n  retry: 2\n  only: [main, /^rel/]\n"
           "  except:\n    variables: [$X == \"1\"]\n    changes: [a]\n",
           "build:\n  script: [x]\n  retry:\n    max: 2\n"
           "    when: runner_system_failure\n    exit_codes: 137\n",
           "build:\n  script: [x]\n  parallel:\n    matrix:\n"
           "      - {A: [1, \"2\"], B: x}\n      - {C: y}\n",
           "build:\n  script: [x]\n  release:\n    tag_name: v1\n"
           "    description: d\n    milestones: [m1]\n"
           "    assets:\n      links: [{name: n, url: \"https://x\"}]\n",
           ".rel:\n  release: {description: d}\nbuild:\n  script: [x]\n"
           "  extends: .rel\n  release: {tag_name: v1}\n",
           "pages:\n  script: [x]\n  pages: {publish: dist, expire_in: 1d}\n"
           "other:\n  script: [x]\n  pages: true\n",
           "build:\n  script: [x]\n  retry: $[[ inputs.retries ]]\n"
           "  only: !reference [.o, only]\n.o:\n  only: [main]\n",
           "build:\n  script: [x]\n  retry:\n  only:\n",
       }) {
    const CiExpansion lint = LintCiYaml(ok);
    EXPECT_TRUE(lint.ok()) << ok << "\n"
                           << (lint.ok()
                                   ? ""
                                   : FormatDiagnostic("f", lint.errors[0]));
  }
}

TEST(GitLabRefusesTest, KeywordsOfTheWrongTypeAreOneLineEach) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"variables: true\nbuild:\n  script: [x]\n",
       "f:1:12: variables config should be a hash of key value pairs, not "
       "'true' (GitLab refuses the pipeline)"},
      {"build:\n  script: [x]\n  variables: [A]\n",
       "f:3:14: jobs:build:variables config should be a hash of key value "
       "pairs, not a list"},
      {"build:\n  script: [x]\n  artifacts:\n    paths: dist/\n",
       "f:4:12: jobs:build:artifacts:paths config should be an array of "
       "strings, not 'dist/'"},
      {"build:\n  script: [x]\n  artifacts:\n    when: sometimes\n",
       "f:4:11: jobs:build:artifacts:when config should be one of "
       "on_success, on_failure, always, not 'sometimes'"},
      {"build:\n  script: {run: x}\n",
       "f:2:11: jobs:build:script config should be a string or a nested "
       "array of strings up to 10 levels deep, not a mapping"},
      {"build:\n  script: [x]\n  stage: [test]\n",
       "f:3:10: jobs:build:stage config should be a string, not a list"},
      {"build:\n  script: [x]\n  interruptible: maybe\n",
       "f:3:18: jobs:build:interruptible config should be a boolean value"},
      {"build:\n  script: [x]\n  when: later\n",
       "f:3:9: jobs:build:when config should be one of on_success, "
       "on_failure, always, manual, delayed, never, not 'later'"},
      {"stages: build\nbuild:\n  script: [x]\n",
       "f:1:9: stages config should be an array of strings"},
      {"build: {}\n",
       "f:1:1: jobs build config should implement the script:, run:, or "
       "trigger: keyword (GitLab refuses the pipeline); the job is an empty "
       "mapping"},
      {"build:\n",
       "f:1:1: jobs build config should implement the script:, run:, or "
       "trigger: keyword (GitLab refuses the pipeline); the job is empty"},
      {".tpl:\n  stage: test\nbuild:\n  extends: .tpl\n",
       "f:3:1: jobs build config should implement the script:, run:, or "
       "trigger: keyword (GitLab refuses the pipeline); the job is without "
       "any of them"},
      {"build:\n  scirpt: [x]\n  script: [x]\n",
       "f:2:3: jobs:build config contains unknown keys: scirpt (did you "
       "mean 'script'?) (GitLab refuses the pipeline)"},
      {".keys: &keys\n  artefacts: {}\n  color: red\nbuild:\n  <<: *keys\n"
       "  script: [x]\n",
       "f:2:3: jobs:build config contains unknown keys: artefacts, color "
       "(GitLab refuses the pipeline)"},
      {"build:\n  script: [x]\n  rules: [{when: always}]\n  only: [main]\n",
       "f:4:3: jobs:build config key may not be used with `rules`: only "
       "(GitLab refuses the pipeline)"},
  };
  for (const auto& [file, line] : cases) {
    const CiExpansion lint = LintCiYaml(file);
    ASSERT_EQ(lint.errors.size(), 1u) << file;
    EXPECT_THAT(FormatDiagnostic("f", lint.errors[0]),
                ::testing::StartsWith(line))
        << file;
  }
  // What GitLab accepts: inherited scripts, references, inputs, nested
  // script lists, empty values that unset, hidden jobs without a script.
  for (const std::string ok : {
           ".tpl:\n  script: [x]\nbuild:\n  extends: .tpl\n",
           ".s:\n  script: [x]\nbuild:\n  script:\n    - !reference [.s, "
           "script]\n    - [a, b]\n",
           "build:\n  script: x\n  artifacts:\n    paths: [a]\n    when: "
           "always\n    untracked: false\n  cache: [{key: a}]\n  image: "
           "{name: x}\n  allow_failure: {exit_codes: [1]}\n  interruptible: "
           "true\n  tags: !reference [.t, tags]\n  stage: $[[ inputs.s ]]\n"
           "  variables:\n  needs: []\n.t:\n  tags: [a]\n",
           ".hidden:\n",
           "include: ci/x.yml\nbuild: {}\n",
           ".snippets:\n  anything: [x]\nbuild:\n  script: x\n  hooks: "
           "{pre_get_sources_script: [y]}\n  id_tokens: {T: {aud: a}}\n"
           "  when: delayed\n  start_in: 1 minute\n  release: {tag_name: v, "
           "description: d}\n  resource_group: r\ndown:\n  trigger: a/b\n"
           "  inherit: {default: false}\n",
       }) {
    const CiExpansion lint = LintCiYaml(ok);
    EXPECT_TRUE(lint.ok()) << ok << "\n"
                           << (lint.ok()
                                   ? ""
                                   : FormatDiagnostic("f", lint.errors[0]));
  }
}

TEST(GitLabRefusesTest, AStageOrANeedThatDoesNotExistIsOneLine) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"stages: [build, test]\ntrain:\n  stage: tset\n  script: [x]\n",
       "f:3:10: train job: chosen stage tset does not exist; available "
       "stages are .pre, build, test, .post (did you mean 'test'?) (GitLab "
       "refuses the pipeline; if another file includes this one, lint that "
       "file)"},
      // Without stages:, GitLab's own; a stage inherited through extends.
      {".tpl:\n  stage: release\ntrain:\n  extends: .tpl\n  script: [x]\n",
       "f:3:1: train job: chosen stage release does not exist; available "
       "stages are .pre, build, test, deploy, .post (GitLab refuses the "
       "pipeline; if another file includes this one, lint that file)"},
      {"prep:\n  script: [x]\ntrain:\n  script: [x]\n  needs: [perp, "
       "prep]\n",
       "f:5:11: train job: undefined need: perp (did you mean 'prep'?) "
       "(GitLab refuses the pipeline; if another file includes this one, "
       "lint that file)"},
      {"train:\n  script: [x]\n  needs:\n    - job: data\n      artifacts: "
       "true\n",
       "f:4:12: train job: undefined need: data (GitLab refuses the "
       "pipeline; if another file includes this one, lint that file)"},
  };
  for (const auto& [file, line] : cases) {
    const CiExpansion lint = LintCiYaml(file);
    ASSERT_EQ(lint.errors.size(), 1u) << file;
    EXPECT_EQ(FormatDiagnostic("f", lint.errors[0]), line) << file;
  }
  // What GitLab accepts: listed stages (nested lists flattened), .pre and
  // .post, optional needs, needs of another pipeline or project, a job of
  // an included file, values filled in later; and what lint cannot see.
  for (const std::string ok : {
           ".s: [a]\nstages: [!reference [.s], b]\nj:\n  stage: a\n  script: "
           "x\nk:\n  stage: .post\n  script: x\n",
           "j:\n  script: x\n  needs:\n    - {job: gone, optional: true}\n"
           "    - {pipeline: $PARENT_PIPELINE_ID, job: gen}\n    - {project: "
           "a/b, job: c, ref: main}\n",
           "spec:\n  inputs:\n    s: {default: test}\n---\nj:\n  stage: $[[ "
           "inputs.s ]]\n  script: x\n",
           "include: ci/other.yml\nj:\n  stage: elsewhere\n  script: x\n  "
           "needs: [from-other]\n",
       }) {
    const CiExpansion lint = LintCiYaml(ok);
    EXPECT_TRUE(lint.ok()) << ok << "\n"
                           << (lint.ok()
                                   ? ""
                                   : FormatDiagnostic("f", lint.errors[0]));
  }
}

TEST_F(IncludeTest, RulesOfAnIncludeDecideWhetherItIsRead) {
  Write("ci/gpu.yml", "gpu:\n  script: [x]\n");
  Write("ci/cpu.yml", "cpu:\n  script: [x]\n");
  Write("ci/docs.yml", "docs:\n  script: [x]\n");
  Write("ci/branch.yml", "branch:\n  script: [x]\n");
  Write("Dockerfile", "FROM scratch\n");
  const std::string main =
      "variables:\n  TARGET: gpu\n"
      "include:\n"
      "  - local: ci/gpu.yml\n    rules:\n      - if: $TARGET == \"gpu\"\n"
      "  - local: ci/cpu.yml\n    rules:\n      - if: $TARGET == \"cpu\"\n"
      "  - local: ci/docs.yml\n    rules:\n      - exists: [Dockerfile]\n"
      "        when: never\n      - when: always\n"
      "  - local: ci/branch.yml\n    rules:\n"
      "      - if: $CI_COMMIT_BRANCH == \"main\"\n"
      "build:\n  script: [x]\n";
  const CiIncludes includes = Includes(main);
  ASSERT_TRUE(includes.ok()) << includes.errors[0].message;
  std::vector<std::string> read;
  for (const CiIncludedFile& file : includes.files) read.push_back(file.path);
  // The pipeline's own variables decide only in the pipeline: read.
  EXPECT_THAT(read, ElementsAre("ci/gpu.yml", "ci/branch.yml"));
  const CiIncludes bad = Includes(
      "include:\n  - local: ci/gpu.yml\n    rules:\n      - when: manual\n");
  ASSERT_EQ(bad.errors.size(), 1u);
  EXPECT_THAT(bad.errors[0].message, HasSubstr("include: rules[0]"));
}

TEST_F(IncludeTest, InputsAreCheckedAndFilledIn) {
  Write("ci/train.yml",
        "spec:\n  inputs:\n    stage:\n      default: test\n"
        "    nodes:\n      type: number\n"
        "    gpu:\n      type: boolean\n      default: false\n"
        "    tags:\n      type: array\n      default: [a100]\n"
        "    mode:\n      options: [fast, full]\n      default: fast\n"
        "    version:\n      regex: ^v\\d+$\n      default: v1\n"
        "---\n"
        "\"train-$[[ inputs.mode ]]\":\n"
        "  stage: $[[ inputs.stage ]]\n"
        "  parallel: $[[ inputs.nodes ]]\n"
        "  tags: $[[ inputs.tags ]]\n"
        "  interruptible: $[[ inputs.gpu ]]\n"
        "  script:\n"
        "    - echo \"$[[ inputs.version | truncate(1,5) ]] é\" $[[ "
        "inputs.stage | expand_vars ]]\n"
        "    - |\n      run $[[ inputs.mode ]]\n      done\n"
        "  variables: {V: \"$[[ inputs.version ]]\"}\n");
  const std::string main =
      "variables:\n  WHERE: eu\n"
      "include:\n  - local: ci/train.yml\n    inputs:\n      nodes: 4\n"
      "      stage: deploy-$WHERE\n      mode: full\n"
      "  - local: ci/train.yml\n    inputs: {nodes: 2}\n"
      // GitLab expands no variables in stage names.
      "stages: [test, deploy-$WHERE]\n";
  const CiIncludes includes = Includes(main);
  ASSERT_TRUE(includes.ok()) << includes.errors[0].message;
  // Included twice with other inputs: two files.
  ASSERT_EQ(includes.files.size(), 2u);
  const YAML::Node full = YAML::LoadAll(includes.files[0].text).at(1);
  const YAML::Node job = full["train-full"];
  ASSERT_TRUE(job) << includes.files[0].text;
  EXPECT_EQ(job["stage"].as<std::string>(), "deploy-$WHERE");
  EXPECT_EQ(job["parallel"].as<int>(), 4);
  EXPECT_EQ(job["parallel"].Tag(), "?");  // A number, not a string.
  EXPECT_EQ(job["tags"][0].as<std::string>(), "a100");
  EXPECT_EQ(job["interruptible"].as<std::string>(), "false");
  EXPECT_EQ(job["script"][0].as<std::string>(), "echo \"1 é\" deploy-eu");
  EXPECT_EQ(job["script"][1].as<std::string>(), "run full\ndone\n");
  EXPECT_EQ(job["variables"]["V"].as<std::string>(), "v1");
  // Lines stay where they were.
  EXPECT_EQ(std::count(includes.files[0].text.begin(),
                       includes.files[0].text.end(), '\n'),
            30);
  EXPECT_TRUE(YAML::LoadAll(includes.files[1].text).at(1)["train-fast"]);
  CiExpandOptions options;
  options.includes = &includes;
  const CiExpansion lint = LintCiYaml(main, options);
  EXPECT_TRUE(lint.ok()) << Lines(lint)[0];

  // What GitLab refuses, one line each at the include.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{nodes: 2, extra: 1}", "unknown input arguments: extra"},
      {"{stage: x}", "`nodes` input: required value has not been provided"},
      {"{nodes: two}", "`nodes` input: provided value is not a number"},
      {"{nodes: 2, gpu: \"yes\"}",
       "`gpu` input: provided value is not a boolean"},
      {"{nodes: 2, mode: slow}",
       "`mode` input: `slow` cannot be used because it is not in the list "
       "of allowed options"},
      {"{nodes: 2, version: \"2\"}",
       "`version` input: provided value does not match required RegEx "
       "pattern"},
  };
  for (const auto& [inputs, message] : cases) {
    const CiIncludes refused = Includes(
        "include:\n  - local: ci/train.yml\n    inputs: " + inputs + "\n");
    ASSERT_EQ(refused.errors.size(), 1u) << inputs;
    EXPECT_EQ(refused.errors[0].line, 2) << inputs;
    EXPECT_THAT(refused.errors[0].message,
                HasSubstr("include: 'ci/train.yml': " + message));
  }
  Write("ci/plain.yml", "plain:\n  script: [x]\n");
  const CiIncludes headless =
      Includes("include:\n  - local: ci/plain.yml\n    inputs: {a: 1}\n");
  ASSERT_EQ(headless.errors.size(), 1u);
  EXPECT_THAT(headless.errors[0].message,
              HasSubstr("is given inputs but has no spec: inputs header"));
  Write(
      "ci/typo.yml",
      "spec:\n  inputs:\n    a:\n      default: x\n---\n"
      "typo:\n  script: [\"$[[ inputs.b ]]\", \"$[[ inputs.a | upcase ]]\"]\n");
  const CiIncludes typo = Includes("include: ci/typo.yml\n");
  ASSERT_EQ(typo.errors.size(), 1u);
  EXPECT_EQ(typo.errors[0].file, "ci/typo.yml");
  EXPECT_EQ(typo.errors[0].line, 7);
  EXPECT_THAT(typo.errors[0].message,
              HasSubstr("unknown input name provided: `b`"));
  Write("ci/fn.yml",
        "spec:\n  inputs:\n    a:\n      default: x\n---\n"
        "fn:\n  script: [\"$[[ inputs.a | upcase ]]\"]\n");
  const CiIncludes function = Includes("include: ci/fn.yml\n");
  ASSERT_EQ(function.errors.size(), 1u);
  EXPECT_THAT(function.errors[0].message,
              HasSubstr("no function matching `upcase`"));
  // The matrix context is GitLab's to fill in later: kept.
  Write(
      "ci/matrix.yml",
      "spec:\n  inputs:\n    a:\n      default: x\n---\n"
      "m:\n  script: [\"$[[ inputs.a ]]\"]\n"
      "  needs: [{job: b, parallel: {matrix: [{A: \"$[[ matrix.A ]]\"}]}}]\n");
  const CiIncludes matrix = Includes("include: ci/matrix.yml\n");
  ASSERT_TRUE(matrix.ok()) << matrix.errors[0].message;
  EXPECT_THAT(matrix.files.at(0).text, HasSubstr("\"$[[ matrix.A ]]\""));
  EXPECT_THAT(matrix.files.at(0).text, HasSubstr("script: [\"x\"]"));
}

// GitLab gives include rules the pipeline's predefined variables (branch,
// source, commit) and its own; the main file's top-level ones sit between.
// Without them (lint, expand) a rule naming one is left to the pipeline.
// An input with `rules:` (no options or default of its own) takes the
// options and default of its first rule whose `if:` holds for the other
// inputs; without a default it is empty, not a required input.
TEST_F(IncludeTest, InputRulesChooseOptionsAndDefault) {
  Write("ci/train.yml",
        "spec:\n  inputs:\n    env:\n      options: [dev, prod]\n"
        "      default: dev\n"
        "    size:\n      rules:\n"
        "        - if: $[[ inputs.env ]] == \"prod\"\n"
        "          options: [large, xlarge]\n          default: large\n"
        "        - options: [small]\n          default: small\n"
        "    note:\n      rules:\n"
        "        - if: $[[ inputs.size | truncate(0,6) ]] == \"xlarge\"\n"
        "          default: big\n"
        "        - options: [a, b]\n"
        "---\n"
        "train:\n  script: [\"echo $[[ inputs.size ]]/$[[ inputs.note ]]\"]\n");
  const auto script = [&](const std::string& inputs) {
    const CiIncludes includes = Includes(
        "include:\n  - local: ci/train.yml\n    inputs: " + inputs + "\n");
    EXPECT_TRUE(includes.ok()) << includes.errors.at(0).message;
    if (!includes.ok()) return std::string();
    return YAML::LoadAll(includes.files.at(0).text)
        .at(1)["train"]["script"][0]
        .as<std::string>();
  };
  EXPECT_EQ(script("{}"), "echo small/");
  EXPECT_EQ(script("{env: prod}"), "echo large/");
  EXPECT_EQ(script("{env: prod, size: xlarge}"), "echo xlarge/big");
  EXPECT_EQ(script("{note: b}"), "echo small/b");
  const CiIncludes refused = Includes(
      "include:\n  - local: ci/train.yml\n    inputs: {env: prod, size: "
      "small}\n");
  ASSERT_EQ(refused.errors.size(), 1u);
  EXPECT_THAT(refused.errors[0].message,
              HasSubstr("`size` input: `small` cannot be used because it is "
                        "not in the list of allowed options"));
  Write("ci/loop.yml",
        "spec:\n  inputs:\n    a:\n      rules:\n"
        "        - if: $[[ inputs.b ]] == \"x\"\n          default: x\n"
        "        - options: [y]\n"
        "    b:\n      rules:\n"
        "        - if: $[[ inputs.a ]] == \"x\"\n          default: x\n"
        "        - options: [y]\n"
        "---\nloop:\n  script: [x]\n");
  const CiIncludes loop = Includes("include:\n  - local: ci/loop.yml\n");
  ASSERT_EQ(loop.errors.size(), 1u);
  Write("ci/undeclared.yml",
        "spec:\n  inputs:\n    a:\n      rules:\n"
        "        - if: $[[ inputs.zz ]] == \"x\"\n          default: x\n"
        "        - options: [y]\n"
        "---\nloop:\n  script: [x]\n");
  const CiIncludes undeclared =
      Includes("include:\n  - local: ci/undeclared.yml\n");
  ASSERT_EQ(undeclared.errors.size(), 1u);
  EXPECT_THAT(undeclared.errors[0].message,
              HasSubstr("`a` input: its rules name an input that the header "
                        "does not declare"));
  EXPECT_THAT(
      loop.errors[0].message,
      HasSubstr("`a` input: its rules name an input that the header "
                "does not declare, or one whose rules name it in turn"));
}

TEST_F(IncludeTest, IncludeRulesSeeThePipelinesVariables) {
  Write("ci/main.yml", "on-main:\n  script: [x]\n");
  Write("ci/mr.yml", "on-mr:\n  script: [x]\n");
  Write("ci/tag.yml", "on-tag:\n  script: [x]\n");
  Write("ci/where.yml", "where:\n  script: [x]\n");
  Write("ci/feature.yml", "feature:\n  script: [x]\n");
  const std::string main =
      "variables:\n  PLACE: file\n"
      "include:\n"
      "  - local: ci/main.yml\n    rules:\n"
      "      - if: $CI_COMMIT_BRANCH == \"main\"\n"
      "  - local: ci/mr.yml\n    rules:\n"
      "      - if: $CI_PIPELINE_SOURCE == \"merge_request_event\"\n"
      "  - local: ci/tag.yml\n    rules:\n      - if: $CI_COMMIT_TAG\n"
      "  - local: ci/where.yml\n    rules:\n"
      "      - if: $PLACE == \"pipeline\"\n"
      "  - local: ci/$CI_COMMIT_REF_NAME.yml\n"
      "build:\n  script: [x]\n";
  const CiIncludes unknown = Includes(main);
  ASSERT_TRUE(unknown.ok()) << unknown.errors[0].message;
  EXPECT_THAT(Paths(unknown),
              ElementsAre("ci/main.yml", "ci/mr.yml", "ci/tag.yml"));
  EXPECT_TRUE(unknown.unseen);  // The path with a variable.

  CiIncludeVariables push;
  push.complete = true;
  push.predefined = {{"CI_COMMIT_BRANCH", "main"},
                     {"CI_COMMIT_REF_NAME", "main"},
                     {"CI_PIPELINE_SOURCE", "push"},
                     {"PLACE", "predefined"}};
  const CiIncludes on_main = Includes(main, push);
  ASSERT_TRUE(on_main.ok()) << on_main.errors[0].message;
  // ci/main.yml again through the path with a variable: read once.
  EXPECT_THAT(Paths(on_main), ElementsAre("ci/main.yml"));
  EXPECT_FALSE(on_main.unseen);

  CiIncludeVariables mr = push;
  mr.predefined.erase("CI_COMMIT_BRANCH");
  mr.predefined["CI_COMMIT_REF_NAME"] = "feature";
  mr.predefined["CI_PIPELINE_SOURCE"] = "merge_request_event";
  mr.pipeline = {{"PLACE", "pipeline"}};  // Over the file's.
  EXPECT_THAT(Paths(Includes(main, mr)),
              ElementsAre("ci/mr.yml", "ci/where.yml", "ci/feature.yml"));

  // lint and expand with --var: what is given decides, the rest is read.
  CiIncludeVariables given;
  given.pipeline = {{"CI_COMMIT_BRANCH", "dev"}};
  EXPECT_THAT(Paths(Includes(main, given)),
              ElementsAre("ci/mr.yml", "ci/tag.yml"));
}

// An included file's own include: may hold its inputs, filled in before
// the path is read.
TEST_F(IncludeTest, AnIncludePathTakesTheFilesInputs) {
  Write("ci/stage.yml",
        "spec:\n  inputs:\n    flavour:\n      default: gpu\n---\n"
        "include:\n  - local: ci/$[[ inputs.flavour ]].yml\n"
        "  - local: ci/extra.yml\n    rules:\n"
        "      - if: '\"$[[ inputs.flavour ]]\" == \"cpu\"'\n"
        "stage-job:\n  script: [x]\n");
  Write("ci/gpu.yml", "gpu:\n  script: [x]\n");
  Write("ci/cpu.yml", "cpu:\n  script: [x]\n");
  Write("ci/extra.yml", "extra:\n  script: [x]\n");
  const CiIncludes gpu = Includes("include: ci/stage.yml\n");
  ASSERT_TRUE(gpu.ok()) << gpu.errors[0].message;
  EXPECT_THAT(Paths(gpu), ElementsAre("ci/gpu.yml", "ci/stage.yml"));
  EXPECT_FALSE(gpu.unseen);
  const CiIncludes cpu = Includes(
      "include:\n  - local: ci/stage.yml\n    inputs: {flavour: cpu}\n");
  ASSERT_TRUE(cpu.ok()) << cpu.errors[0].message;
  EXPECT_THAT(Paths(cpu),
              ElementsAre("ci/cpu.yml", "ci/extra.yml", "ci/stage.yml"));
}

// The functions of an interpolation block as GitLab matches them: the whole
// text one function, string inputs only, at most three.
TEST_F(IncludeTest, MalformedInterpolationFunctionsAreRefused) {
  const auto filled = [&](const std::string& block,
                          const std::string& type = "string") {
    Write("ci/f.yml",
          "spec:\n  inputs:\n    a:\n      type: " + type +
              "\n      default: " + (type == "number" ? "12345" : "abcdefgh") +
              "\n---\nf:\n  script: [\"" + block + "\"]\n");
    return Includes("include: ci/f.yml\n");
  };
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"$[[ inputs.a | truncate(1,5)xyz ]]",
       "no function matching `truncate(1,5)xyz`"},
      {"$[[ inputs.a | truncate(1) ]]", "no function matching `truncate(1)`"},
      {"$[[ inputs.a | truncate(-1,2) ]]",
       "no function matching `truncate(-1,2)`"},
      {"$[[ inputs.a | truncate(1,2,3) ]]",
       "no function matching `truncate(1,2,3)`"},
      {"$[[ inputs.a | expand_vars() ]]",
       "no function matching `expand_vars()`"},
      {"$[[ inputs.a | posix_escapex ]]",
       "no function matching `posix_escapex`"},
      {"$[[ inputs.a | split(',') | truncate(0,1) ]]",
       "split() must be the last function in a chain"},
      {"$[[ inputs.a | split('') ]]", "separator cannot be empty"},
      {"$[[ inputs.a | expand_vars | expand_vars | expand_vars | "
       "expand_vars ]]",
       "too many functions in interpolation block"},
  };
  for (const auto& [block, message] : refused) {
    const CiIncludes result = filled(block);
    ASSERT_EQ(result.errors.size(), 1u) << block;
    EXPECT_EQ(result.errors[0].file, "ci/f.yml") << block;
    EXPECT_EQ(result.errors[0].line, 8) << block;
    EXPECT_THAT(result.errors[0].message, HasSubstr(message)) << block;
  }
  const CiIncludes number = filled("$[[ inputs.a | truncate(0,2) ]]", "number");
  ASSERT_EQ(number.errors.size(), 1u);
  EXPECT_THAT(number.errors[0].message,
              HasSubstr("invalid input type: truncate can only be used with "
                        "string inputs"));
  // What GitLab accepts, text after the block included.
  for (const auto& [block, text] :
       std::vector<std::pair<std::string, std::string>>{
           {"$[[ inputs.a | truncate(1,5) ]]xyz", "bcdefxyz"},
           {"$[[ inputs.a | truncate( 2 , 3 ) ]]", "cde"},
           {"$[[ inputs.a | truncate(6,99) ]]", "gh"},
           {"$[[inputs.a|posix_escape]]", "abcdefgh"},
       }) {
    const CiIncludes result = filled(block);
    ASSERT_TRUE(result.ok()) << block << ": " << result.errors[0].message;
    EXPECT_EQ(YAML::LoadAll(result.files.at(0).text)
                  .at(1)["f"]["script"][0]
                  .as<std::string>(),
              text)
        << block;
  }
  Write("ci/s.yml",
        "spec:\n  inputs:\n    a:\n      default: \"x, y,,z \"\n---\n"
        "s:\n  tags: $[[ inputs.a | split(',') ]]\n  script: [x]\n");
  const CiIncludes split = Includes("include: ci/s.yml\n");
  ASSERT_TRUE(split.ok()) << split.errors[0].message;
  const YAML::Node tags =
      YAML::LoadAll(split.files.at(0).text).at(1)["s"]["tags"];
  ASSERT_TRUE(tags.IsSequence()) << split.files.at(0).text;
  EXPECT_EQ(tags.size(), 3u);
  EXPECT_EQ(tags[2].as<std::string>(), "z");
}

}  // namespace
}  // namespace gdt::ci
