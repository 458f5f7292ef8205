#include "ci/runner_emulator.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/secret.h"
#include "common/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/fake_executor.h"

namespace gdt::ci {
namespace {

using std::chrono::milliseconds;
using test::ReadTextFile;
using test::TempDir;
using test::WriteTextFile;
using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

namespace fs = std::filesystem;

class RunnerEmulatorTest : public ::testing::Test {
 protected:
  // Runs git in `repo` as a committer of its own; `output` gets what it
  // printed. True when it succeeded.
  static bool Git(const std::string& repo, std::vector<std::string> args,
                  std::string& output) {
    std::vector<std::string> argv = {"git",
                                     "-C",
                                     repo,
                                     "-c",
                                     "user.name=Ada",
                                     "-c",
                                     "user.email=ada@example.com"};
    argv.insert(argv.end(), args.begin(), args.end());
    output.clear();
    absl::StatusOr<ExitStatus> status =
        RunCommand(argv, std::chrono::seconds(30), &output);
    return status.ok() && status->success();
  }

  // Commits everything in the project directory (git init first when it is
  // not a repository yet) and points the job at that commit on ref main.
  ::testing::AssertionResult CommitProject(const std::string& message) {
    const std::string project = dir_.path() + "/project";
    std::string output;
    const bool ok =
        (fs::exists(project + "/.git") ||
         Git(project, {"init", "-q"}, output)) &&
        Git(project, {"add", "-A"}, output) &&
        Git(project, {"commit", "-q", "--allow-empty", "-m", message},
            output) &&
        Git(project, {"rev-parse", "HEAD"}, output);
    if (!ok) {
      return ::testing::AssertionFailure() << "git: " << output;
    }
    options_.job.sha = output.substr(0, 40);
    options_.job.ref = "main";
    return ::testing::AssertionSuccess();
  }

  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    rec_ = dir_.path() + "/rec";
    tmp_ = dir_.path() + "/tmp";
    fs::create_directories(rec_);
    fs::create_directories(tmp_);
    fs::create_directories(dir_.path() + "/project");
    WriteTextFile(dir_.path() + "/project/model.py", "print('hi')\n");
    const std::string exec = test::WriteFakeExecutor(dir_.path());

    options_.config.builds_dir = dir_.path() + "/builds";
    options_.config.cache_dir = dir_.path() + "/cache";
    options_.config.config_exec = exec;
    options_.config.config_args = {"config"};
    options_.config.prepare_exec = exec;
    options_.config.prepare_args = {"prepare"};
    options_.config.run_exec = exec;
    options_.config.run_args = {"run"};
    options_.config.cleanup_exec = exec;
    options_.config.cleanup_args = {"cleanup"};
    options_.config.preparation_retry_interval = milliseconds(10);
    options_.config.stage_retry_interval = milliseconds(10);

    env_ = CurrentEnvironment();
    env_["TMPDIR"] = tmp_;
    env_["FAKE_REC"] = rec_;

    gitlab::JobPayload& job = options_.job;
    job.id = 1002;
    job.token = "glcbt-TEST-1002";
    job.name = "train 2/4";
    job.stage = "test";
    job.project_id = 5;
    job.project_name = "model";
    job.pipeline_id = 77;
    job.repo_url =
        "https://gitlab-ci-token:glcbt-TEST-1002@gitlab.test/ml/model.git";
    job.timeout_seconds = 60;
    job.variables = {{"CI_JOB_ID", "1002"},
                     {"CI_NODE_INDEX", "2"},
                     {"MODEL_CONFIG", "lr: 0.1\n", true, true}};
    job.steps = {{"script", {"echo hello from $CI_NODE_INDEX", "cat model.py"}},
                 {"after_script", {"echo after $CI_JOB_STATUS"}}};
    gitlab::JobArtifact artifact;
    artifact.paths = {"model.py"};
    artifact.when = "always";
    job.artifacts = {artifact};
    options_.sources.project_dir = dir_.path() + "/project";
    options_.sources.artifact_store = dir_.path() + "/store";
  }

  JobResult Run() {
    options_.runner_environment = env_;
    options_.job_log = [this](std::string_view line) {
      raw_log_lines_.emplace_back(line);
      log_lines_.emplace_back(WithoutSectionMarkers(line));
    };
    options_.diagnostics = [this](std::string_view level,
                                  std::string_view line) {
      diagnostics_.push_back(std::string(level) + ": " + std::string(line));
    };
    RunnerEmulator runner(options_);
    return runner.Run();
  }

  // Runs the job and cancels it once the fake's hanging stage has started.
  JobResult RunAndCancelWhenHung(CancelMode mode) {
    options_.runner_environment = env_;
    options_.job_log = [this](std::string_view line) {
      raw_log_lines_.emplace_back(line);
      log_lines_.emplace_back(WithoutSectionMarkers(line));
    };
    RunnerEmulator runner(options_);
    JobResult result;
    std::thread job([&] { result = runner.Run(); });
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!fs::exists(rec_ + "/hang_started") &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(10));
    }
    runner.Cancel(mode);
    job.join();
    return result;
  }

  // "<exec> <stage>" per call, from the result and from the fake's record.
  static std::vector<std::string> Calls(const JobResult& result) {
    std::vector<std::string> calls;
    for (const ExecCall& call : result.calls) {
      calls.push_back(call.exec + " " + call.stage);
    }
    return calls;
  }
  std::vector<std::string> RecordedCalls() const {
    return absl::StrSplit(ReadTextFile(rec_ + "/calls"), '\n',
                          absl::SkipEmpty());
  }
  // The environment a fake exec recorded, one VAR=value a line, with a
  // line break first so that "\nVAR=" finds the first variable too (the
  // order is not fixed).
  std::string EnvOf(int n, const std::string& suffix) const {
    return "\n" +
           ReadTextFile(rec_ + "/env." + std::to_string(n) + "." + suffix);
  }
  std::string Log() const {
    std::string text;
    for (const std::string& line : log_lines_) text += line + "\n";
    return text;
  }

  TempDir dir_;
  std::string rec_;
  std::string tmp_;
  std::map<std::string, std::string> env_;
  RunnerEmulator::Options options_;
  // The job log as a terminal shows it (section markers hidden), and as
  // GitLab would store it.
  std::vector<std::string> log_lines_;
  std::vector<std::string> raw_log_lines_;
  std::vector<std::string> diagnostics_;
};

TEST_F(RunnerEmulatorTest, CallsStagesInRunnerOrder) {
  JobResult result = Run();

  EXPECT_EQ(result.status, JobStatus::kSuccess) << Log();
  const std::vector<std::string> expected = {"config ",
                                             "prepare ",
                                             "run prepare_script",
                                             "run get_sources",
                                             "run build_script",
                                             "run after_script",
                                             "run upload_artifacts_on_success",
                                             "run cleanup_file_variables",
                                             "cleanup "};
  EXPECT_EQ(Calls(result), expected);
  EXPECT_EQ(RecordedCalls(), expected);
  EXPECT_EQ(result.calls[4].argv[0], options_.config.run_exec);
  EXPECT_EQ(result.calls[4].argv[1], "run");
  EXPECT_THAT(result.calls[4].argv[2], HasSubstr("/script"));
  EXPECT_EQ(result.calls[4].argv[3], "build_script");
}

// Each stage that runs sits in a GitLab section named after the runner's
// build stage, opened on its header line and closed before the next
// section or the job's last line, with the wall-clock second of each, so
// GitLab would fold the stage's output under its header.
TEST_F(RunnerEmulatorTest, EachStageIsASectionOfTheJobLog) {
  const int64_t before =
      std::chrono::duration_cast<std::chrono::seconds>(
          std::chrono::system_clock::now().time_since_epoch())
          .count();
  JobResult result = Run();
  const int64_t after = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  ASSERT_EQ(raw_log_lines_.size(), log_lines_.size());

  struct Marker {
    std::string kind;
    int64_t time;
    std::string name;
    size_t line;
  };
  std::vector<Marker> markers;
  std::map<std::string, std::string> header;  // Section -> its header line.
  for (size_t i = 0; i < raw_log_lines_.size(); ++i) {
    std::string_view rest = raw_log_lines_[i];
    while (rest.substr(0, 8) == "section_") {
      const size_t clear = rest.find("\r\x1b[0K");
      ASSERT_NE(clear, std::string_view::npos) << raw_log_lines_[i];
      const std::vector<std::string> parts =
          absl::StrSplit(std::string(rest.substr(0, clear)), ':');
      ASSERT_EQ(parts.size(), 3u) << raw_log_lines_[i];
      Marker marker{parts[0], 0, parts[2], i};
      ASSERT_TRUE(absl::SimpleAtoi(parts[1], &marker.time)) << parts[1];
      markers.push_back(marker);
      rest.remove_prefix(clear + 5);
      if (marker.kind == "section_start") header[marker.name] = rest;
    }
    EXPECT_EQ(rest, log_lines_[i]);
  }

  std::vector<std::string> sections;
  std::string open;
  int64_t last = before;
  for (const Marker& marker : markers) {
    EXPECT_GE(marker.time, last) << marker.name;
    EXPECT_LE(marker.time, after) << marker.name;
    last = marker.time;
    if (marker.kind == "section_start") {
      EXPECT_EQ(open, "") << marker.name << " starts inside " << open;
      open = marker.name;
      sections.push_back(marker.name);
    } else {
      EXPECT_EQ(marker.kind, "section_end");
      EXPECT_EQ(marker.name, open);
      open.clear();
    }
  }
  EXPECT_EQ(open, "");
  EXPECT_THAT(
      sections,
      ElementsAre("prepare_executor", "prepare_script", "get_sources",
                  "step_script", "after_script", "upload_artifacts_on_success",
                  "cleanup_file_variables"));
  EXPECT_EQ(header["prepare_executor"], "Preparing the \"custom\" executor");
  EXPECT_EQ(header["step_script"],
            "Executing \"step_script\" stage of the job script");
  EXPECT_EQ(header["cleanup_file_variables"],
            "Cleaning up project directory and file based variables");
  // The script's output lies inside its section; the last line, after
  // every section.
  const auto output =
      std::find(log_lines_.begin(), log_lines_.end(), "hello from 2");
  ASSERT_NE(output, log_lines_.end()) << Log();
  const size_t output_line = output - log_lines_.begin();
  const auto step_start =
      std::find_if(markers.begin(), markers.end(),
                   [](const Marker& m) { return m.name == "step_script"; });
  ASSERT_NE(step_start, markers.end());
  EXPECT_LT(step_start->line, output_line);
  EXPECT_GT((step_start + 1)->line, output_line);
  EXPECT_EQ(log_lines_.back(), "Job succeeded");
  EXPECT_EQ(markers.back().line, log_lines_.size() - 1);
  EXPECT_EQ(markers.back().kind, "section_end");
}

// The job log's header and CI_RUNNER_VERSION / CI_RUNNER_REVISION name the
// same runner: the release run-local follows, with a revision of its own;
// the system ID is the one a runner derives from this machine's ID.
TEST_F(RunnerEmulatorTest, HeaderNamesTheRunnerReleaseItFollows) {
  options_.job.steps = {
      {"script",
       {"echo \"version=$CI_RUNNER_VERSION ($CI_RUNNER_REVISION)\""}}};

  JobResult result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  ASSERT_GE(log_lines_.size(), 2u);
  EXPECT_EQ(log_lines_[0], "Running with gitlab-runner 19.3.0 (gdtlocal)");
  EXPECT_THAT(log_lines_, Contains("version=19.3.0 (gdtlocal)"));
  std::string machine_id = ReadTextFile("/var/lib/dbus/machine-id");
  if (machine_id.empty()) machine_id = ReadTextFile("/etc/machine-id");
  while (!machine_id.empty() && machine_id.back() == '\n') {
    machine_id.pop_back();
  }
  if (!machine_id.empty()) {
    EXPECT_EQ(log_lines_[1],
              "  on gdt-ci-local gdtlocal, system ID: s_" +
                  HmacSha256Hex(machine_id, "gitlab-runner").substr(0, 12));
  } else {
    EXPECT_THAT(
        log_lines_[1],
        ::testing::MatchesRegex(
            "  on gdt-ci-local gdtlocal, system ID: r_[A-Za-z0-9]{12}"));
  }

  options_.config.system_id = "s_0123456789ab";
  log_lines_.clear();
  result = Run();

  ASSERT_GE(log_lines_.size(), 2u);
  EXPECT_EQ(log_lines_[1],
            "  on gdt-ci-local gdtlocal, system ID: s_0123456789ab");
}

// Every feature flag of the runner reaches the job, with its default or
// its resolved value: config.toml's first, then the job's variable when it
// is a Go bool (a bad one is reported, twice, as the runner does); the
// header names the flags that differ from their defaults.
TEST_F(RunnerEmulatorTest, FeatureFlagsReachTheJobAsTheRunnerResolvesThem) {
  options_.config.feature_flags = {{"FF_USE_FASTZIP", true}};
  options_.job.variables.push_back({"FF_USE_FASTZIP", "false"});
  options_.job.variables.push_back({"FF_SCRIPT_SECTIONS", "1"});
  options_.job.variables.push_back({"FF_TIMESTAMPS", "nope"});
  options_.job.steps = {
      {"script",
       {"echo \"flags=$FF_USE_FASTZIP $FF_SCRIPT_SECTIONS $FF_TIMESTAMPS "
        "$FF_USE_DIRECT_DOWNLOAD $FF_NETWORK_PER_BUILD\""}}};

  JobResult result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_, Contains("flags=true true true true false"));
  EXPECT_THAT(log_lines_, Contains("  feature flags: FF_USE_FASTZIP:true, "
                                   "FF_SCRIPT_SECTIONS:true"));
  const std::string bad =
      "FF_TIMESTAMPS: could not parse feature flag, expected bool, got nope";
  EXPECT_EQ(
      std::count(log_lines_.begin(), log_lines_.end(), "WARNING: " + bad) +
          std::count(log_lines_.begin(), log_lines_.end(), bad),
      2)
      << Log();
  // The executor sees them too.
  EXPECT_THAT(EnvOf(0, "config"),
              HasSubstr("CUSTOM_ENV_FF_USE_DIRECT_DOWNLOAD=true\n"));
  EXPECT_THAT(EnvOf(0, "config"),
              HasSubstr("CUSTOM_ENV_FF_SCRIPT_SECTIONS=true\n"));
}

TEST_F(RunnerEmulatorTest, JobLogShowsCommandsAndOutputButNotCleanup) {
  JobResult result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_, Contains("$ echo hello from $CI_NODE_INDEX"));
  EXPECT_THAT(log_lines_, Contains("hello from 2"));
  EXPECT_THAT(log_lines_, Contains("print('hi')"));
  EXPECT_THAT(log_lines_, Contains("after success"));
  EXPECT_THAT(log_lines_, Contains("preparing member"));
  EXPECT_THAT(log_lines_, Contains("config on stderr"));
  EXPECT_THAT(log_lines_, Contains("Using Custom executor..."));
  EXPECT_THAT(log_lines_, Contains("Job succeeded"));
  EXPECT_THAT(log_lines_, Not(Contains("cleanup stdout")));
  EXPECT_THAT(diagnostics_, Contains("debug: cleanup stdout"));
  EXPECT_THAT(diagnostics_, Contains("warn: cleanup stderr"));
}

TEST_F(RunnerEmulatorTest, SecretsAreMaskedInTheJobLogAsTheRunnerMasksThem) {
  options_.job.variables.push_back(
      {"WANDB_API_KEY", "wandb-0123456789", false, false, true});
  options_.job.variables.push_back(
      {"CI_JOB_TOKEN", options_.job.token, false, false, true});
  options_.job.steps = {
      {"script",
       {"echo \"key $WANDB_API_KEY token $CI_JOB_TOKEN other glcbt-a.b_c\"",
        "echo \"url https://h/api?private_token=$WANDB_API_KEY&x=1\""}}};

  JobResult result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_,
              Contains("key [MASKED] token [MASKED] other glcbt-[MASKED]"));
  EXPECT_THAT(log_lines_,
              Contains("url https://h/api?private_token=[MASKED]&x=1"));
  EXPECT_THAT(Log(), Not(HasSubstr("wandb-0123456789")));
  EXPECT_THAT(Log(), Not(HasSubstr("TEST-1002")));
}

