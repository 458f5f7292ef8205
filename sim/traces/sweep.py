#!/usr/bin/env python3
"""Replays every trace behind docs/scheduling.md's preemption tables with
`gdt-sim --compare --json`, and compares two such sweeps against the
targets.

    sim/traces/sweep.py run --sim build-rel/sim/gdt-sim --out /tmp/sweep/new \
        [--jobs 2] [-- extra gdt-sim flags]
    sim/traces/sweep.py table /tmp/sweep/new [/tmp/sweep/base]

`run` writes one JSON file per row into --out (rows already there are kept,
so an interrupted sweep resumes) and makes the stress traces
(make_stress.py) in <out>/../stress when they are missing. `table` prints
each (row, policy) as ratios to strict FIFO: mean JCT, mean wait, longest
wait, then preemptions (most on one job); given a second sweep it marks the
rows that moved by more than 0.01 and lists the targets (mean JCT <= 0.30x,
mean wait <= 0.25x, longest wait <= 1x FIFO's, no stall, no deadlock, at
most 3 preemptions per job) that one sweep meets and the other does not.
A policy change is judged by comparing a sweep of the new gdt-sim with one
of the old, both made on the same machine.
"""
import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
PHILLY = os.path.join(HERE, "philly-gavel-seed0.csv")
# Stress traces replayed on 4 hosts keep only their jobs of <= 32 GPUs.
SMALL = ("ht-s101", "bg-s102", "allpre-oneprio")


def rows(stress):
    """(name, trace, flags) for every row of the tables."""
    out = [(f"philly-s{s}", PHILLY, ["--seed", str(s)]) for s in (0, 1, 2)]
    out += [(f"philly-h{h}", PHILLY, ["--hosts", str(h)])
            for h in (16, 24, 48, 64)]
    out += [(f"philly-pf{f}", PHILLY, ["--preemptible-fraction", f])
            for f in ("0.5", "0.25")]
    for shape in ("heavy-tail", "big-gangs", "bursty"):
        trace = os.path.join(HERE, f"synthetic-{shape}.csv")
        out += [(f"{shape}-s{s}", trace, ["--seed", str(s)]) for s in (0, 1, 2)]
    for name in sorted(os.listdir(stress)):
        if name.endswith(".csv") and not name.startswith("small-"):
            out.append((name[:-4], os.path.join(stress, name), []))
    out.append(("whole-cluster-mn32", os.path.join(stress, "whole-cluster.csv"),
                ["--max-nodes", "32"]))
    out += [(f"{t}-le32-h4", os.path.join(stress, f"small-{t}.csv"),
             ["--hosts", "4"]) for t in SMALL]
    return out


def make_stress(stress):
    if not os.path.exists(os.path.join(stress, "whole-cluster.csv")):
        subprocess.run([sys.executable, os.path.join(HERE, "make_stress.py"),
                        stress], check=True)
    for t in SMALL:
        small = os.path.join(stress, f"small-{t}.csv")
        if os.path.exists(small):
            continue
        with open(os.path.join(stress, f"{t}.csv")) as src, \
                open(small + ".tmp", "w") as dst:
            header = src.readline()
            gpus = header.strip().split(",").index("gpus")
            dst.write(header)
            for line in src:
                if int(line.split(",")[gpus]) <= 32:
                    dst.write(line)
        os.rename(small + ".tmp", small)


