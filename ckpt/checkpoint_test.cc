#include "ckpt/checkpoint.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/sha256.h"
#include "common/zip_archive.h"
#include "gitlab/curl_gitlab_api.h"
#include "gitlab/fake_gitlab_api.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/temp_dir.h"

namespace gdt::ckpt {
namespace {

using test::ReadTextFile;
using test::TempDir;
using test::WriteTextFile;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;
namespace fs = std::filesystem;

// Incompressible bytes (zips do not shrink them), fixed per seed.
std::string Noise(size_t n, uint32_t seed) {
  std::string out(n, '\0');
  for (char& c : out) {
    seed = seed * 1664525u + 1013904223u;
    c = static_cast<char>(seed >> 24);
  }
  return out;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    gitlab::FakeGitLabApi::Options options;
    options.max_artifact_bytes = 4096;
    options.max_package_file_bytes = 1 << 20;
    auto fake = gitlab::FakeGitLabApi::Start(options);
    ASSERT_TRUE(fake.ok()) << fake.status();
    fake_ = std::move(*fake);
    // Two attempts of the same job: 11 wrote checkpoints, 12 resumes.
    fake_->AddJob({.id = 11, .token = "tok-11", .project_id = 4});
    fake_->AddJob({.id = 12, .token = "tok-12", .project_id = 4});
    auto api = gitlab::CurlGitLabApi::Create(fake_->api_url(), "tok-12");
    ASSERT_TRUE(api.ok()) << api.status();
    api_ = std::move(*api);
    project_ = dir_.path() + "/project";
    dest_ = dir_.path() + "/resume/checkpoints";
    fs::create_directories(dest_);
  }

  // Writes checkpoints/step-<step>/{model.pt,optim.pt} and its manifest in
  // the writing job's project dir.
  CheckpointManifest Write(int64_t step,
                           const std::string& store = kStoreArtifacts,
                           size_t model_bytes = 300) {
    const std::string rel = "checkpoints/step-" + std::to_string(step);
    const std::string dir = project_ + "/" + rel;
    fs::create_directories(dir);
    WriteTextFile(dir + "/model.pt",
                  Noise(model_bytes, static_cast<uint32_t>(step)));
    WriteTextFile(dir + "/optim.pt", "optimizer " + std::to_string(step));
    CheckpointManifest info;
    info.step = step;
    info.world_size = 2;
    info.job_id = 11;
    info.project_id = 4;
    info.store = store;
    info.dir = rel;
    if (store == kStorePackages) {
      info.package_name = "gdt-checkpoints";
      info.package_version = "train-11-step-" + std::to_string(step);
    }
    auto manifest = BuildManifest(dir, info);
    EXPECT_TRUE(manifest.ok()) << manifest.status();
    WriteTextFile(dir + "/manifest.json", ManifestToJson(*manifest));
    return *manifest;
  }

  // Job 11's artifacts: every checkpoints/step-*/ file, as the runner zips.
  void UploadArtifacts() {
    std::vector<std::string> files;
    for (const auto& entry : fs::recursive_directory_iterator(project_)) {
      if (entry.is_regular_file()) {
        files.push_back(fs::relative(entry.path(), project_).generic_string());
      }
    }
    const std::string zip = dir_.path() + "/artifacts.zip";
    ASSERT_TRUE(CreateZip(project_, files, zip).ok());
    fake_->SetArtifacts(11, ReadTextFile(zip));
  }

  TempDir dir_;
  std::string project_;
  std::string dest_;
  std::unique_ptr<gitlab::FakeGitLabApi> fake_;
  std::unique_ptr<gitlab::CurlGitLabApi> api_;
};

TEST_F(CheckpointTest, ManifestRoundTripsAndNamesFiles) {
  const CheckpointManifest m = Write(10);
  ASSERT_THAT(m.files, SizeIs(2));
  EXPECT_EQ(m.files[0].path, "model.pt");
  EXPECT_EQ(m.files[0].size, 300u);
  EXPECT_EQ(m.files[0].sha256, Sha256Hex(Noise(300, 10)));
  auto parsed = ParseManifest(ManifestToJson(m));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->step, 10);
  EXPECT_EQ(parsed->world_size, 2);
  EXPECT_EQ(parsed->job_id, 11);
  EXPECT_EQ(parsed->dir, "checkpoints/step-10");
  EXPECT_EQ(parsed->files[1].path, "optim.pt");
}

