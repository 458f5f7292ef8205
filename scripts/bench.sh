#!/usr/bin/env bash
# The benchmark suite (docs/benchmarks.md): builds bench/ and gdt-coord in a
# RelWithDebInfo tree (build-bench, no sanitizers) and runs every benchmark,
# printing one line per measurement with its target verdict. Not part of the
# test suite. `scripts/bench.sh --quick` runs fewer repetitions.
set -euo pipefail
cd "$(dirname "$0")/.."

build=${GDT_BENCH_BUILD_DIR:-build-bench}
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DGDT_BUILD_TESTS=OFF -DGDT_BUILD_BENCHMARKS=ON "${launcher[@]}" >/dev/null
cmake --build "$build" -j "$(nproc)" --target gdt-coord gdt-agent gdt-executor \
  gdt-ci gdt-bench-formation gdt-bench-rpc gdt-bench-admission gdt-bench-rss \
  gdt-bench-state-store gdt-bench-liveness gdt-bench-spawn

echo "# machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "# load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
"$build/bench/gdt-bench-admission"  # Google Benchmark: takes its own flags
# Joins and formation also through a 3-node etcd on loopback (HA), each next
# to the SQLite figure of the same run.
"$build/bench/gdt-bench-rpc" --etcd "$@"
"$build/bench/gdt-bench-formation" --etcd "$@"
"$build/bench/gdt-bench-rss"
"$build/bench/gdt-bench-state-store" "$@"  # HA: SQLite vs etcd
"$build/bench/gdt-bench-liveness" "$@"  # heartbeats under a forged-join flood
"$build/bench/gdt-bench-spawn"  # process starts: spawn vs fork
if [ "${1:-}" = --quick ]; then runs=5; else runs=20; fi
bench/executor_overhead.sh "$build" "$runs"
bench/ci_expand_bench.sh "$build/ci/gdt-ci"
