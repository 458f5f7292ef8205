#include "gitlab/curl_gitlab_api.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/http_client.h"
#include "nlohmann/json.hpp"

namespace gdt::gitlab {
namespace {

// What the server said, from GitLab's {"message": ...} or the raw body.
std::string ServerMessage(const std::string& body) {
  const auto json = nlohmann::json::parse(body, nullptr, false);
  if (json.is_object() && json.contains("message") &&
      json["message"].is_string()) {
    return json["message"].get<std::string>();
  }
  return std::string(absl::StripAsciiWhitespace(body.substr(0, 200)));
}

absl::Status HttpError(const std::string& what, long code,
                       const std::string& body) {
  const std::string message = absl::StrCat(
      "GitLab API ", what, ": HTTP ", code,
      body.empty() ? "" : absl::StrCat(" (", ServerMessage(body), ")"));
  switch (code) {
    case 401:
      return absl::UnauthenticatedError(
          absl::StrCat(message, ": the job token was rejected"));
    case 403:
      return absl::PermissionDeniedError(message);
    case 404:
      return absl::NotFoundError(message);
    case 413:
      return absl::ResourceExhaustedError(
          absl::StrCat(message, ": above the instance's size limit"));
    default:
      return absl::UnavailableError(message);
  }
}

HttpOptions ToHttp(const CurlGitLabApi::Options& options) {
  HttpOptions http;
  http.ca_file = options.ca_file;
  http.timeout = options.timeout;
  // Artifacts and packages may be served from object storage.
  http.follow_redirects = true;
  return http;
}

// Sends `request` with the job token (when not empty) and turns every
// failure into one status naming the call: a transport failure as it is,
// an HTTP error by its code (HttpError).
absl::StatusOr<HttpResponse> Call(const CurlGitLabApi::Options& options,
                                  HttpRequest request,
                                  const std::string& token) {
  // A redirect to object storage must not carry the job token along.
  if (!token.empty()) {
    request.credential_headers.push_back("JOB-TOKEN: " + token);
  }
  HttpClient client(ToHttp(options));
  absl::StatusOr<HttpResponse> response = client.Send(request);
  if (!response.ok()) {
    if (response.status().code() == absl::StatusCode::kNotFound) {
      return response.status();  // A local file to send is missing.
    }
    return absl::Status(
        response.status().code(),
        absl::StrCat("GitLab API ", response.status().message()));
  }
  if (!response->ok()) {
    return HttpError(absl::StrCat(request.method, " ", request.url),
                     response->status, response->body);
  }
  return response;
}

absl::StatusOr<Download> Get(const CurlGitLabApi::Options& options,
                             const std::string& url, const std::string& token,
                             const std::string& dest) {
  absl::StatusOr<HttpResponse> response =
      Call(options, {.url = url, .download_to = dest}, token);
  if (!response.ok()) return response.status();
  return Download{response->downloaded_bytes, response->downloaded_sha256,
                  response->Header("x-checksum-sha256")};
}

}  // namespace

absl::StatusOr<std::unique_ptr<CurlGitLabApi>> CurlGitLabApi::Create(
    std::string api_url, std::string job_token) {
  return Create(std::move(api_url), std::move(job_token), Options());
}

absl::StatusOr<std::unique_ptr<CurlGitLabApi>> CurlGitLabApi::Create(
    std::string api_url, std::string job_token, Options options) {
  if (api_url.empty()) {
    return absl::FailedPreconditionError(
        "CI_API_V4_URL is empty: no GitLab API to talk to");
  }
  if (job_token.empty()) {
    return absl::FailedPreconditionError(
        "CI_JOB_TOKEN is empty: the GitLab API needs the job token");
  }
  while (absl::EndsWith(api_url, "/")) api_url.pop_back();
  return std::unique_ptr<CurlGitLabApi>(new CurlGitLabApi(
      std::move(api_url), std::move(job_token), std::move(options)));
}

absl::StatusOr<ApiJob> CurlGitLabApi::CurrentJob() {
  const std::string url = absl::StrCat(api_url_, "/job");
  absl::StatusOr<HttpResponse> response =
      Call(options_, {.url = url}, job_token_);
  if (!response.ok()) return response.status();
  const auto json = nlohmann::json::parse(response->body, nullptr, false);
  if (!json.is_object() || !json.contains("id") || !json["id"].is_number() ||
      !json.contains("pipeline") || !json["pipeline"].is_object()) {
    return absl::UnavailableError(
        absl::StrCat("GitLab API GET ", url, ": not a job object"));
  }
  ApiJob job;
  job.id = json["id"].get<int64_t>();
  job.name = json.value("name", "");
  job.ref = json.value("ref", "");
  job.pipeline_id = json["pipeline"].value("id", int64_t{0});
  job.project_id = json["pipeline"].value("project_id", int64_t{0});
  return job;
}

absl::StatusOr<std::string> CurlGetPublic(
    const std::string& url, const CurlGitLabApi::Options& options) {
  absl::StatusOr<HttpResponse> response = Call(options, {.url = url}, "");
  if (!response.ok()) return response.status();
  return std::move(response->body);
}

absl::StatusOr<Download> CurlGitLabApi::DownloadArtifacts(
    int64_t job_id, const std::string& dest) {
  return Get(options_, absl::StrCat(api_url_, "/jobs/", job_id, "/artifacts"),
             job_token_, dest);
}

absl::Status CurlGitLabApi::UploadArtifacts(int64_t job_id,
                                            const std::string& zip) {
  const std::string url =
      absl::StrCat(api_url_, "/jobs/", job_id,
                   "/artifacts?artifact_format=zip&artifact_type=archive");
  return Call(options_,
              {.method = "POST",
               .url = url,
               .form_file = zip,
               .form_field = "file"},
              job_token_)
      .status();
}

std::string CurlGitLabApi::PackageUrl(int64_t project_id,
                                      const std::string& name,
                                      const std::string& version,
                                      const std::string& file) const {
  return absl::StrCat(api_url_, "/projects/", project_id, "/packages/generic/",
                      name, "/", version, "/", file);
}

absl::Status CurlGitLabApi::UploadPackageFile(int64_t project_id,
                                              const std::string& name,
                                              const std::string& version,
                                              const std::string& file,
                                              const std::string& src) {
  return Call(options_,
              {.method = "PUT",
               .url = PackageUrl(project_id, name, version, file),
               .upload_file = src},
              job_token_)
      .status();
}

absl::StatusOr<Download> CurlGitLabApi::DownloadPackageFile(
    int64_t project_id, const std::string& name, const std::string& version,
    const std::string& file, const std::string& dest) {
  return Get(options_, PackageUrl(project_id, name, version, file), job_token_,
             dest);
}

}  // namespace gdt::gitlab