TEST_F(CheckpointTest, MalformedManifestsNameTheField) {
  EXPECT_THAT(ParseManifest("[]").status().message(),
              HasSubstr("not a JSON object"));
  EXPECT_THAT(
      ParseManifest(R"({"world_size":1,"job_id":1})").status().message(),
      HasSubstr("\"step\""));
  const std::string unsafe =
      R"({"step":1,"world_size":1,"job_id":1,"store":"artifacts","dir":"../x","files":[]})";
  EXPECT_THAT(ParseManifest(unsafe).status().message(), HasSubstr("\"dir\""));
  // A package name or version that would leave its segment of the API
  // path (the download goes to <api>/projects/P/packages/generic/N/V/F
  // with the job token).
  for (const char* package :
       {R"({"name":"../../../../jobs/7/artifacts?","version":"1"})",
        R"({"name":"gdt-checkpoints","version":".."})",
        R"({"name":"gdt-checkpoints","version":"1%2F..%2F.."})",
        R"({"name":"gdt-checkpoints","version":"1#"})",
        R"({"name":"","version":"1"})"}) {
    const std::string text = absl::StrCat(
        R"({"step":1,"world_size":1,"job_id":1,"store":"packages","dir":"c",)",
        R"("package":)", package,
        R"(,"files":[{"path":"m","size":1,"sha256":")", std::string(64, 'a'),
        R"("}]})");
    EXPECT_THAT(ParseManifest(text).status().message(),
                HasSubstr("\"package\""))
        << package;
  }
  const std::string store =
      R"({"step":1,"world_size":1,"job_id":1,"store":"s3","dir":"c","files":[]})";
  EXPECT_THAT(ParseManifest(store).status().message(),
              HasSubstr("unknown store"));
}

// Found by gdt_checkpoint_manifest_fuzzer: a wrongly typed
// optional field threw out of ParseManifest (std::terminate) and a huge
// float rank was an undefined conversion. Each is now one error line.
TEST_F(CheckpointTest, WronglyTypedOptionalFieldsAreErrorsNotCrashes) {
  EXPECT_THAT(
      ParseManifest(R"({"step":5,"world_size":1,"job_id":1,"project_id":[]})")
          .status()
          .message(),
      HasSubstr("\"project_id\""));
  EXPECT_THAT(
      ParseManifest(R"({"step":5,"world_size":1,"job_id":1,"rank":"0"})")
          .status()
          .message(),
      HasSubstr("\"rank\""));
  EXPECT_THAT(
      ParseManifest(R"({"step":5,"world_size":1,"job_id":1,"rank":1e300})")
          .status()
          .message(),
      HasSubstr("\"rank\""));
  EXPECT_THAT(ParseManifest(R"({"step":5,"world_size":1,"job_id":1,"rank":-1})")
                  .status()
                  .message(),
              HasSubstr("\"rank\""));
}

TEST_F(CheckpointTest, ResumesNewestFromArtifacts) {
  const CheckpointManifest m10 = Write(10);
  const CheckpointManifest m20 = Write(20);
  UploadArtifacts();
  std::vector<std::string> warnings;
  auto resumed = Resume(*api_, {m10, m20}, dest_, warnings);
  ASSERT_TRUE(resumed.has_value());
  EXPECT_THAT(warnings, IsEmpty());
  EXPECT_EQ(resumed->manifest.step, 20);
  EXPECT_EQ(resumed->path, dest_ + "/step-20");
  EXPECT_EQ(ReadTextFile(dest_ + "/step-20/optim.pt"), "optimizer 20");
  EXPECT_FALSE(fs::exists(dest_ + "/.gdt-resume"));
}

