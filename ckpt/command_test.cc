#include "ckpt/command.h"

#include <filesystem>
#include <sstream>

#include "ckpt/checkpoint.h"
#include "common/retry_after.h"
#include "common/zip_archive.h"
#include "gitlab/fake_gitlab_api.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/temp_dir.h"

namespace gdt::ckpt {
namespace {

using test::ReadTextFile;
using test::TempDir;
using test::WriteTextFile;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
namespace fs = std::filesystem;

// The coordinator's records as a list in memory.
class FakeRegistry final : public ManifestRegistry {
 public:
  absl::Status Record(int64_t step, int rank, int64_t job_id,
                      const std::string& manifest_json) override {
    ++record_calls;
    if (paced > 0) {
      --paced;
      return WithRetryAfter(
          absl::ResourceExhaustedError(
              "gang g records checkpoints faster than 2 small manifests a "
              "second per member: step is not recorded; retry in 0.1 s"),
          pace_hint);
    }
    if (!refusal.ok()) return refusal;
    records.insert(records.begin(), manifest_json);  // Newest first.
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<std::string>> List() override {
    ++lists;
    if (outages > 0) {
      --outages;
      return absl::UnavailableError("coordinator 127.0.0.1:1 unavailable");
    }
    if (!refusal.ok()) return refusal;
    return records;
  }

  absl::Status refusal;
  int paced = 0;  // Record calls refused for pace, with pace_hint.
  std::chrono::milliseconds pace_hint{100};
  int record_calls = 0;
  int outages = 0;  // List calls that fail as an unreachable coordinator.
  int lists = 0;
  std::vector<std::string> records;
};

class CkptCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    gitlab::FakeGitLabApi::Options options;
    options.max_package_file_bytes = 1 << 20;
    auto fake = gitlab::FakeGitLabApi::Start(options);
    ASSERT_TRUE(fake.ok()) << fake.status();
    fake_ = std::move(*fake);
    fake_->AddJob({.id = 21, .token = "tok-21", .project_id = 6});
    fake_->AddJob({.id = 22, .token = "tok-22", .project_id = 6});
    project_ = dir_.path() + "/p21";
    env_ = {{"CI_API_V4_URL", fake_->api_url()},
            {"CI_JOB_TOKEN", "tok-21"},
            {"CI_JOB_ID", "21"},
            {"CI_PROJECT_ID", "6"},
            {"CI_PROJECT_DIR", project_},
            {"GDT_CHECKPOINT_DIR", project_ + "/checkpoints"},
            {"WORLD_SIZE", "2"}};
  }

  void WriteCheckpoint(int64_t step, size_t bytes = 64) {
    const std::string dir =
        project_ + "/checkpoints/step-" + std::to_string(step);
    fs::create_directories(dir);
    WriteTextFile(dir + "/model.pt", std::string(bytes, 'w'));
  }

  int Save(CkptSaveOptions options) {
    out_.str("");
    err_.str("");
    return RunCkptSave(options, env_, nullptr, out_, err_);
  }

