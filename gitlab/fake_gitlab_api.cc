#include "gitlab/fake_gitlab_api.h"

#include <httplib.h>

#include <chrono>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/sha256.h"
#include "nlohmann/json.hpp"

namespace gdt::gitlab {
namespace {

enum class AuthForm { kJobOnly, kPackages, kArtifacts };

// The token a request carries in one of the forms GitLab accepts for the
// endpoint (docs/gitlab-runner-protocol.md): JOB-TOKEN always; Bearer for
// /job; Basic gitlab-ci-token:<token> for packages; the job_token query
// parameter.
std::string RequestToken(const httplib::Request& request, AuthForm form) {
  if (request.has_header("JOB-TOKEN")) {
    return request.get_header_value("JOB-TOKEN");
  }
  if (request.has_param("job_token"))
    return request.get_param_value("job_token");
  const std::string auth = request.get_header_value("Authorization");
  if (form == AuthForm::kJobOnly && absl::StartsWith(auth, "Bearer ")) {
    return auth.substr(7);
  }
  if (form == AuthForm::kPackages && absl::StartsWith(auth, "Basic ")) {
    std::string decoded;
    if (absl::Base64Unescape(auth.substr(6), &decoded) &&
        absl::StartsWith(decoded, "gitlab-ci-token:")) {
      return decoded.substr(16);
    }
  }
  return "";
}

void Reply(httplib::Response& response, int status,
           const std::string& message) {
  response.status = status;
  response.set_content(nlohmann::json{{"message", message}}.dump(),
                       "application/json");
}

bool AllOf(const std::string& text, const char* extra) {
  for (const char c : text) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) &&
        std::string_view(extra).find(c) == std::string_view::npos) {
      return false;
    }
  }
  return true;
}

}  // namespace

bool FakeGitLabApi::ValidPackageFileName(const std::string& name) {
  if (name.empty() || !AllOf(name, "._-+~@")) return false;
  for (const char edge : {name.front(), name.back()}) {
    if (edge == '~' || edge == '@') return false;
  }
  return !absl::StrContains(name, "..");
}

bool FakeGitLabApi::ValidPackageNameOrVersion(const std::string& text) {
  return !text.empty() && AllOf(text, "._-+") && !absl::StrContains(text, "..");
}

FakeGitLabApi::FakeGitLabApi(Options options)
    : options_(options), server_(std::make_unique<httplib::Server>()) {}

absl::StatusOr<std::unique_ptr<FakeGitLabApi>> FakeGitLabApi::Start(
    Options options) {
  std::unique_ptr<FakeGitLabApi> api(new FakeGitLabApi(options));
  api->InstallRoutes();
  api->port_ = api->server_->bind_to_any_port("127.0.0.1");
  if (api->port_ <= 0) {
    return absl::UnavailableError("fake GitLab API: cannot bind 127.0.0.1");
  }
  // The socket listens from bind_to_any_port on: early clients queue.
  httplib::Server* server = api->server_.get();
  api->thread_ = std::thread([server] { server->listen_after_bind(); });
  // httplib's stop() is a no-op until the accept loop runs: wait for it, so
  // that destruction always ends the thread.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!server->is_running()) {
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::UnavailableError("fake GitLab API: server did not start");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return api;
}

FakeGitLabApi::~FakeGitLabApi() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

std::string FakeGitLabApi::url() const {
  return absl::StrCat("http://127.0.0.1:", port_);
}

void FakeGitLabApi::AddJob(const FakeJob& job) {
  MutexLock lock(mu_);
  jobs_[job.id] = job;
}

void FakeGitLabApi::FinishJob(int64_t job_id) {
  MutexLock lock(mu_);
  if (auto it = jobs_.find(job_id); it != jobs_.end())
    it->second.running = false;
}

void FakeGitLabApi::SetArtifacts(int64_t job_id, std::string zip) {
  MutexLock lock(mu_);
  artifacts_[job_id] = std::move(zip);
}

