"""Shared by the workflow steps: the synthetic task and file digests."""
import hashlib

import torch

FEATURES = 8


def data(seed, rows):
    """Rows of a fixed linear task y = x @ w + noise; `seed` picks the rows."""
    w = torch.arange(1.0, FEATURES + 1) / FEATURES
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, FEATURES, generator=gen)
    return x, x @ w + 0.01 * torch.randn(rows, generator=gen)


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()
