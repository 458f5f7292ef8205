// The real gdt-ci binary: expand and lint as a user or a CI job runs them.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/cli_run.h"
#include "testing/fake_executor.h"
#include "testing/temp_dir.h"

namespace gdt::ci {
namespace {

using test::CliRun;
using test::ReadTextFile;
using test::RunCli;
using test::TempDir;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::string kTestData = GDT_CI_TESTDATA;
// The project of the files in expand/: what their `include:local` names.
const std::string kProject = kTestData + "/project";

// Runs gdt-ci with `args`; `stream` "stdout" or "stderr" is kept.
CliRun GdtCi(const std::vector<std::string>& args, const std::string& stream) {
  return RunCli(GDT_CI_BIN, args, stream);
}

TEST(GdtCiCliTest, ExpandWritesTheExpansion) {
  TempDir dir;
  const std::string out = dir.path() + "/child.yml";
  const CliRun run =
      GdtCi({"expand", "--file", kTestData + "/expand/all-keys.yml",
             "--project-dir", kProject, "-o", out},
            "stderr");
  EXPECT_EQ(run.code, 0) << run.output;
  EXPECT_EQ(run.output, "");
  EXPECT_EQ(ReadTextFile(out),
            ReadTextFile(kTestData + "/expand/all-keys.expected.yml"));
}

TEST(GdtCiCliTest, ExpandWritesThroughALinkAndNeverReplacesADevice) {
  TempDir dir;
  const std::string target = dir.path() + "/target.yml";
  const std::string link = dir.path() + "/link.yml";
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  const std::string input = kTestData + "/expand/all-keys.yml";
  const CliRun run =
      GdtCi({"expand", "--file", input, "--project-dir", kProject, "-o", link},
            "stderr");
  EXPECT_EQ(run.code, 0) << run.output;
  struct stat st;
  ASSERT_EQ(lstat(link.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << "the link was replaced";
  EXPECT_EQ(ReadTextFile(target),
            ReadTextFile(kTestData + "/expand/all-keys.expected.yml"));

  // A full device: one line and exit 2, and the device is still one.
  const CliRun full = GdtCi(
      {"expand", "--file", input, "--project-dir", kProject, "-o", "/dev/full"},
      "stderr");
  EXPECT_EQ(full.code, 2);
  EXPECT_EQ(full.output,
            "gdt-ci expand: cannot write the output (disk full "
            "or output closed)\n");
  ASSERT_EQ(stat("/dev/full", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
}

TEST(GdtCiCliTest, AnEndlessInputIsRefusedWithOneLine) {
  for (const char* command : {"expand", "lint"}) {
    const CliRun run = GdtCi({command, "--file", "/dev/zero"}, "stderr");
    EXPECT_EQ(run.code, 2) << command;
    EXPECT_EQ(run.output, absl::StrCat("gdt-ci ", command,
                                       ": cannot read /dev/zero: it is larger "
                                       "than 64 MiB\n"));
  }
}

TEST(GdtCiCliTest, ExpandPrintsToStdoutByDefault) {
  const CliRun run = GdtCi(
      {"expand", "--file", kTestData + "/expand/merge-into-job.yml"}, "stdout");
  EXPECT_EQ(run.code, 0);
  EXPECT_EQ(run.output,
            ReadTextFile(kTestData + "/expand/merge-into-job.expected.yml"));
}

// `gdt-ci lint FILE`, as other linters are called, reads FILE; two files
// are a usage error, not one of them silently.
TEST(GdtCiCliTest, LintAndExpandTakeTheFileAsTheirPositionalArgument) {
  const std::string file = kTestData + "/malformed/launcher-typo.yml";
  for (const char* command : {"expand", "lint"}) {
    const CliRun run = GdtCi({command, file}, "stderr");
    EXPECT_EQ(run.code, 1) << command;
    EXPECT_THAT(run.output, HasSubstr(file + ":7:17: train:")) << command;
    EXPECT_EQ(GdtCi({command, file, "--file", file}, "stderr").code, 2)
        << command;
  }
  EXPECT_EQ(
      GdtCi({"expand", kTestData + "/expand/merge-into-job.yml"}, "stdout")
          .output,
      ReadTextFile(kTestData + "/expand/merge-into-job.expected.yml"));
}

TEST(GdtCiCliTest, BadBlockIsOneLineAndExitCodeOne) {
  const std::string file = kTestData + "/malformed/launcher-typo.yml";
  for (const char* command : {"expand", "lint"}) {
    const CliRun run = GdtCi({command, "--file", file}, "stderr");
    EXPECT_EQ(run.code, 1) << command;
    EXPECT_EQ(run.output,
              file +
                  ":7:17: train: parallel:distributed:launcher must be one "
                  "of torchrun, env, nccl, none, not 'torchrn' (did you "
                  "mean 'torchrun'?)\n")
        << command;
  }
  // Nothing half-written on stdout either.
  EXPECT_EQ(GdtCi({"expand", "--file", file}, "stdout").output, "");
}

TEST(GdtCiCliTest, LintJsonForScripts) {
  const CliRun bad = GdtCi(
      {"lint", "--json", "--file", kTestData + "/malformed/nodes-zero.yml"},
      "stdout");
  EXPECT_EQ(bad.code, 1);
  const nlohmann::json json = nlohmann::json::parse(bad.output);
  EXPECT_EQ(json["ok"], false);
  EXPECT_EQ(json["errors"][0]["line"], 6);
  EXPECT_EQ(json["errors"][0]["column"], 14);

  const CliRun good =
      GdtCi({"lint", "--json", "--file", kTestData + "/expand/all-keys.yml",
             "--project-dir", kProject},
            "stdout");
  EXPECT_EQ(good.code, 0);
  EXPECT_EQ(nlohmann::json::parse(good.output)["gangs"][0]["nodes"], 4);
}

TEST(GdtCiCliTest, LintExplainsTheGangs) {
  const CliRun run =
      GdtCi({"lint", "--file", kTestData + "/expand/no-block.yml",
             "--project-dir", kProject},
            "stdout");
  EXPECT_EQ(run.code, 0);
  EXPECT_THAT(run.output,
              HasSubstr("train: 2 nodes x 8 GPUs, 8 processes per node "
                        "(world size 16), launcher torchrun [parallel + "
                        "GDT_* variables]"));
}

TEST(GdtCiCliTest, UsageAndIoErrorsExitTwo) {
  const CliRun missing =
      GdtCi({"lint", "--file", "/nonexistent.yml"}, "stderr");
  EXPECT_EQ(missing.code, 2);
  EXPECT_THAT(missing.output, StartsWith("gdt-ci lint: cannot read "));
  EXPECT_EQ(std::count(missing.output.begin(), missing.output.end(), '\n'), 1);

  // A directory is not an empty file: one line and exit 2, both commands.
  for (const char* command : {"lint", "expand"}) {
    const CliRun directory = GdtCi({command, "--file", kTestData}, "stderr");
    EXPECT_EQ(directory.code, 2) << command;
    EXPECT_EQ(directory.output,
              absl::StrCat("gdt-ci ", command, ": cannot read ", kTestData,
                           ": it is a directory, not a file\n"));
  }

  const CliRun unwritable =
      GdtCi({"expand", "--file", kTestData + "/expand/all-keys.yml",
             "--project-dir", kProject, "-o", "/nonexistent/dir/child.yml"},
            "stderr");
  EXPECT_EQ(unwritable.code, 2);
  EXPECT_THAT(unwritable.output,
              StartsWith("gdt-ci expand: cannot write /nonexistent/dir/"));

  const CliRun bad_tag =
      GdtCi({"expand", "--file", kTestData + "/expand/all-keys.yml", "--tag",
             "gpu: a100"},
            "stderr");
  EXPECT_EQ(bad_tag.code, 2);
  EXPECT_THAT(bad_tag.output, StartsWith("gdt-ci expand: --tag 'gpu: a100': "));

  const CliRun bad_flag = GdtCi({"lint", "--max-nodes", "0"}, "stderr");
  EXPECT_EQ(bad_flag.code, 2);
  EXPECT_THAT(bad_flag.output, HasSubstr("--max-nodes"));
}

// Local includes are read from --project-dir (default: the current
// directory); what goes wrong in one is a line with its place, exit 1; a
// project directory that is not there is a usage error, exit 2.
TEST(GdtCiCliTest, LintAndExpandReadLocalIncludesFromTheProject) {
  TempDir dir;
  const std::string project = dir.path();
  std::filesystem::create_directories(project + "/ci");
  test::WriteTextFile(project + "/ci/templates.yml",
                      ".gpu:\n  tags: [a100]\n  retry: 1\n");
  const std::string file = project + "/.gitlab-ci.yml";
  test::WriteTextFile(file,
                      "include:\n  - local: ci/templates.yml\n"
                      "train:\n  extends: .gpu\n  parallel:\n"
                      "    distributed: {nodes: 2}\n  script: [x]\n");
  const CliRun lint =
      GdtCi({"lint", "--file", file, "--project-dir", project}, "stdout");
  EXPECT_EQ(lint.code, 0) << lint.output;
  EXPECT_THAT(lint.output, HasSubstr("ok (1 gang job)"));
  const CliRun expand =
      GdtCi({"expand", "--file", file, "--project-dir", project}, "stdout");
  EXPECT_EQ(expand.code, 0);
  EXPECT_THAT(expand.output, HasSubstr("    - \"a100\"\n    - gdt\n"));
  EXPECT_THAT(expand.output,
              HasSubstr("include:\n  - local: ci/templates.yml"));

  // From another directory the include is not in the project.
  for (const char* command : {"lint", "expand"}) {
    const CliRun missing =
        GdtCi({command, "--file", file, "--project-dir", kTestData}, "stderr");
    EXPECT_EQ(missing.code, 1) << command;
    EXPECT_EQ(missing.output,
              absl::StrCat(file,
                           ":2:5: include: 'ci/templates.yml' does not exist "
                           "in the project ",
                           kTestData, "\n"))
        << command;
    const CliRun no_dir = GdtCi(
        {command, "--file", file, "--project-dir", "/nonexistent"}, "stderr");
    EXPECT_EQ(no_dir.code, 2) << command;
    EXPECT_EQ(no_dir.output,
              absl::StrCat("gdt-ci ", command,
                           ": --project-dir: project directory "
                           "'/nonexistent' does not exist or is not a "
                           "directory\n"))
        << command;
  }
  const CliRun json = GdtCi(
      {"lint", "--json", "--file", file, "--project-dir", kTestData}, "stdout");
  EXPECT_EQ(json.code, 1);
  EXPECT_EQ(nlohmann::json::parse(json.output)["errors"][0]["line"], 2);
}

// A child pipeline's file, linted on its own from the project, is read as
// GitLab reads that child pipeline: with the other files of the parent
// job's trigger:include, not with the parent's own files.
TEST(GdtCiCliTest, LintReadsAChildPipelinesFileWithItsTriggerInclude) {
  TempDir dir;
  const std::string project = dir.path();
  std::filesystem::create_directories(project + "/ci");
  test::WriteTextFile(project + "/.gitlab-ci.yml",
                      "include: [ci/parent.yml]\n"
                      "tests:\n  trigger:\n    include:\n"
                      "      - local: ci/child.yml\n"
                      "      - local: ci/child-templates.yml\n");
  test::WriteTextFile(project + "/ci/parent.yml", ".cpu:\n  tags: [cpu]\n");
  test::WriteTextFile(project + "/ci/child-templates.yml",
                      ".gpu:\n  tags: [a100]\n");
  const std::string child = project + "/ci/child.yml";
  test::WriteTextFile(child, "train:\n  extends: .gpu\n  script: [x]\n");
  const CliRun ok =
      GdtCi({"lint", "--file", child, "--project-dir", project}, "stdout");
  EXPECT_EQ(ok.code, 0) << ok.output;
  EXPECT_THAT(ok.output, HasSubstr("ok (0 gang jobs)"));
  test::WriteTextFile(child, "train:\n  extends: .cpu\n  script: [x]\n");
  const CliRun parents =
      GdtCi({"lint", "--file", child, "--project-dir", project}, "stderr");
  EXPECT_EQ(parents.code, 1);
  EXPECT_EQ(parents.output,
            absl::StrCat(child,
                         ":2:12: train: unknown keys in `extends` (.cpu): not "
                         "in this file nor in the other files of the child "
                         "pipeline that job 'tests' of .gitlab-ci.yml starts "
                         "(trigger:include), so GitLab refuses it; a child "
                         "pipeline does not see its parent's templates\n"));
}

// --var gives include rules the pipeline's variables: a file whose rule
// the branch decides is read only on that branch; without the variable it
// is read. A bad --var is one line, exit 2.
TEST(GdtCiCliTest, LintAndExpandGiveIncludeRulesThePipelinesVariables) {
  TempDir dir;
  const std::string project = dir.path();
  std::filesystem::create_directories(project + "/ci");
  test::WriteTextFile(project + "/ci/main.yml",
                      "release:\n  script: [x]\n  parallel: 2\n"
                      "  variables: {GDT_GPUS_PER_NODE: \"1\"}\n");
  const std::string file = project + "/.gitlab-ci.yml";
  test::WriteTextFile(file,
                      "include:\n  - local: ci/main.yml\n    rules:\n"
                      "      - if: $CI_COMMIT_BRANCH == \"main\"\n"
                      "train:\n  script: [x]\n");
  const auto lint = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"lint", "--file", file, "--project-dir",
                                     project};
    args.insert(args.end(), extra.begin(), extra.end());
    return GdtCi(args, "stdout");
  };
  EXPECT_THAT(lint({}).output, HasSubstr("ok (1 gang job)"));
  EXPECT_THAT(lint({"--var", "CI_COMMIT_BRANCH=main"}).output,
              HasSubstr("ok (1 gang job)"));
  const CliRun feature = lint({"--var", "CI_COMMIT_BRANCH=feature"});
  EXPECT_EQ(feature.code, 0);
  EXPECT_THAT(feature.output, HasSubstr("ok (0 gang jobs)"));
  for (const char* command : {"lint", "expand"}) {
    const CliRun bad = GdtCi({command, "--file", file, "--project-dir", project,
                              "--var", "no-equals"},
                             "stderr");
    EXPECT_EQ(bad.code, 2) << command;
    EXPECT_EQ(bad.output, absl::StrCat("gdt-ci ", command,
                                       ": bad --var 'no-equals': expected "
                                       "KEY=VALUE\n"));
  }
}

// Ids and timeouts that the job-id or clock arithmetic cannot hold, and a
// negative kill grace, are refused as the command line is read: one line
// naming the flag, exit 2.
TEST(GdtCiCliTest, RunLocalRefusesIdsAndTimeoutsOutOfRange) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"--pipeline-id", "9223372036854775807"},
      {"--pipeline-id", "1000000000000001"},
      {"--first-job-id", "9223372036854775807"},
      {"--first-job-id", "0"},
      {"--timeout", "9223372036854775807"},
      {"--timeout", "316224001"},
      {"--maximum-timeout", "0"},
      {"--maximum-timeout", "316224001"},
      {"--graceful-kill-timeout", "9223372036854775807"},
      {"--graceful-kill-timeout", "-5"},
      {"--graceful-kill-timeout", "0"},
  };
  for (const auto& [flag, value] : bad) {
    const CliRun run = GdtCi(
        {"run-local", "--job", "job", "--executor", "/bin/true", flag, value},
        "stderr");
    EXPECT_EQ(run.code, 2) << flag << " " << value << ": " << run.output;
    // One line naming the flag, ending with the pointer to --help.
    EXPECT_THAT(run.output,
                StartsWith(absl::StrCat("gdt-ci: ", flag, ": Value ", value,
                                        " not in range 1 to ")))
        << run.output;
    EXPECT_THAT(run.output, EndsWith(" (--help says more)\n")) << run.output;
  }
}

// gitlab-runner waits 3 s between preparation attempts that failed as a
// system failure; --preparation-retry-interval sets the wait (0..60 s), and
// the log names it.
TEST(GdtCiCliTest, RunLocalWaitsThePreparationRetryIntervalItIsGiven) {
  for (const std::string value : {"-1", "60.5", "soon", "nan", "inf"}) {
    const CliRun run =
        GdtCi({"run-local", "--job", "job", "--executor", "/bin/true",
               "--preparation-retry-interval", value},
              "stderr");
    EXPECT_EQ(run.code, 2) << value << ": " << run.output;
    EXPECT_THAT(run.output,
                StartsWith(absl::StrCat(
                    "gdt-ci: --preparation-retry-interval: Value ", value,
                    " not in range 0 to 60 (--help says more)\n")))
        << run.output;
  }

  TempDir dir;
  const std::string project = dir.path() + "/project";
  std::filesystem::create_directories(project);
  test::WriteTextFile(project + "/.gitlab-ci.yml", "job: {script: echo ran}\n");
  const std::string executor = test::WriteFakeExecutor(dir.path());
  std::filesystem::create_directories(dir.path() + "/rec");
  setenv("FAKE_REC", (dir.path() + "/rec").c_str(), 1);
  // SYSTEM_FAILURE_EXIT_CODE at every attempt: three attempts, each waited
  // out (the runner waits after the last one too).
  setenv("FAKE_PREPARE_EXIT", "2", 1);
  const auto start = std::chrono::steady_clock::now();
  const CliRun run = GdtCi(
      {"run-local", "--job", "job", "--executor", executor, "--project-dir",
       project, "--file", project + "/.gitlab-ci.yml", "--pipeline-id", "5",
       "--no-retry", "--preparation-retry-interval", "0.25"},
      "stdout");
  const auto took = std::chrono::steady_clock::now() - start;
  unsetenv("FAKE_PREPARE_EXIT");
  unsetenv("FAKE_REC");
  EXPECT_EQ(run.code, 1) << run.output;
  const std::string log = ReadTextFile(project + "/.gdt-run/5/logs/job.log");
  EXPECT_THAT(log, HasSubstr("Will be retried in 250ms ...")) << log;
  EXPECT_THAT(log, HasSubstr("ERROR: Job failed (system failure)")) << log;
  EXPECT_GE(took, std::chrono::milliseconds(750));
  EXPECT_LT(took, std::chrono::seconds(6)) << "the runner's 3 s were waited";
}

// In a build tree gdt-executor is in executor/, not beside gdt-ci: the
// default --executor finds it there, so the README's commands work as
// written.
TEST(GdtCiCliTest, RunLocalFindsTheExecutorOfTheBuildTree) {
  const CliRun help = GdtCi({"run-local", "--help"}, "stdout");
  EXPECT_EQ(help.code, 0);
  EXPECT_THAT(
      help.output,
      HasSubstr(
          std::filesystem::path(GDT_EXECUTOR_BIN).lexically_normal().string()));
}

// Ctrl-C as gitlab-runner takes it, then more: the first SIGINT stops the
// job gracefully (SIGTERM to its executor), the second SIGKILLs the
// executor at once but still runs cleanup_exec, a third kills that too.
// Each step is waited for on what the executor records, with a deadline far
// below the 600 s graceful_kill_timeout a second signal used to wait out.
TEST(GdtCiCliTest, RunLocalSecondInterruptKillsTheExecutorAtOnce) {
  TempDir dir;
  const std::string rec = dir.Sub("rec");
  const std::string project = dir.Sub("project");
  std::filesystem::create_directories(rec);
  std::filesystem::create_directories(project);
  test::WriteTextFile(project + "/.gitlab-ci.yml",
                      "job:\n  script: [\"echo hi\"]\n");
  // The build_script stage and cleanup_exec both ignore SIGTERM and never
  // end by themselves.
  const std::string executor = dir.Sub("slow-executor");
  test::WriteTextFile(executor, R"(#!/usr/bin/env bash
case "$1" in
  run)
    if [ "${@: -1}" = build_script ]; then
      trap 'echo term >> "$REC/run-signals"' TERM
      echo $$ > "$REC/run-started"
      while true; do sleep 0.05; done
    fi
    bash "$2" ;;
  cleanup)
    trap 'echo term >> "$REC/cleanup-signals"' TERM
    echo $$ > "$REC/cleanup-started"
    while true; do sleep 0.05; done ;;
esac
exit 0
)",
                      0755);

  // Whatever happens, no exec is left behind (each leads its own group).
  struct KillExecs {
    std::string rec;
    ~KillExecs() {
      for (const char* file : {"/run-started", "/cleanup-started"}) {
        const std::string pid = ReadTextFile(rec + file);
        if (!pid.empty()) killpg(std::stoi(pid), SIGKILL);
      }
    }
  } kill_execs{rec};

  SpawnOptions spawn;
  spawn.argv = {GDT_CI_BIN,      "run-local",
                "--job",         "job",
                "--executor",    executor,
                "--project-dir", project,
                "--file",        project + "/.gitlab-ci.yml",
                "--pipeline-id", "7"};
  spawn.env = CurrentEnvironment();
  spawn.env["REC"] = rec;
  spawn.die_with_parent = true;
  absl::StatusOr<std::unique_ptr<Subprocess>> child = Subprocess::Spawn(spawn);
  ASSERT_TRUE(child.ok()) << child.status();
  std::string output;
  const auto keep = [&output](OutputSource, std::string_view data) {
    output.append(data);
  };
  // Waits for `done` (or the child's exit) for at most 60 s.
  const auto await = [&](const std::function<bool()>& done) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!done() && !(*child)->exit_status().has_value() &&
           std::chrono::steady_clock::now() < deadline) {
      (*child)->WaitUntil(
          std::chrono::steady_clock::now() + std::chrono::milliseconds(20),
          keep);
    }
    return done();
  };
  const auto exists = [](const std::string& path) {
    return [path] { return std::filesystem::exists(path); };
  };

  ASSERT_TRUE(await(exists(rec + "/run-started"))) << output;
  ASSERT_EQ(kill((*child)->pid(), SIGINT), 0);
  ASSERT_TRUE(await(exists(rec + "/run-signals"))) << output;
  EXPECT_FALSE(std::filesystem::exists(rec + "/cleanup-started"));

  ASSERT_EQ(kill((*child)->pid(), SIGINT), 0);
  ASSERT_TRUE(await(exists(rec + "/cleanup-started"))) << output;

  ASSERT_EQ(kill((*child)->pid(), SIGINT), 0);
  const std::optional<ExitStatus> status = (*child)->WaitUntil(
      std::chrono::steady_clock::now() + std::chrono::seconds(60), keep);
  ASSERT_TRUE(status.has_value()) << output;
  EXPECT_EQ(status->code(), 1) << output;  // The job failed.
  EXPECT_THAT(output, HasSubstr("gdt-ci run-local: killing the jobs' "
                                "executors (SIGKILL to their process "
                                "groups)"));
  EXPECT_THAT(output, HasSubstr("runner_interrupted"));
  // cleanup_exec was killed outright, never sent SIGTERM.
  EXPECT_FALSE(std::filesystem::exists(rec + "/cleanup-signals"));
}