TEST_F(RunnerEmulatorTest, OnlyPersonalTokensAreMaskedWithoutTheFeatureFlag) {
  options_.job.variables.push_back({"FF_MASK_ALL_DEFAULT_TOKENS", "false"});
  options_.job.steps = {{"script", {"echo glcbt-abc glpat-def"}}};

  JobResult result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_, Contains("glcbt-abc glpat-[MASKED]"));
}

// The runner hands a stage's commands to bash through eval, which reads
// and runs them one at a time: a syntax error in a later command leaves the
// earlier ones run, and fails the job at the bad one.
TEST_F(RunnerEmulatorTest, CommandsBeforeASyntaxErrorStillRun) {
  options_.job.steps = {
      {"script",
       {"echo before the error", "echo 'never closed", "echo after"}}};

  JobResult result = Run();

  EXPECT_EQ(result.status, JobStatus::kFailed);
  EXPECT_EQ(result.failure_reason, "script_failure");
  EXPECT_THAT(log_lines_, Contains("before the error"));
  EXPECT_THAT(log_lines_, Not(Contains("after")));
}

// The job log stops at output_limit, saying so, and the job goes on (its
// last command still runs).
TEST_F(RunnerEmulatorTest, TheJobLogStopsAtItsOutputLimit) {
  options_.config.output_limit_bytes = 4096;
  options_.job.steps = {{"script",
                         {"for i in $(seq 1 2000); do echo \"line $i\"; done",
                          "echo done > \"$CI_PROJECT_DIR/finished\""}}};
  options_.job.artifacts[0].paths = {"finished"};

  JobResult result = Run();

  EXPECT_EQ(result.status, JobStatus::kSuccess);
  EXPECT_THAT(log_lines_, Contains("Job's log exceeded limit of 4096 bytes."));
  EXPECT_EQ(log_lines_.back(),
            "Job execution will continue but no more output will be "
            "collected.");
  EXPECT_THAT(log_lines_, Not(Contains("line 2000")));
  size_t bytes = 0;
  for (size_t i = 0; i + 2 < log_lines_.size(); ++i) {
    bytes += log_lines_[i].size() + 1;
  }
  EXPECT_LE(bytes, 4096u);
  // The job went on to its end: its last command ran, its artifact stored.
  EXPECT_TRUE(fs::exists(dir_.path() + "/store/1002/finished"));
}

TEST_F(RunnerEmulatorTest, CopiesSourcesAndStoresArtifacts) {
  JobResult result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_EQ(ReadTextFile(dir_.path() + "/builds/ml/model/model.py"),
            "print('hi')\n");
  EXPECT_EQ(ReadTextFile(dir_.path() + "/store/1002/model.py"),
            "print('hi')\n");
}

// A git checkout whose files are named like options is copied whole: the
// names reach cp after "--" (a file named --help made cp print its usage
// and copy nothing; -l would have made hard links into the checkout). A
// link stays a link, whatever it points at.
TEST_F(RunnerEmulatorTest, SourceFilesNamedLikeOptionsAreCopied) {
  const std::string project = options_.sources.project_dir;
  WriteTextFile(project + "/--help", "not an option\n");
  WriteTextFile(project + "/-l", "nor this\n");
  std::filesystem::create_symlink("/etc/shadow", project + "/outside");
  std::string output;
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"init", "-q"},
        {"add", "-A"},
        {"-c", "user.name=gdt", "-c", "user.email=gdt@test", "commit", "-q",
         "-m", "project"}}) {
    std::vector<std::string> argv = {"git", "-C", project};
    argv.insert(argv.end(), args.begin(), args.end());
    absl::StatusOr<ExitStatus> git =
        RunCommand(argv, std::chrono::seconds(30), &output);
    ASSERT_TRUE(git.ok() && git->success()) << output;
  }

  const JobResult result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  const std::string builds = dir_.path() + "/builds/ml/model";
  EXPECT_EQ(ReadTextFile(builds + "/--help"), "not an option\n") << Log();
  EXPECT_EQ(ReadTextFile(builds + "/-l"), "nor this\n");
  EXPECT_EQ(ReadTextFile(builds + "/model.py"), "print('hi')\n");
  EXPECT_EQ(std::filesystem::hard_link_count(builds + "/model.py"), 1u);
  EXPECT_TRUE(std::filesystem::is_symlink(builds + "/outside"));
}

// A pattern that leaves the project is skipped with a warning, for the
// archive and for a dotenv report alike; the rest is uploaded.
TEST_F(RunnerEmulatorTest, ArtifactPatternsOutsideTheProjectAreSkipped) {
  options_.job.artifacts[0].paths = {"../secret", "/etc/passwd", "model.py"};
  gitlab::JobArtifact dotenv;
  dotenv.artifact_type = "dotenv";
  dotenv.paths = {"../x.env"};
  dotenv.when = "always";
  options_.job.artifacts.push_back(dotenv);

  const JobResult result = Run();

  EXPECT_EQ(result.status, JobStatus::kSuccess) << Log();
  for (const char* pattern : {"../secret", "/etc/passwd", "../x.env"}) {
    EXPECT_THAT(Log(), HasSubstr(absl::StrCat(
                           "WARNING: ", pattern,
                           ": not a path inside the project directory\n")));
  }
  EXPECT_EQ(ReadTextFile(dir_.path() + "/store/1002/model.py"),
            "print('hi')\n");
}

TEST_F(RunnerEmulatorTest, PassesRunnerVariablesAndJobEnvAfterConfig) {
  env_["FAKE_CONFIG_JSON"] =
      R"({"builds_dir": ")" + dir_.path() +
      R"(/b2", "driver": {"name": "fake", "version": "1.0"},
          "job_env": {"FROM_CONFIG": "yes"}, "unknown": 1})";

  JobResult result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_, Contains("Using Custom executor with driver fake "
                                   "1.0..."));
  const std::string config = EnvOf(0, "config");
  EXPECT_THAT(config, HasSubstr("TMPDIR=" + tmp_ + "/custom-executor"));
  EXPECT_THAT(config, HasSubstr("\nBUILD_FAILURE_EXIT_CODE=1\n"));
  EXPECT_THAT(config, HasSubstr("\nSYSTEM_FAILURE_EXIT_CODE=2\n"));
  EXPECT_THAT(config, HasSubstr("/build_exit_code\n"));
  EXPECT_THAT(config, HasSubstr("/response.json\n"));
  EXPECT_THAT(config, HasSubstr("\nCUSTOM_ENV_CI_JOB_ID=1002\n"));
  EXPECT_THAT(config, HasSubstr("\nCUSTOM_ENV_CI_PROJECT_DIR=\n"));
  EXPECT_THAT(config, HasSubstr("\nCUSTOM_ENV_CI_JOB_SERVICES=\n"));
  EXPECT_THAT(config, Not(HasSubstr("\nFROM_CONFIG=")));
  const std::string prepare = EnvOf(1, "prepare");
  EXPECT_THAT(prepare, HasSubstr("\nFROM_CONFIG=yes\n"));
  EXPECT_THAT(prepare, HasSubstr("\nCUSTOM_ENV_CI_PROJECT_DIR=" + dir_.path() +
                                 "/b2/ml/model\n"));
  EXPECT_THAT(EnvOf(4, "run.build_script"), HasSubstr("\nFROM_CONFIG=yes\n"));
  EXPECT_THAT(EnvOf(8, "cleanup"), HasSubstr("\nFROM_CONFIG=yes\n"));
  EXPECT_EQ(ReadTextFile(dir_.path() + "/b2/ml/model/model.py"),
            "print('hi')\n");
}

TEST_F(RunnerEmulatorTest, ResponseFileIsPrivateAndScriptsExecutable) {
  env_["FAKE_RECORD_MODES"] = "1";
  JobResult result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_EQ(ReadTextFile(rec_ + "/mode.0"), "600\n");
  EXPECT_EQ(ReadTextFile(rec_ + "/script_mode.4"), "700\n");
  EXPECT_TRUE(fs::is_empty(tmp_)) << "temp dirs left behind";
}

TEST_F(RunnerEmulatorTest, FileVariablesArePathsInScripts) {
  options_.job.steps = {{"script", {"cat \"$MODEL_CONFIG\""}}};

  JobResult result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_, Contains("lr: 0.1"));
  EXPECT_FALSE(fs::exists(dir_.path() + "/builds/ml/model.tmp/MODEL_CONFIG"));
}

TEST_F(RunnerEmulatorTest, ScriptFailureUsesBuildExitCodeFile) {
  options_.job.steps = {{"script", {"echo before", "exit 7", "echo never"}},
                        {"after_script", {"echo after $CI_JOB_STATUS"}}};

  JobResult result = Run();

  EXPECT_EQ(result.status, JobStatus::kFailed);
  EXPECT_EQ(result.failure_reason, "script_failure");
  EXPECT_EQ(result.exit_code, 7);
  EXPECT_THAT(Calls(result),
              ElementsAre("config ", "prepare ", "run prepare_script",
                          "run get_sources", "run build_script",
                          "run after_script", "run upload_artifacts_on_failure",
                          "run cleanup_file_variables", "cleanup "));
  EXPECT_THAT(log_lines_, Contains("after failed"));
  EXPECT_THAT(log_lines_, Not(Contains("never")));
  EXPECT_THAT(log_lines_, Contains("ERROR: Job failed: exit status 7"));
  EXPECT_THAT(EnvOf(5, "run.after_script"),
              HasSubstr("\nCUSTOM_ENV_CI_JOB_STATUS=failed\n"));
}

TEST_F(RunnerEmulatorTest, ExitCodeFileIsKeptBetweenCalls) {
  // A driver that writes the code in one call and exits with the build
  // failure code without writing it in a later one: the runner reads what
  // the earlier call left.
  const std::string run = dir_.path() + "/run-exec";
  WriteTextFile(run, R"(#!/usr/bin/env bash
stage="${@: -1}"
if [ "$stage" = get_sources ]; then echo 42 > "$BUILD_EXIT_CODE_FILE"; fi
if [ "$stage" = build_script ]; then exit "$BUILD_FAILURE_EXIT_CODE"; fi
exit 0
)");
  fs::permissions(run, fs::perms::owner_all);
  options_.config.run_exec = run;
  options_.config.run_args = {};

  JobResult result = Run();

  EXPECT_EQ(result.failure_reason, "script_failure");
  EXPECT_EQ(result.exit_code, 42);
}

TEST_F(RunnerEmulatorTest, PrepareExecTimeoutIsARetriedSystemFailure) {
  const std::string prepare = dir_.path() + "/slow-prepare";
  WriteTextFile(prepare, "#!/usr/bin/env bash\nexec sleep 30\n");
  fs::permissions(prepare, fs::perms::owner_all);
  options_.config.prepare_exec = prepare;
  options_.config.prepare_args = {};
  options_.config.prepare_exec_timeout = milliseconds(200);
  options_.config.graceful_kill_timeout = milliseconds(100);

  JobResult result = Run();

  EXPECT_EQ(result.failure_reason, "runner_system_failure");
  EXPECT_EQ(result.attempts, 3);
  // The runner hands back how the exec ended after its SIGTERM.
  EXPECT_THAT(result.message,
              HasSubstr("unknown Custom executor executable exit code -1; "
                        "executable execution terminated with: signal: "
                        "terminated"));
}

// A driver that exits with 0 when its own timeout's SIGTERM comes did its
// work, as far as the runner is concerned: the kill sequence hands back that
// exit, and the job goes on.
TEST_F(RunnerEmulatorTest, AnExecThatEndsWellAtItsTimeoutSucceeded) {
  const std::string prepare = dir_.path() + "/slow-prepare";
  WriteTextFile(prepare,
                "#!/usr/bin/env bash\ntrap 'exit 0' TERM\n"
                "while :; do sleep 0.05; done\n");
  fs::permissions(prepare, fs::perms::owner_all);
  options_.config.prepare_exec = prepare;
  options_.config.prepare_args = {};
  options_.config.prepare_exec_timeout = milliseconds(200);

  JobResult result = Run();

  EXPECT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_EQ(result.attempts, 1);
}

TEST_F(RunnerEmulatorTest, PrepareTimeoutBoundsAllAttemptsTogether) {
  // Each attempt fails fast with a retried system failure; without the cap
  // the job would try three times. prepare_timeout ends the whole
  // preparation as a job timeout, like the runner's prepare context.
  const std::string prepare = dir_.path() + "/failing-prepare";
  WriteTextFile(prepare, "#!/usr/bin/env bash\nsleep 0.2\nexit 2\n");
  fs::permissions(prepare, fs::perms::owner_all);
  options_.config.prepare_exec = prepare;
  options_.config.prepare_args = {};
  options_.config.preparation_retry_interval = milliseconds(500);
  options_.config.prepare_timeout = milliseconds(1000);
  options_.config.graceful_kill_timeout = milliseconds(100);

  JobResult result = Run();

  // Uncapped, the third failed attempt would end it as a system failure.
  EXPECT_EQ(result.failure_reason, "job_execution_timeout") << Log();
  EXPECT_THAT(result.message,
              HasSubstr("prepare timeout: exceeded timeout of 1s"));
  EXPECT_THAT(Calls(result), Not(Contains("run build_script")));
}

TEST_F(RunnerEmulatorTest, PrepareTimeoutStopsAHangingPrepareExec) {
  const std::string prepare = dir_.path() + "/waiting-prepare";
  WriteTextFile(prepare, "#!/usr/bin/env bash\nexec sleep 30\n");
  fs::permissions(prepare, fs::perms::owner_all);
  options_.config.prepare_exec = prepare;
  options_.config.prepare_args = {};
  options_.config.prepare_timeout = milliseconds(500);
  options_.config.graceful_kill_timeout = milliseconds(100);

  JobResult result = Run();

  EXPECT_EQ(result.failure_reason, "job_execution_timeout") << Log();
  EXPECT_EQ(result.attempts, 1);
  EXPECT_THAT(result.message,
              HasSubstr("prepare timeout: exceeded timeout of 500ms"));
}

TEST_F(RunnerEmulatorTest, PrepareTimeoutLongerThanTheJobIsTheJobTimeout) {
  options_.config.prepare_timeout = std::chrono::hours(100);

  JobResult result = Run();

  EXPECT_EQ(result.status, JobStatus::kSuccess) << result.message;
  // A warning of the runner's own log, not of the job's.
  EXPECT_THAT(Log(), Not(HasSubstr("exceeds job timeout")));
  EXPECT_THAT(diagnostics_,
              Contains("warn: prepare_timeout (100h0m0s) exceeds job timeout "
                       "(1m0s); using job timeout"));
}

TEST_F(RunnerEmulatorTest, ScriptTimeoutBoundsAllStepsTogether) {
  // Each step alone fits in RUNNER_SCRIPT_TIMEOUT (with 2 s to spare for a
  // loaded machine); both together do not.
  options_.job.variables.push_back({"RUNNER_SCRIPT_TIMEOUT", "5s"});
  options_.job.steps = {{"script", {"sleep 3", "echo first done"}},
                        {"release", {"sleep 3", "echo second done"}},
                        {"after_script", {"echo after $CI_JOB_STATUS"}}};

  JobResult result = Run();

  EXPECT_EQ(result.status, JobStatus::kFailed);
  EXPECT_THAT(log_lines_, Contains("first done"));
  EXPECT_THAT(log_lines_, Not(Contains("second done")));
  EXPECT_THAT(log_lines_, Contains("after timedout"));
}

