// kv_exchange_bench: how long the NCCL unique-id exchange through the gang
// key-value store takes for 8, 64 and 1,024 members on loopback, as p50/p99
// over repetitions and as a ratio to one KV Get round trip measured in the
// same run (the baseline), so results from different machines compare.
//
// One process plays the whole gang: a real gdt-coord server (both gRPC
// services) on 127.0.0.1:0 and one thread per member with its own KvClient;
// members share CHANNELS gRPC channels (HTTP/2 connections) round-robin so
// 1,024 members do not need 2,048 file descriptors. Each repetition uses a
// fresh communicator name; its time runs from releasing all members (all
// threads already started and waiting) until the last one holds every id.
// The ids are stand-in 128-byte blobs: this measures the exchange, not
// ncclGetUniqueId. Above 256 members there are several roots (4 for 1,024),
// as nccl_bootstrap does.
//
// Usage: kv_exchange_bench [--members 8,64,1024] [--reps 8:200,64:100,1024:30]
//                          [--channels 64]
// Prints a Markdown table (docs/benchmarks.md).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <latch>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/cli_parse.h"
#include "common/clock.h"
#include "coordinator/server.h"
#include "grpcpp/grpcpp.h"
#include "nccl_bootstrap/id_exchange.h"
#include "rendezvous/channel.h"

namespace {

using Clock = std::chrono::steady_clock;
using Micros = std::chrono::duration<double, std::micro>;

double Percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  const size_t index = static_cast<size_t>(p * (values.size() - 1) + 0.5);
  return values[std::min(index, values.size() - 1)];
}

struct Options {
  std::vector<int> members = {8, 64, 1024};
  std::map<int, int> reps = {{8, 200}, {64, 100}, {1024, 30}};
  int channels = 64;
};

// "8,64,1024": member counts, each at least 1.
std::string ParseMembers(const std::string& value, std::vector<int>& members) {
  members.clear();
  for (absl::string_view part : absl::StrSplit(value, ',')) {
    int n = 0;
    if (!absl::SimpleAtoi(part, &n) || n < 1) {
      return absl::StrCat("'", part, "' is not a member count of at least 1");
    }
    members.push_back(n);
  }
  return "";
}

// "8:200,64:100": repetitions per member count, each at least 1.
std::string ParseReps(const std::string& value, std::map<int, int>& reps) {
  for (absl::string_view part : absl::StrSplit(value, ',')) {
    std::vector<std::string> pair = absl::StrSplit(part, ':');
    int n = 0;
    int count = 0;
    if (pair.size() != 2 || !absl::SimpleAtoi(pair[0], &n) ||
        !absl::SimpleAtoi(pair[1], &count) || count < 1) {
      return absl::StrCat("'", part, "' is not MEMBERS:REPS with REPS >= 1");
    }
    reps[n] = count;
  }
  return "";
}

