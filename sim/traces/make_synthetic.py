#!/usr/bin/env python3
"""Writes the synthetic job traces next to this script.

Each trace has the columns the simulator reads (job_id, submit_time_s, gpus,
duration_s) plus a `profile` column. The traces are deterministic (fixed
seeds), so running this again rewrites the same files. Arrivals are Poisson,
scaled so that a cluster of 32 hosts x 8 GPUs is offered the load given.
"""
import math
import os
import random

CLUSTER_GPUS = 256
HERE = os.path.dirname(os.path.abspath(__file__))


def lognormal(rng, median_s, sigma, cap_s):
    return int(min(cap_s, max(60, median_s * math.exp(rng.gauss(0, sigma)))))


def write(name, jobs):
    jobs.sort(key=lambda j: j[0])
    with open(os.path.join(HERE, name), "w") as out:
        out.write("job_id,submit_time_s,gpus,duration_s,profile\n")
        for i, (submit, gpus, duration, profile) in enumerate(jobs):
            out.write(f"{i},{submit},{gpus},{duration},{profile}\n")


def poisson(rng, count, sizes, median_s, sigma, load, profile, start=0,
            overload=None):
    """`count` jobs with sizes drawn from `sizes` ({gpus: weight}).

    With `overload` = (fraction, load), the first `fraction` of the jobs
    arrive at that higher load, so a queue builds up as on a busy cluster.
    """
    gpus_choices = list(sizes)
    weights = [sizes[g] for g in gpus_choices]
    drawn = []
    for _ in range(count):
        gpus = rng.choices(gpus_choices, weights)[0]
        drawn.append((gpus, lognormal(rng, median_s, sigma, 40 * 86400)))
    mean_work = sum(g * d for g, d in drawn) / count
    gap = mean_work / (CLUSTER_GPUS * load)
    jobs = []
    t = float(start)
    for i, (gpus, duration) in enumerate(drawn):
        step = gap
        if overload is not None and i < overload[0] * count:
            step = mean_work / (CLUSTER_GPUS * overload[1])
        t += rng.expovariate(1.0 / step)
        jobs.append((int(t), gpus, duration, profile))
    return jobs


def main():
    # Mostly small jobs with a heavy tail of long ones, like production
    # clusters: the case where short jobs queue behind long ones.
    rng = random.Random(1)
    write("synthetic-heavy-tail.csv",
          poisson(rng, 3000, {1: 60, 2: 6, 4: 14, 8: 13, 16: 4, 32: 2, 64: 1},
                  3600, 2.0, 0.7, "heavy-tail", overload=(0.5, 1.5)))
    # Many multi-host gangs: fragmentation and head-of-line blocking.
    rng = random.Random(2)
    write("synthetic-big-gangs.csv",
          poisson(rng, 2000, {1: 30, 4: 10, 8: 20, 16: 20, 32: 12, 64: 8},
                  7200, 1.5, 0.7, "big-gangs", overload=(0.5, 1.5)))
    # A steady load of long jobs, with a burst of short ones every 3 days.
    rng = random.Random(3)
    jobs = poisson(rng, 1200, {1: 40, 4: 20, 8: 30, 16: 10}, 86400, 1.0,
                   0.75, "steady")
    horizon = max(j[0] for j in jobs)
    burst = 0
    while burst < horizon:
        for _ in range(150):
            jobs.append((burst + int(rng.uniform(0, 3600)),
                         rng.choice([1, 1, 2, 4, 8]),
                         lognormal(rng, 1200, 1.0, 86400), "burst"))
        burst += 3 * 86400
    write("synthetic-bursty.csv", jobs)


if __name__ == "__main__":
    main()