// The runner waits longer before each further attempt of a stage it tries
// again: its backoff doubles (5 s, 10 s, 20 s ... up to 5 min; here from
// 100 ms).
TEST_F(RunnerEmulatorTest, StageRetriesBackOffAsTheRunnersDo) {
  options_.job.variables.push_back({"GET_SOURCES_ATTEMPTS", "4"});
  options_.sources.project_dir = dir_.path() + "/no-such-project";
  options_.config.stage_retry_interval = milliseconds(100);

  const auto start = std::chrono::steady_clock::now();
  JobResult result = Run();
  const auto took = std::chrono::steady_clock::now() - start;

  EXPECT_EQ(result.status, JobStatus::kFailed);
  EXPECT_EQ(
      std::count(log_lines_.begin(), log_lines_.end(), "WARNING: Retrying..."),
      3)
      << Log();
  // 100 + 200 + 400 ms; a fixed pause would have been 300 ms.
  EXPECT_GE(took, milliseconds(700));
  EXPECT_LT(took, std::chrono::seconds(10));
}

TEST_F(RunnerEmulatorTest, ClearWorktreeRunsOnlyBeforeTheSecondSourcesAttempt) {
  options_.job.variables.push_back({"GET_SOURCES_ATTEMPTS", "3"});
  options_.sources.project_dir = dir_.path() + "/no-such-project";

  JobResult result = Run();

  EXPECT_EQ(result.status, JobStatus::kFailed);
  std::vector<std::string> sources_calls;
  for (const std::string& call : Calls(result)) {
    if (call == "run get_sources" || call == "run clear_worktree") {
      sources_calls.push_back(call);
    }
  }
  // clear_worktree's `git rm` fails where the project dir is no git
  // repository: the second attempt fails with it, get_sources not run.
  EXPECT_THAT(
      sources_calls,
      ElementsAre("run get_sources", "run clear_worktree", "run get_sources"));
  // Each attempt under its stage's header, a retry announced before the
  // next one.
  const std::vector<std::string> headers = {
      "Getting source from Git repository",
      "WARNING: Retrying...",
      "Deleting all tracked and untracked files due to source fetch failure",
      "Deleting tracked and untracked files...",
      "WARNING: Retrying...",
      "Getting source from Git repository",
  };
  std::vector<std::string> seen;
  for (const std::string& line : log_lines_) {
    if (std::find(headers.begin(), headers.end(), line) != headers.end()) {
      seen.push_back(line);
    }
  }
  EXPECT_EQ(seen, headers) << Log();
}

TEST_F(RunnerEmulatorTest, SystemFailureInPrepareIsRetriedWithCleanup) {
  env_["FAKE_PREPARE_EXIT"] = "2";

  JobResult result = Run();

  EXPECT_EQ(result.status, JobStatus::kFailed);
  EXPECT_EQ(result.failure_reason, "runner_system_failure");
  EXPECT_EQ(result.attempts, 3);
  EXPECT_THAT(Calls(result), ElementsAre("config ", "prepare ", "cleanup ",
                                         "config ", "prepare ", "cleanup ",
                                         "config ", "prepare ", "cleanup "));
  EXPECT_EQ(result.calls.back().attempt, 3);
  EXPECT_TRUE(fs::is_empty(tmp_));
  // The runner's words, after each attempt's cleanup, the last one too;
  // the error is the exec's own.
  EXPECT_EQ(std::count(log_lines_.begin(), log_lines_.end(),
                       "ERROR: Preparation failed: exit status 2"),
            3)
      << Log();
  EXPECT_EQ(std::count(log_lines_.begin(), log_lines_.end(),
                       "Will be retried in 10ms ..."),
            3)
      << Log();
  EXPECT_EQ(result.message, "Job failed (system failure): exit status 2");
}

TEST_F(RunnerEmulatorTest, UnknownExitCodeInPrepareIsASystemFailure) {
  env_["FAKE_PREPARE_EXIT"] = "5";

  JobResult result = Run();

  EXPECT_EQ(result.failure_reason, "runner_system_failure");
  EXPECT_EQ(result.attempts, 3);
  // The custom executor's words: the code, then how Go reads the exit.
  EXPECT_THAT(result.message,
              HasSubstr("unknown Custom executor executable exit code 5; "
                        "executable execution terminated with: exit status 5"));
}

TEST_F(RunnerEmulatorTest, BuildFailureInPrepareIsNotRetried) {
  env_["FAKE_PREPARE_EXIT"] = "1";

  JobResult result = Run();

  EXPECT_EQ(result.failure_reason, "script_failure");
  EXPECT_EQ(result.attempts, 1);
  EXPECT_THAT(Calls(result), ElementsAre("config ", "prepare ", "cleanup "));
  // A build error ends the preparation without the retry's words.
  EXPECT_THAT(Log(), Not(HasSubstr("Preparation failed")));
  EXPECT_THAT(Log(), Not(HasSubstr("Will be retried")));
}

// A failed cleanup_exec is a warning in the job log (its output is not),
// in the custom executor's words for the exit.
TEST_F(RunnerEmulatorTest, AFailedCleanupIsAWarningInTheJobLog) {
  env_["FAKE_CLEANUP_EXIT"] = "3";

  JobResult result = Run();

  EXPECT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_,
              Contains("WARNING: Cleanup script failed: unknown Custom "
                       "executor executable exit code 3; executable "
                       "execution terminated with: exit status 3"));
  EXPECT_EQ(log_lines_.back(), "Job succeeded");
  EXPECT_THAT(log_lines_, Not(Contains("cleanup stdout")));
}

// config_exec's output as the runner reads it (Go's encoding/json): none at
// all, or null, is no configuration; white space alone (a blank line) is a
// JSON input that ends too early, a failed preparation.
TEST_F(RunnerEmulatorTest, ConfigExecOutputIsReadAsGoReadsIt) {
  env_["FAKE_CONFIG_JSON"] = "null";

  JobResult result = Run();

  EXPECT_EQ(result.status, JobStatus::kSuccess) << Log();

  env_["FAKE_CONFIG_JSON"] = " ";
  log_lines_.clear();

  result = Run();

  EXPECT_EQ(result.failure_reason, "runner_system_failure");
  EXPECT_EQ(result.attempts, 3);
  EXPECT_EQ(result.message,
            "Job failed (system failure): error while parsing JSON output: "
            "unexpected end of JSON input");
}

// The job's image reaches the custom executor as CUSTOM_ENV_CI_JOB_IMAGE
// (expanded), and the job as CI_JOB_IMAGE; a job without one has neither.
TEST_F(RunnerEmulatorTest, JobImageReachesTheExecutor) {
  options_.job.image = "python:$PY";
  options_.job.variables.push_back({"PY", "3.12"});
  options_.job.steps = {{"script", {"echo \"image $CI_JOB_IMAGE\""}}};

  JobResult result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_, Contains("image python:3.12"));
  EXPECT_THAT(EnvOf(0, "config"),
              HasSubstr("CUSTOM_ENV_CI_JOB_IMAGE=python:3.12\n"));

  options_.job.image.clear();
  log_lines_.clear();

  result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_, Contains("image "));
}

TEST_F(RunnerEmulatorTest, MistypedConfigJsonIsRetried) {
  env_["FAKE_CONFIG_JSON"] = R"({"builds_dir": 5})";

  JobResult result = Run();

  EXPECT_EQ(result.failure_reason, "runner_system_failure");
  EXPECT_EQ(result.attempts, 3);
  EXPECT_THAT(result.message, HasSubstr("error while parsing JSON output"));
}

// The runner's configuration error has a failure reason of its own, and,
// not being a system failure, its final line says only "Job failed".
TEST_F(RunnerEmulatorTest, MissingBuildsDirIsAConfigError) {
  options_.config.builds_dir.clear();

  JobResult result = Run();

  EXPECT_EQ(result.failure_reason, "runner_configuration_error");
  EXPECT_EQ(result.attempts, 1);
  EXPECT_EQ(result.message, "Job failed: the builds_dir is not configured");
  EXPECT_EQ(log_lines_.back(),
            "ERROR: Job failed: the builds_dir is not configured");
  EXPECT_THAT(Calls(result), ElementsAre("config ", "cleanup "));
  // The custom executor's startup line comes before the build's check.
  EXPECT_THAT(log_lines_, Contains("Using Custom executor..."));
}

// Without run_exec the custom executor refuses its configuration before
// running any exec, config_exec included, and says so again (a warning)
// when it cleans up.
TEST_F(RunnerEmulatorTest, MissingRunExecRunsNoExec) {
  options_.config.run_exec.clear();

  JobResult result = Run();

  EXPECT_EQ(result.failure_reason, "runner_configuration_error");
  EXPECT_EQ(result.attempts, 1);
  EXPECT_THAT(Calls(result), ElementsAre());
  EXPECT_FALSE(fs::exists(rec_ + "/calls"));
  EXPECT_THAT(log_lines_,
              Contains("WARNING: custom executor is missing RunExec"));
  EXPECT_THAT(log_lines_, Not(Contains("Using Custom executor...")));
  EXPECT_EQ(log_lines_.back(),
            "ERROR: Job failed: custom executor is missing RunExec");
}

// The project dir as the runner makes it: GIT_STRATEGY empty's has
// "-empty" after it; GIT_CLONE_PATH is refused unless custom_build_dir is
// enabled (the custom executor's default is off), then it is the dir, when
// it lies inside the builds dir.
TEST_F(RunnerEmulatorTest, ProjectDirIsTheRunnersForEmptyAndGitClonePath) {
  const std::string builds = options_.config.builds_dir;
  options_.job.steps = {{"script", {"echo \"dir $CI_PROJECT_DIR $(pwd)\""}}};
  options_.job.variables.push_back({"GIT_STRATEGY", "empty"});

  JobResult result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_,
              Contains(absl::StrCat("dir ", builds, "/ml/model-empty ", builds,
                                    "/ml/model-empty")));

  options_.job.variables.back() = {"GIT_CLONE_PATH", "$CI_BUILDS_DIR/mine"};
  log_lines_.clear();

  result = Run();

  EXPECT_EQ(result.failure_reason, "runner_configuration_error");
  EXPECT_EQ(log_lines_.back(),
            "ERROR: Job failed: setting GIT_CLONE_PATH is not allowed, enable "
            "`custom_build_dir` feature");

  options_.config.custom_build_dir_enabled = true;
  log_lines_.clear();

  result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_, Contains(absl::StrCat("dir ", builds, "/mine ",
                                                builds, "/mine")));

  options_.job.variables.back() = {"GIT_CLONE_PATH", "/elsewhere/mine"};
  log_lines_.clear();

  result = Run();

  EXPECT_EQ(result.failure_reason, "runner_configuration_error");
  EXPECT_EQ(log_lines_.back(),
            absl::StrCat("ERROR: Job failed: the GIT_CLONE_PATH=\"/elsewhere/"
                         "mine\" has to be within \"",
                         builds, "\""));
}

// A prepare_script the executor could not run is a system failure in the
// runner's words, pointing at shell profiles.
TEST_F(RunnerEmulatorTest, PrepareScriptSystemFailureNamesThePrepareStage) {
  const std::string wrapper = dir_.path() + "/fail-prepare-script";
  WriteTextFile(wrapper,
                "#!/usr/bin/env bash\n"
                "if [ \"${@: -1}\" = prepare_script ]; then\n"
                "  exit \"$SYSTEM_FAILURE_EXIT_CODE\"\n"
                "fi\n"
                "exec " +
                    options_.config.run_exec + " \"$@\"\n",
                0755);
  options_.config.run_exec = wrapper;

  JobResult result = Run();

  EXPECT_EQ(result.failure_reason, "runner_system_failure");
  EXPECT_EQ(result.message,
            "Job failed (system failure): prepare environment: exit status 2. "
            "Check https://docs.gitlab.com/runner/shells/"
            "#shell-profile-loading for more information");
}

TEST_F(RunnerEmulatorTest, HangingStageIsTerminatedThenKilledAtJobTimeout) {
  // Long enough for the stages before it even under sanitizers on two
  // loaded cores (at 3 s the job timed out in get_sources there).
  options_.job.timeout_seconds = 8;
  options_.config.graceful_kill_timeout = milliseconds(300);
  options_.config.force_kill_timeout = milliseconds(2000);
  env_["FAKE_HANG_STAGE"] = "build_script";
  const auto start = std::chrono::steady_clock::now();

  JobResult result = Run();

  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(result.status, JobStatus::kFailed);
  EXPECT_EQ(result.failure_reason, "job_execution_timeout");
  // The runner prints the job timeout as a Go duration.
  EXPECT_EQ(log_lines_.back(),
            "ERROR: Job failed: execution took longer than 8s seconds");
  EXPECT_THAT(Calls(result),
              ElementsAre("config ", "prepare ", "run prepare_script",
                          "run get_sources", "run build_script", "cleanup "));
  const ExecCall& build = result.calls[4];
  EXPECT_TRUE(build.killed);
  EXPECT_EQ(build.exit_code, 128 + 9);  // It ignored SIGTERM.
  EXPECT_THAT(ReadTextFile(rec_ + "/signals"), HasSubstr("term"));
  EXPECT_GE(elapsed, milliseconds(8300));
  EXPECT_LT(elapsed, milliseconds(20000));
  EXPECT_TRUE(fs::is_empty(tmp_));
}

// get_sources_timeout bounds the get_sources stage: a hanging fetch is
// stopped there, not at the job timeout, and the job ends at once as a
// job_execution_timeout in the runner's words.
TEST_F(RunnerEmulatorTest, GetSourcesTimeoutStopsAHangingGetSources) {
  options_.config.get_sources_timeout = milliseconds(1500);
  options_.config.graceful_kill_timeout = milliseconds(200);
  options_.config.force_kill_timeout = milliseconds(2000);
  env_["FAKE_HANG_STAGE"] = "get_sources";
  const auto start = std::chrono::steady_clock::now();

  JobResult result = Run();

  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(result.failure_reason, "job_execution_timeout") << Log();
  EXPECT_EQ(log_lines_.back(),
            "ERROR: Job failed: get sources timeout: exceeded timeout of 1.5s");
  EXPECT_THAT(Calls(result),
              ElementsAre("config ", "prepare ", "run prepare_script",
                          "run get_sources", "cleanup "));
  EXPECT_TRUE(result.calls[3].killed);
  EXPECT_LT(elapsed, std::chrono::seconds(30));  // The job allows 60 s.

  // Longer than the job: the job timeout, with a warning of the runner's.
  options_.config.get_sources_timeout = std::chrono::hours(2);
  env_.erase("FAKE_HANG_STAGE");
  result = Run();

  EXPECT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(diagnostics_,
              Contains("warn: get_sources_timeout (2h0m0s) exceeds job "
                       "timeout (1m0s); using job timeout"));
}

TEST_F(RunnerEmulatorTest, GracefulCancelDuringStepStillRunsAfterScript) {
  options_.config.graceful_kill_timeout = milliseconds(200);
  options_.config.force_kill_timeout = milliseconds(2000);
  env_["FAKE_HANG_STAGE"] = "build_script";

  JobResult result = RunAndCancelWhenHung(CancelMode::kGraceful);

  EXPECT_EQ(result.status, JobStatus::kCanceled);
  EXPECT_EQ(result.failure_reason, "");
  EXPECT_THAT(Calls(result),
              ElementsAre("config ", "prepare ", "run prepare_script",
                          "run get_sources", "run build_script",
                          "run after_script", "run upload_artifacts_on_failure",
                          "run cleanup_file_variables", "cleanup "));
  // The runner's warning, then after_script.
  const auto warning =
      std::find(log_lines_.begin(), log_lines_.end(),
                "WARNING: script canceled externally (UI, API)");
  ASSERT_NE(warning, log_lines_.end()) << Log();
  EXPECT_THAT(std::vector<std::string>(warning, log_lines_.end()),
              Contains("after canceled"));
}

TEST_F(RunnerEmulatorTest, AbortBeforeStepsRunsOnlyCleanup) {
  options_.config.graceful_kill_timeout = milliseconds(200);
  env_["FAKE_HANG_STAGE"] = "get_sources";

  JobResult result = RunAndCancelWhenHung(CancelMode::kAbort);

  EXPECT_EQ(result.status, JobStatus::kCanceled);
  EXPECT_THAT(Calls(result),
              ElementsAre("config ", "prepare ", "run prepare_script",
                          "run get_sources", "cleanup "));
}

