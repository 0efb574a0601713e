"""Run by tests/test_accuracy.py in a process of its own (one framework, one device count per process):
the loop's train_acc and val_acc beside a plain numpy count over exactly the same images.

  python tests/accuracy_probe.py '{"framework": ..., "num_gpus": ..., "batch_per_gpu": ...}' DATA_DIR VAL_EXAMPLES...

VAL_EXAMPLES: one check per value ("none": the whole test split). Prints one JSON line per check.
A PyTorch trial on n GPUs is n such processes, one per rank (RANK, WORLD_SIZE and torch's MASTER_ADDR
and MASTER_PORT in their environment, as sweep/workers.py sets them): each checks its own shard, and
rank 0 validates.
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np

from trainables import data
from trainables.config import TrialConfig
from trainables.loop import Devices, Shard, TrialLoop

STEPS = 6


def reference(backend, batches) -> tuple[int, int]:
    """(correct, images) of argmax(logits) == label, counted in numpy, one image at a time."""
    correct = images = 0
    for x, y in batches:
        predicted = np.argmax(backend.logits(x), axis=1)
        correct, images = correct + int(np.sum(predicted == y)), images + len(y)
    return correct, images


def main() -> None:
    base, data_dir, limits = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3:]
    base = {"model": "cifar10_conv", "epochs": 2, "steps_per_epoch": STEPS, "warmup_steps": 0,
            "momentum": 0.0, "weight_decay": 0.0, **base}
    shard = Shard(int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1")))
    gpus = 1 if shard.count > 1 else base["num_gpus"]  # a process per GPU, or one for all of them
    devices = Devices.of([str(shard.rank + i) for i in range(gpus)], emulated=True)
    # A first epoch that trains, so that the model predicts more than one class...
    loop = TrialLoop(TrialConfig.from_dict({**base, "lr": 0.05}), devices, data_dir, shard=shard)
    loop.run_epoch(0)
    for limit in limits:
        # ...then the checked epoch at lr 0 without momentum or decay: the weights every train step
        # scores with are the ones after it, and cifar10_conv (no batch norm, no dropout) scores the
        # same in training and inference, so the model's logits afterwards are the reference for both.
        cfg = TrialConfig.from_dict({**base, "lr": 0.0, "val_examples": None if limit == "none" else int(limit)})
        check = TrialLoop(cfg, devices, data_dir, backend=loop.backend, shard=shard)
        row = check.run_epoch(1)
        cifar, layout = check.cifar, loop.backend.layout
        train = reference(loop.backend, data.train_batches(cifar.train_x, cifar.train_y, cfg.global_batch,
                                                           check.steps, cfg.seed, 1, layout, shard.rank, shard.count))
        n = min(len(cifar.test_x), cfg.val_examples or len(cifar.test_x))
        val = reference(loop.backend, [(data.normalize(cifar.test_x[i:i + 1], layout), cifar.test_y[i:i + 1])
                                       for i in range(n if shard.rank == 0 else 0)])  # rank 0 validates
        print(json.dumps({"rank": shard.rank, "limit": limit, "train_acc": row["train_acc"], "val_acc": row["val_acc"],
                          "train_ref": train, "val_ref": val, "steps": check.steps}), flush=True)


if __name__ == "__main__":
    main()
