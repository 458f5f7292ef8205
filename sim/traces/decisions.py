#!/usr/bin/env python3
"""Fingerprints every decision the policies make on the sweep's traces, to
show that a change to the admission policy that should only make it faster
leaves every admission, placement, preemption and bounce as it was.

    sim/traces/decisions.py run --sim build-rel/sim/gdt-sim --out DIR [--jobs 2]
    diff OLD/manifest.txt NEW/manifest.txt

`run` replays each row of sweep.py (and a few more: other backfill orders,
aging, no overdue rule, a queue of 20,000 jobs at t = 0) with every policy,
`--decisions` and `--json`, and writes DIR/manifest.txt: one line per
(row, policy) with the decision lines, their SHA-256 and that of the JSON
result (the replay's wall time left out). Stress traces are made as
sweep.py makes them, in DIR/../stress, and the queue at t = 0 in
DIR/../scale.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

import sweep

POLICIES = ("fifo", "gdt", "preempt", "preempt+elastic", "naive")


def extra_rows(stress):
    philly, ht = sweep.PHILLY, os.path.join(sweep.HERE,
                                            "synthetic-heavy-tail.csv")
    out = []
    for order in ("shortest", "queue"):
        out += [(f"philly-{order}", philly, ["--backfill-order", order]),
                (f"heavy-tail-{order}", ht, ["--backfill-order", order])]
    out += [("philly-aging", philly, ["--aging-step", "7200"]),
            ("philly-no-overdue", philly, ["--overdue-fraction", "0"]),
            ("philly-depth1", philly, ["--reservation-depth", "1"]),
            ("philly-behind0", philly, ["--served-behind-head", "0"]),
            ("mixed-prio-aging", os.path.join(stress, "mixed-prio-pre.csv"),
             ["--aging-step", "3600"])]
    zero = os.path.join(os.path.dirname(stress), "scale", "zero-20000.csv")
    os.makedirs(os.path.dirname(zero), exist_ok=True)
    if not os.path.exists(zero):
        subprocess.run([sys.executable, os.path.join(sweep.HERE,
                        "make_scale.py"), "at-zero", "20000", zero], check=True)
    out.append(("philly-at-zero-20k", zero, []))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["run"])
    parser.add_argument("--sim", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    out = os.path.abspath(args.out)
    stress = os.path.join(os.path.dirname(out), "stress")
    os.makedirs(out, exist_ok=True)
    sweep.make_stress(stress)
    rows = sweep.rows(stress) + extra_rows(stress)

    def one(task):
        (name, trace, flags), policy = task
        with tempfile.NamedTemporaryFile(dir=out) as log:
            done = subprocess.run(
                [args.sim, "--trace", trace, "--policy", policy, "--json",
                 "--decisions", log.name, *flags],
                capture_output=True, text=True)
            if done.returncode not in (0, 3):
                return f"{name} {policy} FAILED {done.returncode}"
            with open(log.name, "rb") as f:
                text = f.read()
        result = json.loads(done.stdout)
        result.pop("replay_wall_s")
        digest = hashlib.sha256(
            json.dumps(result, sort_keys=True).encode()).hexdigest()
        count = text.count(b"\n")
        return (f"{name} {policy} decisions={count} "
                f"{hashlib.sha256(text).hexdigest()} result={digest}")

    tasks = [(row, policy) for row in rows for policy in POLICIES]
    with ThreadPoolExecutor(args.jobs) as pool:
        lines = list(pool.map(one, tasks))
    with open(os.path.join(out, "manifest.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    failed = sum("FAILED" in line for line in lines)
    print(f"{len(lines)} replays, {failed} failed: {out}/manifest.txt")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
