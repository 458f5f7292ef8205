#!/usr/bin/env python3
"""Step 3: publishes the evaluated checkpoint: checks that the metrics belong
to this very checkpoint, then writes release/ (model and metrics)."""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import sha256  # noqa: E402


def main():
    with open(os.path.join("eval", "metrics.json")) as f:
        metrics = json.load(f)
    model = os.path.join("checkpoints", "model.pt")
    digest = sha256(model)
    if digest != metrics["checkpoint_sha256"]:
        print("publish: the evaluated checkpoint is not the one at hand")
        return 1
    os.makedirs("release", exist_ok=True)
    shutil.copy(model, os.path.join("release", "model.pt"))
    with open(os.path.join("release", "metrics.json"), "w") as f:
        json.dump(metrics, f)
    print(f"publish: released model sha256 {digest[:16]} (mse {metrics['mse']:.6f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
