#include "launch/rsh_cli.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/clock.h"
#include "rendezvous/agent_client.h"
#include "rendezvous/kv_client.h"

namespace gdt::launch {
namespace {

constexpr int kExitUsage = 2;
constexpr int kExitCannotRun = 255;   // ssh's code for its own failures.
constexpr int kExitSignalBase = 128;  // 128 + signal, as a shell reports.

// Where `--serve` publishes a member: under gdt/, whose keys have their own
// quota, so a store full of the job's own keys still takes it.
std::string AgentKey(const std::string& address) {
  return absl::StrCat("gdt/rsh/agent/", address);
}

// Where gdt-rsh published it before (a user key): still looked up, so that
// a member served by an older gdt-rsh is found.
std::string LegacyAgentKey(const std::string& address) {
  return absl::StrCat("gdt-rsh/agent/", address);
}

// The member's agent endpoint, published under either key.
absl::StatusOr<std::string> LookUp(rendezvous::KvClient& kv,
                                   const std::string& address,
                                   std::chrono::system_clock::time_point by) {
  absl::StatusOr<std::string> agent = kv.Get(AgentKey(address), by);
  if (absl::IsNotFound(agent.status())) {
    agent = kv.Get(LegacyAgentKey(address), by);
  }
  return agent;
}

}  // namespace

int RunRshCli(int argc, char** argv,
              const std::map<std::string, std::string>& env,
              const std::function<int()>& stop_requested, std::ostream& out,
              std::ostream& err) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    (args.empty() ? err : out)
        << "usage: gdt-rsh [ssh options] HOST COMMAND...   run COMMAND in the "
           "gang member on HOST (via its gdt-agent)\n"
           "       gdt-rsh --serve   publish this member for gdt-rsh; stays "
           "up\n"
           "       gdt-rsh --ready   exit 0 once every member is published\n"
           "Reads GDT_COORDINATOR, GDT_GANG_ID, GDT_EPOCH, GDT_KV_TOKEN. No "
           "sshd, no keys.\n";
    return args.empty() ? kExitUsage : 0;
  }
  absl::StatusOr<rendezvous::KvTarget> target =
      rendezvous::KvTargetFromEnvironment([&env](const char* name) {
        auto it = env.find(name);
        return it == env.end() ? nullptr : it->second.c_str();
      });
  if (!target.ok()) {
    err << "gdt-rsh: " << target.status().message() << "\n";
    return kExitUsage;
  }
  auto var = [&env](const char* name) {
    auto it = env.find(name);
    return it == env.end() ? std::string() : it->second;
  };
  rendezvous::KvClient kv(*target);

  if (args[0] == "--serve") {
    const std::string self = var("GDT_SELF_ADDR");
    const std::string agent = var("GDT_AGENT_ENDPOINT");
    if (self.empty() || agent.empty()) {
      err << "gdt-rsh --serve: needs GDT_SELF_ADDR (set by gdt-launch) and "
             "GDT_AGENT_ENDPOINT (set by gdt-agent)\n";
      return kExitUsage;
    }
    if (absl::Status set =
            kv.Set(AgentKey(self), agent, DeadlineIn(std::chrono::seconds(30)));
        !set.ok()) {
      err << "gdt-rsh --serve: cannot publish this member: " << set.message()
          << "\n";
      return 1;
    }
    err << "gdt-rsh: serving commands for " << self << " through agent "
        << agent << std::endl;
    // The commands themselves run under the agent; this only marks the
    // member as serving until gdt-launch stops it.
    while (stop_requested() == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return 0;
  }
  if (args[0] == "--ready") {
    const std::vector<std::string> peers =
        absl::StrSplit(var("GDT_PEERS"), '\n', absl::SkipEmpty());
    if (peers.empty()) {
      err << "gdt-rsh --ready: GDT_PEERS is not set (run inside a gdt job)\n";
      return kExitUsage;
    }
    int published = 0;
    absl::Status problem;  // Why a member could not be looked up.
    for (const std::string& peer : peers) {
      const absl::StatusOr<std::string> agent =
          LookUp(kv, peer, DeadlineIn(std::chrono::seconds(5)));
      if (agent.ok()) {
        ++published;
      } else if (!absl::IsNotFound(agent.status()) && problem.ok()) {
        problem = agent.status();
      }
    }
    out << published << " of " << peers.size() << " members serve gdt-rsh\n";
    if (!problem.ok()) err << "gdt-rsh --ready: " << problem.message() << "\n";
    return !peers.empty() && published == static_cast<int>(peers.size()) ? 0
                                                                         : 1;
  }

  // ssh-compatible: skip options (those taking a value skip it too).
  static const std::set<std::string> kWithValue = {"-o", "-p", "-l", "-i",
                                                   "-F", "-E", "-b", "-c"};
  size_t i = 0;
  while (i < args.size() && args[i].size() > 1 && args[i][0] == '-') {
    i += kWithValue.count(args[i]) != 0 ? 2 : 1;
  }
  if (i + 1 >= args.size()) {
    err << "gdt-rsh: give HOST and COMMAND (gdt-rsh --help)\n";
    return kExitUsage;
  }
  std::string host = args[i];
  if (const size_t at = host.rfind('@'); at != std::string::npos) {
    host = host.substr(at + 1);  // user@host: the user is ignored.
  }
  const std::string command =
      absl::StrJoin(args.begin() + i + 1, args.end(), " ");
  // Waits for the member's publication in short slices, so that a signal
  // ends gdt-rsh at once here too.
  const auto wait_until = DeadlineIn(std::chrono::seconds(30));
  absl::StatusOr<std::string> agent;
  do {
    agent = kv.Wait(AgentKey(host),
                    std::min(wait_until, DeadlineIn(std::chrono::seconds(1))));
    if (absl::IsDeadlineExceeded(agent.status())) {
      // Not (yet) published under gdt/: an older gdt-rsh's publication?
      if (absl::StatusOr<std::string> legacy =
              kv.Get(LegacyAgentKey(host), DeadlineIn(std::chrono::seconds(5)));
          legacy.ok()) {
        agent = std::move(legacy);
      }
    }
    if (const int signal = stop_requested(); signal != 0) {
      return kExitSignalBase + signal;
    }
  } while ((absl::IsDeadlineExceeded(agent.status()) ||
            absl::IsUnavailable(agent.status())) &&
           std::chrono::system_clock::now() < wait_until);
  if (absl::IsPermissionDenied(agent.status()) ||
      absl::IsUnauthenticated(agent.status()) ||
      absl::IsFailedPrecondition(agent.status())) {
    err << "gdt-rsh: the gang's key-value store refused to look up " << host
        << ": " << agent.status().message() << "\n";
    return kExitCannotRun;
  }
  if (!agent.ok()) {
    err << "gdt-rsh: no gang member on " << host
        << " serves gdt-rsh (is it in GDT_PEERS and running gdt-rsh --serve?): "
        << agent.status().message() << "\n";
    return kExitCannotRun;
  }
  rendezvous::AgentClient client(*agent, target->security);
  v1::ExecInMemberRequest request;
  request.set_gang_id(target->gang_id);
  request.set_token(target->token);
  request.add_argv("/bin/sh");
  request.add_argv("-c");
  request.add_argv(command);
  absl::StatusOr<v1::StageExit> exit = client.ExecInMember(
      request,
      [&out, &err](v1::OutputStream stream, std::string_view data) {
        std::ostream& to = stream == v1::OUTPUT_STREAM_STDERR ? err : out;
        to << data;
        to.flush();
      },
      [&stop_requested] { return stop_requested() != 0; });
  if (const int signal = stop_requested();
      signal != 0 && absl::IsCancelled(exit.status())) {
    // As ssh does when its session is cut: the remote command is stopped
    // (the agent ends its process group) and the code says which signal.
    err << "gdt-rsh: stopped by signal " << signal << "; the command on "
        << host << " was stopped\n";
    return kExitSignalBase + signal;
  }
  if (!exit.ok()) {
    err << "gdt-rsh: " << host << " (agent " << *agent
        << "): " << exit.status().message() << "\n";
    return kExitCannotRun;
  }
  return exit->exit_code();
}

}  // namespace gdt::launch
