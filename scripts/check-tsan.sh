#!/usr/bin/env bash
# Builds the gRPC-free code (the folders that never see gRPC and the logic
# targets of the components with a gRPC edge, the same list as
# scripts/check-layering.sh) and its unit tests with ThreadSanitizer, in a
# build directory of its own, and runs those tests. gRPC and protobuf are
# not built with TSan, so code that calls them would only report noise from
# inside them; the gRPC-free code is where our threads and locks live.
#   scripts/check-tsan.sh [BUILD_DIR]   (default build-tsan)
# Exits 1 when a test fails or TSan reports a race, naming the binary.
set -euo pipefail
cd "$(dirname "$0")/.."

build=${1:-build-tsan}
tests=(gdt_common_tests gdt_http_client_tests gdt_gitlab_tests
  gdt_policy_tests gdt_sqlite_db_tests gdt_sim_tests gdt_ci_tests
  gdt_coordinator_tests gdt_placement_tests gdt_agent_core_tests
  gdt_gang_kv_tests gdt_ckpt_tests)

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DGDT_SANITIZE=thread -DCMAKE_COMPILE_WARNING_AS_ERROR=ON \
  -DGDT_BUILD_BENCHMARKS=OFF -DGDT_WITH_NCCL=OFF "${launcher[@]}" >/dev/null
cmake --build "$build" -j "$(nproc)" --target "${tests[@]}"

# Any report fails the binary (exit 66); every report of a run is kept in
# its log.
export TSAN_OPTIONS=${TSAN_OPTIONS:-exitcode=66:second_deadlock_stack=1}
logs="$build/tsan-logs"
rm -rf "$logs"
mkdir -p "$logs"
status=0
binaries=()
for name in "${tests[@]}"; do
  binary=$(find "$build" -name "$name" -type f -perm -u+x | head -n 1)
  if [ -z "$binary" ]; then
    echo "check-tsan: $name was not built" >&2
    status=1
  else
    binaries+=("$(realpath "$binary")")
  fi
done
# As many binaries at once as cores; each runs in its own build folder, as
# ctest would run it, with a deadline.
printf '%s\n' "${binaries[@]}" | xargs -P "$(nproc)" -I{} sh -c \
  'cd "$(dirname "$1")" && timeout 900 "$1" >"$2/$(basename "$1").log" 2>&1 ||
     { echo "check-tsan: $(basename "$1") failed (exit $?), log: $2/$(basename "$1").log" >&2; exit 1; }' \
  _ {} "$(realpath "$logs")" || status=1

if [ "$status" -ne 0 ]; then
  grep -l "ThreadSanitizer" "$logs"/*.log 2>/dev/null | while read -r log; do
    echo "== $log" >&2
    grep -A30 "WARNING: ThreadSanitizer" "$log" | head -n 60 >&2
  done
  exit 1
fi
echo "check-tsan: ${#tests[@]} test binaries clean under ThreadSanitizer"
