"""One trial's loop in this process, without Ray: the raw baseline for benchmarks, and a debugging aid.

  python -m trainables.local '{"framework": "mxnet", "model": "resnet8_cifar", "num_gpus": 2,
                               "batch_per_gpu": 32, "epochs": 1, "lr": 0.1}' [--data-dir DIR]

Prints one JSON line of metrics per epoch. Devices: the first num_gpus GPUs, or as many CPU devices
where there is no GPU (or with --emulate).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from typing import Any

from trainables import environment
from trainables.config import TrialConfig
from trainables.loop import Devices, run_trial


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainables.local")
    parser.add_argument("config", help="TrialConfig fields as a JSON object")
    parser.add_argument("--data-dir", help="folder with CIFAR-10; without it, synthetic data")
    parser.add_argument("--emulate", action="store_true", help="CPU devices even where GPUs exist")
    parser.add_argument("--checkpoint-dir", help="keep the latest epoch checkpoint here")
    parser.add_argument("--restore", help="continue from a checkpoint folder written by --checkpoint-dir")
    args = parser.parse_args(argv)
    values = json.loads(args.config)
    values.setdefault("lr", 0.1)
    cfg = TrialConfig.from_dict(values)
    # The same thread count a Ray trial of this config gets (Ray sets OMP_NUM_THREADS to its CPUs).
    os.environ.setdefault("OMP_NUM_THREADS", str(cfg.cpus))
    emulated = args.emulate or environment.real_gpu_count() < cfg.num_gpus
    devices = Devices.of([str(i) for i in range(cfg.num_gpus)], emulated)

    def report(metrics: dict[str, Any], checkpoint_dir: str | None) -> None:
        print(json.dumps(metrics), flush=True)
        if checkpoint_dir and args.checkpoint_dir:
            shutil.rmtree(args.checkpoint_dir, ignore_errors=True)
            shutil.copytree(checkpoint_dir, args.checkpoint_dir)

    run_trial(cfg, devices, args.data_dir, report, restore_dir=args.restore)
    return 0


if __name__ == "__main__":
    sys.exit(main())
