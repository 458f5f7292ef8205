#!/usr/bin/env python3
"""A small PyTorch DDP training for gdt: synthetic regression data, a
DistributedSampler, a few optimiser steps, then a check that every rank holds
identical parameters. Runs as a bare `torchrun train.py` under gdt (torchrun
reads the PET_* variables gdt exports), or with the `env` launcher as
`python3 train.py`.

DDP_STEPS sets the number of steps (default 8), DDP_STEP_SECONDS a pause
after each one. Each rank writes a JSON report to $DDP_OUT_DIR (default ./out) so a CI job
can keep it as an artifact; rank 0 also prints a summary.
"""
import hashlib
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def progress():  # Tells gdt's hang watchdog (GDT_HANG_TIMEOUT) we are alive.
    os.environ.get("GDT_PROGRESS_FILE") and os.utime(os.environ["GDT_PROGRESS_FILE"])


def log(msg):
    # One write per line, so lines of ranks sharing a pipe never interleave.
    sys.stdout.write(f"ddp[rank {dist.get_rank()}/{dist.get_world_size()}]: {msg}\n")
    sys.stdout.flush()


def main():
    steps = int(os.environ.get("DDP_STEPS", "8"))
    # Seconds to pause after each step: stretches a short run so that tests
    # (and demos) can disturb a gang mid-training.
    step_seconds = float(os.environ.get("DDP_STEP_SECONDS", "0"))
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    started = time.time()
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) \
        if backend == "nccl" else torch.device("cpu")

    # Same synthetic data on every rank; the sampler gives each rank a shard.
    gen = torch.Generator().manual_seed(1234)
    x = torch.randn(1024, 16, generator=gen)
    y = x @ torch.randn(16, 1, generator=gen) + 0.1 * torch.randn(1024, 1, generator=gen)
    sampler = DistributedSampler(TensorDataset(x, y), num_replicas=world, rank=rank,
                                 shuffle=True, seed=7)
    loader = DataLoader(TensorDataset(x, y), batch_size=32, sampler=sampler)

    torch.manual_seed(rank)  # Different init per rank: DDP must broadcast rank 0's.
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)).to(device)
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    loss_fn = nn.MSELoss()

    step, loss = 0, None
    while step < steps:
        sampler.set_epoch(step)
        for xb, yb in loader:
            opt.zero_grad()
            loss = loss_fn(ddp(xb.to(device)), yb.to(device))
            loss.backward()
            opt.step()
            step += 1
            progress()
            if step == 1:
                log("first step done")
            if step_seconds > 0:
                time.sleep(step_seconds)
            if step >= steps:
                break
    log(f"trained {step} steps on {socket.gethostname()}, loss {loss.item():.4f}")

    # Identical parameters on every rank: compare a digest through all_gather.
    flat = torch.cat([p.detach().cpu().flatten() for p in model.parameters()])
    digest = hashlib.sha256(flat.numpy().tobytes()).hexdigest()
    mine = torch.tensor([float(int(digest[:12], 16))], dtype=torch.float64)
    gathered = [torch.zeros(1, dtype=torch.float64) for _ in range(world)]
    dist.all_gather(gathered, mine)
    identical = all(g.item() == mine.item() for g in gathered)

    report = {
        "rank": rank, "world_size": world,
        "node_rank": int(os.environ.get("GROUP_RANK", os.environ.get("GDT_NODE_RANK", "0"))),
        "local_rank": int(os.environ.get("LOCAL_RANK", "0")),
        "gdt_node_rank": os.environ.get("GDT_NODE_RANK"),
        "gdt_gang_id": os.environ.get("GDT_GANG_ID"),
        "master": f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}",
        "host": socket.gethostname(), "steps": step, "loss": loss.item(),
        "param_sha256": digest, "params_identical": identical,
        "seconds": round(time.time() - started, 3),
    }
    out_dir = os.environ.get("DDP_OUT_DIR", "out")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"rank-{rank}.json"), "w") as f:
        json.dump(report, f)
    if rank == 0:
        log(f"parameters identical on all {world} ranks: {identical} (sha256 {digest[:16]})")
    dist.barrier()
    dist.destroy_process_group()
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
