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

// RunLocalJob(id) for each of `ids`.
inline std::vector<gitlab::FakeJob> RunLocalJobs(
    const std::vector<int64_t>& ids) {
  std::vector<gitlab::FakeJob> jobs;
  for (int64_t id : ids) jobs.push_back(RunLocalJob(id));
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