// An executor for the stop-signal tests: build_script records its pid and
// runs until signalled; cleanup_exec notes that it ran.
std::string WriteStoppableExecutor(TempDir& dir) {
  const std::string executor = dir.Sub("stoppable-executor");
  test::WriteTextFile(executor, R"(#!/usr/bin/env bash
case "$1" in
  run)
    if [ "${@: -1}" = build_script ]; then
      echo $$ > "$REC/run-started"
      while true; do sleep 0.05; done
    fi
    bash "$2" ;;
  cleanup)
    echo ran > "$REC/cleanup-ran" ;;
esac
exit 0
)",
                      0755);
  return executor;
}

// run-local with the stoppable executor, its custom-executor temporary dirs
// under `tmp`.
absl::StatusOr<std::unique_ptr<Subprocess>> SpawnStoppableRun(
    TempDir& dir, const std::string& rec, const std::string& tmp) {
  const std::string project = dir.Sub("project");
  std::filesystem::create_directories(project);
  std::filesystem::create_directories(rec);
  std::filesystem::create_directories(tmp);
  test::WriteTextFile(project + "/.gitlab-ci.yml",
                      "job:\n  script: [\"echo hi\"]\n");
  SpawnOptions spawn;
  spawn.argv = {GDT_CI_BIN,      "run-local",
                "--job",         "job",
                "--executor",    WriteStoppableExecutor(dir),
                "--project-dir", project,
                "--file",        project + "/.gitlab-ci.yml",
                "--pipeline-id", "7"};
  spawn.env = CurrentEnvironment();
  spawn.env["REC"] = rec;
  spawn.env["TMPDIR"] = tmp;
  spawn.die_with_parent = true;
  return Subprocess::Spawn(spawn);
}