TEST_F(RunnerEmulatorTest, RunnerInterruptIsASystemFailure) {
  options_.config.graceful_kill_timeout = milliseconds(200);
  env_["FAKE_HANG_STAGE"] = "build_script";

  JobResult result = RunAndCancelWhenHung(CancelMode::kInterrupt);

  EXPECT_EQ(result.status, JobStatus::kFailed);
  EXPECT_EQ(result.failure_reason, "runner_interrupted");
  EXPECT_EQ(Calls(result).back(), "cleanup ");
  EXPECT_EQ(result.calls.size(), 6u);
}

// ForceKill() (run-local's second Ctrl-C) ends an exec that ignores
// SIGTERM at once instead of after graceful_kill_timeout; cleanup_exec
// still runs.
TEST_F(RunnerEmulatorTest, ForceKillDoesNotWaitOutTheGraceTime) {
  options_.config.graceful_kill_timeout = std::chrono::hours(1);
  env_["FAKE_HANG_STAGE"] = "build_script";
  options_.runner_environment = env_;
  RunnerEmulator runner(options_);
  JobResult result;
  std::thread job([&] { result = runner.Run(); });
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!fs::exists(rec_ + "/signals") &&
         std::chrono::steady_clock::now() < deadline) {
    if (fs::exists(rec_ + "/hang_started")) {
      runner.Cancel(CancelMode::kInterrupt);
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
  const auto killed_at = std::chrono::steady_clock::now();
  runner.ForceKill(/*cleanup_too=*/false);
  job.join();

  EXPECT_LT(std::chrono::steady_clock::now() - killed_at,
            std::chrono::seconds(30));
  EXPECT_EQ(result.failure_reason, "runner_interrupted");
  EXPECT_EQ(Calls(result).back(), "cleanup ");
  EXPECT_EQ(RecordedCalls().back(), "cleanup ");
}

TEST_F(RunnerEmulatorTest, CancelAfterKnobStopsTheJob) {
  options_.config.graceful_kill_timeout = milliseconds(200);
  env_["FAKE_HANG_STAGE"] = "build_script";
  options_.cancel_after = milliseconds(0);
  options_.cancel_after_mode = CancelMode::kAbort;

  JobResult result = Run();

  EXPECT_EQ(result.status, JobStatus::kCanceled);
  EXPECT_THAT(Calls(result), ElementsAre("config ", "cleanup "));
}

TEST(ExpandVariableValueTest, FollowsGosOsExpand) {
  const auto lookup = [](std::string_view name) -> std::string {
    if (name == "A") return "foo";
    if (name == "$") return "$";
    if (name == "B") return "$A";
    return "";
  };
  EXPECT_EQ(ExpandVariableValue("$A-bar", lookup), "foo-bar");
  EXPECT_EQ(ExpandVariableValue("${A}bar", lookup), "foobar");
  EXPECT_EQ(ExpandVariableValue("$Abar", lookup), "");
  EXPECT_EQ(ExpandVariableValue("$B", lookup), "$A");  // Not again.
  EXPECT_EQ(ExpandVariableValue("$$A", lookup), "$A");
  EXPECT_EQ(ExpandVariableValue("a$UNKNOWN.b", lookup), "a.b");
  EXPECT_EQ(ExpandVariableValue("${A:-x}", lookup), "");
  EXPECT_EQ(ExpandVariableValue("$1$-x", lookup), "x");
  EXPECT_EQ(ExpandVariableValue("${$}", lookup), "$");
  EXPECT_EQ(ExpandVariableValue("cost $ 5 and 5$", lookup), "cost $ 5 and 5$");
  EXPECT_EQ(ExpandVariableValue("a${}b", lookup), "ab");
  EXPECT_EQ(ExpandVariableValue("a${Ab", lookup), "aAb");
  EXPECT_EQ(ExpandVariableValue("no dollar", lookup), "no dollar");
}

TEST_F(RunnerEmulatorTest, VariablesAreExpandedOnceAsTheRunnerDoes) {
  options_.config.environment = {"FROM_RUNNER=$A-runner"};
  gitlab::JobVariable raw{"RAW", "$A"};
  raw.raw = true;
  options_.job.variables.insert(options_.job.variables.end(),
                                {{"A", "foo"},
                                 {"B", "$A-bar"},
                                 {"EARLY", "${LATER}x"},
                                 {"LATER", "late"},
                                 {"TWICE", "$B"},
                                 {"DOLLAR", "$$A"},
                                 {"DIR", "$CI_PROJECT_DIR/sub"},
                                 {"CONF", "$MODEL_CONFIG"},
                                 {"STATUS", "$CI_JOB_STATUS"},
                                 raw});
  options_.job.steps = {
      {"script",
       {"echo \"B=$B EARLY=$EARLY TWICE=$TWICE DOLLAR=$DOLLAR RAW=$RAW\"",
        "echo \"FROM_RUNNER=$FROM_RUNNER DIR=$DIR STATUS=$STATUS\"",
        "echo \"CONF=$CONF\""}},
      {"after_script", {"echo \"after $CI_JOB_STATUS STATUS=$STATUS\""}}};

  JobResult result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  const std::string project = dir_.path() + "/builds/ml/model";
  EXPECT_THAT(log_lines_,
              Contains("B=foo-bar EARLY=latex TWICE=$A-bar DOLLAR=$A RAW=$A"));
  EXPECT_THAT(log_lines_, Contains("FROM_RUNNER=foo-runner DIR=" + project +
                                   "/sub STATUS=running"));
  EXPECT_THAT(log_lines_, Contains("CONF=" + project + ".tmp/MODEL_CONFIG"));
  EXPECT_THAT(log_lines_, Contains("after success STATUS=running"));
  // The custom executor's CUSTOM_ENV_ copies are the expanded values too.
  EXPECT_THAT(EnvOf(0, "config"), HasSubstr("\nCUSTOM_ENV_B=foo-bar\n"));
  EXPECT_THAT(EnvOf(4, "run.build_script"), HasSubstr("\nCUSTOM_ENV_RAW=$A\n"));
}

// GITLAB_ENV: lines a step appends are exported by every later stage (the
// next step, after_script), not by the step that wrote them; the file does
// not outlive the job.
TEST_F(RunnerEmulatorTest, GitlabEnvCarriesVariablesToLaterStages) {
  options_.job.steps = {
      {"script",
       {"echo \"FROM_SCRIPT=hello world\" >> \"$GITLAB_ENV\"",
        "export ONLY_HERE=1", "echo \"in script [$FROM_SCRIPT]\""}},
      {"release", {"echo \"in release [$FROM_SCRIPT]\""}},
      {"after_script",
       {"echo \"after [$FROM_SCRIPT] [${ONLY_HERE:-}] $GITLAB_ENV\""}}};

  JobResult result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  const std::string env_file =
      dir_.path() + "/builds/ml/model.tmp/gitlab_runner_env";
  EXPECT_THAT(log_lines_, Contains("in script []"));
  EXPECT_THAT(log_lines_, Contains("in release [hello world]"));
  EXPECT_THAT(log_lines_, Contains("after [hello world] [] " + env_file));
  EXPECT_FALSE(fs::exists(env_file));
}

// Each command is shown and run without the white space around it, as the
// runner's shell writer does: a YAML block scalar's final newline does not
// make a one-line command "multi-line"; an empty command is an empty line;
// after_script announces itself.
TEST_F(RunnerEmulatorTest, CommandsAreShownTrimmedAsTheRunnerDoes) {
  options_.job.steps = {
      {"script", {"echo one\n", "  echo two  ", " ", "echo a\necho b\n"}},
      {"after_script", {"echo after\n"}}};

  JobResult result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  const std::vector<std::string> expected = {
      "$ echo one",
      "one",
      "$ echo two",
      "two",
      "",
      "$ echo a # collapsed multi-line command",
      "a",
      "b",
      "Running after_script",
      "Running after script...",
      "$ echo after",
      "after"};
  const auto first =
      std::find(log_lines_.begin(), log_lines_.end(), expected.front());
  ASSERT_NE(first, log_lines_.end()) << Log();
  ASSERT_GE(static_cast<size_t>(log_lines_.end() - first), expected.size());
  EXPECT_EQ(std::vector<std::string>(first, first + expected.size()), expected);
}

// GIT_STRATEGY none leaves the project directory as it is and empty
// empties it; neither gets the project's files. Another value is the
// default (the files), with a warning before the preparation.
TEST_F(RunnerEmulatorTest, GitStrategyNoneAndEmptyGetNoSources) {
  for (const std::string strategy : {"none", "empty", "bogus"}) {
    SCOPED_TRACE(strategy);
    // empty's project dir is a dir of its own, as the runner names it.
    const std::string project = dir_.path() + "/builds/ml/model" +
                                (strategy == "empty" ? "-empty" : "");
    fs::remove_all(project);
    fs::create_directories(project);
    WriteTextFile(project + "/left.txt", "from before\n");
    options_.job.variables.push_back({"GIT_STRATEGY", strategy});
    options_.job.steps = {{"script", {"ls"}}};
    log_lines_.clear();

    JobResult result = Run();
    options_.job.variables.pop_back();

    ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
    EXPECT_EQ(fs::exists(project + "/model.py"), strategy == "bogus");
    // Only none keeps what was there: clone (the default) starts afresh.
    EXPECT_EQ(fs::exists(project + "/left.txt"), strategy == "none");
    if (strategy == "bogus") {
      EXPECT_THAT(log_lines_,
                  Contains("WARNING: GIT_STRATEGY: expected either 'clone', "
                           "'fetch', 'none' or 'empty' got \"bogus\", using "
                           "default value 'clone'"));
    } else {
      EXPECT_THAT(log_lines_, Contains(HasSubstr("Skipping Git repository")));
      EXPECT_THAT(log_lines_, Contains("Skipping Git checkout"));
    }
  }
}

// The attempt settings are integers taken into 1..10, a bad one warned
// about and left at 1; download_artifacts is tried
// ARTIFACT_DOWNLOAD_ATTEMPTS times.
TEST_F(RunnerEmulatorTest, AttemptSettingsAreClampedAndRetryDownloads) {
  options_.job.variables.push_back({"GET_SOURCES_ATTEMPTS", "20"});
  options_.job.variables.push_back({"ARTIFACT_DOWNLOAD_ATTEMPTS", "+3"});
  options_.sources.project_dir = dir_.path() + "/no-such-project";

  JobResult result = Run();

  EXPECT_EQ(result.status, JobStatus::kFailed);
  std::vector<std::string> calls = Calls(result);
  // Ten attempts; the second is clear_worktree's, which fails where the
  // project dir is no git repository.
  EXPECT_EQ(std::count(calls.begin(), calls.end(), "run get_sources"), 9);
  EXPECT_EQ(
      std::count(log_lines_.begin(), log_lines_.end(), "WARNING: Retrying..."),
      9);
  EXPECT_THAT(log_lines_,
              Contains("WARNING: GET_SOURCES_ATTEMPTS: number of attempts out "
                       "of the range [1, 10], clamping to: 10"));

  // A dependency whose artifacts are not in the store: three tries.
  options_.sources.project_dir = dir_.path() + "/project";
  options_.job.variables.pop_back();
  options_.job.variables.pop_back();
  options_.job.variables.push_back({"ARTIFACT_DOWNLOAD_ATTEMPTS", "3"});
  options_.job.variables.push_back({"GET_SOURCES_ATTEMPTS", "two"});
  gitlab::JobDependency dependency;
  dependency.id = 999;
  dependency.name = "build";
  dependency.artifacts_filename = "artifacts.zip";
  options_.job.dependencies = {dependency};
  log_lines_.clear();

  result = Run();

  EXPECT_EQ(result.status, JobStatus::kFailed);
  EXPECT_EQ(result.failure_reason, "script_failure");
  calls = Calls(result);
  EXPECT_EQ(std::count(calls.begin(), calls.end(), "run download_artifacts"),
            3);
  EXPECT_EQ(
      std::count(log_lines_.begin(), log_lines_.end(), "WARNING: Retrying..."),
      2);
  EXPECT_EQ(std::count(calls.begin(), calls.end(), "run get_sources"), 1);
  EXPECT_THAT(calls, Not(Contains("run build_script")));
  EXPECT_THAT(log_lines_,
              Contains("WARNING: GET_SOURCES_ATTEMPTS: expected int got "
                       "\"two\", using default value: 1"));
}

// A dependency's artifacts replace what is in their way in the checkout,
// as gitlab-runner's extraction does: a link there (to a file, or in place
// of a directory) is removed, never written through.
TEST_F(RunnerEmulatorTest, DownloadedArtifactsReplaceLinksInsteadOfFollowing) {
  const std::string outside = dir_.path() + "/outside";
  fs::create_directories(outside);
  WriteTextFile(outside + "/victim", "untouched\n");
  const std::string project = options_.sources.project_dir;
  fs::create_symlink(outside + "/victim", project + "/result.txt");
  fs::create_symlink(outside, project + "/ckpt");
  const std::string stored = dir_.path() + "/store/999";
  fs::create_directories(stored + "/ckpt");
  WriteTextFile(stored + "/result.txt", "from build\n");
  WriteTextFile(stored + "/ckpt/state.pt", "state\n");
  gitlab::JobDependency dependency;
  dependency.id = 999;
  dependency.name = "build";
  dependency.artifacts_filename = "artifacts.zip";
  options_.job.dependencies = {dependency};

  const JobResult result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_EQ(ReadTextFile(outside + "/victim"), "untouched\n");
  EXPECT_FALSE(fs::exists(outside + "/state.pt"));
  const std::string builds = dir_.path() + "/builds/ml/model";
  EXPECT_FALSE(fs::is_symlink(builds + "/result.txt"));
  EXPECT_EQ(ReadTextFile(builds + "/result.txt"), "from build\n");
  EXPECT_FALSE(fs::is_symlink(builds + "/ckpt"));
  EXPECT_EQ(ReadTextFile(builds + "/ckpt/state.pt"), "state\n");
}

// CI_JOB_STATUS in the stages after the steps: the steps' outcome, or
// still "running" when the job failed before its steps (the runner sets it
// with after_script, which it does not reach then).
TEST_F(RunnerEmulatorTest, JobStatusAfterAFailureBeforeTheStepsIsRunning) {
  options_.job.steps = {{"script", {"exit 3"}}};

  JobResult result = Run();

  EXPECT_EQ(result.status, JobStatus::kFailed);
  ASSERT_THAT(Calls(result), Contains("run upload_artifacts_on_failure"));
  EXPECT_THAT(EnvOf(5, "run.upload_artifacts_on_failure"),
              HasSubstr("\nCUSTOM_ENV_CI_JOB_STATUS=failed\n"));

  fs::remove_all(rec_);
  fs::create_directories(rec_);
  options_.sources.project_dir = dir_.path() + "/no-such-project";

  result = Run();

  EXPECT_EQ(result.status, JobStatus::kFailed);
  ASSERT_EQ(Calls(result)[4], "run upload_artifacts_on_failure");
  EXPECT_THAT(EnvOf(4, "run.upload_artifacts_on_failure"),
              HasSubstr("\nCUSTOM_ENV_CI_JOB_STATUS=running\n"));
}

// CI_DEBUG_TRACE makes every stage script trace its commands; it and
// AFTER_SCRIPT_IGNORE_ERRORS are Go bools, a value Go cannot read is the
// default with a warning line.
TEST_F(RunnerEmulatorTest, DebugTraceTracesTheScripts) {
  options_.job.variables.push_back({"CI_DEBUG_TRACE", "True"});
  options_.job.steps = {{"script", {"echo traced"}}};

  JobResult result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  // One level below the eval that runs the stage's commands.
  EXPECT_THAT(log_lines_, Contains("++ echo traced"));
  EXPECT_THAT(log_lines_, Contains("traced"));

  options_.job.variables.back().value = "yes";
  options_.job.variables.push_back({"AFTER_SCRIPT_IGNORE_ERRORS", "no"});
  options_.job.steps = {{"script", {"echo traced"}},
                        {"after_script", {"exit 1"}}};
  log_lines_.clear();

  result = Run();

  EXPECT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_, Not(Contains("+ echo traced")));
  EXPECT_THAT(log_lines_,
              Contains("WARNING: CI_DEBUG_TRACE: expected bool got \"yes\", "
                       "using default value: false"));
  EXPECT_THAT(log_lines_, Contains("AFTER_SCRIPT_IGNORE_ERRORS: expected bool "
                                   "got \"no\", using default value: true"));
}

