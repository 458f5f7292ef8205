#!/usr/bin/env python3
"""Sharded batch inference for gdt with the `env` launcher.

Rank r of W (RANK, WORLD_SIZE from gdt) predicts the input lines i with
i % W == r using a small fixed classifier and writes them to
predictions/part-<r>-of-<W>.jsonl. The ranks then agree on the total through
gloo (MASTER_ADDR/MASTER_PORT from gdt), so a lost shard fails the job.
"""
import json
import os
import sys

import torch
import torch.distributed as dist


def main():
    inputs = sys.argv[1]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    with open(inputs) as f:
        items = [json.loads(line) for line in f if line.strip()]
    mine = [item for i, item in enumerate(items) if i % world == rank]

    torch.manual_seed(0)                          # the same model everywhere
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(),
                                torch.nn.Linear(8, 3))
    os.makedirs("predictions", exist_ok=True)
    out = os.path.join("predictions", f"part-{rank}-of-{world}.jsonl")
    with torch.no_grad(), open(out, "w") as f:
        for item in mine:
            scores = model(torch.tensor(item["features"])).softmax(-1)
            f.write(json.dumps({"id": item["id"], "label": int(scores.argmax()),
                                "score": round(float(scores.max()), 6)}) + "\n")

    done = torch.tensor([len(mine)])
    dist.all_reduce(done)
    sys.stdout.write(f"infer[rank {rank}/{world}]: predicted {len(mine)} items, "
                     f"{int(done.item())} of {len(items)} in total\n")
    dist.barrier()
    dist.destroy_process_group()
    return 0 if int(done.item()) == len(items) else 1


if __name__ == "__main__":
    sys.exit(main())
