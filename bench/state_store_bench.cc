// Benchmark: the state store under the scheduler, SQLite vs etcd.
// Both stores run in the same process and the same run, driven through the
// real Scheduler (no gRPC, so only the store differs):
//  - formation: an N-member CPU gang (N = 8, 64) from its first Join to its
//    Admit returning: N SaveMember writes + one SaveGang (the admission,
//    one transaction);
//  - join throughput: Joins per second into one large forming gang (each a
//    SaveMember write), one caller, for --seconds.
// SQLite is a WAL file under /tmp; etcd is a single local node started by
// the benchmark (Debian's etcd 3.4, data dir under /tmp) unless --etcd
// host:port,... names one. Reported as etcd/SQLite ratios.
// Usage: gdt-bench-state-store [--quick] [--etcd host:port,...]
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "common/clock.h"
#include "coordinator/scheduler.h"
#include "spdlog/spdlog.h"
#include "state/etcd_client.h"
#include "state/etcd_store.h"
#include "state/sqlite_store.h"
#include "testing/etcd_test_server.h"

namespace gdt::bench {
namespace {

using Clock = std::chrono::steady_clock;
using coordinator::JoinRequest;
using coordinator::Scheduler;
using coordinator::SchedulerOptions;
using state::GangKey;
using state::HostSpec;
using state::StateStore;

coordinator::JoinRequest Member(const state::GangKey& key, uint32_t index) {
  coordinator::JoinRequest request;
  request.key = key;
  request.member_index = index;
  request.job_id = key.pipeline_id * 100000 + index;
  request.job_name = absl::StrCat("train ", index, "/", key.size);
  request.procs_per_node = 1;
  return request;
}

std::unique_ptr<Scheduler> NewScheduler(const gdt::Clock& clock,
                                        state::StateStore& store) {
  SchedulerOptions options;
  options.max_nodes_per_job = 100000;
  options.join_rate_per_project = 0;  // Join throughput is measured.
  options.master_port_min = 20000;
  options.master_port_max = 60000;
  options.host_down_after = std::chrono::hours(24);
  absl::StatusOr<std::unique_ptr<Scheduler>> scheduler =
      Scheduler::Create(clock, store, options);
  if (!scheduler.ok()) {
    std::cerr << "scheduler: " << scheduler.status() << "\n";
    return nullptr;
  }
  for (int i = 0; i < 64; ++i) {
    state::HostSpec host;
    host.name = absl::StrCat("cpu-", i);
    host.address = absl::StrCat("10.0.", i / 250, ".", i % 250 + 1);
    host.agent_endpoint = host.address + ":7071";
    host.cpu_slots = 64;
    if (!scheduler.value()->RegisterHost(host).ok()) return nullptr;
  }
  return std::move(*scheduler);
}

// Milliseconds per formation of `runs` gangs of `members`.
std::vector<double> Formations(Scheduler& scheduler, uint32_t members, int runs,
                               int64_t* pipeline, uint64_t* stream) {
  std::vector<double> samples;
  uint32_t port = 20000;
  for (int run = 0; run < runs; ++run) {
    const state::GangKey key{"https://gitlab.example.com", 5, ++*pipeline,
                             "train", members};
    const Clock::time_point start = Clock::now();
    for (uint32_t index = 1; index <= members; ++index) {
      if (!scheduler.Join(Member(key, index), ++*stream).ok()) return {};
    }
    std::vector<coordinator::AdmissionProposal> proposals = scheduler.Plan();
    if (proposals.size() != 1 || !scheduler.Admit(proposals[0], port++).ok()) {
      return {};
    }
    samples.push_back(MillisSince(start, Clock::now()));
  }
  return samples;
}

// Joins per second into one gang that never completes.
double JoinRate(Scheduler& scheduler, std::chrono::milliseconds duration,
                int64_t* pipeline, uint64_t* stream) {
  // Fits the 64 x 64 slots, so it is feasible, but never gets them all.
  const state::GangKey key{"https://gitlab.example.com", 5, ++*pipeline, "wide",
                           4000};
  const Clock::time_point start = Clock::now();
  uint32_t joins = 0;
  while (Clock::now() - start < duration && joins < key.size - 1) {
    absl::StatusOr<std::string> joined =
        scheduler.Join(Member(key, joins + 1), ++*stream);
    if (!joined.ok()) {
      std::cerr << "join: " << joined.status() << "\n";
      return -1;
    }
    ++joins;
  }
  return joins / std::chrono::duration<double>(Clock::now() - start).count();
}

struct Result {
  Stats formation8;
  Stats formation64;
  double joins_per_s = 0;
};

bool Measure(state::StateStore& store, bool quick, Result& result) {
  SystemClock clock;
  std::unique_ptr<Scheduler> scheduler = NewScheduler(clock, store);
  if (scheduler == nullptr) return false;
  int64_t pipeline = 1000;
  uint64_t stream = 0;
  std::vector<double> f8 =
      Formations(*scheduler, 8, quick ? 20 : 100, &pipeline, &stream);
  std::vector<double> f64 =
      Formations(*scheduler, 64, quick ? 5 : 30, &pipeline, &stream);
  if (f8.empty() || f64.empty()) return false;
  result.formation8 = Summarize(f8);
  result.formation64 = Summarize(f64);
  result.joins_per_s =
      JoinRate(*scheduler, std::chrono::milliseconds(quick ? 1000 : 3000),
               &pipeline, &stream);
  return result.joins_per_s > 0;
}

int Main(int argc, char** argv) {
  bool quick = false;
  std::string etcd_endpoints;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--etcd") == 0 && i + 1 < argc) {
      etcd_endpoints = argv[++i];
    } else {
      std::cerr << "usage: gdt-bench-state-store [--quick] [--etcd "
                   "host:port,...]\n";
      return 2;
    }
  }
  spdlog::set_level(spdlog::level::warn);