TEST_F(CheckpointTest, FindsManifestsInAJobsArtifacts) {
  Write(10);
  Write(20);
  fs::create_directories(project_ + "/checkpoints/step-30");
  WriteTextFile(project_ + "/checkpoints/step-30/manifest.json",
                R"({"step": -3, "world_size": 2, "job_id": 11})");
  // A manifest above the bound is not read whole, however it ends (a zip
  // of few bytes can hold gigabytes of blanks).
  Write(40);
  const std::string big = project_ + "/checkpoints/step-40/manifest.json";
  WriteTextFile(big, std::string(kMaxManifestBytes, ' ') + ReadTextFile(big));
  UploadArtifacts();
  std::vector<std::string> warnings;
  auto found =
      ManifestsInArtifacts(*api_, 11, dir_.path() + "/scratch", warnings);
  ASSERT_TRUE(found.ok()) << found.status();
  ASSERT_THAT(*found, SizeIs(2));
  ASSERT_THAT(warnings, SizeIs(2));
  std::sort(warnings.begin(), warnings.end());
  EXPECT_EQ(warnings[0],
            "skipping checkpoints/step-30/manifest.json in job 11's "
            "artifacts: manifest: field \"step\" is missing or malformed");
  EXPECT_THAT(warnings[1],
              HasSubstr("step-40/manifest.json: it is larger than 1 MiB"));
  // Only the manifests were extracted, not the checkpoints' files.
  EXPECT_TRUE(fs::exists(
      dir_.path() + "/scratch/extracted/checkpoints/step-10/manifest.json"));
  EXPECT_FALSE(fs::exists(dir_.path() +
                          "/scratch/extracted/checkpoints/step-10/model.pt"));
}

TEST_F(CheckpointTest, WrongHashIsSkippedForThePreviousOne) {
  const CheckpointManifest m10 = Write(10);
  CheckpointManifest m20 = Write(20);
  UploadArtifacts();
  m20.files[0].sha256 = std::string(64, '0');
  std::vector<std::string> warnings;
  auto resumed = Resume(*api_, {m10, m20}, dest_, warnings);
  ASSERT_TRUE(resumed.has_value());
  EXPECT_EQ(resumed->manifest.step, 10);
  ASSERT_THAT(warnings, SizeIs(1));
  EXPECT_THAT(warnings[0],
              HasSubstr("skipping checkpoint step 20 (job 11, artifacts)"));
  EXPECT_THAT(warnings[0], HasSubstr("model.pt: SHA-256 mismatch"));
  EXPECT_FALSE(fs::exists(dest_ + "/step-20"));
}

// Resume extracts the checkpoint's own directory, and only as many bytes
// as its manifest lists: step 20's model.pt grew to 64 MiB of zeros after
// its manifest (a zip of kilobytes) and is not written out, and neither is
// anything else of the job's artifacts.
TEST_F(CheckpointTest, AZipExpandingPastItsManifestIsNotExtracted) {
  const CheckpointManifest m10 = Write(10);
  const CheckpointManifest m20 = Write(20);
  WriteTextFile(project_ + "/checkpoints/step-20/model.pt",
                std::string(64 << 20, '\0'));
  UploadArtifacts();
  std::vector<std::string> warnings;
  auto resumed = Resume(*api_, {m10, m20}, dest_, warnings);
  ASSERT_TRUE(resumed.has_value());
  EXPECT_EQ(resumed->manifest.step, 10);
  ASSERT_THAT(warnings, SizeIs(1));
  EXPECT_THAT(warnings[0], HasSubstr("skipping checkpoint step 20 (job 11, "
                                     "artifacts): zip "));
  EXPECT_THAT(warnings[0], HasSubstr("its files expand to more than"));
  EXPECT_FALSE(fs::exists(dest_ + "/step-20"));
}

TEST_F(CheckpointTest, TruncatedZipMeansFreshStartWithWarning) {
  const CheckpointManifest m10 = Write(10);
  UploadArtifacts();
  std::string zip = *fake_->Artifacts(11);
  fake_->SetArtifacts(11, zip.substr(0, zip.size() / 2));
  std::vector<std::string> warnings;
  EXPECT_FALSE(Resume(*api_, {m10}, dest_, warnings).has_value());
  ASSERT_THAT(warnings, SizeIs(1));
  EXPECT_THAT(warnings[0], HasSubstr("zip"));
  EXPECT_FALSE(fs::exists(dest_ + "/step-10"));
}

TEST_F(CheckpointTest, RejectedTokenAndMissingArtifactsAreWarnings) {
  const CheckpointManifest m10 = Write(10);
  std::vector<std::string> warnings;
  // No artifacts stored: 404.
  EXPECT_FALSE(Resume(*api_, {m10}, dest_, warnings).has_value());
  ASSERT_THAT(warnings, SizeIs(1));
  EXPECT_THAT(warnings[0], HasSubstr("HTTP 404"));
  UploadArtifacts();
  fake_->FinishJob(12);  // The resuming job's token is no longer valid: 401.
  warnings.clear();
  EXPECT_FALSE(Resume(*api_, {m10}, dest_, warnings).has_value());
  ASSERT_THAT(warnings, SizeIs(1));
  EXPECT_THAT(warnings[0], HasSubstr("HTTP 401"));
}

