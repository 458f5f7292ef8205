#!/usr/bin/env python3
"""Writes large traces for timing the simulator (not committed).

    make_scale.py tiled N OUT   the Philly trace repeated until it has N jobs,
                                each copy submitted after the one before
    make_scale.py at-zero N OUT the Philly jobs' shapes, cycled to N jobs,
                                every one submitted at t = 0

docs/benchmarks.md gives the times gdt-sim takes on them.
"""
import csv
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("tiled", "at-zero"):
        sys.exit(__doc__)
    kind, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    with open(os.path.join(HERE, "philly-gavel-seed0.csv")) as f:
        jobs = [(int(r["submit_time_s"]), r["gpus"], r["duration_s"])
                for r in csv.DictReader(f)]
    span = max(j[0] for j in jobs) + 1
    with open(out + ".tmp", "w") as f:
        f.write("job_id,submit_time_s,gpus,duration_s\n")
        for i in range(n):
            submit, gpus, duration = jobs[i % len(jobs)]
            at = 0 if kind == "at-zero" else submit + (i // len(jobs)) * span
            f.write(f"{i},{at},{gpus},{duration}\n")
    os.rename(out + ".tmp", out)


if __name__ == "__main__":
    main()
