// gdt-ckpt: checkpoint manifests, the package-registry store and resume for
// training scripts in gdt jobs (ckpt/command.h); inside a gdt job
// manifests are recorded with, and found again through, the coordinator.
#include <chrono>
#include <csignal>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "ckpt/command.h"
#include "ckpt/notice.h"
#include "ckpt/notice_broadcast_client.h"
#include "ckpt/registry_client.h"
#include "common/cli_parse.h"

extern char** environ;

int main(int argc, char** argv) {
  CLI::App app{
      "gdt-ckpt: checkpoint manifests, large-file store and resume inside a "
      "gdt job (reads GDT_CHECKPOINT_DIR, CI_JOB_ID, CI_PROJECT_ID, "
      "CI_PROJECT_DIR, CI_API_V4_URL, CI_JOB_TOKEN)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "gdt-ckpt " GDT_VERSION);
  gdt::ckpt::CkptSaveOptions save_options;
  CLI::App* save = app.add_subcommand(
      "save",
      "Write manifest.json for a checkpoint directory; upload it to "
      "the package registry when the store says so; prune old ones");
  save->add_option("--step", save_options.step, "Training step")->required();
  save->add_option("--dir", save_options.dir,
                   "Checkpoint directory (default $GDT_CHECKPOINT_DIR/step-N)");
  save->add_option("--world-size", save_options.world_size,
                   "World size (default $WORLD_SIZE)")
      ->check(CLI::Range(1, 1 << 24));
  save->add_option("--rank", save_options.rank, "Writer rank (default $RANK)")
      ->check(CLI::Range(0, 1 << 24));
  save->add_option("--store", save_options.store,
                   "artifacts, packages, or auto (packages above --threshold)");
  save->add_option("--threshold", save_options.threshold_bytes,
                   "Bytes above which auto picks packages (default "
                   "$GDT_CHECKPOINT_THRESHOLD, else 100 MiB)");
  save->add_option(
      "--keep", save_options.keep,
      "Keep the newest K checkpoints (default $GDT_CHECKPOINT_KEEP)");
  save->add_flag("--json", save_options.json, "Print a JSON summary");

  gdt::ckpt::CkptResumeOptions resume_options;
  CLI::App* resume =
      app.add_subcommand("resume",
                         "Place the newest checkpoint that verifies in "
                         "GDT_CHECKPOINT_DIR and print GDT_RESUME_FROM=<dir> "
                         "(without --manifest/--from-job: the checkpoints "
                         "the coordinator recorded for this gang)");
  resume->add_option("--manifest", resume_options.manifests,
                     "A manifest.json to consider (repeatable)");
  resume->add_option("--from-job", resume_options.from_jobs,
                     "A job id whose artifacts hold checkpoints (repeatable)");
  resume->add_option("--dest", resume_options.dest,
                     "Where to place it (default $GDT_CHECKPOINT_DIR)");
  resume->add_flag("--json", resume_options.json, "Print JSON");
  int64_t resume_wait = 120;
  resume
      ->add_option("--wait", resume_wait,
                   "In a retried gang (GDT_EPOCH 2 on): seconds to wait for "
                   "an unreachable coordinator's records before failing "
                   "(exit 3) instead of starting fresh (default 120)")
      ->check(CLI::Range(int64_t{0}, int64_t{86400}));
  std::vector<std::string> command;
  CLI::App* run = app.add_subcommand(
      "run",
      "Run a training command in its own process group and give it "
      "the checkpoint notice (flag file GDT_CHECKPOINT_NOTICE_FILE + signal "
      "GDT_CHECKPOINT_SIGNAL, USR1|USR2|TERM|INT|none, to "
      "GDT_CHECKPOINT_SIGNAL_TO, group|workers) GDT_CHECKPOINT_NOTICE "
      "seconds (default 300) before CI_JOB_TIMEOUT ends the job; inside a "
      "gdt job the first member to reach it tells the whole gang");
  run->add_option("command", command, "The command, after --")->required();
  if (std::optional<int> code = gdt::ParseCommandLine(
          app, argc, argv,
          {.ok = gdt::ckpt::kCkptOk, .usage = gdt::ckpt::kCkptBadInput})) {
    return *code;
  }
  resume_options.wait = std::chrono::seconds(resume_wait);
  gdt::ckpt::CkptEnv env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const size_t eq = entry.find('=');
    if (eq != std::string::npos)
      env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  if (!run->parsed()) {
    // save and resume run inside the training's process group: a notice
    // signal meant for the training must not kill them mid-write.
    signal(SIGUSR1, SIG_IGN);
    signal(SIGUSR2, SIG_IGN);
  }
  if (run->parsed()) {
    auto plan = gdt::ckpt::PlanNotice(env, std::chrono::system_clock::now());
    if (!plan.ok()) {
      std::cerr << "gdt-ckpt run: " << plan.status().message() << "\n";
      return gdt::ckpt::kCkptBadInput;
    }
    // Inside a gdt job the notice is shared with the gang's other members.
    auto broadcast = gdt::ckpt::NoticeBroadcastFromEnv(env);
    if (!broadcast.ok()) {
      std::cerr << "gdt-ckpt run: warning: the gang's notice is not shared: "
                << broadcast.status().message() << "\n";
    }
    return gdt::ckpt::RunWithNotice(
        command, env, *plan, std::cerr,
        broadcast.ok() ? broadcast->get() : nullptr);
  }
  // The coordinator's records of the gang (inside a gdt job). Without a
  // usable credential gdt-ckpt still works through files and the GitLab API.
  const char* command_name = save->parsed() ? "save" : "resume";
  auto registry = gdt::ckpt::RegistryFromEnv(env, std::chrono::seconds(10));
  if (!registry.ok()) {
    std::cerr << "gdt-ckpt " << command_name
              << ": warning: no coordinator records: "
              << registry.status().message() << "\n";
  }
  gdt::ckpt::ManifestRegistry* records =
      registry.ok() ? registry->get() : nullptr;
  if (!registry.ok()) {
    resume_options.no_registry_reason =
        std::string(registry.status().message());
  }
  if (save->parsed()) {
    return gdt::ckpt::RunCkptSave(save_options, env, records, std::cout,
                                  std::cerr);
  }
  return gdt::ckpt::RunCkptResume(resume_options, env, records, std::cout,
                                  std::cerr);
}
