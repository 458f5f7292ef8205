#include "gitlab/fake_gitlab_api.h"

#include <httplib.h>

#include "absl/strings/escaping.h"
#include "common/sha256.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace gdt::gitlab {
namespace {

using ::testing::HasSubstr;

class FakeGitLabApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FakeGitLabApi::Options options;
    options.max_artifact_bytes = 1000;
    options.max_package_file_bytes = 2000;
    auto api = FakeGitLabApi::Start(options);
    ASSERT_TRUE(api.ok()) << api.status();
    api_ = std::move(*api);
    api_->AddJob(
        {.id = 7, .token = "tok-7", .pipeline_id = 3, .project_id = 1});
    api_->AddJob(
        {.id = 8, .token = "tok-8", .pipeline_id = 3, .project_id = 1});
    api_->AddJob({.id = 9, .token = "tok-9", .project_id = 2});
    client_ = std::make_unique<httplib::Client>(api_->url());
    client_->set_connection_timeout(5);
    client_->set_read_timeout(10);
  }

  int Status(const httplib::Result& result) {
    return result ? result->status : -1;
  }

  std::unique_ptr<FakeGitLabApi> api_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(FakeGitLabApiTest, JobAcceptsJobTokenAndBearerOnly) {
  auto by_header = client_->Get("/api/v4/job", {{"JOB-TOKEN", "tok-7"}});
  ASSERT_EQ(Status(by_header), 200);
  const auto job = nlohmann::json::parse(by_header->body);
  EXPECT_EQ(job["id"], 7);
  EXPECT_EQ(job["status"], "running");
  EXPECT_EQ(job["pipeline"]["id"], 3);
  EXPECT_EQ(job["pipeline"]["project_id"], 1);
  EXPECT_EQ(
      Status(client_->Get("/api/v4/job", {{"Authorization", "Bearer tok-8"}})),
      200);
  EXPECT_EQ(Status(client_->Get("/api/v4/job", {{"JOB-TOKEN", "wrong"}})), 401);
  EXPECT_EQ(Status(client_->Get("/api/v4/job")), 401);
}

TEST_F(FakeGitLabApiTest, FinishedJobsTokenIsRejected) {
  api_->FinishJob(7);
  EXPECT_EQ(Status(client_->Get("/api/v4/job", {{"JOB-TOKEN", "tok-7"}})), 401);
}

TEST_F(FakeGitLabApiTest, ArtifactsDownloadRules) {
  api_->SetArtifacts(7, "zip-bytes");
  auto ok = client_->Get("/api/v4/jobs/7/artifacts", {{"JOB-TOKEN", "tok-8"}});
  ASSERT_EQ(Status(ok), 200);
  EXPECT_EQ(ok->body, "zip-bytes");
  EXPECT_EQ(Status(client_->Get("/api/v4/jobs/7/artifacts")), 401);
  // Another project's token, then a job without artifacts, then none at all.
  EXPECT_EQ(Status(client_->Get("/api/v4/jobs/7/artifacts",
                                {{"JOB-TOKEN", "tok-9"}})),
            403);
  EXPECT_EQ(Status(client_->Get("/api/v4/jobs/8/artifacts",
                                {{"JOB-TOKEN", "tok-7"}})),
            404);
  EXPECT_EQ(Status(client_->Get("/api/v4/jobs/99/artifacts",
                                {{"JOB-TOKEN", "tok-7"}})),
            404);
  api_->ForbidArtifacts(7);
  EXPECT_EQ(Status(client_->Get("/api/v4/jobs/7/artifacts",
                                {{"JOB-TOKEN", "tok-8"}})),
            403);
}

TEST_F(FakeGitLabApiTest, ArtifactsRedirectToStorage) {
  api_.reset();
  FakeGitLabApi::Options options;
  options.redirect_artifacts = true;
  auto api = FakeGitLabApi::Start(options);
  ASSERT_TRUE(api.ok()) << api.status();
  api_ = std::move(*api);
  api_->AddJob({.id = 7, .token = "tok-7"});
  api_->SetArtifacts(7, "zip-bytes");
  httplib::Client client(api_->url());
  auto redirect =
      client.Get("/api/v4/jobs/7/artifacts", {{"JOB-TOKEN", "tok-7"}});
  ASSERT_EQ(Status(redirect), 302);
  EXPECT_EQ(redirect->get_header_value("Location"), "/_storage/artifacts/7");
  client.set_follow_location(true);
  auto followed =
      client.Get("/api/v4/jobs/7/artifacts", {{"JOB-TOKEN", "tok-7"}});
  ASSERT_EQ(Status(followed), 200);
  EXPECT_EQ(followed->body, "zip-bytes");
}

