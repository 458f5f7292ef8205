// Benchmark (a): gang formation with every join sent at once, from the first
// JoinGang call to the last member's Admitted event, at 8 / 64 / 1,024 /
// 4,096 members, against the real in-process coordinator on loopback; next
// to a naive barrier (a gRPC service that only counts joins and releases
// everyone with an equally large Admitted event) measured in the same run.
// Both send the compact assignment gdt-executor asks for (rank, world size,
// master, digest of the peer list; no peer list); with --full-peers both send
// every member the whole peer list instead, as executors before compact
// assignments asked for. With --etcd the same formations run, after each
// size's SQLite runs, on a second coordinator whose state is in etcd (three
// local nodes started here, or --etcd=host:port,...), reported next to the
// SQLite figures of the same run.
// Usage: gdt-bench-formation [--quick] [--full-peers] [--barrier-only]
//        [--sizes=8,64,...] [--etcd[=host:port,...]]
#include <algorithm>
#include <cstring>
#include <iostream>
#include <map>
#include <mutex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "bench/grpc_bench_support.h"
#include "spdlog/spdlog.h"
#include "state/model.h"

namespace gdt::bench {
namespace {

using Clock = std::chrono::steady_clock;
using Stubs = std::vector<std::unique_ptr<v1::Coordinator::Stub>>;

// A formation slower than this ends the benchmark with a DID NOT COMPLETE
// line (the largest sizes are run last).
constexpr std::chrono::seconds kFormationTimeout{120};

// The naive barrier: holds each JoinGang stream until `size` members of its
// gang have joined, then writes every member an Admitted event (the same
// compact payload a real assignment has: no peer list, its digest) and ends
// the streams.
class BarrierService final : public v1::Coordinator::CallbackService {
 public:
  explicit BarrierService(bool full_peers) : full_peers_(full_peers) {}

  class Stream final : public grpc::ServerWriteReactor<v1::JoinGangEvent> {
   public:
    void Admit(const v1::JoinGangEvent& event) {
      event_ = event;
      StartWriteAndFinish(&event_, grpc::WriteOptions(), grpc::Status::OK);
    }
    void OnDone() override { delete this; }

   private:
    v1::JoinGangEvent event_;
  };

  grpc::ServerWriteReactor<v1::JoinGangEvent>* JoinGang(
      grpc::CallbackServerContext*,
      const v1::JoinGangRequest* request) override {
    auto* stream = new Stream();
    std::vector<std::pair<uint32_t, Stream*>> release;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto& waiting = gangs_[request->key().pipeline_id()];
      waiting.emplace_back(request->member_index(), stream);
      if (waiting.size() == request->key().size()) {
        release = std::move(waiting);
        gangs_.erase(request->key().pipeline_id());
      }
    }
    if (!release.empty()) {
      v1::JoinGangEvent event;
      v1::Assignment* assignment =
          event.mutable_admitted()->mutable_assignment();
      assignment->set_gang_id(absl::StrCat("bench-", request->key().size()));
      assignment->set_num_nodes(request->key().size());
      assignment->set_master_addr("127.0.0.1");
      assignment->set_master_port(29500);
      assignment->set_world_size(request->key().size());
      assignment->set_host_name("host-00");
      assignment->set_host_address("10.0.0.0");
      assignment->set_agent_endpoint("10.0.0.0:7071");
      assignment->set_coordinator_endpoint("127.0.0.1:7070");
      // A digest-sized stand-in (64 hex digits), as in a compact assignment.
      assignment->set_peers_sha256(std::string(64, 'f'));
      if (full_peers_) {
        for (size_t i = 0; i < release.size(); ++i) {
          assignment->add_peers("10.0.0.0");
        }
      }
      for (auto& [index, waiting_stream] : release) {
        assignment->set_node_rank(index - 1);
        waiting_stream->Admit(event);
      }
    }
    return stream;
  }

