#!/usr/bin/env python3
"""A small PyTorch DDP training for gdt: synthetic regression data, a
DistributedSampler, a few optimiser steps, then a check that every rank holds
identical parameters. Runs as a bare `torchrun train.py` under gdt (torchrun
reads the PET_* variables gdt exports), or with the `env` launcher as
`python3 train.py`.

DDP_STEPS sets the number of steps (default 8), DDP_STEP_SECONDS a pause
after each one.

Checkpoints (docs/checkpoints.md): with DDP_CKPT_EVERY=K rank 0 saves model
and optimiser to $GDT_CHECKPOINT_DIR/step-<N>/model.pt every K steps and
runs `gdt-ckpt save` when it is on PATH (manifest.json, package store,
keep). On the checkpoint notice (SIGUSR1 or the file
$GDT_CHECKPOINT_NOTICE_FILE, as `gdt-ckpt run` gives them) every rank agrees
on the step, rank 0 saves and all stop (exit 0). With GDT_RESUME_FROM set to
a checkpoint directory the training continues from its step, with the same
data order, so the final parameters equal an uninterrupted run's. The
checkpoint may come from a run at another world size (an elastic gang,
`nodes: min..max`, that started smaller and grows on its retry): model and
optimiser state are the same on every rank under DDP, so rank 0's copy loads
on any number of ranks, and the DistributedSampler re-shards the data for the
new world size (the global batch is then 32 x the new world size).
DDP_LOG_STEPS=1 logs every step ("step N done").
DDP_STOP_AFTER=N ends the run after step N (to simulate an interruption).
DDP_EXIT_RANK=R makes rank R leave with exit code DDP_EXIT_CODE (default 3)
after step DDP_EXIT_STEP (default 2), as a rank that fails on its own does
(to see whom gdt blames). Each rank writes a JSON report to $DDP_OUT_DIR
(default ./out) so a CI job can keep it as an artifact; rank 0 also prints a
summary.

main() is wrapped in torchrun's @record: a rank that raises writes its
traceback to the error file torchrun gives it, and torchrun's failure
summary (and its own error file, which gdt's agent reads) then tells a rank
that lost a peer ("Connection closed by peer") from one that failed first.
"""
import hashlib
import json
import os
import shutil
import signal
import subprocess
import socket
import sys
import threading
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def progress():  # Tells gdt's hang watchdog (GDT_HANG_TIMEOUT) we are alive.
    os.environ.get("GDT_PROGRESS_FILE") and os.utime(os.environ["GDT_PROGRESS_FILE"])


NOTICE = {"given": False}


def on_notice(signum, frame):
    NOTICE["given"] = True


def notice_given():
    """Whether any rank saw the notice: every rank checkpoints at one step."""
    flag = os.environ.get("GDT_CHECKPOINT_NOTICE_FILE")
    mine = NOTICE["given"] or bool(flag and os.path.exists(flag))
    t = torch.tensor([1 if mine else 0])
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def save_checkpoint(step, model, opt):
    """Rank 0 writes $GDT_CHECKPOINT_DIR/step-<step>/model.pt and its manifest."""
    root = os.environ.get("GDT_CHECKPOINT_DIR", "checkpoints")
    path = os.path.join(root, f"step-{step}")
    os.makedirs(path, exist_ok=True)
    torch.save({"step": step, "model": model.state_dict(), "opt": opt.state_dict(),
                "world_size": dist.get_world_size()},
               os.path.join(path, "model.pt"))
    if shutil.which("gdt-ckpt"):
        subprocess.run(["gdt-ckpt", "save", "--step", str(step), "--dir", path,
                        "--world-size", str(dist.get_world_size())], check=True)
    log(f"checkpoint at step {step} in {path}")


def log(msg):
    # One write per line, so lines of ranks sharing a pipe never interleave.
    sys.stdout.write(f"ddp[rank {dist.get_rank()}/{dist.get_world_size()}]: {msg}\n")
    sys.stdout.flush()


