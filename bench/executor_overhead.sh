#!/usr/bin/env bash
# Benchmark (d): executor + agent overhead per member. Runs a one-member job
# whose script is `true` through `gdt-ci run-local` (the gitlab-runner
# emulation: config, prepare with immediate admission, the runner's stage
# scripts, cleanup) with gdt-executor against a real gdt-coord and gdt-agent
# on loopback, and the same job through the same emulation with a minimal
# custom executor that runs each stage script directly with bash (what the
# script costs without gdt). The difference is gdt's overhead per member.
# Usage: bench/executor_overhead.sh BUILD_DIR [RUNS]
set -euo pipefail
build=$1
runs=${2:-20}
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

wait_file() {  # Polls for a non-empty file for up to 20 s.
  for _ in $(seq 1 400); do [ -s "$1" ] && return 0; sleep 0.05; done
  echo "executor-overhead: $1 never appeared" >&2
  cat "$work"/*.log >&2
  exit 1
}

cat >"$work/coord.yaml" <<YAML
listen_address: 127.0.0.1:0
state_path: $work/coord.db
heartbeat_interval_seconds: 1
host_down_after_seconds: 5
log_level: warn
YAML
"$build/coordinator/gdt-coord" serve --config "$work/coord.yaml" \
  --port-file "$work/coord.port" >"$work/coord.log" 2>&1 &
pids+=($!)
wait_file "$work/coord.port"
coord=$(cat "$work/coord.port")

cat >"$work/agent.yaml" <<YAML
coordinator: $coord
listen_address: 127.0.0.1:0
scratch_dir: $work/agent
builds_root: $work/builds
cache_root: $work/cache
kill_grace_seconds: 5
host:
  name: local
  address: 127.0.0.1
  cpu_slots: 1
  gpus: 0
log_level: warn
YAML
"$build/agent/gdt-agent" --config "$work/agent.yaml" \
  --port-file "$work/agent.port" >"$work/agent.log" 2>&1 &
pids+=($!)
wait_file "$work/agent.port"
for _ in $(seq 1 400); do
  "$build/coordinator/gdt-coord" status --coordinator "$coord" --json |
    grep -q '"state": "up"' && break
  sleep 0.05
done

cat >"$work/executor.yaml" <<YAML
coordinator: $coord
builds_root: $work/builds
cache_root: $work/cache
arrival_host: local
join_timeout_seconds: 60
log_level: warn
YAML
mkdir -p "$work/project"
cat >"$work/project/.gitlab-ci.yml" <<'YAML'
job:
  variables:
    GDT_GPUS_PER_NODE: "0"
    GDT_LAUNCHER: none
  script:
    - "true"
YAML
# The baseline custom executor: runs every stage script with bash.
cat >"$work/direct-executor" <<SH
#!/bin/bash
for arg in "\$@"; do
  case "\$arg" in
    config) echo '{"builds_dir": "$work/direct-builds"}'; exit 0 ;;
    prepare|cleanup) exit 0 ;;
    run) shift; exec bash "\$1" ;;
  esac
  shift
done
SH
chmod +x "$work/direct-executor"

now_ms() { echo $(($(date +%s%N) / 1000000)); }
run_job() {  # run_job PIPELINE EXECUTOR [CONFIG] -> prints milliseconds
  # A fresh pipeline per run: a finished gang cannot be joined again.
  local start end extra=(--pipeline-id "$1")
  shift
  [ -n "${2:-}" ] && extra+=(--executor-config "$2")
  start=$(now_ms)
  "$build/ci/gdt-ci" run-local --file "$work/project/.gitlab-ci.yml" \
    --job job --executor "$1" "${extra[@]}" --project-dir "$work/project" \
    --work-dir "$work/run" >"$work/run.out" 2>&1 ||
    { cat "$work/run.out" "$work"/*.log >&2; exit 1; }
  end=$(now_ms)
  echo $((end - start))
}
gdt=()
direct=()
pipeline=$(date +%s)
run_job $((pipeline += 1)) "$build/executor/gdt-executor" "$work/executor.yaml" >/dev/null  # Warm-up.
run_job $((pipeline += 1)) "$work/direct-executor" >/dev/null
for _ in $(seq 1 "$runs"); do
  pipeline=$((pipeline + 2))  # Here: $(...) runs in a subshell.
  gdt+=("$(run_job "$pipeline" "$build/executor/gdt-executor" "$work/executor.yaml")")
  direct+=("$(run_job $((pipeline + 1)) "$work/direct-executor")")
done
pct() {  # pct P values... (nearest rank)
  local p=$1; shift
  printf '%s\n' "$@" | sort -n | awk -v p="$p" '{v[NR]=$1} END {
    i = int(p * NR + 0.999999); if (i < 1) i = 1; if (i > NR) i = NR; print v[i] }'
}
g50=$(pct 0.5 "${gdt[@]}"); g99=$(pct 0.99 "${gdt[@]}")
d50=$(pct 0.5 "${direct[@]}"); d99=$(pct 0.99 "${direct[@]}")
over=$((g50 - d50))
verdict=MISSED; [ "$over" -le 50 ] && verdict=MET
echo "executor+agent overhead per member (runs=$runs): gdt-executor p50=${g50}ms p99=${g99}ms | direct bash executor p50=${d50}ms p99=${d99}ms | overhead p50=${over}ms | target <=50ms $verdict"
