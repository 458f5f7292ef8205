#!/usr/bin/env python3
"""Writes stress traces for the simulator into a directory (default: ./stress).

They are not committed: they are shapes the synthetic traces do not cover,
used to look for cases where preemption breaks a safety property (longest
wait above strict FIFO's, a stall, more than K preemptions, a job that may
not be preempted being stopped). Deterministic (fixed seeds). Columns as in
make_synthetic.py, plus `priority` and `preemptible` where a trace sets them.
docs/scheduling.md lists what they gave.
"""
import argparse
import os
import random

import make_synthetic as ms


def write(out_dir, name, jobs, extra=()):
    """jobs: tuples (submit_s, gpus, duration_s, *extra columns)."""
    jobs = sorted(jobs, key=lambda j: j[0])
    with open(os.path.join(out_dir, name), "w") as out:
        header = ["job_id", "submit_time_s", "gpus", "duration_s", *extra]
        out.write(",".join(header) + "\n")
        for i, job in enumerate(jobs):
            out.write(",".join(str(x) for x in (i, *job)) + "\n")


def plain(jobs):
    return [j[:3] for j in jobs]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", nargs="?", default="stress",
                        help="directory to write the traces into")
    out_dir = parser.parse_args().out_dir
    os.makedirs(out_dir, exist_ok=True)
    w = lambda name, jobs, extra=(): write(out_dir, name, jobs, extra)

    # The synthetic shapes with other seeds and a harder overload.
    rng = random.Random(101)
    w("ht-s101.csv", plain(ms.poisson(
        rng, 3000, {1: 60, 2: 6, 4: 14, 8: 13, 16: 4, 32: 2, 64: 1}, 3600,
        2.0, 0.8, "x", overload=(0.5, 1.8))))
    rng = random.Random(102)
    w("bg-s102.csv", plain(ms.poisson(
        rng, 2000, {1: 30, 4: 10, 8: 20, 16: 20, 32: 12, 64: 8}, 7200, 1.5,
        0.9, "x", overload=(0.3, 2.0))))
    # Day-long jobs at 0.85 load, a burst of 300 short ones every two days.
    rng = random.Random(103)
    jobs = plain(ms.poisson(rng, 1000, {1: 40, 4: 20, 8: 30, 16: 10, 32: 5},
                            86400, 1.0, 0.85, "x"))
    horizon = max(j[0] for j in jobs)
    burst = 0
    while burst < horizon:
        for _ in range(300):
            jobs.append((burst + int(rng.uniform(0, 1800)),
                         rng.choice([1, 1, 2, 4, 8, 16]),
                         ms.lognormal(rng, 1200, 1.0, 86400)))
        burst += 2 * 86400
    w("bursty-s103.csv", jobs)

    # Every job preemptible, all at one priority, given as columns.
    rng = random.Random(104)
    w("allpre-oneprio.csv",
      [(*j[:3], 7, 1) for j in ms.poisson(
          rng, 2500, {1: 50, 2: 10, 4: 10, 8: 20, 16: 6, 32: 3, 64: 1}, 5400,
          1.8, 0.9, "x", overload=(0.5, 1.6))],
      ("priority", "preemptible"))

    # Six gangs as large as the cluster (256 GPUs) amid small jobs; they
    # need --max-nodes 32 (with the default 8 they fail at join).
    rng = random.Random(105)
    jobs = plain(ms.poisson(rng, 2000, {1: 60, 2: 10, 4: 15, 8: 15}, 3600,
                            1.5, 0.9, "x", overload=(0.5, 1.3)))
    horizon = max(j[0] for j in jobs)
    for k in range(6):
        jobs.append((int(horizon * (k + 0.5) / 6), 256, 3 * 3600))
    w("whole-cluster.csv", jobs)

    # 20,000 single-GPU jobs.
    rng = random.Random(106)
    w("one-gpu-20k.csv", plain(ms.poisson(
        rng, 20000, {1: 1}, 1800, 1.5, 0.95, "x", overload=(0.5, 1.5))))

    # A cluster full of day-long low-priority jobs, then 400 jobs of
    # priority 10 (half of them preemptible).
    rng = random.Random(107)
    jobs = [(i, 4, 86400 + rng.randint(0, 3600), 0, 1) for i in range(64)]
    jobs += [(rng.randint(0, 86400), 4, 86400 + rng.randint(0, 86400), 0, 1)
             for _ in range(200)]
    jobs += [(3600 + rng.randint(0, 2 * 86400),
              rng.choice([1, 2, 4, 8, 16, 32]),
              ms.lognormal(rng, 3600, 1.0, 86400), 10, rng.choice([0, 1]))
             for _ in range(400)]
    w("highprio-into-full.csv", jobs, ("priority", "preemptible"))

    # 1,500 jobs, all submitted at t = 0.
    rng = random.Random(108)
    w("all-at-zero.csv",
      [(0, rng.choice([1, 1, 1, 2, 4, 8, 8, 16, 32, 64]),
        ms.lognormal(rng, 3600, 1.5, 10 * 86400)) for _ in range(1500)])

    # Sizes that split oddly (3 -> 1x3, 12 -> 2x6, 20 -> 4x5, 24 -> 3x8,
    # 40 -> 5x8, 56 -> 7x8): elastic ranges of every width.
    rng = random.Random(109)
    w("odd-shapes.csv", plain(ms.poisson(
        rng, 2000, {3: 5, 7: 5, 12: 10, 20: 10, 24: 10, 40: 5, 56: 5, 1: 30},
        7200, 1.5, 0.9, "x", overload=(0.5, 1.5))))

    # Priority rising with duration: long jobs outrank short ones.
    rng = random.Random(110)
    jobs = []
    for j in ms.poisson(rng, 2500, {1: 50, 4: 15, 8: 20, 16: 10, 32: 5},
                        3600, 2.0, 0.9, "x", overload=(0.5, 1.6)):
        d = j[2]
        prio = 0 if d < 1800 else 1 if d < 3 * 3600 else 2 if d < 86400 else 3
        jobs.append((*j[:3], prio, 1))
    w("prio-inverted.csv", jobs, ("priority", "preemptible"))

    # Large gangs, three priorities, 40 % preemptible.
    rng = random.Random(111)
    jobs = []
    for j in ms.poisson(rng, 2000, {1: 30, 8: 20, 16: 20, 32: 15, 64: 10},
                        7200, 1.5, 0.9, "x", overload=(0.5, 1.5)):
        jobs.append((*j[:3], rng.choice([0, 0, 1, 2]),
                     1 if rng.random() < 0.4 else 0))
    w("mixed-prio-pre.csv", jobs, ("priority", "preemptible"))

    # Twelve 64-GPU gangs at once, then a flood of 3,000 single-GPU jobs.
    rng = random.Random(112)
    jobs = [(0, 64, 86400) for _ in range(8)]
    jobs += [(60 + i, 1, rng.randint(60, 7200)) for i in range(3000)]
    jobs += [(600, 64, 3600) for _ in range(4)]
    w("gangs-then-flood.csv", jobs)


if __name__ == "__main__":
    main()
