#!/usr/bin/env bash
# Benchmark: `gdt-ci expand` and `gdt-ci lint` on generated CI files of
# growing size, each job a parallel:distributed block with a script, tags
# and variables. Prints one line per size and command: jobs, file size,
# wall seconds and peak RSS (GNU time). Expand must grow linearly with the
# file (docs/benchmarks.md).
# Usage: bench/ci_expand_bench.sh GDT_CI_BINARY [JOBS...]
#   default sizes: 1000 16000 69000 100000
set -euo pipefail
bin=$1
shift
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(1000 16000 69000 100000)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "# load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-8s %-7s %8s %9s %8s\n' jobs command "size_MB" "wall_s" "rss_MB"
for n in "${sizes[@]}"; do
  file="$work/ci-$n.yml"
  awk -v n="$n" 'BEGIN {
    print "variables:\n  GIT_DEPTH: \"1\"\n"
    for (i = 0; i < n; ++i) {
      printf "t%06d:\n  tags: [a]\n  script: [./t]\n  parallel:\n    distributed: {nodes: 2}\n", i
    }
  }' >"$file"
  size=$(awk -v b="$(stat -c %s "$file")" 'BEGIN { printf "%.1f", b / 1e6 }')
  for command in expand lint; do
    /usr/bin/time -f '%e %M' -o "$work/time" "$bin" "$command" --file "$file" \
      >"$work/out" 2>"$work/err" || {
      echo "ci-expand-bench: gdt-ci $command failed on $n jobs:" >&2
      head -3 "$work/err" >&2
      exit 1
    }
    read -r wall rss_kb <"$work/time"
    printf '%-8s %-7s %8s %9s %8s\n' "$n" "$command" "$size" "$wall" \
      "$((rss_kb / 1024))"
  done
done