def run(args):
    out = os.path.abspath(args.out)
    stress = os.path.join(os.path.dirname(out), "stress")
    os.makedirs(out, exist_ok=True)
    make_stress(stress)
    extra = [f for f in args.extra if f != "--"]

    def one(row):
        name, trace, flags = row
        path = os.path.join(out, name + ".json")
        if os.path.exists(path):
            return 0
        done = subprocess.run(
            [args.sim, "--trace", trace, "--compare", "--json", *flags, *extra],
            capture_output=True, text=True)
        # 3: a replay stalled; the JSON says which.
        if done.returncode not in (0, 3):
            print(f"{name}: gdt-sim exited {done.returncode}: "
                  f"{done.stderr.strip()[-300:]}", file=sys.stderr, flush=True)
            return 1
        with open(path + ".tmp", "w") as f:
            f.write(done.stdout)
        os.rename(path + ".tmp", path)
        print(f"{name}: done", flush=True)
        return 0

    # The Philly rows take longest: start them first.
    todo = sorted(rows(stress), key=lambda r: (r[1] != PHILLY, r[0]))
    with ThreadPoolExecutor(args.jobs) as pool:
        failed = sum(pool.map(one, todo))
    return 1 if failed else 0


def load(sweep):
    """{(row, policy): result} of one sweep dir."""
    out = {}
    for file in sorted(os.listdir(sweep)):
        if not file.endswith(".json"):
            continue
        with open(os.path.join(sweep, file)) as f:
            for result in json.load(f)["results"]:
                if result["policy"] != "fifo":
                    out[(file[:-5], result["policy"])] = result
    return out


def targets(r):
    f = r["to_fifo"]
    return {"mean JCT": f["mean_jct"] <= 0.30, "mean wait": f["mean_wait"] <= 0.25,
            "longest wait": f["max_wait"] <= 1.0, "no stall": not r["stalled"],
            "no deadlock": r["deadlocks"] == 0,
            "<= 3 preemptions": r["max_preemptions_per_job"] <= 3}


def cell(r):
    if r is None:
        return "-"
    f = r["to_fifo"]
    return (f"{f['mean_jct']:.3f} {f['mean_wait']:.3f} {f['max_wait']:.3f} "
            f"{r['preemptions']:>5} ({r['max_preemptions_per_job']})"
            + (" STALLED" if r["stalled"] else ""))


def table(args):
    new = load_or_die(args.sweep)
    base = load_or_die(args.base) if args.base else {}
    print(f"{'row':24} {'policy':16} {'JCT wait longest preemptions':38} "
          + ("base" if base else ""))
    moved = 0
    for key in sorted(new):
        old = base.get(key)
        mark = ""
        if old is not None:
            a, b = new[key]["to_fifo"], old["to_fifo"]
            if any(abs(a[k] - b[k]) > 0.01 for k in a):
                mark, moved = " *", moved + 1
        print(f"{key[0]:24} {key[1]:16} {cell(new[key]):38} "
              f"{cell(old) if base else ''}{mark}")
    above = sum(1 for r in new.values() if r["to_fifo"]["max_wait"] > 1)
    print(f"\nrows whose longest wait is above FIFO's: {above}", end="")
    if base:
        above_base = sum(1 for r in base.values()
                         if r["to_fifo"]["max_wait"] > 1)
        print(f" (base {above_base}); rows moved by more than 0.01: {moved}")
        for key in sorted(set(new) & set(base)):
            now, then = targets(new[key]), targets(base[key])
            for target in now:
                if now[target] != then[target]:
                    print(f"  {'gained' if now[target] else 'LOST'} "
                          f"{target}: {key[0]} {key[1]}")
    else:
        print()
    return 0


def load_or_die(sweep):
    if not os.path.isdir(sweep):
        sys.exit(f"sweep.py: {sweep} is not a directory of a sweep's JSON")
    return load(sweep)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="replay every row into --out")
    r.add_argument("--sim", required=True, help="the gdt-sim binary")
    r.add_argument("--out", required=True, help="where the JSON files go")
    r.add_argument("--jobs", type=int, default=2, help="replays at once")
    r.add_argument("extra", nargs=argparse.REMAINDER,
                   help="after --: flags for every replay")
    t = sub.add_parser("table", help="print a sweep, or compare two")
    t.add_argument("sweep")
    t.add_argument("base", nargs="?")
    args = parser.parse_args()
    return run(args) if args.command == "run" else table(args)


if __name__ == "__main__":
    sys.exit(main())