// From a git checkout, the project directory is a git repository with HEAD
// detached at the job's commit, as the runner's checkout leaves it; the
// copied files stay, a change not committed showing as one.
TEST_F(RunnerEmulatorTest, SourcesFromAGitCheckoutAreARepositoryAtTheCommit) {
  const std::string project = dir_.path() + "/project";
  ASSERT_TRUE(CommitProject("first"));
  WriteTextFile(project + "/model.py", "print('edited')\n");
  ASSERT_TRUE(CommitProject("second"));
  const std::string sha = options_.job.sha;
  WriteTextFile(project + "/model.py", "print('not committed')\n");
  options_.job.depth = 1;
  options_.job.steps = {{"script",
                         {"git rev-parse HEAD", "git status --porcelain",
                          "git rev-list --count HEAD", "cat model.py"}}};

  JobResult result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_, Contains("Checking out " + sha.substr(0, 8) +
                                   " as detached HEAD (ref is main)..."));
  EXPECT_THAT(log_lines_, Contains(sha));
  EXPECT_THAT(log_lines_, Contains(" M model.py"));
  EXPECT_THAT(log_lines_, Contains("1"));  // GIT_DEPTH 1: one commit.
  EXPECT_THAT(log_lines_, Contains("print('not committed')"));

  // GIT_CHECKOUT false: the commit is fetched, no file is checked out (in
  // a fresh builds dir, like a new job's).
  fs::remove_all(dir_.path() + "/builds");
  options_.job.variables.push_back({"GIT_CHECKOUT", "false"});
  options_.job.steps = {
      {"script",
       {"ls -A", "git cat-file -t " + sha, "git rev-parse origin/main"}}};
  log_lines_.clear();

  result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_, Contains("Skipping Git checkout"));
  EXPECT_THAT(log_lines_, Contains(".git"));
  EXPECT_THAT(log_lines_, Not(Contains("model.py")));
  EXPECT_THAT(log_lines_, Contains("commit"));
  EXPECT_THAT(log_lines_, Contains(sha));
}

// get_sources says what the runner's says, in its order: the fetch notice
// (with the depth), git init's own line (a fresh repository, then the
// existing one a fetch job finds), "Created fresh repository." for a new
// origin (every time: the custom executor's runner removes the repository's
// config and hooks an earlier job could have planted), the checkout notice,
// the clean's lines, the submodules' notice.
// The runner's hooks: config.toml's pre_get_sources_script, then the job's
// hook, before the sources are fetched; the job's post hook, then
// config.toml's, after them; pre_build_script and post_build_script around
// the job's script (not after_script). None of the get_sources ones with
// GIT_STRATEGY none.
TEST_F(RunnerEmulatorTest, HooksRunWhereTheRunnerRunsThem) {
  options_.config.pre_get_sources_script = "echo runner pre sources";
  options_.config.post_get_sources_script = "echo runner post sources";
  options_.config.pre_build_script = "echo runner pre build";
  options_.config.post_build_script = "echo runner post build";
  options_.job.hooks = {{"pre_get_sources_script", {"echo job pre sources"}},
                        {"post_get_sources_script", {"echo job post sources"}}};

  JobResult result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  const std::vector<std::string> expected = {"$ echo runner pre sources",
                                             "runner pre sources",
                                             "$ echo job pre sources",
                                             "job pre sources",
                                             "$ echo job post sources",
                                             "job post sources",
                                             "$ echo runner post sources",
                                             "runner post sources",
                                             "$ echo runner pre build",
                                             "runner pre build",
                                             "hello from 2",
                                             "$ echo runner post build",
                                             "runner post build",
                                             "after success"};
  std::vector<std::string> seen;
  for (const std::string& line : log_lines_) {
    if (std::find(expected.begin(), expected.end(), line) != expected.end()) {
      seen.push_back(line);
    }
  }
  EXPECT_EQ(seen, expected) << Log();

  options_.job.variables.push_back({"GIT_STRATEGY", "none"});
  log_lines_.clear();
  result = Run();
  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(Log(), Not(HasSubstr("sources")));
  EXPECT_THAT(log_lines_, Contains("runner pre build"));
}

TEST_F(RunnerEmulatorTest, GetSourcesLogIsTheRunnersInItsOrder) {
  ASSERT_TRUE(CommitProject("first"));
  const std::string sha = options_.job.sha;
  options_.job.depth = 3;
  options_.job.variables.push_back({"GIT_STRATEGY", "fetch"});
  options_.job.steps = {{"script", {"touch leftover.txt"}}};
  const std::string git_dir = dir_.path() + "/builds/ml/model/.git/";
  const std::string checking_out =
      "Checking out " + sha.substr(0, 8) + " as detached HEAD (ref is main)...";
  // The log's get_sources lines, up to the steps' section.
  const auto sources_lines = [&] {
    std::vector<std::string> lines;
    bool in_sources = false;
    for (const std::string& line : log_lines_) {
      if (absl::StartsWith(line, "Fetching changes")) in_sources = true;
      if (absl::StartsWith(line, "Executing ")) break;
      if (in_sources) lines.push_back(line);
    }
    return lines;
  };

  JobResult result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(sources_lines(),
              ElementsAre("Fetching changes with git depth set to 3...",
                          "Initialized empty Git repository in " + git_dir,
                          "Created fresh repository.", checking_out,
                          "Skipping Git submodules setup"))
      << Log();

  // fetch again: the repository is there, the leftover is cleaned; the
  // whole history has no depth to name. A hook the earlier job planted is
  // gone before any git command of the next could run it.
  const std::string hook = git_dir + "hooks/post-checkout";
  fs::create_directories(git_dir + "hooks");
  WriteTextFile(hook, "#!/bin/sh\necho planted hook ran\n");
  fs::permissions(hook, fs::perms::owner_all);
  options_.job.depth = 0;
  log_lines_.clear();
  result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(
      sources_lines(),
      ElementsAre("Fetching changes...",
                  "Reinitialized existing Git repository in " + git_dir,
                  "Created fresh repository.", checking_out,
                  "Removing leftover.txt", "Skipping Git submodules setup"))
      << Log();
  EXPECT_FALSE(fs::exists(hook));

  // clean_git_config = false keeps the repository's config: its origin is
  // there already (once a job has written it; the earlier job's cleanup
  // removed the config, as the runner's does).
  options_.config.clean_git_config = false;
  result = Run();
  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  log_lines_.clear();
  result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(sources_lines(),
              ElementsAre("Fetching changes...",
                          "Reinitialized existing Git repository in " + git_dir,
                          checking_out, "Removing leftover.txt",
                          "Skipping Git submodules setup"))
      << Log();
}

// FF_USE_GIT_NATIVE_CLONE with GIT_STRATEGY clone: with git 2.49 or later
// the runner clones (its notices, git clone's own line, GIT_CLONE_EXTRA_FLAGS
// after the depth); with older git, as without the flag, it fetches and the
// extra flags do nothing.
TEST_F(RunnerEmulatorTest, NativeCloneTakesCloneExtraFlagsOnNewGit) {
  ASSERT_TRUE(CommitProject("first"));
  const std::string sha = options_.job.sha;
  options_.job.depth = 5;
  options_.job.variables.push_back({"FF_USE_GIT_NATIVE_CLONE", "true"});
  options_.job.variables.push_back(
      {"GIT_CLONE_EXTRA_FLAGS", "--config gdt.cloned=yes"});
  options_.job.steps = {
      {"script",
       {"echo cloned=$(git config gdt.cloned)", "git rev-parse HEAD"}}};
  // A `git` that says it is `version`, the real one otherwise.
  const std::string path = env_["PATH"];
  const auto use_git = [&](const std::string& version) {
    const std::string bin = dir_.path() + "/git-" + version;
    fs::create_directories(bin);
    WriteTextFile(bin + "/git",
                  "#!/bin/sh\n"
                  "if [ \"$1\" = version ]; then echo 'git version " +
                      version +
                      "'; exit 0; fi\n"
                      "PATH=" +
                      ShellQuote(path) + " exec git \"$@\"\n");
    fs::permissions(bin + "/git", fs::perms::owner_all);
    env_["PATH"] = bin + ":" + path;
    options_.runner_environment = env_;
  };
  use_git("2.49.0");
  const std::string checking_out =
      "Checking out " + sha.substr(0, 8) + " as detached HEAD (ref is main)...";

  JobResult result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_, Contains("Git version at least \"2.49\""));
  EXPECT_THAT(log_lines_,
              Contains("Cloning repository for main with git depth set to "
                       "5..."));
  EXPECT_THAT(log_lines_, Contains("Cloning into '" + dir_.path() +
                                   "/builds/ml/model'..."));
  EXPECT_THAT(log_lines_, Not(Contains(HasSubstr("Fetching changes"))));
  EXPECT_THAT(log_lines_, Contains(checking_out));
  EXPECT_THAT(log_lines_, Contains("cloned=yes"));
  EXPECT_THAT(log_lines_, Contains(sha));

  // An older git: init and fetch, no extra flags.
  use_git("2.48.1");
  log_lines_.clear();
  result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_,
              Contains("Fetching changes with git depth set to 5..."));
  EXPECT_THAT(log_lines_, Not(Contains(HasSubstr("Cloning"))));
  EXPECT_THAT(log_lines_, Contains("cloned="));
  EXPECT_THAT(log_lines_, Contains(checking_out));
}

// The runner's fetch brings the tags that point into the fetched history
// (all of them when the whole history is fetched), so `git describe` works
// in a job; a tag below the depth is not fetched.
TEST_F(RunnerEmulatorTest, GetSourcesFetchesTagsAsTheRunnerDoes) {
  const std::string project = dir_.path() + "/project";
  std::string output;
  ASSERT_TRUE(CommitProject("first"));
  ASSERT_TRUE(Git(project, {"tag", "-a", "v1.0", "-m", "one"}, output))
      << output;
  WriteTextFile(project + "/model.py", "print('edited')\n");
  ASSERT_TRUE(CommitProject("second"));
  const std::string sha = options_.job.sha;
  options_.job.depth = 0;
  options_.job.steps = {
      {"script", {"echo \"described=$(git describe --abbrev=8)\""}}};

  JobResult result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_, Contains("described=v1.0-1-g" + sha.substr(0, 8)))
      << Log();

  // With a depth, only the tags on the fetched commits come along.
  ASSERT_TRUE(Git(project, {"tag", "-a", "v2.0", "-m", "two"}, output))
      << output;
  fs::remove_all(dir_.path() + "/builds");
  options_.job.depth = 1;
  options_.job.steps = {{"script",
                         {"echo \"described=$(git describe)\"",
                          "echo \"tags=$(git tag -l | tr '\\n' ' ')\""}}};
  log_lines_.clear();

  result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_, Contains("described=v2.0")) << Log();
  EXPECT_THAT(log_lines_, Contains("tags=v2.0 ")) << Log();
}

// The runner checks more of the job's settings than run-local uses, and
// warns of each bad one, in its order: the settings first, then the
// attempt counts it takes into 1..10.
TEST_F(RunnerEmulatorTest, SettingsAreCheckedInTheRunnersOrder) {
  options_.job.variables.push_back({"GET_SOURCES_ATTEMPTS", "0"});
  options_.job.variables.push_back({"EXECUTOR_JOB_SECTION_ATTEMPTS", "20"});
  options_.job.variables.push_back({"RESTORE_CACHE_ATTEMPTS", "abc"});
  options_.job.variables.push_back({"GIT_LFS_SKIP_SMUDGE", "yes"});
  options_.job.variables.push_back({"CI_DEBUG_SERVICES", "x"});

  JobResult result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  const std::vector<std::string> expected = {
      "WARNING: CI_DEBUG_SERVICES: expected bool got \"x\", using default "
      "value: false",
      "GIT_LFS_SKIP_SMUDGE: expected bool got \"yes\", using default value: "
      "false",
      "RESTORE_CACHE_ATTEMPTS: expected int got \"abc\", using default "
      "value: 1",
      "EXECUTOR_JOB_SECTION_ATTEMPTS: number of attempts out of the range "
      "[1, 10], clamping to: 10",
      "GET_SOURCES_ATTEMPTS: number of attempts out of the range [1, 10], "
      "clamping to: 1"};
  const auto first =
      std::find(log_lines_.begin(), log_lines_.end(), expected[0]);
  ASSERT_NE(first, log_lines_.end()) << Log();
  ASSERT_GE(log_lines_.end() - first, 5) << Log();
  EXPECT_EQ(std::vector<std::string>(first, first + 5), expected);
}

// After the sources, get_sources says what it does with submodules; a
// GIT_SUBMODULE_STRATEGY the runner does not know is warned about and
// fails get_sources as a system failure before run_exec is called.
TEST_F(RunnerEmulatorTest, SubmoduleStrategyIsReadAsTheRunnerReadsIt) {
  JobResult result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_, Contains("Skipping Git submodules setup"));

  options_.job.variables.push_back({"GIT_SUBMODULE_STRATEGY", "recursive"});
  options_.job.variables.push_back({"GIT_SUBMODULE_DEPTH", "3"});
  log_lines_.clear();
  result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_, Contains("Updating/initializing submodules "
                                   "recursively with git depth set to 3..."));

  options_.job.variables.push_back({"GIT_SUBMODULE_STRATEGY", "deep"});
  log_lines_.clear();
  result = Run();

  EXPECT_EQ(result.failure_reason, "runner_system_failure");
  EXPECT_EQ(result.message,
            "Job failed (system failure): unknown GIT_SUBMODULE_STRATEGY");
  EXPECT_THAT(log_lines_,
              Contains("WARNING: GIT_SUBMODULE_STRATEGY: expected either "
                       "'normal', 'recursive' or 'none' got \"deep\""));
  const std::vector<std::string> calls = Calls(result);
  EXPECT_THAT(calls, Not(Contains("run get_sources")));
  EXPECT_THAT(calls, Not(Contains("run build_script")));
  EXPECT_THAT(calls, Contains("run upload_artifacts_on_failure"));
}

TEST_F(RunnerEmulatorTest, SettingsReadExpandedValues) {
  options_.job.variables.push_back({"NO", "false"});
  options_.job.variables.push_back({"AFTER_SCRIPT_IGNORE_ERRORS", "$NO"});
  options_.job.steps = {{"script", {"echo ok"}}, {"after_script", {"exit 3"}}};

  JobResult result = Run();

  EXPECT_EQ(result.status, JobStatus::kFailed) << Log();
  EXPECT_EQ(result.failure_reason, "script_failure");
  EXPECT_EQ(result.exit_code, 3);
  EXPECT_THAT(Calls(result), Contains("run upload_artifacts_on_failure"));
  EXPECT_THAT(Log(), Not(HasSubstr("job will continue unaffected")));
}

TEST_F(RunnerEmulatorTest, AfterScriptErrorsDoNotReplaceAnEarlierFailure) {
  options_.job.variables.push_back({"AFTER_SCRIPT_IGNORE_ERRORS", "0"});
  options_.job.steps = {{"script", {"exit 7"}}, {"after_script", {"exit 3"}}};

  JobResult result = Run();

  EXPECT_EQ(result.failure_reason, "script_failure");
  EXPECT_EQ(result.exit_code, 7);
}

TEST_F(RunnerEmulatorTest, AfterScriptErrorsAreIgnoredByDefault) {
  // Not a Go bool: the default, true.
  options_.job.variables.push_back({"AFTER_SCRIPT_IGNORE_ERRORS", "no"});
  options_.job.steps = {{"script", {"echo ok"}}, {"after_script", {"exit 3"}}};

  JobResult result = Run();

  EXPECT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(Log(), HasSubstr("after_script failed, but job will continue "
                               "unaffected: exit status 3"));
}

