#!/usr/bin/env bash
# Checkpoint/resume of examples/ddp on CPU (gloo), 2 ranks under torchrun:
#  1. an uninterrupted 12-step run;
#  2. a run checkpointing every 4 steps that is cut off after step 6;
#  3. a run resumed from that run's newest checkpoint (step 4) — its final
#     parameters must equal run 1's exactly (SHA-256 of the flattened
#     parameters; tolerance 0: same seed, same data order, same reductions);
#  4. under `gdt-ckpt run` with CI_JOB_TIMEOUT=60 and a 57 s notice, the
#     training gets the notice about 3 s in, checkpoints (manifest.json by
#     gdt-ckpt save) and stops before the deadline (60 s leaves room for
#     torch's start on a loaded machine, where a run took 41 s).
# Usage: checkpoint_test.sh <gdt-ckpt binary dir> <torchrun wrapper dir>
set -euo pipefail
bin_dir=$1
torchrun_dir=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export PATH="$torchrun_dir:$bin_dir:$PATH" DDP_STEPS=12 GDT_CHECKPOINT_KEEP=2
# Every torchrun leaves a torchelastic_* log dir in $TMPDIR, even after a
# clean run; under gdt-agent that is the member's own dir, removed at its
# teardown. Here it is $work, so that nothing is left in /tmp.
export TMPDIR="$work"
run() {  # run <name> [VAR=value...]
  local name=$1; shift
  (cd "$work" && env DDP_OUT_DIR="$work/$name" GDT_CHECKPOINT_DIR="$work/$name-ckpt" "$@" \
    timeout 120 $(launch) "$here/train.py") \
    > "$work/$name.log" 2>&1 || { echo "FAIL: run $name failed:"; tail -20 "$work/$name.log"; exit 1; }
}
# A free loopback port per run: torch 1.13's --standalone always uses
# localhost:29400, which concurrent jobs (and tests) on one machine share.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
launch() { echo torchrun --nnodes 1 --nproc_per_node 2 --master_addr 127.0.0.1 --master_port "$(free_port)"; }
digest() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["param_sha256"])' "$1"; }
field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }

run full
run cut DDP_CKPT_EVERY=4 DDP_STOP_AFTER=6
[ -f "$work/cut-ckpt/step-4/manifest.json" ] || { echo "FAIL: no manifest for step 4"; exit 1; }
[ "$(field "$work/cut-ckpt/step-4/manifest.json" step)" = 4 ] || { echo "FAIL: manifest step"; exit 1; }
[ "$(field "$work/cut/rank-0.json" steps)" = 6 ] || { echo "FAIL: cut run did not stop at 6"; exit 1; }
run resumed GDT_RESUME_FROM="$work/cut-ckpt/step-4"
grep -q "resumed from step 4" "$work/resumed.log" || { echo "FAIL: no resume line"; exit 1; }
[ "$(field "$work/resumed/rank-0.json" steps)" = 12 ] || { echo "FAIL: resumed run steps"; exit 1; }
want=$(digest "$work/full/rank-0.json")
got=$(digest "$work/resumed/rank-0.json")
[ "$want" = "$got" ] || { echo "FAIL: resumed parameters $got differ from uninterrupted $want"; exit 1; }
echo "ok: resumed from step 4 to 12, parameters equal the uninterrupted run ($want)"

# torchrun's agent dies on SIGUSR1, so with torchrun the notice is the flag
# file alone (GDT_CHECKPOINT_SIGNAL=none); train.py checks it every step.
start=$(date +%s)
(cd "$work" && env DDP_OUT_DIR="$work/notice" GDT_CHECKPOINT_DIR="$work/notice-ckpt" \
  DDP_STEPS=100000 DDP_STEP_SECONDS=0.05 CI_JOB_TIMEOUT=60 GDT_CHECKPOINT_NOTICE=57 \
  GDT_CHECKPOINT_SIGNAL=none \
  timeout 90 gdt-ckpt run -- $(launch) "$here/train.py") \
  > "$work/notice.log" 2>&1 || { echo "FAIL: notice run failed:"; tail -20 "$work/notice.log"; exit 1; }
elapsed=$(( $(date +%s) - start ))
grep -q "gdt-ckpt run: checkpoint notice: the job times out in" "$work/notice.log" || { echo "FAIL: no notice line"; exit 1; }
grep -q "checkpoint notice: stopping after step" "$work/notice.log" || { echo "FAIL: training ignored the notice"; tail -5 "$work/notice.log"; exit 1; }
manifest=$(ls "$work"/notice-ckpt/step-*/manifest.json | head -1)
[ -n "$manifest" ] || { echo "FAIL: no checkpoint after the notice"; exit 1; }
[ "$elapsed" -lt 60 ] || { echo "FAIL: took ${elapsed}s, past the 60 s deadline"; exit 1; }
echo "ok: notice at ~3 s of a 60 s job, checkpoint $(dirname "$manifest") written, done in ${elapsed}s"
