#!/usr/bin/env python3
"""Step 1 (a gdt gang): DDP training of a linear model; rank 0 saves the
checkpoint to $GDT_CHECKPOINT_DIR/model.pt, every rank a note of its part."""
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import FEATURES, data  # noqa: E402


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    x, y = data(seed=1, rows=256)
    x, y = x[rank::world], y[rank::world]
    model = DistributedDataParallel(torch.nn.Linear(FEATURES, 1, bias=False))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(60):
        opt.zero_grad()
        loss = ((model(x).squeeze(-1) - y) ** 2).mean()
        loss.backward()
        opt.step()
    ckpt = os.environ.get("GDT_CHECKPOINT_DIR", "checkpoints")
    os.makedirs(ckpt, exist_ok=True)
    if rank == 0:
        torch.save(model.module.state_dict(), os.path.join(ckpt, "model.pt"))
    with open(os.path.join(ckpt, f"rank-{rank}.json"), "w") as f:
        json.dump({"rank": rank, "world_size": world, "loss": loss.item()}, f)
    sys.stdout.write(f"train[rank {rank}/{world}]: loss {loss.item():.5f}\n")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
