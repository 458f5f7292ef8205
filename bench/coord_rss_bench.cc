// Benchmark (e): resident memory of a real `gdt-coord serve` process holding
// 10,000 registered hosts and 1,000 pending gangs (8 members each, 4 joined
// and waiting on open JoinGang streams: 4,000 streams), next to the same
// process idle right after start (measured in the same run).
// Usage: gdt-bench-rss [PATH_TO_GDT_COORD]
#include <signal.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "bench/grpc_bench_support.h"
#include "common/cli_parse.h"
#include "common/exit_code.h"
#include "common/subprocess.h"
#include "rendezvous/channel.h"

namespace gdt::bench {
namespace {

constexpr int kHosts = 10000;
constexpr int kGangs = 1000;
constexpr uint32_t kGangSize = 8;
constexpr uint32_t kJoined = 4;

std::string ReadAll(const std::string& path) {
  std::ifstream file(path);
  return std::string(std::istreambuf_iterator<char>(file), {});
}

// Polls `condition` every 50 ms until it holds or `timeout` passes.
bool WaitFor(const std::function<bool()>& condition,
             std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return condition();
}

// The coordinator hands back within about a second what a burst of calls
// left allocated but unused (docs/operations.md, "Memory"): the RSS that
// stays, read once it has not moved by more than 0.5 MiB in two seconds
// (at most 20 s).
double SettledRssMiB(const std::string& pid) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(20);
  double rss = RssMiB(pid);
  while (std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::seconds(2));
    const double previous = rss;
    rss = RssMiB(pid);
    if (std::abs(rss - previous) <= 0.5) break;
  }
  return rss;
}

