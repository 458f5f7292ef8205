#include "gitlab/curl_gitlab_api.h"

#include "common/sha256.h"
#include "gitlab/fake_gitlab_api.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/temp_dir.h"

namespace gdt::gitlab {
namespace {

using test::ReadTextFile;
using test::TempDir;
using test::WriteTextFile;
using ::testing::HasSubstr;

class CurlGitLabApiTest : public ::testing::Test {
 protected:
  void Start(FakeGitLabApi::Options options) {
    auto fake = FakeGitLabApi::Start(options);
    ASSERT_TRUE(fake.ok()) << fake.status();
    fake_ = std::move(*fake);
    fake_->AddJob(
        {.id = 7, .token = "tok-7", .pipeline_id = 3, .project_id = 4});
    fake_->AddJob({.id = 9, .token = "tok-9", .project_id = 5});
    auto api = CurlGitLabApi::Create(fake_->api_url(), "tok-7");
    ASSERT_TRUE(api.ok()) << api.status();
    api_ = std::move(*api);
  }
  void SetUp() override {
    FakeGitLabApi::Options options;
    options.max_artifact_bytes = 100;
    options.max_package_file_bytes = 200;
    Start(options);
  }

  TempDir dir_;
  std::unique_ptr<FakeGitLabApi> fake_;
  std::unique_ptr<CurlGitLabApi> api_;
};

TEST_F(CurlGitLabApiTest, MissingTokenOrUrlIsOneClearError) {
  auto no_token = CurlGitLabApi::Create(fake_->api_url(), "");
  EXPECT_EQ(no_token.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(no_token.status().message(), HasSubstr("CI_JOB_TOKEN"));
  auto no_url = CurlGitLabApi::Create("", "tok");
  EXPECT_THAT(no_url.status().message(), HasSubstr("CI_API_V4_URL"));
}

TEST_F(CurlGitLabApiTest, CurrentJob) {
  auto job = api_->CurrentJob();
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->id, 7);
  EXPECT_EQ(job->pipeline_id, 3);
  EXPECT_EQ(job->project_id, 4);
  EXPECT_EQ(job->name, "train");
}

TEST_F(CurlGitLabApiTest, RejectedTokenIsUnauthenticated) {
  fake_->FinishJob(7);
  auto job = api_->CurrentJob();
  EXPECT_EQ(job.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(job.status().message(), HasSubstr("HTTP 401"));
  EXPECT_THAT(job.status().message(), HasSubstr("job token was rejected"));
}

TEST_F(CurlGitLabApiTest, ArtifactsRoundTripAndErrors) {
  WriteTextFile(dir_.path() + "/a.zip", "zipzip");
  ASSERT_TRUE(api_->UploadArtifacts(7, dir_.path() + "/a.zip").ok());
  EXPECT_EQ(fake_->Artifacts(7), "zipzip");
  auto got = api_->DownloadArtifacts(7, dir_.path() + "/b.zip");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(ReadTextFile(dir_.path() + "/b.zip"), "zipzip");
  EXPECT_EQ(got->bytes, 6u);
  EXPECT_EQ(got->sha256, Sha256Hex("zipzip"));

  auto missing = api_->DownloadArtifacts(8, dir_.path() + "/c.zip");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/c.zip"));
  fake_->SetArtifacts(9, "other project");
  EXPECT_EQ(api_->DownloadArtifacts(9, dir_.path() + "/d.zip").status().code(),
            absl::StatusCode::kPermissionDenied);

  WriteTextFile(dir_.path() + "/big.zip", std::string(101, 'z'));
  const absl::Status big = api_->UploadArtifacts(7, dir_.path() + "/big.zip");
  EXPECT_EQ(big.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(big.message(), HasSubstr("HTTP 413"));
}

TEST_F(CurlGitLabApiTest, ArtifactsFollowRedirect) {
  FakeGitLabApi::Options options;
  options.redirect_artifacts = true;
  Start(options);
  fake_->SetArtifacts(7, "stored");
  auto got = api_->DownloadArtifacts(7, dir_.path() + "/r.zip");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(ReadTextFile(dir_.path() + "/r.zip"), "stored");
  EXPECT_EQ(fake_->RequestCount("/_storage/artifacts/7"), 1);
}

TEST_F(CurlGitLabApiTest, PackageRoundTripWithServerChecksum) {
  WriteTextFile(dir_.path() + "/w.bin", "weights");
  ASSERT_TRUE(api_->UploadPackageFile(4, "ckpt", "7-10", "w.bin",
                                      dir_.path() + "/w.bin")
                  .ok());
  EXPECT_EQ(fake_->PackageFile(4, "ckpt", "7-10", "w.bin"), "weights");
  auto got = api_->DownloadPackageFile(4, "ckpt", "7-10", "w.bin",
                                       dir_.path() + "/x.bin");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->sha256, Sha256Hex("weights"));
  EXPECT_EQ(got->server_sha256, Sha256Hex("weights"));
  EXPECT_EQ(ReadTextFile(dir_.path() + "/x.bin"), "weights");
}

TEST_F(CurlGitLabApiTest, PackageErrors) {
  WriteTextFile(dir_.path() + "/big.bin", std::string(201, 'x'));
  EXPECT_EQ(api_->UploadPackageFile(4, "ckpt", "1", "big.bin",
                                    dir_.path() + "/big.bin")
                .code(),
            absl::StatusCode::kResourceExhausted);
  const absl::Status bad_name =
      api_->UploadPackageFile(4, "ckpt", "1", "~bad", dir_.path() + "/big.bin");
  EXPECT_EQ(bad_name.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(bad_name.message(), HasSubstr("HTTP 400"));
  EXPECT_THAT(bad_name.message(), HasSubstr("invalid package name"));
  EXPECT_EQ(
      api_->UploadPackageFile(4, "ckpt", "1", "a.bin", dir_.path() + "/nope")
          .code(),
      absl::StatusCode::kNotFound);
  EXPECT_EQ(api_->DownloadPackageFile(4, "ckpt", "1", "absent.bin",
                                      dir_.path() + "/y.bin")
                .status()
                .code(),
            absl::StatusCode::kNotFound);
}

TEST_F(CurlGitLabApiTest, UnreachableServerIsUnavailable) {
  const std::string url = fake_->api_url();
  fake_.reset();
  auto api = CurlGitLabApi::Create(url, "tok-7");
  ASSERT_TRUE(api.ok());
  auto job = (*api)->CurrentJob();
  EXPECT_EQ(job.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(job.status().message(), HasSubstr(url));
}

}  // namespace
}  // namespace gdt::gitlab