@record
def main():
    steps = int(os.environ.get("DDP_STEPS", "8"))
    exit_rank = int(os.environ.get("DDP_EXIT_RANK", "-1"))
    exit_step = int(os.environ.get("DDP_EXIT_STEP", "2"))
    exit_code = int(os.environ.get("DDP_EXIT_CODE", "3"))
    ckpt_every = int(os.environ.get("DDP_CKPT_EVERY", "0"))
    stop_after = int(os.environ.get("DDP_STOP_AFTER", "0"))
    signal.signal(signal.SIGUSR1, on_notice)
    # Seconds to pause after each step: stretches a short run so that tests
    # (and demos) can disturb a gang mid-training.
    step_seconds = float(os.environ.get("DDP_STEP_SECONDS", "0"))
    log_steps = os.environ.get("DDP_LOG_STEPS") == "1"
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
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    step, loss = 0, None
    resume_from = os.environ.get("GDT_RESUME_FROM")
    if resume_from:
        state = torch.load(os.path.join(resume_from, "model.pt"))
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step = state["step"]
        saved_world = state.get("world_size", world)
        log(f"resumed from step {step} ({resume_from})")
        if saved_world != world:
            # Nothing else to do: the state is replicated, the sampler
            # shards for `world` ranks.
            log(f"resumed at world size {world} from a checkpoint of world size {saved_world}")
    ddp = DistributedDataParallel(model)
    loss_fn = nn.MSELoss()

    batches = len(loader)
    stopped = False
    while step < steps and not stopped:
        # The data order depends only on the global step, so a resumed run
        # sees the batches an uninterrupted one would.
        epoch, skip = divmod(step, batches)
        sampler.set_epoch(epoch)
        for i, (xb, yb) in enumerate(loader):
            if i < skip:
                continue
            opt.zero_grad()
            loss = loss_fn(ddp(xb.to(device)), yb.to(device))
            loss.backward()
            opt.step()
            step += 1
            progress()
            if step == 1:
                log("first step done")
            if log_steps:
                log(f"step {step} done")
            if rank == exit_rank and step == exit_step:
                log(f"leaving with exit code {exit_code} (DDP_EXIT_RANK)")
                sys.exit(exit_code)
            if step_seconds > 0:
                time.sleep(step_seconds)
            noticed = notice_given()
            if rank == 0 and ((ckpt_every and step % ckpt_every == 0) or noticed):
                save_checkpoint(step, model, opt)
            if noticed:
                log(f"checkpoint notice: stopping after step {step}")
                stopped = True
            if stop_after and step >= stop_after:
                stopped = True
            if step >= steps or stopped:
                break
    # Training is over: a late notice (another member's, or our own arriving
    # just after the gang stopped) must not kill us while we exit; Python
    # would restore the default (fatal) action during shutdown otherwise.
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    dist.barrier()  # Rank 0's checkpoint is complete before anyone exits.
    log(f"trained {step} steps on {socket.gethostname()}")

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
        "host": socket.gethostname(), "steps": step,
        "loss": loss.item() if loss is not None else None,
        "param_sha256": digest, "params_identical": identical,
        "seconds": round(time.time() - started, 3),
    }
    out_dir = os.environ.get("DDP_OUT_DIR", "out")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"rank-{rank}.json"), "w") as f:
        json.dump(report, f)
    if rank == 0:
        log(f"parameters identical on all {world} ranks: {identical} (sha256 {digest[:16]})")
    code = 0 if identical else 1
    # Everything is done and written. torch 1.13's gloo teardown (this last
    # barrier, destroy_process_group) has hung one rank for minutes on a
    # loaded machine, keeping its torchrun alive; give it 30 s at most.
    watchdog = threading.Timer(30, os._exit, args=(code,))
    watchdog.daemon = True
    watchdog.start()
    dist.barrier()
    dist.destroy_process_group()
    watchdog.cancel()
    return code


if __name__ == "__main__":
    code = main()
    # The process group is destroyed; skip the interpreter's own teardown of
    # torch's threads as well (see the watchdog in main()).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
