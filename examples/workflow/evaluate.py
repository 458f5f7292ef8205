#!/usr/bin/env python3
"""Step 2: evaluates the trained checkpoint (an artifact of the train gang)
on held-out rows; writes eval/metrics.json. Fails above the error budget."""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import FEATURES, data, sha256  # noqa: E402

MAX_MSE = 0.01


def main():
    path = os.path.join("checkpoints", "model.pt")
    model = torch.nn.Linear(FEATURES, 1, bias=False)
    model.load_state_dict(torch.load(path))
    x, y = data(seed=2, rows=128)
    with torch.no_grad():
        mse = float(((model(x).squeeze(-1) - y) ** 2).mean())
    os.makedirs("eval", exist_ok=True)
    metrics = {"mse": mse, "max_mse": MAX_MSE, "checkpoint_sha256": sha256(path)}
    with open(os.path.join("eval", "metrics.json"), "w") as f:
        json.dump(metrics, f)
    print(f"evaluate: held-out mse {mse:.6f} (budget {MAX_MSE})")
    return 0 if mse <= MAX_MSE else 1


if __name__ == "__main__":
    sys.exit(main())