TEST_F(RunnerEmulatorTest, ScriptTimeoutsAreGoDurations) {
  // Go's time.ParseDuration: "1500ms" is valid (seconds without a unit are
  // not, see below), and a timeout past the job's end is ignored.
  options_.job.variables.push_back({"RUNNER_SCRIPT_TIMEOUT", "1500ms"});
  options_.job.variables.push_back({"RUNNER_AFTER_SCRIPT_TIMEOUT", "100h"});
  options_.config.graceful_kill_timeout = milliseconds(100);
  options_.job.steps = {{"script", {"sleep 30", "echo finished"}},
                        {"after_script", {"echo after $CI_JOB_STATUS"}}};

  JobResult result = Run();

  EXPECT_EQ(result.failure_reason, "job_execution_timeout") << Log();
  EXPECT_LT(result.duration, std::chrono::seconds(25));
  EXPECT_THAT(log_lines_, Not(Contains("finished")));
  EXPECT_THAT(log_lines_, Contains("after timedout"));
  EXPECT_THAT(log_lines_,
              Contains("WARNING: RUNNER_AFTER_SCRIPT_TIMEOUT timeout: 100h is "
                       "longer than job timeout. Setting to job timeout"));
}

TEST_F(RunnerEmulatorTest, MalformedOrNegativeScriptTimeoutsAreIgnored) {
  options_.job.variables.push_back({"RUNNER_SCRIPT_TIMEOUT", "2"});
  options_.job.variables.push_back({"RUNNER_AFTER_SCRIPT_TIMEOUT", "-1s"});
  options_.job.steps = {{"script", {"echo finished"}},
                        {"after_script", {"echo after $CI_JOB_STATUS"}}};

  JobResult result = Run();

  EXPECT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_, Contains("finished"));
  EXPECT_THAT(log_lines_, Contains("after success"));
  EXPECT_THAT(log_lines_,
              Contains("WARNING: Ignoring malformed RUNNER_SCRIPT_TIMEOUT "
                       "timeout: 2"));
  EXPECT_THAT(log_lines_,
              Contains("WARNING: Ignoring relative RUNNER_AFTER_SCRIPT_TIMEOUT "
                       "timeout: -1s"));
}

TEST_F(RunnerEmulatorTest, ExitCodeFileIsReadAsGoReadsIt) {
  // bufio.ScanLines drops the '\r' of a CRLF line; strconv.Atoi takes a '+'.
  const std::string run = dir_.path() + "/run-exec";
  WriteTextFile(run, R"(#!/usr/bin/env bash
stage="${@: -1}"
if [ "$stage" = build_script ]; then
  printf '+42\r\n' > "$BUILD_EXIT_CODE_FILE"
  exit "$BUILD_FAILURE_EXIT_CODE"
fi
exit 0
)");
  fs::permissions(run, fs::perms::owner_all);
  options_.config.run_exec = run;
  options_.config.run_args = {};

  JobResult result = Run();

  EXPECT_EQ(result.failure_reason, "script_failure") << result.message;
  EXPECT_EQ(result.exit_code, 42);

  // A line Atoi cannot read is a system failure, in the custom executor's
  // words.
  WriteTextFile(run, R"(#!/usr/bin/env bash
stage="${@: -1}"
if [ "$stage" = build_script ]; then
  echo 'forty-two' > "$BUILD_EXIT_CODE_FILE"
  exit "$BUILD_FAILURE_EXIT_CODE"
fi
exit 0
)");
  fs::permissions(run, fs::perms::owner_all);
  log_lines_.clear();
  result = Run();
  EXPECT_EQ(result.failure_reason, "runner_system_failure");
  EXPECT_THAT(result.message,
              HasSubstr("unknown Custom executor executable exit code 2; "
                        "executable execution terminated with: exit status "
                        "1"));
}

// What an earlier job left in the project directory: clone starts afresh;
// fetch keeps the repository and runs `git clean` with GIT_CLEAN_FLAGS
// (default -ffdx, "none" for no clean); GIT_FETCH_EXTRA_FLAGS follow the
// depth (a --depth there wins); get_sources never prompts for credentials.
TEST_F(RunnerEmulatorTest, CleanAndFetchFlagsTreatLeftoversAsTheRunnerDoes) {
  const std::string project = dir_.path() + "/project";
  WriteTextFile(project + "/.gitignore", "build/\n");
  ASSERT_TRUE(CommitProject("first"));
  ASSERT_TRUE(CommitProject("second"));
  options_.job.depth = 2;
  const std::string leave =
      "mkdir -p build && touch build/out leftover.txt && "
      "echo prompt=$GIT_TERMINAL_PROMPT";
  const std::string look =
      "ls -A | tr '\\n' ' '; echo; git rev-list --count HEAD";
  options_.job.steps = {{"script", {leave}}};
  options_.job.variables.push_back({"GIT_STRATEGY", "fetch"});

  JobResult result = Run();
  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  // The prompt setting is get_sources' own, not the steps'.
  EXPECT_THAT(log_lines_, Contains("prompt="));

  // fetch: the default clean removes the untracked and the ignored files.
  options_.job.steps = {{"script", {look}}};
  log_lines_.clear();
  result = Run();
  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_, Contains("Removing build/"));
  EXPECT_THAT(log_lines_, Contains("Removing leftover.txt"));
  EXPECT_THAT(log_lines_, Contains(".git .gitignore model.py "));
  EXPECT_THAT(log_lines_, Contains("2"));

  // GIT_CLEAN_FLAGS keeps what -e names; none keeps everything; a depth in
  // GIT_FETCH_EXTRA_FLAGS wins over the job's.
  options_.job.steps = {{"script", {leave}}};
  Run();
  options_.job.variables.push_back({"GIT_CLEAN_FLAGS", "-ffdx -e build/"});
  options_.job.variables.push_back(
      {"GIT_FETCH_EXTRA_FLAGS", "--quiet --depth 1"});
  options_.job.steps = {{"script", {look}}};
  log_lines_.clear();
  result = Run();
  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_, Contains("Removing leftover.txt"));
  EXPECT_THAT(log_lines_, Contains(".git .gitignore build model.py "));
  EXPECT_THAT(log_lines_, Contains("1"));

  options_.job.steps = {{"script", {leave}}};
  Run();
  options_.job.variables[options_.job.variables.size() - 2].value = "none";
  options_.job.steps = {{"script", {look}}};
  log_lines_.clear();
  result = Run();
  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_,
              Contains(".git .gitignore build leftover.txt model.py "));

  // clone: nothing of the earlier job is left.
  options_.job.variables.push_back({"GIT_STRATEGY", "clone"});
  log_lines_.clear();
  result = Run();
  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_, Contains(".git .gitignore model.py "));
}

// GIT_SUBMODULE_STRATEGY normal / recursive: the submodules are checked
// out at the commits the project records, from their URLs (file:// here),
// as the runner's submodule commands do; GIT_SUBMODULE_PATHS limits them.
TEST_F(RunnerEmulatorTest, SubmodulesAreUpdatedAsTheRunnerDoes) {
  std::string output;
  const auto repo = [&](const std::string& dir, const std::string& file) {
    fs::create_directories(dir);
    WriteTextFile(dir + "/" + file, file + "\n");
    return Git(dir, {"init", "-q"}, output) &&
           Git(dir, {"add", "-A"}, output) &&
           Git(dir, {"commit", "-q", "-m", file}, output);
  };
  const std::string inner = dir_.path() + "/inner";
  const std::string lib = dir_.path() + "/lib";
  const std::string tools = dir_.path() + "/tools";
  ASSERT_TRUE(repo(inner, "inner.txt")) << output;
  ASSERT_TRUE(repo(lib, "lib.txt")) << output;
  ASSERT_TRUE(repo(tools, "tools.txt")) << output;
  const auto add = [&](const std::string& dir, const std::string& url,
                       const std::string& path) {
    return Git(dir,
               {"-c", "protocol.file.allow=always", "submodule", "add", "-q",
                "file://" + url, path},
               output) &&
           Git(dir, {"commit", "-q", "-m", "add " + path}, output);
  };
  ASSERT_TRUE(add(lib, inner, "inner")) << output;
  const std::string project = options_.sources.project_dir;
  ASSERT_TRUE(repo(project, "model.py")) << output;
  ASSERT_TRUE(add(project, lib, "lib")) << output;
  ASSERT_TRUE(add(project, tools, "tools")) << output;
  ASSERT_TRUE(Git(project, {"rev-parse", "HEAD"}, output)) << output;
  options_.job.sha = output.substr(0, 40);
  options_.job.ref = "main";
  options_.job.depth = 0;
  // file:// submodules need git's consent, in the job as anywhere.
  options_.job.variables.push_back({"GIT_CONFIG_COUNT", "1"});
  options_.job.variables.push_back({"GIT_CONFIG_KEY_0", "protocol.file.allow"});
  options_.job.variables.push_back({"GIT_CONFIG_VALUE_0", "always"});
  options_.job.variables.push_back({"GIT_SUBMODULE_STRATEGY", "recursive"});
  // Where git-lfs is installed, each submodule's LFS files are pulled.
  const std::string bin = dir_.path() + "/bin";
  fs::create_directories(bin);
  WriteTextFile(bin + "/git-lfs",
                "#!/bin/sh\necho \"$* in ${PWD##*/}\" >> \"$FAKE_REC/lfs\"\n");
  fs::permissions(bin + "/git-lfs", fs::perms::owner_all);
  env_["PATH"] = bin + ":" + env_["PATH"];
  options_.job.steps = {{"script",
                         {"git -C lib status --porcelain && echo lib clean",
                          "cat lib/lib.txt lib/inner/inner.txt tools/tools.txt",
                          "git submodule status --recursive | wc -l",
                          "git -C lib/inner config include.path"}}};

  JobResult result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_,
              Contains("Updating/initializing submodules recursively..."));
  EXPECT_THAT(log_lines_, Contains("Updated submodules"));
  // Every submodule includes the runner's external git config.
  EXPECT_THAT(
      log_lines_,
      Contains("Configuring submodules to use parent git credentials..."));
  EXPECT_THAT(log_lines_, Contains(options_.config.builds_dir +
                                   "/ml/model.tmp/.gitlab-runner.ext.conf"))
      << Log();
  EXPECT_THAT(log_lines_, Contains("Pulling LFS files..."));
  const std::string lfs = ReadTextFile(rec_ + "/lfs");
  EXPECT_THAT(lfs, HasSubstr("pull in model\n"));  // The project's own.
  EXPECT_THAT(lfs, HasSubstr("pull in lib\n"));
  EXPECT_THAT(lfs, HasSubstr("pull in inner\n"));
  EXPECT_THAT(lfs, HasSubstr("pull in tools\n"));
  EXPECT_THAT(log_lines_, Contains("lib clean"));
  EXPECT_THAT(log_lines_, Contains("inner.txt"));
  EXPECT_THAT(log_lines_, Contains("tools.txt"));
  EXPECT_THAT(log_lines_, Contains("3"));

  // normal, limited to lib: lib's own submodule and tools stay empty.
  options_.job.variables.back().value = "normal";
  options_.job.variables.push_back({"GIT_SUBMODULE_PATHS", "lib"});
  options_.job.steps = {
      {"script",
       {"cat lib/lib.txt", "ls -A lib/inner | wc -l", "ls -A tools | wc -l"}}};
  log_lines_.clear();

  result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_, Contains("Updating/initializing submodules..."));
  EXPECT_THAT(log_lines_, Contains("lib.txt"));
  EXPECT_EQ(std::count(log_lines_.begin(), log_lines_.end(), "0"), 2);
}

// The cache stages as a runner without a shared cache server runs them: the
// key's zip under <cache_dir>/<namespace>/<project>/<key>/cache.zip,
// restored before the steps (a missing one only warns) and saved after
// them; a second job finds what the first one saved.
TEST_F(RunnerEmulatorTest, CacheIsRestoredAndSavedAsTheRunnerDoes) {
  options_.runner_command = GDT_CI_BIN;
  gitlab::JobCache cache;
  cache.key = "deps-non_protected";
  cache.paths = {"vendor/"};
  options_.job.caches = {cache};
  options_.job.steps = {
      {"script",
       {"cat vendor/dep.txt || echo no cache yet",
        "mkdir -p vendor/sub && echo v1 > vendor/dep.txt && "
        "echo x > vendor/sub/tool && chmod 755 vendor/sub/tool"}}};

  JobResult result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess)
      << result.message << ::testing::PrintToString(log_lines_);
  EXPECT_THAT(Calls(result), Contains("run restore_cache"));
  EXPECT_THAT(Calls(result), Contains("run archive_cache"));
  const std::vector<std::string> first = {
      "Restoring cache", "Checking cache for deps-non_protected...",
      "No URL provided, cache will not be downloaded from shared cache "
      "server. Instead a local version of cache will be extracted.",
      "WARNING: Cache file does not exist", "Failed to extract cache"};
  auto at = std::search(log_lines_.begin(), log_lines_.end(), first.begin(),
                        first.end());
  EXPECT_NE(at, log_lines_.end());
  EXPECT_THAT(log_lines_, Contains("no cache yet"));
  const std::vector<std::string> saved = {
      "Saving cache for successful job", "Creating cache deps-non_protected...",
      "vendor/: found 4 matching artifact files and directories",
      "No URL provided, cache will not be uploaded to shared cache server. "
      "Cache will be stored only locally.",
      "Created cache"};
  at = std::search(log_lines_.begin(), log_lines_.end(), saved.begin(),
                   saved.end());
  EXPECT_NE(at, log_lines_.end());
  const std::string zip =
      dir_.path() + "/cache/ml/model/deps-non_protected/cache.zip";
  EXPECT_TRUE(fs::is_regular_file(zip));

  // A later job of the project, in a fresh builds dir, gets the files
  // back (modes kept), and the unchanged cache is left as it is.
  fs::remove_all(dir_.path() + "/builds");
  options_.job.steps = {
      {"script", {"cat vendor/dep.txt", "test -x vendor/sub/tool"}}};
  log_lines_.clear();

  result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess)
      << result.message << ::testing::PrintToString(log_lines_);
  EXPECT_THAT(log_lines_, Contains("Successfully extracted cache"));
  EXPECT_THAT(log_lines_, Contains("v1"));
  EXPECT_THAT(log_lines_,
              Contains("Primary cache does not exist remotely, uploading "
                       "existing archive"));
}

