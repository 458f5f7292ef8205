#!/usr/bin/env bash
# Runs clang-tidy (the checks in .clang-tidy) over the gRPC-free code: the
# folders that never see gRPC and the logic targets of the components with a
# gRPC edge (the same list as scripts/check-layering.sh), tests left out.
# Needs a configured build for compile_commands.json:
#   scripts/check-tidy.sh [BUILD_DIR]   (default build-test)
set -euo pipefail
cd "$(dirname "$0")/.."

build=${1:-build-test}
tidy=$(command -v clang-tidy-14 || command -v clang-tidy || true)
if [ -z "$tidy" ]; then
  echo "check-tidy: clang-tidy is not installed (scripts/setup.sh installs it)" >&2
  exit 2
fi
if [ ! -f "$build/compile_commands.json" ]; then
  echo "check-tidy: no $build/compile_commands.json; configure the build first" >&2
  exit 2
fi

sources_of() {  # sources_of <dir> <target>: the .cc files of add_library(<target> ...)
  tr '\n' ' ' <"$1/CMakeLists.txt" |
    sed -nE "s/.*add_library\($2 ([^)]*)\).*/\1/p" | tr ' ' '\n' | sed '/^$/d'
}
files=()
for dir in common gitlab policy state sim ci; do
  while IFS= read -r file; do files+=("$file"); done < <(
    find "$dir" -maxdepth 1 -name '*.cc' ! -name '*_test.cc' ! -name '*_fuzzer.cc' ! -name main.cc | sort)
done
for pair in coordinator:gdt_coordinator agent:gdt_agent_core kv:gdt_kv ckpt:gdt_ckpt; do
  dir=${pair%%:*}
  for src in $(sources_of "$dir" "${pair#*:}"); do files+=("$dir/$src"); done
done

# One file per clang-tidy run, as many runs as cores; any finding fails.
if ! printf '%s\n' "${files[@]}" |
  xargs -P "$(nproc)" -n 1 "$tidy" -p "$build" --quiet 2>/dev/null; then
  echo "check-tidy: clang-tidy found problems (above)" >&2
  exit 1
fi
echo "check-tidy: ${#files[@]} files clean"