TEST_F(CheckpointTest, LargeCheckpointGoesToPackagesAndResumesFromThere) {
  // Above the fake's 4 KiB artifact limit: the artifacts upload fails with
  // 413, the package registry takes it.
  const CheckpointManifest big = Write(30, kStorePackages, 10000);
  const std::string dir = project_ + "/checkpoints/step-30";
  const std::string zip = dir_.path() + "/big.zip";
  ASSERT_TRUE(CreateZip(dir, {"model.pt"}, zip).ok());
  auto writer = gitlab::CurlGitLabApi::Create(fake_->api_url(), "tok-11");
  ASSERT_TRUE(writer.ok());
  EXPECT_EQ((*writer)->UploadArtifacts(11, zip).code(),
            absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(UploadToPackages(**writer, dir, big).ok());
  EXPECT_TRUE(fake_
                  ->PackageFile(4, "gdt-checkpoints", "train-11-step-30",
                                "manifest.json")
                  .has_value());

  std::vector<std::string> warnings;
  auto resumed = Resume(*api_, {big}, dest_, warnings);
  ASSERT_TRUE(resumed.has_value()) << testing::PrintToString(warnings);
  EXPECT_EQ(resumed->manifest.step, 30);
  EXPECT_EQ(ReadTextFile(dest_ + "/step-30/model.pt"), Noise(10000, 30));
  EXPECT_TRUE(fs::exists(dest_ + "/step-30/manifest.json"));
}

TEST(PackageFileNameTest, FlattensPathsIntoNamesGitLabAccepts) {
  EXPECT_EQ(PackageFileName("model.pt"), "model.pt");
  EXPECT_EQ(PackageFileName("rank-0/shard_1.pt"), "rank-0+2Fshard_1.pt");
  EXPECT_EQ(PackageFileName("a+2Fb"), "a+2B2Fb");  // '+' itself is escaped.
  EXPECT_EQ(PackageFileName("a..b"), "a+2E.b");
  EXPECT_EQ(PackageFileName("x y~@"), "x+20y+7E+40");
  for (const std::string path :
       {"model.pt", "a/b/c.bin", "a+2Fb", "a..b", "~x@", "dir/.hidden"}) {
    EXPECT_TRUE(
        gitlab::FakeGitLabApi::ValidPackageFileName(PackageFileName(path)))
        << path;
  }
}

TEST_F(CheckpointTest, PackageUploadAboveTheCapIsOneClearError) {
  fake_.reset();
  gitlab::FakeGitLabApi::Options options;
  options.max_package_file_bytes = 1000;
  auto fake = gitlab::FakeGitLabApi::Start(options);
  ASSERT_TRUE(fake.ok());
  fake_ = std::move(*fake);
  fake_->AddJob({.id = 11, .token = "tok-11", .project_id = 4});
  const CheckpointManifest big = Write(30, kStorePackages, 10000);
  auto writer = gitlab::CurlGitLabApi::Create(fake_->api_url(), "tok-11");
  ASSERT_TRUE(writer.ok());
  const absl::Status status =
      UploadToPackages(**writer, project_ + "/checkpoints/step-30", big);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("HTTP 413"));
}

TEST_F(CheckpointTest, TamperedPackageFileIsSkipped) {
  const CheckpointManifest m10 = Write(10);
  const CheckpointManifest big = Write(30, kStorePackages, 2000);
  UploadArtifacts();
  auto writer = gitlab::CurlGitLabApi::Create(fake_->api_url(), "tok-11");
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE(
      UploadToPackages(**writer, project_ + "/checkpoints/step-30", big).ok());
  fake_->SetPackageFile(4, "gdt-checkpoints", "train-11-step-30", "model.pt",
                        "short");
  std::vector<std::string> warnings;
  auto resumed = Resume(*api_, {m10, big}, dest_, warnings);
  ASSERT_TRUE(resumed.has_value());
  EXPECT_EQ(resumed->manifest.step, 10);
  ASSERT_THAT(warnings, SizeIs(1));
  EXPECT_THAT(warnings[0], HasSubstr("step 30 (job 11, packages)"));
  EXPECT_THAT(warnings[0], HasSubstr("model.pt has 5 bytes"));
}

}  // namespace
}  // namespace gdt::ckpt
