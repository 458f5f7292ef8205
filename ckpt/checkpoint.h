#ifndef GDT_GITLAB_CHECKPOINT_H_
#define GDT_GITLAB_CHECKPOINT_H_

// Checkpoint manifests, the two stores (job artifacts, generic package
// registry) and resume: pick the newest checkpoint that downloads, extracts
// and verifies, skipping (with a warning) every one that does not.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gitlab/gitlab_api.h"

namespace gdt::ckpt {

inline constexpr char kManifestFileName[] = "manifest.json";
// The largest manifest read (the coordinator records none larger): a
// manifest.json of gigabytes in a job's artifacts must not take the
// memory of the job that resumes.
inline constexpr size_t kMaxManifestBytes = 1 << 20;
inline constexpr char kStoreArtifacts[] = "artifacts";
inline constexpr char kStorePackages[] = "packages";

struct ManifestFile {
  std::string path;  // Relative to the checkpoint directory.
  uint64_t size = 0;
  std::string sha256;
};

// manifest.json, written into the checkpoint directory next to its files.
struct CheckpointManifest {
  int64_t step = 0;
  int world_size = 0;
  int rank = 0;  // The member that wrote it (0 unless sharded).
  int64_t job_id = 0;
  int64_t project_id = 0;
  // kStoreArtifacts: the files ride in job `job_id`'s artifacts under `dir`.
  // kStorePackages: each file is the generic package file
  // `package_name`/`package_version`/<path> of `project_id`.
  std::string store = kStoreArtifacts;
  // The checkpoint directory relative to CI_PROJECT_DIR (e.g.
  // "checkpoints/step-100").
  std::string dir;
  std::string package_name;
  std::string package_version;
  std::vector<ManifestFile> files;

  uint64_t total_bytes() const;
};

// Describes every regular file below `checkpoint_dir` (recursively, sorted,
// manifest.json excluded) with its size and SHA-256; the other fields come
// from `info`. InvalidArgument when the directory is missing or empty, or
// when it holds a symbolic link (named; links are never saved).
absl::StatusOr<CheckpointManifest> BuildManifest(
    const std::string& checkpoint_dir, CheckpointManifest info);

std::string ManifestToJson(const CheckpointManifest& manifest);
// InvalidArgument naming the first missing or malformed field, a file path
// that is absolute or contains "..", or an unknown store.
absl::StatusOr<CheckpointManifest> ParseManifest(const std::string& json);

// Every file of the manifest exists below `dir` with its size and SHA-256.
// DataLoss naming the file and what differs.
absl::Status VerifyCheckpoint(const std::string& dir,
                              const CheckpointManifest& manifest);

// The generic-package file name under which the checkpoint file at relative
// `path` is stored. GitLab accepts only [A-Za-z0-9._+~@-] there (and no
// "..") while checkpoints are collected recursively, so every byte outside
// [A-Za-z0-9._-] ('/' above all, and '+' itself) becomes "+XX" (two upper-
// case hex digits), as does a '.' followed by another '.': one flat name per
// path, never the same for two paths.
std::string PackageFileName(std::string_view path);

// Uploads every file of the manifest from `dir` to the package registry
// (store kStorePackages, each under PackageFileName(path)), then
// manifest.json itself.
absl::Status UploadToPackages(gitlab::GitLabApi& api, const std::string& dir,
                              const CheckpointManifest& manifest);

// The manifests found in job `job_id`'s artifacts (every */manifest.json),
// downloaded and extracted into `scratch`; one line in `warnings` for each
// unreadable or malformed one. Errors as GitLabApi's, DataLoss for a bad
// zip.
absl::StatusOr<std::vector<CheckpointManifest>> ManifestsInArtifacts(
    gitlab::GitLabApi& api, int64_t job_id, const std::string& scratch,
    std::vector<std::string>& warnings);

struct Resumed {
  CheckpointManifest manifest;
  std::string path;  // What GDT_RESUME_FROM is set to.
};

// Tries `candidates` from the highest step down: fetches the files from the
// manifest's store into a scratch directory under `checkpoint_dir`,
// verifies them and moves them to `checkpoint_dir`/<basename of dir>. Each
// candidate that fails adds one line to `warnings` ("skipping checkpoint
// step N (job J, store): reason") and the next is tried. nullopt (fresh
// start) when none verifies. Never leaves a partial checkpoint behind.
std::optional<Resumed> Resume(gitlab::GitLabApi& api,
                              std::vector<CheckpointManifest> candidates,
                              const std::string& checkpoint_dir,
                              std::vector<std::string>& warnings);

// Like Resume(), but first looks for each candidate's files below
// `local_root` (CI_PROJECT_DIR: where a job's `needs`/`dependencies`
// artifacts land) at the manifest's `dir`: when they verify they are used
// (copied to `checkpoint_dir` unless already there) without downloading.
// `api` may be null: candidates that need a download are then skipped with
// a warning naming `no_api_reason`. When `outage` is given it is set to the
// first download that failed because the API could not be reached or
// answered 5xx (Unavailable, DeadlineExceeded), as opposed to a checkpoint
// that is gone (404) or does not verify.
std::optional<Resumed> ResumeLocalFirst(
    gitlab::GitLabApi* api, const std::string& no_api_reason,
    std::vector<CheckpointManifest> candidates, const std::string& local_root,
    const std::string& checkpoint_dir, std::vector<std::string>& warnings,
    absl::Status* outage = nullptr);

}  // namespace gdt::ckpt

#endif  // GDT_GITLAB_CHECKPOINT_H_
