#include "ckpt/command.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <thread>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "ckpt/checkpoint.h"
#include "ckpt/notice.h"
#include "common/backoff.h"
#include "common/file.h"
#include "common/retry_after.h"
#include "gitlab/curl_gitlab_api.h"
#include "nlohmann/json.hpp"

namespace gdt::ckpt {
namespace {

namespace fs = std::filesystem;

int64_t GetInt(const CkptEnv& env, const std::string& key, int64_t fallback) {
  int64_t value = 0;
  return absl::SimpleAtoi(EnvValue(env, key), &value) ? value : fallback;
}

// An outage that passes: the coordinator restarting or failing over.
bool IsTransient(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status);
}

// The gang's records. In a retried gang (epoch 2 on) they may hold the
// work of the attempt that died, so a coordinator that cannot be reached
// (restarting, failing over) is waited for up to `wait`, a line per
// attempt; in epoch 1 there is nothing to find and the first answer counts.
absl::StatusOr<std::vector<std::string>> ListRecords(ManifestRegistry& registry,
                                                     const CkptEnv& env,
                                                     std::chrono::seconds wait,
                                                     std::ostream& err) {
  using Clock = std::chrono::steady_clock;
  const bool retried = GetInt(env, "GDT_EPOCH", 1) > 1;
  const Clock::time_point deadline = Clock::now() + wait;
  Backoff backoff({.initial = std::chrono::milliseconds(200),
                   .max = std::chrono::seconds(5)});
  while (true) {
    absl::StatusOr<std::vector<std::string>> records = registry.List();
    if (records.ok() || !retried || !IsTransient(records.status())) {
      return records;
    }
    const Clock::time_point now = Clock::now();
    if (now >= deadline) return records;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    err << "gdt-ckpt resume: waiting for the coordinator's checkpoint "
           "records ("
        << records.status().message() << "); "
        << std::chrono::duration_cast<std::chrono::seconds>(left).count()
        << " s left\n";
    err.flush();
    std::this_thread::sleep_for(std::min(backoff.Next(), left));
  }
}

absl::StatusOr<std::unique_ptr<gitlab::CurlGitLabApi>> ApiFromEnv(
    const CkptEnv& env) {
  std::string url = EnvValue(env, "CI_API_V4_URL");
  if (url.empty() && !EnvValue(env, "CI_SERVER_URL").empty()) {
    url = EnvValue(env, "CI_SERVER_URL") + "/api/v4";
  }
  return gitlab::CurlGitLabApi::Create(url, EnvValue(env, "CI_JOB_TOKEN"));
}

// `path` relative to CI_PROJECT_DIR when inside it, else its last component.
std::string ProjectRelative(const CkptEnv& env, const std::string& path) {
  const std::string project = EnvValue(env, "CI_PROJECT_DIR");
  std::error_code error;
  const fs::path absolute = fs::weakly_canonical(path, error);
  if (!project.empty()) {
    const fs::path rel =
        fs::weakly_canonical(absolute, error)
            .lexically_relative(fs::weakly_canonical(project, error));
    if (!rel.empty() && *rel.begin() != "..") return rel.generic_string();
  }
  return absolute.filename().string();
}

}  // namespace

std::vector<std::string> PruneCheckpoints(const std::string& checkpoint_dir,
                                          int keep) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(checkpoint_dir, error)) {
    const std::string manifest_path =
        (entry.path() / kManifestFileName).string();
    auto text = ReadTextFile(manifest_path, kMaxManifestBytes);
    if (!text.ok()) continue;
    auto manifest = ParseManifest(*text);
    if (manifest.ok())
      found.emplace_back(manifest->step, entry.path().string());
  }
  std::sort(found.begin(), found.end(), std::greater<>());
  std::vector<std::string> removed;
  for (size_t i = static_cast<size_t>(std::max(keep, 0)); i < found.size();
       ++i) {
    fs::remove_all(found[i].second, error);
    removed.push_back(found[i].second);
  }
  return removed;
}