 private:
  const bool full_peers_;
  std::mutex mu_;
  std::map<int64_t, std::vector<std::pair<uint32_t, Stream*>>> gangs_;
};

// One formation: `size` joins started back to back; returns milliseconds
// to the last Admitted, or -1 when a member was not admitted.
double FormOnce(Stubs& stubs, int64_t pipeline, uint32_t size, bool full_peers,
                const char* what = "gdt") {
  Latch done(size);
  std::vector<std::unique_ptr<JoinStream>> streams;
  streams.reserve(size);
  for (uint32_t index = 1; index <= size; ++index) {
    v1::JoinGangRequest request = JoinRequestFor(pipeline, size, index);
    request.set_compact_assignment(!full_peers);
    streams.push_back(std::make_unique<JoinStream>(
        stubs[index % stubs.size()].get(), request, &done));
  }
  const Clock::time_point start = Clock::now();
  for (auto& stream : streams) stream->Start();
  if (!done.WaitFor(kFormationTimeout)) {
    // The streams still reference the latch and the stubs: report and end
    // the process here rather than tear them down mid-RPC.
    std::printf(
        "formation members=%-5u %s did NOT complete within %llds | "
        "target p99<=%gms MISSED\n",
        size, what, static_cast<long long>(kFormationTimeout.count()),
        size == 4096   ? 400.0
        : size == 1024 ? 60.0
                       : 0.0);
    std::fflush(stdout);
    std::_Exit(0);
  }
  Clock::time_point last = start;
  for (const auto& stream : streams) {
    if (!stream->admitted()) {
      std::cerr << "member not admitted: " << stream->status().error_message()
                << "\n";
      return -1;
    }
    last = std::max(last, stream->admitted_at());
  }
  return MillisSince(start, last);
}

}  // namespace
}  // namespace gdt::bench

