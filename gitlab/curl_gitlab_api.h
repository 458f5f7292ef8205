#ifndef GDT_GITLAB_CURL_GITLAB_API_H_
#define GDT_GITLAB_CURL_GITLAB_API_H_

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "gitlab/gitlab_api.h"

namespace gdt::gitlab {

// GitLabApi over the shared HTTP client (common/http_client.h). Sends the
// token as JOB-TOKEN; one request at a time per object.
class CurlGitLabApi : public GitLabApi {
 public:
  // Used by CurrentJob() (the coordinator's check of members' job tokens).
  struct Options {
    // PEM CA bundle for the server's certificate; empty: the system's CAs.
    std::string ca_file;
    // Limit on the whole request; 0: none (30 s to connect).
    std::chrono::milliseconds timeout{0};
  };
  // `api_url` is CI_API_V4_URL (e.g. https://gitlab.example.com/api/v4),
  // `job_token` CI_JOB_TOKEN. FailedPrecondition naming the variable when
  // either is empty.
  static absl::StatusOr<std::unique_ptr<CurlGitLabApi>> Create(
      std::string api_url, std::string job_token);
  static absl::StatusOr<std::unique_ptr<CurlGitLabApi>> Create(
      std::string api_url, std::string job_token, Options options);

  absl::StatusOr<ApiJob> CurrentJob() override;
  absl::StatusOr<Download> DownloadArtifacts(int64_t job_id,
                                             const std::string& dest) override;
  absl::Status UploadArtifacts(int64_t job_id, const std::string& zip) override;
  absl::Status UploadPackageFile(int64_t project_id, const std::string& name,
                                 const std::string& version,
                                 const std::string& file,
                                 const std::string& src) override;
  absl::StatusOr<Download> DownloadPackageFile(
      int64_t project_id, const std::string& name, const std::string& version,
      const std::string& file, const std::string& dest) override;

 private:
  CurlGitLabApi(std::string api_url, std::string job_token, Options options)
      : api_url_(std::move(api_url)),
        job_token_(std::move(job_token)),
        options_(std::move(options)) {}
  std::string PackageUrl(int64_t project_id, const std::string& name,
                         const std::string& version,
                         const std::string& file) const;

  const std::string api_url_;
  const std::string job_token_;
  const Options options_;
};

// GET `url` of the instance without credentials (e.g. its ID token keys at
// /oauth/discovery/keys) with `options`: the body of a 2xx answer (at most
// 4 MiB). Errors as the API calls', naming the URL (Unavailable when it
// cannot be reached or answers 5xx).
absl::StatusOr<std::string> CurlGetPublic(
    const std::string& url, const CurlGitLabApi::Options& options);

}  // namespace gdt::gitlab

#endif  // GDT_GITLAB_CURL_GITLAB_API_H_
