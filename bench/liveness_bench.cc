// Benchmark (f): liveness under a forged-join flood. A real gdt-coord
// server (CoordinatorServer: member verification against a fake GitLab
// whose job API answers in 1 s, SQLite in a temporary directory) on
// 127.0.0.1; N simulated hosts register and heartbeat as gdt-agent does
// (sleep one interval, one Heartbeat with a 5 s deadline, repeat). Two
// phases in the same run: quiet, then 300 JoinGang calls per second, each
// with its own forged job token, so that no refusal can be reused.
// Reports each phase's heartbeat latency and how many hosts the
// coordinator saw as down (sampled every 200 ms), with the target: flood
// p99 at most twice the quiet p99, zero hosts down.
// Heartbeats go where gdt-agent sends them: to the liveness port the
// coordinator names at RegisterHost (--main-port: to the main port, as
// before the liveness server existed, for comparison).
// Usage: gdt-bench-liveness [--quick] [--hosts N] [--joins-per-second R]
//        [--main-port]
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "bench/grpc_bench_support.h"
#include "common/cli_parse.h"
#include "common/clock.h"
#include "common/exit_code.h"
#include "coordinator/server.h"
#include "gitlab/fake_gitlab_api.h"
#include "rendezvous/metadata.h"
#include "spdlog/spdlog.h"

namespace gdt::bench {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

// What one phase saw.
struct Phase {
  std::mutex mu;
  std::vector<double> latencies_ms;
  int64_t failed = 0;
  std::map<grpc::StatusCode, int64_t> joins_by_code;
  int64_t joins_started = 0;
  int hosts_down_max = 0;
};

// One forged member: a JoinGang stream that records how it ended.
class FloodJoin final : public grpc::ClientReadReactor<v1::JoinGangEvent> {
 public:
  FloodJoin(v1::Coordinator::Stub* stub, int64_t serial, Phase* phase,
            std::atomic<int64_t>* outstanding)
      : phase_(phase), outstanding_(outstanding) {
    request_ = JoinRequestFor(/*pipeline=*/1000 + serial, /*size=*/2, 1);
    context_.AddMetadata(rendezvous::kJobTokenMetadata,
                         absl::StrCat("forged-token-", serial));
    context_.set_deadline(std::chrono::system_clock::now() + seconds(10));
    ++*outstanding_;
    stub->async()->JoinGang(&context_, &request_, this);
    StartRead(&event_);
    StartCall();
  }
  void OnReadDone(bool ok) override {
    if (ok) StartRead(&event_);
  }
  void OnDone(const grpc::Status& status) override {
    {
      std::lock_guard<std::mutex> lock(phase_->mu);
      ++phase_->joins_by_code[status.error_code()];
    }
    --*outstanding_;
    delete this;
  }

 private:
  Phase* phase_;
  std::atomic<int64_t>* outstanding_;
  grpc::ClientContext context_;
  v1::JoinGangRequest request_;
  v1::JoinGangEvent event_;
};

std::string HostName(int index) { return absl::StrCat("bench-host-", index); }

void Report(const char* name, Phase& phase, double bound_ms) {
  std::lock_guard<std::mutex> lock(phase.mu);
  const Stats stats = Summarize(phase.latencies_ms);
  std::cout << "liveness " << name << ": heartbeats=" << stats.n
            << " failed=" << phase.failed << " p50_ms=" << stats.p50
            << " p99_ms=" << stats.p99 << " max_ms=" << stats.max
            << " hosts_down_max=" << phase.hosts_down_max;
  if (phase.joins_started > 0) {
    std::cout << " forged_joins=" << phase.joins_started << " (";
    const char* separator = "";
    for (const auto& [code, count] : phase.joins_by_code) {
      std::cout << separator << "code " << code << ": " << count;
      separator = ", ";
    }
    std::cout << ")";
  }
  if (bound_ms > 0) {
    std::cout << " target p99<=" << bound_ms << "ms and 0 down: "
              << (stats.p99 <= bound_ms && phase.hosts_down_max == 0 &&
                          phase.failed == 0
                      ? "MET"
                      : "MISSED");
  }
  std::cout << std::endl;
}

int Run(int argc, char** argv) {
  CLI::App app{
      "gdt-bench-liveness: heartbeat latency and hosts seen down, quiet and "
      "under a flood of forged JoinGang calls (docs/benchmarks.md)"};
  bool quick = false;
  int hosts = 100;
  int joins_per_second = 300;
  bool main_port = false;
  app.add_flag("--quick", quick, "12 s phases instead of 30 s");
  app.add_option("--hosts", hosts, "simulated hosts heartbeating")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--joins-per-second", joins_per_second,
                 "forged JoinGang calls per second in the flood phase")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_flag("--main-port", main_port,
               "heartbeat to the main port instead of the liveness port");
  if (std::optional<int> code = ParseCommandLine(app, argc, argv)) {
    return *code;
  }
  spdlog::set_level(spdlog::level::err);
  const seconds phase_length(quick ? 12 : 30);

