#ifndef GDT_GITLAB_FAKE_GITLAB_API_H_
#define GDT_GITLAB_FAKE_GITLAB_API_H_

// A fake of the part of the GitLab REST API that gdt uses
// (docs/gitlab-runner-protocol.md), served over HTTP on 127.0.0.1 for tests
// and benchmarks:
//
//   GET  /api/v4/job                      JOB-TOKEN or "Authorization: Bearer"
//        200 with the job JSON for a live token, 401 otherwise.
//   GET  /api/v4/jobs/:id/artifacts        JOB-TOKEN of a job of the same
//        project: 200 zip, 404 none stored, 403 other project or forbidden,
//        401 bad token; with Options::redirect_artifacts a 302 to
//        /_storage/artifacts/:id (no auth, like a presigned object URL).
//   POST /api/v4/jobs/:id/artifacts        JOB-TOKEN of job :id itself,
//        multipart field "file": 201, 413 above max_artifact_bytes.
//   PUT  /api/v4/projects/:id/packages/generic/:name/:version/:file
//   GET  (same)                            JOB-TOKEN, or Basic
//        "gitlab-ci-token:<token>", of a job of project :id (403 otherwise).
//        PUT: 201, 400 for a bad package name, version or file name, 413
//        above max_package_file_bytes; a repeated PUT replaces what GET
//        returns (GitLab appends; the newest wins). GET: 200 with header
//        X-Checksum-SHA256, 404 when absent.
//   GET  /oauth/discovery/keys             the JWKS set with SetJwks() (the
//        public keys of the instance's ID tokens), 404 before.
//
// Thread-safe. The server runs on its own thread until destruction.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>

#include "absl/status/statusor.h"
#include "common/mutex.h"

namespace httplib {
class Server;
}

namespace gdt::gitlab {

struct FakeJob {
  int64_t id = 0;
  std::string token;
  std::string name = "train";
  std::string stage = "test";
  std::string ref = "main";
  std::string sha = "0000000000000000000000000000000000000000";
  int64_t pipeline_id = 1;
  int64_t project_id = 1;
  // A finished job's token is no longer accepted (401).
  bool running = true;
};

class FakeGitLabApi {
 public:
  struct Options {
    uint64_t max_artifact_bytes = 100ull << 20;    // GitLab's default.
    uint64_t max_package_file_bytes = 5ull << 30;  // 5 GiB.
    bool redirect_artifacts = false;
    // How long GET /api/v4/job waits before it answers: a slow GitLab.
    // Requests are answered by a pool of 8 threads, so at most 8 such
    // answers are under way at once.
    std::chrono::milliseconds job_answer_delay{0};
  };

  // Listens on 127.0.0.1 on a free port.
  static absl::StatusOr<std::unique_ptr<FakeGitLabApi>> Start(Options options);
  ~FakeGitLabApi();
  FakeGitLabApi(const FakeGitLabApi&) = delete;
  FakeGitLabApi& operator=(const FakeGitLabApi&) = delete;

  // "http://127.0.0.1:<port>", what CI_SERVER_URL would be.
  std::string url() const;
  // url() + "/api/v4", what CI_API_V4_URL would be.
  std::string api_url() const { return url() + "/api/v4"; }

  // Adds or replaces the job with this id.
  void AddJob(const FakeJob& job);
  void FinishJob(int64_t job_id);
  void SetArtifacts(int64_t job_id, std::string zip);
  std::optional<std::string> Artifacts(int64_t job_id) const;
  // Artifact downloads of this job answer 403.
  void ForbidArtifacts(int64_t job_id);
  void SetPackageFile(int64_t project_id, const std::string& name,
                      const std::string& version, const std::string& file,
                      std::string bytes);
  std::optional<std::string> PackageFile(int64_t project_id,
                                         const std::string& name,
                                         const std::string& version,
                                         const std::string& file) const;
  // What GET /oauth/discovery/keys answers (e.g.
  // FakeIdTokenIssuer::Jwks()); empty: 404.
  void SetJwks(std::string jwks);
  // Requests answered so far whose path starts with `prefix`.
  int RequestCount(const std::string& prefix) const;

  // The file-name rule of generic packages: characters [A-Za-z0-9._-+~@]
  // (no '/': a nested path is no file name), not empty, no leading or
  // trailing '~' or '@', no "..".
  static bool ValidPackageFileName(const std::string& name);
  // Package names and versions: [A-Za-z0-9._-+], not empty, no "..".
  static bool ValidPackageNameOrVersion(const std::string& text);

 private:
  using PackageKey = std::tuple<int64_t, std::string, std::string, std::string>;
  explicit FakeGitLabApi(Options options);
  void InstallRoutes();
  // The running job whose token the request carries, if any.
  std::optional<FakeJob> JobForToken(const std::string& token) const;

  const Options options_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;

  mutable Mutex mu_;
  std::map<int64_t, FakeJob> jobs_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, std::string> artifacts_ ABSL_GUARDED_BY(mu_);
  std::set<int64_t> forbidden_ ABSL_GUARDED_BY(mu_);
  std::map<PackageKey, std::string> packages_ ABSL_GUARDED_BY(mu_);
  std::string jwks_ ABSL_GUARDED_BY(mu_);
  mutable std::map<std::string, int> requests_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gdt::gitlab

#endif  // GDT_GITLAB_FAKE_GITLAB_API_H_