int RunCkptSave(const CkptSaveOptions& options, const CkptEnv& env,
                ManifestRegistry* registry, std::ostream& out,
                std::ostream& err) {
  if (options.step < 0) {
    err << "gdt-ckpt save: --step must be given and >= 0\n";
    return kCkptBadInput;
  }
  if (options.store != "auto" && options.store != kStoreArtifacts &&
      options.store != kStorePackages) {
    err << "gdt-ckpt save: --store must be auto, artifacts or packages, not \""
        << options.store << "\"\n";
    return kCkptBadInput;
  }
  const std::string base = EnvValue(env, "GDT_CHECKPOINT_DIR");
  std::string dir = options.dir;
  if (dir.empty()) {
    if (base.empty()) {
      err << "gdt-ckpt save: neither --dir nor GDT_CHECKPOINT_DIR is set\n";
      return kCkptBadInput;
    }
    dir = absl::StrCat(base, "/step-", options.step);
  }
  CheckpointManifest info;
  info.step = options.step;
  info.world_size = options.world_size > 0
                        ? options.world_size
                        : static_cast<int>(GetInt(env, "WORLD_SIZE", 1));
  info.rank = options.rank > 0 ? options.rank
                               : static_cast<int>(GetInt(env, "RANK", 0));
  if (info.world_size < 1 || info.rank < 0 || info.rank >= info.world_size) {
    err << "gdt-ckpt save: rank " << info.rank
        << " must be from 0 to the world size minus 1 (world size "
        << info.world_size << "; --rank/--world-size, or RANK/WORLD_SIZE)\n";
    return kCkptBadInput;
  }
  info.job_id = GetInt(env, "CI_JOB_ID", 0);
  info.project_id = GetInt(env, "CI_PROJECT_ID", 0);
  // Resume and the job's artifacts see only the project: a directory
  // elsewhere would be recorded under a wrong relative path.
  if (const std::string project = EnvValue(env, "CI_PROJECT_DIR");
      !project.empty()) {
    std::error_code error;
    const fs::path rel =
        fs::weakly_canonical(dir, error)
            .lexically_relative(fs::weakly_canonical(project, error));
    if (rel.empty() || *rel.begin() == ".." || rel == ".") {
      err << "gdt-ckpt save: " << dir << " is not below CI_PROJECT_DIR ("
          << project << "): checkpoints are saved from inside the project\n";
      return kCkptBadInput;
    }
  }
  // The packages store needs the API: checked before anything is hashed
  // or written.
  std::unique_ptr<gitlab::CurlGitLabApi> api;
  auto need_api = [&]() -> bool {
    if (api != nullptr) return true;
    auto created = ApiFromEnv(env);
    if (!created.ok()) {
      err << "gdt-ckpt save: " << created.status().message() << "\n";
      return false;
    }
    api = *std::move(created);
    return true;
  };
  if (options.store == kStorePackages && !need_api()) return kCkptBadInput;
  info.dir = ProjectRelative(env, dir);
  auto manifest = BuildManifest(dir, info);
  if (!manifest.ok()) {
    err << "gdt-ckpt save: " << manifest.status().message() << "\n";
    return kCkptBadInput;
  }
  uint64_t threshold = options.threshold_bytes;
  if (threshold == 0) {
    threshold = 100ull << 20;
    if (const std::string text = EnvValue(env, "GDT_CHECKPOINT_THRESHOLD");
        !text.empty() &&
        (!absl::SimpleAtoi(text, &threshold) || threshold == 0)) {
      err << "gdt-ckpt save: GDT_CHECKPOINT_THRESHOLD=" << text
          << ": not a positive number of bytes\n";
      return kCkptBadInput;
    }
  }
  manifest->store =
      options.store == "auto"
          ? (manifest->total_bytes() > threshold ? kStorePackages
                                                 : kStoreArtifacts)
          : options.store;
  if (manifest->store == kStorePackages) {
    manifest->package_name = "gdt-checkpoints";
    manifest->package_version =
        absl::StrCat("job-", manifest->job_id, "-rank-", manifest->rank,
                     "-step-", manifest->step);
  }
  if (manifest->store == kStorePackages && !need_api()) return kCkptBadInput;
  const std::string manifest_path = dir + "/" + kManifestFileName;
  {
    std::ofstream file(manifest_path, std::ios::trunc);
    file << ManifestToJson(*manifest);
    if (!file.flush()) {
      err << "gdt-ckpt save: cannot write " << manifest_path << "\n";
      return kCkptFailed;
    }
  }
  if (manifest->store == kStorePackages) {
    const absl::Status uploaded = UploadToPackages(*api, dir, *manifest);
    if (!uploaded.ok()) {
      err << "gdt-ckpt save: " << uploaded.message() << "\n";
      return kCkptFailed;
    }
  }
  bool recorded = false;
  if (registry != nullptr) {
    const std::string manifest_json = ManifestToJson(*manifest);
    absl::Status status = registry->Record(manifest->step, manifest->rank,
                                           manifest->job_id, manifest_json);
    // A coordinator that refuses for pace (the gang records checkpoints too
    // fast) says when to try again: wait as told, within record_wait in all.
    std::chrono::milliseconds waited{0};
    for (std::optional<std::chrono::milliseconds> hint = RetryAfter(status);
         !status.ok() && hint.has_value() &&
         waited + *hint <= options.record_wait;
         hint = RetryAfter(status)) {
      if (waited.count() == 0) {
        err << "gdt-ckpt save: the coordinator asks to record step "
            << manifest->step << " later (the gang records checkpoints too "
            << "fast); retrying for up to "
            << std::chrono::duration_cast<std::chrono::seconds>(
                   options.record_wait)
                   .count()
            << " s\n";
      }
      std::this_thread::sleep_for(*hint);
      waited += *hint;
      status = registry->Record(manifest->step, manifest->rank,
                                manifest->job_id, manifest_json);
    }
    if (status.ok()) {
      recorded = true;
    } else {
      err << "gdt-ckpt save: warning: step " << manifest->step
          << " is not recorded with the coordinator (a retry finds it only "
             "through the artifacts): "
          << status.message() << "\n";
    }
  }
  const int keep =
      options.keep > 0
          ? options.keep
          : static_cast<int>(GetInt(env, "GDT_CHECKPOINT_KEEP", 0));
  std::vector<std::string> pruned;
  if (keep > 0) pruned = PruneCheckpoints(fs::path(dir).parent_path(), keep);
  if (options.json) {
    out << nlohmann::json{{"manifest", manifest_path},
                          {"step", manifest->step},
                          {"store", manifest->store},
                          {"bytes", manifest->total_bytes()},
                          {"recorded", recorded},
                          {"pruned", pruned}}
               .dump()
        << "\n";
  } else {
    out << manifest_path << "\n";
  }
  return kCkptOk;
}

