"""Is the input pipeline the bottleneck? Real CIFAR-format data against synthetic batches, same trial.

Moved here from tests/test_trainables.py, where `ratio > 0.9` between two processes run one after
the other failed for load alone on a shared two-core machine: it is a measurement, not a
correctness check. Here the two sides take turns, the order flips every round, and the figure is
the median of the per-round ratios (real / synthetic steady images/s, the loop's own step timer).
Goal: >= 0.9 (the augmentation thread and the host-to-device copy keep up with the steps).

Run (from the repository root):

  .venv/bin/python benchmarks/input_pipeline.py
  .venv/bin/python benchmarks/input_pipeline.py --rounds 5 --framework tensorflow
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from _common import load_average, machine, run_raw, write_cifar_like


def config(framework: str, batch: int, steps: int) -> dict:
    return {"framework": framework, "model": "resnet8_cifar", "num_gpus": 1, "batch_per_gpu": batch,
            "epochs": 1, "steps_per_epoch": steps, "warmup_steps": 5, "lr": 0.05}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--framework", default="mxnet", choices=["mxnet", "tensorflow"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    base = config(args.framework, args.batch, args.steps)
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        data = write_cifar_like(Path(tmp), train_images=2000, test_images=500)
        for round_ in range(args.rounds):
            sides = [("real", data), ("synthetic", None)]
            if round_ % 2:
                sides.reverse()
            figures = {}
            for name, data_dir in sides:
                cfg = base if name == "real" else {**base, "data": "synthetic"}
                figures[name] = run_raw(cfg, data_dir).steady
            ratios.append(figures["real"] / figures["synthetic"])
            print(f"round {round_ + 1}: real {figures['real']:.1f} img/s, synthetic {figures['synthetic']:.1f} img/s,"
                  f" ratio {ratios[-1]:.3f}", flush=True)
    print(f"{machine()}; load {load_average()}")
    print(f"real / synthetic (median of {len(ratios)} paired rounds): {statistics.median(ratios):.3f}  (goal >= 0.9)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
