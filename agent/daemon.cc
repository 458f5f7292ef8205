#include "agent/daemon.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "absl/strings/str_cat.h"
#include "agent/gpu_discovery.h"
#include "agent/isolation.h"
#include "common/host_port.h"
#include "common/logging.h"
#include "common/member_token.h"
#include "common/open_files.h"
#include "common/secret.h"
#include "common/subprocess.h"
#include "rendezvous/metadata.h"
#include "rendezvous/tls.h"
#include "spdlog/spdlog.h"

namespace gdt::agent {
namespace {

// How long stage exits already on their way may take to reach clients
// after every stage has stopped.
constexpr std::chrono::seconds kServerDrain(2);
// How long a member token check may wait for the coordinator, and how long
// a good answer is trusted (docs/security.md "Member tokens").
constexpr std::chrono::seconds kMemberTokenCheck(5);
constexpr std::chrono::seconds kMemberTokenCacheTtl(10);

// How long the agent's check of its own endpoint waits for an answer.
constexpr std::chrono::seconds kEndpointProbeDeadline(3);
bool IsWildcardHost(const std::string& host) {
  return host.empty() || host == "0.0.0.0" || host == "[::]" || host == "::" ||
         host == "*";
}

}  // namespace

v1::HostSpec MakeHostSpec(const HostConfig& host,
                          const std::string& agent_endpoint) {
  v1::HostSpec spec;
  spec.set_name(host.name);
  spec.set_address(host.address);
  spec.set_agent_endpoint(agent_endpoint);
  for (const GpuConfig& gpu : host.gpus) {
    v1::Gpu* out = spec.add_gpus();
    out->set_index(gpu.index);
    out->set_uuid(gpu.uuid);
    out->set_model(gpu.model);
    out->set_memory_bytes(gpu.memory_bytes);
  }
  spec.mutable_labels()->insert(host.labels.begin(), host.labels.end());
  spec.set_network_interface(host.network_interface);
  spec.set_cpu_slots(host.cpu_slots);
  spec.set_runner_slots(host.runner_slots);
  return spec;
}

namespace {

// Resolves the member accounts and opens the cgroup tree; logs one warning
// line for each defence that is off. Errors: InvalidArgument for an account
// that does not resolve; FailedPrecondition when accounts are configured
// but the agent cannot switch to them.
// Confines member cgroups to their GPUs' device nodes where the config asks
// for it and every GPU has a device node and a UUID; logs once whether it
// does.
void GuardGpuDevices(const Config& config, const std::vector<GpuConfig>& gpus,
                     CgroupTree& tree, IsolationOptions& isolation) {
  if (gpus.empty()) return;
  if (!config.confine_gpu_devices) {
    spdlog::info("event=gpu_confinement_off reason={}",
                 LogValue("confine_gpu_devices is false: a member that "
                          "ignores CUDA_VISIBLE_DEVICES can open every GPU"));
    return;
  }
  std::map<uint32_t, ConfinedGpu> confined;
  std::vector<DeviceNumber> guarded;
  for (const GpuConfig& gpu : gpus) {
    const std::string path = gpu.device.empty()
                                 ? absl::StrCat("/dev/nvidia", gpu.index)
                                 : gpu.device;
    absl::StatusOr<DeviceNumber> device = CharDeviceOf(path);
    std::string missing;
    if (!device.ok()) {
      missing = std::string(device.status().message());
    } else if (gpu.uuid.empty()) {
      missing = absl::StrCat("GPU ", gpu.index,
                             " has no UUID (host.gpus[].uuid), which its "
                             "members would need to name it");
    }
    if (!missing.empty()) {
      spdlog::warn(
          "event=gpu_confinement_off reason={}",
          LogValue(absl::StrCat(missing,
                                ": no GPU is confined; a member that ignores "
                                "CUDA_VISIBLE_DEVICES can open every GPU")));
      return;
    }
    confined[gpu.index] = ConfinedGpu{*device, gpu.uuid};
    guarded.push_back(*device);
  }
  if (absl::Status done = tree.GuardDevices(guarded); !done.ok()) {
    spdlog::warn(
        "event=gpu_confinement_off reason={}",
        LogValue(absl::StrCat(done.message(),
                              ": no GPU is confined; a member that ignores "
                              "CUDA_VISIBLE_DEVICES can open every GPU")));
    return;
  }
  spdlog::info("event=gpu_confinement_on gpus={}", confined.size());
  isolation.gpu_devices = std::move(confined);
}

absl::StatusOr<IsolationOptions> PrepareIsolation(
    const Config& config, const std::vector<GpuConfig>& gpus) {
  IsolationOptions isolation;
  isolation.builds_root = config.builds_root;
  isolation.cache_root = config.cache_root;
  std::vector<std::string> names = config.member_uid_pool;
  isolation.exclusive_accounts = !names.empty();
  if (!config.member_user.empty()) names.push_back(config.member_user);
  for (const std::string& name : names) {
    absl::StatusOr<MemberAccount> account = ResolveMemberAccount(name);
    if (!account.ok()) return account.status();
    if (account->uid == geteuid()) {
      return absl::InvalidArgumentError(
          absl::StrCat("member account '", name, "' is the agent's own uid ",
                       account->uid, ": members must run as another user"));
    }
    isolation.accounts.push_back(*account);
  }
  if (!isolation.accounts.empty() && geteuid() != 0) {
    return absl::FailedPreconditionError(
        "member_user/member_uid_pool need the agent to run as root (to "
        "switch stages to those accounts)");
  }
  if (isolation.accounts.empty()) {
    spdlog::warn("event=member_user_off uid={} reason={}", geteuid(),
                 LogValue("no member_user or member_uid_pool: stages run as "
                          "this agent's user and can read its files and "
                          "processes (see docs/security.md)"));
  } else {
    spdlog::info("event=member_accounts_on accounts={} exclusive={}",
                 isolation.accounts.size(), isolation.exclusive_accounts);
  }

  if (config.cgroup_parent == "off") {
    spdlog::warn("event=cgroups_off reason={}",
                 LogValue("cgroup_parent is off: a process that leaves its "
                          "stage's process group (setsid) outlives teardown"));
    return isolation;
  }
  std::string parent = config.cgroup_parent;
  if (parent.empty()) {
    absl::StatusOr<std::string> own = OwnCgroupDir();
    if (!own.ok()) {
      spdlog::warn("event=cgroups_off reason={}",
                   LogValue(absl::StrCat(
                       own.status().message(),
                       ": teardown ends process groups only, and a process "
                       "that left its group (setsid) outlives it")));
      return isolation;
    }
    parent =
        absl::StrCat(*own, "/gdt/", EscapePathComponent(config.scratch_dir));
  }
  absl::StatusOr<std::unique_ptr<CgroupTree>> tree = CgroupTree::Open(parent);
  if (!tree.ok()) {
    spdlog::warn("event=cgroups_off reason={}",
                 LogValue(absl::StrCat(
                     tree.status().message(),
                     ": teardown ends process groups only, and a process "
                     "that left its group (setsid) outlives it")));
    return isolation;
  }
  spdlog::info("event=cgroups_on parent={}", LogValue(parent));
  if (config.member_pids_max > 0) {
    // Members at once: one per GPU and CPU slot, and no more than there
    // are pool accounts.
    uint64_t members = config.host.gpus.size() + config.host.cpu_slots;
    if (isolation.exclusive_accounts) {
      members = std::min<uint64_t>(members, config.member_uid_pool.size());
    }
    const uint64_t kernel_limit = KernelPidsLimit();
    const uint64_t pids_max =
        MemberPidsMax(config.member_pids_max, kernel_limit, members);
    if (absl::Status limited = (*tree)->LimitPids(pids_max); !limited.ok()) {
      spdlog::warn("event=member_pids_limit_off reason={}",
                   LogValue(absl::StrCat(
                       limited.message(),
                       ": members may start any number of processes")));
    } else if (pids_max < config.member_pids_max) {
      spdlog::warn(
          "event=member_pids_limit_on pids_max={} member_pids_max={} "
          "kernel_limit={} members={} reason={}",
          pids_max, config.member_pids_max, kernel_limit, members,
          LogValue("the kernel allows too few pids for member_pids_max in "
                   "each member: lowered so that the members together keep "
                   "below 3/4 of them (raise kernel.pid_max)"));
    } else {
      spdlog::info("event=member_pids_limit_on pids_max={}", pids_max);
    }
  }
  if (config.member_memory_max > 0) {
    if (absl::Status limited = (*tree)->LimitMemory(config.member_memory_max);
        !limited.ok()) {
      spdlog::warn(
          "event=member_memory_limit_off reason={}",
          LogValue(absl::StrCat(limited.message(),
                                ": members may use any amount of memory")));
    } else {
      spdlog::info("event=member_memory_limit_on memory_max={}",
                   config.member_memory_max);
    }
  }
  GuardGpuDevices(config, gpus, **tree, isolation);
  if (absl::Status check = (*tree)->CheckPortGuard(); !check.ok()) {
    spdlog::warn(
        "event=master_port_guard_off reason={}",
        LogValue(absl::StrCat(check.message(),
                              ": a member may bind the master port leased to "
                              "another gang on this host, and connect to the "
                              "master ports of other gangs")));
  } else {
    if (absl::Status connect = (*tree)->CheckConnectGuard(); !connect.ok()) {
      spdlog::warn(
          "event=master_connect_guard_off reason={}",
          LogValue(absl::StrCat(connect.message(),
                                ": binds are guarded, but a member may "
                                "connect to the master ports of other "
                                "gangs")));
      isolation.guard_connections = false;
    }
    spdlog::info("event=master_port_guard_on connections={}",
                 isolation.guard_connections);
    // Known once the agent has registered (see the Daemon constructor).
    isolation.master_port_range = [] {
      return std::pair<uint32_t, uint32_t>(0, 0);
    };
  }
  isolation.cgroups = std::move(*tree);
  return isolation;
}

// Member cgroups guard the master port range the coordinator named when
// this agent registered, where PrepareIsolation found that they can.
IsolationOptions WithMasterPortRange(IsolationOptions isolation,
                                     rendezvous::CoordinatorClient* client) {
  if (isolation.master_port_range) {
    isolation.master_port_range = [client] {
      return client->master_port_range();
    };
  }
  return isolation;
}

ConnectionLimits ServerLimits(const Config& config) {
  ConnectionLimits limits;
  limits.max_connections_per_peer = static_cast<int>(
      std::min<uint32_t>(config.max_connections_per_peer, INT_MAX));
  limits.max_connections =
      static_cast<int>(std::min<uint32_t>(config.max_connections, INT_MAX));
  limits.peer_ipv6_prefix_length =
      static_cast<int>(config.peer_ipv6_prefix_length);
  return limits;
}

}  // namespace

Daemon::Daemon(const Config& config, const rendezvous::ClientSecurity& security,
               IsolationOptions isolation)
    : config_(config),
      // Stages get a small base of the agent's environment, never all of
      // it: it may hold the agent's own secrets.
      supervisor_(config.scratch_dir, config.kill_grace,
                  StageBaseEnvironment(CurrentEnvironment(),
                                       config.stage_environment_passthrough),
                  WithMasterPortRange(std::move(isolation), &coordinator_)),
      service_(supervisor_),
      coordinator_(config.coordinator, security),
      exit_outbox_((std::filesystem::path(config.scratch_dir) / ".exit-outbox")
                       .string()) {}

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Start(const Config& config) {
  RaiseOpenFilesLimit("a job on this host");
  // One `tls` section: the agent's server certificate and its client side
  // towards the coordinator (docs/security.md "TLS").
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      rendezvous::LoadServerCredentials(config.tls);
  if (!credentials.ok()) return credentials.status();
  absl::StatusOr<rendezvous::ClientSecurity> security =
      rendezvous::LoadClientSecurity(config.tls);
  if (!security.ok()) return security.status();
  // The exit outbox, process-group records and members' homes live in the
  // scratch directory: refuse to start without one rather than fail each
  // member later.
  {
    std::error_code error;
    const bool created =
        std::filesystem::create_directories(config.scratch_dir, error);
    if (!std::filesystem::is_directory(config.scratch_dir)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "scratch_dir ", config.scratch_dir, " is not a directory",
          error ? absl::StrCat(" (", error.message(), ")") : ""));
    }
    if (access(config.scratch_dir.c_str(), W_OK | X_OK) != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("scratch_dir ", config.scratch_dir,
                       " is not writable: ", std::strerror(errno)));
    }
    // Members reach their own homes in it by name; nobody else may list or
    // write it (the names are other members' gangs and jobs). Only a
    // directory that is the agent's: made now or holding its exit outbox,
    // and never a shared one such as /tmp (sticky or world-writable).
    struct stat info = {};
    const mode_t open_bits = S_IRGRP | S_IWGRP | S_IROTH | S_IWOTH;
    const bool agents =
        created ||
        std::filesystem::exists(
            std::filesystem::path(config.scratch_dir) / ".exit-outbox", error);
    if (agents && stat(config.scratch_dir.c_str(), &info) == 0 &&
        info.st_uid == geteuid() && (info.st_mode & open_bits) != 0 &&
        (info.st_mode & (S_ISVTX | S_IWOTH)) == 0) {
      const mode_t mode = info.st_mode & 07777 & ~open_bits;
      if (chmod(config.scratch_dir.c_str(), mode) == 0) {
        spdlog::info("event=scratch_dir_mode dir={} mode={:04o}",
                     LogValue(config.scratch_dir), mode);
      }
    }
  }
  // Before isolation: member cgroups are confined to the GPUs' devices.
  const GpuInventory inventory = ResolveGpus(config.host.gpus);
  absl::StatusOr<IsolationOptions> isolation =
      PrepareIsolation(config, inventory.gpus);
  if (!isolation.ok()) return isolation.status();
  std::unique_ptr<Daemon> daemon(
      new Daemon(config, *security, std::move(*isolation)));
  // The host token, presented to the coordinator and keying the
  // member tokens this agent accepts.
  if (!config.host_token_file.empty()) {
    absl::StatusOr<std::string> token =
        ReadTokenFile(config.host_token_file, "host_token_file");
    if (!token.ok()) return token.status();
    if (const std::string problem =
            TokenFileModeProblem(config.host_token_file);
        !problem.empty()) {
      spdlog::warn("event=token_file_readable file={} reason={}",
                   LogValue(config.host_token_file), LogValue(problem));
    }
    daemon->coordinator_.AddMetadata(rendezvous::kHostTokenMetadata, *token);
    daemon->service_.SetMemberTokenCheck(
        [coordinator = &daemon->coordinator_](
            const std::string& member_token) -> absl::StatusOr<MemberClaims> {
          absl::StatusOr<v1::CheckMemberTokenResponse> answer =
              coordinator->CheckMemberToken(member_token, kMemberTokenCheck);
          if (!answer.ok()) return answer.status();
          MemberClaims claims;
          claims.gang_id = answer->gang_id();
          claims.epoch = answer->epoch();
          claims.job_id = answer->job_id();
          claims.expires_unix_ms = answer->expires_unix_ms();
          return claims;
        },
        kMemberTokenCacheTtl);
    spdlog::info("event=host_token_on host_token_file={} reason={}",
                 LogValue(config.host_token_file),
                 LogValue("stages run only for admitted members"));
  } else {
    spdlog::warn("event=host_token_off reason={}",
                 LogValue("no host_token_file: this agent runs stages for any "
                          "caller (fine for local use; see docs/security.md)"));
  }
  // Exits a previous agent could not deliver are still owed.
  daemon->exit_outbox_.SetReserve(&daemon->supervisor_.disk_reserve());
  daemon->exit_outbox_.Load();
  daemon->exit_reporter_ = std::make_unique<ExitReporter>(
      daemon->exit_outbox_, daemon->coordinator_, ExitReporter::Options{});
  daemon->lost_teardowns_ = std::make_unique<WorkQueue>(1, 1024);
  daemon->service_.SetMemberLostHandler(
      [reporter = daemon->exit_reporter_.get(), host = config.host.name,
       supervisor = &daemon->supervisor_,
       teardowns = daemon->lost_teardowns_.get()](const v1::StartStage& start) {
        ExitRecord record;
        record.gang_id = start.gang_id();
        record.epoch = start.epoch();
        record.member_index = start.member_index();
        record.job_id = start.job_id();
        record.lost_reason =
            absl::StrCat("its executor went away (the ", start.stage(),
                         " stream to the agent on host ", host, " broke)");
        record.exited_unix_ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(
                std::chrono::system_clock::now().time_since_epoch())
                .count();
        reporter->Report(record);
        // No cleanup stage will come from an executor that went away: tear
        // the member down here, or what its job left running (setsid
        // children) would outlive it under an account the next member gets.
        const std::string member = start.member_id();
        const bool queued = teardowns->TrySubmit([supervisor, member] {
          absl::StatusOr<uint32_t> killed =
              supervisor->TeardownMember(member, /*remove_builds_dir=*/false);
          if (!killed.ok()) {
            spdlog::warn("event=lost_member_teardown_failed member={} error={}",
                         LogValue(member),
                         LogValue(killed.status().ToString()));
            return;
          }
          spdlog::info("event=lost_member_torn_down member={} killed={}",
                       LogValue(member), *killed);
        });
        if (!queued) {
          spdlog::warn("event=lost_member_teardown_failed member={} error={}",
                       LogValue(member), LogValue("too many queued"));
        }
      });
  daemon->service_.SetExitHandler(
      [reporter = daemon->exit_reporter_.get()](const ExitRecord& record) {
        reporter->Report(record);
      });
  // What a previous agent on this scratch dir left running (it died
  // without ending its stages) holds GPUs and reports to nobody: end it
  // before taking new members.
  for (const ProcessLedger::Reaped& group :
       daemon->supervisor_.ReapLeftovers()) {
    spdlog::warn(
        "event=leftover_process_group_ended pgid={} processes={} sigkill={} "
        "reason={}",
        group.pgid, group.processes, group.killed,
        LogValue(group.killed ? "left running by a previous gdt-agent "
                                "(SIGKILL after the kill grace)"
                              : "left running by a previous gdt-agent"));
  }
  absl::StatusOr<std::unique_ptr<AgentServer>> server =
      AgentServer::Start(config.listen_address, daemon->service_, *credentials,
                         ServerLimits(config));
  if (!server.ok()) return server.status();
  daemon->server_ = std::move(*server);
  daemon->server_credentials_ = *credentials;

  const int port = daemon->server_->port();
  absl::StatusOr<HostPort> listen = ParseHostPort(config.listen_address);
  if (!listen.ok()) return listen.status();
  daemon->rebind_address_ = JoinHostPort(listen->host, port);
  const std::string& host =
      IsWildcardHost(listen->host) ? config.host.address : listen->host;
  daemon->bound_endpoint_ = JoinHostPort(host, port);
  daemon->advertise_endpoint_ = !config.advertise_endpoint.empty()
                                    ? config.advertise_endpoint
                                    : JoinHostPort(config.host.address, port);
  spdlog::info(
      "event=agent_listening address={} host={} advertise={} "
      "max_connections_per_peer={} max_connections={}",
      LogValue(daemon->bound_endpoint_), LogValue(config.host.name),
      LogValue(daemon->advertise_endpoint_), config.max_connections_per_peer,
      config.max_connections);
  // gdt-rsh finds this agent through the member's environment.
  daemon->supervisor_.AddStageVariable("GDT_AGENT_ENDPOINT",
                                       daemon->advertise_endpoint_);
  // Job-side clients (gdt-kv, nccl_bootstrap, gdt-rsh) reach the
  // coordinator and this agent with this host's TLS files.
  if (config.tls.enabled) {
    for (const auto& [name, path] :
         {std::pair{"GDT_TLS_CA_FILE", config.tls.ca_file},
          std::pair{"GDT_TLS_CERT_FILE", config.tls.cert_file},
          std::pair{"GDT_TLS_KEY_FILE", config.tls.key_file}}) {
      if (!path.empty()) daemon->supervisor_.AddStageVariable(name, path);
    }
  }

  // A job on this host can use up the agent's descriptors (idle
  // connections, from many addresses within the caps); new connections then
  // wait, while heartbeats, on a connection made before, go on. The agent
  // checks its own endpoint and says in its heartbeats that it is not ready
  // while that fails.
  {
    absl::StatusOr<HostPort> advertised =
        ParseHostPort(daemon->advertise_endpoint_);
    const std::string tls_name = advertised.ok() ? advertised->host : "";
    daemon->endpoint_watch_ = std::make_unique<rendezvous::EndpointWatch>(
        daemon->bound_endpoint_, rendezvous::EndpointWatch::Options{},
        [endpoint = daemon->bound_endpoint_, security = *security, tls_name] {
          return rendezvous::ProbeEndpoint("agent", endpoint, security,
                                           tls_name, kEndpointProbeDeadline);
        },
        [raw = daemon.get()] { return raw->RestartServerWhenIdle(); });
    daemon->endpoint_watch_->Start();
  }

  HostConfig host_config = config.host;
  if (inventory.note.empty()) {
    spdlog::info("event=gpus_found source={} gpus={}",
                 LogValue(inventory.source), inventory.gpus.size());
  } else {
    spdlog::info("event=gpus_found source={} gpus={} note={}",
                 LogValue(inventory.source), inventory.gpus.size(),
                 LogValue(inventory.note));
  }
  host_config.gpus = inventory.gpus;
  daemon->registrar_ = std::make_unique<Registrar>(
      daemon->coordinator_,
      MakeHostSpec(host_config, daemon->advertise_endpoint_),
      Registrar::Options{},
      [supervisor = &daemon->supervisor_] {
        return supervisor->RunningMembers();
      },
      [supervisor = &daemon->supervisor_] {
        std::vector<v1::MemberProgress> progress;
        for (const Supervisor::WatchedStage& stage :
             supervisor->WatchedProgress()) {
          v1::MemberProgress& member = progress.emplace_back();
          member.set_member(stage.member_id);
          member.set_last_progress_unix_ms(
              std::chrono::duration_cast<std::chrono::milliseconds>(
                  stage.progress.last.time_since_epoch())
                  .count());
          if (stage.progress.step.has_value()) {
            member.set_step(*stage.progress.step);
          }
        }
        return progress;
      },
      Registrar::IdleMembers{
          [supervisor = &daemon->supervisor_] {
            return supervisor->IdleMembers();
          },
          [daemon = daemon.get()](const std::vector<std::string>& left) {
            daemon->TearDownLeftMembers(left);
          }},
      [watch = daemon->endpoint_watch_.get()] {
        return watch->NotReadyReason();
      });

  daemon->registrar_->Start();
  if (config.member_disk_max > 0) {
    DiskWatch::Options options;
    options.member_max = config.member_disk_max;
    const uint64_t max = config.member_disk_max;
    Supervisor* supervisor = &daemon->supervisor_;
    daemon->disk_watch_ = std::make_unique<DiskWatch>(
        options, [supervisor] { return supervisor->MemberDiskScopes(); },
        [supervisor, max](const std::string& member_id, const DiskUse& use,
                          const std::string& where, const std::string& line,
                          bool first) {
          absl::StatusOr<uint32_t> stopped =
              supervisor->StopMember(member_id, line);
          if (!stopped.ok()) {
            spdlog::warn("event=member_disk_limit_failed member={} error={}",
                         LogValue(member_id),
                         LogValue(stopped.status().ToString()));
          } else if (*stopped > 0 || first) {
            // Once at least, even when nothing was left to stop (without
            // cgroups, what left the stages' process groups is not found).
            spdlog::warn(
                "event=member_disk_limit member={} bytes={} "
                "deleted_open_bytes={} truncated={} member_disk_max={} "
                "stopped={} where={}",
                LogValue(member_id), use.bytes, use.deleted_bytes,
                use.truncated, max, *stopped, LogValue(where));
          }
        });
    daemon->disk_watch_->Start();
    spdlog::info("event=member_disk_limit_on member_disk_max={}", max);
  }
  return daemon;
}