std::optional<std::string> FakeGitLabApi::Artifacts(int64_t job_id) const {
  MutexLock lock(mu_);
  auto it = artifacts_.find(job_id);
  if (it == artifacts_.end()) return std::nullopt;
  return it->second;
}

void FakeGitLabApi::ForbidArtifacts(int64_t job_id) {
  MutexLock lock(mu_);
  forbidden_.insert(job_id);
}

void FakeGitLabApi::SetPackageFile(int64_t project_id, const std::string& name,
                                   const std::string& version,
                                   const std::string& file, std::string bytes) {
  MutexLock lock(mu_);
  packages_[{project_id, name, version, file}] = std::move(bytes);
}

std::optional<std::string> FakeGitLabApi::PackageFile(
    int64_t project_id, const std::string& name, const std::string& version,
    const std::string& file) const {
  MutexLock lock(mu_);
  auto it = packages_.find({project_id, name, version, file});
  if (it == packages_.end()) return std::nullopt;
  return it->second;
}

void FakeGitLabApi::SetJwks(std::string jwks) {
  MutexLock lock(mu_);
  jwks_ = std::move(jwks);
}

int FakeGitLabApi::RequestCount(const std::string& prefix) const {
  MutexLock lock(mu_);
  int count = 0;
  for (const auto& [path, n] : requests_) {
    if (absl::StartsWith(path, prefix)) count += n;
  }
  return count;
}

std::optional<FakeJob> FakeGitLabApi::JobForToken(
    const std::string& token) const {
  if (token.empty()) return std::nullopt;
  MutexLock lock(mu_);
  for (const auto& [id, job] : jobs_) {
    if (job.token == token && job.running) return job;
  }
  return std::nullopt;
}