// policy, when, fallback_keys, CACHE_FALLBACK_KEY, key sanitizing, as the
// runner's cache stages read them; without a cache entry that names paths
// neither stage runs.
TEST_F(RunnerEmulatorTest, CacheSettingsAreReadAsTheRunnerReadsThem) {
  options_.runner_command = GDT_CI_BIN;
  options_.job.steps = {{"script", {"true"}}};
  gitlab::JobCache nothing;
  nothing.key = "empty-non_protected";
  options_.job.caches = {nothing};

  JobResult result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess)
      << result.message << ::testing::PrintToString(log_lines_);
  EXPECT_THAT(Calls(result), Not(Contains("run restore_cache")));
  EXPECT_THAT(Calls(result), Not(Contains("run archive_cache")));
  EXPECT_THAT(log_lines_, Not(Contains("Restoring cache")));

  // A zip under "base" to fall back to.
  const std::string base = dir_.path() + "/cache/ml/model/base";
  fs::create_directories(base);
  fs::create_directories(dir_.path() + "/seed/vendor");
  WriteTextFile(dir_.path() + "/seed/vendor/dep.txt", "from base\n");
  std::string output;
  ASSERT_TRUE(RunCommand({"sh", "-c",
                          "cd " + dir_.path() + "/seed && " + GDT_CI_BIN +
                              " cache-archiver --file " + base +
                              "/cache.zip --path vendor"},
                         std::chrono::seconds(30), &output)
                  .ok())
      << output;
  gitlab::JobCache pull;
  pull.key = "$CACHE_NAME/";  // Expanded, then sanitized.
  pull.policy = "pull";
  pull.paths = {"vendor"};
  pull.fallback_keys = {"other"};
  gitlab::JobCache push;
  push.key = "pushed";
  push.policy = "push";
  push.paths = {"vendor"};
  gitlab::JobCache on_failure;
  on_failure.key = "failures";
  on_failure.when = "on_failure";
  on_failure.paths = {"vendor"};
  options_.job.caches = {pull, push, on_failure};
  options_.job.variables.push_back({"CACHE_NAME", "main"});
  options_.job.variables.push_back({"CACHE_FALLBACK_KEY", "base"});
  options_.job.steps = {{"script", {"cat vendor/dep.txt"}}};
  log_lines_.clear();

  result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess)
      << result.message << ::testing::PrintToString(log_lines_);
  const std::vector<std::string> restore = {
      "cache key \"main/\" sanitized to \"main\"",
      "Checking cache for main...",
      "No URL provided, cache will not be downloaded from shared cache "
      "server. Instead a local version of cache will be extracted.",
      "WARNING: Cache file does not exist",
      "Failed to extract cache",
      "Checking cache for other...",
      "No URL provided, cache will not be downloaded from shared cache "
      "server. Instead a local version of cache will be extracted.",
      "WARNING: Cache file does not exist",
      "Failed to extract cache",
      "Checking cache for base...",
      "No URL provided, cache will not be downloaded from shared cache "
      "server. Instead a local version of cache will be extracted.",
      "Successfully extracted cache",
      "Not downloading cache pushed due to policy"};
  EXPECT_NE(std::search(log_lines_.begin(), log_lines_.end(), restore.begin(),
                        restore.end()),
            log_lines_.end());
  EXPECT_THAT(log_lines_, Contains("from base"));
  EXPECT_THAT(log_lines_, Contains("Not uploading cache main due to policy"));
  EXPECT_THAT(log_lines_, Contains("Creating cache pushed..."));
  EXPECT_THAT(log_lines_, Not(Contains("Creating cache failures...")));
  EXPECT_TRUE(fs::exists(dir_.path() + "/cache/ml/model/pushed/cache.zip"));

  // A failed job saves only the on_failure cache; a protected fallback key
  // is refused.
  options_.job.variables.back().value = "main-protected";
  options_.job.steps = {{"script", {"exit 1"}}};
  log_lines_.clear();

  result = Run();

  EXPECT_EQ(result.status, JobStatus::kFailed);
  EXPECT_THAT(Calls(result), Contains("run archive_cache_on_failure"));
  EXPECT_THAT(log_lines_,
              Contains("CACHE_FALLBACK_KEY \"main-protected\" not allowed to "
                       "end in \"-protected\""));
  EXPECT_THAT(log_lines_, Contains("Saving cache for failed job"));
  EXPECT_THAT(log_lines_, Contains("Creating cache failures..."));
  EXPECT_THAT(log_lines_, Not(Contains("Creating cache pushed...")));

  // A policy that is none of the three: the stage cannot be written.
  options_.job.caches = {pull};
  options_.job.caches[0].policy = "sometimes";
  options_.job.steps = {{"script", {"true"}}};

  result = Run();

  EXPECT_EQ(result.status, JobStatus::kFailed);
  EXPECT_EQ(result.failure_reason, "runner_system_failure");
  EXPECT_THAT(result.message, HasSubstr("unknown cache policy sometimes for "
                                        "main"));
}

// A link the checkout holds where the cache has a directory is replaced,
// never written through.
TEST_F(RunnerEmulatorTest, RestoredCacheReplacesLinksInsteadOfFollowing) {
  options_.runner_command = GDT_CI_BIN;
  const std::string outside = dir_.path() + "/outside";
  fs::create_directories(outside);
  fs::create_symlink(outside, options_.sources.project_dir + "/vendor");
  const std::string zip_dir = dir_.path() + "/cache/ml/model/deps";
  fs::create_directories(zip_dir);
  fs::create_directories(dir_.path() + "/seed/vendor");
  WriteTextFile(dir_.path() + "/seed/vendor/dep.txt", "cached\n");
  std::string output;
  ASSERT_TRUE(RunCommand({"sh", "-c",
                          "cd " + dir_.path() + "/seed && " + GDT_CI_BIN +
                              " cache-archiver --file " + zip_dir +
                              "/cache.zip --path vendor"},
                         std::chrono::seconds(30), &output)
                  .ok())
      << output;
  gitlab::JobCache cache;
  cache.key = "deps";
  cache.paths = {"vendor"};
  cache.policy = "pull";
  options_.job.caches = {cache};
  options_.job.steps = {{"script", {"cat vendor/dep.txt"}}};

  JobResult result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess)
      << result.message << ::testing::PrintToString(log_lines_);
  EXPECT_THAT(log_lines_, Contains("Successfully extracted cache"));
  EXPECT_THAT(log_lines_, Contains("cached"));
  EXPECT_FALSE(fs::exists(outside + "/dep.txt"));
}

// The cache keeps symbolic links as links and empty directories, as the
// runner's archiver and extractor do.
TEST_F(RunnerEmulatorTest, CacheKeepsLinksAndEmptyDirectories) {
  options_.runner_command = GDT_CI_BIN;
  gitlab::JobCache cache;
  cache.key = "deps";
  cache.paths = {"vendor"};
  options_.job.caches = {cache};
  options_.job.steps = {
      {"script",
       {"mkdir -p vendor/empty vendor/lib && echo lib > vendor/lib/libfoo.so.1 "
        "&& ln -s lib/libfoo.so.1 vendor/libfoo.so"}}};

  JobResult result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_,
              Contains("vendor: found 5 matching artifact files and "
                       "directories"));

  // The next job (clone: a fresh project directory) gets them back.
  cache.policy = "pull";
  options_.job.caches = {cache};
  options_.job.steps = {{"script",
                         {"test -d vendor/empty && echo empty dir kept",
                          "echo link to $(readlink vendor/libfoo.so)"}}};
  log_lines_.clear();
  result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_, Contains("Successfully extracted cache"));
  EXPECT_THAT(log_lines_, Contains("empty dir kept"));
  EXPECT_THAT(log_lines_, Contains("link to lib/libfoo.so.1"));
}

// A stage cut short by a timeout is named in the runner's warning: the
// steps' by RUNNER_SCRIPT_TIMEOUT (after_script still runs, and the job is
// a timeout with the script context's error), after_script's by
// RUNNER_AFTER_SCRIPT_TIMEOUT (the job goes on).
TEST_F(RunnerEmulatorTest, TimeoutsNameTheStageTheyCutShort) {
  const auto warning = [](const std::string& stage) {
    return absl::StrCat(
        "WARNING: ", stage,
        " could not run to completion because the timeout was exceeded. For "
        "more control over job and script timeouts see: "
        "https://docs.gitlab.com/ci/runners/configure_runners/"
        "#set-script-and-after_script-timeouts");
  };
  options_.job.timeout_seconds = 600;
  options_.job.variables.push_back({"RUNNER_SCRIPT_TIMEOUT", "2s"});
  options_.job.steps = {{"script", {"sleep 30"}},
                        {"after_script", {"echo after $CI_JOB_STATUS"}}};

  JobResult result = Run();

  EXPECT_EQ(result.status, JobStatus::kFailed);
  EXPECT_EQ(result.failure_reason, "job_execution_timeout");
  EXPECT_THAT(log_lines_, Contains(warning("step_script"))) << Log();
  EXPECT_THAT(log_lines_, Not(Contains(warning("after_script"))));
  EXPECT_THAT(log_lines_, Contains("after timedout"));
  EXPECT_EQ(log_lines_.back(),
            "ERROR: Job failed: script timeout: context deadline exceeded");

  options_.job.variables.back() = {"RUNNER_AFTER_SCRIPT_TIMEOUT", "2s"};
  options_.job.steps = {{"script", {"echo done"}},
                        {"after_script", {"sleep 30"}}};
  log_lines_.clear();
  result = Run();

  EXPECT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_, Contains(warning("after_script")));
  EXPECT_THAT(log_lines_, Not(Contains(warning("step_script"))));
  // The after_script error is the killed exec's exit, as the custom
  // executor reads it, not a job timeout.
  EXPECT_THAT(
      log_lines_,
      Contains(AllOf(StartsWith("WARNING: after_script failed, but job "
                                "will continue unaffected: unknown "
                                "Custom executor executable exit code "),
                     HasSubstr("; executable execution terminated "
                               "with: "))))
      << Log();
}

// The custom executor runs the `script:` step as build_script and says so
// in the job log before its output; with --step-script-stage (no rename)
// there is nothing to announce.
TEST_F(RunnerEmulatorTest, BuildScriptRenameIsAnnounced) {
  const std::string warning =
      "WARNING: Starting with version 17.0 the 'build_script' stage will be "
      "replaced with 'step_script': "
      "https://gitlab.com/groups/gitlab-org/-/epics/6112";
  options_.job.steps = {{"script", {"echo built"}},
                        {"release", {"echo released"}}};

  JobResult result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  const auto executing =
      std::find(log_lines_.begin(), log_lines_.end(),
                "Executing \"step_script\" stage of the job script");
  ASSERT_NE(executing, log_lines_.end()) << Log();
  ASSERT_NE(executing + 1, log_lines_.end());
  EXPECT_EQ(*(executing + 1), warning);
  EXPECT_EQ(std::count(log_lines_.begin(), log_lines_.end(), warning), 1);

  options_.config.main_script_stage = "step_script";
  log_lines_.clear();
  result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_, Not(Contains(warning)));
}

// get_sources leaves the repository including the runner's external git
// config: the GitLab server's URLs (the remote's, the server's base) are
// rewritten to ones with the job token, with GIT_SUBMODULE_FORCE_HTTPS the
// server's SSH URLs too; with FF_GIT_URLS_WITHOUT_TOKENS no URL holds the
// token and a credential helper hands git $CI_JOB_TOKEN instead.
TEST_F(RunnerEmulatorTest, GitUrlsAreRewrittenAsTheRunnersExternalConfigDoes) {
  ASSERT_TRUE(CommitProject("first"));
  options_.job.variables.push_back({"CI_SERVER_URL", "https://gitlab.test"});
  options_.job.variables.push_back({"CI_SERVER_HOST", "gitlab.test"});
  options_.job.variables.push_back({"CI_JOB_TOKEN", "glcbt-TEST-1002"});
  // The log shows the token to check where it went: GitLab tokens by their
  // prefix are masked only with this flag on.
  options_.job.variables.push_back({"FF_MASK_ALL_DEFAULT_TOKENS", "false"});
  options_.job.steps = {
      {"script",
       {"echo \"repo $(git ls-remote --get-url "
        "https://gitlab.test/ml/model.git)\"",
        "echo \"other $(git ls-remote --get-url "
        "https://gitlab.test/ml/other.git)\"",
        "echo \"scp $(git ls-remote --get-url git@gitlab.test:ml/sub.git)\"",
        "echo \"ssh $(git ls-remote --get-url "
        "ssh://git@gitlab.test/ml/sub.git)\"",
        "echo \"port $(git ls-remote --get-url "
        "ssh://git@gitlab.test:2222/ml/sub.git)\""}}};
  const std::string authed = "https://gitlab-ci-token:glcbt-TEST-1002@";

  JobResult result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_,
              Contains("repo " + authed + "gitlab.test/ml/model.git"));
  EXPECT_THAT(log_lines_,
              Contains("other " + authed + "gitlab.test/ml/other.git"));
  EXPECT_THAT(log_lines_, Contains("scp git@gitlab.test:ml/sub.git"));
  EXPECT_THAT(log_lines_, Contains("ssh ssh://git@gitlab.test/ml/sub.git"));

  // GIT_SUBMODULE_FORCE_HTTPS: the server's SSH URLs too.
  options_.job.variables.push_back({"GIT_SUBMODULE_FORCE_HTTPS", "true"});
  log_lines_.clear();

  result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_, Contains("scp " + authed + "gitlab.test/ml/sub.git"));
  EXPECT_THAT(log_lines_, Contains("ssh " + authed + "gitlab.test/ml/sub.git"));

  // ... at the server's SSH port, when it is not 22.
  options_.job.variables.push_back({"CI_SERVER_SHELL_SSH_PORT", "2222"});
  log_lines_.clear();

  result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_, Contains("scp git@gitlab.test:ml/sub.git"));
  EXPECT_THAT(log_lines_,
              Contains("port " + authed + "gitlab.test/ml/sub.git"));

  // Without tokens in URLs: plain HTTPS, the credentials from the helper.
  options_.job.variables.pop_back();
  options_.job.variables.push_back({"FF_GIT_URLS_WITHOUT_TOKENS", "true"});
  options_.job.steps = {
      {"script",
       {"git ls-remote --get-url https://gitlab.test/ml/model.git",
        "git ls-remote --get-url git@gitlab.test:ml/sub.git",
        "printf 'protocol=https\\nhost=gitlab.test\\n' | git credential fill",
        "git config -l | grep -c glcbt || true"}}};
  log_lines_.clear();

  result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_, Contains("https://gitlab.test/ml/model.git"));
  EXPECT_THAT(log_lines_, Contains("https://gitlab.test/ml/sub.git"));
  EXPECT_THAT(log_lines_, Contains("username=gitlab-ci-token"));
  EXPECT_THAT(log_lines_, Contains("password=glcbt-TEST-1002"));
  EXPECT_THAT(log_lines_, Contains("0"));
}

// Unless GIT_LFS_SKIP_SMUDGE: get_sources runs with GIT_LFS_SKIP_SMUDGE=1
// and, where git-lfs is installed, runs `git lfs pull` after the checkout
// (an empty line after its output); without git-lfs nothing is said.
TEST_F(RunnerEmulatorTest, LfsFilesArePulledAfterTheCheckoutWhereGitLfsIs) {
  ASSERT_TRUE(CommitProject("first"));
  options_.job.steps = {
      {"script", {"echo \"smudge ${GIT_LFS_SKIP_SMUDGE:-unset}\""}}};
  const std::string bin = dir_.path() + "/bin";
  fs::create_directories(bin);
  const std::string fake = bin + "/git-lfs";
  WriteTextFile(fake,
                "#!/bin/sh\n"
                "echo \"$* $GIT_LFS_SKIP_SMUDGE\" >> \"$FAKE_REC/lfs\"\n"
                "[ \"$1\" != pull ] || echo 'pulled LFS objects'\n");
  fs::permissions(fake, fs::perms::owner_all);
  const std::string path = env_["PATH"];
  env_["PATH"] = bin + ":" + path;

  JobResult result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(ReadTextFile(rec_ + "/lfs"), HasSubstr("pull 1\n"));
  const auto pulled =
      std::find(log_lines_.begin(), log_lines_.end(), "pulled LFS objects");
  ASSERT_NE(pulled, log_lines_.end()) << Log();
  ASSERT_NE(pulled + 1, log_lines_.end());
  EXPECT_EQ(*(pulled + 1), "");
  EXPECT_THAT(log_lines_, Contains("smudge unset"));

  // The job's own GIT_LFS_SKIP_SMUDGE: no pull.
  fs::remove(rec_ + "/lfs");
  options_.job.variables.push_back({"GIT_LFS_SKIP_SMUDGE", "1"});
  log_lines_.clear();

  result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_FALSE(fs::exists(rec_ + "/lfs"));
  EXPECT_THAT(log_lines_, Not(Contains("pulled LFS objects")));
  EXPECT_THAT(log_lines_, Contains("smudge 1"));

  // No git-lfs: nothing said, nothing failed.
  options_.job.variables.pop_back();
  env_["PATH"] = path;
  log_lines_.clear();

  result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_FALSE(fs::exists(rec_ + "/lfs"));
  const auto checkout = std::find_if(
      log_lines_.begin(), log_lines_.end(),
      [](const std::string& line) { return line.starts_with("Checking out"); });
  ASSERT_NE(checkout, log_lines_.end()) << Log();
  ASSERT_NE(checkout + 1, log_lines_.end());
  EXPECT_NE(*(checkout + 1), "") << Log();
}

