// How starting processes holds up the rest of a daemon: the agent starts
// every stage and gdt-rsh command, and its other threads answer keepalive
// pings and heartbeats meanwhile. For a process holding --rss-mib MiB of
// touched memory, it measures
//   - the time one start takes (Subprocess::Spawn of /bin/true, waited for),
//   - the longest time another thread needs to touch a fresh page while
//     --starters threads start processes as fast as they can (the pause a
//     ping would see),
// once for Subprocess::Spawn and once for a plain fork + execve, the
// baseline, in the same run. Results: docs/benchmarks.md.
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench/bench_util.h"
#include "common/cli_parse.h"
#include "common/subprocess.h"

namespace gdt::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Starts /bin/true and waits for it; false when it could not start.
bool StartWithSpawn() {
  SpawnOptions options;
  options.argv = {"/bin/true"};
  options.capture_output = false;
  absl::StatusOr<std::unique_ptr<Subprocess>> child =
      Subprocess::Spawn(options);
  if (!child.ok()) return false;
  return (*child)->Wait().success();
}

bool StartWithFork() {
  const pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    char* argv[] = {const_cast<char*>("/bin/true"), nullptr};
    execve(argv[0], argv, environ);
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

struct Result {
  Stats start_ms;  // One start, alone.
  Stats touch_ms;  // Touching a fresh page while others start processes.
  int starts = 0;  // Starts during the touch measurement.
};

Result Measure(const std::function<bool()>& start, int alone, int starters,
               std::chrono::milliseconds busy) {
  Result result;
  std::vector<double> samples;
  for (int i = 0; i < alone; ++i) {
    const auto begin = Clock::now();
    if (!start()) {
      std::fprintf(stderr, "cannot start /bin/true\n");
      std::exit(1);
    }
    samples.push_back(MillisSince(begin, Clock::now()));
  }
  result.start_ms = Summarize(samples);

  std::atomic<bool> stop{false};
  std::atomic<int> starts{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < starters; ++i) {
    threads.emplace_back([&] {
      while (!stop.load()) {
        if (start()) ++starts;
      }
    });
  }
  // A page mapped and touched, as gRPC's pollers allocate for each ping.
  std::vector<double> touches;
  const long page = sysconf(_SC_PAGESIZE);
  const auto end = Clock::now() + busy;
  while (Clock::now() < end) {
    const auto begin = Clock::now();
    void* fresh =
        mmap(nullptr, static_cast<size_t>(page), PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (fresh != MAP_FAILED) {
      static_cast<volatile char*>(fresh)[0] = 1;
      munmap(fresh, static_cast<size_t>(page));
    }
    touches.push_back(MillisSince(begin, Clock::now()));
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  stop = true;
  for (std::thread& thread : threads) thread.join();
  result.touch_ms = Summarize(touches);
  result.starts = starts.load();
  return result;
}

void Print(const char* name, const Result& result, double seconds) {
  std::printf(
      "%-22s start p50 %7.3f ms  p99 %7.3f ms | page touch while %s: p50 "
      "%7.3f ms  p99 %7.3f ms  max %8.3f ms | %6.0f starts/s\n",
      name, result.start_ms.p50, result.start_ms.p99, "starting",
      result.touch_ms.p50, result.touch_ms.p99, result.touch_ms.max,
      result.starts / seconds);
}

int Main(int argc, char** argv) {
  int rss_mib = 1024;
  int starters = 4;
  int alone = 200;
  int busy_ms = 3000;
  CLI::App app(
      "Process starts (Subprocess::Spawn vs fork + execve) in a process with "
      "a large touched heap, and how long they hold up its other threads.",
      "gdt-bench-spawn");
  app.add_option("--rss-mib", rss_mib, "Touched memory of this process")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--starters", starters, "Threads starting processes at once")
      ->check(CLI::Range(1, 1024));
  app.add_option("--starts", alone, "Starts timed one at a time")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--busy-ms", busy_ms, "Length of the concurrent phase")
      ->check(CLI::Range(100, 600000));
  if (std::optional<int> exit = ParseCommandLine(app, argc, argv)) {
    return *exit;
  }

  // The heap a long-running daemon (or a sanitizer's shadow) has touched:
  // fork copies its page tables, a spawn does not.
  std::vector<char> heap(static_cast<size_t>(rss_mib) << 20);
  for (size_t at = 0; at < heap.size(); at += 4096) heap[at] = 1;
  std::printf("# %d MiB touched (RSS %.0f MiB), %d starters, %d ms busy\n",
              rss_mib, RssMiB(), starters, busy_ms);
  const double seconds = busy_ms / 1000.0;
  const auto busy = std::chrono::milliseconds(busy_ms);
  const Result fork_result = Measure(StartWithFork, alone, starters, busy);
  const Result spawn_result = Measure(StartWithSpawn, alone, starters, busy);
  Print("fork + execve (base)", fork_result, seconds);
  Print("Subprocess::Spawn", spawn_result, seconds);
  std::printf(
      "ratio spawn/fork: start p50 %.3f, page touch max %.3f, starts/s %.2f\n",
      spawn_result.start_ms.p50 / fork_result.start_ms.p50,
      spawn_result.touch_ms.max / fork_result.touch_ms.max,
      static_cast<double>(spawn_result.starts) / fork_result.starts);
  return 0;
}

}  // namespace
}  // namespace gdt::bench

int main(int argc, char** argv) { return gdt::bench::Main(argc, argv); }
