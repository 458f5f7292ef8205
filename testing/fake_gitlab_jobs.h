#ifndef GDT_TESTING_FAKE_GITLAB_JOBS_H_
#define GDT_TESTING_FAKE_GITLAB_JOBS_H_

// Setting up the fake GitLab API with the jobs a test's members claim to
// be, for tests of member verification and of checkpoints kept in GitLab.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gitlab/fake_gitlab_api.h"
#include "gtest/gtest.h"

namespace gdt::test {

// Job `id` as run-local starts it: its job token is the one run-local hands
// out ("glcbt-local-<id>"); project 1.
inline gitlab::FakeJob RunLocalJob(int64_t id,
                                   const std::string& name = "train",
                                   int64_t pipeline = 1, bool running = true) {
  gitlab::FakeJob job;
  job.id = id;
  job.token = absl::StrCat("glcbt-local-", id);
  job.name = name;
  job.project_id = 1;
  job.pipeline_id = pipeline;
  job.running = running;
  return job;
}

// The jobs run-local starts for a `members`-member job in pipeline
// `pipeline` (ids pipeline × 1000 + member) and, unless
// `retry_first_job_id` is 0, those of its retry with that --first-job-id
// (that id + member).
inline std::vector<gitlab::FakeJob> RunLocalPipelineJobs(
    int64_t pipeline, int members, int64_t retry_first_job_id = 0) {
  std::vector<gitlab::FakeJob> jobs;
  for (int member = 1; member <= members; ++member) {
    jobs.push_back(RunLocalJob(pipeline * 1000 + member));
    if (retry_first_job_id != 0) {
      jobs.push_back(RunLocalJob(retry_first_job_id + member));
    }
  }
  return jobs;
}

// A fake GitLab API on loopback that knows `jobs`; nullptr (and a test
// failure) when it cannot start.
inline std::unique_ptr<gitlab::FakeGitLabApi> StartFakeGitLab(
    const std::vector<gitlab::FakeJob>& jobs,
    const gitlab::FakeGitLabApi::Options& options = {}) {
  absl::StatusOr<std::unique_ptr<gitlab::FakeGitLabApi>> api =
      gitlab::FakeGitLabApi::Start(options);
  if (!api.ok()) {
    ADD_FAILURE() << "the fake GitLab API did not start: " << api.status();
    return nullptr;
  }
  for (const gitlab::FakeJob& job : jobs) (*api)->AddJob(job);
  return std::move(*api);
}

}  // namespace gdt::test

#endif  // GDT_TESTING_FAKE_GITLAB_JOBS_H_