TEST_F(FakeGitLabApiTest, ArtifactsUploadOwnJobOnlyAndSizeLimit) {
  httplib::MultipartFormDataItems small = {
      {"file", std::string(1000, 'a'), "artifacts.zip", "application/zip"}};
  EXPECT_EQ(Status(client_->Post("/api/v4/jobs/7/artifacts?artifact_format=zip",
                                 {{"JOB-TOKEN", "tok-7"}}, small)),
            201);
  EXPECT_EQ(api_->Artifacts(7), std::string(1000, 'a'));
  EXPECT_EQ(Status(client_->Post("/api/v4/jobs/7/artifacts",
                                 {{"JOB-TOKEN", "tok-8"}}, small)),
            403);
  httplib::MultipartFormDataItems large = {
      {"file", std::string(1001, 'b'), "artifacts.zip", "application/zip"}};
  EXPECT_EQ(Status(client_->Post("/api/v4/jobs/8/artifacts",
                                 {{"JOB-TOKEN", "tok-8"}}, large)),
            413);
  EXPECT_FALSE(api_->Artifacts(8).has_value());
}

TEST_F(FakeGitLabApiTest, PackagePutAndGetWithChecksum) {
  const std::string path =
      "/api/v4/projects/1/packages/generic/ckpt/step-10/model.pt";
  EXPECT_EQ(Status(client_->Put(path, {{"JOB-TOKEN", "tok-7"}}, "weights",
                                "application/octet-stream")),
            201);
  auto got = client_->Get(path, {{"JOB-TOKEN", "tok-8"}});
  ASSERT_EQ(Status(got), 200);
  EXPECT_EQ(got->body, "weights");
  EXPECT_EQ(got->get_header_value("X-Checksum-SHA256"), Sha256Hex("weights"));
  // Basic gitlab-ci-token:<token> is accepted too.
  const std::string basic =
      "Basic " + absl::Base64Escape("gitlab-ci-token:tok-8");
  EXPECT_EQ(Status(client_->Get(path, {{"Authorization", basic}})), 200);
  EXPECT_EQ(Status(client_->Get(path)), 401);
  EXPECT_EQ(Status(client_->Get(path, {{"JOB-TOKEN", "tok-9"}})), 403);
  EXPECT_EQ(Status(client_->Get(
                "/api/v4/projects/1/packages/generic/ckpt/step-10/other.pt",
                {{"JOB-TOKEN", "tok-7"}})),
            404);
}

TEST_F(FakeGitLabApiTest, PackageSizeCapAnswers413) {
  const std::string path = "/api/v4/projects/1/packages/generic/ckpt/1/big.bin";
  EXPECT_EQ(
      Status(client_->Put(path, {{"JOB-TOKEN", "tok-7"}},
                          std::string(2001, 'x'), "application/octet-stream")),
      413);
  EXPECT_FALSE(api_->PackageFile(1, "ckpt", "1", "big.bin").has_value());
}

TEST_F(FakeGitLabApiTest, PackageNameRules) {
  auto put = [&](const std::string& file) {
    return Status(client_->Put(
        "/api/v4/projects/1/packages/generic/ckpt/1/" + file,
        {{"JOB-TOKEN", "tok-7"}}, "x", "application/octet-stream"));
  };
  EXPECT_EQ(put("rank-0+2Fmodel_1.2+a~b@c.pt"), 201);
  EXPECT_EQ(put("rank-0/model.pt"), 400);
  EXPECT_EQ(put("~model.pt"), 400);
  EXPECT_EQ(put("model.pt@"), 400);
  EXPECT_EQ(put("model%20x.pt"), 400);
  EXPECT_FALSE(FakeGitLabApi::ValidPackageFileName("a/b.pt"));
  EXPECT_FALSE(FakeGitLabApi::ValidPackageFileName(""));
  EXPECT_FALSE(FakeGitLabApi::ValidPackageFileName("a b"));
  EXPECT_FALSE(FakeGitLabApi::ValidPackageFileName("a/../b"));
  EXPECT_TRUE(FakeGitLabApi::ValidPackageNameOrVersion("1.0.0-rc+1"));
  EXPECT_FALSE(FakeGitLabApi::ValidPackageNameOrVersion("a/b"));
}

TEST_F(FakeGitLabApiTest, CountsRequestsByPath) {
  client_->Get("/api/v4/job", {{"JOB-TOKEN", "tok-7"}});
  client_->Get("/api/v4/jobs/7/artifacts", {{"JOB-TOKEN", "tok-7"}});
  EXPECT_EQ(api_->RequestCount("/api/v4/job"), 2);
  EXPECT_EQ(api_->RequestCount("/api/v4/jobs/"), 1);
}

}  // namespace
}  // namespace gdt::gitlab
