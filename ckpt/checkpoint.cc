#include "ckpt/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "common/zip_archive.h"
#include "nlohmann/json.hpp"

namespace gdt::ckpt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A path inside the checkpoint directory, each of whose parts names an
// entry: not absolute, no "..", no "." (a dir "step-4/." made resume put the
// checkpoint at the checkpoint directory itself, which it first removed
// with every checkpoint in it) and no empty part.
bool SafeRelative(const std::string& path) {
  if (path.empty() || path.front() == '/') return false;
  for (const absl::string_view part : absl::StrSplit(path, '/')) {
    if (part == ".." || part == "." || part.empty()) return false;
  }
  return true;
}

// A generic package's name or version as GitLab accepts them, which is
// also one plain segment of the API path they are put in: no "/", "?",
// "#" or "%" that would point the download (with the job token) at
// another endpoint, and not "." or "..".
bool PackagePart(const std::string& text) {
  if (text.empty() || text.size() > 255 || text == "." || text == "..") {
    return false;
  }
  return std::all_of(text.begin(), text.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-' ||
           c == '+';
  });
}

bool IsHex64(const std::string& text) {
  return text.size() == 64 && std::all_of(text.begin(), text.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

std::string Describe(const CheckpointManifest& m) {
  return absl::StrCat("checkpoint step ", m.step, " (job ", m.job_id, ", ",
                      m.store, ")");
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.flush();
  if (!out) return absl::UnavailableError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

// Fetches the manifest's files into `dest` (absent before).
absl::Status Fetch(gitlab::GitLabApi& api, const CheckpointManifest& m,
                   const std::string& scratch, const std::string& dest) {
  if (m.store == kStoreArtifacts) {
    const std::string zip = scratch + "/artifacts.zip";
    auto download = api.DownloadArtifacts(m.job_id, zip);
    if (!download.ok()) return download.status();
    const std::string extracted = scratch + "/extracted";
    // Only the checkpoint's directory, and no more than its manifest says
    // (a manifest of its own beside): the rest of the job's artifacts, or
    // a zip that expands without end, is none of resume's business.
    ExtractLimits limits;
    const std::string prefix = m.dir + "/";
    limits.select = [&prefix](const std::string& name) {
      return name.compare(0, prefix.size(), prefix) == 0;
    };
    limits.max_bytes = m.total_bytes() + kMaxManifestBytes;
    GDT_RETURN_IF_ERROR(ExtractZip(zip, extracted, limits));
    const std::string src = extracted + "/" + m.dir;
    if (!fs::is_directory(src)) {
      return absl::DataLossError(
          absl::StrCat("job ", m.job_id, "'s artifacts hold no ", m.dir));
    }
    std::error_code error;
    fs::rename(src, dest, error);
    if (error) {
      return absl::UnavailableError(absl::StrCat("cannot move ", src, " to ",
                                                 dest, ": ", error.message()));
    }
    return absl::OkStatus();
  }
  for (const ManifestFile& file : m.files) {
    const fs::path target = fs::path(dest) / file.path;
    std::error_code error;
    fs::create_directories(target.parent_path(), error);
    auto download =
        api.DownloadPackageFile(m.project_id, m.package_name, m.package_version,
                                PackageFileName(file.path), target.string());
    if (!download.ok()) return download.status();
    if (!download->server_sha256.empty() &&
        download->server_sha256 != download->sha256) {
      return absl::DataLossError(absl::StrCat(
          "package file ", file.path, ": the server's X-Checksum-SHA256 ",
          download->server_sha256, " differs from the bytes received (",
          download->sha256, ")"));
    }
  }
  return WriteFile(dest + "/" + kManifestFileName, ManifestToJson(m));
}

}  // namespace

uint64_t CheckpointManifest::total_bytes() const {
  uint64_t total = 0;
  for (const ManifestFile& f : files) total += f.size;
  return total;
}

absl::StatusOr<CheckpointManifest> BuildManifest(
    const std::string& checkpoint_dir, CheckpointManifest info) {
  std::error_code error;
  if (!fs::is_directory(checkpoint_dir, error)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint directory ", checkpoint_dir, " does not exist"));
  }
  info.files.clear();
  for (auto it = fs::recursive_directory_iterator(checkpoint_dir, error);
       !error && it != fs::recursive_directory_iterator();
       it.increment(error)) {
    // A link would be stored as the file it names (a duplicate, or a path
    // outside the directory that resume must refuse): refused instead, so a
    // recorded checkpoint always restores as it was saved.
    if (it->is_symlink()) {
      std::error_code ignored;
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint directory ", checkpoint_dir, " holds the symbolic link ",
          it->path().lexically_relative(checkpoint_dir).generic_string(),
          " -> ", fs::read_symlink(it->path(), ignored).string(),
          "; only regular files are saved: copy the file in or remove the "
          "link"));
    }
    if (!it->is_regular_file()) continue;
    const std::string rel =
        fs::relative(it->path(), checkpoint_dir).generic_string();
    if (rel == kManifestFileName) continue;
    auto sha = Sha256FileHex(it->path().string());
    if (!sha.ok()) return sha.status();
    info.files.push_back({rel, it->file_size(), *std::move(sha)});
  }
  if (error) {
    return absl::UnavailableError(
        absl::StrCat("cannot list ", checkpoint_dir, ": ", error.message()));
  }
  if (info.files.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint directory ", checkpoint_dir, " has no files"));
  }
  std::sort(info.files.begin(), info.files.end(),
            [](const ManifestFile& a, const ManifestFile& b) {
              return a.path < b.path;
            });
  return info;
}

