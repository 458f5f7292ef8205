#!/usr/bin/env python3
"""A Dask job for gdt's `dask` launcher recipe: run as rank 0's command,
`gdt-launch dask -- python3 examples/dask/job.py`, after every worker has
joined the scheduler on rank 0 (DASK_SCHEDULER_ADDRESS).

Splits the sum of squares of 0..DASK_N-1 (default 100000) into chunks,
pinned round-robin to every worker, so each worker demonstrably computes a
share; checks the total against the closed form, prints which worker
computed how many chunks and writes $DASK_OUT_DIR/dask-result.json (default
./out). Exits 1 when a worker is missing or the total is wrong.
"""
import json
import os
import sys

from distributed import Client, get_worker


def partial_sum(start, stop):
    worker = get_worker()  # Its address names the member's host.
    host = worker.address.split("://")[-1].rsplit(":", 1)[0]
    return worker.name, host, sum(i * i for i in range(start, stop))


def main():
    n = int(os.environ.get("DASK_N", "100000"))
    expected_workers = int(os.environ.get("GDT_NUM_NODES", "1")) - 1
    with Client(os.environ["DASK_SCHEDULER_ADDRESS"], timeout=30) as client:
        workers = sorted(client.scheduler_info()["workers"].items())
        if len(workers) < expected_workers:
            print(f"dask: only {len(workers)} of {expected_workers} workers", flush=True)
            return 1
        chunks = 4 * len(workers)
        bounds = [(k * n // chunks, (k + 1) * n // chunks) for k in range(chunks)]
        futures = [
            client.submit(partial_sum, lo, hi, workers=[workers[k % len(workers)][0]],
                          allow_other_workers=False, pure=False)
            for k, (lo, hi) in enumerate(bounds)
        ]
        results = client.gather(futures)
    total = sum(r[2] for r in results)
    by_worker = {}
    for name, host, _ in results:
        by_worker.setdefault(str(name), {"host": host, "chunks": 0})["chunks"] += 1
    correct = total == (n - 1) * n * (2 * n - 1) // 6
    summary = ", ".join(f"{w} on {v['host']}: {v['chunks']} chunks"
                        for w, v in sorted(by_worker.items()))
    print(f"dask: sum of squares below {n} = {total} (correct: {correct}); {summary}",
          flush=True)
    out_dir = os.environ.get("DASK_OUT_DIR", "out")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "dask-result.json"), "w") as f:
        json.dump({"total": total, "correct": correct, "workers": by_worker}, f)
    return 0 if correct and len(by_worker) == expected_workers else 1


if __name__ == "__main__":
    sys.exit(main())