int RunCkptResume(const CkptResumeOptions& options, const CkptEnv& env,
                  ManifestRegistry* registry, std::ostream& out,
                  std::ostream& err) {
  const std::string dest =
      options.dest.empty() ? EnvValue(env, "GDT_CHECKPOINT_DIR") : options.dest;
  if (dest.empty()) {
    err << "gdt-ckpt resume: neither --dest nor GDT_CHECKPOINT_DIR is set\n";
    return kCkptBadInput;
  }
  if (registry == nullptr && !options.no_registry_reason.empty() &&
      GetInt(env, "GDT_EPOCH", 1) > 1) {
    err << "gdt-ckpt resume: cannot read the gang's checkpoint records ("
        << options.no_registry_reason
        << "); a retried gang does not start fresh without them\n";
    if (options.json) {
      out << nlohmann::json({{"resume_from", nullptr},
                             {"error", options.no_registry_reason}})
                 .dump()
          << "\n";
    } else {
      out << "GDT_RESUME_FROM= ; exit " << kCkptBadInput << "\n";
    }
    return kCkptBadInput;
  }
  // The API is needed only to download: checkpoints already in the project
  // (from `needs` artifacts) verify without it.
  auto api = ApiFromEnv(env);
  if (!api.ok() && !options.from_jobs.empty()) {
    err << "gdt-ckpt resume: " << api.status().message() << "\n";
    return kCkptBadInput;
  }
  std::error_code error;
  fs::create_directories(dest, error);
  std::vector<std::string> warnings;
  std::vector<CheckpointManifest> candidates;
  for (const std::string& path : options.manifests) {
    auto text = ReadTextFile(path, kMaxManifestBytes);
    auto manifest = text.ok()
                        ? ParseManifest(*text)
                        : absl::StatusOr<CheckpointManifest>(text.status());
    if (!manifest.ok()) {
      warnings.push_back(
          absl::StrCat("skipping ", path, ": ", manifest.status().message()));
      continue;
    }
    candidates.push_back(*std::move(manifest));
  }
  for (const int64_t job : options.from_jobs) {
    auto found =
        ManifestsInArtifacts(**api, job, dest + "/.gdt-scan", warnings);
    if (!found.ok()) {
      warnings.push_back(absl::StrCat("no checkpoints from job ", job, ": ",
                                      found.status().message()));
      continue;
    }
    for (CheckpointManifest& m : *found) candidates.push_back(std::move(m));
  }
  gitlab::GitLabApi* api_or_null = api.ok() ? api->get() : nullptr;
  const std::string no_api_reason =
      api.ok() ? "" : std::string(api.status().message());
  std::optional<Resumed> resumed;
  const bool from_registry = options.manifests.empty() &&
                             options.from_jobs.empty() && registry != nullptr;
  if (from_registry) {
    // The coordinator's records of the gang first; then the artifacts of
    // the jobs they name, for checkpoints the records lack or got wrong.
    std::vector<int64_t> jobs;
    absl::StatusOr<std::vector<std::string>> records =
        ListRecords(*registry, env, options.wait, err);
    if (!records.ok() && GetInt(env, "GDT_EPOCH", 1) > 1 &&
        IsTransient(records.status())) {
      err << "gdt-ckpt resume: cannot read the gang's checkpoint records ("
          << records.status().message() << ") after waiting "
          << options.wait.count()
          << " s; stopping rather than starting fresh, which would lose the "
             "work of the attempt that died (a retry resumes once the "
             "coordinator is back)\n";
      if (options.json) {
        out << nlohmann::json({{"resume_from", nullptr},
                               {"error", records.status().message()}})
                   .dump()
            << "\n";
      } else {
        // Ends the script that evals it, whether or not it stops on errors.
        out << "GDT_RESUME_FROM= ; exit " << kCkptUnavailable << "\n";
      }
      return kCkptUnavailable;
    }
    if (!records.ok()) {
      warnings.push_back(
          absl::StrCat("no checkpoint records: ", records.status().message()));
    } else {
      for (const std::string& json : *records) {
        auto manifest = ParseManifest(json);
        if (!manifest.ok()) {
          warnings.push_back(absl::StrCat("skipping a recorded manifest: ",
                                          manifest.status().message()));
          continue;
        }
        if (manifest->job_id > 0 && std::find(jobs.begin(), jobs.end(),
                                              manifest->job_id) == jobs.end()) {
          jobs.push_back(manifest->job_id);
        }
        candidates.push_back(*std::move(manifest));
      }
    }
    // A retried gang's recorded checkpoints hold the dead attempt's work:
    // while the GitLab API is down (refused, 5xx) they are tried again up
    // to `wait`, then resume fails instead of starting fresh.
    const bool retried = GetInt(env, "GDT_EPOCH", 1) > 1;
    const auto give_up = std::chrono::steady_clock::now() + options.wait;
    Backoff backoff({.initial = std::chrono::milliseconds(500),
                     .max = std::chrono::seconds(10)});
    const std::vector<std::string> warnings_before = warnings;
    while (true) {
      absl::Status outage;
      resumed = ResumeLocalFirst(api_or_null, no_api_reason, candidates,
                                 EnvValue(env, "CI_PROJECT_DIR"), dest,
                                 warnings, &outage);
      if (resumed.has_value() || outage.ok() || !retried) break;
      const auto now = std::chrono::steady_clock::now();
      if (now >= give_up) {
        err << "gdt-ckpt resume: the GitLab API cannot be reached to "
               "download the gang's recorded checkpoints ("
            << outage.message() << ") after waiting " << options.wait.count()
            << " s; stopping rather than starting fresh, which would lose "
               "the work of the attempt that died\n";
        fs::remove_all(dest + "/.gdt-scan", error);
        if (options.json) {
          out << nlohmann::json(
                     {{"resume_from", nullptr}, {"error", outage.message()}})
                     .dump()
              << "\n";
        } else {
          out << "GDT_RESUME_FROM= ; exit " << kCkptUnavailable << "\n";
        }
        return kCkptUnavailable;
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(give_up - now);
      err << "gdt-ckpt resume: waiting for the GitLab API to download the "
             "recorded checkpoints ("
          << outage.message() << "); "
          << std::chrono::duration_cast<std::chrono::seconds>(left).count()
          << " s left\n";
      err.flush();
      std::this_thread::sleep_for(std::min(backoff.Next(), left));
      warnings = warnings_before;
    }
    candidates.clear();
    if (!resumed.has_value() && api_or_null != nullptr) {
      for (const int64_t job : jobs) {
        auto found = ManifestsInArtifacts(*api_or_null, job,
                                          dest + "/.gdt-scan", warnings);
        if (!found.ok()) {
          warnings.push_back(absl::StrCat("no checkpoints from job ", job, ": ",
                                          found.status().message()));
          continue;
        }
        for (CheckpointManifest& m : *found) {
          candidates.push_back(std::move(m));
        }
      }
    }
  }
  fs::remove_all(dest + "/.gdt-scan", error);
  if (!resumed.has_value() && !candidates.empty()) {
    resumed =
        ResumeLocalFirst(api_or_null, no_api_reason, std::move(candidates),
                         EnvValue(env, "CI_PROJECT_DIR"), dest, warnings);
  }
  for (const std::string& w : warnings) {
    err << "gdt-ckpt resume: warning: " << w << "\n";
  }
  if (!resumed.has_value()) {
    err << "gdt-ckpt resume: no usable checkpoint; starting fresh\n";
  } else if (from_registry) {
    err << "gdt-ckpt resume: resuming from step " << resumed->manifest.step
        << " (job " << resumed->manifest.job_id << ", "
        << resumed->manifest.store << ")\n";
  }
  if (options.json) {
    nlohmann::json j = {{"resume_from", resumed ? resumed->path : ""},
                        {"warnings", warnings}};
    if (resumed) j["step"] = resumed->manifest.step;
    out << j.dump() << "\n";
  } else {
    out << "GDT_RESUME_FROM=" << (resumed ? resumed->path : "") << "\n";
  }
  return kCkptOk;
}

}  // namespace gdt::ckpt