std::string ManifestToJson(const CheckpointManifest& m) {
  json files = json::array();
  for (const ManifestFile& f : m.files) {
    files.push_back({{"path", f.path}, {"size", f.size}, {"sha256", f.sha256}});
  }
  json out = {
      {"version", 1},     {"step", m.step},     {"world_size", m.world_size},
      {"rank", m.rank},   {"job_id", m.job_id}, {"project_id", m.project_id},
      {"store", m.store}, {"dir", m.dir},       {"files", files}};
  if (m.store == kStorePackages) {
    out["package"] = {{"name", m.package_name}, {"version", m.package_version}};
  }
  return out.dump(2) + "\n";
}

absl::StatusOr<CheckpointManifest> ParseManifest(const std::string& text) {
  const json j = json::parse(text, nullptr, false);
  if (!j.is_object()) {
    return absl::InvalidArgumentError("manifest: not a JSON object");
  }
  auto bad = [](const std::string& field) {
    return absl::InvalidArgumentError(absl::StrCat(
        "manifest: field \"", field, "\" is missing or malformed"));
  };
  CheckpointManifest m;
  for (const char* field : {"step", "world_size", "job_id"}) {
    if (!j.contains(field) || !j[field].is_number_integer()) return bad(field);
  }
  m.step = j["step"].get<int64_t>();
  if (m.step < 0) return bad("step");
  if (j["world_size"].get<int64_t>() < 1 ||
      j["world_size"].get<int64_t>() > 1'000'000) {
    return bad("world_size");
  }
  m.world_size = j["world_size"].get<int>();
  m.job_id = j["job_id"].get<int64_t>();
  // Optional integers: absent means 0; present must be an integer in range
  // (json::value() would throw for another type, and a float out of int's
  // range is undefined behaviour; found by the manifest fuzzer).
  for (const char* field : {"rank", "project_id"}) {
    if (j.contains(field) &&
        (!j[field].is_number_integer() || j[field].get<int64_t>() < 0 ||
         (std::string(field) == "rank" &&
          j[field].get<int64_t>() > 1'000'000))) {
      return bad(field);
    }
  }
  m.rank = j.contains("rank") ? j["rank"].get<int>() : 0;
  m.project_id = j.contains("project_id") ? j["project_id"].get<int64_t>() : 0;
  if (!j.contains("store") || !j["store"].is_string()) return bad("store");
  m.store = j["store"].get<std::string>();
  if (m.store != kStoreArtifacts && m.store != kStorePackages) {
    return absl::InvalidArgumentError(absl::StrCat(
        "manifest: unknown store \"", m.store, "\" (artifacts or packages)"));
  }
  if (!j.contains("dir") || !j["dir"].is_string()) return bad("dir");
  m.dir = j["dir"].get<std::string>();
  if (!SafeRelative(m.dir)) return bad("dir");
  if (m.store == kStorePackages) {
    if (!j.contains("package") || !j["package"].is_object() ||
        !j["package"].contains("name") || !j["package"]["name"].is_string() ||
        !j["package"].contains("version") ||
        !j["package"]["version"].is_string()) {
      return bad("package");
    }
    m.package_name = j["package"]["name"].get<std::string>();
    m.package_version = j["package"]["version"].get<std::string>();
    if (!PackagePart(m.package_name) || !PackagePart(m.package_version)) {
      return bad("package");
    }
  }
  if (!j.contains("files") || !j["files"].is_array() || j["files"].empty()) {
    return bad("files");
  }
  for (const json& f : j["files"]) {
    if (!f.is_object() || !f.contains("path") || !f["path"].is_string() ||
        !f.contains("size") || !f["size"].is_number_unsigned() ||
        !f.contains("sha256") || !f["sha256"].is_string()) {
      return bad("files");
    }
    ManifestFile file{f["path"].get<std::string>(), f["size"].get<uint64_t>(),
                      f["sha256"].get<std::string>()};
    if (!SafeRelative(file.path)) {
      return absl::InvalidArgumentError(
          absl::StrCat("manifest: file path \"", file.path, "\" is unsafe"));
    }
    if (!IsHex64(file.sha256)) return bad("files[].sha256");
    m.files.push_back(std::move(file));
  }
  return m;
}