// The custom executor runs no services; it describes the job's to its
// execs as CUSTOM_ENV_CI_JOB_SERVICES (Go's JSON: name and alias expanded,
// the first alias, entrypoint and command null when not given, the
// service's variables expanded against the job's, keys sorted, HTML
// characters escaped), empty without services. The job itself does not see
// it.
TEST_F(RunnerEmulatorTest,
       ServicesReachTheExecsAsTheCustomExecutorDescribesThem) {
  options_.job.variables.push_back({"PG", "16"});
  options_.job.variables.push_back({"DB_NAME", "train"});
  options_.job.services = {
      {"postgres:$PG",
       "db,$DB_NAME",
       {"docker-entrypoint.sh"},
       {"postgres", "-c", "fsync=off"},
       {{"POSTGRES_DB", "$DB_NAME"}, {"A_FLAGS", "<x & y>"}}},
      {"redis:7", "", {}, {}, {}}};
  options_.job.steps = {{"script", {"echo \"services [$CI_JOB_SERVICES]\""}}};

  JobResult result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_, Contains("services []"));
  const std::string want =
      "CUSTOM_ENV_CI_JOB_SERVICES=["
      "{\"name\":\"postgres:16\",\"alias\":\"db\","
      "\"entrypoint\":[\"docker-entrypoint.sh\"],"
      "\"command\":[\"postgres\",\"-c\",\"fsync=off\"],"
      "\"variables\":{\"A_FLAGS\":\"\\u003cx \\u0026 y\\u003e\","
      "\"POSTGRES_DB\":\"train\"}},"
      "{\"name\":\"redis:7\",\"alias\":\"\",\"entrypoint\":null,"
      "\"command\":null}]\n";
  // Every exec call, config_exec to cleanup_exec.
  int envs = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(rec_)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("env.", 0) != 0) continue;
    ++envs;
    EXPECT_THAT(ReadTextFile(entry.path().string()), HasSubstr(want)) << name;
  }
  EXPECT_GE(envs, 4);

  options_.job.services.clear();
  log_lines_.clear();
  for (const fs::directory_entry& entry : fs::directory_iterator(rec_)) {
    fs::remove_all(entry.path());
  }

  result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(EnvOf(0, "config"), HasSubstr("\nCUSTOM_ENV_CI_JOB_SERVICES=\n"));
}

// get_sources ends, and the cleanup script starts, with `git credential
// reject` for the remote's server and gitlab-ci-token, so a credential
// helper of the user's forgets the job token a job's git handed it; the
// cleanup also removes the external git config (it holds the token) and
// the repository's config and hooks.
TEST_F(RunnerEmulatorTest, CleanupRejectsTheJobTokenAndRemovesTheJobsGitFiles) {
  ASSERT_TRUE(CommitProject("first"));
  const std::string home = dir_.path() + "/home";
  fs::create_directories(home);
  const std::string store = home + "/creds";
  WriteTextFile(home + "/.gitconfig",
                "[credential]\n\thelper = store --file=" + store + "\n");
  WriteTextFile(store, "https://other:keep@example.com\n");
  env_["HOME"] = home;
  options_.job.steps = {
      {"script",
       {"printf 'url=https://gitlab.test\\nusername=gitlab-ci-token\\n"
        "password=glcbt-TEST-1002\\n' | git credential approve",
        "echo \"kept $(grep -c gitlab.test \"$HOME/creds\")\""}}};

  JobResult result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_, Contains("kept 1"));
  EXPECT_EQ(ReadTextFile(store), "https://other:keep@example.com\n");
  const std::string project_dir = dir_.path() + "/builds/ml/model";
  EXPECT_FALSE(fs::exists(project_dir + ".tmp/.gitlab-runner.ext.conf"));
  EXPECT_FALSE(fs::exists(project_dir + "/.git/config"));
  EXPECT_FALSE(fs::exists(project_dir + "/.git/hooks"));
  EXPECT_TRUE(fs::exists(project_dir + "/.git/HEAD"));
  EXPECT_TRUE(fs::exists(project_dir + "/model.py"));
}

// FF_GIT_URLS_WITHOUT_TOKENS: every stage exports GIT_CONFIG_GLOBAL, a
// file get_sources writes that includes the user's global config and the
// external git config, so the credential helper answers git in any
// directory (with GIT_STRATEGY none too, its external config then holding
// the helper alone); `git config --global` writes land there, and the
// cleanup removes it.
TEST_F(RunnerEmulatorTest, TokenlessGitUrlsSeedAGlobalGitConfig) {
  ASSERT_TRUE(CommitProject("first"));
  const std::string home = dir_.path() + "/home";
  fs::create_directories(home);
  WriteTextFile(home + "/.gitconfig", "[user]\n\tname = Seed Tester\n");
  env_["HOME"] = home;
  options_.job.variables.push_back({"CI_JOB_TOKEN", "glcbt-TEST-1002"});
  // The log shows the token to check where it went: GitLab tokens by their
  // prefix are masked only with this flag on.
  options_.job.variables.push_back({"FF_MASK_ALL_DEFAULT_TOKENS", "false"});
  options_.job.variables.push_back({"FF_GIT_URLS_WITHOUT_TOKENS", "true"});
  options_.job.steps = {
      {"script",
       {"echo \"global ${GIT_CONFIG_GLOBAL##*/}\"", "cd /",
        "echo \"user $(git config --get user.name)\"",
        "printf 'protocol=https\\nhost=gitlab.test\\n' | "
        "GIT_TERMINAL_PROMPT=0 git credential fill || echo nofill",
        "git config --global alias.st status",
        "echo \"alias $(git config --global --get alias.st)\""}},
      {"after_script", {"echo \"after ${GIT_CONFIG_GLOBAL##*/}\""}}};
  const std::string project_dir = dir_.path() + "/builds/ml/model";

  JobResult result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_, Contains("global .glr.gconf"));
  EXPECT_THAT(log_lines_, Contains("user Seed Tester"));
  EXPECT_THAT(log_lines_, Contains("username=gitlab-ci-token"));
  EXPECT_THAT(log_lines_, Contains("password=glcbt-TEST-1002"));
  EXPECT_THAT(log_lines_, Contains("alias status"));
  EXPECT_THAT(log_lines_, Contains("after .glr.gconf"));
  EXPECT_EQ(ReadTextFile(home + "/.gitconfig"),
            "[user]\n\tname = Seed Tester\n");
  EXPECT_FALSE(fs::exists(project_dir + ".tmp/.glr.gconf"));
  EXPECT_FALSE(fs::exists(project_dir + ".tmp/.gitlab-runner.ext.conf"));

  options_.job.variables.push_back({"GIT_STRATEGY", "none"});
  log_lines_.clear();

  result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_, Contains("password=glcbt-TEST-1002"));
  EXPECT_THAT(log_lines_, Contains("user Seed Tester"));
}

// `[[runners]] clone_url`: the remote is <clone_url>/<CI_PROJECT_PATH>.git
// with the job token, the server's rewrites are made for clone_url, and
// the credentials rejected at the end are clone_url's server's.
TEST_F(RunnerEmulatorTest, CloneUrlIsTheRemoteTheRunnersGitConfigUses) {
  ASSERT_TRUE(CommitProject("first"));
  options_.job.variables.push_back({"CI_PROJECT_PATH", "ml/model"});
  options_.job.variables.push_back({"CI_JOB_TOKEN", "glcbt-TEST-1002"});
  // The log shows the token to check where it went: GitLab tokens by their
  // prefix are masked only with this flag on.
  options_.job.variables.push_back({"FF_MASK_ALL_DEFAULT_TOKENS", "false"});
  options_.config.clone_url = "https://mirror.test:8443/git/";
  const std::string home = dir_.path() + "/home";
  fs::create_directories(home);
  const std::string store = home + "/creds";
  WriteTextFile(home + "/.gitconfig",
                "[credential]\n\thelper = store --file=" + store + "\n");
  WriteTextFile(store, "https://gitlab-ci-token:keep@gitlab.test\n");
  env_["HOME"] = home;
  options_.job.steps = {
      {"script",
       {"echo \"repo $(git ls-remote --get-url "
        "https://mirror.test:8443/git/ml/model.git)\"",
        "echo \"other $(git ls-remote --get-url "
        "https://mirror.test:8443/git/ml/other.git)\"",
        "printf 'url=https://mirror.test:8443\\nusername=gitlab-ci-token\\n"
        "password=glcbt-TEST-1002\\n' | git credential approve"}}};
  const std::string authed = "https://gitlab-ci-token:glcbt-TEST-1002@";

  JobResult result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_,
              Contains("repo " + authed + "mirror.test:8443/git/ml/model.git"));
  EXPECT_THAT(log_lines_, Contains("other " + authed +
                                   "mirror.test:8443/git/ml/other.git"));
  EXPECT_EQ(ReadTextFile(store), "https://gitlab-ci-token:keep@gitlab.test\n");

  // Without tokens in URLs: the helper answers for clone_url's server.
  WriteTextFile(home + "/.gitconfig", "");
  options_.job.variables.push_back({"FF_GIT_URLS_WITHOUT_TOKENS", "true"});
  options_.job.steps = {
      {"script",
       {"printf 'protocol=https\\nhost=mirror.test:8443\\n' | "
        "GIT_TERMINAL_PROMPT=0 git credential fill || echo nofill"}}};
  log_lines_.clear();

  result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_, Contains("password=glcbt-TEST-1002"));
}

// The prepare script's line names the hostname config_exec gave in double
// quotes as Go quotes it, so the shell expands what it holds.
TEST_F(RunnerEmulatorTest, RunningOnLineQuotesTheHostnameAsTheRunnerDoes) {
  env_["FAKE_CONFIG_JSON"] =
      R"({"hostname": "box-$CUSTOM_ENV_CI_JOB_ID \"q\" a\\b\tc"})";

  JobResult result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_,
              Contains(::testing::EndsWith(" via box-1002 \"q\" a\\b\\tc...")));
  EXPECT_THAT(log_lines_, Contains(StartsWith("Running on ")));
}

// A script failure ends the job log `ERROR: Job failed: exit status <the
// first line of BUILD_EXIT_CODE_FILE as written>` (the custom executor's
// build error), `exit status 1` (Go's words for the exec) without the file;
// a failed after_script's warning names it the same way.
TEST_F(RunnerEmulatorTest,
       ScriptFailureLinesNameTheExitStatusAsTheCustomExecutorDoes) {
  const std::string run = dir_.path() + "/run-exec";
  WriteTextFile(run, R"(#!/usr/bin/env bash
stage="${@: -1}"
if [ "$stage" = build_script ]; then
  printf '+42\n' > "$BUILD_EXIT_CODE_FILE"
  exit "$BUILD_FAILURE_EXIT_CODE"
fi
if [ "$stage" = after_script ]; then
  rm -f "$BUILD_EXIT_CODE_FILE"
  exit "$BUILD_FAILURE_EXIT_CODE"
fi
exit 0
)");
  fs::permissions(run, fs::perms::owner_all);
  options_.config.run_exec = run;
  options_.config.run_args = {};

  JobResult result = Run();

  EXPECT_EQ(result.failure_reason, "script_failure") << result.message;
  EXPECT_EQ(result.exit_code, 42);
  EXPECT_EQ(result.message, "Job failed: exit status +42");
  EXPECT_EQ(log_lines_.back(), "ERROR: Job failed: exit status +42");
  EXPECT_THAT(log_lines_,
              Contains("WARNING: after_script failed, but job will continue "
                       "unaffected: exit status 1"));
}

// FF_ENABLE_JOB_CLEANUP: the cleanup script cleans the build directory:
// fetch cleans and resets the repository, clone removes the project
// directory, none says it skips the step.
TEST_F(RunnerEmulatorTest, JobCleanupFlagCleansTheBuildDirectory) {
  ASSERT_TRUE(CommitProject("first"));
  options_.job.variables.push_back({"FF_ENABLE_JOB_CLEANUP", "true"});
  options_.job.variables.push_back({"GIT_STRATEGY", "fetch"});
  options_.job.steps = {
      {"script", {"echo junk > junk.txt", "echo changed > model.py"}}};
  const std::string project_dir = dir_.path() + "/builds/ml/model";

  JobResult result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_, Contains("Removing junk.txt"));
  EXPECT_THAT(log_lines_, Contains(StartsWith("HEAD is now at ")));
  EXPECT_FALSE(fs::exists(project_dir + "/junk.txt"));
  EXPECT_EQ(ReadTextFile(project_dir + "/model.py"), "print('hi')\n");

  options_.job.variables.push_back({"GIT_STRATEGY", "clone"});
  log_lines_.clear();

  result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_FALSE(fs::exists(project_dir));

  options_.job.variables.push_back({"GIT_STRATEGY", "none"});
  log_lines_.clear();

  result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(log_lines_, Contains("Skipping build directory cleanup step"));
  EXPECT_TRUE(fs::exists(project_dir + "/junk.txt"));
}

// With GIT_STRATEGY none the cleanup script leaves the repository's config
// and hooks by default, but removes them when config.toml sets
// clean_git_config = true: written out, the setting holds for every
// strategy.
TEST_F(RunnerEmulatorTest, CleanGitConfigWrittenOutCleansAfterGitStrategyNone) {
  options_.job.variables.push_back({"GIT_STRATEGY", "none"});
  options_.job.steps = {
      {"script",
       {"git init -q . && git config gdt.left yes && mkdir -p .git/hooks",
        "touch .git/hooks/pre-commit"}}};
  const std::string project_dir = dir_.path() + "/builds/ml/model";

  JobResult result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_TRUE(fs::exists(project_dir + "/.git/config"));
  EXPECT_TRUE(fs::exists(project_dir + "/.git/hooks/pre-commit"));

  options_.config.clean_git_config = true;
  result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_FALSE(fs::exists(project_dir + "/.git/config"));
  EXPECT_FALSE(fs::exists(project_dir + "/.git/hooks"));
  EXPECT_TRUE(fs::exists(project_dir + "/.git/HEAD"));
}

// The "Running on" line quotes a non-ASCII hostname as Go's strconv.Quote
// does: printable characters as they are, format and unassigned ones as
// \uNNNN.
TEST_F(RunnerEmulatorTest, RunningOnLineQuotesNonAsciiAsGoDoes) {
  env_["FAKE_CONFIG_JSON"] = R"({"hostname": "nœud-\u061c\u0378-日本"})";

  JobResult result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  EXPECT_THAT(
      log_lines_,
      Contains(::testing::EndsWith(" via nœud-\\u061c\\u0378-日本...")));
}

// The settings warnings quote the value as Go's %q does: a quote, a tab or
// a newline in it is escaped, so the warning stays on one line.
TEST_F(RunnerEmulatorTest, SettingsWarningsQuoteValuesAsGoDoes) {
  options_.job.variables.push_back({"GIT_STRATEGY", "fetch\t\"x\""});
  options_.job.variables.push_back({"GIT_CHECKOUT", "no\n"});
  options_.job.variables.push_back({"GET_SOURCES_ATTEMPTS", "2\\"});

  JobResult result = Run();

  ASSERT_EQ(result.status, JobStatus::kSuccess) << Log();
  const std::vector<std::string> expected = {
      "WARNING: GIT_STRATEGY: expected either 'clone', 'fetch', 'none' or "
      "'empty' got \"fetch\\t\\\"x\\\"\", using default value 'clone'",
      "GIT_CHECKOUT: expected bool got \"no\\n\", using default value: true",
      "GET_SOURCES_ATTEMPTS: expected int got \"2\\\\\", using default "
      "value: 1"};
  const auto first =
      std::find(log_lines_.begin(), log_lines_.end(), expected[0]);
  ASSERT_NE(first, log_lines_.end()) << Log();
  ASSERT_GE(log_lines_.end() - first, 3) << Log();
  EXPECT_EQ(std::vector<std::string>(first, first + 3), expected);
}

}  // namespace
}  // namespace gdt::ci
