#include "gitlab/curl_gitlab_api.h"

#include <curl/curl.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/sha256.h"
#include "nlohmann/json.hpp"

namespace gdt::gitlab {
namespace {

constexpr size_t kMaxErrorBody = 64 << 10;
constexpr size_t kMaxJsonBody = 4 << 20;

// One transfer: where the body goes and what was seen.
struct Transfer {
  CURL* curl = nullptr;
  std::string dest;     // Body of a 2xx answer goes here when not empty.
  FILE* out = nullptr;  // Opened on the first 2xx body byte.
  bool write_failed = false;
  std::string body;  // Body of other answers (and 2xx without dest).
  Sha256 hash;
  uint64_t bytes = 0;
  std::string server_sha256;
};

long ResponseCode(CURL* curl) {
  long code = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
  return code;
}

size_t OnBody(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t length = size * n;
  const long code = ResponseCode(t->curl);
  if (code >= 200 && code < 300 && !t->dest.empty()) {
    if (t->out == nullptr) {
      t->out = std::fopen(t->dest.c_str(), "wb");
      if (t->out == nullptr) {
        t->write_failed = true;
        return 0;
      }
    }
    if (std::fwrite(data, 1, length, t->out) != length) {
      t->write_failed = true;
      return 0;
    }
    t->hash.Update(std::string_view(data, length));
    t->bytes += length;
    return length;
  }
  // JSON answers (2xx without dest) are kept whole up to kMaxJsonBody; error
  // bodies only serve the message.
  if (code >= 200 && code < 300) {
    if (t->body.size() + length > kMaxJsonBody) return 0;  // Not GitLab's.
    t->body.append(data, length);
  } else if (t->body.size() < kMaxErrorBody) {
    t->body.append(data, std::min(length, kMaxErrorBody - t->body.size()));
  }
  return length;
}

size_t OnHeader(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  absl::string_view line(data, size * n);
  if (absl::StartsWithIgnoreCase(line, "HTTP/")) t->server_sha256.clear();
  constexpr absl::string_view kChecksum = "x-checksum-sha256:";
  if (absl::StartsWithIgnoreCase(line, kChecksum)) {
    line.remove_prefix(kChecksum.size());
    t->server_sha256 = std::string(absl::StripAsciiWhitespace(line));
  }
  return size * n;
}

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

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

// Runs the prepared transfer; `what` names the call in errors ("GET <url>").
absl::Status Perform(Transfer& t, const std::string& what,
                     const std::string& token) {
  struct curl_slist* headers = nullptr;
  if (!token.empty()) {
    headers =
        curl_slist_append(headers, absl::StrCat("JOB-TOKEN: ", token).c_str());
  }
  curl_easy_setopt(t.curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(t.curl, CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(t.curl, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(t.curl, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(t.curl, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(t.curl, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(t.curl, CURLOPT_MAXREDIRS, 5L);
  // A presigned redirect target must not receive the job token.
  curl_easy_setopt(t.curl, CURLOPT_UNRESTRICTED_AUTH, 0L);
  curl_easy_setopt(t.curl, CURLOPT_CONNECTTIMEOUT, 30L);
  curl_easy_setopt(t.curl, CURLOPT_NOSIGNAL, 1L);
  char error[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(t.curl, CURLOPT_ERRORBUFFER, error);
  const CURLcode rc = curl_easy_perform(t.curl);
  curl_slist_free_all(headers);
  const long code = ResponseCode(t.curl);
  bool close_failed = false;
  if (t.out != nullptr) close_failed = std::fclose(t.out) != 0;
  t.out = nullptr;
  if (t.write_failed || close_failed) {
    return absl::UnavailableError(absl::StrCat("GitLab API ", what,
                                               ": cannot write ", t.dest, ": ",
                                               std::strerror(errno)));
  }
  if (rc != CURLE_OK) {
    return absl::UnavailableError(absl::StrCat(
        "GitLab API ", what, ": ", error[0] ? error : curl_easy_strerror(rc)));
  }
  if (code < 200 || code >= 300) return HttpError(what, code, t.body);
  if (!t.dest.empty() && t.bytes == 0) {
    // An empty 2xx body: still leave the (empty) file.
    FILE* f = std::fopen(t.dest.c_str(), "wb");
    if (f == nullptr) {
      return absl::UnavailableError(
          absl::StrCat("GitLab API ", what, ": cannot write ", t.dest));
    }
    std::fclose(f);
  }
  return absl::OkStatus();
}

class Easy {
 public:
  Easy() : curl_(curl_easy_init()) {}
  ~Easy() { curl_easy_cleanup(curl_); }
  Easy(const Easy&) = delete;
  Easy& operator=(const Easy&) = delete;
  CURL* get() const { return curl_; }

 private:
  CURL* curl_;
};

absl::StatusOr<Download> Get(const std::string& url, const std::string& token,
                             const std::string& dest) {
  Easy easy;
  Transfer t;
  t.curl = easy.get();
  t.dest = dest;
  curl_easy_setopt(t.curl, CURLOPT_URL, url.c_str());
  absl::Status status = Perform(t, absl::StrCat("GET ", url), token);
  if (!status.ok()) {
    std::remove(dest.c_str());
    return status;
  }
  return Download{t.bytes, t.hash.FinishHex(), t.server_sha256};
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
  GlobalInit();
  while (absl::EndsWith(api_url, "/")) api_url.pop_back();
  return std::unique_ptr<CurlGitLabApi>(new CurlGitLabApi(
      std::move(api_url), std::move(job_token), std::move(options)));
}

absl::StatusOr<ApiJob> CurlGitLabApi::CurrentJob() {
  Easy easy;
  Transfer t;
  t.curl = easy.get();
  const std::string url = absl::StrCat(api_url_, "/job");
  curl_easy_setopt(t.curl, CURLOPT_URL, url.c_str());
  if (!options_.ca_file.empty()) {
    curl_easy_setopt(t.curl, CURLOPT_CAINFO, options_.ca_file.c_str());
  }
  if (options_.timeout.count() > 0) {
    curl_easy_setopt(t.curl, CURLOPT_TIMEOUT_MS,
                     static_cast<long>(options_.timeout.count()));
  }
  absl::Status status = Perform(t, absl::StrCat("GET ", url), job_token_);
  if (!status.ok()) return status;
  const auto json = nlohmann::json::parse(t.body, nullptr, false);
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
  GlobalInit();
  Easy easy;
  Transfer t;
  t.curl = easy.get();
  curl_easy_setopt(t.curl, CURLOPT_URL, url.c_str());
  if (!options.ca_file.empty()) {
    curl_easy_setopt(t.curl, CURLOPT_CAINFO, options.ca_file.c_str());
  }
  if (options.timeout.count() > 0) {
    curl_easy_setopt(t.curl, CURLOPT_TIMEOUT_MS,
                     static_cast<long>(options.timeout.count()));
  }
  absl::Status status = Perform(t, absl::StrCat("GET ", url), "");
  if (!status.ok()) return status;
  return std::move(t.body);
}

absl::StatusOr<Download> CurlGitLabApi::DownloadArtifacts(
    int64_t job_id, const std::string& dest) {
  return Get(absl::StrCat(api_url_, "/jobs/", job_id, "/artifacts"), job_token_,
             dest);
}

absl::Status CurlGitLabApi::UploadArtifacts(int64_t job_id,
                                            const std::string& zip) {
  Easy easy;
  Transfer t;
  t.curl = easy.get();
  const std::string url =
      absl::StrCat(api_url_, "/jobs/", job_id,
                   "/artifacts?artifact_format=zip&artifact_type=archive");
  curl_easy_setopt(t.curl, CURLOPT_URL, url.c_str());
  curl_mime* mime = curl_mime_init(t.curl);
  curl_mimepart* part = curl_mime_addpart(mime);
  curl_mime_name(part, "file");
  if (curl_mime_filedata(part, zip.c_str()) != CURLE_OK) {
    curl_mime_free(mime);
    return absl::NotFoundError(absl::StrCat("cannot read ", zip));
  }
  curl_easy_setopt(t.curl, CURLOPT_MIMEPOST, mime);
  absl::Status status = Perform(t, absl::StrCat("POST ", url), job_token_);
  curl_mime_free(mime);
  return status;
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
  FILE* in = std::fopen(src.c_str(), "rb");
  if (in == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("cannot read ", src, ": ", std::strerror(errno)));
  }
  std::fseek(in, 0, SEEK_END);
  const long size = std::ftell(in);
  std::rewind(in);
  Easy easy;
  Transfer t;
  t.curl = easy.get();
  const std::string url = PackageUrl(project_id, name, version, file);
  curl_easy_setopt(t.curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(t.curl, CURLOPT_UPLOAD, 1L);
  curl_easy_setopt(t.curl, CURLOPT_READDATA, in);
  curl_easy_setopt(t.curl, CURLOPT_INFILESIZE_LARGE,
                   static_cast<curl_off_t>(size));
  absl::Status status = Perform(t, absl::StrCat("PUT ", url), job_token_);
  std::fclose(in);
  return status;
}

absl::StatusOr<Download> CurlGitLabApi::DownloadPackageFile(
    int64_t project_id, const std::string& name, const std::string& version,
    const std::string& file, const std::string& dest) {
  return Get(PackageUrl(project_id, name, version, file), job_token_, dest);
}

}  // namespace gdt::gitlab