// Waits (60 s at most) until `path` exists or `child` has exited.
bool AwaitFile(Subprocess& child, const std::string& path,
               std::string& output) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!std::filesystem::exists(path) && !child.exit_status().has_value() &&
         std::chrono::steady_clock::now() < deadline) {
    child.WaitUntil(
        std::chrono::steady_clock::now() + std::chrono::milliseconds(20),
        [&output](OutputSource, std::string_view data) {
          output.append(data);
        });
  }
  return std::filesystem::exists(path);
}

// Whether the process `pid_file` names has ended (a zombie that nobody
// reaps counts), waiting 30 s at most.
bool ProcessGone(const std::string& pid_file) {
  const std::string pid = ReadTextFile(pid_file);
  const auto gone = [&pid] {
    const std::string stat = ReadTextFile("/proc/" + pid + "/stat");
    const size_t paren = stat.rfind(')');
    return paren == std::string::npos || stat.substr(paren + 2, 1) == "Z";
  };
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!gone() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return gone();
}

// A closed terminal (SIGHUP) and SIGQUIT stop the pipeline as SIGINT and
// SIGTERM do: the job is aborted as runner_interrupted, cleanup_exec runs,
// the custom-executor temporary dir is removed and no exec is left. Before,
// either signal ended run-local on the spot and left all three behind, as
// did SIGPIPE (a closed output), which is now ignored: run-local lives on
// until the SIGTERM sent after it.
TEST(GdtCiCliTest, RunLocalHangupAndQuitEndTheJobAndLeaveNothing) {
  for (const int sig : {SIGHUP, SIGQUIT, SIGPIPE}) {
    SCOPED_TRACE(strsignal(sig));
    TempDir dir;
    const std::string rec = dir.Sub("rec");
    const std::string tmp = dir.Sub("tmp");
    absl::StatusOr<std::unique_ptr<Subprocess>> child =
        SpawnStoppableRun(dir, rec, tmp);
    ASSERT_TRUE(child.ok()) << child.status();
    std::string output;
    ASSERT_TRUE(AwaitFile(**child, rec + "/run-started", output)) << output;
    ASSERT_EQ(kill((*child)->pid(), sig), 0);
    if (sig == SIGPIPE) ASSERT_EQ(kill((*child)->pid(), SIGTERM), 0);
    const std::optional<ExitStatus> status = (*child)->WaitUntil(
        std::chrono::steady_clock::now() + std::chrono::seconds(60),
        [&output](OutputSource, std::string_view data) {
          output.append(data);
        });
    ASSERT_TRUE(status.has_value()) << output;
    EXPECT_EQ(status->code(), 1) << output;  // The job failed.
    EXPECT_THAT(output, HasSubstr("runner_interrupted"));
    EXPECT_TRUE(std::filesystem::exists(rec + "/cleanup-ran")) << output;
    EXPECT_TRUE(std::filesystem::is_empty(tmp)) << output;
    EXPECT_TRUE(ProcessGone(rec + "/run-started"));
  }
}