void Daemon::TearDownLeftMembers(const std::vector<std::string>& left) {
  for (const std::string& member : left) {
    {
      MutexLock lock(left_mu_);
      if (!left_queued_.insert(member).second) continue;  // On its way.
    }
    const bool queued = lost_teardowns_->TrySubmit([this, member] {
      absl::StatusOr<uint32_t> killed = supervisor_.TeardownIdleMember(member);
      {
        MutexLock lock(left_mu_);
        left_queued_.erase(member);
      }
      if (absl::IsFailedPrecondition(killed.status())) {
        // A stage started meanwhile: its executor is there after all.
        spdlog::info("event=left_member_teardown_skipped member={} reason={}",
                     LogValue(member),
                     LogValue(std::string(killed.status().message())));
        return;
      }
      if (!killed.ok()) {
        spdlog::warn("event=left_member_teardown_failed member={} error={}",
                     LogValue(member), LogValue(killed.status().ToString()));
        return;
      }
      spdlog::info(
          "event=left_member_torn_down member={} killed={} reason={}",
          LogValue(member), *killed,
          LogValue("its gang let it go at the coordinator and no executor "
                   "tore it down (its runner is gone)"));
    });
    if (!queued) {
      MutexLock lock(left_mu_);
      left_queued_.erase(member);
      spdlog::warn("event=left_member_teardown_failed member={} error={}",
                   LogValue(member), LogValue("too many queued"));
    }
  }
}