int main(int argc, char** argv) {
  using namespace gdt::bench;
  bool quick = false;
  bool barrier_only = false;
  bool full_peers = false;
  bool with_etcd = false;
  std::string etcd_endpoints;
  std::vector<uint32_t> sizes = {8, 64, 1024, 4096};
  constexpr const char* kUsage =
      "usage: gdt-bench-formation [--quick] [--full-peers] [--barrier-only] "
      "[--sizes=N,N,...] [--etcd[=host:port,...]]\n";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      return 0;
    } else if (arg == "--quick") {
      quick = true;
    } else if (arg == "--barrier-only") {
      barrier_only = true;
    } else if (arg == "--full-peers") {
      full_peers = true;
    } else if (arg == "--etcd") {
      with_etcd = true;
    } else if (arg.rfind("--etcd=", 0) == 0) {
      with_etcd = true;
      etcd_endpoints = arg.substr(7);
    } else if (arg.rfind("--sizes=", 0) == 0) {
      sizes.clear();
      for (absl::string_view text : absl::StrSplit(arg.substr(8), ',')) {
        uint32_t size = 0;
        // The in-process coordinator has 4,096 CPU hosts of 64 slots.
        if (!absl::SimpleAtoi(text, &size) || size == 0 || size > 4096) {
          std::cerr << "gdt-bench-formation: --sizes takes member counts "
                       "from 1 to 4096, not '"
                    << text << "'\n";
          return 2;
        }
        sizes.push_back(size);
      }
    } else {
      std::cerr << "gdt-bench-formation: unknown argument '" << arg << "'\n"
                << kUsage;
      return 2;
    }
  }
  // Per-join info lines would dominate; operators run at info, see the doc.
  spdlog::set_level(spdlog::level::err);

  std::unique_ptr<InProcessCoordinator> gdt =
      InProcessCoordinator::StartWithCpuHosts(4096);
  if (gdt == nullptr) {
    std::cerr << "cannot start the in-process coordinator\n";
    return 1;
  }
  BenchEtcd etcd;
  std::unique_ptr<InProcessCoordinator> on_etcd;
  if (with_etcd) {
    absl::StatusOr<BenchEtcd> started = StartBenchEtcd(etcd_endpoints);
    if (!started.ok()) {
      std::cerr << "etcd: " << started.status() << "\n";
      return 1;
    }
    etcd = std::move(*started);
    on_etcd = InProcessCoordinator::StartWithCpuHosts(4096, etcd.endpoints);
    if (on_etcd == nullptr) {
      std::cerr << "cannot start the coordinator on " << etcd.description
                << "\n";
      return 1;
    }
  }
  std::fprintf(stderr, "# gdt coordinator under test: %s\n",
               gdt->endpoint().c_str());
  BarrierService barrier_service(full_peers);
  grpc::ServerBuilder builder;
  int barrier_port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &barrier_port);
  builder.RegisterService(&barrier_service);
  std::unique_ptr<grpc::Server> barrier = builder.BuildAndStart();
  if (barrier == nullptr) return 1;

  auto gdt_stubs = MakeStubs(gdt->endpoint(), 8);
  Stubs etcd_stubs;
  if (on_etcd != nullptr) etcd_stubs = MakeStubs(on_etcd->endpoint(), 8);
  auto barrier_stubs = MakeStubs(absl::StrCat("127.0.0.1:", barrier_port), 8);

  const std::map<uint32_t, double> targets = {
      {8, 1}, {64, 5}, {1024, 60}, {4096, 400}};
  const std::map<uint32_t, int> runs =
      quick
          ? std::map<uint32_t, int>{{8, 20}, {64, 10}, {1024, 2}, {4096, 1}}
          : std::map<uint32_t, int>{{8, 200}, {64, 100}, {1024, 5}, {4096, 3}};
  int64_t pipeline = 1;
  std::printf(
      "# formation: first JoinGang sent -> last Admitted received; %s\n",
      full_peers ? "full assignments (every member gets the peer list)"
                 : "compact assignments (no peer list, its digest)");
  for (uint32_t size : sizes) {
    const double target = targets.count(size) ? targets.at(size) : 0;
    const int repeat = runs.count(size) ? runs.at(size) : 3;
    std::vector<double> gdt_ms, barrier_ms;
    if (barrier_only) {
      for (int run = 0; run < repeat; ++run) {
        barrier_ms.push_back(
            FormOnce(barrier_stubs, pipeline++, size, full_peers));
      }
      const Stats b = Summarize(barrier_ms);
      std::printf("formation members=%-5u barrier only p50=%.2fms p99=%.2fms\n",
                  size, b.p50, b.p99);
      continue;
    }
    // One formation on the coordinator, then its members leave (not timed)
    // so that the next gang finds the slots free.
    auto form_on = [&](InProcessCoordinator& coordinator, Stubs& stubs,
                       const char* what) {
      const int64_t gdt_pipeline = pipeline++;
      const double ms = FormOnce(stubs, gdt_pipeline, size, full_peers, what);
      for (uint32_t index = 1; index <= size; ++index) {
        gdt::state::GangKey key{"https://gitlab.example.com", 1, gdt_pipeline,
                                "bench", size};
        (void)coordinator.core().Leave(key, index,
                                       gdt_pipeline * 100000 + index);
      }
      return ms;
    };
    auto form_gdt = [&]() { return form_on(*gdt, gdt_stubs, "gdt"); };
    form_gdt();  // Warm-up.
    FormOnce(barrier_stubs, pipeline++, size, full_peers);
    for (int run = 0; run < repeat; ++run) {
      // Alternate so that machine noise hits both alike.
      const double ms = form_gdt();
      if (ms < 0) return 1;
      gdt_ms.push_back(ms);
      barrier_ms.push_back(
          FormOnce(barrier_stubs, pipeline++, size, full_peers));
    }
    const Stats g = Summarize(gdt_ms);
    const Stats b = Summarize(barrier_ms);
    std::printf(
        "formation members=%-5u runs=%-3zu gdt p50=%.2fms p99=%.2fms | "
        "barrier p50=%.2fms p99=%.2fms | gdt/barrier p99=%.1fx | "
        "target p99<=%gms %s\n",
        size, g.n, g.p50, g.p99, b.p50, b.p99, g.p99 / b.p99, target,
        Verdict(g.p99, target));
    std::fflush(stdout);
    if (on_etcd != nullptr) {
      // Fewer runs: every member write is a raft commit.
      const int etcd_repeat = size >= 1024 ? 1 : std::min(repeat, 20);
      std::vector<double> etcd_ms;
      form_on(*on_etcd, etcd_stubs, "gdt on etcd");  // Warm-up.
      for (int run = 0; run < etcd_repeat; ++run) {
        const double ms = form_on(*on_etcd, etcd_stubs, "gdt on etcd");
        if (ms < 0) return 1;
        etcd_ms.push_back(ms);
      }
      const Stats e = Summarize(etcd_ms);
      std::printf(
          "formation members=%-5u runs=%-3zu %s p50=%.2fms p99=%.2fms | "
          "sqlite p50=%.2fms p99=%.2fms | etcd/sqlite p50=%.1fx\n",
          size, e.n, etcd.description.c_str(), e.p50, e.p99, g.p50, g.p99,
          e.p50 / g.p50);
      std::fflush(stdout);
    }
  }
  barrier->Shutdown(std::chrono::system_clock::now());
  return 0;
}