// run-local's exit code is the pipeline's outcome as GitLab computes it: a
// failure allow_failure allows passes (with warnings, exit 0); a failure
// fails it (exit 1) even when a later `when: always` job runs and passes.
TEST(GdtCiCliTest, RunLocalExitsWithThePipelinesOutcome) {
  TempDir dir;
  const std::string project = dir.path() + "/project";
  std::filesystem::create_directories(project);
  test::WriteTextFile(project + "/.gitlab-ci.yml", R"(
stages: [a, b]
flaky: {stage: a, allow_failure: true, script: exit 1}
broken: {stage: a, script: exit 2}
report: {stage: b, when: always, script: echo report ran}
)");
  const std::string executor = test::WriteFakeExecutor(dir.path());
  std::filesystem::create_directories(dir.path() + "/rec");
  setenv("FAKE_REC", (dir.path() + "/rec").c_str(), 1);
  const auto run = [&](const std::string& first, const std::string& pipeline) {
    return GdtCi({"run-local", "--job", first, "--job", "report", "--executor",
                  executor, "--project-dir", project, "--file",
                  project + "/.gitlab-ci.yml", "--pipeline-id", pipeline},
                 "stdout");
  };

  const CliRun allowed = run("flaky", "7");
  EXPECT_EQ(allowed.code, 0) << allowed.output;
  EXPECT_THAT(allowed.output, HasSubstr("failed (allowed)"));
  EXPECT_THAT(allowed.output, HasSubstr("[report] report ran\n"));
  EXPECT_THAT(allowed.output, HasSubstr("\npipeline 7 passed with warnings\n"));

  const CliRun failed = run("broken", "8");
  EXPECT_EQ(failed.code, 1) << failed.output;
  EXPECT_THAT(failed.output, HasSubstr("[report] report ran\n"));
  EXPECT_THAT(failed.output, HasSubstr("\npipeline 8 failed\n"));
  unsetenv("FAKE_REC");
}

}  // namespace
}  // namespace gdt::ci
