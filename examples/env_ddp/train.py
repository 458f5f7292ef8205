#!/usr/bin/env python3
"""DDP with the `env` launcher: one process per member, started as plain
`python3 train.py`; the script calls init_process_group("env://") itself, which
reads MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE that gdt exports.

A few SGD steps on synthetic data (each rank its own shard), then every rank
checks that all ranks hold identical parameters and writes
$DDP_OUT_DIR/rank-R.json (default ./out). Exits 1 if parameters differ.
ENV_DDP_STEPS sets the number of steps (default 5).
"""
import hashlib
import json
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel


def main():
    steps = int(os.environ.get("ENV_DDP_STEPS", "5"))
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend, init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank) if backend == "nccl" else torch.device("cpu")

    gen = torch.Generator().manual_seed(99 + rank)  # A different shard per rank.
    w_true = torch.arange(8, dtype=torch.float32).unsqueeze(1)
    torch.manual_seed(rank)  # Different init per rank: DDP broadcasts rank 0's.
    model = nn.Linear(8, 1).to(device)
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    loss = None
    for _ in range(steps):
        x = torch.randn(64, 8, generator=gen)
        y = x @ w_true
        opt.zero_grad()
        loss = nn.functional.mse_loss(ddp(x.to(device)), y.to(device))
        loss.backward()
        opt.step()

    flat = torch.cat([p.detach().cpu().flatten() for p in model.parameters()])
    digest = hashlib.sha256(flat.numpy().tobytes()).hexdigest()
    mine = torch.tensor([float(int(digest[:12], 16))], dtype=torch.float64)
    gathered = [torch.zeros(1, dtype=torch.float64) for _ in range(world)]
    dist.all_gather(gathered, mine)
    identical = all(g.item() == mine.item() for g in gathered)

    report = {
        "rank": rank, "world_size": world, "steps": steps, "loss": loss.item(),
        "master": f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
        "host": socket.gethostname(), "param_sha256": digest,
        "params_identical": identical,
    }
    out_dir = os.environ.get("DDP_OUT_DIR", "out")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"rank-{rank}.json"), "w") as f:
        json.dump(report, f)
    print(f"env_ddp[rank {rank}/{world}]: {steps} steps, loss {loss.item():.4f}, "
          f"parameters identical: {identical}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