  gitlab::FakeGitLabApi::Options gitlab_options;
  gitlab_options.job_answer_delay = seconds(1);
  absl::StatusOr<std::unique_ptr<gitlab::FakeGitLabApi>> gitlab =
      gitlab::FakeGitLabApi::Start(gitlab_options);
  if (!gitlab.ok()) {
    std::cerr << gitlab.status() << std::endl;
    return 1;
  }
  char pattern[] = "/tmp/gdt-bench-liveness-XXXXXX";
  if (mkdtemp(pattern) == nullptr) return 1;
  const std::string dir = pattern;
  SystemClock clock;
  coordinator::Config config;
  config.listen_address = "127.0.0.1:0";
  config.state_path = dir + "/coord.db";
  config.gitlab_url = (*gitlab)->url();
  // The instance the forged joins name (JoinRequestFor): trusted, so that
  // each forged join costs a GitLab check, not just the instance check.
  config.gitlab_instance_url = "https://gitlab.example.com";
  // Defaults: heartbeat every 2 s, down after 10 s without one.
  absl::StatusOr<std::unique_ptr<coordinator::CoordinatorServer>> server =
      coordinator::CoordinatorServer::Start(config, clock);
  if (!server.ok()) {
    std::cerr << server.status() << std::endl;
    return 1;
  }
  const std::string endpoint = (*server)->bound_address();
  std::cout << "# liveness: " << hosts << " hosts heartbeating every "
            << config.heartbeat_interval.count() << " s (down after "
            << config.host_down_after.count() << " s), " << joins_per_second
            << " forged joins/s in the flood phase, GitLab answers in 1 s, "
            << phase_length.count() << " s per phase\n";

  auto host_stubs = MakeStubs(endpoint, hosts);
  uint32_t liveness_port = 0;
  for (int i = 0; i < hosts; ++i) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + seconds(10));
    v1::RegisterHostRequest request;
    request.mutable_host()->set_name(HostName(i));
    request.mutable_host()->set_address("127.0.0.1");
    request.mutable_host()->set_agent_endpoint("127.0.0.1:1");
    request.mutable_host()->set_cpu_slots(1);
    v1::RegisterHostResponse response;
    const grpc::Status status =
        host_stubs[i]->RegisterHost(&context, request, &response);
    if (!status.ok()) {
      std::cerr << "register " << HostName(i) << ": " << status.error_message()
                << std::endl;
      return 1;
    }
    liveness_port = response.liveness_port();
  }
  if (!main_port && liveness_port != 0) {
    host_stubs = MakeStubs(absl::StrCat("127.0.0.1:", liveness_port), hosts);
  }
  std::cout << "# heartbeats to "
            << (!main_port && liveness_port != 0
                    ? absl::StrCat("the liveness port ", liveness_port)
                    : std::string("the main port"))
            << "\n";

  Phase quiet;
  Phase flood;
  std::atomic<Phase*> current{&quiet};
  std::atomic<bool> stop{false};

  // The agents: sleep one interval, heartbeat, repeat; started spread over
  // one interval as real agents are.
  std::vector<std::thread> agents;
  for (int i = 0; i < hosts; ++i) {
    agents.emplace_back([&, i] {
      const auto interval = milliseconds(config.heartbeat_interval);
      Clock::time_point next = Clock::now() + interval * i / hosts;
      while (!stop) {
        std::this_thread::sleep_until(next);
        if (stop) break;
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() + seconds(5));
        v1::HeartbeatRequest request;
        request.set_host_name(HostName(i));
        v1::HeartbeatResponse response;
        Phase* phase = current.load();
        const Clock::time_point start = Clock::now();
        const grpc::Status status =
            host_stubs[i]->Heartbeat(&context, request, &response);
        const Clock::time_point end = Clock::now();
        {
          std::lock_guard<std::mutex> lock(phase->mu);
          if (status.ok()) {
            phase->latencies_ms.push_back(MillisSince(start, end));
          } else {
            ++phase->failed;
          }
        }
        next = end + interval;
      }
    });
  }

  // What the coordinator itself thinks of the hosts.
  std::thread watcher([&] {
    while (!stop) {
      const v1::GetStatusResponse status = (*server)->Status();
      int down = 0;
      for (const v1::HostStatus& host : status.hosts()) {
        if (host.state() == v1::HOST_STATE_DOWN) ++down;
      }
      Phase* phase = current.load();
      {
        std::lock_guard<std::mutex> lock(phase->mu);
        phase->hosts_down_max = std::max(phase->hosts_down_max, down);
      }
      std::this_thread::sleep_for(milliseconds(200));
    }
  });

  std::this_thread::sleep_for(phase_length);
  current = &flood;
  const int gitlab_before = (*gitlab)->RequestCount("/api/v4/job");
  auto flood_stubs = MakeStubs(endpoint, 16);
  std::atomic<int64_t> outstanding{0};
  {
    const Clock::time_point start = Clock::now();
    const Clock::time_point end = start + phase_length;
    int64_t serial = 0;
    while (Clock::now() < end) {
      const Clock::time_point due =
          start + std::chrono::microseconds(serial * 1000000 /
                                            std::max(joins_per_second, 1));
      std::this_thread::sleep_until(due);
      new FloodJoin(flood_stubs[serial % flood_stubs.size()].get(), serial,
                    &flood, &outstanding);
      ++serial;
    }
    std::lock_guard<std::mutex> lock(flood.mu);
    flood.joins_started = serial;
  }
  const Clock::time_point drain_deadline = Clock::now() + seconds(30);
  while (outstanding > 0 && Clock::now() < drain_deadline) {
    std::this_thread::sleep_for(milliseconds(50));
  }
  stop = true;
  for (std::thread& agent : agents) agent.join();
  watcher.join();
  const int gitlab_calls =
      (*gitlab)->RequestCount("/api/v4/job") - gitlab_before;

  double quiet_p99 = 0;
  {
    std::lock_guard<std::mutex> lock(quiet.mu);
    quiet_p99 = Summarize(quiet.latencies_ms).p99;
  }
  Report("quiet", quiet, 0);
  Report("flood", flood, 2 * quiet_p99);
  std::cout << "liveness flood: GitLab job API calls=" << gitlab_calls
            << " coordinator RSS MiB=" << RssMiB() << std::endl;
  (*server)->Shutdown();
  server->reset();
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  return 0;
}

}  // namespace
}  // namespace gdt::bench

int main(int argc, char** argv) { return gdt::bench::Run(argc, argv); }
