#!/usr/bin/env bash
# The main job: a real 2-member distributed PyTorch job through gdt on this
# machine. Sets up if needed, builds, starts gdt-coord (SQLite state in a
# temporary directory) and one local gdt-agent, runs examples/ddp through
# `gdt-ci run-local` (gitlab-runner emulation → gdt-executor → agent →
# torchrun on CPU with gloo), shows both members' job logs and
# `gdt-coord status`, then stops everything it started.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

./scripts/setup.sh
build=${GDT_BUILD_DIR:-build}
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DGDT_BUILD_TESTS=OFF "${launcher[@]}" >/dev/null
cmake --build "$build" -j "$(nproc)" --target gdt-coord gdt-agent gdt-executor gdt-ci
bin=$root/$build

work=$(mktemp -d /tmp/gdt-demo.XXXXXX)
pids=()
stop() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap stop EXIT

wait_for_file() {
  for _ in $(seq 1 200); do [ -s "$1" ] && return 0; sleep 0.1; done
  echo "demo: $2 did not start; its log:" >&2; cat "$3" >&2; exit 1
}

echo "== gdt demo: state and logs in $work"
echo "== plaintext gRPC on loopback only (tls: off); real installations turn"
echo "   on TLS: docs/security.md \"TLS\""
cat >"$work/coord.yaml" <<YAML
listen_address: 127.0.0.1:0
state_path: $work/coord.db
dashboard_address: 127.0.0.1:0
tls: off
YAML
"$bin/coordinator/gdt-coord" serve --config "$work/coord.yaml" \
  --port-file "$work/coord.port" --dashboard-port-file "$work/dashboard.port" \
  >"$work/coord.log" 2>&1 &
pids+=($!)
wait_for_file "$work/coord.port" gdt-coord "$work/coord.log"
coord=$(cat "$work/coord.port")
dashboard="http://$(cat "$work/dashboard.port")/"
echo "== gdt-coord serving on $coord; web dashboard: $dashboard"

# As root the agent runs each member as its own unprivileged account, as a
# real installation does (docs/admin-guide.md): two numeric accounts that
# need no passwd entry. They must reach the builds under $work and read the
# checkout.
isolation=""
if [ "$(id -u)" = 0 ]; then
  chmod 0711 "$work"
  isolation='member_uid_pool: ["61001:61001", "61002:61002"]'
  echo "== members run as uids 61001 and 61002, each in its own cgroup"
fi
cat >"$work/agent.yaml" <<YAML
coordinator: $coord
listen_address: 127.0.0.1:0
scratch_dir: $work/agent
builds_root: $work/builds
cache_root: $work/cache
$isolation
tls: off
host:
  name: $(hostname)
  address: 127.0.0.1
  cpu_slots: 2      # a CPU-only host that runs two members at once
YAML
chmod 0600 "$work/agent.yaml"
# Debian's torch 1.13 crashes in a plain `torchrun` on Python 3.11; the
# wrapper in testing/ fixes that for this machine (see its comment).
PATH="$root/testing/torchrun-py311:$PATH" PET_MONITOR_INTERVAL=0.5 \
  "$bin/agent/gdt-agent" --config "$work/agent.yaml" \
  --port-file "$work/agent.port" >"$work/agent.log" 2>&1 &
pids+=($!)
wait_for_file "$work/agent.port" gdt-agent "$work/agent.log"
echo "== gdt-agent on $(cat "$work/agent.port") registered $(hostname)"

cat >"$work/executor.yaml" <<YAML
coordinator: $coord
builds_root: $work/builds
cache_root: $work/cache
tls: off
YAML

echo "== gdt-ci run-local: job 'train' of examples/ddp/.gitlab-ci.yml (parallel: 2)"
status=0
"$bin/ci/gdt-ci" run-local --file examples/ddp/.gitlab-ci.yml --job train \
  --executor "$bin/executor/gdt-executor" --executor-config "$work/executor.yaml" \
  --project-dir "$root" --work-dir "$work/run" || status=$?

echo
echo "== gdt-coord status --all"
"$bin/coordinator/gdt-coord" status --coordinator "$coord" --all
# The dashboard as a browser renders it (headless Chromium, when installed).
if command -v chromium >/dev/null; then
  chromium --headless=new --no-sandbox --disable-gpu --no-first-run \
    --user-data-dir="$work/chromium" --virtual-time-budget=4000 \
    --window-size=1400,1000 --screenshot="$work/dashboard.png" "$dashboard" \
    >/dev/null 2>&1 || true
  gangs=$(chromium --headless=new --no-sandbox --disable-gpu --no-first-run \
    --user-data-dir="$work/chromium" --virtual-time-budget=4000 \
    --dump-dom "$dashboard" 2>/dev/null | grep -o 'data-gang-id="[^"]*" data-state="[^"]*"' || true)
  echo "== dashboard $dashboard renders: ${gangs:-no gang}; screenshot $work/dashboard.png"
fi
echo
echo "== job logs: $work/run/logs/   daemon logs: $work/{coord,agent}.log"
if [ $status -eq 0 ]; then
  echo "== demo: the distributed job succeeded"
else
  echo "== demo: the distributed job FAILED (exit $status)" >&2
fi
exit $status