  char pattern[] = "/tmp/gdt-bench-store-XXXXXX";
  if (mkdtemp(pattern) == nullptr) return 1;
  const std::string dir = pattern;
  Result sqlite;
  {
    absl::StatusOr<std::unique_ptr<state::SqliteStore>> store =
        state::SqliteStore::Open(dir + "/coord.db");
    const bool ok = store.ok() && Measure(**store, quick, sqlite);
    store = absl::InternalError("closed");  // Closes the database first.
    std::filesystem::remove_all(dir);
    if (!ok) {
      std::cerr << "sqlite run failed\n";
      return 1;
    }
  }

  std::unique_ptr<test::EtcdTestServer> local;
  std::vector<std::string> endpoints =
      absl::StrSplit(etcd_endpoints, ',', absl::SkipEmpty());
  if (endpoints.empty()) {
    absl::StatusOr<std::unique_ptr<test::EtcdTestServer>> started =
        test::EtcdTestServer::Start();
    if (!started.ok()) {
      std::cerr << "etcd: " << started.status() << "\n";
      return 1;
    }
    local = std::move(*started);
    endpoints = local->endpoints();
  }
  Result etcd;
  {
    absl::StatusOr<std::unique_ptr<state::EtcdClient>> client =
        state::EtcdClient::Create(endpoints, std::chrono::seconds(5));
    if (!client.ok()) return 1;
    absl::StatusOr<std::unique_ptr<state::EtcdStore>> store =
        state::EtcdStore::Open(std::move(*client),
                               absl::StrCat("bench-", getpid()));
    if (!store.ok() || !Measure(**store, quick, etcd)) {
      std::cerr << "etcd run failed\n";
      return 1;
    }
  }

  auto line = [](const char* what, const Stats& a, const Stats& b) {
    std::printf(
        "state_store %s runs=%zu sqlite p50=%.2fms p99=%.2fms | etcd "
        "p50=%.2fms p99=%.2fms | etcd/sqlite p50=%.1fx\n",
        what, a.n, a.p50, a.p99, b.p50, b.p99, b.p50 / a.p50);
  };
  line("formation members=8 ", sqlite.formation8, etcd.formation8);
  line("formation members=64", sqlite.formation64, etcd.formation64);
  std::printf(
      "state_store joins/s (one caller) sqlite=%.0f etcd=%.0f | "
      "sqlite/etcd=%.1fx\n",
      sqlite.joins_per_s, etcd.joins_per_s,
      sqlite.joins_per_s / etcd.joins_per_s);
  return 0;
}

}  // namespace
}  // namespace gdt::bench

int main(int argc, char** argv) { return gdt::bench::Main(argc, argv); }
