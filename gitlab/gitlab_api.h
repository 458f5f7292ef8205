#ifndef GDT_GITLAB_GITLAB_API_H_
#define GDT_GITLAB_GITLAB_API_H_

// The GitLab REST API calls gdt makes with a job token
// (docs/gitlab-runner-protocol.md): identify the job, move job artifacts and
// generic-package files. Errors name the call and map HTTP answers to codes a
// caller can act on:
//   401 -> Unauthenticated (token missing, wrong or job finished)
//   403 -> PermissionDenied     404 -> NotFound
//   413 -> ResourceExhausted (above the instance's size limit)
//   other HTTP or transport errors -> Unavailable.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gdt::gitlab {

// What GET /api/v4/job says about the token's job.
struct ApiJob {
  int64_t id = 0;
  std::string name;
  std::string ref;
  int64_t pipeline_id = 0;
  int64_t project_id = 0;
};

// A downloaded file and what the server said about it.
struct Download {
  uint64_t bytes = 0;
  // SHA-256 of what was written, computed while downloading.
  std::string sha256;
  // The server's X-Checksum-SHA256 header, empty when absent.
  std::string server_sha256;
};

class GitLabApi {
 public:
  virtual ~GitLabApi() = default;

  virtual absl::StatusOr<ApiJob> CurrentJob() = 0;
  // GET /api/v4/jobs/:id/artifacts into the file `dest` (following
  // redirects).
  virtual absl::StatusOr<Download> DownloadArtifacts(
      int64_t job_id, const std::string& dest) = 0;
  // POST /api/v4/jobs/:id/artifacts of the zip file `zip` (multipart).
  virtual absl::Status UploadArtifacts(int64_t job_id,
                                       const std::string& zip) = 0;
  // PUT /api/v4/projects/:id/packages/generic/:name/:version/:file of the
  // file `src`.
  virtual absl::Status UploadPackageFile(int64_t project_id,
                                         const std::string& name,
                                         const std::string& version,
                                         const std::string& file,
                                         const std::string& src) = 0;
  // GET of the same into the file `dest`.
  virtual absl::StatusOr<Download> DownloadPackageFile(
      int64_t project_id, const std::string& name, const std::string& version,
      const std::string& file, const std::string& dest) = 0;
};

}  // namespace gdt::gitlab

#endif  // GDT_GITLAB_GITLAB_API_H_
