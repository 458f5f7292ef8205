#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls exactly this):
# set up if needed, check formatting and the layering rule, build everything
# with clang + ASan/UBSan and warnings as errors, run every test but the GPU
# ones. Needs root for the network-namespace tests (CI runs as root).
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh
./scripts/check-format.sh
./scripts/check-layering.sh

build=${GDT_TEST_BUILD_DIR:-build-test}
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DGDT_SANITIZE=address,undefined -DCMAKE_COMPILE_WARNING_AS_ERROR=ON \
  -DCMAKE_UNITY_BUILD="${GDT_UNITY_BUILD:-ON}" "${launcher[@]}" >/dev/null
cmake --build "$build" -j "$(nproc)"

# LeakSanitizer stays on; UBSan findings are fatal (-fno-sanitize-recover;
# halt_on_error=1 for the vptr check, cmake/sanitizer_defaults.cc).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
# Two tests at a time: the suite is written for it (the long-outage cell
# of the fault matrix starts first and runs beside the others) and
# stays inside CI's time on two cores. GDT_TEST_JOBS changes it.
cd "$build"
ctest --output-on-failure -LE gpu --timeout 600 -j "${GDT_TEST_JOBS:-2}" "$@"