absl::Status VerifyCheckpoint(const std::string& dir,
                              const CheckpointManifest& manifest) {
  for (const ManifestFile& f : manifest.files) {
    const std::string path = dir + "/" + f.path;
    std::error_code error;
    const uint64_t size = fs::file_size(path, error);
    if (error) {
      return absl::DataLossError(absl::StrCat("file ", f.path, " is missing"));
    }
    if (size != f.size) {
      return absl::DataLossError(absl::StrCat("file ", f.path, " has ", size,
                                              " bytes, the manifest says ",
                                              f.size));
    }
    auto sha = Sha256FileHex(path);
    if (!sha.ok()) return absl::DataLossError(sha.status().message());
    if (*sha != f.sha256) {
      return absl::DataLossError(absl::StrCat("file ", f.path,
                                              ": SHA-256 mismatch (manifest ",
                                              f.sha256, ", file ", *sha, ")"));
    }
  }
  return absl::OkStatus();
}

std::string PackageFileName(std::string_view path) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string name;
  name.reserve(path.size());
  for (size_t i = 0; i < path.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(path[i]);
    const bool plain =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
        (c >= '0' && c <= '9') || c == '_' || c == '-' ||
        (c == '.' && (i + 1 == path.size() || path[i + 1] != '.'));
    if (plain) {
      name.push_back(static_cast<char>(c));
    } else {
      name.push_back('+');
      name.push_back(kHex[c >> 4]);
      name.push_back(kHex[c & 0xF]);
    }
  }
  return name;
}

absl::Status UploadToPackages(gitlab::GitLabApi& api, const std::string& dir,
                              const CheckpointManifest& manifest) {
  if (manifest.store != kStorePackages) {
    return absl::InvalidArgumentError("manifest store is not packages");
  }
  for (const ManifestFile& f : manifest.files) {
    GDT_RETURN_IF_ERROR(api.UploadPackageFile(
        manifest.project_id, manifest.package_name, manifest.package_version,
        PackageFileName(f.path), dir + "/" + f.path));
  }
  return api.UploadPackageFile(manifest.project_id, manifest.package_name,
                               manifest.package_version, kManifestFileName,
                               dir + "/" + kManifestFileName);
}