// One exchange among `nranks` member threads; returns its duration or a
// negative value after printing the first error.
double ExchangeOnce(const std::vector<std::shared_ptr<grpc::Channel>>& channels,
                    const gdt::rendezvous::KvTarget& target, int nranks,
                    const std::string& name) {
  const int nroots = gdt::nccl::RootCount(nranks);
  std::latch ready(nranks + 1);
  std::latch go(1);
  std::atomic<bool> failed{false};
  std::vector<Clock::time_point> done(static_cast<size_t>(nranks));
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(nranks));
  for (int r = 0; r < nranks; ++r) {
    threads.emplace_back([&, r] {
      gdt::rendezvous::KvClient kv(
          target, channels[static_cast<size_t>(r) % channels.size()]);
      ready.arrive_and_wait();
      go.wait();
      absl::StatusOr<std::vector<gdt::nccl::UniqueId>> ids =
          gdt::nccl::ExchangeUniqueIds(
              kv, gdt::nccl::RankInfo{r, nranks, 0}, nroots, name,
              [r]() -> absl::StatusOr<gdt::nccl::UniqueId> {
                gdt::nccl::UniqueId id;
                id.fill(static_cast<char>(r));
                return id;
              },
              std::chrono::system_clock::now() + std::chrono::seconds(60));
      done[static_cast<size_t>(r)] = Clock::now();
      if (!ids.ok() && !failed.exchange(true)) {
        std::fprintf(stderr, "kv_exchange_bench: rank %d: %s\n", r,
                     std::string(ids.status().message()).c_str());
      }
    });
  }
  ready.arrive_and_wait();
  const Clock::time_point start = Clock::now();
  go.count_down();
  for (std::thread& thread : threads) thread.join();
  if (failed) return -1;
  return Micros(*std::max_element(done.begin(), done.end()) - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app(
      "NCCL unique-id exchange through the gang key-value store of an "
      "in-process coordinator, at each member count; prints percentiles",
      "kv_exchange_bench");
  app.add_option_function<std::string>(
         "--members",
         [&options](const std::string& value) {
           if (std::string error = ParseMembers(value, options.members);
               !error.empty()) {
             throw CLI::ValidationError("--members", error);
           }
         },
         "member counts, comma-separated")
      ->default_str("8,64,1024");
  app.add_option_function<std::string>(
         "--reps",
         [&options](const std::string& value) {
           if (std::string error = ParseReps(value, options.reps);
               !error.empty()) {
             throw CLI::ValidationError("--reps", error);
           }
         },
         "exchanges per member count, MEMBERS:REPS comma-separated")
      ->default_str("8:200,64:100,1024:30");
  app.add_option("--channels", options.channels,
                 "gRPC channels the members share")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  if (std::optional<int> code = gdt::ParseCommandLine(app, argc, argv)) {
    return *code;
  }
  gdt::SystemClock clock;
  gdt::coordinator::Config config;
  config.listen_address = "127.0.0.1:0";
  config.state_path = ":memory:";
  config.kv_max_keys_per_gang = 1 << 20;
  absl::StatusOr<std::unique_ptr<gdt::coordinator::CoordinatorServer>> server =
      gdt::coordinator::CoordinatorServer::Start(config, clock);
  if (!server.ok()) {
    std::fprintf(stderr, "kv_exchange_bench: %s\n",
                 std::string(server.status().message()).c_str());
    return 1;
  }
  (*server)->coordinator().kv().OpenGang("bench", 1, "token");
  const gdt::rendezvous::KvTarget target{
      (*server)->bound_address(), "bench", 1, "token", {}};
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < options.channels; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("gdt.bench.channel", i);  // Distinct connections.
    channels.push_back(grpc::CreateCustomChannel(
        target.endpoint, grpc::InsecureChannelCredentials(), args));
  }

  // Baseline: one Get round trip of a 128-byte value.
  gdt::rendezvous::KvClient baseline(target, channels[0]);
  const auto far = [] {
    return std::chrono::system_clock::now() + std::chrono::seconds(10);
  };
  if (!baseline.Set("baseline", std::string(128, 'x'), far()).ok()) return 1;
  std::vector<double> round_trips;
  for (int i = 0; i < 2000; ++i) {
    const Clock::time_point start = Clock::now();
    if (!baseline.Get("baseline", far()).ok()) return 1;
    round_trips.push_back(Micros(Clock::now() - start).count());
  }
  const double rtt_p50 = Percentile(round_trips, 0.5);
  std::printf(
      "baseline: KV Get round trip p50 %.0f us, p99 %.0f us "
      "(2000 calls)\n\n",
      rtt_p50, Percentile(round_trips, 0.99));
  std::printf(
      "| members | roots | reps | p50 (ms) | p99 (ms) | p50 / Get "
      "RTT |\n| ---: | ---: | ---: | ---: | ---: | ---: |\n");
  int exit_code = 0;
  int sequence = 0;
  for (int members : options.members) {
    const int reps = options.reps.count(members) ? options.reps[members] : 20;
    // One unmeasured warm-up (threads, connections).
    ExchangeOnce(channels, target, members,
                 "warmup-" + std::to_string(members));
    std::vector<double> times;
    for (int rep = 0; rep < reps; ++rep) {
      const double micros = ExchangeOnce(channels, target, members,
                                         "c" + std::to_string(sequence++));
      if (micros < 0) {
        exit_code = 1;
        break;
      }
      times.push_back(micros);
    }
    if (times.empty()) continue;
    const double p50 = Percentile(times, 0.5);
    std::printf("| %d | %d | %zu | %.2f | %.2f | %.0f |\n", members,
                gdt::nccl::RootCount(members), times.size(), p50 / 1000,
                Percentile(times, 0.99) / 1000, p50 / rtt_p50);
    std::fflush(stdout);
  }
  (*server)->Shutdown();
  return exit_code;
}