int Run(const std::string& binary) {
  char pattern[] = "/tmp/gdt-bench-rss-XXXXXX";
  if (mkdtemp(pattern) == nullptr) return 1;
  const std::string dir = pattern;
  {
    std::ofstream config(dir + "/coord.yaml");
    config << "listen_address: 127.0.0.1:0\nstate_path: " << dir
           << "/coord.db\nmax_nodes_per_job: 8\nlog_level: warn\n"
           << "host_down_after_seconds: 3600\n"
           // All 1,000 pending gangs are in one project, whose 4,000
           // members join at once: no per-project join rate limit.
           << "max_forming_gangs_per_project: " << kGangs << "\n"
           << "join_rate_per_project: 0\n";
  }
  SpawnOptions options;
  options.argv = {binary,        "serve",      "--config", dir + "/coord.yaml",
                  "--port-file", dir + "/port"};
  options.capture_output = false;
  options.output_path = dir + "/coord.log";
  options.die_with_parent = true;
  absl::StatusOr<std::unique_ptr<Subprocess>> coord =
      Subprocess::Spawn(options);
  if (!coord.ok()) {
    std::cerr << coord.status() << "\n";
    return 1;
  }
  if (!WaitFor([&] { return std::filesystem::exists(dir + "/port"); },
               std::chrono::seconds(20))) {
    std::cerr << "gdt-coord did not start: " << ReadAll(dir + "/coord.log");
    return 1;
  }
  const std::string endpoint =
      std::string(absl::StripAsciiWhitespace(ReadAll(dir + "/port")));
  const std::string pid = std::to_string((*coord)->pid());
  const double idle = RssMiB(pid);

  // The server takes at most kMaxStreamsPerConnection streams per
  // connection: enough connections for every waiting member's stream.
  auto stubs = MakeStubs(
      endpoint, 2 * kGangs * kJoined / rendezvous::kMaxStreamsPerConnection);
  std::vector<std::thread> registrars;
  for (int t = 0; t < 8; ++t) {
    registrars.emplace_back([&, t] {
      for (int h = t; h < kHosts; h += 8) {
        v1::RegisterHostRequest request;
        v1::HostSpec* host = request.mutable_host();
        host->set_name(absl::StrCat("gpu-", h));
        host->set_address(
            absl::StrCat("10.", h / 65536, ".", (h / 256) % 256, ".", h % 256));
        host->set_agent_endpoint(host->address() + ":7071");
        host->set_network_interface("eth0");
        (*host->mutable_labels())["rack"] = absl::StrCat("r", h / 40);
        for (uint32_t gpu = 0; gpu < 8; ++gpu) {
          v1::Gpu* g = host->add_gpus();
          g->set_index(gpu);
          g->set_uuid(absl::StrCat("GPU-", h, "-", gpu));
          g->set_model("H100");
          g->set_memory_bytes(80ull << 30);
        }
        grpc::ClientContext context;
        v1::RegisterHostResponse response;
        if (!stubs[t]->RegisterHost(&context, request, &response).ok()) {
          std::cerr << "register failed\n";
          std::abort();
        }
      }
    });
  }
  for (std::thread& thread : registrars) thread.join();
  const double with_hosts = SettledRssMiB(pid);

  // Streams stay open until the coordinator stops.
  Latch ended(static_cast<size_t>(kGangs) * kJoined);
  std::vector<std::unique_ptr<JoinStream>> streams;
  for (int g = 0; g < kGangs; ++g) {
    for (uint32_t index = 1; index <= kJoined; ++index) {
      v1::JoinGangRequest request = JoinRequestFor(g + 1, kGangSize, index);
      request.set_gpus_per_node(8);
      streams.push_back(std::make_unique<JoinStream>(
          stubs[streams.size() % stubs.size()].get(), request, &ended));
      streams.back()->Start();
    }
  }
  auto client = MakeStubs(endpoint, 1);
  int present = 0;
  const bool formed = WaitFor(
      [&] {
        // The status comes in pages (at most 1,000 items each).
        int hosts = 0;
        int gangs = 0;
        present = 0;
        std::string token;
        do {
          grpc::ClientContext context;
          context.set_deadline(std::chrono::system_clock::now() +
                               std::chrono::seconds(20));
          v1::GetStatusRequest request;
          request.set_page_token(token);
          v1::GetStatusResponse response;
          if (!client[0]->GetStatus(&context, request, &response).ok()) {
            return false;
          }
          hosts += response.hosts_size();
          gangs += response.gangs_size();
          for (const v1::GangStatus& gang : response.gangs()) {
            for (const v1::MemberStatus& member : gang.members()) {
              if (member.present()) ++present;
            }
          }
          token = response.next_page_token();
        } while (!token.empty());
        return hosts == kHosts && gangs == kGangs &&
               present == kGangs * static_cast<int>(kJoined);
      },
      std::chrono::seconds(120));
  const double right_after = RssMiB(pid);
  const double loaded = SettledRssMiB(pid);
  std::printf(
      "rss gdt-coord hosts=%d pending_gangs=%d waiting_members=%d: "
      "%.1f MiB (%.1f MiB right after the last join) | idle at start %.1f "
      "MiB, with the hosts only %.1f MiB | loaded/idle=%.1fx | target "
      "<=100MB %s%s\n",
      kHosts, kGangs, present, loaded, right_after, idle, with_hosts,
      loaded / idle, Verdict(loaded * 1.048576, 100),
      formed ? "" : " (NOT all gangs/members seen before the deadline)");
  (*coord)->SignalGroup(SIGTERM);
  (*coord)->WaitUntil(std::chrono::steady_clock::now() +
                      std::chrono::seconds(20));
  // Every stream has ended (the streams must outlive their RPCs).
  if (!ended.WaitFor(std::chrono::seconds(60))) std::abort();
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  return formed ? 0 : 1;
}

}  // namespace
}  // namespace gdt::bench

int main(int argc, char** argv) {
  CLI::App app{
      "gdt-bench-rss: resident memory of a real gdt-coord, idle and holding "
      "10,000 hosts and 1,000 pending gangs (docs/benchmarks.md)"};
  std::string binary = GDT_COORD_BIN;
  app.add_option("gdt_coord", binary, "the gdt-coord binary to measure")
      ->check(CLI::ExistingFile)
      ->capture_default_str();
  if (std::optional<int> code = gdt::ParseCommandLine(app, argc, argv)) {
    return *code;
  }
  return gdt::bench::Run(binary);
}