absl::StatusOr<std::vector<CheckpointManifest>> ManifestsInArtifacts(
    gitlab::GitLabApi& api, int64_t job_id, const std::string& scratch,
    std::vector<std::string>& warnings) {
  std::error_code error;
  fs::remove_all(scratch, error);
  fs::create_directories(scratch, error);
  const std::string zip = scratch + "/artifacts.zip";
  auto download = api.DownloadArtifacts(job_id, zip);
  if (!download.ok()) return download.status();
  // The manifests only: neither the rest of the job's artifacts (which
  // may hold links, refused by the extraction) nor a zip that expands
  // without end lands on the disk; 64 manifests of the largest size fit.
  ExtractLimits limits;
  limits.select = [](const std::string& name) {
    return fs::path(name).filename() == kManifestFileName;
  };
  limits.max_bytes = 64 * kMaxManifestBytes;
  GDT_RETURN_IF_ERROR(ExtractZip(zip, scratch + "/extracted", limits));
  std::vector<CheckpointManifest> found;
  for (auto it =
           fs::recursive_directory_iterator(scratch + "/extracted", error);
       !error && it != fs::recursive_directory_iterator();
       it.increment(error)) {
    if (it->path().filename() != kManifestFileName) continue;
    auto text = ReadTextFile(it->path().string(), kMaxManifestBytes);
    auto manifest = text.ok()
                        ? ParseManifest(*text)
                        : absl::StatusOr<CheckpointManifest>(text.status());
    if (!manifest.ok()) {
      const std::string rel =
          fs::relative(it->path(), scratch + "/extracted").generic_string();
      warnings.push_back(
          absl::StrCat("skipping ", rel, " in job ", job_id,
                       "'s artifacts: ", manifest.status().message()));
      continue;
    }
    found.push_back(*std::move(manifest));
  }
  return found;
}

std::optional<Resumed> Resume(gitlab::GitLabApi& api,
                              std::vector<CheckpointManifest> candidates,
                              const std::string& checkpoint_dir,
                              std::vector<std::string>& warnings) {
  return ResumeLocalFirst(&api, "", std::move(candidates), "", checkpoint_dir,
                          warnings);
}

std::optional<Resumed> ResumeLocalFirst(
    gitlab::GitLabApi* api, const std::string& no_api_reason,
    std::vector<CheckpointManifest> candidates, const std::string& local_root,
    const std::string& checkpoint_dir, std::vector<std::string>& warnings,
    absl::Status* outage) {
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const CheckpointManifest& a,
                      const CheckpointManifest& b) { return a.step > b.step; });
  const std::string scratch = checkpoint_dir + "/.gdt-resume";
  for (const CheckpointManifest& m : candidates) {
    std::error_code error;
    const std::string target =
        (fs::path(checkpoint_dir) / fs::path(m.dir).filename()).string();
    fs::remove_all(scratch, error);
    fs::create_directories(scratch, error);
    if (error) {
      warnings.push_back(absl::StrCat("cannot create ", scratch, ": ",
                                      error.message(), "; starting fresh"));
      return std::nullopt;
    }
    const std::string staged = scratch + "/checkpoint";
    absl::Status status;
    const std::string local =
        local_root.empty() ? "" : (fs::path(local_root) / m.dir).string();
    absl::Status local_status = absl::NotFoundError(
        absl::StrCat("not in ", local.empty() ? "the project" : local));
    if (!local.empty() && fs::is_directory(local, error)) {
      local_status = VerifyCheckpoint(local, m);
      if (!local_status.ok()) {
        local_status = absl::DataLossError(
            absl::StrCat("the copy in ", local, " does not verify (",
                         local_status.message(), ")"));
      }
    }
    if (local_status.ok()) {
      if (fs::equivalent(local, target, error)) {
        fs::remove_all(scratch, error);
        return Resumed{m, target};
      }
      fs::copy(local, staged, fs::copy_options::recursive, error);
      if (error) {
        status = absl::UnavailableError(
            absl::StrCat("cannot copy ", local, ": ", error.message()));
      }
    } else if (api == nullptr) {
      status = absl::FailedPreconditionError(
          absl::StrCat(local_status.message(),
                       " and no GitLab API to download it: ", no_api_reason));
    } else {
      status = Fetch(*api, m, scratch, staged);
      if (outage != nullptr && outage->ok() &&
          (absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status))) {
        *outage = status;
      }
    }
    if (status.ok()) status = VerifyCheckpoint(staged, m);
    if (status.ok()) {
      fs::remove_all(target, error);
      fs::rename(staged, target, error);
      if (error) {
        status = absl::UnavailableError(
            absl::StrCat("cannot move it to ", target, ": ", error.message()));
      }
    }
    fs::remove_all(scratch, error);
    if (status.ok()) return Resumed{m, target};
    warnings.push_back(
        absl::StrCat("skipping ", Describe(m), ": ", status.message()));
  }
  return std::nullopt;
}

}  // namespace gdt::ckpt
