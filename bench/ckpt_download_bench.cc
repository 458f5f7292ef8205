// Resume throughput: gdt's download + verify of a checkpoint from the
// generic package registry (ckpt::Resume over CurlGitLabApi) against plain
// `curl` + `sha256sum` of the same files from the same local fake GitLab API,
// alternating in one run. Prints MiB/s of each and the ratio ours/baseline.
// Usage: ckpt_download_bench [--files N] [--mib M] [--reps R] (--help)
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "ckpt/checkpoint.h"
#include "common/cli_parse.h"
#include "common/sha256.h"
#include "common/subprocess.h"
#include "gitlab/curl_gitlab_api.h"
#include "gitlab/fake_gitlab_api.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int files = 4, mib = 64, reps = 5;
  CLI::App app(
      "Resume throughput: gdt's download and check of a checkpoint from the "
      "package registry of a local fake GitLab API, against curl + sha256sum "
      "of the same files, alternating; prints MiB/s of each and the ratio",
      "ckpt_download_bench");
  app.add_option("--files", files, "files in the checkpoint")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--mib", mib, "MiB per file")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--reps", reps, "runs of each, alternating")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  if (std::optional<int> code = gdt::ParseCommandLine(app, argc, argv)) {
    return *code;
  }
  gdt::gitlab::FakeGitLabApi::Options options;
  auto fake = gdt::gitlab::FakeGitLabApi::Start(options);
  if (!fake.ok()) {
    std::cerr << fake.status() << "\n";
    return 1;
  }
  (*fake)->AddJob({.id = 1, .token = "tok", .project_id = 1});
  char pattern[] = "/tmp/gdt-ckpt-bench-XXXXXX";
  if (mkdtemp(pattern) == nullptr) return 1;
  const std::string dir = pattern;

  gdt::ckpt::CheckpointManifest manifest;
  manifest.step = 1;
  manifest.world_size = 1;
  manifest.job_id = 1;
  manifest.project_id = 1;
  manifest.store = gdt::ckpt::kStorePackages;
  manifest.dir = "checkpoints/step-1";
  manifest.package_name = "bench";
  manifest.package_version = "1";
  uint32_t seed = 1;
  for (int f = 0; f < files; ++f) {
    std::string bytes(static_cast<size_t>(mib) << 20, '\0');
    for (char& c : bytes) {
      seed = seed * 1664525u + 1013904223u;
      c = static_cast<char>(seed >> 24);
    }
    const std::string name = absl::StrCat("shard-", f, ".pt");
    manifest.files.push_back({name, bytes.size(), gdt::Sha256Hex(bytes)});
    (*fake)->SetPackageFile(1, "bench", "1", name, std::move(bytes));
  }
  auto api = gdt::gitlab::CurlGitLabApi::Create((*fake)->api_url(), "tok");
  if (!api.ok()) return 1;

  const double total_mib = static_cast<double>(files) * mib;
  std::vector<double> ours, baseline;
  for (int r = 0; r < reps; ++r) {
    // Ours: the resume path (download, hash, verify, place).
    fs::remove_all(dir + "/ours");
    fs::create_directories(dir + "/ours");
    std::vector<std::string> warnings;
    auto start = Clock::now();
    auto resumed =
        gdt::ckpt::Resume(**api, {manifest}, dir + "/ours", warnings);
    ours.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    if (!resumed.has_value()) {
      std::cerr << "resume failed: " << (warnings.empty() ? "" : warnings[0])
                << "\n";
      return 1;
    }
    // Baseline: curl per file, then sha256sum of them all.
    fs::remove_all(dir + "/plain");
    fs::create_directories(dir + "/plain");
    std::string script = "set -e; cd " + dir + "/plain; ";
    for (const auto& f : manifest.files) {
      absl::StrAppend(&script, "curl -sf -H 'JOB-TOKEN: tok' -o ", f.path, " ",
                      (*fake)->api_url(),
                      "/projects/1/packages/generic/bench/1/", f.path, "; ");
    }
    absl::StrAppend(&script, "sha256sum *.pt > /dev/null");
    start = Clock::now();
    auto status =
        gdt::RunCommand({"/bin/bash", "-c", script}, std::chrono::minutes(10));
    baseline.push_back(
        std::chrono::duration<double>(Clock::now() - start).count());
    if (!status.ok() || !status->success()) {
      std::cerr << "baseline failed\n";
      return 1;
    }
  }
  fs::remove_all(dir);
  const double ours_mibs = total_mib / Median(ours);
  const double base_mibs = total_mib / Median(baseline);
  std::printf(
      "files=%d size=%d MiB reps=%d\nours (Resume: download+verify): %.1f "
      "MiB/s (median %.3f s)\nbaseline (curl + sha256sum):      %.1f MiB/s "
      "(median %.3f s)\nratio ours/baseline: %.2f\n",
      files, mib, reps, ours_mibs, Median(ours), base_mibs, Median(baseline),
      ours_mibs / base_mibs);
  return 0;
}