Daemon::~Daemon() { Shutdown(); }

std::string Daemon::NotReadyReason() const {
  return endpoint_watch_ != nullptr ? endpoint_watch_->NotReadyReason() : "";
}

absl::Status Daemon::RestartServerWhenIdle() {
  const size_t running = supervisor_.running_stages();
  if (running > 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("the agent restarts its listener once no stage runs (",
                     running, " running)"));
  }
  spdlog::warn("event=agent_listener_restart address={} reason={}",
               LogValue(rebind_address_),
               LogValue("the endpoint does not answer and no stage runs"));
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now());
    server_.reset();
  }
  absl::StatusOr<std::unique_ptr<AgentServer>> server = AgentServer::Start(
      rebind_address_, service_, server_credentials_, ServerLimits(config_));
  if (!server.ok()) {
    spdlog::error("event=agent_listener_restart_failed address={} error={}",
                  LogValue(rebind_address_),
                  LogValue(server.status().ToString()));
    return server.status();
  }
  server_ = std::move(*server);
  spdlog::info("event=agent_listener_restarted address={}",
               LogValue(rebind_address_));
  return absl::OkStatus();
}

void Daemon::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  if (registrar_ != nullptr) registrar_->Stop();
  if (endpoint_watch_ != nullptr) endpoint_watch_->Stop();
  // Finishes the teardowns already asked for; Supervisor::Shutdown stops
  // everything else.
  lost_teardowns_.reset();
  if (disk_watch_ != nullptr) disk_watch_->Stop();
  const size_t running = supervisor_.running_stages();
  if (running > 0) {
    spdlog::info("event=terminating_stages count={}", running);
  }
  supervisor_.Shutdown();
  // The default tree's shared level goes once no agent uses it.
  if (config_.cgroup_parent.empty()) {
    if (absl::StatusOr<std::string> own = OwnCgroupDir(); own.ok()) {
      rmdir((*own + "/gdt").c_str());
    }
  }
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() + kServerDrain);
  }
  // Tries once more what the shutdown reported; the rest stays on disk.
  exit_reporter_.reset();
}

}  // namespace gdt::agent