void FakeGitLabApi::InstallRoutes() {
  httplib::Server& s = *server_;
  // Counted before the handler answers, so a client sees its own request.
  s.set_pre_routing_handler(
      [this](const httplib::Request& request, httplib::Response&) {
        MutexLock lock(mu_);
        ++requests_[request.path];
        return httplib::Server::HandlerResponse::Unhandled;
      });

  s.Get("/oauth/discovery/keys",
        [this](const httplib::Request&, httplib::Response& response) {
          std::string jwks;
          {
            MutexLock lock(mu_);
            jwks = jwks_;
          }
          if (jwks.empty()) return Reply(response, 404, "404 Not Found");
          response.set_content(jwks, "application/json");
        });

  s.Get("/api/v4/job", [this](const httplib::Request& request,
                              httplib::Response& response) {
    if (options_.job_answer_delay.count() > 0) {
      std::this_thread::sleep_for(options_.job_answer_delay);
    }
    const auto job = JobForToken(RequestToken(request, AuthForm::kJobOnly));
    if (!job) return Reply(response, 401, "401 Unauthorized");
    const nlohmann::json body = {
        {"id", job->id},
        {"name", job->name},
        {"stage", job->stage},
        {"status", "running"},
        {"ref", job->ref},
        {"pipeline",
         {{"id", job->pipeline_id},
          {"project_id", job->project_id},
          {"ref", job->ref},
          {"sha", job->sha},
          {"status", "running"}}},
        {"user", {{"id", 1}, {"username", "root"}}},
        {"web_url", absl::StrCat(url(), "/project/-/jobs/", job->id)}};
    response.set_content(body.dump(), "application/json");
  });

  s.Get(R"(/api/v4/jobs/(\d+)/artifacts)",
        [this](const httplib::Request& request, httplib::Response& response) {
          const auto job =
              JobForToken(RequestToken(request, AuthForm::kArtifacts));
          if (!job) return Reply(response, 401, "401 Unauthorized");
          int64_t target = 0;
          if (!absl::SimpleAtoi(request.matches[1].str(), &target)) {
            return Reply(response, 404, "404 Not Found");
          }
          std::string zip;
          {
            MutexLock lock(mu_);
            auto owner = jobs_.find(target);
            if (owner == jobs_.end())
              return Reply(response, 404, "404 Job Not Found");
            if (owner->second.project_id != job->project_id ||
                forbidden_.count(target) > 0) {
              return Reply(response, 403, "403 Forbidden");
            }
            auto it = artifacts_.find(target);
            if (it == artifacts_.end())
              return Reply(response, 404, "404 Not Found");
            if (!options_.redirect_artifacts) zip = it->second;
          }
          if (options_.redirect_artifacts) {
            response.set_redirect(absl::StrCat("/_storage/artifacts/", target),
                                  302);
            return;
          }
          response.set_content(std::move(zip), "application/zip");
        });

  s.Get(R"(/_storage/artifacts/(\d+))",
        [this](const httplib::Request& request, httplib::Response& response) {
          int64_t target = 0;
          if (!absl::SimpleAtoi(request.matches[1].str(), &target)) {
            return Reply(response, 404, "404 Not Found");
          }
          MutexLock lock(mu_);
          auto it = artifacts_.find(target);
          if (it == artifacts_.end())
            return Reply(response, 404, "404 Not Found");
          response.set_content(it->second, "application/zip");
        });

  s.Post(R"(/api/v4/jobs/(\d+)/artifacts)",
         [this](const httplib::Request& request, httplib::Response& response) {
           const auto job =
               JobForToken(RequestToken(request, AuthForm::kArtifacts));
           int64_t target = 0;
           if (!job || !absl::SimpleAtoi(request.matches[1].str(), &target)) {
             return Reply(response, 401, "401 Unauthorized");
           }
           if (job->id != target) return Reply(response, 403, "403 Forbidden");
           if (!request.is_multipart_form_data() || !request.has_file("file")) {
             return Reply(response, 400, "400 Bad request - file is missing");
           }
           std::string content = request.get_file_value("file").content;
           if (content.size() > options_.max_artifact_bytes) {
             return Reply(response, 413, "413 Request Entity Too Large");
           }
           SetArtifacts(target, std::move(content));
           response.status = 201;
           response.set_content("{}", "application/json");
         });

  const char* kPackage =
      R"(/api/v4/projects/(\d+)/packages/generic/([^/]+)/([^/]+)/(.+))";
  // Checks auth and names; on success fills `key` and returns true.
  auto package_request = [this](const httplib::Request& request,
                                httplib::Response& response, PackageKey& key) {
    const auto job = JobForToken(RequestToken(request, AuthForm::kPackages));
    if (!job) {
      Reply(response, 401, "401 Unauthorized");
      return false;
    }
    int64_t project = 0;
    if (!absl::SimpleAtoi(request.matches[1].str(), &project) ||
        project != job->project_id) {
      Reply(response, 403, "403 Forbidden");
      return false;
    }
    key = {project, request.matches[2].str(), request.matches[3].str(),
           request.matches[4].str()};
    if (!ValidPackageNameOrVersion(std::get<1>(key)) ||
        !ValidPackageNameOrVersion(std::get<2>(key)) ||
        !ValidPackageFileName(std::get<3>(key))) {
      Reply(response, 400,
            "400 Bad request - invalid package name, version or file name");
      return false;
    }
    return true;
  };

  s.Put(kPackage, [this, package_request](const httplib::Request& request,
                                          httplib::Response& response) {
    PackageKey key;
    if (!package_request(request, response, key)) return;
    if (request.body.size() > options_.max_package_file_bytes) {
      return Reply(response, 413, "413 Request Entity Too Large");
    }
    {
      MutexLock lock(mu_);
      packages_[key] = request.body;
    }
    Reply(response, 201, "201 Created");
  });

  s.Get(kPackage, [this, package_request](const httplib::Request& request,
                                          httplib::Response& response) {
    PackageKey key;
    if (!package_request(request, response, key)) return;
    std::string bytes;
    {
      MutexLock lock(mu_);
      auto it = packages_.find(key);
      if (it == packages_.end()) return Reply(response, 404, "404 Not Found");
      bytes = it->second;
    }
    response.set_header("X-Checksum-SHA256", Sha256Hex(bytes));
    response.set_content(std::move(bytes), "application/octet-stream");
  });
}

}  // namespace gdt::gitlab
