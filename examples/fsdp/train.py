#!/usr/bin/env python3
"""FSDP-style sharded data-parallel training for gdt, small enough for CPU.

Every rank holds only its shard of the flat parameter vector. Each step it
gathers the full parameters (all_gather, FSDP's "unshard"), computes the loss
on its shard of the data, and keeps only its shard of the averaged gradient
(all_reduce, then slice: the reduce-scatter that gloo lacks) to update its
shard. The model is linear regression so the example runs in a second; the
communication pattern is the one FSDP uses for real models.

Outputs: $GDT_CHECKPOINT_DIR/shard-<rank>-of-<world>.pt (the rank's shard,
kept as an artifact by parallel:distributed:checkpoint) and
out/fsdp-rank-<rank>.json (a report for tests). Exit code 1 if the loss did
not at least halve.
"""
import json
import os
import sys

import torch
import torch.distributed as dist

PARAMS = 64


def log(msg):
    sys.stdout.write(f"fsdp[rank {dist.get_rank()}/{dist.get_world_size()}]: {msg}\n")
    sys.stdout.flush()


def main():
    steps = int(os.environ.get("FSDP_STEPS", "30"))
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    per = (PARAMS + world - 1) // world          # padded shard size
    lo, hi = min(rank * per, PARAMS), min((rank + 1) * per, PARAMS)

    gen = torch.Generator().manual_seed(0)       # same data on every rank
    x = torch.randn(512, PARAMS, generator=gen)
    y = x @ torch.randn(PARAMS, generator=gen)
    xs, ys = x[rank::world], y[rank::world]      # this rank's data shard

    torch.manual_seed(100 + rank)
    shard = torch.zeros(per)
    shard[: hi - lo] = 0.1 * torch.randn(hi - lo)
    losses = []
    for _ in range(steps):
        parts = [torch.zeros(per) for _ in range(world)]
        dist.all_gather(parts, shard)            # unshard
        full = torch.cat(parts)[:PARAMS].clone().requires_grad_(True)
        loss = ((xs @ full - ys) ** 2).mean()
        loss.backward()
        grad = torch.zeros(per * world)
        grad[:PARAMS] = full.grad
        dist.all_reduce(grad)                    # reduce ...
        grad /= world
        shard -= 0.1 * grad[rank * per:(rank + 1) * per]   # ... scatter
        total = loss.detach().clone()
        dist.all_reduce(total)
        losses.append(total.item() / world)
        del full                                 # reshard: drop the full copy

    ckpt_dir = os.environ.get("GDT_CHECKPOINT_DIR", "checkpoints")
    os.makedirs(ckpt_dir, exist_ok=True)
    torch.save({"rank": rank, "range": [lo, hi], "shard": shard[: hi - lo].clone()},
               os.path.join(ckpt_dir, f"shard-{rank}-of-{world}.pt"))
    os.makedirs("out", exist_ok=True)
    report = {"rank": rank, "world_size": world, "range": [lo, hi],
              "params_total": PARAMS, "steps": steps,
              "first_loss": losses[0], "last_loss": losses[-1]}
    with open(os.path.join("out", f"fsdp-rank-{rank}.json"), "w") as f:
        json.dump(report, f)
    log(f"holds parameters [{lo}, {hi}) of {PARAMS}; loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    dist.barrier()
    dist.destroy_process_group()
    return 0 if losses[-1] < 0.5 * losses[0] else 1


if __name__ == "__main__":
    sys.exit(main())