  FakeRegistry registry_;
  TempDir dir_;
  std::string project_;
  CkptEnv env_;
  std::unique_ptr<gitlab::FakeGitLabApi> fake_;
  std::ostringstream out_, err_;
};

TEST_F(CkptCommandTest, SaveWritesManifestAndKeepsTheNewest) {
  for (int step : {10, 20, 30}) {
    WriteCheckpoint(step);
    ASSERT_EQ(Save({.step = step, .keep = 2}), kCkptOk) << err_.str();
  }
  EXPECT_EQ(out_.str(), project_ + "/checkpoints/step-30/manifest.json\n");
  auto manifest = ParseManifest(
      ReadTextFile(project_ + "/checkpoints/step-30/manifest.json"));
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_EQ(manifest->step, 30);
  EXPECT_EQ(manifest->world_size, 2);
  EXPECT_EQ(manifest->job_id, 21);
  EXPECT_EQ(manifest->dir, "checkpoints/step-30");
  EXPECT_EQ(manifest->store, "artifacts");
  EXPECT_FALSE(fs::exists(project_ + "/checkpoints/step-10"));
  EXPECT_TRUE(fs::exists(project_ + "/checkpoints/step-20"));
}

TEST_F(CkptCommandTest, ThresholdFromTheEnvironmentPicksPackages) {
  WriteCheckpoint(7, 2000);
  env_["GDT_CHECKPOINT_THRESHOLD"] = "1000";
  ASSERT_EQ(Save({.step = 7, .json = true}), kCkptOk) << err_.str();
  EXPECT_EQ(nlohmann::json::parse(out_.str())["store"], "packages");
  EXPECT_TRUE(fake_
                  ->PackageFile(6, "gdt-checkpoints", "job-21-rank-0-step-7",
                                "model.pt")
                  .has_value());
  // An explicit --threshold wins.
  ASSERT_EQ(Save({.step = 7, .threshold_bytes = 5000, .json = true}), kCkptOk);
  EXPECT_EQ(nlohmann::json::parse(out_.str())["store"], "artifacts");
  env_["GDT_CHECKPOINT_THRESHOLD"] = "lots";
  EXPECT_EQ(Save({.step = 7}), kCkptBadInput);
  EXPECT_EQ(err_.str(),
            "gdt-ckpt save: GDT_CHECKPOINT_THRESHOLD=lots: not a positive "
            "number of bytes\n");
}

TEST_F(CkptCommandTest, SaveBadInputIsOneLine) {
  EXPECT_EQ(Save({.step = 5}), kCkptBadInput);
  EXPECT_THAT(err_.str(), HasSubstr("step-5 does not exist"));
  const std::string first = err_.str();
  EXPECT_EQ(std::count(first.begin(), first.end(), '\n'), 1);
  EXPECT_EQ(Save({.step = 5, .store = "s3"}), kCkptBadInput);
  EXPECT_THAT(err_.str(), HasSubstr("--store must be"));
  WriteCheckpoint(5);
  env_.erase("CI_JOB_TOKEN");
  EXPECT_EQ(Save({.step = 5, .store = "packages"}), kCkptBadInput);
  EXPECT_EQ(err_.str(),
            "gdt-ckpt save: CI_JOB_TOKEN is empty: the GitLab API needs the "
            "job token\n");
  // A rank outside the world (WORLD_SIZE is 2 here) is not recorded.
  WriteCheckpoint(6);
  EXPECT_EQ(Save({.step = 6, .rank = 7}), kCkptBadInput);
  EXPECT_EQ(err_.str(),
            "gdt-ckpt save: rank 7 must be from 0 to the world size minus 1 "
            "(world size 2; --rank/--world-size, or RANK/WORLD_SIZE)\n");
  EXPECT_FALSE(fs::exists(project_ + "/checkpoints/step-6/manifest.json"));

  // The packages store without an API URL: refused before anything is
  // written, whether forced or chosen by size.
  env_["CI_JOB_TOKEN"] = "tok-21";
  env_.erase("CI_API_V4_URL");
  WriteCheckpoint(8, 2000);
  for (const std::string& store : {"packages", "auto"}) {
    EXPECT_EQ(Save({.step = 8, .store = store, .threshold_bytes = 1000}),
              kCkptBadInput);
    const std::string line = err_.str();
    EXPECT_THAT(line, StartsWith("gdt-ckpt save: "));
    EXPECT_EQ(std::count(line.begin(), line.end(), '\n'), 1);
    EXPECT_FALSE(fs::exists(project_ + "/checkpoints/step-8/manifest.json"));
  }

  // A directory outside the project is refused, and nothing written there.
  const std::string outside = dir_.path() + "/elsewhere";
  fs::create_directories(outside);
  WriteTextFile(outside + "/model.pt", "w");
  EXPECT_EQ(Save({.step = 9, .dir = outside}), kCkptBadInput);
  EXPECT_EQ(err_.str(), "gdt-ckpt save: " + outside +
                            " is not below CI_PROJECT_DIR (" + project_ +
                            "): checkpoints are saved from inside the "
                            "project\n");
  EXPECT_FALSE(fs::exists(outside + "/manifest.json"));
}

TEST_F(CkptCommandTest, SaveRefusesSymbolicLinksAndRecordsNothing) {
  const std::string dir = project_ + "/checkpoints/step-3";
  const std::string outside = dir_.path() + "/outside.bin";
  WriteTextFile(outside, "data");
  const std::vector<std::pair<std::string, std::string>> links = {
      {"shared.bin", outside},    // A file outside the directory.
      {"latest.pt", "model.pt"},  // A file inside it.
      {"sub/loop", ".."},         // A directory (a loop).
  };
  for (const auto& [name, target] : links) {
    SCOPED_TRACE(name);
    fs::remove_all(dir);
    WriteCheckpoint(3);
    fs::create_directories(dir + "/sub");
    fs::create_symlink(target, dir + "/" + name);
    EXPECT_EQ(RunCkptSave({.step = 3}, env_, &registry_, out_, err_),
              kCkptBadInput);
    EXPECT_EQ(err_.str(), "gdt-ckpt save: checkpoint directory " + dir +
                              " holds the symbolic link " + name + " -> " +
                              target +
                              "; only regular files are saved: copy the file "
                              "in or remove the link\n");
    err_.str("");
    EXPECT_FALSE(fs::exists(dir + "/manifest.json"));
    EXPECT_TRUE(registry_.records.empty());
  }
}

TEST_F(CkptCommandTest, AboveThresholdGoesToPackagesAndResumes) {
  WriteCheckpoint(40, 5000);
  ASSERT_EQ(Save({.step = 40, .threshold_bytes = 1000, .json = true}), kCkptOk)
      << err_.str();
  const auto summary = nlohmann::json::parse(out_.str());
  EXPECT_EQ(summary["store"], "packages");
  EXPECT_TRUE(fake_
                  ->PackageFile(6, "gdt-checkpoints", "job-21-rank-0-step-40",
                                "model.pt")
                  .has_value());

  // The retry (job 22) resumes from the manifest the first attempt wrote.
  CkptEnv retry = env_;
  retry["CI_JOB_TOKEN"] = "tok-22";
  retry["GDT_CHECKPOINT_DIR"] = dir_.path() + "/p22/checkpoints";
  std::ostringstream out, err;
  ASSERT_EQ(RunCkptResume({.manifests = {project_ +
                                         "/checkpoints/step-40/manifest.json"}},
                          retry, nullptr, out, err),
            kCkptOk);
  EXPECT_EQ(out.str(),
            "GDT_RESUME_FROM=" + dir_.path() + "/p22/checkpoints/step-40\n");
  EXPECT_EQ(ReadTextFile(dir_.path() + "/p22/checkpoints/step-40/model.pt"),
            std::string(5000, 'w'));
}

TEST_F(CkptCommandTest, ResumeFromPreviousJobsArtifactsSkipsBadManifest) {
  WriteCheckpoint(10);
  ASSERT_EQ(Save({.step = 10}), kCkptOk);
  WriteCheckpoint(20);
  ASSERT_EQ(Save({.step = 20}), kCkptOk);
  // Step 20's file changes after its manifest: its hash no longer matches.
  WriteTextFile(project_ + "/checkpoints/step-20/model.pt",
                std::string(64, 'X'));
  const std::string zip = dir_.path() + "/a.zip";
  ASSERT_TRUE(
      CreateZip(
          project_,
          {"checkpoints/step-10/model.pt", "checkpoints/step-10/manifest.json",
           "checkpoints/step-20/model.pt", "checkpoints/step-20/manifest.json"},
          zip)
          .ok());
  fake_->SetArtifacts(21, ReadTextFile(zip));
  CkptEnv retry = env_;
  retry["CI_JOB_TOKEN"] = "tok-22";
  std::ostringstream out, err;
  ASSERT_EQ(RunCkptResume({.from_jobs = {21, 99},
                           .dest = dir_.path() + "/p22/checkpoints"},
                          retry, nullptr, out, err),
            kCkptOk);
  EXPECT_EQ(out.str(),
            "GDT_RESUME_FROM=" + dir_.path() + "/p22/checkpoints/step-10\n");
  EXPECT_THAT(err.str(), HasSubstr("warning: no checkpoints from job 99: "));
  EXPECT_THAT(err.str(), HasSubstr("warning: skipping checkpoint step 20 (job "
                                   "21, artifacts): file model.pt: SHA-256 "
                                   "mismatch"));
}

TEST_F(CkptCommandTest, ResumeWithNothingUsableStartsFresh) {
  WriteTextFile(dir_.path() + "/bad.json", "{not json");
  std::ostringstream out, err;
  ASSERT_EQ(RunCkptResume(
                {.manifests = {dir_.path() + "/bad.json"}, .from_jobs = {21}},
                env_, nullptr, out, err),
            kCkptOk);
  EXPECT_EQ(out.str(), "GDT_RESUME_FROM=\n");
  EXPECT_THAT(err.str(), HasSubstr("bad.json: manifest: not a JSON object"));
  EXPECT_THAT(err.str(),
              HasSubstr("no checkpoints from job 21: GitLab API GET"));
  EXPECT_THAT(err.str(), HasSubstr("HTTP 404"));
  EXPECT_THAT(err.str(), HasSubstr("starting fresh"));
}

TEST_F(CkptCommandTest, ResumeWithoutTokenIsBadInput) {
  env_.erase("CI_JOB_TOKEN");
  std::ostringstream out, err;
  EXPECT_EQ(RunCkptResume({.from_jobs = {21}}, env_, nullptr, out, err),
            kCkptBadInput);
  EXPECT_EQ(err.str(),
            "gdt-ckpt resume: CI_JOB_TOKEN is empty: the GitLab API needs the "
            "job token\n");
}

// A later job whose `needs` artifacts put the checkpoint in its project dir
// resumes from it without the API; a tampered copy is not used.
TEST_F(CkptCommandTest, ResumeUsesAVerifiedLocalCopyWithoutTheApi) {
  WriteCheckpoint(10);
  ASSERT_EQ(Save({.step = 10}), kCkptOk);
  WriteCheckpoint(20);
  ASSERT_EQ(Save({.step = 20}), kCkptOk);
  WriteTextFile(project_ + "/checkpoints/step-20/model.pt", "tampered");
  CkptEnv later = env_;
  later.erase("CI_JOB_TOKEN");
  later["GDT_CHECKPOINT_DIR"] = dir_.path() + "/elsewhere";
  std::ostringstream out, err;
  ASSERT_EQ(
      RunCkptResume(
          {.manifests = {project_ + "/checkpoints/step-20/manifest.json",
                         project_ + "/checkpoints/step-10/manifest.json"}},
          later, nullptr, out, err),
      kCkptOk);
  EXPECT_EQ(out.str(),
            "GDT_RESUME_FROM=" + dir_.path() + "/elsewhere/step-10\n");
  EXPECT_EQ(ReadTextFile(dir_.path() + "/elsewhere/step-10/model.pt"),
            std::string(64, 'w'));
  EXPECT_THAT(err.str(), HasSubstr("skipping checkpoint step 20 (job 21, "
                                   "artifacts): the copy in " +
                                   project_ +
                                   "/checkpoints/step-20 does not verify "
                                   "(file model.pt has 8 bytes, the manifest "
                                   "says 64) and no GitLab API to download "
                                   "it: CI_JOB_TOKEN is empty"));

  // Already where it belongs: used in place.
  std::ostringstream out2, err2;
  ASSERT_EQ(RunCkptResume({.manifests = {project_ +
                                         "/checkpoints/step-10/manifest.json"}},
                          env_, nullptr, out2, err2),
            kCkptOk);
  EXPECT_EQ(out2.str(),
            "GDT_RESUME_FROM=" + project_ + "/checkpoints/step-10\n");
  EXPECT_EQ(err2.str(), "");
}

// A manifest whose dir ends in "." named the checkpoint dir itself as the
// place to put it: resume removed that (every checkpoint in it) before
// moving the copy there, which then failed. Such a manifest is malformed
// now, skipped with a warning, and the checkpoints stay.
TEST_F(CkptCommandTest, AManifestNamingTheCheckpointDirItselfIsRefused) {
  WriteCheckpoint(10);
  ASSERT_EQ(Save({.step = 10}), kCkptOk);
  const std::string saved = project_ + "/checkpoints/step-10";
  std::filesystem::create_directories(project_ + "/x");
  std::filesystem::copy_file(saved + "/model.pt", project_ + "/x/model.pt");
  nlohmann::json manifest =
      nlohmann::json::parse(ReadTextFile(saved + "/manifest.json"));
  manifest["step"] = 20;
  manifest["dir"] = "x/.";
  const std::string planted = dir_.path() + "/planted.json";
  WriteTextFile(planted, manifest.dump());
  std::ostringstream out, err;
  ASSERT_EQ(RunCkptResume({.manifests = {planted, saved + "/manifest.json"}},
                          env_, nullptr, out, err),
            kCkptOk);
  EXPECT_THAT(err.str(), HasSubstr("field \"dir\" is missing or malformed"));
  EXPECT_EQ(out.str(), "GDT_RESUME_FROM=" + saved + "\n") << err.str();
  EXPECT_TRUE(std::filesystem::exists(saved + "/model.pt"));
}

// A retried epoch (job 22, another project dir) resumes from the
// coordinator's records without knowing job 21; a record whose files do not
// verify falls back to the one before it.
TEST_F(CkptCommandTest, ResumeWithoutJobIdsUsesTheCoordinatorsRecords) {
  for (int step : {10, 20}) {
    WriteCheckpoint(step);
    out_.str("");
    err_.str("");
    ASSERT_EQ(
        RunCkptSave({.step = step, .json = true}, env_, &registry_, out_, err_),
        kCkptOk)
        << err_.str();
    EXPECT_EQ(nlohmann::json::parse(out_.str())["recorded"], true);
  }
  ASSERT_EQ(registry_.records.size(), 2u);
  WriteTextFile(project_ + "/checkpoints/step-20/model.pt",
                std::string(64, 'X'));
  const std::string zip = dir_.path() + "/a.zip";
  ASSERT_TRUE(
      CreateZip(
          project_,
          {"checkpoints/step-10/model.pt", "checkpoints/step-10/manifest.json",
           "checkpoints/step-20/model.pt", "checkpoints/step-20/manifest.json"},
          zip)
          .ok());
  fake_->SetArtifacts(21, ReadTextFile(zip));

  CkptEnv retry = env_;
  retry["CI_JOB_TOKEN"] = "tok-22";
  retry["CI_JOB_ID"] = "22";
  retry["CI_PROJECT_DIR"] = dir_.path() + "/p22";
  retry["GDT_CHECKPOINT_DIR"] = dir_.path() + "/p22/checkpoints";
  std::ostringstream out, err;
  ASSERT_EQ(RunCkptResume({}, retry, &registry_, out, err), kCkptOk);
  EXPECT_EQ(out.str(),
            "GDT_RESUME_FROM=" + dir_.path() + "/p22/checkpoints/step-10\n");
  EXPECT_EQ(ReadTextFile(dir_.path() + "/p22/checkpoints/step-10/model.pt"),
            std::string(64, 'w'));
  EXPECT_THAT(err.str(), HasSubstr("warning: skipping checkpoint step 20 (job "
                                   "21, artifacts): file model.pt: SHA-256 "
                                   "mismatch"));
  EXPECT_THAT(err.str(),
              HasSubstr("resuming from step 10 (job 21, artifacts)"));
}

// A gang that records too fast is refused with a retry hint: save waits as
// told and records the step; training goes on either way.
TEST_F(CkptCommandTest, SaveWaitsOutAPaceRefusalAndRecords) {
  WriteCheckpoint(10);
  registry_.paced = 3;
  registry_.pace_hint = std::chrono::milliseconds(100);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(RunCkptSave({.step = 10}, env_, &registry_, out_, err_), kCkptOk);
  EXPECT_GE(std::chrono::steady_clock::now() - start,
            std::chrono::milliseconds(300));
  EXPECT_EQ(registry_.record_calls, 4);
  EXPECT_EQ(registry_.records.size(), 1u);
  EXPECT_EQ(err_.str(),
            "gdt-ckpt save: the coordinator asks to record step 10 later (the "
            "gang records checkpoints too fast); retrying for up to 30 s\n");
}

// Beyond the bound save stops waiting and warns as for any other refusal.
TEST_F(CkptCommandTest, SaveGivesUpOnPaceRefusalsAfterItsBound) {
  WriteCheckpoint(10);
  registry_.paced = 1000;
  registry_.pace_hint = std::chrono::milliseconds(100);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(RunCkptSave({.step = 10, .record_wait = std::chrono::seconds(1)},
                        env_, &registry_, out_, err_),
            kCkptOk);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(registry_.record_calls, 11);
  EXPECT_TRUE(registry_.records.empty());
  EXPECT_THAT(err_.str(), HasSubstr("retrying for up to 1 s\n"));
  EXPECT_THAT(err_.str(),
              HasSubstr("gdt-ckpt save: warning: step 10 is not recorded with "
                        "the coordinator (a retry finds it only through the "
                        "artifacts): gang g records checkpoints faster"));
}

// Records that are missing from the coordinator (e.g. the record failed) are
// found in the artifacts of the jobs the other records name.
TEST_F(CkptCommandTest, ResumeFallsBackToTheRecordedJobsArtifacts) {
  WriteCheckpoint(10);
  ASSERT_EQ(RunCkptSave({.step = 10}, env_, &registry_, out_, err_), kCkptOk);
  WriteCheckpoint(20);
  registry_.refusal = absl::UnavailableError("coordinator c:1 unavailable");
  out_.str("");
  err_.str("");
  ASSERT_EQ(RunCkptSave({.step = 20}, env_, &registry_, out_, err_), kCkptOk);
  EXPECT_EQ(err_.str(),
            "gdt-ckpt save: warning: step 20 is not recorded with the "
            "coordinator (a retry finds it only through the artifacts): "
            "coordinator c:1 unavailable\n");
  registry_.refusal = absl::OkStatus();
  // The recorded step 10 is gone from the artifacts; step 20 is there.
  const std::string zip = dir_.path() + "/a.zip";
  ASSERT_TRUE(CreateZip(project_,
                        {"checkpoints/step-20/model.pt",
                         "checkpoints/step-20/manifest.json"},
                        zip)
                  .ok());
  fake_->SetArtifacts(21, ReadTextFile(zip));
  CkptEnv retry = env_;
  retry["CI_JOB_TOKEN"] = "tok-22";
  retry["CI_PROJECT_DIR"] = dir_.path() + "/p22";
  retry["GDT_CHECKPOINT_DIR"] = dir_.path() + "/p22/checkpoints";
  std::ostringstream out, err;
  ASSERT_EQ(RunCkptResume({}, retry, &registry_, out, err), kCkptOk);
  EXPECT_EQ(out.str(),
            "GDT_RESUME_FROM=" + dir_.path() + "/p22/checkpoints/step-20\n");
  EXPECT_THAT(err.str(), HasSubstr("skipping checkpoint step 10 (job 21"));
}

TEST_F(CkptCommandTest, ResumeWithUnreachableRecordsStartsFresh) {
  registry_.refusal = absl::PermissionDeniedError("wrong gang token");
  std::ostringstream out, err;
  ASSERT_EQ(RunCkptResume({}, env_, &registry_, out, err), kCkptOk);
  EXPECT_EQ(out.str(), "GDT_RESUME_FROM=\n");
  EXPECT_EQ(err.str(),
            "gdt-ckpt resume: warning: no checkpoint records: wrong gang "
            "token\ngdt-ckpt resume: no usable checkpoint; starting fresh\n");
}

// In a retried gang the records may hold the work of the attempt that
// died: a coordinator that is briefly away is waited for, and one that stays
// away fails the resume (and the script that evals it) instead of a fresh
// start.
TEST_F(CkptCommandTest, ARetriedGangWaitsForTheRecordsAndNeverStartsFresh) {
  WriteCheckpoint(10);
  ASSERT_EQ(RunCkptSave({.step = 10}, env_, &registry_, out_, err_), kCkptOk);
  CkptEnv retry = env_;
  retry["GDT_EPOCH"] = "2";
  registry_.outages = 2;
  std::ostringstream out, err;
  ASSERT_EQ(RunCkptResume({.wait = std::chrono::seconds(30)}, retry, &registry_,
                          out, err),
            kCkptOk)
      << err.str();
  EXPECT_EQ(registry_.lists, 3);
  EXPECT_THAT(out.str(), HasSubstr("/checkpoints/step-10\n"));
  EXPECT_THAT(err.str(),
              HasSubstr("gdt-ckpt resume: waiting for the coordinator's "
                        "checkpoint records (coordinator 127.0.0.1:1 "
                        "unavailable); "));

  registry_.outages = 1000;
  out.str("");
  err.str("");
  ASSERT_EQ(RunCkptResume({.wait = std::chrono::seconds(0)}, retry, &registry_,
                          out, err),
            kCkptUnavailable);
  EXPECT_EQ(out.str(), "GDT_RESUME_FROM= ; exit 3\n");
  EXPECT_THAT(err.str(), HasSubstr("stopping rather than starting fresh"));

  // In epoch 1 there is nothing to lose: the first answer counts.
  registry_.outages = 1000;
  out.str("");
  err.str("");
  ASSERT_EQ(RunCkptResume({.wait = std::chrono::seconds(30)}, env_, &registry_,
                          out, err),
            kCkptOk);
  EXPECT_EQ(out.str(), "GDT_RESUME_FROM=\n");
}

// A retried gang whose recorded checkpoint must be downloaded: a GitLab API
// that cannot be reached fails the resume (exit 3) after the wait, while a
// checkpoint that is gone (404) is skipped and the gang starts fresh.
TEST_F(CkptCommandTest,
       ARetriedGangFailsRatherThanStartFreshWhileGitLabIsDown) {
  WriteCheckpoint(10);
  ASSERT_EQ(RunCkptSave({.step = 10}, env_, &registry_, out_, err_), kCkptOk);
  fs::remove_all(project_ + "/checkpoints");  // Only in the artifacts now.
  CkptEnv retry = env_;
  retry["GDT_EPOCH"] = "2";
  retry["CI_API_V4_URL"] = "http://127.0.0.1:1/api/v4";  // Nothing listens.
  std::ostringstream out, err;
  ASSERT_EQ(RunCkptResume({.wait = std::chrono::seconds(1)}, retry, &registry_,
                          out, err),
            kCkptUnavailable);
  EXPECT_EQ(out.str(), "GDT_RESUME_FROM= ; exit 3\n");
  EXPECT_THAT(err.str(), HasSubstr("gdt-ckpt resume: the GitLab API cannot be "
                                   "reached to download the gang's recorded "
                                   "checkpoints ("));
  EXPECT_THAT(err.str(), HasSubstr("stopping rather than starting fresh"));
  EXPECT_THAT(err.str(), Not(HasSubstr("starting fresh\n")));

  // The API answers, but the job's artifacts are gone: nothing to wait for.
  out.str("");
  err.str("");
  ASSERT_EQ(RunCkptResume({.wait = std::chrono::seconds(30)}, env_, &registry_,
                          out, err),
            kCkptOk);
  EXPECT_EQ(out.str(), "GDT_RESUME_FROM=\n");
  EXPECT_THAT(err.str(), HasSubstr("no usable checkpoint; starting fresh"));
}

// A retried gang whose coordinator address is malformed cannot read the
// records, and says so instead of starting fresh.
TEST_F(CkptCommandTest, ARetriedGangWithoutItsRecordsDoesNotStartFresh) {
  CkptEnv retry = env_;
  retry["GDT_EPOCH"] = "2";
  std::ostringstream out, err;
  CkptResumeOptions options;
  options.no_registry_reason = "GDT_COORDINATOR=\"::1\": bad address";
  ASSERT_EQ(RunCkptResume(options, retry, nullptr, out, err), kCkptBadInput);
  EXPECT_EQ(out.str(), "GDT_RESUME_FROM= ; exit 2\n");
  EXPECT_EQ(err.str(),
            "gdt-ckpt resume: cannot read the gang's checkpoint records "
            "(GDT_COORDINATOR=\"::1\": bad address); a retried gang does not "
            "start fresh without them\n");
  // Epoch 1: nothing to lose.
  out.str("");
  err.str("");
  ASSERT_EQ(RunCkptResume(options, env_, nullptr, out, err), kCkptOk);
  EXPECT_EQ(out.str(), "GDT_RESUME_FROM=\n");
}

}  // namespace
}  // namespace gdt::ckpt
